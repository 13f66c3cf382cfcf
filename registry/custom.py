"""The device side of the custom ops `torch.ops.rbln.rms_norm` (forward and backward kernels) and
`torch.ops.rbln.rotary_embedding` (forward kernel; backward through registered aten ops).

Their definitions (references, fake and autograd formulas) live in `custom_ops`, which registration
imports at `import torch`; this module, with the kernels it launches, loads on the first call.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from torch_rbln import _memory, config

from . import _launch
from . import _ops as O
from ._fastpath import _Plan, write_only_buffer
from ._memo import PlanMemo
from .custom_ops import (  # noqa: F401  (re-exported)
    _rms_norm_backward_fake,
    _rms_norm_backward_reference,
    _rms_norm_reference,
    _rotary_reference,
)
from .plan import contiguous_rbln


def _rms_norm_backward_device(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
                              eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    if x.dim() == 0 or x.numel() == 0 or grad.shape != x.shape:
        raise O.Decline("empty tensor or grad shape")
    if grad.dtype != x.dtype or x.dtype not in O.FLOATS:
        raise O.Decline("dtypes")
    if weight is not None and (weight.dtype != x.dtype or weight.shape != x.shape[-1:]):
        raise O.Decline("weight dtype/shape")
    _, rstd = O.rms_norm_forward(x, weight, eps)
    dx, dw = O.rms_norm_backward(grad, x, weight, rstd)
    return dx, (dw.view(weight.shape) if weight is not None else x.new_empty(0))


def _rms_norm_device(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    if x.dim() == 0 or x.numel() == 0:
        raise O.Decline("empty tensor")
    if weight is not None and (weight.dtype != x.dtype or weight.shape != x.shape[-1:]):
        raise O.Decline("weight dtype/shape")
    return O.rms_norm_forward(x, weight, eps)[0]


class _RmsNormPlan(_Plan):
    """rms_norm's launch for a contiguous (dtype, shape) input with or without a weight of its dtype:
    `programs` rows of `n` elements. The kernel also writes each row's rstd (float32), which a forward
    call without autograd never reads: up to `_SCRATCH_ROWS` rows it goes to a buffer the plan keeps per
    device (`scratch`) instead of a fresh allocation per call. Concurrent calls may write it at once:
    nothing reads it, so that is harmless."""

    __slots__ = ("scratch",)


_SCRATCH_ROWS = 1 << 14  # at most 64 KiB of kept rstd scratch per plan and device


def _new_rms_plan(plan_key: tuple) -> _RmsNormPlan | None:
    """The plan of `rms_norm_forward`'s launch; None for a shape it would decline."""
    dtype, shape, has_w = plan_key
    if dtype not in O.FLOATS or not shape or shape[-1] == 0 or math.prod(shape) >= O._I32:
        return None
    n = shape[-1]
    kernel, key, _ = O.norm_launch(dtype, dtype, dtype, dtype, torch.float32, n, rms=True, has_w=has_w,
                                   has_b=False)
    plan = _RmsNormPlan(kernel, key, 0, dtype, dtype, math.prod(shape) // n)
    plan.n = n
    plan.scratch = {}
    return plan


_rms_plans: dict[tuple, _RmsNormPlan | None] = PlanMemo(1024, _new_rms_plan)


def _rms_norm_fast(x: Tensor, weight: Tensor | None, eps: float) -> Tensor | None:
    """rms_norm's plain call (contiguous operands of one float dtype on one device, no NaN/Inf outside
    deploy mode, the launch kept by an earlier call): the kernel launch `_rms_norm_device` makes, without
    its checks and dispatch. None for anything else (the checked path decides)."""
    index = contiguous_rbln(x)
    if index < 0 or type(eps) is not float:
        return None
    dtype = x.dtype
    has_w = weight is not None
    if has_w and (not isinstance(weight, Tensor) or weight.dtype is not dtype or not weight.is_contiguous()
                  or weight.get_device() != index):
        return None
    plan = _rms_plans[(dtype, x.shape, has_w)]
    if plan is None:
        return None
    n, rows = plan.n, plan.programs
    if has_w and (weight.dim() != 1 or weight.shape[0] != n):
        return None
    run = plan.kept(index)
    if run is None:
        return None
    if not config.deploy_mode() and not (plan.finite(x, rows * n) and (not has_w or plan.finite(weight, n))):
        return None
    rstd = write_only_buffer(plan.scratch, index, (rows,), _SCRATCH_ROWS)
    out = _memory.empty(x.shape, dtype, index)
    run(rows, 1, 1, x, weight if has_w else x, x, out, rstd, rstd, n, eps)
    return out


def _rotary_device(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    D = x.shape[-1] if x.dim() else 0
    if D == 0 or D % 2 or x.numel() == 0:
        raise O.Decline("last dim must be even and non-empty")
    if cos.shape != sin.shape or cos.shape[-1] != D or cos.dtype != x.dtype or sin.dtype != x.dtype:
        raise O.Decline("cos/sin shape or dtype")
    cs_shape = list(cos.shape)
    while cs_shape and cs_shape[0] == 1:
        cs_shape.pop(0)
    if list(x.shape[x.dim() - len(cs_shape):]) != cs_shape:
        raise O.Decline("cos/sin broadcast over other than the leading dims")
    x, cos, sin = O.contiguous(x), O.contiguous(cos), O.contiguous(sin)
    out = O.empty(x.shape, x.dtype, x.get_device())
    block = _rotary_block(D)
    rows, cs_rows = x.numel() // D, cos.numel() // D
    _launch.launch(O._k("rotary").rotary_kernel, rows, _rotary_key(x.dtype, block, x.numel()),
                   (x, cos, sin, out, D, cs_rows), {"BLOCK": block})
    return out


def _rotary_block(D: int) -> int:
    return max(16, 1 << (D // 2 - 1).bit_length())


def _rotary_key(dtype: torch.dtype, block: int, numel: int) -> tuple:
    """The kept launch's key: dtypes and block determine the specialisation while the ints fit 32 bits."""
    return (dtype, block) if numel < O._I32 else (dtype, block, "int64")


class _RotaryPlan(_Plan):
    """rotary_embedding's launch for contiguous (dtype, x shape, cos/sin shape): `programs` rows of `n`
    (the head dim) and the rows of cos/sin (`cs_rows`)."""

    __slots__ = ("cs_rows",)


def _new_rotary_plan(plan_key: tuple) -> _RotaryPlan | None:
    dtype, shape, cs_shape = plan_key
    D = shape[-1] if shape else 0
    numel = math.prod(shape)
    if dtype not in O.FLOATS or D == 0 or D % 2 or numel >= O._I32 or not cs_shape or cs_shape[-1] != D:
        return None
    core = list(cs_shape)
    while core and core[0] == 1:
        core.pop(0)
    if list(shape[len(shape) - len(core):]) != core:
        return None
    block = _rotary_block(D)
    plan = _RotaryPlan(O._k("rotary").rotary_kernel, _rotary_key(dtype, block, numel), 0, dtype, dtype,
                       numel // D)
    plan.n, plan.cs_rows = D, math.prod(cs_shape) // D
    return plan


_rotary_plans: dict[tuple, _RotaryPlan | None] = PlanMemo(1024, _new_rotary_plan)


def _rotary_fast(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor | None:
    """rotary_embedding's plain call (as `_rms_norm_fast`): the launch `_rotary_device` makes."""
    index = contiguous_rbln(x)
    if index < 0 or contiguous_rbln(cos) != index or contiguous_rbln(sin) != index:
        return None
    dtype = x.dtype
    if cos.dtype is not dtype or sin.dtype is not dtype or cos.shape != sin.shape:
        return None
    plan = _rotary_plans[(dtype, x.shape, cos.shape)]
    if plan is None:
        return None
    n, rows = plan.n, plan.programs
    run = plan.ready(x, index, rows * n)
    if run is None:
        return None
    if not config.deploy_mode():
        cs_numel = plan.cs_rows * n
        if not (plan.finite(cos, cs_numel) and plan.finite(sin, cs_numel)):
            return None
    out = _memory.empty(x.shape, dtype, index)
    run(rows, 1, 1, x, cos, sin, out, n, plan.cs_rows)
    return out
