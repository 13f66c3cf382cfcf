"""Batch norm, max and average pooling (+ backwards), and gather / scatter / scatter_add along one dim.

Batch norm views its input as (N, C, P) through strides (P = the spatial dims collapsed), one program
per channel: the statistics, the running-stat update and the normalisation of a channel all happen in
its program, in float32. Pooling runs tiles of (image, channel) output planes; max and average
pooling's backwards scatter each output position's gradient into its window, one program per plane
(so no two programs write one element), into float32 planes of the padded input; adaptive pooling's
backward adds each output's window in turn.
Window extents, strides, padding and dilation are runtime values: one specialisation per dtype and
tile serves every pooling geometry.
"""

from __future__ import annotations

import torch_rbln.dsl as tl

from .elementwise import _plane_tile, _tile_lanes

BLOCK = 1024
SCATTER_BLOCK = 512  # most lanes of a scatter program (its columns)


@tl.jit
def batch_norm_kernel(
    x_ptr, w_ptr, b_ptr, rm_ptr, rv_ptr, y_ptr, mean_ptr, invstd_ptr, N, P,
    sxn, sxc, sxp, syn, syc, syp, momentum, eps, training, has_w, has_b, has_running, BLOCK: tl.constexpr,
):
    """y = x * (w * invstd) + (b - mean * w * invstd) for channel c = program 0 (torch's CPU form).
    training: mean and biased variance of the channel (two passes), saved as mean and invstd; with
    has_running the running stats move towards them (the variance unbiased). Else the running stats are
    the statistics. The flags are runtime values (0 or 1, one branch per program), so a model that
    alternates train and eval, or norms with and without affine parameters, compiles one
    specialisation per dtype and block: as constexprs they made up to eight."""
    c = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    count = N * P
    if training != 0:
        s = tl.zeros((BLOCK,), dtype=tl.float32)
        for n in range(0, N):
            base = x_ptr + n * sxn + c * sxc
            for start in range(0, P, BLOCK):
                s += tl.load(base + (start + cols) * sxp, mask=start + cols < P, other=0.0).to(tl.float32)
        mean = tl.sum(s, axis=0) / count
        v = tl.zeros((BLOCK,), dtype=tl.float32)
        for n in range(0, N):
            base = x_ptr + n * sxn + c * sxc
            for start in range(0, P, BLOCK):
                mask = start + cols < P
                x = tl.load(base + (start + cols) * sxp, mask=mask, other=0.0).to(tl.float32)
                d = tl.where(mask, x - mean, 0.0)
                v += d * d
        var_sum = tl.sum(v, axis=0)
        invstd = 1.0 / tl.sqrt(var_sum / count + eps)
        tl.store(mean_ptr + c, mean.to(mean_ptr.dtype.element_ty))
        tl.store(invstd_ptr + c, invstd.to(invstd_ptr.dtype.element_ty))
        if has_running != 0:
            rm = tl.load(rm_ptr + c).to(tl.float32)
            rv = tl.load(rv_ptr + c).to(tl.float32)
            tl.store(rm_ptr + c, (momentum * mean + (1.0 - momentum) * rm).to(rm_ptr.dtype.element_ty))
            unbiased = var_sum / (count - 1)
            tl.store(rv_ptr + c, (momentum * unbiased + (1.0 - momentum) * rv).to(rv_ptr.dtype.element_ty))
    else:
        mean = tl.load(rm_ptr + c).to(tl.float32)
        invstd = 1.0 / tl.sqrt(tl.load(rv_ptr + c).to(tl.float32) + eps)
    alpha = invstd
    if has_w != 0:
        alpha = invstd * tl.load(w_ptr + c).to(tl.float32)
    beta = -mean * alpha
    if has_b != 0:
        beta = tl.load(b_ptr + c).to(tl.float32) - mean * alpha
    for n in range(0, N):
        src = x_ptr + n * sxn + c * sxc
        dst = y_ptr + n * syn + c * syc
        for start in range(0, P, BLOCK):
            mask = start + cols < P
            x = tl.load(src + (start + cols) * sxp, mask=mask, other=0.0).to(tl.float32)
            tl.store(dst + (start + cols) * syp, (x * alpha + beta).to(y_ptr.dtype.element_ty), mask=mask)


@tl.jit
def batch_norm_backward_kernel(
    g_ptr, x_ptr, w_ptr, mean_ptr, invstd_ptr, gx_ptr, gw_ptr, gb_ptr, N, P,
    sgn, sgc, sgp, sxn, sxc, sxp, sdn, sdc, sdp, eps, training, has_w, need_gx, BLOCK: tl.constexpr,
):
    """Gradients of batch norm for channel c = program 0, in float32: gw = sum(dy * (x - mean)) * invstd,
    gb = sum(dy); training: gx = (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy * (x - mean))) * invstd
    * w (batch statistics); else gx = dy * invstd * w. mean/invstd: the saved statistics (training) or
    the running mean and variance (then invstd = 1 / sqrt(var + eps)). The flags (training, has_w,
    need_gx: 0 or 1) are runtime values tested outside the loops, so train and eval steps, with or without
    a weight, share one specialisation per dtype and block."""
    c = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    count = N * P
    mean = tl.load(mean_ptr + c).to(tl.float32)
    if training != 0:
        invstd = tl.load(invstd_ptr + c).to(tl.float32)
    else:
        invstd = 1.0 / tl.sqrt(tl.load(invstd_ptr + c).to(tl.float32) + eps)
    s_dy = tl.zeros((BLOCK,), dtype=tl.float32)
    s_dot = tl.zeros((BLOCK,), dtype=tl.float32)
    for n in range(0, N):
        gbase = g_ptr + n * sgn + c * sgc
        xbase = x_ptr + n * sxn + c * sxc
        for start in range(0, P, BLOCK):
            mask = start + cols < P
            dy = tl.load(gbase + (start + cols) * sgp, mask=mask, other=0.0).to(tl.float32)
            x = tl.load(xbase + (start + cols) * sxp, mask=mask, other=0.0).to(tl.float32)
            s_dy += dy
            s_dot += tl.where(mask, dy * (x - mean), 0.0)
    sum_dy = tl.sum(s_dy, axis=0)
    dot = tl.sum(s_dot, axis=0)
    tl.store(gw_ptr + c, (dot * invstd).to(gw_ptr.dtype.element_ty))
    tl.store(gb_ptr + c, sum_dy.to(gb_ptr.dtype.element_ty))
    w = 1.0
    if has_w != 0:
        w = tl.load(w_ptr + c).to(tl.float32)
    scale = invstd * w
    if need_gx != 0:
        if training != 0:
            k = dot * invstd * invstd / count
            grad_mean = sum_dy / count
            for n in range(0, N):
                gbase = g_ptr + n * sgn + c * sgc
                xbase = x_ptr + n * sxn + c * sxc
                dbase = gx_ptr + n * sdn + c * sdc
                for start in range(0, P, BLOCK):
                    mask = start + cols < P
                    dy = tl.load(gbase + (start + cols) * sgp, mask=mask, other=0.0).to(tl.float32)
                    x = tl.load(xbase + (start + cols) * sxp, mask=mask, other=0.0).to(tl.float32)
                    dx = (dy - grad_mean - (x - mean) * k) * scale
                    tl.store(dbase + (start + cols) * sdp, dx.to(gx_ptr.dtype.element_ty), mask=mask)
        else:
            for n in range(0, N):
                gbase = g_ptr + n * sgn + c * sgc
                dbase = gx_ptr + n * sdn + c * sdc
                for start in range(0, P, BLOCK):
                    mask = start + cols < P
                    dy = tl.load(gbase + (start + cols) * sgp, mask=mask, other=0.0).to(tl.float32)
                    dx = dy * scale
                    tl.store(dbase + (start + cols) * sdp, dx.to(gx_ptr.dtype.element_ty), mask=mask)


@tl.jit
def max_pool_kernel(
    x_ptr, y_ptr, idx_ptr, C, H, W, OH, OW, KH, KW, sxn, sxc, sxh, sxw, syn, syc, syp,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """y[n, c, oh, ow] = the max of the window of output position (oh, ow), idx its flat index
    ih*W + iw in the plane: the first maximum in window order, a NaN wins (torch's CPU rule). One
    BLOCK_M x BLOCK_N tile of (oh, ow) per program (grid (tiles, N*C)); y and idx share the strides
    (syn, syc, syp), p = oh*OW + ow. Why tiles: a flat block of output positions found each lane's
    (oh, ow) by a division, over its whole block whatever the plane's size."""
    nc = tl.program_id(1)
    n = nc // C
    c = nc % C
    _, oh, ow, live = _tile_lanes(OH, OW, BLOCK_M, BLOCK_N)
    base = x_ptr + n * sxn + c * sxc
    best = tl.full((BLOCK_M, BLOCK_N), -float("inf"), tl.float32)
    best_idx = tl.full((BLOCK_M, BLOCK_N), -1, tl.int64)
    for kh in range(0, KH):
        ih = oh * stride_h - pad_h + kh * dil_h
        row_ok = live & (ih >= 0) & (ih < H)
        for kw in range(0, KW):
            iw = ow * stride_w - pad_w + kw * dil_w
            ok = row_ok & (iw >= 0) & (iw < W)
            v = tl.load(base + ih * sxh + iw * sxw, mask=ok, other=-float("inf")).to(tl.float32)
            take = ok & ((v > best) | (v != v) | (best_idx < 0))
            best = tl.where(take, v, best)
            best_idx = tl.where(take, (ih * W + iw).to(tl.int64), best_idx)
    out = n * syn + c * syc + (oh * OW + ow) * syp
    tl.store(y_ptr + out, best.to(y_ptr.dtype.element_ty), mask=live)
    tl.store(idx_ptr + out, best_idx, mask=live)


@tl.jit
def _zero_plane(gx, H, W, sdh, sdw, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Zeros over the H x W plane at `gx` (strides sdh, sdw), tile by tile."""
    zero = tl.zeros((BLOCK_M, BLOCK_N), dtype=gx.dtype.element_ty)
    for t in range(0, tl.cdiv(H, BLOCK_M) * tl.cdiv(W, BLOCK_N)):
        ih, iw = _plane_tile(t, W, BLOCK_M, BLOCK_N)
        tl.store(gx + ih * sdh + iw * sdw, zero, mask=(ih < H) & (iw < W))


@tl.jit
def max_pool_backward_kernel(
    g_ptr, idx_ptr, gx_ptr, C, W, OH, OW, KH, KW, sgn, sgc, sgp, PH, PW, pad_h, pad_w,
    stride_h, stride_w, dil_h, dil_w, overlap, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Each output position (oh, ow) adds its gradient to the input element its index names, window
    offset by window offset, into gx: zeroed contiguous float32 planes (N*C, PH, PW) of the input padded
    so that every window lies inside (element (ih, iw) of the input at (ih + pad_h, iw + pad_w)); the
    registry copies the interior out. One program per (n, c) plane (grid (1, N*C)), going over its
    output positions in BLOCK_M x BLOCK_N tiles in order, so windows that overlap across tiles are
    added by one program, never two at once. g and idx share the strides (sgn, sgc, sgp).

    Why a scatter from the outputs into padded planes: for a fixed window offset, the element of an
    output tile is affine in the tile and, in the padded plane, always inside it, so each read-add-write
    is a box (the backend reads a mask bounded only from above as a box; `ih >= 0` made every access a
    checked one of its own). The gather it replaced (each input element finding the windows that hold
    it) divided each lane's position by the strides and read g and idx element by element: (8, 32, 32,
    32) took 18.9 ms against the CPU's 0.14. Elements a window does not choose add 0; where windows do
    not overlap (`overlap` 0: each stride at least its window's extent, the usual 2 x 2 / 2 pooling)
    each window's box is written (the gradient at the chosen element, zeros around it), not read."""
    nc = tl.program_id(1)
    n = nc // C
    c = nc % C
    plane = gx_ptr + nc * PH * PW
    gbase = n * sgn + c * sgc
    for t in range(0, tl.cdiv(OH, BLOCK_M) * tl.cdiv(OW, BLOCK_N)):
        oh, ow = _plane_tile(t, OW, BLOCK_M, BLOCK_N)
        live = (oh < OH) & (ow < OW)
        at = gbase + (oh * OW + ow) * sgp
        chosen = tl.load(idx_ptr + at, mask=live, other=-1)
        grad = tl.load(g_ptr + at, mask=live, other=0.0).to(tl.float32)
        for kh in range(0, KH):
            row = oh * stride_h + kh * dil_h  # in the padded plane
            for kw in range(0, KW):
                col = ow * stride_w + kw * dil_w
                hit = chosen == ((row - pad_h) * W + col - pad_w).to(tl.int64)
                target = plane + row * PW + col
                if overlap != 0:
                    current = tl.load(target, mask=live, other=0.0)
                    tl.store(target, current + tl.where(hit, grad, 0.0), mask=live)
                else:  # no other window holds these elements: written, not read and added to
                    tl.store(target, tl.where(hit, grad, 0.0), mask=live)


@tl.jit
def gather_kernel(
    x_ptr, idx_ptr, out_ptr, D1, D2, D3, sx0, sx1, sx2, sx3, si0, si1, si2, si3, sdim,
    DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """out[i] = x[i with coordinate DIM replaced by idx[i]] over the index's (D0, D1, D2, D3) positions
    (out contiguous); sx*/si*: strides of x / idx, sdim = x's stride along DIM. One BLOCK_M x BLOCK_N
    tile of dims 2 and 3 per program (grid axis 0: the tiles, axis 1: the index of dims 0 and 1), so
    idx and out are read and written in boxes and only x's reads go element by element. Why tiles: a
    flat block found each lane's four coordinates by six divisions (a (64, 64, 64) gather took 9.6 ms,
    the CPU 0.9)."""
    outer, i2, i3, live = _tile_lanes(D2, D3, BLOCK_M, BLOCK_N)
    i0 = outer // D1
    i1 = outer % D1
    j = tl.load(idx_ptr + i0 * si0 + i1 * si1 + i2 * si2 + i3 * si3, mask=live, other=0).to(tl.int64)
    if DIM == 0:
        src = j * sdim + i1 * sx1 + i2 * sx2 + i3 * sx3
    elif DIM == 1:
        src = i0 * sx0 + j * sdim + i2 * sx2 + i3 * sx3
    elif DIM == 2:
        src = i0 * sx0 + i1 * sx1 + j * sdim + i3 * sx3
    else:
        src = i0 * sx0 + i1 * sx1 + i2 * sx2 + j * sdim
    tl.store(out_ptr + (outer * D2 + i2) * D3 + i3, tl.load(x_ptr + src, mask=live, other=0), mask=live)


@tl.jit
def scatter_kernel(idx_ptr, src_ptr, out_ptr, size, inner, count, src_step, ADD: tl.constexpr,
                   BLOCK: tl.constexpr):
    """out (contiguous (outer, size, inner), holding the tensor scattered into) with, for each j <
    count in order, src[o, j, i] written (ADD: added in float32; the caller gives a half-precision
    scatter_add a float32 out) at out[o, idx[o, j, i], i]; idx and src contiguous
    (outer, count, inner), idx in [0, size) (checked by the caller); src_step 0: src is one value
    (scatter's `value=`), 1: a tensor. Program (o, b) owns columns [b * BLOCK, (b + 1) * BLOCK) of
    slice o: its lanes write distinct columns, and it walks j in order, so a repeated index keeps the
    last write (the sum in index order) as on the CPU, and no two programs write one element. Work is
    outer * count * inner: each index entry is read once."""
    o = tl.program_id(0)
    rb = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = rb < inner
    for j in range(0, count):
        k = (o * count + j) * inner + rb
        d = tl.load(idx_ptr + k, mask=live, other=0).to(tl.int64)
        at = (o * size + d) * inner + rb
        if ADD:
            value = tl.load(src_ptr + k * src_step, mask=live, other=0.0).to(tl.float32)
            total = tl.load(out_ptr + at, mask=live, other=0.0).to(tl.float32) + value
            tl.store(out_ptr + at, total.to(out_ptr.dtype.element_ty), mask=live)
        else:
            tl.store(out_ptr + at, tl.load(src_ptr + k * src_step, mask=live, other=0), mask=live)


@tl.jit
def _avg_divisor(oh, ow, H, W, KH, KW, stride_h, stride_w, pad_h, pad_w, divisor, count_pad):
    """torch's avg_pool2d divisor of output position (oh, ow): `divisor` when > 0 (divisor_override),
    else the window's size clipped to the padded input (count_pad) or to the input."""
    hstart = oh * stride_h - pad_h
    wstart = ow * stride_w - pad_w
    hend = tl.minimum(hstart + KH, H + pad_h)
    wend = tl.minimum(wstart + KW, W + pad_w)
    pool = (hend - hstart) * (wend - wstart)
    inside = (tl.minimum(hend, H) - tl.maximum(hstart, 0)) * (tl.minimum(wend, W) - tl.maximum(wstart, 0))
    counted = tl.where(count_pad != 0, pool, inside)
    return tl.where(divisor > 0, divisor, counted).to(tl.float32)


@tl.jit
def avg_pool_kernel(
    x_ptr, y_ptr, C, H, W, OH, OW, KH, KW, sxn, sxc, sxh, sxw, syn, syc, syp,
    stride_h, stride_w, pad_h, pad_w, divisor, count_pad, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """y[n, c, oh, ow] = the sum of the window of output position (oh, ow) over the input (padding adds
    0) divided by `_avg_divisor`, in float32; tiles of (oh, ow) as `max_pool_kernel`'s."""
    nc = tl.program_id(1)
    n = nc // C
    c = nc % C
    _, oh, ow, live = _tile_lanes(OH, OW, BLOCK_M, BLOCK_N)
    base = x_ptr + n * sxn + c * sxc
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kh in range(0, KH):
        ih = oh * stride_h - pad_h + kh
        row_ok = live & (ih >= 0) & (ih < H)
        for kw in range(0, KW):
            iw = ow * stride_w - pad_w + kw
            v = tl.load(base + ih * sxh + iw * sxw, mask=row_ok & (iw >= 0) & (iw < W), other=0.0)
            acc += v.to(tl.float32)
    div = _avg_divisor(oh, ow, H, W, KH, KW, stride_h, stride_w, pad_h, pad_w, divisor, count_pad)
    tl.store(y_ptr + n * syn + c * syc + (oh * OW + ow) * syp, (acc / div).to(y_ptr.dtype.element_ty),
             mask=live)


@tl.jit
def avg_pool_backward_kernel(
    g_ptr, gx_ptr, C, H, W, OH, OW, KH, KW, sgn, sgc, sgp, PH, PW,
    stride_h, stride_w, pad_h, pad_w, divisor, count_pad, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Each output position adds g / its `_avg_divisor` to every element of its window, into zeroed
    float32 planes of the padded input, as `max_pool_backward_kernel` scatters (one program per plane,
    tiles of outputs in order, boxes; the registry copies the interior out: what lands in the padding
    is dropped). (8, 32, 32, 32) took 18.5 ms as a gather."""
    nc = tl.program_id(1)
    n = nc // C
    c = nc % C
    plane = gx_ptr + nc * PH * PW
    gbase = g_ptr + n * sgn + c * sgc
    for t in range(0, tl.cdiv(OH, BLOCK_M) * tl.cdiv(OW, BLOCK_N)):
        oh, ow = _plane_tile(t, OW, BLOCK_M, BLOCK_N)
        live = (oh < OH) & (ow < OW)
        grad = tl.load(gbase + (oh * OW + ow) * sgp, mask=live, other=0.0).to(tl.float32)
        divisor_here = _avg_divisor(oh, ow, H, W, KH, KW, stride_h, stride_w, pad_h, pad_w, divisor,
                                    count_pad)
        delta = grad / divisor_here
        for kh in range(0, KH):
            for kw in range(0, KW):
                target = plane + (oh * stride_h + kh) * PW + ow * stride_w + kw
                tl.store(target, tl.load(target, mask=live, other=0.0) + delta, mask=live)


@tl.jit
def adaptive_avg_pool_kernel(
    x_ptr, y_ptr, C, H, W, OH, OW, KH, KW, sxn, sxc, sxh, sxw, syn, syc, syp,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Adaptive average pooling: y[n, c, oh, ow] = the mean of rows [oh*H // OH, ceil((oh+1)*H / OH)) and
    columns likewise (torch's windows, which differ in size when OH does not divide H), summed in float32
    row by row as torch's CPU kernel sums them. KH, KW: the largest window. Tiles of (oh, ow) fitted to
    the output plane, as `max_pool_kernel`'s (grid (tiles, N*C)): a flat 256-lane block ran every window
    step over all its lanes, 9 of them live for a 3 x 3 output (9.2 ms for (8, 32, 32, 32))."""
    nc = tl.program_id(1)
    n = nc // C
    c = nc % C
    _, oh, ow, live = _tile_lanes(OH, OW, BLOCK_M, BLOCK_N)
    h0 = (oh * H) // OH
    h1 = ((oh + 1) * H + OH - 1) // OH
    w0 = (ow * W) // OW
    w1 = ((ow + 1) * W + OW - 1) // OW
    base = x_ptr + n * sxn + c * sxc
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kh in range(0, KH):
        ih = h0 + kh
        row_ok = live & (ih < h1)
        for kw in range(0, KW):
            iw = w0 + kw
            v = tl.load(base + ih * sxh + iw * sxw, mask=row_ok & (iw < w1), other=0.0)
            acc += v.to(tl.float32)
    # divided by the window's height, then its width, as torch's CPU kernel divides
    mean = acc / (h1 - h0).to(tl.float32) / (w1 - w0).to(tl.float32)
    tl.store(y_ptr + n * syn + c * syc + (oh * OW + ow) * syp, mean.to(y_ptr.dtype.element_ty), mask=live)


@tl.jit
def adaptive_avg_pool_backward_kernel(
    g_ptr, gx_ptr, C, H, W, OH, OW, sgn, sgc, sgh, sgw, sdn, sdc, sdh, sdw,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """gx[n, c] = 0, then each output position (oh, ow), in row-major order, adds g / the window's
    height / its width to every element of its window (rows [oh*H // OH, ceil((oh+1)*H / OH)), columns
    likewise): torch's CPU kernel's arithmetic and order, so float32 results are its bits. One program
    per (n, c) plane (grid (1, N*C)); a window is read and written in BLOCK_M x BLOCK_N boxes (powers of
    two covering the largest window, or tiles of it). The gather it replaced (each input element
    finding its windows, element by element) took 38 ms for (8, 32, 32, 32) pooled to 3 x 3."""
    nc = tl.program_id(1)
    n = nc // C
    c = nc % C
    gx = gx_ptr + n * sdn + c * sdc
    _zero_plane(gx, H, W, sdh, sdw, BLOCK_M, BLOCK_N)
    gbase = g_ptr + n * sgn + c * sgc
    rows = tl.arange(0, BLOCK_M)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    for oh in range(0, OH):
        h0 = (oh * H) // OH
        h1 = ((oh + 1) * H + OH - 1) // OH
        for ow in range(0, OW):
            w0 = (ow * W) // OW
            w1 = ((ow + 1) * W + OW - 1) // OW
            grad = tl.load(gbase + oh * sgh + ow * sgw).to(tl.float32)
            delta = grad / (h1 - h0).to(tl.float32) / (w1 - w0).to(tl.float32)
            for r0 in range(h0, h1, BLOCK_M):
                ih = r0 + rows
                for c0 in range(w0, w1, BLOCK_N):
                    iw = c0 + cols
                    ok = (ih < h1) & (iw < w1)
                    target = gx + ih * sdh + iw * sdw
                    current = tl.load(target, mask=ok, other=0.0).to(tl.float32)
                    tl.store(target, (current + delta).to(gx_ptr.dtype.element_ty), mask=ok)
