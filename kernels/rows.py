"""Row kernels over the last dimension of a contiguous (rows, n) tensor: softmax, log-softmax (+
backward), layer norm and RMS norm (+ backward), and reductions. One program per row; rows longer than
BLOCK are processed in chunks, accumulating in float32."""

from __future__ import annotations

from collections.abc import Callable

import numba
import numpy as np
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend.support import as_pointer

from .elementwise import _tile_lanes

# Reduction op codes.
R_SUM, R_MEAN, R_MAX, R_MIN, R_ARGMAX, R_ARGMIN, R_VAR, R_ALL, R_ANY, R_STD = range(10)
# R_STD: var's pass, then its square root in float32 before the store. Why not sqrt(var) stored in x's
# dtype: a float16 row of values near 60,000 has a variance past float16's 65,504 (inf) and a standard
# deviation of ~49,000 (torch's CPU: 48,992).


@tl.jit
def softmax_row_kernel(x_ptr, out_ptr, n, LOG: tl.constexpr, BLOCK: tl.constexpr):
    """Softmax (or log-softmax) of a row that fits one block (n <= BLOCK): the row is loaded once and
    each element exponentiated once, where the chunked kernel reads it three times and needs exp twice."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=-float("inf")).to(tl.float32)
    shifted = x - tl.max(x, axis=0)
    e = tl.exp(shifted)
    total = tl.sum(e, axis=0)
    if LOG:
        y = shifted - tl.log(total)
    else:
        y = e / total
    tl.store(out_ptr + row * n + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@tl.jit
def softmax_middle_kernel(x_ptr, out_ptr, r, inner, LOG: tl.constexpr, BLOCK: tl.constexpr):
    """Softmax (or log-softmax) over the middle dim of a contiguous (outer, r, inner) tensor: each lane
    is one column (o, :, j), reduced in three passes over k < r that each read a contiguous row of
    columns (a NaN-propagating max, the sum of exponentials, the output), so a dim other than the last
    needs no copy to the last place and back (two transposing copies around the row kernel: 4x the
    CPU's time for dim 1 of (64, 64, 64)). NaN and infinities as `softmax_row_kernel`. Grid (outer,
    cdiv(inner, BLOCK))."""
    o = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inner
    base = o * r * inner + cols
    top = tl.full((BLOCK,), -float("inf"), tl.float32)
    for k in range(0, r):
        x = tl.load(x_ptr + base + k * inner, mask=mask, other=-float("inf")).to(tl.float32)
        top = tl.maximum(top, x, propagate_nan=tl.PropagateNan.ALL)
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for k in range(0, r):
        x = tl.load(x_ptr + base + k * inner, mask=mask, other=-float("inf")).to(tl.float32)
        total += tl.exp(x - top)
    for k in range(0, r):
        shifted = tl.load(x_ptr + base + k * inner, mask=mask, other=-float("inf")).to(tl.float32) - top
        if LOG:
            y = shifted - tl.log(total)
        else:
            y = tl.exp(shifted) / total
        tl.store(out_ptr + base + k * inner, y.to(out_ptr.dtype.element_ty), mask=mask)


# The chunk of `softmax_kernel`: one size for every row length. Why not autotuned: the three chunks the
# autotuner tried (256, 1024, 4096) were three numba compiles per dtype for timings within a few percent
# of each other; forced alone (numba backend, 1 thread, best of 15) 1024 was the fastest or within 4%
# of it on rows of 5,000 to 50,257 elements, 1 to 256 of them, where 4096 cost 1.5x on 4,100-element
# rows (half its second chunk padding) and 256 up to 1.16x.
SOFTMAX_CHUNK = 1024


@tl.jit
def softmax_kernel(x_ptr, out_ptr, n, LOG: tl.constexpr, BLOCK: tl.constexpr):
    """Softmax (or log-softmax) of rows longer than one block, in BLOCK chunks: a max pass, a sum of
    exponentials, and the output pass."""
    row = tl.program_id(0)
    base = row * n
    cols = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), -float("inf"), tl.float32)
    for start in range(0, n, BLOCK):
        x = tl.load(x_ptr + base + start + cols, mask=start + cols < n, other=-float("inf")).to(tl.float32)
        m = tl.maximum(m, x, propagate_nan=tl.PropagateNan.ALL)  # torch's max keeps a NaN
    row_max = tl.max(m, axis=0)
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        x = tl.load(x_ptr + base + start + cols, mask=start + cols < n, other=-float("inf")).to(tl.float32)
        s += tl.where(start + cols < n, tl.exp(x - row_max), 0.0)
    total = tl.sum(s, axis=0)
    for start in range(0, n, BLOCK):
        mask = start + cols < n
        x = tl.load(x_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
        if LOG:
            y = x - row_max - tl.log(total)
        else:
            y = tl.exp(x - row_max) / total
        tl.store(out_ptr + base + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@tl.jit
def softmax_backward_kernel(g_ptr, y_ptr, out_ptr, n, LOG: tl.constexpr, BLOCK: tl.constexpr):
    """softmax: dx = y * (g - sum(g * y)); log_softmax: dx = g - exp(y) * sum(g)."""
    row = tl.program_id(0)
    base = row * n
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        mask = start + cols < n
        g = tl.load(g_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
        if LOG:
            acc += g
        else:
            y = tl.load(y_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
            acc += g * y
    total = tl.sum(acc, axis=0)
    for start in range(0, n, BLOCK):
        mask = start + cols < n
        g = tl.load(g_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(y_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
        if LOG:
            dx = g - tl.exp(y) * total
        else:
            dx = y * (g - total)
        tl.store(out_ptr + base + start + cols, dx.to(out_ptr.dtype.element_ty), mask=mask)


@tl.jit
def _finite(v):
    """No NaN/Inf in the block `v` (float32): v - v is 0 for every finite element and NaN otherwise, so
    its sum is exactly 0 unless one is not finite. One vectorised sum and one scalar test per block, where
    an elementwise assert tested and branched on every element (it doubled a 4096x4096 layer norm)."""
    return tl.sum(v - v, axis=0) == 0.0


@tl.jit
def norm_row_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, mean_ptr, rstd_ptr, n, eps,
    RMS: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, CHECK: tl.constexpr, BLOCK: tl.constexpr,
):
    """`norm_kernel` for a row that fits one block (n <= BLOCK): one load of the row instead of three."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
    if CHECK:
        tl.device_assert(_finite(x), "NaN or Inf in the input")
    if RMS:
        centered = x
    else:
        mean = tl.sum(x, axis=0) / n
        centered = tl.where(mask, x - mean, 0.0)
        tl.store(mean_ptr + row, mean.to(mean_ptr.dtype.element_ty))
    rstd = tl.rsqrt(tl.sum(centered * centered, axis=0) / n + eps)
    tl.store(rstd_ptr + row, rstd.to(rstd_ptr.dtype.element_ty))
    y = centered * rstd
    if HAS_W:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        if CHECK:
            tl.device_assert(_finite(w), "NaN or Inf in the weight")
        y = y * w
    if HAS_B:
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        if CHECK:
            tl.device_assert(_finite(b), "NaN or Inf in the bias")
        y = y + b
    tl.store(out_ptr + row * n + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@tl.jit
def norm_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, mean_ptr, rstd_ptr, n, eps,
    RMS: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, CHECK: tl.constexpr, BLOCK: tl.constexpr,
):
    """Layer norm (RMS=False) or RMS norm of one row; saves mean (layer norm) and rstd in float32.
    CHECK: fault (`device_assert`) on a NaN/Inf in x, the weight or the bias, as the kernel reads them:
    the input check outside deploy mode without a pass of its own (a fast path that sees the fault
    hands the call to the general path, which scans and takes the CPU for such inputs)."""
    row = tl.program_id(0)
    base = row * n
    cols = tl.arange(0, BLOCK)
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        x = tl.load(x_ptr + base + start + cols, mask=start + cols < n, other=0.0).to(tl.float32)
        if CHECK:
            tl.device_assert(_finite(x), "NaN or Inf in the input")
        if RMS:
            s += x * x
        else:
            s += x
    if RMS:
        mean = 0.0
        rstd = tl.rsqrt(tl.sum(s, axis=0) / n + eps)
    else:
        mean = tl.sum(s, axis=0) / n
        v = tl.zeros((BLOCK,), dtype=tl.float32)
        for start in range(0, n, BLOCK):
            mask = start + cols < n
            x = tl.load(x_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, x - mean, 0.0)
            v += d * d
        rstd = tl.rsqrt(tl.sum(v, axis=0) / n + eps)
        tl.store(mean_ptr + row, mean.to(mean_ptr.dtype.element_ty))
    tl.store(rstd_ptr + row, rstd.to(rstd_ptr.dtype.element_ty))
    for start in range(0, n, BLOCK):
        mask = start + cols < n
        x = tl.load(x_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd
        if HAS_W:
            w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            if CHECK:
                tl.device_assert(_finite(w), "NaN or Inf in the weight")
            y = y * w
        if HAS_B:
            b = tl.load(b_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            if CHECK:
                tl.device_assert(_finite(b), "NaN or Inf in the bias")
            y = y + b
        tl.store(out_ptr + base + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@tl.jit
def norm_backward_kernel(
    g_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, gx_ptr, n,
    RMS: tl.constexpr, HAS_W: tl.constexpr, NEED_GX: tl.constexpr, BLOCK: tl.constexpr,
):
    """dx of one row (and g * xhat, for the weight gradient, when NEED_GX).
    Layer norm: dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat));
    RMS norm: dx = rstd * (gw - xhat * mean(gw * xhat))."""
    row = tl.program_id(0)
    base = row * n
    cols = tl.arange(0, BLOCK)
    rstd = tl.load(rstd_ptr + row).to(tl.float32)
    if RMS:
        mean = 0.0
    else:
        mean = tl.load(mean_ptr + row).to(tl.float32)
    s1 = tl.zeros((BLOCK,), dtype=tl.float32)
    s2 = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        mask = start + cols < n
        g = tl.load(g_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_W:
            g = g * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        s1 += g
        s2 += g * xhat
    c1 = tl.sum(s1, axis=0) / n
    c2 = tl.sum(s2, axis=0) / n
    for start in range(0, n, BLOCK):
        mask = start + cols < n
        g = tl.load(g_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_W:
            g = g * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        xhat = (x - mean) * rstd
        if NEED_GX:
            g0 = tl.load(g_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(gx_ptr + base + start + cols, g0 * xhat, mask=mask)
        if RMS:
            dx = rstd * (g - xhat * c2)
        else:
            dx = rstd * (g - c1 - xhat * c2)
        tl.store(dx_ptr + base + start + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@tl.jit
def reduce_kernel(x_ptr, out_ptr, idx_ptr, n, correction, OP: tl.constexpr, WRITE_INDEX: tl.constexpr,
                  BLOCK: tl.constexpr):
    """Reduce one row of n elements: sum, mean, max, min (values, and their index when WRITE_INDEX),
    argmax, argmin (the index: WRITE_INDEX must be set), var, std (R_STD), all, any. amax/amin launch
    max/min without WRITE_INDEX: they need no index tensor (idx_ptr is not touched) and track no
    indices; the values are the same either way, as the extreme value never depends on its index.
    all/any count the non-zero elements (NaN is non-zero, as in torch; x of any dtype) and store
    whether all / any are, in out's dtype (bool, or uint8 for a uint8 x)."""
    row = tl.program_id(0)
    base = row * n
    cols = tl.arange(0, BLOCK)
    if OP == 7 or OP == 8:
        count = tl.zeros((BLOCK,), dtype=tl.int32)
        for start in range(0, n, BLOCK):
            x = tl.load(x_ptr + base + start + cols, mask=start + cols < n, other=0).to(tl.float32)
            count += tl.where(x != 0.0, 1, 0)
        total = tl.sum(count, axis=0)
        if OP == 7:
            flag = total == n
        else:
            flag = total > 0
        tl.store(out_ptr + row, flag.to(out_ptr.dtype.element_ty))
    elif OP == 0 or OP == 1 or OP == 6 or OP == 9:
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for start in range(0, n, BLOCK):
            acc += tl.load(x_ptr + base + start + cols, mask=start + cols < n, other=0.0).to(tl.float32)
        total = tl.sum(acc, axis=0)
        if OP == 0:
            result = total
        elif OP == 1:
            result = total / n
        else:
            mean = total / n
            v = tl.zeros((BLOCK,), dtype=tl.float32)
            for start in range(0, n, BLOCK):
                mask = start + cols < n
                x = tl.load(x_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
                d = tl.where(mask, x - mean, 0.0)
                v += d * d
            squares = tl.sum(v, axis=0)
            divisor = tl.maximum(n - correction, 0.0)
            result = squares / divisor
            if OP == 9:
                result = tl.sqrt(result)
            if squares == float("inf"):
                # the squared deviations overflowed float32 (values past ~1e19; torch's CPU sums them in
                # float64): again, each deviation divided by the largest, the scale multiplied back
                # (scalar accumulators: block-long ones would be allocated on every launch, overflow
                # or not)
                peak = 0.0
                for start in range(0, n, BLOCK):
                    mask = start + cols < n
                    x = tl.load(x_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
                    peak = tl.maximum(peak, tl.max(tl.where(mask, tl.abs(x - mean), 0.0), axis=0))
                scale = tl.minimum(peak, 3.0e38)  # an infinite deviation stays inf
                scaled_squares = 0.0
                for start in range(0, n, BLOCK):
                    mask = start + cols < n
                    x = tl.load(x_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
                    d = tl.where(mask, (x - mean) / scale, 0.0)
                    scaled_squares += tl.sum(d * d, axis=0)
                spread = scaled_squares / divisor
                if OP == 9:
                    result = tl.sqrt(spread) * scale
                else:
                    result = spread * scale * scale
        tl.store(out_ptr + row, result.to(out_ptr.dtype.element_ty))
    else:
        tl.static_assert(WRITE_INDEX or OP == 2 or OP == 3, "argmax/argmin store indices: set WRITE_INDEX")
        if OP == 2 or OP == 4:
            fill = -float("inf")
        else:
            fill = float("inf")
        best = tl.full((BLOCK,), fill, tl.float32)
        if WRITE_INDEX:
            best_i = tl.zeros((BLOCK,), dtype=tl.int32)
        for start in range(0, n, BLOCK):
            mask = start + cols < n
            x = tl.load(x_ptr + base + start + cols, mask=mask, other=fill).to(tl.float32)
            if OP == 2 or OP == 4:
                better = (x > best) | ((x != x) & (best == best))
            else:
                better = (x < best) | ((x != x) & (best == best))
            if WRITE_INDEX:
                best_i = tl.where(better, start + cols, best_i)
            best = tl.where(better, x, best)
        if OP == 2 or OP == 4:
            m = tl.max(tl.where(best != best, float("inf"), best), axis=0)
        else:
            m = tl.min(tl.where(best != best, -float("inf"), best), axis=0)
        has_nan = tl.sum(tl.where(best != best, 1, 0), axis=0) > 0
        if OP == 2 or OP == 3:
            value = tl.where(has_nan, float("nan"), m)
            tl.store(out_ptr + row, value.to(out_ptr.dtype.element_ty))
        if WRITE_INDEX:
            # first index holding the extreme value (or the first NaN)
            hit = tl.where(has_nan, best != best, best == m)
            index = tl.min(tl.where(hit, best_i, 2147483647), axis=0)
            tl.store(idx_ptr + row, index.to(tl.int64))


@tl.jit
def norm_param_grad_kernel(
    g_ptr, x_ptr, mean_ptr, rstd_ptr, dw_ptr, db_ptr, rows, n,
    NEED_DW: tl.constexpr, NEED_DB: tl.constexpr, BLOCK: tl.constexpr,
):
    """Layer norm's weight and bias gradients for BLOCK columns (program_id(0)): dw = sum over rows of
    g * xhat, db = sum over rows of g, accumulated in float32 row by row. One launch for both, reading
    g and x in place (no (rows, n) scratch of g * xhat, no separate column sums)."""
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    dw = tl.zeros((BLOCK,), dtype=tl.float32)
    db = tl.zeros((BLOCK,), dtype=tl.float32)
    for row in range(0, rows):
        g = tl.load(g_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
        if NEED_DW:
            mean = tl.load(mean_ptr + row).to(tl.float32)
            rstd = tl.load(rstd_ptr + row).to(tl.float32)
            x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
            dw += g * ((x - mean) * rstd)
        if NEED_DB:
            db += g
    if NEED_DW:
        tl.store(dw_ptr + cols, dw.to(dw_ptr.dtype.element_ty), mask=mask)
    if NEED_DB:
        tl.store(db_ptr + cols, db.to(db_ptr.dtype.element_ty), mask=mask)


@tl.jit
def norm_backward_small_kernel(
    g_ptr, x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_ptr, db_ptr, rows, n,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, NEED_DX: tl.constexpr, NEED_DW: tl.constexpr,
    NEED_DB: tl.constexpr, CHECK: tl.constexpr, BLOCK: tl.constexpr,
):
    """The whole layer-norm backward of a few short rows (n <= BLOCK) in one program (grid (1,)): dx row
    by row as `norm_backward_kernel` computes it, and dw / db summed over the rows on the way, as
    `norm_param_grad_kernel` does. For small inputs one launch replaces two; many rows take those two
    (this one runs the rows one after another).
    CHECK: fault (`device_assert`) on a NaN/Inf in any input (grad, x, mean, rstd, weight, and the bias,
    which only this check reads), as `norm_kernel`'s CHECK does for the forward."""
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    if HAS_W:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        if CHECK:
            tl.device_assert(_finite(w), "NaN or Inf in the weight")
    if CHECK and HAS_B:
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.device_assert(_finite(b), "NaN or Inf in the bias")
    dw = tl.zeros((BLOCK,), dtype=tl.float32)
    db = tl.zeros((BLOCK,), dtype=tl.float32)
    for row in range(0, rows):
        mean = tl.load(mean_ptr + row).to(tl.float32)
        rstd = tl.load(rstd_ptr + row).to(tl.float32)
        g0 = tl.load(g_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
        if CHECK:
            tl.device_assert(_finite(g0) & _finite(x), "NaN or Inf in grad or x")
            tl.device_assert((mean - mean == 0.0) & (rstd - rstd == 0.0), "NaN or Inf in mean or rstd")
        if NEED_DX:
            g = g0
            if HAS_W:
                g = g0 * w
            xhat = tl.where(mask, (x - mean) * rstd, 0.0)
            c1 = tl.sum(g, axis=0) / n
            c2 = tl.sum(g * xhat, axis=0) / n
            dx = rstd * (g - c1 - ((x - mean) * rstd) * c2)
            tl.store(dx_ptr + row * n + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        if NEED_DW:
            dw += g0 * ((x - mean) * rstd)
        if NEED_DB:
            db += g0
    if NEED_DW:
        tl.store(dw_ptr + cols, dw.to(dw_ptr.dtype.element_ty), mask=mask)
    if NEED_DB:
        tl.store(db_ptr + cols, db.to(db_ptr.dtype.element_ty), mask=mask)


@tl.jit
def cat_pair_kernel(a_ptr, b_ptr, out_ptr, outer, a_inner, b_inner, a_stride, b_stride,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out (outer, a_inner + b_inner) = [a (outer, a_inner) | b (outer, b_inner)], of one dtype, out
    contiguous, a's and b's rows contiguous `a_stride` / `b_stride` elements apart (their elements per
    row when contiguous; more for a slice such as RoPE's halves `q[..., :d]`): `cat` of two tensors along
    a dim in one launch (a row holds everything from that dim on; one strided copy per input would be
    two launches), one BLOCK_M x BLOCK_N tile of the result per program. Element copies, so exact. Why
    tiles: a flat kernel found each lane's row and column by a division, over its whole block whatever
    the result's size (a RoPE half-swap of 2,048 elements ~55 us)."""
    width = a_inner + b_inner
    _, rows, cols, mask = _tile_lanes(outer, width, BLOCK_M, BLOCK_N)
    in_a = cols < a_inner
    x = tl.load(a_ptr + rows * a_stride + cols, mask=mask & in_a, other=0.0)
    y = tl.load(b_ptr + rows * b_stride + (cols - a_inner), mask=mask & (cols >= a_inner), other=0.0)
    tl.store(out_ptr + rows * width + cols, tl.where(in_a, x, y), mask=mask)


# ---------------------------------------------------------------- host-side input scan of the row fast paths


# Compile cost: `inputs_finite` is compiled once per tensor count (numba types a tuple by its length;
# the README demo uses four counts), so the scan itself is `_words_finite`, of int64 arguments only and
# compiled once for all counts, and `inputs_finite` is only the loop over the tuples: inlined at numba's
# IR level into `kernels.loss.inputs_plain` (its per-count entries then do not compile it again).


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _words_finite(address, count, mask, wide):
    """No NaN/Inf among the `count` contiguous floats at `address` (see `inputs_finite`)."""
    if wide:
        return _no_word_has_mask(numba.carray(as_pointer(address, np.uint32), count), np.uint32(mask))
    return _no_word_has_mask(numba.carray(as_pointer(address, np.uint16), count), np.uint16(mask))


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def inputs_finite(addresses, counts, mask, wide):
    """No NaN/Inf among `counts[i]` contiguous floats at each `addresses[i]`: the per-call input scan of
    a fast path that reads several tensors (a layer norm's x, weight and bias; its backward's six), as
    one compiled call instead of one per tensor. `mask` is the exponent mask of the dtype, `wide` 1 for
    32-bit words (float32), 0 for 16-bit ones (float16, bfloat16): the same test as `_finite_numba`."""
    for i in range(len(addresses)):
        if not _words_finite(addresses[i], counts[i], mask, wide):
            return False
    return True


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _no_word_has_mask(words, m):
    """No word of `words` has all the bits of `m` set (a word-by-word `_finite_numba` scan: the fast
    paths take tensors far below its chunk size)."""
    hits = 0
    for i in range(words.shape[0]):
        hits += (words[i] & m) == m
    return hits == 0


_finite_entries: dict[int, Callable] = {}


def inputs_finite_entry(count: int) -> Callable:
    """`inputs_finite`'s compiled entry for `count` tensors (numba's per-call typing skipped):
    `entry(addresses, counts, mask, wide)` with two int tuples of length `count`."""
    entry = _finite_entries.get(count)
    if entry is None:
        int64 = numba.types.int64
        signature = (numba.types.UniTuple(int64, count),) * 2 + (int64, int64)
        inputs_finite.compile(signature)
        entry = _finite_entries[count] = inputs_finite.overloads[signature].entry_point
    return entry
