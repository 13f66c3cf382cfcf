"""One tiled matmul: C[b] = beta * bias + alpha * A[b] @ B[b], batched over grid axis 2.

Operands are addressed through strides, so transposed weights (`linear`) need no copy in the caller:
the numba backend stages each tile for BLAS in the layout its memory has (a transposed weight as a
Fortran array that gemm reads through its transpose flag) and passes a full, contiguous fp32 tile as a
view. Accumulates in float32; the optional bias is broadcast through its strides (0 where broadcast)
and added in the output loop.

Tiles of at most `PRODUCT_BLOCK` per side skip `tl.dot`: they sum elementwise products over K
(`tl.sum` of an (M, K, N) broadcast) instead. On the numba backend a `tl.dot` tile is a BLAS call
plus the staging of both operand tiles (a fill and a copy each, whatever the real size): one 2x2
launch measured ~8.5 us with the 32 tile against ~2.2 us with the 8 tile's products, and small
matmuls (a model's linear layers on a few tokens, attention on short sequences) pay that per call."""

from __future__ import annotations

import torch
import torch_rbln.dsl as tl
from torch_rbln.autotune import Config, autotune, launch_tp_size

# Largest padded/real work ratio a tile may cost before `_prune_tiles` drops it.
_MAX_PADDING = 4
# Tiles up to this size per side take the elementwise-product path (see the module docstring); larger
# ones call `tl.dot`.
PRODUCT_BLOCK = 16
# Largest M x N x K a product tile takes: its multiply-adds cost more than BLAS's once the tile is
# mostly full (one launch, 12^3: product 4.7 us, 32 dot tile 7.5; 16^3: 9.6 against 7.7).
_PRODUCT_MAX_VOLUME = 2048


def _is_product(config: Config) -> bool:
    """Whether `config` is a tile of the elementwise-product path (every side <= PRODUCT_BLOCK)."""
    return max(config.kwargs[name] for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) <= PRODUCT_BLOCK


def _prune_tiles(configs: list[Config], nargs: dict, **kwargs: object) -> list[Config]:
    """Keep the tiles the problem can use. A problem that fits one product tile (M, N, K all <=
    PRODUCT_BLOCK, M x N x K <= _PRODUCT_MAX_VOLUME) gets exactly the smallest product tile that covers
    it: one specialisation, no benchmarking, and the same choice on any tensor-parallel size (one
    program). Otherwise, among the `tl.dot` tiles: a tile whose padded M x N x K volume is more than
    `_MAX_PADDING` times the real one would spend most of its work (and its copies) on padding, and one
    with fewer M x N tiles than the launch's NPUs cannot be split over a tensor-parallel group (the
    launch refuses it). The smallest `tl.dot` tile always stays, so thin problems (a column sum is
    M=1) compile one specialisation and skip benchmarking."""
    M, N, K = nargs["M"], nargs["N"], nargs["K"]
    largest = max(M, N, K)
    products = sorted((c for c in configs if _is_product(c)), key=lambda c: c.kwargs["BLOCK_K"])
    for config in products if M * N * K <= _PRODUCT_MAX_VOLUME else ():
        if largest <= min(config.kwargs[name] for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K")):
            return [config]
    configs = [c for c in configs if not _is_product(c)]
    tp = launch_tp_size(tuple(nargs.values()), dict(kwargs))

    def blocks(config: Config) -> tuple[int, int, int]:
        bm, bn, bk = (config.kwargs[name] for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
        return -(-M // bm), -(-N // bn), -(-K // bk)

    def fits(config: Config) -> bool:
        gm, gn, gk = blocks(config)
        padded = gm * gn * gk * config.kwargs["BLOCK_M"] * config.kwargs["BLOCK_N"] * config.kwargs["BLOCK_K"]
        return padded <= _MAX_PADDING * max(M * N * K, 1) and gm * gn >= tp

    kept = [c for c in configs if fits(c)]
    return kept or list(configs)[:1]


# Fitted tiles (`_fitted_tile`): the problems they take, and the tile's size limits. Below this volume a
# problem keeps `_prune_tiles`'s small tiles (one or a few 32 tiles, cheap to stage).
_FITTED_MIN_VOLUME = 1 << 18
_FITTED_MAX_M = 128
_FITTED_MAX_K = 1024
_FITTED_AREA = 1 << 15  # BLOCK_M x BLOCK_N: the accumulator and the epilogue's tile
# What one more program (N tiles) or one more K step costs, in padded columns of work: a K step stages
# and adds a tile, a program re-reads A (measured on the numba backend, 128 x {512, 1376} x 512 linears)
_STEP_COST = 64
_PROGRAM_COST = 32
# The K block of a fitted tile over operands gemm reads in place (`_fitted_tile`'s `in_place`) when K is
# at most this: one block, one step, for every such K. A longer K keeps the block fitted to it: a longer
# block's staging buffers, allocated by each launch even when unused, cost (32 x 256 x 300 in a
# 1024 block instead of 512: ~57 us against ~44).
_IN_PLACE_K = 256
# Operands gemm reads in place with K up to this take one K block spanning K (one step, one gemm call
# per program); past `_IN_PLACE_K` their N block fills `_IN_PLACE_AREA` instead of `_FITTED_AREA`,
# since a one-step product is written by gemm where it is stored or read at its counted lanes only
# (shorter K keep the smaller area: their launches are a few microseconds, and a product tile that an
# epilogue materialises is allocated by each launch), and their row block spans up to
# `_IN_PLACE_MAX_M` rows: gemm packs B once per call, so each 128-row block repacked it. Llama's linears
# (128 x {512, 1376} x {512, 1376}, 1 thread) were two to six gemm calls of 256 columns, the 1376-deep
# one three K steps with an accumulator pass each: 0.87-0.93x torch's linear, 0.93-0.96x as one call;
# 512 rows of them 0.86-0.89x in 128-row blocks, 0.97-0.98x as one call.
_IN_PLACE_MAX_K = 4096
_IN_PLACE_AREA = 1 << 20
_IN_PLACE_MAX_M = 512
_IN_PLACE_MAX_N = 4096  # and at most this many columns (a decoding step's 16-row block)


def _pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _padded_choice(extent: int, largest: int, smallest: int, cost: int) -> int:
    """The power-of-2 block for `extent` in [smallest, largest] that minimises padded work plus `cost`
    per block (ties: the larger block)."""
    best, best_cost = largest, None
    block = largest
    while block >= smallest:
        blocks = -(-extent // block)
        total = blocks * block + blocks * cost
        if best_cost is None or total < best_cost:
            best, best_cost = block, total
        block //= 2
    return best


def _fitted_tile(M: int, N: int, K: int, tp: int, in_place: bool = False) -> Config | None:
    """One tile shaped to the problem, for a problem of at least `_FITTED_MIN_VOLUME` multiply-adds
    with every side >= 16 (None otherwise, or when no such tile gives each of `tp` NPUs a program).

    Why: on the numba backend a `tl.dot` tile is one BLAS gemm of the full (padded) tile, plus staging
    copies for operands that are not a full contiguous tile; the fixed tile list padded a 64-row problem
    to 256 rows and a 512-deep one to 1024 (4x and 2x the gemm's work, and a staging copy each), and its
    small tiles cost a gemm call and an accumulator pass per 128 x 128 x 128 block. The fitted tile has
    M rows (up to 128) so no row is padded, a K block that spans K when K is a power of 2 up to 1024 (a
    row-major A tile, and `linear`'s transposed weight, go to BLAS as views), else the block that
    minimises padding plus per-step cost, and N columns filling `_FITTED_AREA`. One config and no
    benchmarking: a model's handful of linear shapes compile a handful of specialisations. A K block
    that spans K sets ONE_STEP: the tile's product is the accumulator (no zero-filled tile, no add).
    128 x 512 x 1376 linear (1 thread): 256x256x512 from the list ~8 ms, fitted 128x256x512 ~2 ms.
    Fewer than 16 rows (a decoding step's tokens) take a 16-row block when gemm reads the operands in
    place: it multiplies the counted rows only, where the listed 32 tile made a gemm call and an
    accumulator pass per 32 x 32 x 32 block (1 x 512 x 1376 linear ~1.85 ms -> ~0.26 ms).

    `in_place` (`_reads_in_place`: float32 operands that gemm reads where they lie): the backend's gemm
    then runs on the real K extent, so a K block longer than K costs nothing but an unused staging
    buffer; every K up to `_IN_PLACE_K` then takes that one block (one step), so problems that differ
    only in such a K share a specialisation (the README demo's K of 32, 64, 128, 192 and 256 compiled
    one each), and problems below `_FITTED_MIN_VOLUME` take a fitted tile too: one gemm where the 32 tile
    made a gemm and an accumulator pass per 32 x 32 x 32 block (32 x 64 x 64 with a bias, 1 thread:
    ~10 us against ~5.5). Rows keep their exact power-of-2 block. Columns too where the product takes
    more than one step (the accumulator reads every lane, so gemm fills the padded ones: a 2x wider N
    block cost 32 x 64 x 64 ~1 us of its ~5). A one-step in-place tile instead reads the product only
    where it stores it, at counted rows and columns, so the backend's gemm leaves padded lanes unwritten
    (`numba_backend.dot_padding`) and a wider N block costs nothing: every N up to `_FITTED_AREA //
    block_m` takes that one block, so such problems differ only in their row block (the README demo's
    eight matmul tiles became four; 32 x 64 x 64 with a bias ~21 us either way, measured)."""
    if min(N, K) < 16 or (M * N * K < _FITTED_MIN_VOLUME and not in_place):
        return None
    if M < 16 and (not in_place or max(N, K) <= PRODUCT_BLOCK):  # the listed tiles (products included)
        return None
    if in_place and K <= _IN_PLACE_K:
        block_k = _IN_PLACE_K
    elif in_place and K <= _IN_PLACE_MAX_K:
        block_k = _pow2_at_least(K)  # one step: gemm runs on the real K, the padding is never computed
    else:
        block_k = _padded_choice(K, min(_pow2_at_least(K), _FITTED_MAX_K), 32, _STEP_COST)
    one_step_in_place = in_place and block_k >= K
    wide = one_step_in_place and K > _IN_PLACE_K
    block_m = max(16, min(_pow2_at_least(M), _IN_PLACE_MAX_M if wide else _FITTED_MAX_M))
    area = _IN_PLACE_AREA if wide else _FITTED_AREA
    columns = min(area // block_m, _IN_PLACE_MAX_N) if wide else area // block_m
    if one_step_in_place and N <= columns:
        block_n = columns  # padded columns cost nothing here: one block_n per block_m
    else:
        widest = max(16, min(_pow2_at_least(N), columns))
        block_n = _padded_choice(N, widest, min(32, widest), _PROGRAM_COST)
    while -(-M // block_m) * -(-N // block_n) < tp and block_n > 16:
        block_n //= 2
    while -(-M // block_m) * -(-N // block_n) < tp and block_m > 16:
        block_m //= 2
    if -(-M // block_m) * -(-N // block_n) < tp:
        return None
    return Config({"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "ONE_STEP": block_k >= K})


def _unit_stride(row_stride: int, col_stride: int, rows: int, cols: int) -> bool:
    """Whether a rows x cols operand is row- or column-major with a leading dimension BLAS accepts
    (dot_support's `_leading`): gemm reads its tiles where they lie."""
    if (cols == 1 or col_stride == 1) and (rows == 1 or row_stride >= cols):
        return True
    return (rows == 1 or row_stride == 1) and (cols == 1 or col_stride >= rows)


def _reads_in_place(nargs: dict) -> bool:
    """Whether the launch's operands are float32 tensors (the product's work dtype) with a unit stride
    each: the numba backend's `tl.dot` then calls gemm on their memory for the real M, N, K (no staging
    copy, no padded K; see `_fitted_tile`). False when `nargs` holds no tensors (a caller asking about
    sizes only)."""
    a, b = nargs.get("a_ptr"), nargs.get("b_ptr")
    if getattr(a, "dtype", None) is not torch.float32 or getattr(b, "dtype", None) is not torch.float32:
        return False
    M, N, K = nargs["M"], nargs["N"], nargs["K"]
    return _unit_stride(nargs["sam"], nargs["sak"], M, K) and _unit_stride(nargs["sbk"], nargs["sbn"], K, N)


def _choose_tiles(configs: list[Config], nargs: dict, **kwargs: object) -> list[Config]:
    """The autotuner's candidates: the fitted tile alone where one applies (`_fitted_tile`, told whether
    gemm reads the operands in place), else the listed tiles `_prune_tiles` keeps."""
    tp = launch_tp_size(tuple(nargs.values()), dict(kwargs))
    fitted = _fitted_tile(nargs["M"], nargs["N"], nargs["K"], tp, _reads_in_place(nargs))
    return [fitted] if fitted is not None else _prune_tiles(configs, nargs, **kwargs)


@autotune(
    configs=[
        # tl.dot is one BLAS gemm per tile on the numba backend, so large tiles amortise the per-tile
        # work (staging copies, the accumulator add, gemm's own packing). A tile whose K block spans
        # the whole (contiguous) K extent is passed to BLAS as a view, with no staging copy: at 1024^3
        # on one thread 512x512x1024 measured ~90% of torch's GFLOP/s for mm and linear alike,
        # 256x256x512 ~60-70%, 128x128x128 ~50%.
        Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "ONE_STEP": False}),
        Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "ONE_STEP": False}),
        Config({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 512, "ONE_STEP": False}),
        Config({"BLOCK_M": 512, "BLOCK_N": 512, "BLOCK_K": 1024, "ONE_STEP": False}),
        # The product path's tiles, only ever chosen alone, for problems that fit them whole (see the
        # module docstring); last, so the first config stays the smallest `tl.dot` tile.
        Config({"BLOCK_M": 8, "BLOCK_N": 8, "BLOCK_K": 8, "ONE_STEP": False}),
        Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "ONE_STEP": False}),
    ],
    key=["M", "N", "K"],
    prune_configs_by={"early_config_prune": _choose_tiles},
)
@tl.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K,
    sab, sam, sak, sbb, sbk, sbn, scb, scm, scn, s_bias_m, s_bias_n, alpha, beta,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ONE_STEP: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_base = a_ptr + batch * sab
    b_base = b_ptr + batch * sbb
    if ONE_STEP:
        # the K block spans K (fitted tiles): the product is the accumulator, with no zero-filled tile
        # and no add pass over it
        a = tl.load(a_base + rm[:, None] * sam + rk[None, :] * sak,
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_base + rk[:, None] * sbk + rn[None, :] * sbn,
                    mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            kk = k * BLOCK_K + rk
            a = tl.load(a_base + rm[:, None] * sam + kk[None, :] * sak,
                        mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
            b = tl.load(b_base + kk[:, None] * sbk + rn[None, :] * sbn,
                        mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
            if BLOCK_M <= PRODUCT_BLOCK and BLOCK_N <= PRODUCT_BLOCK and BLOCK_K <= PRODUCT_BLOCK:
                acc += tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)
            else:
                acc += tl.dot(a, b)
    acc = acc * alpha
    # Each access spells its mask out: a single-use bounds mask stays a box, so the load and the store
    # are one bounds check and a vectorisable loop (a shared mask is materialised and checked per lane).
    if HAS_BIAS == 2:  # a row of N unit-stride values broadcast over the rows (linear's bias)
        bias = tl.load(bias_ptr + rm[:, None] * 0 + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N),
                       other=0.0)
        acc += beta * bias.to(tl.float32)
    elif HAS_BIAS:
        bias = tl.load(bias_ptr + rm[:, None] * s_bias_m + rn[None, :] * s_bias_n,
                       mask=(rm[:, None] < M) & (rn[None, :] < N), other=0.0)
        acc += beta * bias.to(tl.float32)
    tl.store(c_ptr + batch * scb + rm[:, None] * scm + rn[None, :] * scn,
             acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))
