"""Convolution as im2col + the op library's matmul, and its backward.

A 2-D convolution of x (N, C, H, W) with a weight (Cout, C/groups, KH, KW) is, per image, the product
of the column matrix col (OH*OW, C*KH*KW) with the weight viewed as (Cout, C/groups*KH*KW) transposed;
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

# Tile of im2col/col2im: positions x columns per loop step, and elements per col2im program.
IM2COL_P = 64
IM2COL_K = 32
COL2IM_BLOCK = 256
PLANE_BLOCK = 1024


@tl.jit
def im2col_kernel(
    x_ptr, col_ptr, H, W, OW, P, K, KH, KW, sxn, sxc, sxh, sxw,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    BLOCK_P: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """col[n, p, k] = x[n, c, oh*stride_h - pad_h + kh*dil_h, ow*stride_w - pad_w + kw*dil_w] for
    p = oh*OW + ow, k = (c*KH + kh)*KW + kw, 0 in the padding; col is contiguous (N, P, K).
    Grid (cdiv(P, BLOCK_P), N)."""
    pid_p = tl.program_id(0)
    n = tl.program_id(1)
    rp = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    oh = rp // OW
    ow = rp % OW
    rk = tl.arange(0, BLOCK_K)
    taps = KH * KW
    x_base = x_ptr + n * sxn
    col_base = col_ptr + n * P * K
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        c = kk // taps
        tap = kk % taps
        kh = tap // KW
        kw = tap % KW
        ih = oh[:, None] * stride_h - pad_h + kh[None, :] * dil_h
        iw = ow[:, None] * stride_w - pad_w + kw[None, :] * dil_w
        inside = (rp[:, None] < P) & (kk[None, :] < K)
        v = tl.load(x_base + c[None, :] * sxc + ih * sxh + iw * sxw,
                    mask=inside & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W), other=0.0)
        tl.store(col_base + rp[:, None] * K + kk[None, :], v.to(col_ptr.dtype.element_ty), mask=inside)


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
def transpose_nc_kernel(x_ptr, out_ptr, N, P, sxn, sxc, sxp, BLOCK: tl.constexpr):
    """out[c, n, p] = x[n, c, p] (out contiguous (C, N, P)): the output gradient laid out so that its
    (n, p) positions are one matmul dimension with one stride. Grid (N, C)."""
    n = tl.program_id(0)
    c = tl.program_id(1)
    cols = tl.arange(0, BLOCK)
    src = x_ptr + n * sxn + c * sxc
    dst = out_ptr + (c * N + n) * P
    for start in range(0, P, BLOCK):
        mask = start + cols < P
        v = tl.load(src + (start + cols) * sxp, mask=mask, other=0.0)
        tl.store(dst + start + cols, v, mask=mask)


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
