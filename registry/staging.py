"""Calls whose target is a strided view, run on a contiguous staging tensor and copied into the view.

Why: the kernels write contiguous results, so an `out=` view or an in-place op on a view (a slice of a
gradient buffer: `mm(..., out=grad[:, i])`, `grad[i].zero_()`) went to the CPU fallback, which copies
every operand to the host and the result back. Mixtral's compiled train step sent 20 of its 227 op
calls there. Here the implementation writes a contiguous tensor of the target's shape and dtype (for an
in-place op, a device copy of the target's values, unless the op only overwrites it), and the strided
copy kernel writes that into the view, as torch's own structured kernels do for such outputs.

What stays on the CPU fallback, with the implementation's reason: a target whose elements share memory
(an expanded view: torch raises for writing it), an in-place target that another operand shares memory
with (torch's partial-overlap rules decide), and a view the copy kernels cannot address (more than four
non-mergeable dims).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor

from ._copy import strided_writer
from ._ops import contiguous, empty


def distinct_elements(t: Tensor) -> bool:
    """Whether no two elements of `t` share memory: with its dims of size > 1 sorted by stride, each
    stride exceeds the largest offset the smaller ones reach (an expanded dim's stride 0 never does)."""
    reach = 0
    for stride, size in sorted((stride, size) for size, stride in zip(t.shape, t.stride(), strict=True)
                               if size > 1):
        if stride <= reach:
            return False
        reach += (size - 1) * stride
    return True


def _shares_memory(target: Tensor, operands: tuple) -> bool:
    storage = target.untyped_storage().data_ptr()
    return any(isinstance(t, Tensor) and t is not target and t.untyped_storage().data_ptr() == storage
               for t in operands)


def run_staged(impl: Callable[..., Any], args: tuple, kwargs: dict, in_place: bool,
               overwrites_first: bool) -> Tensor | None:
    """`impl(*args, **kwargs)` for a call whose strided target `impl` refused (`StridedTarget`: `self`
    of an `in_place` op, else its `out=`), with the target replaced by a contiguous staging tensor whose
    result is then copied into it; the target is returned. None where this cannot be exact (see the
    module docstring): the caller's CPU fallback takes the call with the refusal's reason. A `Decline`
    of the staged call propagates."""
    target = args[0] if in_place and args else kwargs.get("out")
    if not isinstance(target, Tensor) or target.is_cpu or target.is_contiguous() or not target.numel() \
            or not distinct_elements(target):
        return None
    if in_place and _shares_memory(target, (*args[1:], *kwargs.values())):
        return None
    write = strided_writer(tuple(target.shape), tuple(target.stride()), target.dtype)
    if write is None:
        return None
    if in_place:
        staging = empty(target.shape, target.dtype, target.get_device()) if overwrites_first \
            else contiguous(target)
        impl(staging, *args[1:], **kwargs)
    else:
        staging = empty(target.shape, target.dtype, target.get_device())
        impl(*args, **{**kwargs, "out": staging})
    write(staging, target)
    return target
