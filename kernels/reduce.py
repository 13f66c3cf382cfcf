"""Reduction over the middle axis of a contiguous (outer, r, inner) view.

Reductions over the last dims use the row kernel in `rows.py` (one program per row). Reductions over
leading or middle dims (`x.sum(0)`, `x.amax(1)` on an (N, C, L) tensor) would otherwise need a
transposing copy first; this kernel reads them in place: program (o, j) owns BLOCK consecutive inner
positions of outer slice o and walks the r reduced rows, so every load is a contiguous vector and the
accumulator is one float32 lane per output element. The op is a constexpr code shared with `rows.py`
(sum, mean, max, min, argmax, argmin, var) so each family compiles once per dtype and block.
"""

from __future__ import annotations

import torch_rbln.dsl as tl

from .rows import R_ALL, R_ANY, R_ARGMAX, R_ARGMIN, R_MAX, R_MEAN, R_MIN, R_STD, R_SUM, R_VAR

__all__ = ["R_ALL", "R_ANY", "R_ARGMAX", "R_ARGMIN", "R_MAX", "R_MEAN", "R_MIN", "R_STD", "R_SUM", "R_VAR",
           "isin_kernel", "middle_reduce_kernel"]


@tl.jit
def middle_reduce_kernel(
    x_ptr, out_ptr, idx_ptr, r, inner, correction, OP: tl.constexpr, BLOCK: tl.constexpr
):
    """out[o, j] = reduce over k < r of x[o, k, j]; indices (max/min/argmax/argmin) are k, int64;
    all/any: whether every / some x[o, k, j] is non-zero (NaN is), in out's dtype."""
    o = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inner
    base = o * r * inner
    if OP == 7 or OP == 8:
        count = tl.zeros((BLOCK,), dtype=tl.int32)
        for k in range(0, r):
            x = tl.load(x_ptr + base + k * inner + cols, mask=mask, other=0).to(tl.float32)
            count += tl.where(x != 0.0, 1, 0)
        if OP == 7:
            flag = count == r
        else:
            flag = count > 0
        tl.store(out_ptr + o * inner + cols, flag.to(out_ptr.dtype.element_ty), mask=mask)
    elif OP == 0 or OP == 1 or OP == 6 or OP == 9:
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for k in range(0, r):
            acc += tl.load(x_ptr + base + k * inner + cols, mask=mask, other=0.0).to(tl.float32)
        if OP == 0:
            result = acc
        elif OP == 1:
            result = acc / r
        else:
            mean = acc / r
            v = tl.zeros((BLOCK,), dtype=tl.float32)
            for k in range(0, r):
                d = tl.load(x_ptr + base + k * inner + cols, mask=mask, other=0.0).to(tl.float32) - mean
                v += d * d
            divisor = tl.maximum(r - correction, 0.0)
            result = v / divisor
            if OP == 9:  # std (R_STD): the root in float32, before the store rounds
                result = tl.sqrt(result)
            overflow = v == float("inf")
            if tl.max(overflow.to(tl.int32), axis=0) > 0:
                # some column's squared deviations overflowed float32 (as `reduce_kernel`): those
                # columns again, each deviation divided by the column's largest, the scale multiplied back
                peak = tl.zeros((BLOCK,), dtype=tl.float32)
                for k in range(0, r):
                    x = tl.load(x_ptr + base + k * inner + cols, mask=mask, other=0.0).to(tl.float32)
                    peak = tl.maximum(peak, tl.abs(x - mean))
                scale = tl.minimum(peak, 3.0e38)  # an infinite deviation stays inf
                w = tl.zeros((BLOCK,), dtype=tl.float32)
                for k in range(0, r):
                    x = tl.load(x_ptr + base + k * inner + cols, mask=mask, other=0.0).to(tl.float32)
                    d = (x - mean) / scale
                    w += d * d
                if OP == 9:
                    rescaled = tl.sqrt(w / divisor) * scale
                else:
                    rescaled = w / divisor * scale * scale
                result = tl.where(overflow, rescaled, result)
        tl.store(out_ptr + o * inner + cols, result.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        if OP == 2 or OP == 4:
            fill = -float("inf")
        else:
            fill = float("inf")
        best = tl.full((BLOCK,), fill, tl.float32)
        best_k = tl.zeros((BLOCK,), dtype=tl.int32)
        # A NaN wins and stays (torch propagates NaN and reports its first index); otherwise the first
        # strictly better value wins, so ties keep the lowest index as torch does.
        for k in range(0, r):
            x = tl.load(x_ptr + base + k * inner + cols, mask=mask, other=fill).to(tl.float32)
            if OP == 2 or OP == 4:
                better = (best == best) & ((x > best) | (x != x))
            else:
                better = (best == best) & ((x < best) | (x != x))
            best_k = tl.where(better, k, best_k)
            best = tl.where(better, x, best)
        if OP == 2 or OP == 3:
            tl.store(out_ptr + o * inner + cols, best.to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(idx_ptr + o * inner + cols, best_k.to(tl.int64), mask=mask)


@tl.jit
def isin_kernel(x_ptr, t_ptr, out_ptr, n, m, stride, INVERT: tl.constexpr, BLOCK: tl.constexpr):
    """out[i] = whether x[i * stride] equals one of the m contiguous test elements t (negated when
    INVERT), x and t of one dtype, compared in it (NaN equals nothing, -0.0 equals 0.0, as torch's
    `==`): one pass over the test elements per block of x. `torch.isin` with few test elements
    (Hugging Face's generate asks whether each sequence's last token, a strided column of the ids, is an
    end-of-sequence id every step)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets * stride, mask=inside, other=0)
    found = offsets < 0
    for j in range(0, m):
        found = found | (x == tl.load(t_ptr + j))
    if INVERT:
        found = found == 0
    tl.store(out_ptr + offsets, found, mask=inside)
