"""aten::nll_loss_forward / nll_loss_backward on the op-library kernels (`kernels/loss.py`).

Cross-entropy decomposes into log_softmax + nll_loss, so with these a language model's loss and its
gradient stay on device. Targets are validated on the host first (one pass over N int64 values):
an out-of-range target declines to the CPU kernel, which raises torch's own error message.
"""

from __future__ import annotations

import torch

from torch_rbln import _dlpack

from ._ops import FLOATS, Decline, _block, _cdiv, _k, contiguous, empty, fill

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
    host = _dlpack.to_host_view(target)
    valid = (host == ignore_index) | ((host >= 0) & (host < classes))
    if not bool(valid.all()):
        raise Decline("target out of bounds")
    return rows, classes


def nll_loss_forward(x, target, weight, reduction, ignore_index):
    rows, classes = _checked(x, target, weight, reduction, ignore_index)
    index = x.get_device()
    x, target = contiguous(x), contiguous(target)
    weight = contiguous(weight) if weight is not None else None
    total_weight = empty([], x.dtype, index)
    block = _block(rows)
    if reduction == 0:
        loss = empty([rows] if x.dim() == 2 else [], x.dtype, index)
        grid = (_cdiv(rows, block),)
        fill(total_weight, 0.0)  # torch reports a zero total weight when nothing is reduced
    else:
        loss = empty([], x.dtype, index)
        grid = (1,)
    _k("loss").nll_loss_kernel[grid](
        x, target, weight if weight is not None else x, loss, total_weight, rows, classes, ignore_index,
        reduction, int(weight is not None), BLOCK=block,
    )
    return loss, total_weight


def nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    rows, classes = _checked(x, target, weight, reduction, ignore_index)
    if grad.dtype != x.dtype or grad.numel() != (rows if reduction == 0 and x.dim() == 2 else 1):
        raise Decline("grad_output dtype/shape")
    index = x.get_device()
    grad, target = contiguous(grad), contiguous(target)
    weight = contiguous(weight) if weight is not None else None
    dx = fill(empty(list(x.shape), x.dtype, index), 0.0)
    block = _block(rows)
    _k("loss").nll_loss_backward_kernel[(_cdiv(rows, block),)](
        grad, target, weight if weight is not None else grad, total_weight, dx, rows, classes, ignore_index,
        reduction, int(weight is not None), BLOCK=block,
    )
    return dx
