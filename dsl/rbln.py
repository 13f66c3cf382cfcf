"""RBLN libdevice intrinsics (`from torch_rbln.dsl import rbln as rblib`).

These are the names and call forms Rebellions' Triton exposes as
``rebel.triton.language.extra.rbln.libdevice``.  No public definition of them exists, so each
signature below is derived from the call sites in vllm-rbln's kernels
(``vllm_rbln/triton_kernels/{attention,causal_attention,flash_attention,flash_causal_attention,
sliding_window_attention}.py``) and each meaning from the torch reference implementations of the same
attention ops (the ``*_impl`` functions of ``vllm_rbln/v1/attention/backends/flash_attention.py``).
Each docstring is the contract and names the call sites it was derived from.

In-kernel intrinsics are usable only inside `@jit` kernels; `align_tensor_last_dim_to_64` and
`write_rtosa` are host functions on torch tensors.  Conventions: `axis` arguments are compile-time
integers (negative counts from the end); softmax intrinsics compute in fp32 and return the scores'
dtype, the flash tiles return fp32 (the kernels feed them fp32 scores); a mask keeps the positions
where it is ``> 0`` (the references build ``where(mask > 0, 0, -inf)``); a "causal offset" `off`
lets query row `i` (second-to-last axis) see key column `j` (last axis) when ``j <= off + i``: `off` is
the number of tokens already cached in the partition, and the queries are the tokens that follow them.
"""

from __future__ import annotations

from . import dtypes as D
from . import semantic as S
from .core import builtin
from .errors import DSLError

__all__ = [
    "masked_softmax",
    "dynamic_masked_softmax",
    "flash_attn_tile",
    "dynamic_flash_attn_tile",
    "flash_attn_recompute",
    "dynamic_load",
    "dynamic_store",
    "to_dynamic_index",
    "insert",
    "partition_skip",
    "nn_pad",
    "window_insert",
    "window_slice",
    "window_softmax",
    "align_tensor_last_dim_to_64",
    "write_rtosa",
]

_NEG_INF = float("-inf")


# ---------------------------------------------------------------------------------------------------
# helpers (trace time)
# ---------------------------------------------------------------------------------------------------
def _f32(x):
    return S.cast(S.to_tensor(x), D.float32)


def _i32(x, what):
    t = S.cast(S.to_tensor(x), D.int32)
    if t.shape != ():
        raise DSLError(f"{what} must be a scalar, got a block of shape {list(t.shape)}")
    return t


def _axis_iota(shape, axis):
    """int32 positions along `axis`, shaped to broadcast against `shape`."""
    pos = S.iota(shape[axis])
    return S.reshape(pos, tuple(shape[axis] if d == axis else 1 for d in range(len(shape))))


def _norm(axis, rank, what):
    ax = S._norm_axis(axis, rank, what)
    if ax is None:
        raise DSLError(f"{what}: axis must be an integer")
    return ax


def _block(x, what):
    x = S.to_tensor(x)
    if len(x.shape) < 2:
        raise DSLError(f"{what} needs a block of at least 2 dims [..., rows, columns], got {list(x.shape)}")
    return x


def _causal_keep(shape, offset, window=None):
    """int1 of `shape`: column j is visible from row i when ``j <= offset + i`` (and, with `window`,
    ``j > offset + i - window``)."""
    n = len(shape)
    rows = _axis_iota(shape, n - 2)
    cols = _axis_iota(shape, n - 1)
    last = rows + _i32(offset, "the causal offset")
    keep = S.compare("le", cols, last)
    if window is not None:
        keep = S.logical("and", keep, S.compare("gt", cols, last - int(S.unwrap(window))))
    return S.broadcast_to_shape(keep, shape)


def _mask_keep(x, mask):
    m = S.to_tensor(mask)
    keep = S.compare("gt", m, 0) if m.dtype is not D.int1 else m
    return S.broadcast_to_shape(keep, S.broadcast_shapes(x.shape, keep.shape))


def _softmax_where(x, keep, axis):
    """Softmax of `x` along `axis` over lanes where `keep` (int1) holds; other lanes are 0; rows with
    nothing kept are all 0 (fp32)."""
    xf = _f32(x)
    s = S.where(keep, xf, _NEG_INF)
    m = S.reduce("max", s, axis, True)
    m = S.where(S.compare("eq", m, _NEG_INF), 0.0, m)
    p = S.where(keep, S.unary("exp", xf - m), 0.0)
    den = S.reduce("sum", p, axis, True)
    return p / S.where(S.compare("eq", den, 0.0), 1.0, den)


def _tile(x, keep, row_max_prev):
    """The online-softmax step shared by the flash tiles: (row max, exp-normalised tile, row sum)."""
    xf = _f32(x)
    last = len(xf.shape) - 1
    s = S.where(keep, xf, _NEG_INF)
    m = S.reduce("max", s, last, True)
    if S.unwrap(row_max_prev) is not None:
        m = S.minmax("maximum", S.broadcast_to_shape(_f32(row_max_prev), m.shape), m)
    safe = S.where(S.compare("eq", m, _NEG_INF), 0.0, m)
    p = S.where(keep, S.unary("exp", xf - safe), 0.0)
    return m, p, S.reduce("sum", p, last, True)


# ---------------------------------------------------------------------------------------------------
# softmax family
# ---------------------------------------------------------------------------------------------------
@builtin
def masked_softmax(x, mask):
    """Softmax of `x` along its last axis over the positions where ``mask > 0``.

    `mask` broadcasts against `x`.  Masked positions get probability 0; a row with every position
    masked is all zeros: ``softmax(x + where(mask > 0, 0, -inf))`` in fp32, returned in `x.dtype`.
    Call sites: attention.py:attention_naive_prefill/decode
    (``rblib.masked_softmax(qk_scaled, attn_mask)``, scores (1,H,G,L,P), mask (1,1,1,L,P))."""
    x = S.to_tensor(x)
    if x.shape == ():
        raise DSLError("masked_softmax needs a block")
    keep = S.broadcast_to_shape(_mask_keep(x, mask), x.shape)
    return S.cast(_softmax_where(x, keep, len(x.shape) - 1), x.dtype)


@builtin
def dynamic_masked_softmax(x, offset):
    """Causal softmax of `x` [..., L, P] along its last axis: row i sees columns ``j <= offset + i``.

    `offset` is a runtime scalar (the number of tokens already in the cache block); returned in
    `x.dtype`.
    Call sites: causal_attention.py:causal_attention_naive_prefill/decode
    (``rblib.dynamic_masked_softmax(qk_scaled, block_offset)``); reference: the causal mask of
    flash_causal_attention_naive_prefill_impl (query positions ``s + i`` see keys ``<= s + i``)."""
    x = _block(x, "dynamic_masked_softmax")
    return S.cast(_softmax_where(x, _causal_keep(x.shape, offset), len(x.shape) - 1), x.dtype)


@builtin
def window_softmax(x, start, window_size):
    """Sliding-window causal softmax of `x` [..., L, W + L (+ padding)] along its last axis.

    Row i is the query at position ``start + i`` of the concatenated [cache, new tokens] axis; it sees
    columns j with ``start + i - window_size < j <= start + i``.  Returned in `x.dtype`.
    Call sites: sliding_window_attention.py:sliding_window_attention_naive_prefill/decode
    (``rblib.window_softmax(qk_scaled, cache_start, window_size=WINDOW_SIZE)``); reference: the mask
    ``tril(ones) - tril(ones, -window_size)`` rows ``[cache_start, cache_start + L)`` of
    sliding_window_attention_naive_prefill_impl."""
    x = _block(x, "window_softmax")
    ws = S.unwrap(window_size)
    if not isinstance(ws, int) or ws <= 0:
        raise DSLError(f"window_softmax: window_size must be a positive compile-time int, got {ws!r}")
    return S.cast(_softmax_where(x, _causal_keep(x.shape, start, ws), len(x.shape) - 1), x.dtype)


# ---------------------------------------------------------------------------------------------------
# flash attention
# ---------------------------------------------------------------------------------------------------
@builtin
def flash_attn_tile(x, mask, row_max_prev=None):
    """One online-softmax step over a score tile `x` [..., L, P] with `mask` (kept where ``> 0``).

    Returns ``(row_max, p, row_sum)``: ``row_max = max(row_max_prev, rowmax(x over kept))`` [..., L, 1]
    (without `row_max_prev`: the tile's own row max), ``p = exp(x - row_max)`` on kept positions and 0
    elsewhere [..., L, P], ``row_sum = rowsum(p)`` [..., L, 1]; all fp32.  A row with nothing kept so
    far has row_max -inf and p = 0.  The caller multiplies `p` by V and merges with the running
    statistics through `flash_attn_recompute`.
    Call sites: flash_attention.py:flash_attention_naive_prefill/decode
    (``rblib.flash_attn_tile(qk_scaled, attn_mask, row_max_i)`` and ``(qk_scaled, attn_mask)``)."""
    x = _block(x, "flash_attn_tile")
    return _tile(x, S.broadcast_to_shape(_mask_keep(x, mask), x.shape), row_max_prev)


@builtin
def dynamic_flash_attn_tile(x, offset, row_max_prev=None):
    """`flash_attn_tile` with the causal mask of `dynamic_masked_softmax` (row i sees ``j <= offset +
    i``, `offset` a runtime scalar) instead of a mask tensor.  Returns ``(row_max, p, row_sum)``.
    Call sites: flash_causal_attention.py:flash_causal_attention_naive_prefill/decode
    (``rblib.dynamic_flash_attn_tile(qk_scaled, block_offset, row_max_prev)`` and
    ``(qk_scaled, block_offset)``)."""
    x = _block(x, "dynamic_flash_attn_tile")
    return _tile(x, _causal_keep(x.shape, offset), row_max_prev)


@builtin
def flash_attn_recompute(row_max_prev, row_max_new, row_sum_prev, row_sum_cur, out_prev, out_cur):
    """Merge the running flash-attention state with a new tile's.

    With ``alpha = exp(row_max_prev - row_max_new)`` (0 where `row_max_prev` is -inf) returns
    ``(row_sum_prev * alpha + row_sum_cur, out_prev * alpha + out_cur)`` (fp32), where the tile's
    `row_sum_cur` and `out_cur = p @ V` are already relative to `row_max_new` (as `flash_attn_tile`
    returns them).  Row statistics are [..., L, 1] and broadcast against the outputs [..., L, D].
    Call sites: flash_attention.py and flash_causal_attention.py, prefill and decode
    (``rblib.flash_attn_recompute(row_max_i, row_max_global, row_sum_i, row_sum_cur, attn_out_i,
    attn_out_cur)``)."""
    m_prev, m_new = _f32(row_max_prev), _f32(row_max_new)
    safe_new = S.where(S.compare("eq", m_new, _NEG_INF), 0.0, m_new)
    alpha = S.where(S.compare("eq", m_prev, _NEG_INF), 0.0, S.unary("exp", m_prev - safe_new))
    row_sum = _f32(row_sum_prev) * alpha + _f32(row_sum_cur)
    out_prev = _f32(out_prev)
    if len(alpha.shape) == len(out_prev.shape) - 1:
        alpha = S.expand_dims(alpha, -1)
    return row_sum, out_prev * alpha + _f32(out_cur)


# ---------------------------------------------------------------------------------------------------
# dynamic (runtime-indexed) memory access
# ---------------------------------------------------------------------------------------------------
@builtin
def to_dynamic_index(value, bound=None):
    """A runtime int32 scalar index read from `value`.

    `value` is a block pointer whose block has exactly one element (it is loaded), a scalar, or a
    one-element block.  With `bound` (a compile-time int, the extent the index addresses), values above
    `bound` are clamped to it; negative values are kept, since a negative cached-token count is what
    marks a partition with nothing to do (`partition_skip`).
    Call sites: every kernel (``rblib.to_dynamic_index(block_table_ptr)``,
    ``rblib.to_dynamic_index(seq_idx_ptr)``: (1,) and (1, 1) block pointers into int16 tensors);
    flash_causal_attention.py (``rblib.to_dynamic_index(seq_idx_ptr, PARTITION_SIZE)``: the per-partition
    cached-token count, which vllm-rbln clamps to ``[0, PARTITION_SIZE]``)."""
    v = S.unwrap(value)
    if isinstance(v, S.tensor) and v.is_block_ptr():
        block_shape = v.type.block_shape
        if any(s != 1 for s in block_shape):
            raise DSLError(
                f"to_dynamic_index needs a block pointer to one element, got block shape {list(block_shape)}"
            )
        v = S.block_load(v, (), "zero")
    v = S.to_tensor(v)
    if v.shape != ():
        if v.numel != 1:
            raise DSLError(f"to_dynamic_index needs a single value, got a block of shape {list(v.shape)}")
        v = S.reshape(v, ())
    index = S.cast(v, D.int32)
    bound = S.unwrap(bound)
    if bound is not None:
        if not isinstance(bound, int) or isinstance(bound, bool) or bound < 0:
            raise DSLError(f"to_dynamic_index: bound must be a non-negative compile-time int, got {bound!r}")
        index = S.minmax("minimum", index, bound)
    return index


def _check_block_ptr(ptr, what):
    p = S.unwrap(ptr)
    if not (isinstance(p, S.tensor) and p.is_block_ptr()):
        raise DSLError(f"{what} expects a block pointer (from tl.make_block_ptr)")
    return p


def _valid_length(shape, axis, size, what):
    """int1 of `shape`: positions along `axis` below the runtime `size`."""
    ax = _norm(axis, len(shape), what)
    return S.broadcast_to_shape(S.compare("lt", _axis_iota(shape, ax), _i32(size, f"{what} size")), shape)


@builtin
def dynamic_load(block_ptr, axis=None, size=None):
    """Load the block of `block_ptr`; with `axis` and a runtime `size`, only the first `size`
    positions along `axis` are valid data and the others read 0.

    The whole block must lie inside the tensor (an access outside the allocation is a runtime error).
    Call sites: sliding_window_attention.py (``rblib.dynamic_load(k_cache_base_ptr)``, the whole cache
    window); attention.py, causal_attention.py, flash_attention.py, flash_causal_attention.py
    (``rblib.dynamic_load(k_cache_ptr, DYNAMIC_AXIS, block_offset)``: the cache block of which
    `block_offset` tokens are filled, read before the new tokens are inserted at `block_offset`)."""
    bp = _check_block_ptr(block_ptr, "dynamic_load")
    out = S.block_load(bp, (), "zero")
    if (S.unwrap(axis) is None) != (S.unwrap(size) is None):
        raise DSLError("dynamic_load takes both axis and size, or neither")
    if S.unwrap(size) is None:
        return out
    keep = _valid_length(out.shape, S.unwrap(axis), size, "dynamic_load")
    return S.where(keep, out, S.constant(0, out.dtype))


@builtin
def dynamic_store(block_ptr, value, axis=None, size=None):
    """Store `value` to the block of `block_ptr`; with `axis` and a runtime `size`, only the first
    `size` positions along `axis` are written (a `size` beyond the block writes the whole block).

    Call sites: sliding_window_attention.py (``rblib.dynamic_store(k_cache_base_ptr, k_slice)``);
    attention.py, causal_attention.py, flash_attention.py, flash_causal_attention.py
    (``rblib.dynamic_store(k_cache_ptr, k_insert, DYNAMIC_AXIS, block_offset + QUERY_LEN)``: the cache
    block now holds `block_offset + QUERY_LEN` tokens)."""
    bp = _check_block_ptr(block_ptr, "dynamic_store")
    if (S.unwrap(axis) is None) != (S.unwrap(size) is None):
        raise DSLError("dynamic_store takes both axis and size, or neither")
    if S.unwrap(size) is None:
        return S.block_store(bp, value, ())
    # read-modify-write keeps the positions at and beyond `size` unchanged
    old = S.block_load(bp, (), "zero")
    keep = _valid_length(old.shape, S.unwrap(axis), size, "dynamic_store")
    new = S.where(keep, S.broadcast_to_shape(S.cast(S.to_tensor(value), old.dtype), old.shape), old)
    return S.block_store(bp, new, ())


@builtin
def insert(x, value, axis, index):
    """`x` with positions ``[index, index + k)`` along `axis` replaced by `value` (k = its size along
    `axis`); positions of the window that fall outside `x` are dropped, so an `index` at or beyond
    ``x.shape[axis]`` leaves `x` unchanged.  `value` has the rank of `x` and broadcasts on the other
    dims; `index` is a runtime scalar.
    Call sites: attention.py, causal_attention.py, flash_attention.py, flash_causal_attention.py
    (``rblib.insert(k_base, k_state, DYNAMIC_AXIS, block_offset)``: the new tokens written after the
    `block_offset` cached ones, as ``slice_scatter(k, dim=3, start=s, end=s + L)`` in the references;
    a full partition, ``block_offset == PARTITION_SIZE``, receives nothing)."""
    x = S.to_tensor(x)
    ax = _norm(axis, len(x.shape), "insert")
    v = S.to_tensor(value)
    if len(v.shape) != len(x.shape):
        raise DSLError(f"insert: value rank {len(v.shape)} differs from the block's rank {len(x.shape)}")
    k, n = v.shape[ax], x.shape[ax]
    v = S.broadcast_to_shape(S.cast(v, x.dtype), x.shape[:ax] + (k,) + x.shape[ax + 1 :])
    # pad by k on both sides so that any clamped start keeps the window inside, then cut x back out
    pads = [(0, 0)] * len(x.shape)
    pads[ax] = (k, k)
    wide = S.pad(x, pads, 0)
    start = S.minmax("minimum", S.minmax("maximum", _i32(index, "insert index"), -k), n) + k
    return S.dyn_slice(S.dyn_update(wide, v, start, ax), k, n, ax)


@builtin
def partition_skip(offset):
    """int1: whether the partition whose cached-token count is `offset` may be skipped.

    Used as ``if rblib.partition_skip(block_offset) == False:`` around the whole body of a partition
    (flash_attention.py and flash_causal_attention.py, prefill and decode).  The one argument cannot
    tell an empty trailing partition (count 0, nothing to do) from the partition that receives the new
    tokens (count 0 as well at a partition boundary, including the very first prefill), so skipping on
    0 would drop the new tokens.  Here a partition is skipped when its count is negative: with counts
    ``min(seq - p * P, P)`` exactly the partitions after the one receiving the new tokens are skipped.
    vllm-rbln clamps its counts to ``[0, P]``, so with its tables every partition runs: exact whenever
    no empty partition follows the one receiving the new tokens, while such a trailing partition would
    take the new tokens too (see tests/dsl/external/test_vllm_rbln_kernels.py)."""
    off = S.unwrap(offset)
    if not isinstance(off, S.tensor):
        return off < 0
    return S.compare("lt", _i32(off, "partition_skip offset"), 0)


# ---------------------------------------------------------------------------------------------------
# windows and padding
# ---------------------------------------------------------------------------------------------------
@builtin
def nn_pad(x, value, axis, pad, mode="constant"):
    """`x` padded along `axis` by ``pad = (before, after)`` positions of the constant `value` (as
    ``torch.nn.functional.pad(..., mode="constant")`` on that one axis).
    Call sites: sliding_window_attention.py:sliding_window_attention_naive_decode
    (``rblib.nn_pad(k_insert, 0.0, WINDOW_AXIS, (0, PAD_SIZE), "constant")``)."""
    x = S.to_tensor(x)
    if S.unwrap(mode) != "constant":
        raise DSLError(f"nn_pad: only mode='constant' is supported, got {S.unwrap(mode)!r}")
    ax = _norm(S.unwrap(axis), len(x.shape), "nn_pad")
    pair = [int(S.unwrap(p)) for p in S.unwrap(pad)]
    if len(pair) != 2 or min(pair) < 0:
        raise DSLError(f"nn_pad: pad must be one non-negative (before, after) pair, got {pair}")
    pads = [(0, 0)] * len(x.shape)
    pads[ax] = (pair[0], pair[1])
    return S.pad(x, pads, S.unwrap(value))


@builtin
def window_insert(base, x, axis, start):
    """The concatenation ``[base[:start], x, 0 ...]`` along `axis`: the result has
    ``base.shape[axis] + x.shape[axis]`` positions, the first `start` from `base` (a runtime scalar in
    ``[0, base.shape[axis]]``), then `x`, then zeros.
    Call sites: sliding_window_attention.py, prefill and decode
    (``rblib.window_insert(k_base, k_state, WINDOW_AXIS, cache_start)``); reference:
    ``pad(cat([k_cache[..., :cache_start, :], k]), window_size + seq_len)`` in
    sliding_window_attention_naive_prefill_impl."""
    base, x = S.to_tensor(base), S.to_tensor(x)
    ax = _norm(axis, len(base.shape), "window_insert")
    if len(x.shape) != len(base.shape):
        raise DSLError(f"window_insert: rank {len(x.shape)} differs from the base's rank {len(base.shape)}")
    st = _i32(start, "window_insert start")
    kept = S.where(S.broadcast_to_shape(S.compare("lt", _axis_iota(base.shape, ax), st), base.shape),
                   base, S.constant(0, base.dtype))
    pads = [(0, 0)] * len(base.shape)
    pads[ax] = (0, x.shape[ax])
    return S.dyn_update(S.pad(kept, pads, 0), x, st, ax)


@builtin
def window_slice(x, end, axis, size):
    """The `size` positions of `x` along `axis` that end at the runtime position `end`:
    ``x[max(0, end - size):end]`` padded with zeros at the back to `size` positions.
    Call sites: sliding_window_attention.py, prefill and decode
    (``rblib.window_slice(k_insert, cache_end, WINDOW_AXIS, WINDOW_SIZE)``, `cache_end` being
    ``cache_seq_len + query_len``); reference: ``pad(k_cache_curr[..., max(0, cache_end -
    window_size):cache_end, :], window_size)`` in sliding_window_attention_naive_prefill_impl."""
    x = S.to_tensor(x)
    ax = _norm(axis, len(x.shape), "window_slice")
    size = int(S.unwrap(size))
    e = _i32(end, "window_slice end")
    lo = S.minmax("maximum", e - size, 0)
    out = S.dyn_slice(x, lo, size, ax)
    keep = S.broadcast_to_shape(S.compare("lt", _axis_iota(out.shape, ax) + lo, e), out.shape)
    return S.where(keep, out, S.constant(0, out.dtype))


# ---------------------------------------------------------------------------------------------------
# host side
# ---------------------------------------------------------------------------------------------------
def align_tensor_last_dim_to_64(t):
    """Host: `t` with its last dim zero-padded to a multiple of 64 (`t` itself when it already is).
    Call sites: every host wrapper (``query = rblib.align_tensor_last_dim_to_64(query)``, also key and
    value; the kernels take HEAD_DIM from the aligned query)."""
    import torch.nn.functional as F

    extra = -t.shape[-1] % 64
    return t if extra == 0 else F.pad(t, (0, extra))


def write_rtosa(kernel, args):
    """Host: hand the kernel compiled by ``kernel = fn.warmup(*args, grid=..., host_layout=...)`` and
    its arguments to the device runtime.

    On Rebellions' stack this writes the artifact that the NPU runtime executes in the compiled graph.
    The simulated device has no separate runtime, so this is where the kernel runs: it is launched on
    `args` on the grid given to `warmup` (see `torch_rbln.dsl.jit.HostLaunch`), and the results are in
    the output tensors when it returns.
    Call sites: every host wrapper's ``warmup(func, *args)``."""
    from .jit import HostLaunch

    if not isinstance(kernel, HostLaunch):
        raise TypeError(
            "write_rtosa expects the kernel returned by JITFunction.warmup(..., host_layout=...), "
            f"got {type(kernel).__name__}"
        )
    kernel.launch(args)
