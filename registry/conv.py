"""The CNN family: convolution, batch norm, max pooling (+ backwards), gather, scatter and scatter_add.

Kernels: `kernels/conv.py` (im2col / col2im around the op library's matmul) and `kernels/cnn.py`
(batch norm, pooling, gather, scatter_add). Every implementation reads its tensors through their
strides (channels-last and other permuted layouts need no copy, except where a matmul operand must have
one stride over two dims) and returns results in the layout torch's CPU kernels give. What the kernels
do not cover raises `Decline` with the reason: the CPU fallback then runs (and raises torch's own
error for invalid calls).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from torch_rbln import _dlpack, _memory

from ._base import FLOATS, Decline, require_float
from ._launch import kernel_module as _k
from ._launch import launch_grid as _run
from ._ops import cast_copy, contiguous, empty
from ._ops import fill_floats as _ops_fill
from .geometry import I32, cdiv, column_block, next_power_of_2, small_tile_shape
from .matmul import launch as _matmul_launch

_HALVES = (torch.float16, torch.bfloat16)


# ---------------------------------------------------------------- launching and layouts


def _pair(value, name: str) -> tuple[int, int]:
    values = [value] if isinstance(value, int) else list(value)
    if len(values) == 1:
        values *= 2
    if len(values) != 2 or not all(isinstance(v, int) for v in values):
        raise Decline(f"{name} {value!r}")
    return values[0], values[1]


def _channels_last(t: torch.Tensor) -> bool:
    return t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)


def _alloc(shape: Sequence[int], dtype: torch.dtype, index: int, channels_last: bool) -> torch.Tensor:
    """A fresh rbln tensor, row-major or (4-D) channels-last."""
    if not channels_last:
        return empty(shape, dtype, index)
    n, c, h, w = shape
    return _memory.empty_strided(shape, (h * w * c, 1, w * c, c), dtype, index)


def _as_nchw(t: torch.Tensor) -> tuple[int, int, int, int, int, int, int, int]:
    """(N, C, H, W, sn, sc, sh, sw) of a 3-D (N, C, L: H = 1) or 4-D tensor."""
    if t.dim() == 3:
        n, c, w = t.shape
        sn, sc, sw = t.stride()
        return n, c, 1, w, sn, sc, 0, sw
    n, c, h, w = t.shape
    return (n, c, h, w, *t.stride())


def _plane(t: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
    """(t or a contiguous copy, sn, sc, sp): t addressed as (N, C, P) with P the dims after the second
    collapsed to one stride (a copy when they do not collapse)."""
    for _attempt in range(2):
        sizes, strides = t.shape[2:], t.stride()[2:]
        step = None
        ok = True
        for size, stride in zip(reversed(sizes), reversed(strides), strict=True):
            if size == 1:
                continue
            if step is None:
                step, expected = stride, stride * size
            elif stride != expected:
                ok = False
                break
            else:
                expected = stride * size
        if ok:
            return t, t.stride(0), t.stride(1), 1 if step is None else step
        t = contiguous(t)
    raise AssertionError("a contiguous tensor collapses")  # pragma: no cover


def _same_floats(*tensors: torch.Tensor | None) -> torch.dtype:
    dtype = tensors[0].dtype
    require_float(dtype)
    for t in tensors[1:]:
        if t is not None and t.dtype != dtype:
            raise Decline("mixed dtypes")
    return dtype


# ---------------------------------------------------------------- convolution

def _conv_geometry(x, weight, stride, padding, dilation, groups, *, input_shape=None):
    """The (direct) convolution's geometry as a dict, or Decline for what the kernels do not cover.
    `input_shape`: the input's shape when `x` is not that input (a transposed convolution's)."""
    shape = list(x.shape if input_shape is None else input_shape)
    if len(shape) not in (3, 4) or weight.dim() != len(shape):
        raise Decline(f"{len(shape) - 2}-d convolution (1-d and 2-d only)")
    one_d = len(shape) == 3
    stride, padding, dilation = (list(v) for v in (stride, padding, dilation))
    if one_d:
        stride, padding, dilation = [1] + stride, [0] + padding, [1] + dilation
        shape.insert(2, 1)
    sh, sw = _pair(stride, "stride")
    ph, pw = _pair(padding, "padding")
    dh, dw = _pair(dilation, "dilation")
    N, C, H, W = shape
    Cout, Cg, KH, KW, *_ = _as_nchw(weight)
    if min(sh, sw, dh, dw, groups) <= 0 or min(ph, pw) < 0:
        raise Decline("non-positive stride, dilation or groups, or negative padding")
    if Cg * groups != C or Cout % groups or Cout == 0 or N == 0:
        raise Decline("channel counts do not match the groups")
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    if OH <= 0 or OW <= 0:
        raise Decline("kernel larger than the padded input")
    P, K = OH * OW, C * KH * KW
    if N * P * K >= I32:
        raise Decline("column matrix over 2^31 elements")
    pointwise = KH == KW == 1 and sh == sw == 1 and ph == pw == 0
    return dict(one_d=one_d, N=N, C=C, H=H, W=W, Cout=Cout, Cg=Cg, KH=KH, KW=KW, OH=OH, OW=OW, P=P, K=K,
                G=groups, sh=sh, sw=sw, ph=ph, pw=pw, dh=dh, dw=dw, pointwise=pointwise,
                input_shape=shape if not one_d else [N, C, W])


def _transposed_geometry(x, weight, stride, padding, dilation, output_padding, groups) -> dict:
    """A transposed convolution of `x` is the input gradient of the direct convolution whose output has
    x's shape: that convolution's geometry, its input being the transposed convolution's result
    (`input_shape`). torch sizes that result (H - 1) * stride - 2 * padding + dilation * (K - 1) +
    output_padding + 1 per spatial dim."""
    if x.dim() not in (3, 4) or weight.dim() != x.dim():
        raise Decline(f"{x.dim() - 2}-d convolution (1-d and 2-d only)")
    spatial = x.dim() - 2
    params = [list(v) for v in (stride, padding, dilation, output_padding)]
    if any(len(v) != spatial for v in params) or not all(isinstance(i, int) for v in params for i in v):
        raise Decline("convolution parameters do not match the input's dims")
    stride, padding, dilation, output_padding = params
    if any(p < 0 or p >= max(s, d) for p, s, d in zip(output_padding, stride, dilation, strict=True)):
        raise Decline("output_padding not below the stride or the dilation")  # torch's error, from the CPU
    sizes = [(size - 1) * s - 2 * p + d * (k - 1) + o + 1 for size, s, p, d, k, o in zip(
        x.shape[2:], stride, padding, dilation, weight.shape[2:], output_padding, strict=True)]
    shape = [x.shape[0], weight.shape[1] * groups, *sizes]
    if min(sizes) <= 0:
        raise Decline("transposed convolution output would be empty")
    g = _conv_geometry(x, weight, stride, padding, dilation, groups, input_shape=shape)
    if _output_shape(g) != list(x.shape):
        # output_padding at or over the stride (allowed below the dilation): the direct convolution of
        # the result would not give back x's size, so this is not its input gradient
        raise Decline("output_padding at or over the stride")
    return g


def _output_shape(g: dict) -> list[int]:
    return [g["N"], g["Cout"], g["OW"]] if g["one_d"] else [g["N"], g["Cout"], g["OH"], g["OW"]]


def _padded(x: torch.Tensor, g: dict) -> torch.Tensor:
    """x as a 4-d (N, C, H, W) tensor with `g`'s padding made real: a zeroed (N, C, H + 2ph, W + 2pw)
    copy (x itself, 4-d, without padding), so that every tap of every output position lies inside it
    and im2col reads it in boxes (see `im2col_kernel`)."""
    x4 = x.unsqueeze(2) if x.dim() == 3 else x
    ph, pw = g["ph"], g["pw"]
    if ph == pw == 0:
        return x4
    N, C, H, W = x4.shape
    padded = _ops_fill(empty([N, C, H + 2 * ph, W + 2 * pw], x.dtype, x.get_device()), 0.0)
    from ._copy import copy_into

    copy_into(x4, padded[:, :, ph:ph + H, pw:pw + W])
    return padded


def _im2col(x: torch.Tensor, g: dict, dtype: torch.dtype, *, images_inner: bool = False) -> torch.Tensor:
    """The transposed column matrix of x, contiguous in `dtype`: (N, K, P), or (K, N, P) with
    `images_inner` (the weight gradient's operand: (n, p) one dim with one stride)."""
    N, K, P = g["N"], g["K"], g["P"]
    shape, (scn, sck) = ([K, N, P], (P, N * P)) if images_inner else ([N, K, P], (K * P, P))
    col = empty(shape, dtype, x.get_device())
    source = _padded(x, g)
    _, _, _, _, sxn, sxc, sxh, sxw = _as_nchw(source)
    _, block_m, block_n = _output_tiles(g["OH"], g["OW"])
    _run(_k("conv").im2col_kernel, (g["C"], N),
         (source, col, g["OH"], g["OW"], g["KH"], g["KW"], sxn, sxc, sxh, sxw, scn, sck,
          g["sh"], g["sw"], g["dh"], g["dw"]), BLOCK_M=block_m, BLOCK_N=block_n)
    return col


def _direct(x, weight, bias, g: dict, dtype: torch.dtype) -> torch.Tensor:
    """The direct convolution of geometry `g`: per group, one batched matmul over the images of the
    column matrix (the input itself for a 1x1 stride-1 unpadded convolution) with the weight, the bias
    added in the matmul's epilogue, written straight into the (N, Cout, OH, OW) result."""
    out = _alloc(_output_shape(g), dtype, x.get_device(), _channels_last(x))
    weight = contiguous(weight)
    G, Coutg, Kg, P = g["G"], g["Cout"] // g["G"], g["K"] // g["G"], g["P"]
    _, son, soc, sop = _plane(out)
    # out[n] (Cout, P) = weight (Cout, K) @ col[n] (K, P): every operand row-major, as BLAS likes them
    if g["pointwise"]:
        col, scn, sck, scp = _plane(x)
        step = g["Cg"]
    else:
        col, (scn, sck, scp), step = _im2col(x, g, dtype), (P * g["K"], P, 1), Kg
    for group in range(G):
        _matmul_launch(
            weight.narrow(0, group * Coutg, Coutg), col.narrow(1, group * step, step),
            out.narrow(1, group * Coutg, Coutg),
            None if bias is None else bias.narrow(0, group * Coutg, Coutg),
            Coutg, P, Kg, (0, Kg, 1), (scn, sck, scp), (son, soc, sop),
            (0, 0) if bias is None else (bias.stride(0), 0), 1.0, 1.0, g["N"])
    return out


def _input_gradient(grad, weight, g: dict, dtype: torch.dtype, channels_last: bool) -> torch.Tensor:
    """The input gradient of the direct convolution `g` (input shape `g["input_shape"]`): per group,
    grad (N, Cout, P) times the weight into a float32 column gradient, folded back by col2im
    (a 1x1 stride-1 convolution: one matmul straight into the result)."""
    index = grad.get_device()
    weight = contiguous(weight)
    G, Coutg, Cg, Kg, P, N = g["G"], g["Cout"] // g["G"], g["Cg"], g["K"] // g["G"], g["P"], g["N"]
    grad, sgn, sgc, sgp = _plane(grad)
    grad_input = _alloc(g["input_shape"], dtype, index, channels_last)
    if g["pointwise"]:
        _, sdn, sdc, sdp = _plane(grad_input)
        for group in range(G):
            # gx[n, c, p] = sum_co w[co, c] * grad[n, co, p]
            _matmul_launch(
                weight.narrow(0, group * Coutg, Coutg),
                grad.narrow(1, group * Coutg, Coutg), grad_input.narrow(1, group * Cg, Cg), None,
                Cg, P, Coutg, (0, 1, Kg), (sgn, sgc, sgp), (sdn, sdc, sdp), (0, 0), 1.0, 0.0, N)
        return grad_input
    gcol = empty([N, g["K"], P], torch.float32, index)
    for group in range(G):
        # gcol[n] (K, P) = weight^T (K, Cout) @ grad[n] (Cout, P)
        _matmul_launch(
            weight.narrow(0, group * Coutg, Coutg), grad.narrow(1, group * Coutg, Coutg),
            gcol.narrow(1, group * Kg, Kg), None,
            Kg, P, Coutg, (0, 1, Kg), (sgn, sgc, sgp), (P * g["K"], P, 1), (0, 0), 1.0, 0.0, N)
    H, W, ph, pw = g["H"], g["W"], g["ph"], g["pw"]
    # col2im adds into float32 planes of the padded input; the result is their interior
    direct = dtype == torch.float32 and grad_input.is_contiguous() and ph == pw == 0
    planes = grad_input if direct else empty([N, g["C"], H + 2 * ph, W + 2 * pw], torch.float32, index)
    kernels = _k("conv")
    _, block_m, block_n = _output_tiles(g["OH"], g["OW"])
    _run(kernels.col2im_kernel, (g["C"], N),
         (gcol, planes, H + 2 * ph, W + 2 * pw, g["OH"], g["OW"], g["KH"], g["KW"], g["K"] * P, P,
          g["sh"], g["sw"], g["dh"], g["dw"]), BLOCK_M=block_m, BLOCK_N=block_n, ZBLOCK=kernels.PLANE_BLOCK)
    if not direct:
        from ._copy import copy_into

        interior = planes[:, :, ph:ph + H, pw:pw + W]
        copy_into(interior[:, :, 0] if g["one_d"] else interior, grad_input)
    return grad_input


def _weight_gradient(grad, x, weight_shape, g: dict, dtype: torch.dtype) -> torch.Tensor:
    """The weight gradient of the direct convolution `g` of input x: the output gradient laid out
    (Cout, N*P) times the column matrix (N*P, K), one matmul per group over all images."""
    from ._copy import copy_into

    index = x.get_device()
    G, Coutg, Cg, Kg, P, N = g["G"], g["Cout"] // g["G"], g["Cg"], g["K"] // g["G"], g["P"], g["N"]
    grad, sgn, sgc, sgp = _plane(grad)
    grad_weight = empty(weight_shape, dtype, index)
    # the output gradient as (Cout, N, P): its (n, p) positions one matmul dim with one stride
    rows = empty([g["Cout"], N, P], dtype, index)
    copy_into(grad.as_strided((N, g["Cout"], P), (sgn, sgc, sgp)), rows.permute(1, 0, 2))
    if g["pointwise"]:
        cols = empty([g["C"], N, P], dtype, index)
        xv, sxn, sxc, sxp = _plane(x)
        copy_into(xv.as_strided((N, g["C"], P), (sxn, sxc, sxp)), cols.permute(1, 0, 2))
        col, col_step = cols, Cg
    else:
        col, col_step = _im2col(x, g, dtype, images_inner=True), Kg
    for group in range(G):
        _matmul_launch(
            rows.narrow(0, group * Coutg, Coutg), col.narrow(0, group * col_step, col_step),
            grad_weight.narrow(0, group * Coutg, Coutg), None,
            Coutg, Kg, N * P, (0, N * P, 1), (0, 1, N * P), (0, Kg, 1), (0, 0), 1.0, 0.0, 1)
    return grad_weight


def _plane_block(p: int, largest: int) -> int:
    """The lanes of a per-channel kernel that walks each image's `p` positions in blocks:
    `geometry.column_block`'s bucket of p (16, 64, 256, 1,024: a few specialisations), at most
    `largest`. A fixed 1,024-lane block ran 64 lanes in 1,024 over 8 x 8 planes, for every image:
    batch norm of (64, 64, 8, 8) took 5.2 ms (the CPU 0.8)."""
    return min(column_block(p), largest)


def _channel_sum(grad, channels: int, dtype: torch.dtype) -> torch.Tensor:
    grad, sgn, sgc, sgp = _plane(grad)
    n, p = grad.shape[0], math.prod(grad.shape[2:])
    out = empty([channels], dtype, grad.get_device())
    kernels = _k("conv")
    _run(kernels.channel_sum_kernel, (channels, 1), (grad, out, n, p, sgn, sgc, sgp),
         BLOCK=_plane_block(p, kernels.PLANE_BLOCK))
    return out


def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """aten::convolution for 1-d and 2-d inputs, direct (`_direct`) or transposed: the input gradient
    of the direct convolution whose output has x's shape (`_input_gradient`), then the bias added per
    channel."""
    dtype = _same_floats(x, weight, bias)
    if not transposed:
        return _direct(x, weight, bias, _conv_geometry(x, weight, stride, padding, dilation, groups), dtype)
    g = _transposed_geometry(x, weight, stride, padding, dilation, output_padding, groups)
    out = _input_gradient(x, weight, g, dtype, _channels_last(x))
    if bias is not None:
        from .elementwise import binary

        binary("add", out, bias.view(-1, *[1] * (x.dim() - 2)), inplace=True)
    return out


def convolution_backward(grad, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
                         groups, output_mask):
    """aten::convolution_backward: (grad_input, grad_weight, grad_bias), each only where output_mask
    asks. Direct: `_input_gradient`, `_weight_gradient` and a per-channel sum. Transposed (a direct
    convolution D with x as D's output gradient): grad_input is D applied to grad, grad_weight is D's
    weight gradient with grad as D's input and x as its output gradient."""
    dtype = _same_floats(grad, x, weight)
    if transposed:
        g = _transposed_geometry(x, weight, stride, padding, dilation, output_padding, groups)
        if list(grad.shape) != g["input_shape"]:
            raise Decline("grad_output shape does not match the convolution")
        grad_input = _direct(grad, weight, None, g, dtype) if output_mask[0] else None
        grad_weight = _weight_gradient(x, grad, weight.shape, g, dtype) if output_mask[1] else None
        grad_bias = _channel_sum(grad, grad.shape[1], dtype) if output_mask[2] else None
        if grad_input is not None and _channels_last(x) != _channels_last(grad_input):
            from ._copy import copy_into

            laid_out = _alloc(x.shape, dtype, x.get_device(), _channels_last(x))
            copy_into(grad_input, laid_out)
            grad_input = laid_out
        return grad_input, grad_weight, grad_bias
    g = _conv_geometry(x, weight, stride, padding, dilation, groups)
    if list(grad.shape) != _output_shape(g):
        raise Decline("grad_output shape does not match the convolution")
    grad_input = _input_gradient(grad, weight, g, dtype, _channels_last(x)) if output_mask[0] else None
    grad_weight = _weight_gradient(grad, x, weight.shape, g, dtype) if output_mask[1] else None
    grad_bias = _channel_sum(grad, g["Cout"], dtype) if output_mask[2] else None
    return grad_input, grad_weight, grad_bias


# ---------------------------------------------------------------- batch norm

def _check_params(x, *params) -> torch.dtype:
    """The statistics' dtype; Decline unless every parameter is (C,) of x's dtype, or float32 with a
    half-precision x (torch's mixed form; other mixes are torch errors)."""
    require_float(x.dtype)
    if x.dim() < 2 or x.numel() == 0:
        raise Decline("batch norm of fewer than 2 dims or an empty tensor")
    dtype = next((p.dtype for p in params if p is not None), x.dtype)
    if dtype != x.dtype and not (dtype == torch.float32 and x.dtype in _HALVES):
        raise Decline("mixed dtypes")
    for p in params:
        if p is not None and (p.dtype != dtype or list(p.shape) != [x.shape[1]]):
            raise Decline("parameter dtype or shape")
    return dtype


def _dense(parameter: torch.Tensor | None) -> torch.Tensor | None:
    """A (C,) parameter as the batch-norm kernels read it: contiguous (a copy of a strided view)."""
    return parameter if parameter is None else contiguous(parameter)


def batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    """aten::native_batch_norm (and the `_native_batch_norm_legit` forms): (out, save_mean, save_invstd);
    training updates the running stats in place. One program per channel."""
    dtype = _check_params(x, weight, bias, running_mean, running_var)
    has_running = running_mean is not None and running_var is not None
    if not training and not has_running:
        raise Decline("eval without running stats")
    if (running_mean is None) != (running_var is None):
        raise Decline("only one running stat")
    N, C = x.shape[0], x.shape[1]
    P = x.numel() // (N * C)
    if training and N * P <= 1:
        raise Decline("one value per channel")
    if training and has_running and not (running_mean.is_contiguous() and running_var.is_contiguous()):
        raise Decline("strided running statistics")  # (updated in place: the kernel writes them densely)
    # the kernel reads the (C,) parameters densely: a strided view (every other element of a buffer)
    # read as one gave wrong results
    weight, bias = _dense(weight), _dense(bias)
    if not training and has_running:
        running_mean, running_var = _dense(running_mean), _dense(running_var)
    index = x.get_device()
    out = _alloc(x.shape, x.dtype, index, _channels_last(x))
    xv, sxn, sxc, sxp = _plane(x)
    _, syn, syc, syp = _plane(out)
    stats = [C] if training else [0]
    mean, invstd = empty(stats, dtype, index), empty(stats, dtype, index)
    if P == 1:  # (N, C) (BatchNorm1d): N images of one position walked as one image of N positions
        N, P, (sxn, sxp), (syn, syp) = 1, N, (0, sxn), (0, syn)
    kernels = _k("cnn")
    _run(kernels.batch_norm_kernel, (C, 1),
         (xv, weight if weight is not None else xv, bias if bias is not None else xv,
          running_mean if has_running else mean, running_var if has_running else invstd, out,
          mean if training else xv, invstd if training else xv, N, P, sxn, sxc, sxp, syn, syc, syp,
          float(momentum), float(eps), int(bool(training)), int(weight is not None), int(bias is not None),
          int(has_running)),
         BLOCK=_plane_block(P, kernels.BLOCK))
    return out, mean, invstd


def batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    """aten::_native_batch_norm_legit.no_stats."""
    return batch_norm(x, weight, bias, None, None, training, momentum, eps)


def batch_norm_no_training(x, weight, bias, running_mean, running_var, momentum, eps):
    """aten::_native_batch_norm_legit_no_training."""
    return batch_norm(x, weight, bias, running_mean, running_var, False, momentum, eps)


def batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                        output_mask):
    """aten::native_batch_norm_backward: (grad_input, grad_weight, grad_bias) where output_mask asks."""
    if grad.dtype != x.dtype or list(grad.shape) != list(x.shape):
        raise Decline("grad dtype or shape")
    if train:
        stats = (save_mean, save_invstd)
    else:
        stats = (running_mean, running_var)
    if stats[0] is None or stats[1] is None:
        raise Decline("missing statistics")
    dtype = _check_params(x, weight, *stats)
    if weight is None and (output_mask[1] or output_mask[2]):
        raise Decline("parameter gradients without a weight")
    weight, stats = _dense(weight), (_dense(stats[0]), _dense(stats[1]))  # (read densely, see `batch_norm`)
    N, C = x.shape[0], x.shape[1]
    P = x.numel() // (N * C)
    index = x.get_device()
    gv, sgn, sgc, sgp = _plane(grad)
    xv, sxn, sxc, sxp = _plane(x)
    grad_input = _alloc(x.shape, x.dtype, index, _channels_last(x)) if output_mask[0] else xv
    _, sdn, sdc, sdp = _plane(grad_input)
    grad_weight, grad_bias = empty([C], dtype, index), empty([C], dtype, index)
    if P == 1:  # (N, C): the images are the positions, as in `batch_norm`
        N, P, (sgn, sgp), (sxn, sxp), (sdn, sdp) = 1, N, (0, sgn), (0, sxn), (0, sdn)
    kernels = _k("cnn")
    _run(kernels.batch_norm_backward_kernel, (C, 1),
         (gv, xv, weight if weight is not None else xv, stats[0], stats[1], grad_input, grad_weight,
          grad_bias, N, P, sgn, sgc, sgp, sxn, sxc, sxp, sdn, sdc, sdp, float(eps), int(bool(train)),
          int(weight is not None), int(bool(output_mask[0]))),
         BLOCK=_plane_block(P, kernels.BLOCK))
    return (grad_input if output_mask[0] else None, grad_weight if output_mask[1] else None,
            grad_bias if output_mask[2] else None)


# ---------------------------------------------------------------- max pooling

def _pool_size(size: int, k: int, pad: int, stride: int, dil: int, ceil_mode: bool) -> int:
    """torch's pooling_output_shape: with ceil_mode the last window must start inside the input or
    its left padding."""
    out = (size + 2 * pad - dil * (k - 1) - 1 + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode) -> dict:
    if x.dim() not in (3, 4) or x.numel() == 0:
        raise Decline("max pooling of a tensor that is not a non-empty 3-d or 4-d one")
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = (kh, kw) if not stride else _pair(stride, "stride")
    ph, pw = _pair(padding, "padding")
    dh, dw = _pair(dilation, "dilation")
    if min(kh, kw, sh, sw, dh, dw) <= 0 or min(ph, pw) < 0 or ph > kh // 2 or pw > kw // 2:
        raise Decline("invalid pooling parameters")
    H, W = x.shape[-2], x.shape[-1]
    OH, OW = _pool_size(H, kh, ph, sh, dh, ceil_mode), _pool_size(W, kw, pw, sw, dw, ceil_mode)
    if OH <= 0 or OW <= 0:
        raise Decline("pooling output would be empty")
    return dict(kh=kh, kw=kw, sh=sh, sw=sw, ph=ph, pw=pw, dh=dh, dw=dw, H=H, W=W, OH=OH, OW=OW)


def _planes(t: torch.Tensor) -> tuple[torch.Tensor, int, int, int, int, int]:
    """(t, N, C, sn, sc, sp) of a 3-d (C, ...) or 4-d (N, C, ...) tensor viewed as (N, C, P)."""
    if t.dim() == 3:
        t = t.unsqueeze(0)
    tv, sn, sc, sp = _plane(t)
    return tv, t.shape[0], t.shape[1], sn, sc, sp


_POOL_TILE = 1024  # output positions per tile at most (BLOCK_M x BLOCK_N)


def _output_tiles(OH: int, OW: int) -> tuple[int, int, int]:
    """(tiles per plane, BLOCK_M, BLOCK_N) of a pooling, im2col or col2im launch over an OH x OW plane
    (the output's, or the largest window for adaptive pooling's backward, which adds one window at a
    time): the
    powers of two covering the plane, at most 64 columns and `_POOL_TILE` positions. Fitted rather than
    a few fixed tiles: the window loop's selects and index arithmetic run over every lane of the tile, so
    a 64 x 16 tile over an 8 x 8 plane cost more than the flat block it replaced; a CNN has few plane
    sizes, so few specialisations."""
    block_n = min(next_power_of_2(OW), 64)
    block_m = min(next_power_of_2(OH), _POOL_TILE // block_n)
    return cdiv(OH, block_m) * cdiv(OW, block_n), block_m, block_n


def _window_planes(N: int, C: int, g: dict, index: int) -> torch.Tensor:
    """Zeroed contiguous float32 planes (N, C, PH, PW) of the pooled input padded so that every window
    of pooling `g` lies inside (its padding before, and after whatever the last windows reach: ceil
    mode's partial windows too): the pooling backwards add into them in boxes."""
    rows = max(g["H"], (g["OH"] - 1) * g["sh"] - g["ph"] + (g["kh"] - 1) * g["dh"] + 1) + g["ph"]
    cols = max(g["W"], (g["OW"] - 1) * g["sw"] - g["pw"] + (g["kw"] - 1) * g["dw"] + 1) + g["pw"]
    return _ops_fill(empty([N, C, rows, cols], torch.float32, index), 0.0)


def _planes_interior(planes: torch.Tensor, x: torch.Tensor, g: dict) -> torch.Tensor:
    """The gradient of x: the interior of `_window_planes`' planes, in x's dtype and layout."""
    grad_input = _alloc(x.shape, x.dtype, x.get_device(), _channels_last(x))
    interior = planes[:, :, g["ph"]:g["ph"] + g["H"], g["pw"]:g["pw"] + g["W"]]
    from ._copy import copy_into

    copy_into(interior if x.dim() == 4 else interior[0], grad_input)
    return grad_input


def max_pool2d_with_indices(x, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    """aten::max_pool2d_with_indices: (values, int64 flat indices within each plane), in x's layout."""
    require_float(x.dtype)
    g = _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode)
    shape = [*x.shape[:-2], g["OH"], g["OW"]]
    index = x.get_device()
    last = _channels_last(x)
    values, indices = _alloc(shape, x.dtype, index, last), _alloc(shape, torch.int64, index, last)
    x4 = x if x.dim() == 4 else x.unsqueeze(0)
    _, _, _, _, sxn, sxc, sxh, sxw = _as_nchw(x4)
    _, N, C, syn, syc, syp = _planes(values)
    tiles, block_m, block_n = _output_tiles(g["OH"], g["OW"])
    _run(_k("cnn").max_pool_kernel, (tiles, N * C),
         (x4, values, indices, C, g["H"], g["W"], g["OH"], g["OW"], g["kh"], g["kw"], sxn, sxc, sxh, sxw,
          syn, syc, syp, g["sh"], g["sw"], g["ph"], g["pw"], g["dh"], g["dw"]),
         BLOCK_M=block_m, BLOCK_N=block_n)
    return values, indices


def max_pool2d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """aten::max_pool2d_with_indices_backward: each output position's gradient added to the input
    element its index names, in float32 planes of the padded input (one program per plane:
    deterministic), whose interior is the result."""
    if grad.dtype != x.dtype or x.dtype not in FLOATS or indices.dtype != torch.int64:
        raise Decline("dtypes")
    g = _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode)
    shape = [*x.shape[:-2], g["OH"], g["OW"]]
    if list(grad.shape) != shape or list(indices.shape) != shape:
        raise Decline("grad or indices shape does not match the pooling")
    if grad.stride() != indices.stride():
        grad, indices = contiguous(grad), contiguous(indices)
    gv, N, C, sgn, sgc, sgp = _planes(grad)
    iv, _, _, isn, isc, isp = _planes(indices)
    if (isn, isc, isp) != (sgn, sgc, sgp):
        gv, N, C, sgn, sgc, sgp = _planes(contiguous(grad))
        iv, _, _, isn, isc, isp = _planes(contiguous(indices))
    planes = _window_planes(N, C, g, x.get_device())
    PH, PW = planes.shape[-2:]
    _, block_m, block_n = _output_tiles(g["OH"], g["OW"])
    overlap = g["sh"] < (g["kh"] - 1) * g["dh"] + 1 or g["sw"] < (g["kw"] - 1) * g["dw"] + 1
    _run(_k("cnn").max_pool_backward_kernel, (1, N * C),
         (gv, iv, planes, C, g["W"], g["OH"], g["OW"], g["kh"], g["kw"], sgn, sgc, sgp, PH, PW,
          g["ph"], g["pw"], g["sh"], g["sw"], g["dh"], g["dw"], int(overlap)),
         BLOCK_M=block_m, BLOCK_N=block_n)
    return _planes_interior(planes, x, g)


# ---------------------------------------------------------------- average pooling

def _avg_args(x, kernel_size, stride, padding, ceil_mode, divisor_override) -> dict:
    require_float(x.dtype)
    if divisor_override is not None and (not isinstance(divisor_override, int) or divisor_override <= 0):
        raise Decline("divisor_override must be a positive int")
    return _pool_geometry(x, kernel_size, stride, padding, (1, 1), ceil_mode)


def avg_pool2d(x, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """aten::avg_pool2d: window sums over the input (padding adds 0) divided as torch divides them."""
    g = _avg_args(x, kernel_size, stride, padding, ceil_mode, divisor_override)
    shape = [*x.shape[:-2], g["OH"], g["OW"]]
    out = _alloc(shape, x.dtype, x.get_device(), _channels_last(x))
    x4 = x if x.dim() == 4 else x.unsqueeze(0)
    _, _, _, _, sxn, sxc, sxh, sxw = _as_nchw(x4)
    _, N, C, syn, syc, syp = _planes(out)
    tiles, block_m, block_n = _output_tiles(g["OH"], g["OW"])
    _run(_k("cnn").avg_pool_kernel, (tiles, N * C),
         (x4, out, C, g["H"], g["W"], g["OH"], g["OW"], g["kh"], g["kw"], sxn, sxc, sxh, sxw, syn, syc, syp,
          g["sh"], g["sw"], g["ph"], g["pw"], divisor_override or 0, int(bool(count_include_pad))),
         BLOCK_M=block_m, BLOCK_N=block_n)
    return out


def avg_pool2d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    """aten::avg_pool2d_backward: grad / divisor of each window added to the window's elements, in
    float32 planes of the padded input (one program per plane: deterministic), whose interior is the
    result."""
    if grad.dtype != x.dtype:
        raise Decline("mixed dtypes")
    g = _avg_args(x, kernel_size, stride, padding, ceil_mode, divisor_override)
    if list(grad.shape) != [*x.shape[:-2], g["OH"], g["OW"]]:
        raise Decline("grad shape does not match the pooling")
    gv, N, C, sgn, sgc, sgp = _planes(grad)
    planes = _window_planes(N, C, g, x.get_device())
    PH, PW = planes.shape[-2:]
    _, block_m, block_n = _output_tiles(g["OH"], g["OW"])
    _run(_k("cnn").avg_pool_backward_kernel, (1, N * C),
         (gv, planes, C, g["H"], g["W"], g["OH"], g["OW"], g["kh"], g["kw"], sgn, sgc, sgp, PH, PW,
          g["sh"], g["sw"], g["ph"], g["pw"], divisor_override or 0, int(bool(count_include_pad))),
         BLOCK_M=block_m, BLOCK_N=block_n)
    return _planes_interior(planes, x, g)


def _adaptive_sizes(x, output_size) -> tuple[int, int, int, int]:
    """(H, W, OH, OW) of an adaptive pooling of a 3-d (C, H, W) or 4-d x to `output_size`."""
    sizes = list(output_size)
    if x.dim() not in (3, 4) or len(sizes) != 2 or min(sizes) <= 0 or min(x.shape) <= 0:
        raise Decline("adaptive pooling sizes")  # torch's error (or result) from the CPU
    return x.shape[-2], x.shape[-1], sizes[0], sizes[1]


def _most_windows(size: int, out: int) -> int:
    """The largest adaptive window along a dim of `size` pooled to `out`, and (swapped) how many windows
    one input index lies in at most: max over i of ceil((i+1)*size/out) - floor(i*size/out)."""
    return max(-(-(i + 1) * size // out) - i * size // out for i in range(out))


def adaptive_avg_pool2d(x, output_size):
    """aten::_adaptive_avg_pool2d: the mean of each of torch's adaptive windows (sizes may differ), summed
    in float32 in torch's order."""
    require_float(x.dtype)
    H, W, OH, OW = _adaptive_sizes(x, output_size)
    out = _alloc([*x.shape[:-2], OH, OW], x.dtype, x.get_device(), _channels_last(x))
    x4 = x if x.dim() == 4 else x.unsqueeze(0)
    _, _, _, _, sxn, sxc, sxh, sxw = _as_nchw(x4)
    _, N, C, syn, syc, syp = _planes(out)
    tiles, block_m, block_n = _output_tiles(OH, OW)
    _run(_k("cnn").adaptive_avg_pool_kernel, (tiles, N * C),
         (x4, out, C, H, W, OH, OW, _most_windows(H, OH), _most_windows(W, OW),
          sxn, sxc, sxh, sxw, syn, syc, syp), BLOCK_M=block_m, BLOCK_N=block_n)
    return out


def adaptive_avg_pool2d_backward(grad, x):
    """aten::_adaptive_avg_pool2d_backward: each plane zeroed, then grad / height / width of each window
    added to its elements in torch's order (one program per plane: deterministic)."""
    if grad.dtype != x.dtype:
        raise Decline("mixed dtypes")
    require_float(x.dtype)
    H, W, OH, OW = _adaptive_sizes(x, grad.shape[-2:])
    if grad.shape[:-2] != x.shape[:-2]:
        raise Decline("grad shape does not match the pooling")
    grad_input = _alloc(x.shape, x.dtype, x.get_device(), _channels_last(x))
    g4 = grad if grad.dim() == 4 else grad.unsqueeze(0)
    gi4 = grad_input if grad_input.dim() == 4 else grad_input.unsqueeze(0)
    N, C, _, _, sgn, sgc, sgh, sgw = _as_nchw(g4)
    _, _, _, _, sdn, sdc, sdh, sdw = _as_nchw(gi4)
    _, block_m, block_n = _output_tiles(_most_windows(H, OH), _most_windows(W, OW))
    _run(_k("cnn").adaptive_avg_pool_backward_kernel, (1, N * C),
         (g4, gi4, C, H, W, OH, OW, sgn, sgc, sgh, sgw, sdn, sdc, sdh, sdw), BLOCK_M=block_m, BLOCK_N=block_n)
    return grad_input


# ---------------------------------------------------------------- gather / scatter / scatter_add

def _in_range(index: torch.Tensor, stop: int) -> bool:
    return _k("embedding").indices_in_range(contiguous(index), stop)


def gather(x, dim, index, sparse_grad=False):
    """aten::gather for tensors of up to 4 dims: out[i] = x[i with coordinate `dim` = index[i]]."""
    if index.dtype != torch.int64:
        raise Decline("index dtype")  # torch's error
    nd = x.dim()
    if nd == 0 or index.dim() != nd or nd > 4:
        raise Decline("gather of 0-d or more than 4-d tensors, or dims that differ")
    dim = dim + nd if dim < 0 else dim
    if not 0 <= dim < nd:
        raise Decline("dim out of range")
    if any(index.shape[d] > x.shape[d] for d in range(nd) if d != dim):
        raise Decline("index larger than the input")
    out = empty(index.shape, x.dtype, x.get_device())
    total = index.numel()
    if total == 0:
        return out
    if x.shape[dim] == 0 or not _in_range(index, x.shape[dim]):
        raise Decline("index out of range")
    pad = 4 - nd
    sizes = [1] * pad + list(index.shape)
    sx = [0] * pad + list(x.stride())
    si = [0] * pad + list(index.stride())
    _, _, D2, D3 = sizes
    block_m, block_n = small_tile_shape(total, D2, D3)
    _run(_k("cnn").gather_kernel, (cdiv(D2, block_m) * cdiv(D3, block_n), sizes[0] * sizes[1]),
         (x, index, out, *sizes[1:], *sx, *si, x.stride(dim)), DIM=dim + pad, BLOCK_M=block_m,
         BLOCK_N=block_n)
    return out


def _scatter(x, dim, index, src, *, add: bool, inplace: bool, value: torch.Tensor | None = None):
    """x with src scattered along `dim` at `index` (added when `add`, else the last write wins), where
    index has x's shape outside `dim` and src is at least index's shape: x copied (unless written in
    place), then every index entry written in order (`scatter_kernel`). `value`: a one-element tensor
    of x's dtype written at every index entry instead (src is then None)."""
    if index.dtype != torch.int64:
        raise Decline("index dtype")
    one_value = value is not None
    src_dtype, src_shape = (value.dtype, index.shape) if one_value else (src.dtype, src.shape)
    if src_dtype != x.dtype:
        raise Decline("mixed dtypes")
    if add and x.dtype not in FLOATS:
        raise Decline(f"scatter_add of {str(x.dtype).replace('torch.', '')} (the kernel adds in float32)")
    nd = x.dim()
    if nd == 0 or index.dim() != nd or len(src_shape) != nd:
        raise Decline("scatter of 0-d tensors or dims that differ")
    dim = dim + nd if dim < 0 else dim
    if not 0 <= dim < nd:
        raise Decline("dim out of range")
    if any(index.shape[d] != x.shape[d] for d in range(nd) if d != dim) or any(
            index.shape[d] > src_shape[d] for d in range(nd)):
        raise Decline("index shape differs from x's outside dim, or exceeds src's")
    outer, size, inner = math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1:])
    count = index.shape[dim]
    if x.numel() == 0:
        return x if inplace else empty(x.shape, x.dtype, x.get_device())
    if count and not _in_range(index, size):
        raise Decline("index out of range")
    if not one_value and src.shape != index.shape:
        src = src[tuple(slice(0, length) for length in index.shape)]
    # the result starts as x (x itself in place when contiguous), the kernel writes the indexed elements;
    # a half-precision scatter_add adds into a float32 copy, rounded once at the end, as torch's CPU
    # kernel accumulates
    wide = add and x.dtype is not torch.float32
    if wide:
        out = cast_copy(x, torch.float32)
    else:
        out = x if inplace and x.is_contiguous() else cast_copy(x, x.dtype)
    kernels = _k("cnn")
    # lanes fitted to the columns (a scatter along the last dim has inner 1)
    lanes = min(column_block(inner), kernels.SCATTER_BLOCK)
    _run(kernels.scatter_kernel, (outer, cdiv(inner, lanes)),
         (contiguous(index), value if one_value else contiguous(src), out, size, inner, count,
          0 if one_value else 1), ADD=add, BLOCK=lanes)
    if inplace and out is not x:
        from ._copy import copy_into

        copy_into(out, x)
        return x
    return cast_copy(out, x.dtype) if wide else out


def scatter_add(x, dim, index, src, *, inplace: bool = False):
    """aten::scatter_add(_) (gather's backward): every src entry added in index order, in float32."""
    return _scatter(x, dim, index, src, add=True, inplace=inplace)


def scatter(x, dim, index, src, *, inplace: bool = False):
    """aten::scatter(_).src (topk's and one_hot's building block): the last write wins, as on the CPU."""
    if not isinstance(src, torch.Tensor):
        return scatter_value(x, dim, index, src, inplace=inplace)
    return _scatter(x, dim, index, src, add=False, inplace=inplace)


def scatter_value(x, dim, index, value, *, inplace: bool = False):
    """aten::scatter(_).value: every indexed element set to the number `value`."""
    if index.dtype != torch.int64:
        raise Decline("index dtype")
    one = _memory.empty([1], x.dtype, x.get_device())
    try:  # written through its host view: rbln memory is host memory (no tensor built and copied over)
        _dlpack.to_host_view(one).fill_(value)
    except (RuntimeError, TypeError, OverflowError) as error:
        raise Decline(f"value {value!r} for dtype {x.dtype}") from error  # torch's error on the CPU
    return _scatter(x, dim, index, None, add=False, inplace=inplace, value=one)
