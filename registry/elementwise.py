"""The elementwise family's plans: binary ops (`binary_dense_kernel`: same shape, a scalar, a repeated
row or a per-row column), unary ops and fills (`unary_kernel`), where and masked_fill (`where_kernel`),
clamp with tensor bounds (two binary launches), functional, in place and into `out=`.

Each overload gets a `Family` (`binary(...)`, `unary(...)`, `pow_scalar(...)`): its `signature(args,
kwargs)` reads the overload's argument form (a keyword that picks the kernel op, a bound taken as
alpha, ...) into the operands `(a, b, alpha, out)` / `(x, p, out)` and keys them by what the plan's
decisions read: op, dtypes, shapes, device, whether `b` is a number, the `out=` tensor's dtype and
shape. Only contiguous rbln tensors are keyed (a strided view's layout is decided afresh each call by
`_ops`). `plan` makes the decisions as `_ops.binary` / `_ops.unary` make them for such operands, so a
plan launches exactly what the general implementation would (the tests compare them bitwise).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from torch_rbln import _memory, config
from torch_rbln.tp import device_tp, requested_backend

from ._finite_scan import PARALLEL_MIN, all_finite, contiguous_scan
from ._ops import (
    _I32,
    _TILED_MIN,
    FLOATS,
    Decline,
    _block,
    _broadcast,
    _cdiv,
    _dense_layout,
    _k,
    _modules,
    _scalar_tensor,
    dense_binary_key,
    scalar_value,
    unary_key,
    where_geometry,
)
from .plan import NO_PLAN, Family, Plan, contiguous_on

Reader = Callable[[tuple, dict], "tuple | None"]


def _out_key(target: Any) -> tuple | None | bool:
    """The key of an `out=` tensor: (dtype, shape, device) of a contiguous one, None for no `out=`, False
    for one no plan writes (strided, not a tensor)."""
    if target is None:
        return None
    if not isinstance(target, Tensor) or not target.is_contiguous():
        return False
    return target.dtype, target.shape, target.get_device()


def _overlaps(target: Tensor, *inputs: Tensor) -> bool:
    """Whether the contiguous `target` shares bytes with an input other than itself."""
    start = target.data_ptr()
    end = start + target.nbytes
    for tensor in inputs:
        if tensor is not target:
            begin = tensor.data_ptr()
            if begin < end and start < begin + tensor.nbytes:
                return True
    return False


# ---------------------------------------------------------------- argument forms

def _keywords(kwargs: dict, out: bool, keyword: str | None, ops: dict | None, op: Any
              ) -> tuple[Any, Any, int] | None:
    """Reads the keywords every keyed overload shares: `out=` (present exactly when `out`) and the
    optional `keyword` whose value (a string or None) picks the kernel op from `ops`. Returns (op, the
    `out=` tensor or None, how many other keywords are left), or None when the call cannot be keyed."""
    count, target = len(kwargs), None
    if out:
        target = kwargs.get("out")
        if target is None:
            return None
        count -= 1
    if keyword is not None and keyword in kwargs:
        value = kwargs[keyword]
        op = ops.get(value) if value is None or type(value) is str else None
        if op is None:
            return None
        count -= 1
    return op, target, count


def _plain(out: bool, keyword: str | None = None, ops: dict | None = None, default: Any = None,
           name: str = "") -> Reader:
    """`(a, b)` with an optional `alpha=`, `out=` (exactly when `out`) and `keyword=` (a value of `ops`
    picks the kernel op, `default` when absent). Returns (op, a, b, alpha, out) or None."""

    plain_op = ops[default] if keyword is not None else name

    def read(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 2:
            return None
        op, alpha, target = plain_op, 1.0, None
        if kwargs or out:
            read_keywords = _keywords(kwargs, out, keyword, ops, op)
            if read_keywords is None:
                return None
            op, target, count = read_keywords
            if count:
                if count != 1 or "alpha" not in kwargs:
                    return None
                alpha = kwargs["alpha"]
                kind = type(alpha)
                if kind is not float and kind is not int:
                    return None
        return op, args[0], args[1], alpha, target

    return read


def _third_as_alpha(name: str) -> Reader:
    """`name(a, b, number)`, the number taken as alpha (threshold_backward's threshold)."""

    def read(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 3 or kwargs:
            return None
        alpha = args[2]
        kind = type(alpha)
        return (name, args[0], args[1], alpha, None) if kind is float or kind is int else None

    return read


def _clamp(out: bool, only: str | None) -> Reader:
    """`clamp(x, min, max)` with number bounds (or None; `only`: the overload takes that bound only):
    the binary clamp op with the lower bound as `b` and the upper one as alpha, as `table._clamp`."""

    def read(args: tuple, kwargs: dict) -> tuple | None:
        count = len(args)
        target = None
        if kwargs or out:
            if len(kwargs) != 1 or not out:
                return None
            target = kwargs.get("out")
            if target is None:
                return None
        if only is None:
            if not 2 <= count <= 3:
                return None
            low, high = args[1], args[2] if count == 3 else None
        elif count != 2:
            return None
        else:
            low, high = (args[1], None) if only == "min" else (None, args[1])
        if low is None and high is None:
            return None
        for bound in (low, high):
            if bound is not None and type(bound) is not int and type(bound) is not float:
                return None
        return "clamp", args[0], -math.inf if low is None else low, math.inf if high is None else high, target

    return read


# ---------------------------------------------------------------- binary

def _binary_key(op: str, a: Any, b: Any, alpha: Any, target: Any, tag: Any = True) -> tuple | None:
    """(key, operands) of a binary call read as (op, a, b, alpha, out), or None when it is not keyed."""
    if not isinstance(a, Tensor) or not a.is_contiguous():
        return None
    index = a.get_device()
    if index < 0:
        return None
    kind = type(b)
    if kind is float or kind is int:
        b_key = None
    elif isinstance(b, Tensor) and b.is_contiguous():
        b_key = (b.dtype, b.shape, b.get_device())
    else:
        return None
    out_key = None if target is None else _out_key(target)
    if out_key is False:
        return None
    return (tag, op, a.dtype, a.shape, index, b_key, out_key), (a, b, alpha, target)


def binary(name: str = "", *, inplace: bool = False, comparison: bool = False, out: bool = False,
           keyword: str | None = None, ops: dict | None = None, default: Any = None,
           form: str = "plain", only: str | None = None) -> Family:
    """The family of a binary overload: `form` "plain" (`(a, b)`, alpha=, out=, a `keyword` whose value
    picks the op from `ops`), "third_as_alpha", or "clamp" (number bounds, `only` "min"/"max")."""
    if form == "plain":
        read = _plain(out, keyword, ops, default, name)
    elif form == "third_as_alpha":
        read = _third_as_alpha(name)
    else:
        read = _clamp(out, only)

    plain = form == "plain" and keyword is None and not out

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if plain and not kwargs and len(args) == 2:  # the common call, read inline
            return _binary_key(name, args[0], args[1], 1.0, None)
        operands = read(args, kwargs)
        return None if operands is None else _binary_key(*operands)

    def plan(key: tuple, operands: tuple) -> Plan:
        return binary_plan(key, operands, inplace=inplace, comparison=comparison)

    return Family(signature, plan)


def binary_plan(key: tuple, operands: tuple, *, inplace: bool, comparison: bool, scan: bool = True) -> Plan:
    """The plan of `_ops.binary`'s dense launch for `key` (see `_binary_key`), or NO_PLAN where
    `_ops.binary` would do something else (promotion, the strided kernel, an integer kernel)."""
    _, op_name, dtype, a_shape, index, b_key, out_key = key
    if dtype not in FLOATS:
        return NO_PLAN
    a, b = operands[0], operands[1]
    scalar = b_key is None
    out_dtype = torch.bool if comparison and not inplace else dtype
    if scalar:
        shape = tuple(a_shape)
        if op_name == "div_trunc":
            op_name = "div_trunc_scalar"  # as `_ops.binary`: torch does not round a scalar quotient
        b = _scalar_tensor(0.0, index)  # the layout stand-in of the scalar's float32 tensor
    else:
        b_dtype, b_shape, b_index = b_key
        if b_dtype is not dtype or b_index != index:
            return NO_PLAN
        shape = tuple(a_shape) if a_shape == b_shape else tuple(_broadcast(a_shape, b_shape))  # or Decline
    numel = math.prod(shape)
    if numel == 0 or (inplace and shape != tuple(a_shape)) or (out_key is not None and
                                                               out_key != (out_dtype, shape, index)):
        return NO_PLAN
    layout = _dense_layout((a, b), list(shape), numel)
    if layout is None:
        return NO_PLAN
    modes, n = layout
    E = _k("elementwise")
    launch_key, keywords = dense_binary_key(E, op_name, (dtype, b.dtype, out_dtype), n, modes)
    plan = Plan(E.binary_dense_kernel, launch_key, keywords, _cdiv(n, keywords["BLOCK"]), numel // n, shape,
                out_dtype, (0,) if scalar else (0, 1))
    plan.run = _binary_run(plan, op_name, dtype, index, n, a.numel(), 1 if scalar else b.numel(), scalar,
                           inplace, keywords["OP"], scan)
    return plan


def _unscanned() -> bool:
    return True  # stands in for `config.deploy_mode()` in a run whose inputs are checked already


def _binary_run(plan: Plan, op_name: str, dtype: torch.dtype, index: int, n: int, a_numel: int,
                b_numel: int, scalar: bool, inplace: bool, op: int, scanned: bool
                ) -> Callable[[tuple], Tensor | None]:
    programs, rows, shape, out_dtype = plan.programs, plan.rows, plan.shape, plan.dtype
    split = programs * rows > 1
    scan, mask = contiguous_scan(dtype)
    small = a_numel < PARALLEL_MIN and b_numel < PARALLEL_MIN
    empty, deploy_mode = _memory.empty, config.deploy_mode
    if not scanned:  # inputs the caller has checked already (clamp's second launch)
        deploy_mode = _unscanned

    def run(operands: tuple) -> Tensor | None:
        a, b, alpha, target = operands
        if scalar:
            b = _scalar_tensor(scalar_value(op_name, b, dtype), index)
        elif inplace and b is not a and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr():
            return None  # self overlaps the other operand: the implementation decides
        if target is not None and (_overlaps(target, a) if scalar else _overlaps(target, a, b)):
            return None  # out= shares memory with an input: the implementation decides
        launcher = plan.launcher
        if launcher is None or plan.backend != requested_backend():
            launcher = plan.kept()
        if not deploy_mode():
            if small:
                if not scan(a.data_ptr(), a_numel, mask) or not (scalar or scan(b.data_ptr(), b_numel, mask)):
                    return None
            elif not (all_finite(a) and (scalar or all_finite(b))):
                return None
        if target is None:
            target = a if inplace else empty(shape, out_dtype, index)
        if launcher is None or (split and device_tp(index) > 1):
            plan.launch_checked((a, b, target, n, float(alpha)))
        else:
            launcher(programs, rows, 1, a, b, target, n, float(alpha), op)
        return target

    return run


# ---------------------------------------------------------------- unary

def _unary_key(op: str, x: Any, p: float, target: Any) -> tuple | None:
    if not isinstance(x, Tensor) or not x.is_contiguous():
        return None
    index = x.get_device()
    # in place: True (x itself is written; nothing more to key)
    out_key = None if target is None else True if target is x else _out_key(target)
    if index < 0 or out_key is False:
        return None
    return (False, op, x.dtype, x.shape, index, out_key), (x, p, target)


def unary(name: str, *, inplace: bool = False, out: bool = False, keyword: str | None = None,
          ops: dict | None = None, default: Any = None) -> Family:
    """The family of a unary overload `name(x)`, functional, in place or into `out=`; `keyword`: an
    optional keyword whose value picks the op from `ops` (gelu's `approximate`)."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 1:
            return None
        op, target = name, None
        if kwargs or out:
            read_keywords = _keywords(kwargs, out, keyword, ops, op)
            if read_keywords is None or read_keywords[2]:
                return None
            op, target, _ = read_keywords
        return _unary_key(op, args[0], 0.0, args[0] if inplace else target)

    def plan(key: tuple, operands: tuple) -> Plan:
        return unary_plan(key, operands)

    return Family(signature, plan)


def unary_plan(key: tuple, operands: tuple, scanned: bool = True) -> Plan:
    """The plan of `_ops.unary`'s launch for `key` (see `_unary_key`); NO_PLAN where it would not
    launch so. `scanned` False: x is only written (a fill), never scanned."""
    _, op_name, dtype, shape, index, out_key = key
    n = math.prod(shape)
    if dtype not in FLOATS or n == 0 or out_key not in (None, True, (dtype, shape, index)):
        return NO_PLAN
    E = _k("elementwise")
    launch_key, keywords = unary_key(E, op_name, (dtype, dtype), n)
    programs = _cdiv(n, keywords["BLOCK"])
    plan = Plan(E.unary_kernel, launch_key, keywords, programs, 1, tuple(shape), dtype,
                (0,) if scanned else ())
    op = keywords["OP"]
    scan, mask = contiguous_scan(dtype)
    small = n < PARALLEL_MIN
    empty, deploy_mode = _memory.empty, config.deploy_mode if scanned else _unscanned

    def run(operands: tuple) -> Tensor | None:
        x, p, target = operands
        if target is not None and target is not x and _overlaps(target, x):
            return None
        launcher = plan.launcher
        if launcher is None or plan.backend != requested_backend():
            launcher = plan.kept()
        if not deploy_mode() and not (scan(x.data_ptr(), n, mask) if small else all_finite(x)):
            return None
        if target is None:
            target = empty(shape, dtype, index)
        if launcher is None or (programs > 1 and device_tp(index) > 1):
            plan.launch_checked((x, target, n, float(p)))
        else:
            launcher(programs, 1, 1, x, target, n, float(p), op)
        return target

    plan.run = run
    return plan


# pow(x, exponent) -> (unary op, its parameter) for the exponents `table._pow_scalar` special-cases as
# torch does (2 is x * x, a binary mul); every other exponent is the generic "pow" with p = exponent
_POW_UNARY = {1: ("scale", 1.0), 0.5: ("sqrt", 0.0), 3: ("cube", 0.0), -1: ("reciprocal", 0.0),
              -2: ("reciprocal_square", 0.0), -0.5: ("rsqrt", 0.0)}


def pow_scalar(*, out: bool = False) -> Family:
    """`pow(x, exponent)` with a real number exponent: `mul(x, x)` for 2, else the unary op
    `table._pow_scalar` picks."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 2 or len(kwargs) != out:
            return None
        target = kwargs.get("out") if out else None
        x, exponent = args
        kind = type(exponent)
        if kind is not int and kind is not float:
            return None
        if exponent == 2:
            return _binary_key("mul", x, x, 1.0, target)
        op, p = _POW_UNARY.get(exponent) or ("pow", float(exponent))
        return _unary_key(op, x, p, target)

    def plan(key: tuple, operands: tuple) -> Plan:
        if key[0]:
            return binary_plan(key, operands, inplace=False, comparison=False)
        return unary_plan(key, operands)

    return Family(signature, plan)


# ---------------------------------------------------------------- fill

def fill(*, zero: bool) -> Family:
    """`fill_(x, value)` (`zero`: `zero_(x)`) on a contiguous floating rbln tensor: the FILL op of
    `unary_kernel`. x is only written, so nothing is scanned. Until another op has loaded the kernels,
    fills stay on the host (`_ops.fill`): no signature then."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if kwargs or len(args) != 2 - zero or "elementwise" not in _modules:
            return None
        value = 0.0
        if not zero:
            value = args[1]
            kind = type(value)
            if kind is not float and kind is not int and kind is not bool:
                return None
        x = args[0]
        return _unary_key("fill", x, float(value), x)

    def plan(key: tuple, operands: tuple) -> Plan:
        return unary_plan(key, operands, scanned=False)

    return Family(signature, plan)


# ---------------------------------------------------------------- where, masked_fill

def where(*, out: bool = False) -> Family:
    """`where(condition, a, b)` on contiguous rbln tensors (a bool condition, `a` and `b` of one
    floating dtype) whose shapes broadcast: `_ops.where`'s launch. `out`: `where.self_out`."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 3 or len(kwargs) != out:
            return None
        target = kwargs.get("out") if out else None
        condition, a, b = args
        if not isinstance(a, Tensor) or not a.is_contiguous():
            return None
        index = a.get_device()
        out_key = _out_key(target)
        if index < 0 or out_key is False:
            return None
        dtype = a.dtype
        if not (contiguous_on(b, index) and contiguous_on(condition, index)) or b.dtype is not dtype or \
                condition.dtype is not torch.bool:
            return None  # (promotion, a non-bool condition: the implementation)
        return (dtype, condition.shape, a.shape, b.shape, index, out_key), (condition, a, b, target)

    def plan(key: tuple, operands: tuple) -> Plan:
        dtype, c_shape, a_shape, b_shape, index, out_key = key
        return where_plan(dtype, (c_shape, a_shape, b_shape), index, out_key, operands[:3], a_scalar=False)

    return Family(signature, plan)


def where_plan(dtype: torch.dtype, shapes: tuple, index: int, out_key: tuple | None, operands: tuple, *,
               a_scalar: bool, inplace: bool = False) -> Plan:
    """The plan of `_ops._where_launch` (the one-block kernel) on contiguous operands of `shapes`
    (condition, a, b): `where` (`a_scalar` False), or `masked_fill` (`a` the value's float32 one-element
    tensor, the result written to b when `inplace`). NO_PLAN for what `_ops` launches otherwise."""
    if dtype not in FLOATS:
        return NO_PLAN
    c_shape, a_shape, b_shape = shapes
    shape = tuple(_broadcast(c_shape, b_shape) if a_scalar else _broadcast(c_shape, a_shape, b_shape))
    n = math.prod(shape)
    if (inplace and shape != tuple(b_shape)) or n == 0 or n >= _TILED_MIN or \
            (out_key is not None and out_key != (dtype, shape, index)):
        return NO_PLAN  # (large: the general path launches the tiled kernel)
    try:
        sizes, sc, sa, sb = where_geometry(list(shape), list(operands), a_scalar=a_scalar)
    except Decline:
        return NO_PLAN  # more than four dims: the general path decides
    ints = (n, *sizes, *sc, *sa, *sb)
    if max(map(abs, ints)) >= _I32:
        return NO_PLAN
    block = _block(n)
    programs = _cdiv(n, block)
    key = (torch.bool, torch.float32 if a_scalar else dtype, dtype, dtype, block)
    plan = Plan(_k("elementwise").where_kernel, key, {"BLOCK": block}, programs, 1, shape, dtype,
                (2,) if a_scalar else (1, 2))
    scan, mask = contiguous_scan(dtype)
    a_numel, b_numel = math.prod(a_shape), math.prod(b_shape)
    empty, deploy_mode = _memory.empty, config.deploy_mode

    def run(operands: tuple) -> Tensor | None:
        condition, a, b, target = operands
        if a_scalar:
            a = _scalar_tensor(a, index)
            if inplace:
                target = b
        elif target is not None and _overlaps(target, condition, a, b):
            return None
        launcher = plan.launcher
        if launcher is None or plan.backend != requested_backend():
            launcher = plan.kept()
        if not deploy_mode() and not (scan(b.data_ptr(), b_numel, mask) and
                                      (a_scalar or scan(a.data_ptr(), a_numel, mask))):
            return None
        if target is None:
            target = empty(shape, dtype, index)
        if launcher is None or (programs > 1 and device_tp(index) > 1):
            plan.launch_checked((condition, a, b, target, *ints))
        else:
            launcher(programs, 1, 1, condition, a, b, target, *ints)
        return target

    plan.run = run
    return plan


_c_float = ctypes.c_float  # a float32 at an address: an rbln tensor's memory is host memory


def _value_number(value: Tensor, index: int) -> float | None:
    """The number a 0-d value tensor holds, as `_ops.masked_fill` reads it (`.item()`), for a value the
    dispatcher's checks pass (on the CPU or rbln:index; float32/16/bf16 finite unless deploy mode, or an
    integer); None otherwise. A float32 value is read straight from memory (`.item()` costs a
    dispatch)."""
    if value.dim():
        return None
    device = value.get_device()  # -1 on the CPU
    if device >= 0 and device != index:
        return None
    dtype = value.dtype
    if dtype is torch.float32:
        number = _c_float.from_address(value.data_ptr()).value
    elif dtype in FLOATS or not (dtype.is_floating_point or dtype.is_complex):
        number = float(value.item())
    else:
        return None
    if dtype.is_floating_point and not math.isfinite(number) and not config.deploy_mode():
        return None
    return number


def masked_fill(*, inplace: bool) -> Family:
    """`masked_fill(x, mask, value)` / `masked_fill_` with a number or 0-d tensor value, a contiguous
    floating `x` and a contiguous bool `mask` that broadcasts to it (an attention mask): the where
    launch of `_ops.masked_fill` (the value as a float32 one-element tensor)."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 3 or kwargs:
            return None
        x, mask, value = args
        if not isinstance(x, Tensor) or not x.is_contiguous():
            return None
        index = x.get_device()
        if index < 0 or not contiguous_on(mask, index) or mask.dtype is not torch.bool:
            return None
        kind = type(value)
        if kind is float or kind is int:
            number = float(value)
        elif isinstance(value, Tensor):
            number = _value_number(value, index)
            if number is None:
                return None
        else:
            return None
        return (x.dtype, x.shape, mask.shape, index), (mask, number, x, None)

    def plan(key: tuple, operands: tuple) -> Plan:
        dtype, x_shape, mask_shape, index = key
        mask, _, x, _ = operands
        return where_plan(dtype, (mask_shape, (1,), x_shape), index, None,
                          (mask, _scalar_tensor(0.0, index), x), a_scalar=True, inplace=inplace)

    return Family(signature, plan)


# ---------------------------------------------------------------- clamp with tensor bounds

def clamp_tensor(*, inplace: bool = False, out: bool = False) -> Family:
    """`clamp(x, min, max)` with tensor bounds, functional, in place or into `out=`: the launches of
    `table._clamp_tensor`, maximum with `min` into the result, then minimum with `max` in place on it
    (one bound: that one launch). Every check of both launches is made before the first runs (the
    intermediate result is finite when x, min and max are), so a call makes both launches or none."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        count = len(args)
        if not 2 <= count <= 3 or len(kwargs) != out:
            return None
        target = kwargs.get("out") if out else None
        x, low = args[0], args[1]
        high = args[2] if count == 3 else None
        if low is None:
            return None if high is None else _binary_key("minimum", x, high, 1.0, target, "min")
        first = _binary_key("maximum", x, low, 1.0, target, "max")
        if high is None or first is None:
            return first
        if not isinstance(high, Tensor) or not high.is_contiguous():
            return None
        return (*first[0], high.dtype, high.shape, high.get_device()), (x, low, high, target)

    def plan(key: tuple, operands: tuple) -> Plan:
        if len(key) == 7:  # one bound: one launch
            return binary_plan(key, operands, inplace=inplace, comparison=False)
        x, low, high, target = operands
        first = binary_plan(key[:7], (x, low, 1.0, target), inplace=inplace, comparison=False)
        if first is NO_PLAN:
            return NO_PLAN
        high_dtype, high_shape, high_index = key[7:]
        high_key = (high_dtype, high_shape, high_index)
        clip_key = (True, "minimum", first.dtype, first.shape, high_index, high_key, None)
        # (the clip reads the first launch's finite result and `high`, scanned before the first launch)
        clip = binary_plan(clip_key, (x, high, 1.0, None), inplace=True, comparison=False, scan=False)
        if clip is NO_PLAN:
            return NO_PLAN
        plan = Plan(scanned=(0, 1, 2))
        run_first, run_clip = first.run, clip.run
        scan, mask = contiguous_scan(high_dtype)
        high_numel = math.prod(high_shape)
        small = high_numel < PARALLEL_MIN

        def run(operands: tuple) -> Tensor | None:
            x, low, high, target = operands
            if target is high or (target is not None and _overlaps(target, high)):
                return None
            storage = x.untyped_storage().data_ptr()
            if inplace and ((low.untyped_storage().data_ptr() == storage and low is not x) or
                            high.untyped_storage().data_ptr() == storage):
                return None  # the bounds overlap the result: the implementation decides
            if not config.deploy_mode() and not (scan(high.data_ptr(), high_numel, mask) if small else
                                                 all_finite(high)):
                return None  # (x and low are scanned by the first launch, before it runs)
            result = run_first((x, low, 1.0, target))
            if result is None:
                return None
            return run_clip((result, high, 1.0, None))

        plan.run = run
        return plan

    return Family(signature, plan)
