"""`torch.linalg.vector_norm` for the orders training uses (2, 1, inf, -inf), `torch.logsumexp` and
group norm (`native_group_norm` and its backward), composed of device launches.

Why: `torch.nn.utils.clip_grad_norm_` takes every gradient's 2-norm (`_foreach_norm`, whose slow path
calls `linalg_vector_norm` per tensor), then the norm of those norms: without this every clipped
training step sent each gradient to the CPU fallback. `logsumexp` is the log-partition of losses and
mixtures (CTC, CRF, MoE routers' z-loss).

The norm is computed in float32 (torch's math type for every float dtype here: a half-precision input
is widened first, so squares cannot overflow the half range), as |x| reduced by the registry's
reductions: sqrt(sum(x * x)) for 2, sum(|x|) for 1, amax/amin(|x|) for +-inf, then stored in the
result's dtype. Other orders, empty inputs, complex or float64 tensors decline to the CPU fallback
(which computes them, or raises torch's error). `logsumexp` follows torch's CPU kernel: the row
maximum m (0 where it is +-inf), then log(sum(exp(x - m))) + m, in float32.

Group norm: torch's composite for devices without a kernel of their own (`math_group_norm`) computes
its statistics in the input's dtype, so a float16 group holding values of a few hundred had a variance
past 65,504 (inf) and normalised to zeros where torch's CPU kernel, which widens to float32, gives the
normalised values. Here the statistics and the normalisation are computed in float32 and the results
stored once in the input's dtype, as the CPU kernel does; the backward too (torch has no composite for
it: it ran on the CPU fallback), from the saved mean and rstd.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ._base import real_number, require_float
from ._ops import Decline, cast_copy, contiguous
from .elementwise import binary, masked_fill, unary
from .reduce import reduce

__all__ = ["group_norm", "group_norm_backward", "logsumexp", "vector_norm"]

_ORDERS = (2.0, 1.0, math.inf, -math.inf)


def vector_norm(x: Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,
                dtype: torch.dtype | None = None) -> Tensor:
    """`linalg_vector_norm(x, ord, dim, keepdim, dtype=)` for `ord` in 2, 1, inf, -inf."""
    if x.is_complex():
        raise Decline("complex input")
    require_float(x.dtype)
    result_dtype = x.dtype if dtype is None else dtype
    require_float(result_dtype)
    if torch.promote_types(x.dtype, result_dtype) is not result_dtype:
        raise Decline("dtype= narrower than the input")  # torch's error, from the CPU
    order = real_number(ord, "ord")
    if order not in _ORDERS:
        raise Decline(f"ord {ord!r}")
    if x.numel() == 0:
        raise Decline("empty tensor")  # 0 for finite orders, torch's error for +-inf: the CPU's
    dims = None if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    wide = x if x.dtype is torch.float32 else cast_copy(x, torch.float32)
    if order == 2.0:
        norm = unary("sqrt", reduce("sum", binary("mul", wide, wide), dims, keepdim))
    else:
        magnitudes = unary("abs", wide)
        name = "sum" if order == 1.0 else "amax" if order > 0 else "amin"
        norm = reduce(name, magnitudes, dims, keepdim)
    return norm if result_dtype is torch.float32 else cast_copy(norm, result_dtype)


def logsumexp(x: Tensor, dim: Any, keepdim: bool = False) -> Tensor:
    """`logsumexp(x, dim, keepdim)` of a float tensor, over one or more dims."""
    require_float(x.dtype)
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims or x.numel() == 0:
        raise Decline("no dims or an empty tensor")  # torch's result or error, from the CPU
    wide = x if x.dtype is torch.float32 else cast_copy(x, torch.float32)
    maxes = reduce("amax", wide, dims, True)
    infinite = binary("eq", unary("abs", maxes), math.inf, comparison=True)
    maxes = masked_fill(maxes, infinite, 0.0)  # rows of -inf (or with +inf): exp(x - 0), as torch's
    total = reduce("sum", unary("exp", binary("sub", wide, maxes)), dims, keepdim)
    shift = maxes if keepdim else maxes.squeeze(tuple(dims))
    result = binary("add", unary("log", total), shift)
    return result if x.dtype is torch.float32 else cast_copy(result, x.dtype)


def group_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, n: int, c: int, hw: int, group: int,
               eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """`native_group_norm`: (the normalised x, each group's mean, its 1/sqrt(var + eps)), the last two
    of shape (n, group), all in x's dtype, computed in float32."""
    rows = _groups(x, n, c, hw, group)
    mean = reduce("mean", rows, [2], True)
    rstd = unary("rsqrt", binary("add", reduce("var", rows, [2], True, correction=0), float(eps)))
    y = binary("mul", binary("sub", rows, mean), rstd).reshape(n, c, -1)
    for parameter, op in ((weight, "mul"), (bias, "add")):
        if parameter is not None:
            y = binary(op, y, _wide(parameter).reshape(1, c, 1))
    results = (y.reshape(x.shape), mean.reshape(n, group), rstd.reshape(n, group))
    return tuple(_narrow(t, x.dtype) for t in results)


def group_norm_backward(grad: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, weight: Tensor | None, n: int,
                        c: int, hw: int, group: int, mask: list[bool]) -> tuple:
    """`native_group_norm_backward`: (dx, dweight, dbias) for the `mask`ed outputs (None for the others),
    in float32 from the forward's mean and rstd, stored in x's (and the weight's) dtype. With xhat =
    (x - mean) * rstd and g = grad * weight per channel: dx = rstd * (g - mean(g) - xhat * mean(g *
    xhat)) over each group; dweight = the sum of grad * xhat, dbias of grad, over batch and positions."""
    rows = _groups(x, n, c, hw, group)
    grad_rows = _groups(grad, n, c, hw, group)
    mean, rstd = _wide(mean).reshape(n, group, 1), _wide(rstd).reshape(n, group, 1)
    xhat = binary("mul", binary("sub", rows, mean), rstd)
    dx = dweight = dbias = None
    if mask[0]:
        scaled = grad_rows if weight is None else \
            binary("mul", grad_rows.reshape(n, c, -1), _wide(weight).reshape(1, c, 1)).reshape(n, group, -1)
        centred = binary("sub", scaled, reduce("mean", scaled, [2], True))
        spread = binary("mul", xhat, reduce("mean", binary("mul", scaled, xhat), [2], True))
        dx = _narrow(binary("mul", binary("sub", centred, spread), rstd).reshape(x.shape), x.dtype)
    parameter_dtype = x.dtype if weight is None else weight.dtype
    if mask[1]:
        products = binary("mul", grad_rows, xhat).reshape(n, c, -1)
        dweight = _narrow(reduce("sum", products, [0, 2]), parameter_dtype)
    if mask[2]:
        dbias = _narrow(reduce("sum", grad_rows.reshape(n, c, -1), [0, 2]), parameter_dtype)
    return dx, dweight, dbias


def _groups(x: Tensor, n: int, c: int, hw: int, group: int) -> Tensor:
    """`x` (n, c, ...) in float32 as (n, group, c // group * hw), contiguous."""
    require_float(x.dtype)
    if x.numel() == 0 or group <= 0 or c % group or x.numel() != n * c * hw:
        raise Decline("empty input or groups that do not divide the channels")  # torch's result or error
    return _wide(x).reshape(n, group, -1)


def _wide(t: Tensor) -> Tensor:
    """`t` contiguous in float32 (itself when it is already)."""
    return contiguous(t) if t.dtype is torch.float32 else cast_copy(t, torch.float32)


def _narrow(t: Tensor, dtype: torch.dtype) -> Tensor:
    """The float32 `t` stored in `dtype` (itself for float32)."""
    return t if dtype is torch.float32 else cast_copy(t, dtype)
