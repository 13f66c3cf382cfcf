"""Flash-style scaled dot-product attention: forward and backward kernels.

Layout: q (B, H, M, D), k and v (B, H // group, N, D), all addressed through strides, so the
(B, L, H, D) -> (B, H, L, D) transposes models make need no copy; `group` query heads share one
key/value head (grouped-query attention; 1 = ordinary multi-head attention).

Masking: `causal` (nonzero) keeps key j for query i when j <= i (the top-left aligned lower triangle,
as `torch.nn.functional.scaled_dot_product_attention`); with `HAS_MASK`, `mask_ptr` is read through
its own strides (0 on broadcast dimensions, so a (L, S) or (B, 1, 1, S) mask is never expanded in
memory) as a boolean keep-mask (`BOOL_MASK`) or as an additive float bias. `group` and `causal` are
runtime scalars; `HAS_MASK` is a constexpr, so the common mask-less launch compiles no mask read (the
mask's lane-by-lane load, bounds check and add were a sixth of a forward kernel's numba compile): the
compiled specialisations are dtype x HAS_MASK x BOOL_MASK x tiles.

Forward (one program per BLOCK_M query rows of one head): online softmax over BLOCK_N key tiles with
the running row maximum `m` and row sum `l` in float32 and `acc = sum(p @ v)` in float32; the output
is `acc / l`, and `lse = m + log(l)` (natural log, float32) is saved for the backward. Rows that see
no key at all (every key masked) give 0 and lse = -inf, like PyTorch's safe softmax.

Backward (FlashAttention-2): `attention_backward_dq_kernel` computes `delta = rowsum(dO * O)` for
its rows (saved for the second kernel) and `dQ = scale * dS k` with `P = exp(S - lse)`,
`dP = dO v^T`, `dS = P * (dP - delta)`. `attention_backward_dkdv_kernel` (one program per BLOCK_N
keys of one key/value head, looping over the `group` query heads that share it, so no atomics are
needed) accumulates `dV = P^T dO` and `dK = dS^T (scale q)`. Both recompute P from the saved lse
instead of storing the (L, S) probabilities. A problem that fits one tile (a product tile, or
sequences of at most 16: `one_launch_backward`) takes `attention_backward_tiny_kernel` instead: the
same formulas in one launch (one program per key/value head, P computed once per query head).

Tiles: one per launch (`_prune_tiles`), chosen from the sequence lengths: `tl.dot` tiles of 16 and
more; a tiny problem (sequences and head dim <= PRODUCT_BLOCK) takes a 4x4 or 8x8 product tile instead
(`_mm`, `block_d`), in the forward and both backward kernels alike.
"""

from __future__ import annotations

import torch_rbln.dsl as tl
from torch_rbln.autotune import Config, autotune

# (BLOCK_M, BLOCK_N) `tl.dot` tiles; `_prune_tiles` gives each launch the largest one its sequence
# lengths fill, alone (one compile per specialisation: see there why the autotuner gets no choice).
# The last, `ONE_KEY_BLOCK`, only where it holds every key of a head (see `_prune_tiles`).
ONE_KEY_BLOCK = (128, 128)
TILES = ((16, 16), (32, 32), (64, 64), (128, 64), ONE_KEY_BLOCK)
_TINY = 16  # sequences up to this long (both) take the 16x16 tile alone; longer ones never take it
# Square tiles of the elementwise-product path: a launch whose BLOCK_D fits PRODUCT_BLOCK (`block_d`)
# and whose sequences and head dim all fit it takes the smallest of them that covers it, alone. Their
# matmuls (`_mm`) are `tl.sum`s of broadcast products instead of `tl.dot`: on the numba backend a `tl.dot`
# tile is a BLAS call plus the staging of both operands (a 16x16x16 dot for a 2x2x2 problem), and Triton
# front ends (the rebel backend) want `tl.dot` operand sides of at least 16, which these tiles do not
# have. `block_d` gives the forward and the backward kernels of one problem the same BLOCK_D, so they take
# the same kind of tile: the backward recomputes P = exp(S - lse) from the forward's logsumexp, and S
# rounded one way there and another in the forward would shift the gradients.
PRODUCT_TILES = (4, 8)
PRODUCT_BLOCK = PRODUCT_TILES[-1]
_MIN_BLOCK_D = 16  # the head-dim block of `tl.dot` tiles (its smallest operand side on Triton)


def block_d(head_dim: int, q_len: int, kv_len: int) -> int:
    """BLOCK_D of a launch (forward or backward, the same for both): a problem whose sequences and head
    dim all fit a product tile gets a BLOCK_D that need only cover the head dim (at least the smallest
    tile side), which lets `_prune_tiles` choose that tile; any other gets the power of two covering the
    head dim, at least 16 for the `tl.dot` tiles."""
    covering = 1 << (head_dim - 1).bit_length()
    if _fits_product(q_len, kv_len, head_dim):
        return max(PRODUCT_TILES[0], covering)
    return max(_MIN_BLOCK_D, covering)


def one_launch_backward(q_len: int, kv_len: int, block_d_: int) -> bool:
    """Whether the backward of a problem is one launch of `attention_backward_tiny_kernel`: every query
    and key of a head fits one tile, a product tile (`block_d_` <= PRODUCT_BLOCK, see `block_d`) or the
    16x16 `tl.dot` tile that `_prune_tiles` gives sequences of at most `_TINY`. Why the `tl.dot` case: the
    dQ and dK/dV kernels are the two largest numba compiles of a short-sequence model (the README demo's
    16 tokens: ~7 and ~9 s of CPU, cold), the tiny kernel is one compile in their place, and at run time
    one launch (P computed once per query head, no delta buffer) instead of two."""
    return block_d_ <= PRODUCT_BLOCK or max(q_len, kv_len) <= _TINY


def _fits_product(q_len: int, kv_len: int, head_dim: int) -> bool:
    return max(q_len, kv_len, head_dim) <= PRODUCT_BLOCK


def _tile(config: Config) -> tuple[int, int]:
    return config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]


def _is_product(config: Config) -> bool:
    return max(config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]) <= PRODUCT_BLOCK


def _prune_tiles(configs: list[Config], nargs: dict, **kwargs: object) -> list[Config]:
    """The one tile of a launch. A launch with a product-sized BLOCK_D (`block_d`) whose sequences and
    head dim fit a product tile takes the smallest product tile covering both sequences. Otherwise
    sequences of at most 16 take the 16x16 `tl.dot` tile (a 32x32 one would be three quarters
    padding), and longer ones the largest tile of at least 32x32 that both sequence lengths fill
    (32x32 when they fill none).

    Why one: every tile is a numba compile of ~3 s of CPU (the forward; each backward kernel about as
    much), and the autotuner compiled and timed up to five per specialisation (13 s before a first
    128-token attention call ran) to pick tiles that measured within 1-5% of each other. Forced alone
    (numba backend, 1 thread, best of 7; forward, and backward separately), the largest filled tile was
    the fastest or within 3% of it for sequences 96-1024, head dims 64 and 128, causal or not, 8 to 24
    heads; the 32x32 tile cost up to 1.5x at 96 tokens and a 128x128 tile 1.28x on a causal 1024-token
    forward (its diagonal blocks compute masked scores). That tile (`ONE_KEY_BLOCK`) is kept only for
    key sequences of 65-128 with at least 128 queries, where it holds every key of a head (as many
    lanes as two 64-key blocks, padding included): one block,
    no online-softmax rescaling, two gemms of a whole head instead of four halves. Llama's 128-token
    attention (8 heads of 64, 1 thread): forward 480-516 -> 410-437 us, forward + backward 1.94 ->
    1.73 ms (torch's SDPA 0.30 and 1.00)."""
    M, N = nargs["M"], nargs["N"]
    products = sorted((c for c in configs if _is_product(c)), key=lambda c: c.kwargs["BLOCK_M"])
    if nargs.get("BLOCK_D", _MIN_BLOCK_D) <= PRODUCT_BLOCK and _fits_product(M, N, nargs["D"]):
        for config in products:
            if max(M, N) <= min(config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]):
                return [config]
    configs = [c for c in configs if not _is_product(c)]
    if M <= _TINY and N <= _TINY:
        tiny = [c for c in configs if c.kwargs["BLOCK_M"] == c.kwargs["BLOCK_N"] == _TINY]
        return tiny or list(configs)[:1]
    kept = [c for c in configs if 2 * _TINY <= c.kwargs["BLOCK_M"] <= max(M, 2 * _TINY)
            and (ONE_KEY_BLOCK[1] // 2 < N <= ONE_KEY_BLOCK[1] if _tile(c) == ONE_KEY_BLOCK
                 else 2 * _TINY <= c.kwargs["BLOCK_N"] <= max(N, 2 * _TINY))]
    largest = max(kept, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"], default=None)
    return [largest] if largest is not None else list(configs)[:1]


def _configs() -> list[Config]:
    """The tuner's configs: the `tl.dot` tiles, then the product tiles (last, so that the first config
    stays the smallest `tl.dot` tile)."""
    tiles = list(TILES) + [(t, t) for t in PRODUCT_TILES]
    return [Config({"BLOCK_M": m, "BLOCK_N": n}) for m, n in tiles]


# BLOCK_D is part of the key: it decides whether the product tiles may be taken (`_prune_tiles`)
_TUNING = {"configs": _configs(), "key": ["M", "N", "D", "BLOCK_D"],
           "prune_configs_by": {"early_config_prune": _prune_tiles}}


def _prune_forward_tiles(configs: list[Config], nargs: dict, **kwargs: object) -> list[Config]:
    """`_prune_tiles`' tile, with the forward's ONE_BLOCK: whether its key block holds every key of a
    head (N <= BLOCK_N). Such a launch computes a plain softmax: no running maximum and sum, no
    zero-filled accumulator rescaled by exp(m_old - m_new) = 0 and added to, which was a fifth of the
    elementwise work of Llama's 128 x 128 tile. The results are the loop's: its one iteration
    multiplies the zeros by 0 and adds them (-0 sums aside)."""
    return [Config({**config.kwargs, "ONE_BLOCK": nargs["N"] <= config.kwargs["BLOCK_N"]})
            for config in _prune_tiles(configs, nargs, **kwargs)]


_FORWARD_TUNING = {**_TUNING, "prune_configs_by": {"early_config_prune": _prune_forward_tiles}}


@tl.jit
def _masked_scores(s, keep, mask_ptrs, HAS_MASK: tl.constexpr, BOOL_MASK: tl.constexpr):
    """Scores `s` with the masks applied: -inf where `keep` (bounds, causal) or a boolean mask is false;
    an additive mask is added elsewhere."""
    if HAS_MASK:
        if BOOL_MASK:
            keep = keep & (tl.load(mask_ptrs, mask=keep, other=0) != 0)
        else:
            s = s + tl.load(mask_ptrs, mask=keep, other=0.0).to(tl.float32)
    return tl.where(keep, s, -float("inf"))


@tl.jit
def _key_scores(q, k_base, mask_rows, rn, rm, rd, row_ok, d_ok, N, skn, skd, smn, causal,
                HAS_MASK: tl.constexpr, BOOL_MASK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_D: tl.constexpr):
    """(scores of the (scaled) queries `q` against keys `rn`, masked by the bounds, causality and the
    mask; the keys' bounds mask; the transposed key tile): the step every forward and dQ loop starts
    with."""
    col_ok = rn < N
    kt = tl.load(k_base + rn[None, :] * skn + rd[:, None] * skd,
                 mask=d_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)
    keep = row_ok[:, None] & col_ok[None, :] & ((rn[None, :] <= rm[:, None]) | (causal == 0))
    s = _masked_scores(_mm(q, kt, BLOCK_M, BLOCK_N, BLOCK_D), keep, mask_rows + rn[None, :] * smn,
                       HAS_MASK, BOOL_MASK)
    return s, col_ok, kt


@tl.jit
def _mm(a, b, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """`a @ b` in float32: `tl.dot`, or on a product tile (every block <= PRODUCT_BLOCK) a `tl.sum` of
    broadcast products, formed and summed in float64 and rounded once (like BLAS's fused multiply-adds;
    a float32 sum of rounded products measured about twice CPU's output error). The backward kernels
    multiply through it too, so a backward of a product-tile forward rounds S as that forward did."""
    if BLOCK_M <= PRODUCT_BLOCK and BLOCK_N <= PRODUCT_BLOCK and BLOCK_D <= PRODUCT_BLOCK:
        c = tl.sum(a.to(tl.float64)[:, :, None] * b.to(tl.float64)[None, :, :], axis=1).to(tl.float32)
    else:
        c = tl.dot(a, b)
    return c


@autotune(**_FORWARD_TUNING)
@tl.jit
def attention_forward_kernel(
    q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, lse_ptr,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
    smb, smh, smm, smn, sob, soh, som, sod,
    H, M, N, D, scale, group, causal,
    HAS_MASK: tl.constexpr, BOOL_MASK: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, ONE_BLOCK: tl.constexpr,
):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // group
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    rn0 = tl.arange(0, BLOCK_N)
    row_ok = rm < M
    d_ok = rd < D
    q = tl.load(q_ptr + b * sqb + h * sqh + rm[:, None] * sqm + rd[None, :] * sqd,
                mask=row_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
    # A round trip through a flat shape makes the backend keep q in a buffer across the key loop
    # (instead of re-reading and re-scaling it in every iteration).
    q = tl.reshape(tl.reshape(q * scale, (BLOCK_M * BLOCK_D,)), (BLOCK_M, BLOCK_D))
    k_base = k_ptr + b * skb + hk * skh
    v_base = v_ptr + b * svb + hk * svh
    mask_rows = mask_ptr + b * smb + h * smh + rm[:, None] * smm
    if ONE_BLOCK:  # every key of the head in this one block (`_prune_forward_tiles`)
        s, col_ok, _ = _key_scores(q, k_base, mask_rows, rn0, rm, rd, row_ok, d_ok, N, skn, skd, smn, causal,
                                   HAS_MASK, BOOL_MASK, BLOCK_M, BLOCK_N, BLOCK_D)
        # the loop's first step, max(-inf, row max), is the row max: `tl.max` propagates NaN as well
        m_i = tl.max(s, axis=1)
        p = tl.exp(s - tl.where(m_i == -float("inf"), 0.0, m_i)[:, None])
        l_i = tl.sum(p, axis=1)
        v = tl.load(v_base + rn0[:, None] * svn + rd[None, :] * svd,
                    mask=col_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
        acc = _mm(p, v, BLOCK_M, BLOCK_N, BLOCK_D)
    else:
        m_i = tl.full((BLOCK_M,), -float("inf"), tl.float32)
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        hi = N
        if causal != 0:
            hi = tl.minimum(N, (pid_m + 1) * BLOCK_M)
        for start in range(0, hi, BLOCK_N):
            rn = start + rn0
            s, col_ok, _ = _key_scores(q, k_base, mask_rows, rn, rm, rd, row_ok, d_ok, N, skn, skd, smn,
                                       causal, HAS_MASK, BOOL_MASK, BLOCK_M, BLOCK_N, BLOCK_D)
            m_new = tl.maximum(m_i, tl.max(s, axis=1), propagate_nan=tl.PropagateNan.ALL)
            m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
            alpha = tl.exp(m_i - m_safe)
            p = tl.exp(s - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(v_base + rn[:, None] * svn + rd[None, :] * svd,
                        mask=col_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
            acc = acc * alpha[:, None] + _mm(p, v, BLOCK_M, BLOCK_N, BLOCK_D)
            m_i = m_new
    seen = l_i > 0.0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    tl.store(out_ptr + b * sob + h * soh + rm[:, None] * som + rd[None, :] * sod,
             out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    lse = tl.where(seen, m_i + tl.log(tl.where(seen, l_i, 1.0)), -float("inf"))
    tl.store(lse_ptr + bh * M + rm, lse, mask=row_ok)


# Query rows up to which an inference call takes `attention_decode_kernel` (a generation step's one
# row per sequence, a speculative step's few), and its key block: one for every sequence length, so a
# decoding loop whose key/value cache grows by one each step compiles one specialisation, not one per
# tile the autotuner would fit to each length.
DECODE_ROWS = 4
DECODE_BLOCK_N = 64


def decode_block_d(head_dim: int) -> int:
    """BLOCK_D of `attention_decode_kernel`: the power of two covering the head dim (at least 4)."""
    return max(4, 1 << (head_dim - 1).bit_length())


@tl.jit
def attention_decode_kernel(
    q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, lse_ptr,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
    smb, smh, smm, smn, sob, soh, som, sod,
    H, M, N, D, scale, group, causal,
    HAS_MASK: tl.constexpr, BOOL_MASK: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """The forward of one query row of one head (grid (M, B * H)), arguments as
    `attention_forward_kernel`'s: for inference calls of a few query rows (a decoding step), where a
    forward tile of 16 or 32 rows would compute that many rows for one. Online softmax over BLOCK_N keys
    at a time; each score is the dot of the scaled query row with a key row and each output the weighted
    sum of value rows, both formed in float64 and rounded once (as the forward's product tiles), the
    running max, sum and output in float32. Masking, NaN propagation, rows that see no key (0, lse -inf)
    and the logsumexp as in the forward kernel."""
    row = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // group
    rd = tl.arange(0, BLOCK_D)
    rn0 = tl.arange(0, BLOCK_N)
    d_ok = rd < D
    q = tl.load(q_ptr + b * sqb + h * sqh + row * sqm + rd * sqd, mask=d_ok, other=0.0).to(tl.float32)
    q = (q * scale).to(tl.float64)
    k_base = k_ptr + b * skb + hk * skh
    v_base = v_ptr + b * svb + hk * svh
    mask_row = mask_ptr + b * smb + h * smh + row * smm
    m_i = tl.full((), -float("inf"), tl.float32)
    l_i = tl.full((), 0.0, tl.float32)
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    hi = N
    if causal != 0:
        hi = tl.minimum(N, row + 1)
    for start in range(0, hi, BLOCK_N):
        rn = start + rn0
        col_ok = rn < N
        tile_ok = col_ok[:, None] & d_ok[None, :]
        k = tl.load(k_base + rn[:, None] * skn + rd[None, :] * skd, mask=tile_ok, other=0.0).to(tl.float64)
        s = tl.sum(k * q[None, :], axis=1).to(tl.float32)
        keep = col_ok & ((rn <= row) | (causal == 0))
        s = _masked_scores(s, keep, mask_row + rn * smn, HAS_MASK, BOOL_MASK)
        m_new = tl.maximum(m_i, tl.max(s, axis=0), propagate_nan=tl.PropagateNan.ALL)
        m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        v = tl.load(v_base + rn[:, None] * svn + rd[None, :] * svd, mask=tile_ok, other=0.0).to(tl.float64)
        acc = acc * alpha + tl.sum(p.to(tl.float64)[:, None] * v, axis=0).to(tl.float32)
        m_i = m_new
    seen = l_i > 0.0
    out = acc / tl.where(seen, l_i, 1.0)
    tl.store(out_ptr + b * sob + h * soh + row * som + rd * sod, out.to(out_ptr.dtype.element_ty), mask=d_ok)
    lse = tl.where(seen, m_i + tl.log(tl.where(seen, l_i, 1.0)), -float("inf"))
    tl.store(lse_ptr + bh * M + row, lse)


@autotune(**_TUNING)
@tl.jit
def attention_backward_dq_kernel(
    q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, dout_ptr, lse_ptr, delta_ptr, dq_ptr,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
    smb, smh, smm, smn, sob, soh, som, sod, sgb, sgh, sgm, sgd, sdqb, sdqh, sdqm, sdqd,
    H, M, N, D, scale, group, causal,
    HAS_MASK: tl.constexpr, BOOL_MASK: tl.constexpr, EXACT_DELTA: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """delta = rowsum(dO * O) (stored for the dK/dV kernel) and dQ for BLOCK_M query rows of one head.
    EXACT_DELTA (half-precision outputs): O is recomputed in float32 from the saved lse for delta, since
    the rounding of the stored O would otherwise enter every dS (badly when the softmax is peaked)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // group
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    rn0 = tl.arange(0, BLOCK_N)
    row_ok = rm < M
    d_ok = rd < D
    tile_ok = row_ok[:, None] & d_ok[None, :]
    q = tl.load(q_ptr + b * sqb + h * sqh + rm[:, None] * sqm + rd[None, :] * sqd,
                mask=tile_ok, other=0.0).to(tl.float32)
    q = tl.reshape(tl.reshape(q * scale, (BLOCK_M * BLOCK_D,)), (BLOCK_M, BLOCK_D))  # kept in a buffer
    do = tl.load(dout_ptr + b * sgb + h * sgh + rm[:, None] * sgm + rd[None, :] * sgd,
                 mask=tile_ok, other=0.0).to(tl.float32)
    do = tl.reshape(tl.reshape(do, (BLOCK_M * BLOCK_D,)), (BLOCK_M, BLOCK_D))  # kept in a buffer
    lse = tl.load(lse_ptr + bh * M + rm, mask=row_ok, other=0.0)
    lse = tl.where(lse == -float("inf"), float("inf"), lse)  # rows that saw no key: P = 0
    k_base = k_ptr + b * skb + hk * skh
    v_base = v_ptr + b * svb + hk * svh
    mask_rows = mask_ptr + b * smb + h * smh + rm[:, None] * smm
    hi = N
    if causal != 0:
        hi = tl.minimum(N, (pid_m + 1) * BLOCK_M)
    if EXACT_DELTA:
        o = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        for start in range(0, hi, BLOCK_N):
            rn = start + rn0
            s, col_ok, _ = _key_scores(q, k_base, mask_rows, rn, rm, rd, row_ok, d_ok, N, skn, skd, smn,
                                       causal, HAS_MASK, BOOL_MASK, BLOCK_M, BLOCK_N, BLOCK_D)
            v = tl.load(v_base + rn[:, None] * svn + rd[None, :] * svd,
                        mask=col_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
            o += _mm(tl.exp(s - lse[:, None]), v, BLOCK_M, BLOCK_N, BLOCK_D)
    else:
        o = tl.load(out_ptr + b * sob + h * soh + rm[:, None] * som + rd[None, :] * sod,
                    mask=tile_ok, other=0.0).to(tl.float32)
    delta = tl.sum(do * o, axis=1)
    tl.store(delta_ptr + bh * M + rm, delta, mask=row_ok)
    dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for start in range(0, hi, BLOCK_N):
        rn = start + rn0
        s, col_ok, kt = _key_scores(q, k_base, mask_rows, rn, rm, rd, row_ok, d_ok, N, skn, skd, smn, causal,
                                    HAS_MASK, BOOL_MASK, BLOCK_M, BLOCK_N, BLOCK_D)
        p = tl.exp(s - lse[:, None])
        vt = tl.load(v_base + rn[None, :] * svn + rd[:, None] * svd,
                     mask=d_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)
        ds = p * (_mm(do, vt, BLOCK_M, BLOCK_N, BLOCK_D) - delta[:, None])
        dq += _mm(ds, tl.trans(kt), BLOCK_M, BLOCK_N, BLOCK_D)
    dq = dq * scale
    tl.store(dq_ptr + b * sdqb + h * sdqh + rm[:, None] * sdqm + rd[None, :] * sdqd,
             dq.to(dq_ptr.dtype.element_ty), mask=tile_ok)


@autotune(**_TUNING)
@tl.jit
def attention_backward_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, mask_ptr, dout_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
    smb, smh, smm, smn, sgb, sgh, sgm, sgd, sdkb, sdkh, sdkn, sdkd, sdvb, sdvh, sdvn, sdvd,
    H, M, N, D, scale, group, causal,
    HAS_MASK: tl.constexpr, BOOL_MASK: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """dK and dV for BLOCK_N keys of one key/value head, summed over the `group` query heads sharing it.
    Works on transposed tiles (keys along rows): S^T = k (scale q)^T, dV += P^T dO, dK += dS^T (scale q)."""
    pid_n = tl.program_id(0)
    bhk = tl.program_id(1)
    HK = H // group
    b = bhk // HK
    hk = bhk % HK
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rd = tl.arange(0, BLOCK_D)
    rm0 = tl.arange(0, BLOCK_M)
    col_ok = rn < N
    d_ok = rd < D
    kv_ok = col_ok[:, None] & d_ok[None, :]
    k = tl.load(k_ptr + b * skb + hk * skh + rn[:, None] * skn + rd[None, :] * skd,
                mask=kv_ok, other=0.0).to(tl.float32)
    k = tl.reshape(tl.reshape(k, (BLOCK_N * BLOCK_D,)), (BLOCK_N, BLOCK_D))  # kept in a buffer
    v = tl.load(v_ptr + b * svb + hk * svh + rn[:, None] * svn + rd[None, :] * svd,
                mask=kv_ok, other=0.0).to(tl.float32)
    v = tl.reshape(tl.reshape(v, (BLOCK_N * BLOCK_D,)), (BLOCK_N, BLOCK_D))  # kept in a buffer
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    lo = 0
    if causal != 0:
        lo = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M  # earlier query rows see none of these keys
    for g in range(0, group):
        h = hk * group + g
        bh = b * H + h
        mask_cols = mask_ptr + b * smb + h * smh + rn[:, None] * smn
        for start in range(lo, M, BLOCK_M):
            rm = start + rm0
            row_ok = rm < M
            qt = tl.load(q_ptr + b * sqb + h * sqh + rm[None, :] * sqm + rd[:, None] * sqd,
                         mask=d_ok[:, None] & row_ok[None, :], other=0.0).to(tl.float32)
            qt = qt * scale
            keep = col_ok[:, None] & row_ok[None, :] & ((rn[:, None] <= rm[None, :]) | (causal == 0))
            st = _masked_scores(_mm(k, qt, BLOCK_M, BLOCK_N, BLOCK_D), keep, mask_cols + rm[None, :] * smm,
                                HAS_MASK, BOOL_MASK)
            lse = tl.load(lse_ptr + bh * M + rm, mask=row_ok, other=0.0)
            lse = tl.where(lse == -float("inf"), float("inf"), lse)
            pt = tl.exp(st - lse[None, :])
            do = tl.load(dout_ptr + b * sgb + h * sgh + rm[:, None] * sgm + rd[None, :] * sgd,
                         mask=row_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
            dv += _mm(pt, do, BLOCK_M, BLOCK_N, BLOCK_D)
            delta = tl.load(delta_ptr + bh * M + rm, mask=row_ok, other=0.0)
            dst = pt * (_mm(v, tl.trans(do), BLOCK_M, BLOCK_N, BLOCK_D) - delta[None, :])
            dk += _mm(dst, tl.trans(qt), BLOCK_M, BLOCK_N, BLOCK_D)
    tl.store(dk_ptr + b * sdkb + hk * sdkh + rn[:, None] * sdkn + rd[None, :] * sdkd,
             dk.to(dk_ptr.dtype.element_ty), mask=kv_ok)
    tl.store(dv_ptr + b * sdvb + hk * sdvh + rn[:, None] * sdvn + rd[None, :] * sdvd,
             dv.to(dv_ptr.dtype.element_ty), mask=kv_ok)


@autotune(**_TUNING)
@tl.jit
def attention_backward_tiny_kernel(
    q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, dout_ptr, lse_ptr, dq_ptr, dk_ptr, dv_ptr,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
    smb, smh, smm, smn, sob, soh, som, sod, sgb, sgh, sgm, sgd,
    sdqb, sdqh, sdqm, sdqd, sdkb, sdkh, sdkn, sdkd, sdvb, sdvh, sdvn, sdvd,
    H, M, N, D, scale, group, causal,
    HAS_MASK: tl.constexpr, BOOL_MASK: tl.constexpr, EXACT_DELTA: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """The whole backward of a problem that fits one tile (every query and key of a head in one
    BLOCK_M x BLOCK_N tile, `one_launch_backward`): one program per key/value head computes P once per
    query head of its group and from it dQ, and dK, dV summed over the group, in one launch instead of
    the dQ and dK/dV kernels' two (and without their delta buffer). Same formulas and `_mm` products as
    those kernels."""
    bhk = tl.program_id(1)
    HK = H // group
    b = bhk // HK
    hk = bhk % HK
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, BLOCK_D)
    row_ok = rm < M
    col_ok = rn < N
    d_ok = rd < D
    q_ok = row_ok[:, None] & d_ok[None, :]
    kv_ok = col_ok[:, None] & d_ok[None, :]
    k = tl.load(k_ptr + b * skb + hk * skh + rn[:, None] * skn + rd[None, :] * skd,
                mask=kv_ok, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + b * svb + hk * svh + rn[:, None] * svn + rd[None, :] * svd,
                mask=kv_ok, other=0.0).to(tl.float32)
    kt = tl.trans(k)
    vt = tl.trans(v)
    keep = row_ok[:, None] & col_ok[None, :] & ((rn[None, :] <= rm[:, None]) | (causal == 0))
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    for g in range(0, group):
        h = hk * group + g
        bh = b * H + h
        q = tl.load(q_ptr + b * sqb + h * sqh + rm[:, None] * sqm + rd[None, :] * sqd,
                    mask=q_ok, other=0.0).to(tl.float32)
        # kept in a buffer: read by two products, which otherwise each copied (and scaled) it again
        q = tl.reshape(tl.reshape(q * scale, (BLOCK_M * BLOCK_D,)), (BLOCK_M, BLOCK_D))
        do = tl.load(dout_ptr + b * sgb + h * sgh + rm[:, None] * sgm + rd[None, :] * sgd,
                     mask=q_ok, other=0.0).to(tl.float32)
        lse = tl.load(lse_ptr + bh * M + rm, mask=row_ok, other=0.0)
        lse = tl.where(lse == -float("inf"), float("inf"), lse)  # rows that saw no key: P = 0
        s = _masked_scores(_mm(q, kt, BLOCK_M, BLOCK_N, BLOCK_D), keep,
                           mask_ptr + b * smb + h * smh + rm[:, None] * smm + rn[None, :] * smn,
                           HAS_MASK, BOOL_MASK)
        p = tl.exp(s - lse[:, None])
        if EXACT_DELTA:
            o = _mm(p, v, BLOCK_M, BLOCK_N, BLOCK_D)
        else:
            o = tl.load(out_ptr + b * sob + h * soh + rm[:, None] * som + rd[None, :] * sod,
                        mask=q_ok, other=0.0).to(tl.float32)
        delta = tl.sum(do * o, axis=1)
        ds = p * (_mm(do, vt, BLOCK_M, BLOCK_N, BLOCK_D) - delta[:, None])
        dq = _mm(ds, k, BLOCK_M, BLOCK_N, BLOCK_D) * scale
        tl.store(dq_ptr + b * sdqb + h * sdqh + rm[:, None] * sdqm + rd[None, :] * sdqd,
                 dq.to(dq_ptr.dtype.element_ty), mask=q_ok)
        dv += _mm(tl.trans(p), do, BLOCK_M, BLOCK_N, BLOCK_D)
        dk += _mm(tl.trans(ds), q, BLOCK_M, BLOCK_N, BLOCK_D)
    tl.store(dk_ptr + b * sdkb + hk * sdkh + rn[:, None] * sdkn + rd[None, :] * sdkd,
             dk.to(dk_ptr.dtype.element_ty), mask=kv_ok)
    tl.store(dv_ptr + b * sdvb + hk * sdvh + rn[:, None] * sdvn + rd[None, :] * sdvd,
             dv.to(dv_ptr.dtype.element_ty), mask=kv_ok)
