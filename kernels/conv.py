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
COL2IM_BLOCK = 256
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
    gcol_ptr, gx_ptr, C, H, W, OH, OW, K, KH, KW, sgn, sgc, sgh, sgw,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, BLOCK: tl.constexpr,
):
    """gx[n, c, ih, iw] = sum over the taps (kh, kw) whose output position (oh, ow) reads it of
    gcol[n, oh*OW + ow, (c*KH + kh)*KW + kw], in float32 (gcol contiguous (N, OH*OW, K), gx through
    its strides). Grid (cdiv(C*H*W, BLOCK), N)."""
    pid = tl.program_id(0)
    n = tl.program_id(1)
    r = pid * BLOCK + tl.arange(0, BLOCK)
    plane = H * W
    live = r < C * plane
    c = r // plane
    hw = r % plane
    ih = hw // W
    iw = hw % W
    P = OH * OW
    base = gcol_ptr + n * P * K
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for kh in range(0, KH):
        th = ih + pad_h - kh * dil_h
        th0 = tl.where(th >= 0, th, 0)
        oh = th0 // stride_h
        row_ok = (th >= 0) & (th0 % stride_h == 0) & (oh < OH)
        for kw in range(0, KW):
            tw = iw + pad_w - kw * dil_w
            tw0 = tl.where(tw >= 0, tw, 0)
            ow = tw0 // stride_w
            ok = live & row_ok & (tw >= 0) & (tw0 % stride_w == 0) & (ow < OW)
            g = tl.load(base + (oh * OW + ow) * K + (c * KH + kh) * KW + kw, mask=ok, other=0.0)
            acc += g.to(tl.float32)
    tl.store(gx_ptr + n * sgn + c * sgc + ih * sgh + iw * sgw, acc.to(gx_ptr.dtype.element_ty), mask=live)


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
