"""RBLN libdevice intrinsics (`from torch_rbln.dsl import rbln as rblib`).

Rebellions' Triton exposes these under the names below.  No public implementation exists, so each
docstring is the reference definition of what the intrinsic computes here.  They are usable only
inside `@jit` kernels.  Conventions: `axis` arguments are compile-time integers (negative counts from
the end); softmax-like intrinsics compute in fp32 and return the input's dtype; "window" means the
contiguous range ``[start, start + size)`` along an axis, where `start` may be a runtime scalar.
"""

from __future__ import annotations

from . import dtypes as D
from . import semantic as S
from .core import builtin
from .errors import DSLError

__all__ = [
    "masked_softmax",
    "flash_attn_tile",
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
]

_NEG_INF = float("-inf")


def _f32(x):
    return S.cast(S.to_tensor(x), D.float32)


def _axis_iota(shape, axis):
    """int32 positions along `axis`, shaped to broadcast against `shape`."""
    n = len(shape)
    pos = S.iota(shape[axis])
    return S.reshape(pos, tuple(shape[axis] if d == axis else 1 for d in range(n)))


def _norm(axis, rank, what):
    ax = S._norm_axis(axis, rank, what)
    if ax is None:
        raise DSLError(f"{what}: axis must be an integer")
    return ax


def _softmax_where(x, keep, axis):
    """Softmax of `x` along `axis` over lanes where `keep` (int1) holds; other lanes are 0; all-masked
    rows are all 0."""
    xf = _f32(x)
    s = S.where(keep, xf, _NEG_INF)
    m = S.reduce("max", s, axis, True)
    m = S.where(S.compare("eq", m, _NEG_INF), 0.0, m)
    p = S.where(keep, S.unary("exp", xf - m), 0.0)
    den = S.reduce("sum", p, axis, True)
    return p / S.where(S.compare("eq", den, 0.0), 1.0, den)


@builtin
def masked_softmax(x, mask):
    """Softmax of `x` along its last axis over the positions where `mask` is nonzero.

    `mask` broadcasts against `x`.  Masked positions get probability 0; a row whose positions are all
    masked is all zeros.  Computed in fp32 and returned in `x.dtype`:
    ``p = exp(x - max_masked(x)) * mask; p / sum(p)``."""
    x = S.to_tensor(x)
    if x.shape == ():
        raise DSLError("masked_softmax needs a block")
    keep = S.broadcast_to_shape(
        S.to_int1(S.to_tensor(mask)), S.broadcast_shapes(x.shape, S.to_tensor(mask).shape)
    )
    keep = S.broadcast_to_shape(keep, x.shape)
    return S.cast(_softmax_where(x, keep, len(x.shape) - 1), x.dtype)


def _transpose_last(k):
    n = len(k.shape)
    return S.permute(k, tuple(range(n - 2)) + (n - 1, n - 2))


@builtin
def flash_attn_recompute(m_prev, m_new, l_prev, acc_prev):
    """Rescale running flash-attention statistics to a new row maximum.

    With ``alpha = exp(m_prev - m_new)`` (0 where `m_prev` is -inf), returns
    ``(l_prev * alpha, acc_prev * alpha)``.  `m_*` and `l_prev` have shape [..., M] or [..., M, 1];
    `acc_prev` is [..., M, Dv].  All in fp32."""
    m_prev, m_new, l_prev, acc = (_f32(t) for t in (m_prev, m_new, l_prev, acc_prev))
    safe_new = S.where(S.compare("eq", m_new, _NEG_INF), 0.0, m_new)
    alpha = S.unary("exp", m_prev - safe_new)
    l_out = l_prev * alpha
    col = alpha if len(alpha.shape) == len(acc.shape) else S.expand_dims(alpha, -1)
    return l_out, acc * col


@builtin
def flash_attn_tile(q, k, v, m_prev, l_prev, acc_prev, scale, mask=None):
    """One online-softmax step of flash attention over a K/V tile.

    Shapes: `q` [..., M, D], `k` [..., N, D], `v` [..., N, Dv]; running row maximum `m_prev` and row
    sum `l_prev` are fp32 [..., M] or [..., M, 1]; `acc_prev` is fp32 [..., M, Dv].  Computes
    ``s = (q @ k^T) * scale`` (fp32 accumulation), sets `s` to -inf where `mask` (broadcast to
    [..., M, N]) is zero, then ``m_new = max(m_prev, rowmax(s))``, ``p = exp(s - m_new)``,
    ``(l, acc) = flash_attn_recompute(m_prev, m_new, l_prev, acc_prev)``,
    ``l_new = l + rowsum(p)``, ``acc_new = acc + p.to(v.dtype) @ v``.  Returns
    ``(m_new, l_new, acc_new)`` with the shapes of the inputs.  Rows with nothing unmasked so far keep
    m = -inf, l = 0, acc = 0.  The final output is ``acc / l``."""
    q, k, v = S.to_tensor(q), S.to_tensor(k), S.to_tensor(v)
    s = S.dot(q, _transpose_last(k)) * _f32(scale)
    if S.unwrap(mask) is not None:
        keep = S.broadcast_to_shape(S.to_int1(S.to_tensor(mask)), s.shape)
        s = S.where(keep, s, _NEG_INF)
    m_prev_t = _f32(m_prev)
    keep_dims = len(m_prev_t.shape) == len(s.shape)
    row_max = S.reduce("max", s, -1, keep_dims)
    m_new = S.minmax("maximum", m_prev_t, row_max)
    m_col = m_new if keep_dims else S.expand_dims(m_new, -1)
    safe = S.where(S.compare("eq", m_col, _NEG_INF), 0.0, m_col)
    p = S.unary("exp", s - safe)
    l_scaled, acc = flash_attn_recompute(m_prev_t, m_new, l_prev, acc_prev)
    l_new = l_scaled + S.reduce("sum", p, -1, keep_dims)
    pv = S.cast(p, v.dtype) if v.dtype in (D.float16, D.bfloat16) else p
    acc_new = S.dot(pv, v, acc=acc)
    return m_new, l_new, acc_new


@builtin
def to_dynamic_index(value):
    """A runtime int32 index from `value`: a scalar, or a block with exactly one element (e.g. a
    sequence position loaded from memory).  Floats are truncated toward zero."""
    v = S.to_tensor(value)
    if v.shape != ():
        if v.numel != 1:
            raise DSLError(f"to_dynamic_index needs a single value, got a block of shape {list(v.shape)}")
        v = S.reshape(v, ())
    return S.cast(v, D.int32)


def _advance_axis(bptr, axis, index):
    n = len(bptr.type.block_shape)
    ax = _norm(axis, n, "dynamic load/store")
    offs = [0] * n
    offs[ax] = index
    return S.advance(bptr, offs), ax


@builtin
def dynamic_load(block_ptr, axis, index, size=None, padding_option="zero"):
    """Load the block of `block_ptr` moved by the runtime `index` along `axis`.

    Every dim is checked against the block pointer's shape (out-of-bounds lanes read the padding).
    With `size`, only the first `size` positions along `axis` are read; the rest read the padding
    ('zero' or 'nan')."""
    bp, ax = _advance_axis(block_ptr, axis, index)
    n = len(bp.type.block_shape)
    out = S.block_load(bp, tuple(range(n)), padding_option)
    if S.unwrap(size) is not None:
        keep = S.compare("lt", _axis_iota(out.shape, ax), S.to_tensor(S.unwrap(size)))
        fill = float("nan") if S.unwrap(padding_option) == "nan" else 0
        out = S.where(S.broadcast_to_shape(keep, out.shape), out, fill)
    return out


@builtin
def dynamic_store(block_ptr, value, axis, index, size=None):
    """Store `value` to the block of `block_ptr` moved by the runtime `index` along `axis`; lanes outside
    the block pointer's shape, and with `size` the positions ``>= size`` along `axis`, are not written."""
    bp, ax = _advance_axis(block_ptr, axis, index)
    n = len(bp.type.block_shape)
    if S.unwrap(size) is None:
        return S.block_store(bp, value, tuple(range(n)))
    # masked store: read-modify-write of the in-bounds part keeps the unselected lanes unchanged
    old = S.block_load(bp, tuple(range(n)), "zero")
    keep = S.compare("lt", _axis_iota(old.shape, ax), S.to_tensor(S.unwrap(size)))
    new = S.where(S.broadcast_to_shape(keep, old.shape), S.cast(S.to_tensor(value), old.dtype), old)
    return S.block_store(bp, new, tuple(range(n)))


@builtin
def insert(x, value, index, axis=-1):
    """`x` with position `index` (runtime) along `axis` replaced by `value`.

    `value` has size 1 along `axis`, or lacks that axis (it is then expanded), and broadcasts against
    the other dims.  `index` outside ``[0, x.shape[axis])`` leaves `x` unchanged."""
    x = S.to_tensor(x)
    ax = _norm(axis, len(x.shape), "insert")
    v = S.to_tensor(value)
    if len(v.shape) == len(x.shape) - 1:
        v = S.expand_dims(v, ax)
    elif len(v.shape) == len(x.shape) and v.shape[ax] != 1:
        raise DSLError(f"insert: value must have size 1 along axis {ax}, got shape {list(v.shape)}")
    hit = S.compare("eq", _axis_iota(x.shape, ax), S.cast(S.to_tensor(index), D.int32))
    return S.where(S.broadcast_to_shape(hit, x.shape), S.broadcast_to_shape(S.cast(v, x.dtype), x.shape), x)


@builtin
def partition_skip(partition_idx, partition_size, seq_len):
    """int1: True when partition `partition_idx` of `partition_size` positions starts at or beyond
    `seq_len`, i.e. ``partition_idx * partition_size >= seq_len`` (the whole partition is padding and
    can be skipped with ``if not rblib.partition_skip(...)``)."""
    a, b, c = (S.unwrap(t) for t in (partition_idx, partition_size, seq_len))
    if not any(isinstance(t, S.tensor) for t in (a, b, c)):
        return a * b >= c
    return S.compare("ge", S.binary("mul", a, b), c)


@builtin
def nn_pad(x, pad, value=0.0):
    """Constant padding as `torch.nn.functional.pad(x, pad, value=value)`: `pad` is a compile-time tuple
    ``(last_lo, last_hi, second_last_lo, second_last_hi, ...)``; the result shape grows accordingly."""
    x = S.to_tensor(x)
    pad = [int(S.unwrap(p)) for p in S.unwrap(pad)]
    if len(pad) % 2 or len(pad) // 2 > len(x.shape):
        raise DSLError(f"nn_pad: pad must have an even length <= 2 * rank, got {pad}")
    pairs = [(0, 0)] * len(x.shape)
    for i in range(len(pad) // 2):
        pairs[len(x.shape) - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return S.pad(x, pairs, S.unwrap(value))


@builtin
def window_slice(x, start, size, axis=-1):
    """The window ``x[..., start:start + size, ...]`` along `axis`; `start` may be a runtime scalar,
    `size` is a compile-time int.  A window outside the block is a runtime error."""
    return S.dyn_slice(x, start, size, axis)


@builtin
def window_insert(x, window, start, axis=-1):
    """`x` with ``x[..., start:start + k, ...] = window`` along `axis` (k = window's size there); the
    inverse of `window_slice`.  A window outside the block is a runtime error."""
    return S.dyn_update(x, window, start, axis)


@builtin
def window_softmax(x, start, size, axis=-1):
    """Softmax of `x` along `axis` restricted to the window ``[start, start + size)`` (runtime `start`
    and `size` allowed); positions outside the window get 0 (an empty window gives all zeros)."""
    x = S.to_tensor(x)
    ax = _norm(axis, len(x.shape), "window_softmax")
    pos = _axis_iota(x.shape, ax)
    st = S.cast(S.to_tensor(start), D.int32)
    keep = S.logical("and", S.compare("ge", pos, st), S.compare("lt", pos, st + size))
    keep = S.broadcast_to_shape(keep, x.shape)
    return S.cast(_softmax_where(x, keep, ax), x.dtype)
