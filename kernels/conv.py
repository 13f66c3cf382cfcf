"""Convolution as im2col + the op library's matmul, and its backward.

A 2-D convolution of x (N, C, H, W) with a weight (Cout, C/groups, KH, KW) is, per image, the product
of the column matrix col (OH*OW, C*KH*KW) (stored transposed, (C*KH*KW, OH*OW), so that im2col writes
rows) with the weight viewed as (Cout, C/groups*KH*KW) transposed;
`im2col_kernel` builds col (zeros where a tap falls in the padding), `matmul_kernel` multiplies (BLAS
tiles on the numba backend, float32 accumulation) and writes the (N, Cout, OH, OW) result through its
strides. The backward to the input multiplies the output gradient with the weight into a column
gradient and folds it back with `col2im_kernel`, a gather: each input element sums the column entries
of the taps that read it, so no two programs write one element (no atomics; any tensor-parallel split).

Kernel extents (KH, KW), strides, padding and dilation are runtime values, so one specialisation per
dtype serves every convolution geometry.
"""

from __future__ import annotations

import torch_rbln.dsl as tl

# Output positions per im2col row step, and input elements per col2im program.
IM2COL_BLOCK = 32
PLANE_BLOCK = 1024


@tl.jit
def im2col_kernel(
    x_ptr, col_ptr, H, W, OH, OW, KH, KW, sxn, sxc, sxh, sxw, scn, sck,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, BLOCK: tl.constexpr,
):
    """col[n, k, p] = x[n, c, oh*stride_h - pad_h + kh*dil_h, ow*stride_w - pad_w + kw*dil_w] for
    k = (c*KH + kh)*KW + kw and p = oh*OW + ow (contiguous along p; n and k through scn, sck), 0 in the
    padding. One program per (channel, image) copies rows of output positions: only adds and compares
    per element (a (position, column) tile that decomposed k and p per element measured ~20x slower).
    Grid (C, N)."""
    c = tl.program_id(0)
    n = tl.program_id(1)
    cols = tl.arange(0, BLOCK)
    x_base = x_ptr + n * sxn + c * sxc
    for kh in range(0, KH):
        for kw in range(0, KW):
            dst = col_ptr + n * scn + ((c * KH + kh) * KW + kw) * sck
            for oh in range(0, OH):
                ih = oh * stride_h - pad_h + kh * dil_h
                row_ok = (ih >= 0) & (ih < H)
                for ow0 in range(0, OW, BLOCK):
                    ow = ow0 + cols
                    iw = ow * stride_w - pad_w + kw * dil_w
                    live = ow < OW
                    v = tl.load(x_base + ih * sxh + iw * sxw, mask=live & row_ok & (iw >= 0) & (iw < W),
                                other=0.0)
                    tl.store(dst + oh * OW + ow, v.to(col_ptr.dtype.element_ty), mask=live)


@tl.jit
def col2im_kernel(
    gcol_ptr, gx_ptr, H, W, OH, OW, KH, KW, scn, sck,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, BLOCK: tl.constexpr, ZBLOCK: tl.constexpr,
):
    """gx[n, c] (a contiguous float32 (N, C, H, W) plane) = the sum, over the taps (kh, kw) and output
    positions (oh, ow), of gcol[n, (c*KH + kh)*KW + kw, oh*OW + ow] at the input element the tap read
    (gcol contiguous along positions; n and k through scn, sck). One program per (channel, image) owns
    its plane, so its read-add-writes race with no other program (and within one row step the input
    columns differ). Grid (C, N)."""
    c = tl.program_id(0)
    n = tl.program_id(1)
    C = tl.num_programs(0)
    plane = gx_ptr + (n * C + c) * H * W
    z = tl.arange(0, ZBLOCK)
    for start in range(0, H * W, ZBLOCK):
        tl.store(plane + start + z, tl.zeros((ZBLOCK,), dtype=tl.float32), mask=start + z < H * W)
    cols = tl.arange(0, BLOCK)
    for kh in range(0, KH):
        for kw in range(0, KW):
            src = gcol_ptr + n * scn + ((c * KH + kh) * KW + kw) * sck
            for oh in range(0, OH):
                ih = oh * stride_h - pad_h + kh * dil_h
                if (ih >= 0) & (ih < H):
                    for ow0 in range(0, OW, BLOCK):
                        ow = ow0 + cols
                        iw = ow * stride_w - pad_w + kw * dil_w
                        ok = (ow < OW) & (iw >= 0) & (iw < W)
                        g = tl.load(src + oh * OW + ow, mask=ok, other=0.0).to(tl.float32)
                        at = plane + ih * W + iw
                        tl.store(at, tl.load(at, mask=ok, other=0.0) + g, mask=ok)


@tl.jit
def channel_sum_kernel(x_ptr, out_ptr, N, P, sxn, sxc, sxp, BLOCK: tl.constexpr):
    """out[c] = sum over n, p of x[n, c, p] in float32 (the convolution's bias gradient). Grid (C,)."""
    c = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for n in range(0, N):
        base = x_ptr + n * sxn + c * sxc
        for start in range(0, P, BLOCK):
            acc += tl.load(base + (start + cols) * sxp, mask=start + cols < P, other=0.0).to(tl.float32)
    tl.store(out_ptr + c, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))
