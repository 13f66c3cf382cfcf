"""aten::nll_loss_forward / nll_loss_backward on the op-library kernels (`kernels/loss.py`).

Cross-entropy decomposes into log_softmax + nll_loss, so with these a language model's loss and its
gradient stay on device. Targets are validated on the host first (a compiled pass over the N int64 values):
an out-of-range target declines to the CPU kernel, which raises torch's own error message.
"""

from __future__ import annotations

import torch

from . import _launch as launches
from ._ops import _I32, FLOATS, Decline, _block, _cdiv, _k, _row_block, contiguous, empty, fill

REDUCTIONS = (0, 1, 2)  # none, mean, sum (torch.nn._reduction.get_enum)


def _checked(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
             ignore_index: int) -> tuple[int, int]:
    """(rows, classes) once the operands are within what the kernels support; Decline otherwise."""
    if x.dtype not in FLOATS:
        raise Decline(f"dtype {str(x.dtype).replace('torch.', '')}")
    if x.dim() not in (1, 2) or target.dim() != x.dim() - 1:
        raise Decline("input other than (N, C) or (C,)")
    if target.dtype != torch.int64 or target.is_cpu:
        raise Decline("target dtype/device")
    if reduction not in REDUCTIONS:
        raise Decline(f"reduction {reduction}")
    rows = x.shape[0] if x.dim() == 2 else 1
    classes = x.shape[-1]
    if rows != target.numel() or rows == 0 or classes == 0:
        raise Decline("empty or mismatched target")
    if weight is not None and (weight.dtype != x.dtype or weight.numel() != classes or weight.is_cpu):
        raise Decline("weight dtype/shape/device")
    if not _k("embedding").indices_in_range(contiguous(target), classes, ignore_index):
        raise Decline("target out of bounds")
    return rows, classes


def forward_key(x_dtype: torch.dtype, w_dtype: torch.dtype, block: int, ints: tuple) -> tuple:
    """The launch key of `nll_loss_kernel` (target int64, loss and total weight of x's dtype): the
    dtypes, the block and the width of each int argument (rows, classes, ignore_index, reduction,
    has_w) determine its specialisation."""
    return (x_dtype, w_dtype, block, *(-_I32 <= v < _I32 for v in ints))


def backward_key(g_dtype: torch.dtype, w_dtype: torch.dtype, tw_dtype: torch.dtype, dx_dtype: torch.dtype,
                 block: int, ints: tuple) -> tuple:
    """The launch key of `nll_loss_backward_kernel`, as `forward_key` (ints: classes, ignore_index,
    reduction, has_w)."""
    return (g_dtype, w_dtype, tw_dtype, dx_dtype, block, *(-_I32 <= v < _I32 for v in ints))


def nll_loss_forward(x, target, weight, reduction, ignore_index):
    rows, classes = _checked(x, target, weight, reduction, ignore_index)
    index = x.get_device()
    x, target = contiguous(x), contiguous(target)
    weight = contiguous(weight) if weight is not None else None
    w = weight if weight is not None else x  # not read without HAS_W: x stands in
    total_weight = empty([], x.dtype, index)
    block = _block(rows)
    if reduction == 0:
        loss = empty([rows] if x.dim() == 2 else [], x.dtype, index)
        programs = _cdiv(rows, block)
        fill(total_weight, 0.0)  # torch reports a zero total weight when nothing is reduced
    else:
        loss = empty([], x.dtype, index)
        programs = 1
    ints = (rows, classes, int(ignore_index), int(reduction), int(weight is not None))
    launches.launch(_k("loss").nll_loss_kernel, programs, forward_key(x.dtype, w.dtype, block, ints),
                    (x, target, w, loss, total_weight, *ints), {"BLOCK": block})
    return loss, total_weight


def nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    rows, classes = _checked(x, target, weight, reduction, ignore_index)
    if grad.dtype != x.dtype or grad.numel() != (rows if reduction == 0 and x.dim() == 2 else 1):
        raise Decline("grad_output dtype/shape")
    if total_weight.is_cpu or total_weight.numel() != 1:
        raise Decline("total_weight device/shape")
    index = x.get_device()
    grad, target = contiguous(grad), contiguous(target)
    weight = contiguous(weight) if weight is not None else None
    w = weight if weight is not None else grad  # not read without HAS_W: grad stands in
    dx = empty(list(x.shape), x.dtype, index)  # every element is written: no zero fill
    block = _row_block(classes)
    ints = (classes, int(ignore_index), int(reduction), int(weight is not None))
    launches.launch(_k("loss").nll_loss_backward_kernel, rows,
                    backward_key(grad.dtype, w.dtype, total_weight.dtype, dx.dtype, block, ints),
                    (grad, target, w, total_weight, dx, *ints), {"BLOCK": block})
    return dx
