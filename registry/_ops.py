"""What the families' implementations share: output allocation and checks (`empty`, `_check_out`,
`binary_output`), operands (`contiguous`, `cast_copy`, `_device_index`), broadcasting (`_broadcast`,
`_geometry`: up to four collapsed dims) and `fill_floats`.

Each implementation returns a result, or a `Decline(reason)` when the inputs are outside what its
kernel supports; the dispatcher then runs the CPU fallback with that reason. Kernels are imported on
first call, so `import torch_rbln` never compiles or imports the DSL backends.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from torch_rbln import _memory

from ._base import FLOATS, INTEGERS, Decline, InvalidCall, StridedTarget  # noqa: F401  (re-exported for the families)
from ._launch import kernel_module as _k
from ._memo import BoundedMemo
from .geometry import cdiv, collapse, expanded_strides, fused_block


def empty(shape: Sequence[int], dtype: torch.dtype, index: int) -> torch.Tensor:
    return _memory.empty(shape, dtype, index)


_geometries: dict[tuple, tuple] = BoundedMemo(4096)  # (shape, operands' sizes and strides) -> geometry

def _geometry(
    shape: Sequence[int], operands: Sequence[torch.Tensor]
) -> tuple[bool, list[int], list[list[int]]]:
    """(broadcast needed, sizes s1..s3, per-operand strides t0..t3) over up to four collapsed dims,
    remembered per layout (computing it cost more than a small kernel runs). Callers must not modify
    the lists."""
    key = (tuple(shape), *[(t.shape, t.stride()) for t in operands])
    geometry = _geometries.get(key)
    if geometry is None:
        geometry = _geometries[key] = _compute_geometry(shape, operands)
    return geometry


def _compute_geometry(
    shape: Sequence[int], operands: Sequence[torch.Tensor]
) -> tuple[bool, list[int], list[list[int]]]:
    strides = [expanded_strides(t, shape) for t in operands]
    sizes, strides = collapse(shape, strides)
    if len(sizes) <= 1 and all(not st or st[0] == 1 for st in strides):
        return False, [1, 1, 1], [[0, 0, 0, 0] for _ in operands]
    if len(sizes) > 4:
        raise Decline(f"more than 4 non-mergeable dims ({len(sizes)})")
    pad = 4 - len(sizes)
    sizes = [1] * pad + sizes
    return True, sizes[1:], [[0] * pad + st for st in strides]


_orders: dict[tuple, tuple[int, ...] | None] = BoundedMemo(4096)  # operands' layouts -> output dim order


def output_order(*operands) -> tuple[int, ...] | None:
    """The dim order (outermost first) in which torch's elementwise kernels lay out the output of an op
    on `operands` (tensors; numbers and 0-dim CPU scalars are ignored), or None for the contiguous
    order.

    TensorIterator keeps its inputs' memory layout: `x.transpose(1, 2) * c` comes out with x's
    transposed strides, a channels_last input gives a channels_last result. A contiguous result
    instead breaks what works on the CPU (a `.view` of the result's transpose) and graphs traced with
    torch's strides (`aot_eager`: "view size is not compatible"). The order is torch's own: the op runs
    once per layout on meta tensors and the result's strides are read (remembered per layout)."""
    tensors = [t for t in operands if isinstance(t, torch.Tensor) and not (t.is_cpu and t.dim() == 0)]
    if all(t.is_contiguous() for t in tensors):
        return None
    key = tuple((t.shape, t.stride()) for t in tensors)
    try:
        return _orders[key]
    except KeyError:
        pass
    metas = [torch.empty_strided(t.shape, t.stride(), device="meta") for t in tensors]  # float32
    if len(metas) == 1:
        result = -metas[0]
    elif len(metas) == 2:
        result = metas[0] + metas[1]
    else:  # where(condition, a, b): the layout rule reads the operands in this order
        result = torch.where(metas[0] != 0, metas[1], metas[2])
    order = None
    if not result.is_contiguous():
        # outermost first: larger strides first, equal strides (size-1 dims) in their own order
        order = tuple(sorted(range(result.dim()), key=lambda d: (-result.stride(d), d)))
        if order == tuple(range(result.dim())):
            order = None
    _orders[key] = order
    return order


def in_order(t, order: tuple[int, ...], nd: int):
    """Tensor `t` (broadcastable to `nd` dims) seen with its dims in `order`; numbers and 0-dim tensors
    pass through (a 0-dim tensor broadcasts in any order, and reshaped to `nd` dims it would take part
    in type promotion as a dimensioned one: bfloat16 x.t() + a float16 0-dim tensor gave float32)."""
    if not isinstance(t, torch.Tensor) or t.dim() == 0:
        return t
    if t.dim() < nd:
        t = t.reshape((1,) * (nd - t.dim()) + tuple(t.shape))
    return t.permute(order)


def restored(t: torch.Tensor, order: tuple[int, ...]) -> torch.Tensor:
    """The result computed in `order` (`in_order`), with the op's dims back in place."""
    inverse = [0] * len(order)
    for position, dim in enumerate(order):
        inverse[dim] = position
    return t.permute(inverse)


_LARGEST = {dtype: torch.finfo(dtype).max for dtype in FLOATS}


def beyond_dtype(value: float, dtype: torch.dtype) -> bool:
    """Whether a finite number is larger in magnitude than `dtype`'s largest value: torch's CPU kernels
    refuse to write it into such a tensor ("value cannot be converted to type c10::Half without
    overflow": fill_, masked_fill), where a kernel would store an infinity. NaN and infinities convert."""
    return abs(value) > _LARGEST[dtype] and abs(value) != float("inf")


def fill_floats(x: torch.Tensor, value: float) -> torch.Tensor:
    """The contiguous floating `x` filled with `value` by `unary_kernel`'s FILL op (`elementwise.fill`
    once it has checked the call; the zeros of a product over K = 0)."""
    n = x.numel()
    if n:
        E = _k("elementwise")
        size = fused_block(n, True)  # FILL has a specialisation of its own
        E.unary_kernel[(cdiv(n, size),)](x, x, n, float(value), OP=E.FILL, BLOCK=size)
    return x


def _device_index(*tensors) -> int:
    for t in tensors:
        if isinstance(t, torch.Tensor) and not t.is_cpu:
            return t.get_device()
    raise Decline("scalar-only inputs")


def overlaps(target: torch.Tensor, *inputs: torch.Tensor) -> bool:
    """Whether the contiguous `target` shares bytes with an input other than itself (the same object):
    what a plan's run checks before writing `target` (an `out=`, or self in place)."""
    start = target.data_ptr()
    end = start + target.nbytes
    for tensor in inputs:
        if tensor is not target:
            begin = tensor.data_ptr()
            if begin < end and start < begin + tensor.nbytes:
                return True
    return False


def _check_out(out: torch.Tensor | None, shape, dtype, index) -> torch.Tensor:
    if out is None:
        return empty(shape, dtype, index)
    if list(out.shape) != list(shape):
        raise Decline("out= needs a resize")
    if not out.is_contiguous():
        raise StridedTarget("non-contiguous output")
    if out.dtype not in FLOATS and out.dtype != torch.bool and out.dtype not in INTEGERS:
        raise Decline(f"output dtype {str(out.dtype).replace('torch.', '')}")
    if not torch.can_cast(dtype, out.dtype):
        raise Decline("result type cannot be cast to the output")  # the CPU kernel raises torch's error
    if out.is_cpu or out.get_device() != index:
        raise Decline("output on another device")
    return out


def contiguous(t: torch.Tensor) -> torch.Tensor:
    """`t` itself when contiguous, else a contiguous copy made by the strided copy kernel."""
    if t.is_contiguous():
        return t
    return cast_copy(t, t.dtype)


def cast_copy(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous copy of `t` in `dtype`, made by the copy kernels (`_copy.copy_into`)."""
    from ._copy import copy_into  # _copy builds on this module

    out = empty(t.shape, dtype, t.get_device())
    copy_into(t, out)
    return out


def binary_output(a, b, compute: torch.dtype, out, index: int, operands, *, comparison: bool,
                  inplace: bool) -> torch.Tensor:
    """The tensor a binary op writes: `out`, `a` (in place) or a new one, once checked against the
    broadcast shape, the result dtype and aliasing with the `operands` the kernel reads."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        shape = list(a.shape) if a.shape == b.shape else _broadcast(a.shape, b.shape)
    else:
        shape = list(a.shape if isinstance(a, torch.Tensor) else b.shape)
    if inplace:
        if list(a.shape) != shape:
            raise Decline("in-place result needs broadcasting of self")
        if not comparison and not torch.can_cast(compute, a.dtype):
            raise Decline("result type cannot be cast to self")
        out = a
    out = _check_out(out, shape, torch.bool if comparison else compute, index)
    if out is a or out is b:
        # The kernel reads each element before writing it, so exact aliasing is safe; overlap is not:
        # dense partial overlap raises torch's error (our host views would hide it from the CPU path),
        # other overlap takes the CPU path.
        from ._copy import _overlap

        for t in operands:
            if t is not out and t.numel() > 1:
                overlap = _overlap(t, out)
                if overlap is not None and overlap != "same":
                    raise Decline("output overlaps an input")
    return out


def _broadcast(*shapes) -> list[int]:
    """torch.broadcast_shapes without its Python-reference overhead."""
    nd = max(len(shape) for shape in shapes)
    out = [1] * nd
    for shape in shapes:
        offset = nd - len(shape)
        for i, size in enumerate(shape):
            current = out[offset + i]
            if size != current:
                if current == 1:
                    out[offset + i] = size
                elif size != 1:
                    raise Decline("shapes do not broadcast")  # the CPU path raises torch's error
    return out
