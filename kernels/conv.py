"""Convolution as im2col + the op library's matmul, and its backward.

A 2-D convolution of x (N, C, H, W) with a weight (Cout, C/groups, KH, KW) is, per image, the product
of the column matrix col (OH*OW, C*KH*KW) (stored transposed, (C*KH*KW, OH*OW), so that im2col writes
rows) with the weight viewed as (Cout, C/groups*KH*KW) transposed;
`im2col_kernel` builds col (zeros where a tap falls in the padding), `matmul_kernel` multiplies (BLAS
tiles on the numba backend, float32 accumulation) and writes the (N, Cout, OH, OW) result through its
strides. The backward to the input multiplies the output gradient with the weight into a column
gradient and folds it back with `col2im_kernel`: each program adds the column entries of its own
(image, channel) plane, so no two programs write one element (no atomics; any tensor-parallel split).
Both walk the output plane in tiles of (oh, ow), one strided box per tap.

Kernel extents (KH, KW), strides, padding and dilation are runtime values, so one specialisation per
dtype serves every convolution geometry.
"""

from __future__ import annotations

import torch_rbln.dsl as tl

from .elementwise import _plane_tile

# Input elements per step of col2im's zeroing (and of the bias gradient's channel sums).
PLANE_BLOCK = 1024


@tl.jit
def im2col_kernel(
    x_ptr, col_ptr, OH, OW, KH, KW, sxn, sxc, sxh, sxw, scn, sck, stride_h, stride_w, dil_h, dil_w,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """col[n, k, p] = x[n, c, oh*stride_h + kh*dil_h, ow*stride_w + kw*dil_w] for k = (c*KH + kh)*KW + kw
    and p = oh*OW + ow (contiguous along p; n and k through scn, sck), x already padded (the registry
    pads it with zeros first: every tap of an output position then lies inside it). One program per
    (channel, image) goes over the output plane in BLOCK_M x BLOCK_N tiles of (oh, ow), one box per tap.

    Why the padded input: the backend reads a masked load as a box (vector copies, one bounds check)
    only where the mask bounds the lanes from above; the padding's `ih >= 0` made every load element by
    element, with a check each: (8, 64, 32, 32) with 3 x 3 taps and padding 1 took ~7.8 ms by rows of
    the unpadded input (and as tiles of it), 3.3 ms as boxes of the padded one, its padding copy
    included (1 thread)."""
    c = tl.program_id(0)
    n = tl.program_id(1)
    x_base = x_ptr + n * sxn + c * sxc
    for t in range(0, tl.cdiv(OH, BLOCK_M) * tl.cdiv(OW, BLOCK_N)):
        oh, ow = _plane_tile(t, OW, BLOCK_M, BLOCK_N)
        live = (oh < OH) & (ow < OW)
        for kh in range(0, KH):
            for kw in range(0, KW):
                v = tl.load(x_base + (oh * stride_h + kh * dil_h) * sxh + (ow * stride_w + kw * dil_w) * sxw,
                            mask=live, other=0.0)
                dst = col_ptr + n * scn + ((c * KH + kh) * KW + kw) * sck
                tl.store(dst + oh * OW + ow, v.to(col_ptr.dtype.element_ty), mask=live)


@tl.jit
def col2im_kernel(
    gcol_ptr, gx_ptr, H, W, OH, OW, KH, KW, scn, sck, stride_h, stride_w, dil_h, dil_w,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ZBLOCK: tl.constexpr,
):
    """gx[n, c] (a contiguous float32 (N, C, H, W) plane of the padded input) = the sum, over the taps
    (kh, kw) and output positions (oh, ow), of gcol[n, (c*KH + kh)*KW + kw, oh*OW + ow] at the element
    the tap read (gcol contiguous along positions; n and k through scn, sck); the registry copies the
    plane's interior out. One program per (channel, image) owns its plane, so its read-add-writes race
    with no other program; it goes over the output plane in BLOCK_M x BLOCK_N tiles of (oh, ow), one box
    per tap (for one tap, the tile's elements are distinct, and affine in the tile). Grid (C, N)."""
    c = tl.program_id(0)
    n = tl.program_id(1)
    C = tl.num_programs(0)
    plane = gx_ptr + (n * C + c) * H * W
    z = tl.arange(0, ZBLOCK)
    for start in range(0, H * W, ZBLOCK):
        tl.store(plane + start + z, tl.zeros((ZBLOCK,), dtype=tl.float32), mask=start + z < H * W)
    for t in range(0, tl.cdiv(OH, BLOCK_M) * tl.cdiv(OW, BLOCK_N)):
        oh, ow = _plane_tile(t, OW, BLOCK_M, BLOCK_N)
        live = (oh < OH) & (ow < OW)
        for kh in range(0, KH):
            for kw in range(0, KW):
                src = gcol_ptr + n * scn + ((c * KH + kh) * KW + kw) * sck
                g = tl.load(src + oh * OW + ow, mask=live, other=0.0).to(tl.float32)
                at = plane + (oh * stride_h + kh * dil_h) * W + ow * stride_w + kw * dil_w
                tl.store(at, tl.load(at, mask=live, other=0.0) + g, mask=live)


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
