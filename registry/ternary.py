"""Pointwise ops of three operands: `addcmul`, `addcdiv` and `lerp` (a tensor or a number weight), as a
new result, in place and `out=`, on `kernels/elementwise.ternary_tiled_kernel`.

Why: torch's optimizers call them once per parameter and step (Adam and AdamW's moments and update:
lerp_, addcmul_, addcdiv_; RMSprop and Adagrad: addcmul_, addcdiv_), `foreach` ones too (their slow path
calls these per tensor). Without them every such step ran its moments on the CPU fallback, each operand
copied out and back.

Operands of one float dtype (float32, float16, bfloat16) on one device, broadcasting as torch does; other
dtypes (torch promotes them) decline to the CPU fallback, which computes or raises torch's error. A new
result is laid out as torch lays it out (`_ops.output_order`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import _launch
from ._base import require_float
from ._ops import (
    Decline,
    _broadcast,
    _check_out,
    _geometry,
    _k,
    in_order,
    output_order,
    restored,
)
from .geometry import I32, cdiv, small_tile_shape
from .plan import Launch

__all__ = ["addcdiv", "addcmul", "lerp", "ternary", "ternary_launch"]


def ternary_launch(op: str, dtype: torch.dtype, out_dtype: torch.dtype, n: int, sizes: list[int],
                   strides: list[list[int]]) -> Launch:
    """`ternary_tiled_kernel` for `op` over the `n` elements of `_geometry`'s layout (sizes s1..s3, then
    the strides of a, b and c: the ints after the four tensors and the number), in tiles of the last
    two dims (`small_tile_shape`). The key is None when an int needs 64 bits."""
    E = _k("elementwise")
    code = E.TERNARY[op]
    _, s2, s3 = sizes
    block_m, block_n = small_tile_shape(n, s2, s3)
    keywords = {"OP": code, "BLOCK_M": block_m, "BLOCK_N": block_n}
    ints = (*sizes, *(stride for operand in strides for stride in operand))
    fits = max(n, *map(abs, ints)) < I32
    return Launch(E.ternary_tiled_kernel, (dtype, out_dtype, code, block_m, block_n) if fits else None,
                  keywords, cdiv(s2, block_m) * cdiv(s3, block_n), n // (s2 * s3), ints)


def _number(value: Any, what: str) -> float:
    """A real number argument as the float32 the kernel reads (torch converts it to the op's math type)."""
    if isinstance(value, Tensor) or isinstance(value, complex) or not isinstance(value, (bool, int, float)):
        raise Decline(f"{what} of type {type(value).__name__}")
    return float(value)


def _operands(a: Any, b: Any, c: Any) -> tuple[list[Tensor], int]:
    """The tensor operands (c may be None) and their device, each an rbln tensor of one float dtype."""
    tensors = [t for t in (a, b, c) if t is not None]
    if not all(isinstance(t, Tensor) for t in tensors):
        raise Decline("a number where a tensor operand is expected")
    if any(t.is_cpu for t in tensors):
        raise Decline("CPU tensor operand")
    index = a.get_device()
    if any(t.get_device() != index for t in tensors):
        raise Decline("operands on several devices")  # torch's error, from the CPU fallback
    dtype = a.dtype
    require_float(dtype)
    if any(t.dtype is not dtype for t in tensors):
        raise Decline("operands of several dtypes")  # torch promotes (or refuses): the CPU fallback
    return tensors, index


def _overlaps_self(a: Tensor, others: list[Tensor]) -> bool:
    """Whether an operand shares memory with `a` other than as `a` itself, lane for lane (an in-place
    op reads every lane before it writes it; a shifted view of self would read written lanes)."""
    start, end = a.data_ptr(), a.data_ptr() + a.nbytes
    for t in others:
        if t.untyped_storage().data_ptr() != a.untyped_storage().data_ptr():
            continue
        same = t.data_ptr() == a.data_ptr() and t.shape == a.shape and t.stride() == a.stride()
        begin = t.data_ptr()
        if not same and begin < end and start < begin + t.nbytes:
            return True
    return False


def ternary(op: str, a: Tensor, b: Tensor, c: Tensor | None, value: float, out: Tensor | None = None, *,
            inplace: bool = False, ordered: bool = False) -> Tensor:
    """`op` ("addcmul", "addcdiv", "lerp", or "lerp_scalar" with c None and the weight in `value`) on
    a (self), b and c: a new result, `out=` (contiguous, the broadcast shape) or a in place."""
    if out is None and not inplace and not ordered:
        order = output_order(*(t for t in (a, b, c) if t is not None))
        if order is not None:
            nd = len(order)
            seen = [None if t is None else in_order(t, order, nd) for t in (a, b, c)]
            return restored(ternary(op, *seen, value, ordered=True), order)
    tensors, index = _operands(a, b, c)
    shape = _broadcast(*(t.shape for t in tensors))
    if inplace:
        if list(a.shape) != shape:
            raise Decline("in-place result needs broadcasting of self")  # torch's error, from the CPU
        if not a.is_contiguous():
            raise Decline("non-contiguous in-place")
        if _overlaps_self(a, tensors[1:]):
            raise Decline("an operand overlaps self")
        out = a
    else:
        out = _check_out(out, shape, a.dtype, index)
    n = out.numel()
    if n:
        operands = [a, b, c if c is not None else a]  # LERP_SCALAR never reads c
        broadcast, sizes, strides = _geometry(shape, operands)
        if not broadcast:  # every operand dense in the result's layout: one flat run
            sizes, strides = [1, 1, n], [[0, 0, 0, 1]] * 3
        g = ternary_launch(op, a.dtype, out.dtype, n, sizes, strides)
        _launch.launch_decided(g, (*operands, out, value, *g.ints))
    return out


def addcmul(a: Tensor, b: Tensor, c: Tensor, *, value: Any = 1, out: Tensor | None = None,
            inplace: bool = False) -> Tensor:
    return ternary("addcmul", a, b, c, _number(value, "value"), out, inplace=inplace)


def addcdiv(a: Tensor, b: Tensor, c: Tensor, *, value: Any = 1, out: Tensor | None = None,
            inplace: bool = False) -> Tensor:
    return ternary("addcdiv", a, b, c, _number(value, "value"), out, inplace=inplace)


def lerp(a: Tensor, end: Tensor, weight: Any, *, out: Tensor | None = None, inplace: bool = False) -> Tensor:
    """lerp.Scalar (a number weight, passed to the kernel) and lerp.Tensor (a weight tensor, broadcast)."""
    if isinstance(weight, Tensor):
        return ternary("lerp", a, end, weight, 0.0, out, inplace=inplace)
    return ternary("lerp_scalar", a, end, None, _number(weight, "weight"), out, inplace=inplace)
