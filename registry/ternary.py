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

import math
from typing import Any

import torch
from torch import Tensor

from torch_rbln import _memory
from torch_rbln.tp import device_tp, requested_backend

from . import _launch
from ._base import FLOATS, StridedTarget, partial_overlap, real_number, require_float
from ._ops import (
    Decline,
    _broadcast,
    _check_out,
    _geometry,
    _k,
    in_order,
    output_order,
    overlaps,
    restored,
)
from .elementwise import unary
from .geometry import I32, cdiv, fused_block, small_tile_shape
from .plan import NO_PLAN, Family, Launch, Plan

__all__ = ["addcdiv", "addcmul", "lerp", "ternary", "ternary_family", "ternary_launch"]


def ternary_launch(op: str, dtype: torch.dtype, out_dtype: torch.dtype, n: int, sizes: list[int] | None,
                   strides: list[list[int]]) -> Launch:
    """The launch of `op` over `n` elements (the ints after the four tensors and the number): with
    `sizes` None (every operand dense in the result's layout) `ternary_dense_kernel`, flat; else
    `ternary_tiled_kernel` over `_geometry`'s layout (sizes s1..s3, then the strides of a, b and c), in
    tiles of the last two dims (`small_tile_shape`). The key is None when an int needs 64 bits."""
    E = _k("elementwise")
    code = E.TERNARY[op]
    if sizes is None:
        # addcmul/addcdiv read each value once (the backend fuses them into one loop over the lanes that
        # exist, whatever BLOCK); lerp reads a and the weight twice: `block`'s three buckets
        size = fused_block(n, op in ("addcmul", "addcdiv"))
        return Launch(E.ternary_dense_kernel, (dtype, out_dtype, code, size, "dense") if n < I32 else None,
                      {"OP": code, "BLOCK": size}, cdiv(n, size), 1, (n,))
    _, s2, s3 = sizes
    block_m, block_n = small_tile_shape(n, s2, s3)
    keywords = {"OP": code, "BLOCK_M": block_m, "BLOCK_N": block_n}
    ints = (*sizes, *(stride for operand in strides for stride in operand))
    fits = max(n, *map(abs, ints)) < I32
    return Launch(E.ternary_tiled_kernel, (dtype, out_dtype, code, block_m, block_n) if fits else None,
                  keywords, cdiv(s2, block_m) * cdiv(s3, block_n), n // (s2 * s3), ints)


def _layout(shape: list[int], operands: list[Tensor]) -> tuple[list[int] | None, list[list[int]]]:
    """(sizes, strides of a, b and c) of `ternary_launch` over `shape`: `_geometry`'s, or sizes None
    when every operand is dense in the result's layout (the flat kernel)."""
    broadcast, sizes, strides = _geometry(shape, operands)
    return (sizes if broadcast else None), strides


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
            raise StridedTarget("non-contiguous in-place")
        if any(partial_overlap(a, t) for t in tensors[1:]):
            raise Decline("an operand overlaps self")
        out = a
    else:
        out = _check_out(out, shape, a.dtype, index)
    n = out.numel()
    if n:
        operands = [a, b, c if c is not None else a]  # LERP_SCALAR never reads c
        g = ternary_launch(op, a.dtype, out.dtype, n, *_layout(shape, operands))
        _launch.launch_decided(g, (*operands, out, value, *g.ints))
    return out


def addcmul(a: Tensor, b: Tensor, c: Tensor, *, value: Any = 1, out: Tensor | None = None,
            inplace: bool = False) -> Tensor:
    return ternary("addcmul", a, b, c, real_number(value, "value"), out, inplace=inplace)


def addcdiv(a: Tensor, b: Tensor, c: Tensor, *, value: Any = 1, out: Tensor | None = None,
            inplace: bool = False) -> Tensor:
    return ternary("addcdiv", a, b, c, real_number(value, "value"), out, inplace=inplace)


def lerp(a: Tensor, end: Tensor, weight: Any, *, out: Tensor | None = None, inplace: bool = False) -> Tensor:
    """lerp.Scalar (a number weight, passed to the kernel) and lerp.Tensor (a weight tensor, broadcast)."""
    if isinstance(weight, Tensor):
        return ternary("lerp", a, end, weight, 0.0, out, inplace=inplace)
    return ternary("lerp_scalar", a, end, None, real_number(weight, "weight"), out, inplace=inplace)


# ---------------------------------------------------------------- plans

_NUMBERS = (bool, int, float)


def _dense_key(t: Any) -> tuple | None:
    """(dtype, shape, device) of a contiguous rbln tensor (a Parameter too: the optimizer's self), None for
    anything else."""
    if not isinstance(t, Tensor) or not t.is_contiguous():
        return None
    index = t.get_device()
    return None if index < 0 else (t.dtype, t.shape, index)


def ternary_family(name: str, *, inplace: bool = False, out: bool = False) -> Family:
    """The plans of `name` ("addcmul", "addcdiv": (self, tensor1, tensor2, value=); "lerp": (self, end,
    weight), a number weight keyed apart from a tensor one) on contiguous rbln tensors, new, in place or
    into a contiguous `out=`: `ternary`'s launch, decided once per signature. Why: an optimizer step
    calls them once per parameter, and the checked path's promotion, broadcast and layout decisions cost
    ~20 us a call; the numbers (value, a number weight) are arguments of the launch, not of the key."""
    lerp_form = name == "lerp"
    allowed = {"out"} if out else set()
    if not lerp_form:
        allowed.add("value")

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 3 or (kwargs and not allowed.issuperset(kwargs)):
            return None
        a, b, c = args
        target = kwargs.get("out") if out else None
        keys = [_dense_key(a), _dense_key(b)]
        number = lerp_form and type(c) in _NUMBERS
        keys.append(None if number else _dense_key(c))
        if None in keys[:2] or (keys[2] is None and not number) or (out and _dense_key(target) is None):
            return None
        value = c if number else kwargs.get("value", 1) if not lerp_form else 0.0
        key = (number, *keys, None if target is None else _dense_key(target))
        return key, (a, b, None if number else c, value, target)

    def plan(key: tuple, operands: tuple) -> Plan:
        number, a_key, b_key, c_key, out_key = key
        dtype, index = a_key[0], a_key[2]
        keys = (a_key, b_key) if number else (a_key, b_key, c_key)
        if dtype not in FLOATS or any(k[0] is not dtype or k[2] != index for k in keys):
            return NO_PLAN  # the implementation declines (or raises torch's error)
        try:
            shape = _broadcast(*(k[1] for k in keys))
        except Decline:
            return NO_PLAN
        n = math.prod(shape)
        if n == 0 or (inplace and shape != list(a_key[1])) or \
                (out_key is not None and out_key != (dtype, torch.Size(shape), index)):
            return NO_PLAN
        op = "lerp_scalar" if number else name
        a, b, c = operands[0], operands[1], operands[2] if not number else operands[0]
        g = ternary_launch(op, dtype, dtype, n, *_layout(shape, [a, b, c]))
        if g.key is None:
            return NO_PLAN
        built = Plan.of(g, tuple(shape), dtype, ())  # exact: nothing is scanned
        programs, rows, ints, split = g.programs, g.rows, g.ints, g.programs * g.rows > 1
        result_shape = tuple(shape)
        new = _memory.allocator(result_shape, dtype, index)

        def run(operands: tuple) -> Tensor | None:
            a, b, c, value, target = operands
            if type(value) not in _NUMBERS:
                return None  # a tensor or complex value: the implementation declines it
            if c is None:
                c = a  # LERP_SCALAR never reads it
            if inplace:
                if overlaps(a, b, c):
                    return None  # the implementation decides (a view of self: torch's overlap error)
                target = a
            elif target is None:
                target = new()
            elif overlaps(target, a, b, c):
                return None
            launcher = built.launcher if built.backend == requested_backend() else built.kept()
            if launcher is None or (split and device_tp(index) > 1):
                built.launch_checked((a, b, c, target, float(value), *ints))
            else:
                launcher(programs, rows, 1, a, b, c, target, float(value), *ints)
            return target

        built.run = run
        return built

    return Family(signature, plan)


# ---------------------------------------------------------------- log_sigmoid (BCE with logits)


def log_sigmoid_forward(x: Tensor) -> tuple[Tensor, Tensor]:
    """(log_sigmoid(x), exp(-|x|)), as torch's CPU kernel returns them (the buffer its backward reads):
    two unary launches. Why: `F.logsigmoid` and `binary_cross_entropy_with_logits` (multi-label
    classification's loss) ran on the CPU fallback."""
    return unary("log_sigmoid", x), unary("exp_neg_abs", x)


def log_sigmoid_backward(grad: Tensor, x: Tensor, buffer: Tensor) -> Tensor:
    """torch's CPU formula `(max_deriv - sign * (buffer / (1 + buffer))) * grad` (max_deriv 1 and sign 1
    where x < 0, else 0 and -1) on the three-operand kernel."""
    return ternary("log_sigmoid_backward", x, buffer, grad, 0.0)
