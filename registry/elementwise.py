"""The elementwise family: binary ops (incl. division modes, pow, clamp, backward ops), unary ops,
fills, where and masked_fill on the kernels of `kernels/elementwise.py`, functional, in place and into
`out=`; integer results go to `integer.py`.

The checked implementations (`binary`, `unary`, `fill`, `where`, `masked_fill`) take any operands:
promotion, broadcasting, numbers, strided views. Each overload's `Family` (`binary_family`,
`unary_family`, `pow_scalar`, `fill_family`, `where_family`, `masked_fill_family`, `clamp_tensor`)
keys contiguous rbln operands by what the decisions read (op, dtypes, shapes, device, whether `b` is a
number, the `out=` tensor's dtype and shape) and plans their launch. Both take the launch from one
decision per kernel (`dense_binary_launch`, `unary_launch`, `where_launch`), so a plan launches
exactly what the implementation would (the tests compare them bitwise).
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

from . import _launch
from ._base import StridedTarget, real_number, require_float
from ._copy import contiguous_copier, strided_writer
from ._finite_scan import PARALLEL_MIN, all_finite, contiguous_scan, is_dense_permutation
from ._launch import _modules
from ._memo import BoundedMemo
from ._ops import (
    FLOATS,
    INTEGERS,
    Decline,
    _broadcast,
    _check_out,
    _device_index,
    _geometry,
    _k,
    beyond_dtype,
    binary_output,
    cast_copy,
    contiguous,
    empty,
    fill_floats,
    in_order,
    output_order,
    overlaps,
    restored,
)
from .geometry import I32, block, cdiv, fused_block, small_tile_shape
from .integer import (
    BITWISE_DTYPES,
    BITWISE_NAMES,
    INTEGER_NAMES,
    device_scalar,
    held,
    integer_binary,
    integer_fill,
    integer_launch,
    integral,
    true_division_operands,
    wrapped_int,
)
from .plan import NO_PLAN, Direct, Family, Launch, Plan, contiguous_on, scanner, unscanned

# ---------------------------------------------------------------- numbers as operands

_scalar_cache: dict[tuple[float | str, int], Tensor] = BoundedMemo(512)


def _number_key(value: float) -> float | str:
    """`value` as a memo key that tells -0.0 from 0.0 (equal floats with the same hash, so a dict
    would hand one's entry to the other: `x + -0.0` gave +0.0 for x = -0.0) and finds NaN again (NaN is
    not equal to itself)."""
    return value if value != 0.0 and value == value else repr(value)


def _scalar_tensor(value: float, index: int) -> Tensor:
    """A 1-element float32 rbln tensor holding `value` (cached), broadcast with stride 0."""
    key = (_number_key(value), index)
    tensor = _scalar_cache.get(key)
    if tensor is None:
        tensor = _memory.empty_strided([1], [1], torch.float32, index)
        from torch_rbln import _dlpack

        _dlpack.to_host_view(tensor).fill_(value)
        _scalar_cache[key] = tensor
    return tensor


# Binary ops whose CPU kernels read a scalar operand at full precision; every other op first rounds a
# scalar to the tensor's dtype (TensorIterator's common dtype): `x_f16 + 1e-3` adds float16(1e-3), and
# `x_f16 == 0.1` is true for x = float16(0.1).
_UNROUNDED_SCALAR = frozenset({"mul", "div", "div_trunc", "div_trunc_scalar", "div_floor"})
_HALVES = (torch.float16, torch.bfloat16)
_rounded: dict[tuple[float | str, torch.dtype], float] = BoundedMemo(512)


def scalar_value(name: str, value, dtype: torch.dtype) -> float:
    """The float a scalar operand of op `name` takes part with, as torch's CPU kernels use it."""
    value = float(value)
    if dtype not in _HALVES or name in _UNROUNDED_SCALAR:
        return value
    key = (_number_key(value), dtype)
    rounded = _rounded.get(key)
    if rounded is None:
        rounded = _rounded[key] = torch.tensor(value, dtype=dtype).item()
    return rounded


def _operand(value, index: int, name: str = "", dtype: torch.dtype = torch.float32, *,
             first: bool = False) -> Tensor:
    """A tensor operand as is; a Python or CPU 0-dim scalar, or a 0-dim rbln tensor of another floating
    type than a half-precision result, as a one-element float32 rbln tensor holding the value op `name`
    computes with in `dtype`, as torch's CPU kernels use it (`scalar_value`: bfloat16 x + a float32
    0-dim tensor adds it rounded to bfloat16, x * it multiplies by the unrounded value). A 0-dim tensor
    as the `first` operand is always rounded: the CPU kernels read only a second operand unrounded."""
    if isinstance(value, Tensor):
        if value.is_cpu:
            if value.dim():
                raise Decline("CPU tensor operand")
        elif value.dim() or dtype not in _HALVES or value.dtype is dtype or not value.dtype.is_floating_point:
            return value
        return _scalar_tensor(scalar_value("" if first else name, value.item(), dtype), index)
    if isinstance(value, complex):
        raise Decline("complex scalar")
    return _scalar_tensor(scalar_value(name, value, dtype), index)


def _promoted(a, b) -> torch.dtype:
    dtype = torch.result_type(a, b)
    require_float(dtype)
    return dtype


# ---------------------------------------------------------------- launch decisions


def _dense_layout(operands: tuple, shape: list[int], n: int) -> tuple[tuple[int, int], int] | None:
    """((mode of each operand), row length) of an elementwise op with a contiguous output of `shape`
    (`n` elements) in `binary_dense_kernel`, or None when the strided kernel must read them.

    Modes: 0 the output's layout, 1 a single element, 2 a contiguous trailing block of `shape` repeated
    over the leading dims (its size is the row length), 3 a contiguous leading block of `shape` whose
    value is broadcast over the trailing dims (one value per row; the broadcast dims make the row).
    Every operand must agree on the row length; one must span the output."""
    if n >= I32:
        return None  # rows x row length must stay int32 arithmetic in the kernel
    nd = len(shape)
    modes = []
    ncols = None
    for t in operands:
        numel = t.numel()
        if numel == 1 and n > 1:
            modes.append(1)
            continue
        if not t.is_contiguous():
            return None
        aligned = [1] * (nd - t.dim()) + list(t.shape)
        lead = 0
        while lead < nd and aligned[lead] == 1 and shape[lead] != 1:
            lead += 1  # leading dims it is repeated over
        tail = nd
        while tail > lead and aligned[tail - 1] == 1 and shape[tail - 1] != 1:
            tail -= 1  # trailing dims it is broadcast over
        if aligned[lead:tail] != shape[lead:tail] or (lead and tail < nd):
            return None  # broadcast in the middle, or on both sides: the strided kernel
        if numel == n:
            mode, row = 0, None
        elif lead:
            mode, row = 2, numel
        else:
            mode, row = 3, n // numel
        if row is not None:
            if ncols is not None and ncols != row:
                return None  # operands that disagree on the row length
            ncols = row
        modes.append(mode)
    if 0 not in modes:
        return None  # no operand spans the output: the strided kernel
    return (modes[0], modes[1]), n if ncols is None else ncols


def dense_binary_launch(name: str, operands: tuple, dtypes: tuple, shape: list[int], n: int
                        ) -> tuple | None:
    """(launch key, keywords, programs, rows, row length) of `binary_dense_kernel` for op `name` on
    `operands` (a and b, with a number as its one-element tensor) with a contiguous output of `shape`
    (`n` elements), operand and output `dtypes`; None when the strided kernel must read them."""
    layout = _dense_layout(operands, shape, n)
    if layout is None:
        return None
    modes, ncols = layout
    E = _k("elementwise")
    op = E.BINARY[name]
    size = fused_block(ncols, op in E.FUSED_BINARY)
    keywords = {"OP": op, "A_MODE": modes[0], "B_MODE": modes[1], "BLOCK": size}
    return (dtypes, op, modes, size), keywords, cdiv(ncols, size), n // ncols, ncols


def unary_launch(name: str, dtypes: tuple, n: int) -> tuple:
    """(launch key, keywords, programs) of `unary_kernel` for op `name` over `n` elements with input
    and output `dtypes`."""
    E = _k("elementwise")
    op = E.UNARY[name]
    size = fused_block(n, op in E.FUSED_UNARY)
    return (dtypes, op, size, n < I32), {"OP": op, "BLOCK": size}, cdiv(n, size)


def where_geometry(shape: list[int], operands: list, *, a_scalar: bool) -> tuple:
    """(sizes, condition strides, a strides, b strides) of `where_tiled_kernel` over `shape`: `_geometry`'s,
    or one flat run of the elements when no operand needs broadcasting (`a_scalar`: `a` is a
    one-element value tensor, read at offset 0)."""
    _, sizes, (sc, sa, sb) = _geometry(shape, operands)
    if sizes == [1, 1, 1] and sc == [0, 0, 0, 0]:
        value = [0, 0, 0, 0] if a_scalar else [0, 0, 0, 1]
        return [1, 1, math.prod(shape)], [0, 0, 0, 1], value, [0, 0, 0, 1]
    return sizes, sc, sa, sb


def binary_tiled_launch(name: str, dtypes: tuple, n: int, sizes, sa, sb) -> Launch:
    """`binary_tiled_kernel` for op `name` over the `n` elements of `_geometry`'s broadcast or strided
    layout (sizes, a's and b's strides: the ints after the tensors and alpha), operand and output
    `dtypes`. The key is None when an int needs 64 bits. Every
    broadcast or strided layout takes it, small ones too: the flat `binary_kernel` divides each lane's
    index over four dims for each operand (~36 ns per element)."""
    E = _k("elementwise")
    op = E.BINARY[name]
    _, s2, s3 = sizes
    block_m, block_n = small_tile_shape(n, s2, s3)
    keywords = {"OP": op, "BLOCK_M": block_m, "BLOCK_N": block_n}
    fits = max(n, *map(abs, sa), *map(abs, sb)) < I32
    return Launch(E.binary_tiled_kernel, (dtypes, op, block_m, block_n) if fits else None, keywords,
                  cdiv(s2, block_m) * cdiv(s3, block_n), n // (s2 * s3), (*sizes, *sa, *sb))


def where_launch(dtypes: tuple, n: int, sizes, sc, sa, sb) -> Launch:
    """where over `n` elements of `where_geometry`'s layout (ints: after the four tensors):
    `where_tiled_kernel`, in tiles of the last two dims (`small_tile_shape`). Why tiles at every size:
    a flat kernel divides each lane's index over four dims for each operand. The key (the four `dtypes` and
    the blocks: what determines the specialisation when every int fits in 32 bits) is None otherwise."""
    E = _k("elementwise")
    _, s2, s3 = sizes
    block_m, block_n = small_tile_shape(n, s2, s3)
    keywords = {"BLOCK_M": block_m, "BLOCK_N": block_n}
    programs, rows = cdiv(s2, block_m) * cdiv(s3, block_n), n // (s2 * s3)
    fits = max(n, *map(abs, sc), *map(abs, sa), *map(abs, sb)) < I32
    return Launch(E.where_tiled_kernel, (*dtypes, *keywords.values()) if fits else None, keywords, programs,
                  rows, (*sizes, *sc, *sa, *sb))


# ---------------------------------------------------------------- the checked implementations

# add/sub compute a + alpha * b. With an alpha other than 1, alpha * b can overflow to Inf where torch's
# vectorised CPU kernel fuses the multiply-add and does not (Inf + 2 * -3.4e38: Inf on the CPU, NaN
# here), so the table's `exact` (no NaN/Inf scan) holds for alpha 1 only: other alphas scan.
_ALPHA_SCANNED = frozenset({"add", "sub"})


def _alpha_scan(name: str, alpha: Any, *operands: Any) -> None:
    """Decline("nan_inf") for add/sub with alpha other than 1 and a NaN/Inf float operand (see
    `_ALPHA_SCANNED`); nothing outside deploy mode's reach otherwise."""
    if alpha == 1 or name not in _ALPHA_SCANNED or config.deploy_mode():
        return
    for operand in operands:
        if isinstance(operand, Tensor) and not operand.is_cpu and operand.dtype in FLOATS \
                and not all_finite(operand):
            raise Decline("nan_inf")


# Arithmetic of bools that is logic: torch computes mul and minimum as `and`, add and maximum as `or`
# (the sum of two trues is true), ne as `xor`. `isfinite` (inside isclose and allclose) multiplies two
# bool masks.
_BOOL_AS_BITWISE = {"mul": "bitwise_and", "minimum": "bitwise_and", "add": "bitwise_or",
                    "maximum": "bitwise_or", "ne": "bitwise_xor"}


def binary(name: str, a, b, alpha=1, out=None, *, comparison=False, inplace=False, ordered=False):
    """The general binary op: promotion, broadcasting, scalars, out=, in place. A new result is laid
    out as torch lays it out (`output_order`): the op runs on the operands seen in that order
    (`ordered`: they are), so a transposed input also gives the dense kernel its contiguous operand."""
    if isinstance(alpha, complex) or (isinstance(alpha, Tensor)):
        raise Decline("tensor/complex alpha")
    if out is None and not inplace and not ordered:
        order = output_order(a, b)
        if order is not None:
            nd = len(order)
            return restored(binary(name, in_order(a, order, nd), in_order(b, order, nd), alpha,
                                   comparison=comparison, ordered=True), order)
    if name == "sub" and any(isinstance(t, bool) or (isinstance(t, Tensor) and t.dtype is torch.bool)
                             for t in (a, b)):
        raise Decline("sub of a bool")  # torch's error ("use ~ or logical_not()"), from the CPU
    _alpha_scan(name, alpha, a, b)  # after the reordering, whose call scans the same operands
    if name == "div" and not inplace:
        a, b = true_division_operands(a, b)
    result = torch.result_type(a, b)
    if result in INTEGERS:
        return integer_binary(name, a, b, alpha, out, comparison=comparison, inplace=inplace)
    if result is torch.bool and name in _BOOL_AS_BITWISE and alpha == 1:
        return integer_binary(_BOOL_AS_BITWISE[name], a, b, 1, out, comparison=False, inplace=inplace,
                              compute=torch.bool)
    index = _device_index(a, b)
    compute = _promoted(a, b)
    if name == "div_trunc" and (not isinstance(b, Tensor) or b.is_cpu or not b.dim()):
        # a scalar divisor (a 0-dim tensor, as on the CPU): torch does not round the quotient to a half dtype
        name = "div_trunc_scalar"
    ta = _operand(a, index, name, compute, first=True)
    tb = _operand(b, index, name, compute)
    out = binary_output(a, b, compute, out, index, (ta, tb), comparison=comparison, inplace=inplace)
    shape = list(out.shape)
    n = out.numel()
    if n == 0:
        return out
    E = _k("elementwise")
    launch = dense_binary_launch(name, (ta, tb), (ta.dtype, tb.dtype, out.dtype), shape, n)
    if launch is not None:
        key, keywords, programs, rows, ncols = launch
        _launch.launch(E.binary_dense_kernel, programs, key, (ta, tb, out, ncols, float(alpha)), keywords,
                       rows=rows)
        return out
    bcast, sizes, (sa, sb) = _geometry(shape, [ta, tb])
    if bcast:
        g = binary_tiled_launch(name, (ta.dtype, tb.dtype, out.dtype), n, sizes, sa, sb)
        _launch.launch_decided(g, (ta, tb, out, float(alpha), *g.ints))
        return out
    # dense operands that `dense_binary_launch` declined: 2^31 or more elements
    size = block(n)
    E.binary_kernel[(cdiv(n, size),)](ta, tb, out, n, float(alpha), OP=E.BINARY[name], BLOCK=size)
    return out


def unary(name: str, x: Tensor, p: float = 0.0, out=None, *, inplace=False, ordered=False):
    """The unary op `name` (parameter `p`): a new result is laid out as torch lays it out
    (`output_order`), so a transposed input is read in place instead of copied (`ordered`: it is)."""
    if out is None and not inplace and not ordered:
        order = output_order(x)
        if order is not None:
            return restored(unary(name, x.permute(order), p, ordered=True), order)
    index = _device_index(x)
    if x.dtype in INTEGERS and name in ("abs", "neg"):
        # exact on the integer kernel: abs, and neg as x * -1 (both wrap at the minimum, as torch)
        return integer_binary("abs" if name == "abs" else "mul", x, 0 if name == "abs" else -1, 1, out,
                              comparison=False, inplace=inplace, compute=x.dtype)
    require_float(x.dtype)
    if inplace:
        out = x
        if not x.is_contiguous():
            raise StridedTarget("non-contiguous in-place")
    out = _check_out(out, x.shape, x.dtype, index)
    n = x.numel()
    if n == 0:
        return out
    src = contiguous(x)
    key, keywords, programs = unary_launch(name, (src.dtype, out.dtype), n)
    _launch.launch(_k("elementwise").unary_kernel, programs, key, (src, out, n, float(p)), keywords)
    return out


def fill(x: Tensor, value, *, first_use_ok: bool = True) -> Tensor:
    if not first_use_ok and not _modules:
        # A constant fill (torch.ones/zeros at start-up) does not justify loading the DSL compiler
        # (numba, jinja2): until another op has loaded a kernel module, fills run on the host. Any
        # module will do: a program of gathers and scatters (`zeros_like(x).scatter_add_(...)`) had
        # every fill on the host while it waited for the elementwise module alone.
        raise Decline("DSL not loaded yet")
    if isinstance(value, Tensor):
        if value.dim():
            raise Decline("fill with a non-scalar tensor")
        value = value.item()
    if x.dtype in INTEGERS or x.dtype is torch.bool:
        return integer_fill(x, value)
    require_float(x.dtype)
    if beyond_dtype(float(value), x.dtype):
        raise Decline("fill value beyond the dtype's range")  # torch's overflow error from the CPU
    if not x.is_contiguous():
        return _fill_view(x, value)
    return fill_floats(x, value)


def _fill_view(x: Tensor, value) -> Tensor:
    """A strided view filled as one strided copy of a one-element tensor (`zero_` of a gradient
    buffer's slice): no staging tensor of the view's size, which took twice as long. A view the copy
    kernels cannot write, or whose elements share memory, is left to `staging.py` (`StridedTarget`)."""
    from .staging import distinct_elements

    write = strided_writer(tuple(x.shape), tuple(x.stride()), x.dtype, broadcast=True)
    if write is None or not distinct_elements(x):
        raise StridedTarget("non-contiguous in-place")
    key = (x.dtype, x.get_device(), float(value).hex())  # not the float: -0.0 == 0.0 would share one
    source = _fill_sources.get(key)
    if source is None:  # filled once per value: a second launch per call cost as much as the copy
        source = _fill_sources[key] = fill_floats(empty([1], x.dtype, x.get_device()), value)
    write(source, x)
    return x


_fill_sources: dict[tuple, Tensor] = BoundedMemo(64)  # (dtype, device, value) -> its one-element tensor


def where(condition: Tensor, a, b, out=None, *, ordered=False):
    """`torch.where`; a new result is laid out as torch lays it out (`output_order`, see `binary`)."""
    if out is None and not ordered:
        order = output_order(condition, a, b)
        if order is not None:
            nd = len(order)
            return restored(where(*(in_order(t, order, nd) for t in (condition, a, b)), ordered=True), order)
    index = _device_index(condition, a, b)
    if condition.dtype != torch.bool:
        raise Decline("non-bool condition")
    if condition.is_cpu and condition.dim():
        raise Decline("CPU tensor operand")
    if torch.result_type(a, b) in INTEGERS:
        # integer operands select exactly in their own type; numbers would need an integer stand-in
        if not all(isinstance(t, Tensor) and not t.is_cpu for t in (a, b)):
            raise Decline("integer where with a number operand")
        compute = torch.result_type(a, b)
    else:
        compute = _promoted(a, b)
    shape = _broadcast(*[t.shape for t in (condition, a, b) if isinstance(t, Tensor)])
    ta = _operand(a, index, "where", compute)  # a scalar is stored as the result dtype, rounded once
    tb = _operand(b, index, "where", compute)
    out = _check_out(out, shape, compute, index)
    if out.numel():
        _where(condition, ta, tb, out, a_scalar=False)
    return out


def logical_not(x: Tensor) -> Tensor:
    """`logical_not`: a bool's not (xor with 1 on the integer kernel); for a number, whether it equals
    0 (NaN is true, so its not is False, as `NaN == 0`; -0.0 == 0 is True, as torch's `!x`)."""
    if x.dtype is torch.bool:
        return integer_binary("bitwise_xor", x, 1, 1, None, comparison=False, inplace=False, compute=x.dtype)
    return binary("eq", x, 0, comparison=True)


def masked_fill(x: Tensor, mask: Tensor, value, *, inplace=False):
    if isinstance(value, Tensor):
        if value.dim():
            raise Decline("masked_fill with a non-scalar tensor")
        value = value.item()
    index = x.get_device()
    if x.dtype in INTEGERS or x.dtype is torch.bool:
        # position ids and masks (`position_ids.masked_fill_(attention_mask == 0, 1)` in generate): the
        # value as a 0-dim tensor of x's dtype; a value the dtype does not hold exactly is torch's to cast
        number = integral(value)
        if number is None or not held(number, x.dtype):
            raise Decline(f"masked_fill of {str(x.dtype).replace('torch.', '')} with {value!r}")
        fill_value = device_scalar(number, x.dtype, index)
    else:
        require_float(x.dtype)
        if beyond_dtype(float(value), x.dtype):
            raise Decline("masked_fill value beyond the dtype's range")  # torch's overflow error from the CPU
        fill_value = _scalar_tensor(float(value), index)
    if inplace:
        if _broadcast(x.shape, mask.shape) != list(x.shape):
            raise Decline("in-place result needs broadcasting of self")
        if not x.is_contiguous():
            raise StridedTarget("non-contiguous in-place")
        out = x
    else:
        out = empty(_broadcast(mask.shape, x.shape), x.dtype, index)
    if out.numel():
        _where(mask, fill_value, x, out, a_scalar=True)
    return out


def _where(condition: Tensor, a: Tensor, b: Tensor, out: Tensor, *, a_scalar: bool) -> None:
    """`where_launch`'s launch into `out` (through the launch kept under its key when it has one: a
    masked_fill on attention scores skips the general launch's per-argument key, 17 arguments)."""
    n = out.numel()
    sizes, sc, sa, sb = where_geometry(list(out.shape), [condition, a, b], a_scalar=a_scalar)
    g = where_launch((condition.dtype, a.dtype, b.dtype, out.dtype), n, sizes, sc, sa, sb)
    _launch.launch_decided(g, (condition, a, b, out, *g.ints))


# ---------------------------------------------------------------- plans

Reader = Callable[[tuple, dict], "tuple | None"]


def _out_key(target: Any) -> tuple | None | bool:
    """The key of an `out=` tensor: (dtype, shape, device) of a contiguous one, None for no `out=`, False
    for one no plan writes (strided, not a tensor)."""
    if target is None:
        return None
    if not isinstance(target, Tensor) or not target.is_contiguous():
        return False
    return target.dtype, target.shape, target.get_device()


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
        op, alpha, target = plain_op, 1, None  # (an int: integer ops refuse a float alpha)
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
    if not isinstance(a, Tensor):
        return _number_first_key(op, a, b, alpha, target) if tag is True else None
    if not a.is_contiguous():
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


def _number_first_key(op: str, a: Any, b: Any, alpha: Any, target: Any) -> tuple | None:
    """The key of `number - tensor` (`1 - t`, `1.0 - mask`: `rsub` calls `sub` with the number first,
    which reaches the kernel as a Python number): ("first", op, b's dtype, b's shape, device, None,
    None), operands (a, b, alpha, None), for `sub` into a new tensor with a contiguous rbln float or
    int32/int64 `b` whose dtype the number keeps (an int with either, a float with a float b). None
    otherwise (the implementation decides)."""
    kind = type(a)
    if op != "sub" or target is not None or not isinstance(b, Tensor) or not b.is_contiguous():
        return None
    index = b.get_device()
    dtype = b.dtype
    if index < 0 or not (dtype in FLOATS and (kind is float or kind is int) or
                         dtype in INTEGERS and kind is int):
        return None
    return ("first", op, dtype, b.shape, index, None, None), (a, b, alpha, None)


def number_first_plan(key: tuple, operands: tuple) -> Plan:
    """The plan of `number - b` (`_number_first_key`): the launch `binary` makes for it, the number as
    the first operand's one-element tensor (float: `binary_dense_kernel` with A_MODE 1, b scanned unless
    the op is exact; integer: the integer kernel's broadcast of a 0-dim device int). Runs with the
    number read per call."""
    _, op_name, dtype, shape, index, _, _ = key
    b = operands[1]
    shape = tuple(shape)
    n = math.prod(shape)
    if n == 0:
        return NO_PLAN
    if dtype in FLOATS:
        return _float_first_plan(op_name, dtype, shape, n, index, b)
    stand_in = device_scalar(0, dtype, index)
    g = integer_launch(op_name, (dtype, dtype, dtype), list(shape), n, (stand_in, b), None, 1)
    if g.key is None:
        return NO_PLAN
    plan = Plan.of(g, shape, dtype, ())
    programs, rows, (_, _, _, *geometry) = g.programs, g.rows, g.ints
    new = _memory.allocator(shape, dtype, index)

    def run(operands: tuple) -> Tensor | None:
        a, b, alpha, _ = operands
        if type(alpha) is not int or not -I32 <= alpha < I32:
            return None
        if type(a) is not int:
            return None
        first = device_scalar(wrapped_int(a, dtype), dtype, index)
        launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
        target = new()
        if launcher is None or (programs * rows > 1 and device_tp(index) > 1):
            plan.launch_checked((first, b, 0, target, n, alpha, *geometry))
        else:
            launcher(programs, rows, 1, first, b, 0, target, n, alpha, *geometry)
        return target

    plan.run = run
    return plan


def _float_first_plan(op_name: str, dtype: torch.dtype, shape: tuple, n: int, index: int, b: Tensor) -> Plan:
    stand_in = _scalar_tensor(0.0, index)
    launch = dense_binary_launch(op_name, (stand_in, b), (torch.float32, dtype, dtype), list(shape), n)
    if launch is None:
        return NO_PLAN
    launch_key, keywords, programs, rows, ncols = launch
    plan = Plan(_k("elementwise").binary_dense_kernel, launch_key, keywords, programs, rows, shape, dtype, ())
    split = programs * rows > 1
    new = _memory.allocator(shape, dtype, index)

    def run(operands: tuple) -> Tensor | None:
        a, b, alpha, _ = operands
        if alpha != 1 or type(alpha) is not int:
            return None  # an alpha: the implementation (which scans b for NaN/Inf then)
        first = _scalar_tensor(scalar_value(op_name, a, dtype), index)
        launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
        target = new()
        if launcher is None or (split and device_tp(index) > 1):
            plan.launch_checked((first, b, target, ncols, float(alpha)))
        else:
            launcher(programs, rows, 1, first, b, target, ncols, float(alpha))
        return target

    plan.run = run
    return plan


def binary_family(name: str = "", *, inplace: bool = False, comparison: bool = False, out: bool = False,
           keyword: str | None = None, ops: dict | None = None, default: Any = None,
           form: str = "plain", only: str | None = None, scan: bool = True, bitwise: bool = False) -> Family:
    """The family of a binary overload: `form` "plain" (`(a, b)`, alpha=, out=, a `keyword` whose value
    picks the op from `ops`), "third_as_alpha", or "clamp" (number bounds, `only` "min"/"max").
    `scan` False: the op is IEEE-exact (the table's `exact`), its inputs are not scanned for NaN/Inf.
    `bitwise`: bitwise_and/or/xor, planned for bool and integer tensors only (`integer.bitwise`)."""
    if form == "plain":
        read = _plain(out, keyword, ops, default, name)
    elif form == "third_as_alpha":
        read = _third_as_alpha(name)
    else:
        read = _clamp(out, only)

    plain = form == "plain" and keyword is None and not out

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if plain and not kwargs and len(args) == 2:  # the common call, `_binary_key`'s key read inline
            a, b = args
            if isinstance(a, Tensor) and a.is_contiguous():
                index = a.get_device()
                kind = type(b)
                if kind is float or kind is int:
                    if index >= 0:
                        return (True, name, a.dtype, a.shape, index, None, None), (a, b, 1, None)
                elif isinstance(b, Tensor) and b.is_contiguous() and index >= 0:
                    return ((True, name, a.dtype, a.shape, index, (b.dtype, b.shape, b.get_device()), None),
                            (a, b, 1, None))
            return _binary_key(name, a, b, 1, None)
        operands = read(args, kwargs)
        return None if operands is None else _binary_key(*operands)

    def plan(key: tuple, operands: tuple) -> Plan:
        if key[0] == "first":
            return NO_PLAN if inplace or comparison else number_first_plan(key, operands)
        if key[2] not in FLOATS:
            return integer_plan(key, operands, inplace=inplace, comparison=comparison, bitwise=bitwise)
        if bitwise:
            return NO_PLAN  # (the implementation declines floats)
        return binary_plan(key, operands, inplace=inplace, comparison=comparison, scan=scan)

    return Family(signature, plan)


def predicate_family(op: str, other: float | None) -> Family:
    """isnan (`ne(x, x)`, `other` None) and isposinf / isneginf (`eq(x, +-inf)`) of a floating x: the
    comparison's plan on (x, x or `other`), a bool result, unscanned (IEEE comparisons are exact).
    An integer x is NO_PLAN: the implementation declines it (the CPU answers False everywhere)."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 1 or kwargs:
            return None
        x = args[0]
        return _binary_key(op, x, x if other is None else other, 1, None, "predicate")

    def plan(key: tuple, operands: tuple) -> Plan:
        return binary_plan(key, operands, inplace=False, comparison=True, scan=False)

    return Family(signature, plan)


def bitwise_not_family(*, inplace: bool = False, out: bool = False) -> Family:
    """`bitwise_not(x)` (in place, or into `out=`) of a bool or integer x: `integer.bitwise_not`'s xor
    with all bits set (1 for bool) in x's dtype, as an integer plan."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 1 or len(kwargs) != out:
            return None
        target = kwargs.get("out") if out else None
        x = args[0]
        if (out and target is None) or not isinstance(x, Tensor):
            return None
        return _binary_key("bitwise_xor", x, 1 if x.dtype is torch.bool else -1, 1, target, "not")

    def plan(key: tuple, operands: tuple) -> Plan:
        return integer_plan(key, operands, inplace=inplace, comparison=False, bitwise=True, own_dtype=True)

    return Family(signature, plan)


def integer_plan(key: tuple, operands: tuple, *, inplace: bool, comparison: bool, bitwise: bool,
                 own_dtype: bool = False) -> Plan:
    """The plan of `integer_binary`'s launch for `key` (see `_binary_key`): int32/int64 tensors (bitwise
    ops: bools and every integer dtype) with a tensor of the same dtype or an int, exact, so nothing is
    scanned. NO_PLAN where the implementation does something else: another dtype, promotion, floor
    division and remainder (it checks the divisor's value), an op the integer kernel lacks. `own_dtype`:
    the result has a's dtype whatever the number (bitwise_not's xor, 1 for a bool)."""
    tag, op_name, dtype, a_shape, index, b_key, out_key = key
    names, dtypes = (BITWISE_NAMES, BITWISE_DTYPES) if bitwise else (INTEGER_NAMES, INTEGERS)
    if tag == "fill":  # fill_/zero_ of a bool or integer tensor (`fill_family`)
        names, dtypes = ("fill",), _FILLED_EXACTLY
    elif op_name in ("div_floor", "remainder", "abs", "fill"):
        return NO_PLAN
    if dtype not in dtypes or op_name not in names:
        return NO_PLAN
    a, b = operands[0], operands[1]
    scalar = b_key is None
    b_dtype = dtype
    if scalar:
        shape, operands_read = tuple(a_shape), (a,)
        result = dtype if own_dtype else torch.result_type(a, 1)  # a's dtype, int64 for a bool tensor
    else:
        b_dtype = b_key[0]
        # b of a's dtype, or a bool b with an int32/int64 a (`unfinished & ~finished`: torch promotes the
        # bool to a's dtype, exactly; the kernel reads each operand in its own dtype)
        if (b_dtype is not dtype and not (b_dtype is torch.bool and dtype in INTEGERS and op_name != "sub")) \
                or b_key[2] != index:
            return NO_PLAN  # (sub of a bool: torch's error, from the implementation's CPU fallback)
        shape, operands_read, result = tuple(_broadcast(a_shape, b_key[1])), (a, b), dtype  # or Decline
    out_dtype = torch.bool if comparison and not inplace else result
    n = math.prod(shape)
    if n == 0 or (inplace and (shape != tuple(a_shape) or result is not dtype)) or \
            (out_key is not None and out_key != (out_dtype, shape, index)):
        return NO_PLAN
    g = integer_launch(op_name, (dtype, b_dtype, out_dtype), list(shape), n, operands_read,
                       0 if scalar else None, 1)
    if g.key is None:
        return NO_PLAN  # an int that needs 64 bits: the implementation's general launch
    plan = Plan.of(g, shape, out_dtype, ())
    programs, rows, (_, _, _, *geometry) = g.programs, g.rows, g.ints
    new = None if inplace else _memory.allocator(shape, out_dtype, index)

    def run(operands: tuple) -> Tensor | None:
        a, b, alpha, target = operands
        if type(alpha) is not int or not -I32 <= alpha < I32:
            return None  # a float alpha (torch's error) or a wide one: the implementation decides
        if scalar:
            if type(b) is not int or not -I32 <= b < I32:
                return None  # a float number promotes (the float kernel), a wide one is its own launch
            value, b = b, a
        else:
            value = 0
            if inplace and b is not a and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr():
                return None  # self overlaps the other operand: the implementation decides
        if target is not None and (overlaps(target, a) if scalar else overlaps(target, a, b)):
            return None
        launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
        if target is None:
            target = a if inplace else new()
        if launcher is None or (programs * rows > 1 and device_tp(index) > 1):
            plan.launch_checked((a, b, value, target, n, alpha, *geometry))
        else:
            launcher(programs, rows, 1, a, b, value, target, n, alpha, *geometry)
        return target

    plan.run = run
    return plan


def binary_plan(key: tuple, operands: tuple, *, inplace: bool, comparison: bool, scan: bool = True) -> Plan:
    """The plan of `binary`'s dense launch for `key` (see `_binary_key`), or NO_PLAN where `binary`
    would do something else (promotion, the strided kernel, an integer kernel)."""
    _, op_name, dtype, a_shape, index, b_key, out_key = key
    if dtype not in FLOATS:
        return NO_PLAN
    a, b = operands[0], operands[1]
    scalar = b_key is None
    out_dtype = torch.bool if comparison and not inplace else dtype
    if scalar:
        shape = tuple(a_shape)
        if op_name == "div_trunc":
            op_name = "div_trunc_scalar"  # as `binary`: torch does not round a scalar quotient
        b = _scalar_tensor(0.0, index)  # the layout stand-in of the scalar's float32 tensor
    else:
        b_dtype, b_shape, b_index = b_key
        if b_dtype is not dtype or b_index != index:
            return NO_PLAN
        if op_name == "div_trunc" and not b_shape:
            op_name = "div_trunc_scalar"  # a 0-dim divisor is a scalar one, as `binary` reads it
        shape = tuple(a_shape) if a_shape == b_shape else tuple(_broadcast(a_shape, b_shape))  # or Decline
    numel = math.prod(shape)
    if numel == 0 or (inplace and shape != tuple(a_shape)) or (out_key is not None and
                                                               out_key != (out_dtype, shape, index)):
        return NO_PLAN
    launch = dense_binary_launch(op_name, (a, b), (dtype, b.dtype, out_dtype), list(shape), numel)
    scanned = () if not scan else (0,) if scalar else (0, 1)
    if launch is None:
        return _tiled_binary_plan(op_name, dtype, out_dtype, shape, numel, index, a, b, inplace, scan,
                                  scanned)
    launch_key, keywords, programs, rows, n = launch
    plan = BinaryPlan(_k("elementwise").binary_dense_kernel, launch_key, keywords, programs, rows, shape,
                      out_dtype, scanned)
    plan.run = _binary_run(plan, op_name, dtype, index, n, a.numel(), 1 if scalar else b.numel(), scalar,
                           inplace, scan)
    plan.tail, plan.tiled = (None if scalar or inplace else (n,)), False
    return plan


class BinaryPlan(Plan):
    """A binary op's plan; one of two tensor operands into a new result (`tail`: the int arguments
    after the three tensors, before alpha on the dense kernel and after it on the tiled one; None
    otherwise) describes its kept launch for a compiled graph (`direct`)."""

    __slots__ = ("tail", "tiled")

    def direct(self, operands: tuple) -> Direct | None:
        """The kept launch by address: a, b, the result, the ints and this call's alpha (a graph
        constant); one NPU's grid only."""
        by_address, alpha = self.direct_launcher(operands[0].get_device()), operands[2]
        if self.tail is None or by_address is None or operands[3] is not None or \
                (type(alpha) is not int and type(alpha) is not float) or (alpha != 1 and not self.scanned):
            return None  # (an exact add/sub scans its operands for an alpha other than 1: `_ALPHA_SCANNED`)
        ints = tuple(("value", v) for v in self.tail)
        alpha_arg = (("value", float(alpha)),)
        args = (("tensor", 0), ("tensor", 1), ("out", None),
                *((*alpha_arg, *ints) if self.tiled else (*ints, *alpha_arg)))
        return Direct(by_address, (self.programs, self.rows, 1), args)


def _tiled_binary_plan(op_name: str, dtype: torch.dtype, out_dtype: torch.dtype, shape: tuple, numel: int,
                       index: int, a: Tensor, b: Tensor, inplace: bool, scan: bool, scanned: tuple) -> Plan:
    """The plan of `binary`'s tiled launch for contiguous operands that broadcast in a way the dense
    kernel's modes do not read (`q * cos` of Llama's RoPE: cos broadcast over the heads; a mask added
    over heads and queries): `binary_tiled_kernel` on `_geometry`'s sizes and strides, which the key's
    shapes fix. NO_PLAN where an int needs 64 bits (the implementation)."""
    bcast, sizes, (sa, sb) = _geometry(list(shape), [a, b])
    if not bcast:
        return NO_PLAN  # dense operands the dense kernel declined: 2^31 or more elements
    g = binary_tiled_launch(op_name, (dtype, dtype, out_dtype), numel, sizes, sa, sb)
    if g.key is None:
        return NO_PLAN
    plan = BinaryPlan(g.kernel, g.key, g.keywords, g.programs, g.rows, shape, out_dtype, scanned)
    plan.run = _binary_run(plan, op_name, dtype, index, numel, a.numel(), b.numel(), False, inplace, scan,
                           tiled=g.ints)
    plan.tail, plan.tiled = (None if inplace else tuple(g.ints)), True
    return plan



def _binary_run(plan: Plan, op_name: str, dtype: torch.dtype, index: int, n: int, a_numel: int,
                b_numel: int, scalar: bool, inplace: bool, scanned: bool, tiled: tuple | None = None
                ) -> Callable[[tuple], Tensor | None]:
    """The run of a binary plan: the dense kernel's launch (after the three tensors: the row length and
    alpha), or with `tiled` the tiled kernel's (alpha, then `tiled`: its sizes and strides)."""
    programs, rows, shape, out_dtype = plan.programs, plan.rows, plan.shape, plan.dtype
    split = programs * rows > 1
    scan, mask = contiguous_scan(dtype)
    small = a_numel < PARALLEL_MIN and b_numel < PARALLEL_MIN
    new, deploy_mode = None if inplace else _memory.allocator(shape, out_dtype, index), config.deploy_mode
    # `scanned` False: inputs the caller has checked already (clamp's second launch), or an exact op;
    # add/sub registered `exact` still scan for an alpha other than 1 (see `_ALPHA_SCANNED`)
    alpha_scanned = not scanned and op_name in _ALPHA_SCANNED

    def run(operands: tuple) -> Tensor | None:
        a, b, alpha, target = operands
        if scalar:
            b = _scalar_tensor(scalar_value(op_name, b, dtype), index)
        elif inplace and b is not a and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr():
            return None  # self overlaps the other operand: the implementation decides
        if target is not None and (overlaps(target, a) if scalar else overlaps(target, a, b)):
            return None  # out= shares memory with an input: the implementation decides
        launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
        if (scanned or (alpha_scanned and alpha != 1)) and not deploy_mode():
            if small:
                if not scan(a.data_ptr(), a_numel, mask) or not (scalar or scan(b.data_ptr(), b_numel, mask)):
                    return None
            elif not (all_finite(a) and (scalar or all_finite(b))):
                return None
        if target is None:
            target = a if inplace else new()
        if tiled is not None:
            if launcher is None or (split and device_tp(index) > 1):
                plan.launch_checked((a, b, target, float(alpha), *tiled))
            else:
                launcher(programs, rows, 1, a, b, target, float(alpha), *tiled)
        elif launcher is None or (split and device_tp(index) > 1):
            plan.launch_checked((a, b, target, n, float(alpha)))
        else:
            launcher(programs, rows, 1, a, b, target, n, float(alpha))
        return target

    return run


# ---------------------------------------------------------------- unary

def _unary_key(op: str, x: Any, p: float, target: Any) -> tuple | None:
    if not isinstance(x, Tensor):
        return None
    index = x.get_device()
    if not x.is_contiguous():  # a functional call on a strided view: `_strided_unary_plan`
        if target is not None or index < 0:
            return None
        return ("strided", op, x.dtype, x.shape, x.stride(), index), (x, p, None)
    # in place: True (x itself is written; nothing more to key)
    out_key = None if target is None else True if target is x else _out_key(target)
    if index < 0 or out_key is False:
        return None
    return (False, op, x.dtype, x.shape, index, out_key), (x, p, target)


def unary_family(name: str, *, inplace: bool = False, out: bool = False, keyword: str | None = None,
          ops: dict | None = None, default: Any = None, scan: bool = True,
          parameter: float | None = None) -> Family:
    """The family of a unary overload `name(x)`, functional, in place or into `out=`; `keyword`: an
    optional keyword whose value picks the op from `ops` (gelu's `approximate`). `scan` False: the op
    is IEEE-exact (the table's `exact`: neg, abs), its input is not scanned for NaN/Inf. `parameter`:
    the overload is `name(x, p=parameter)` with a number p, the kernel's parameter (leaky_relu's
    negative slope; a launch argument, not part of the key)."""
    arities = (1,) if parameter is None else (1, 2)

    plain = parameter is None and not out and not inplace

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if plain and not kwargs and len(args) == 1:  # the common call, `_unary_key`'s key read inline
            x = args[0]
            if isinstance(x, Tensor) and x.is_contiguous():
                index = x.get_device()
                if index >= 0:
                    return (False, name, x.dtype, x.shape, index, None), (x, 0.0, None)
        if len(args) not in arities:
            return None
        p = 0.0 if parameter is None else args[1] if len(args) == 2 else parameter
        if type(p) is not float and type(p) is not int:
            return None
        op, target = name, None
        if kwargs or out:
            read_keywords = _keywords(kwargs, out, keyword, ops, op)
            if read_keywords is None or read_keywords[2]:
                return None
            op, target, _ = read_keywords
        return _unary_key(op, args[0], p, args[0] if inplace else target)

    def plan(key: tuple, operands: tuple) -> Plan:
        return unary_plan(key, operands, scanned=scan)

    return Family(signature, plan)


def unary_plan(key: tuple, operands: tuple, scanned: bool = True) -> Plan:
    """The plan of `unary`'s launch for `key` (see `_unary_key`); NO_PLAN where it would not launch
    so. `scanned` False: x is only written (a fill) or the op is exact (neg, abs): never scanned."""
    if key[0] == "strided":
        return _strided_unary_plan(key, scanned)
    _, op_name, dtype, shape, index, out_key = key
    n = math.prod(shape)
    if dtype not in FLOATS or n == 0 or out_key not in (None, True, (dtype, shape, index)):
        return NO_PLAN
    launch_key, keywords, programs = unary_launch(op_name, (dtype, dtype), n)
    plan = UnaryPlan(_k("elementwise").unary_kernel, launch_key, keywords, programs, 1, tuple(shape), dtype,
                     (0,) if scanned else ())
    plan.n = n if out_key is None else None
    scan, mask = contiguous_scan(dtype)
    small = n < PARALLEL_MIN
    new = _memory.allocator(shape, dtype, index) if out_key is None else None  # (a target otherwise)
    deploy_mode = config.deploy_mode if scanned else unscanned

    def run(operands: tuple) -> Tensor | None:
        x, p, target = operands
        if target is not None and target is not x and overlaps(target, x):
            return None
        launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
        if not deploy_mode() and not (scan(x.data_ptr(), n, mask) if small else all_finite(x)):
            return None
        if target is None:
            target = new()
        if launcher is None or (programs > 1 and device_tp(index) > 1):
            plan.launch_checked((x, target, n, float(p)))
        else:
            launcher(programs, 1, 1, x, target, n, float(p))
        return target

    plan.run = run
    return plan


class UnaryPlan(Plan):
    """A unary op's plan; one into a new result (`n`: its element count, None otherwise) describes its
    kept launch for a compiled graph (`direct`)."""

    __slots__ = ("n",)

    def direct(self, operands: tuple) -> Direct | None:
        """The kept launch by address: x, the result, n and this call's parameter (a graph constant);
        one NPU's grid only."""
        by_address, p = self.direct_launcher(operands[0].get_device()), operands[1]
        if self.n is None or by_address is None or operands[2] is not None or \
                (type(p) is not int and type(p) is not float):
            return None
        return Direct(by_address, (self.programs, 1, 1),
                      (("tensor", 0), ("out", None), ("value", self.n), ("value", float(p))))


def _strided_unary_plan(key: tuple, scanned: bool) -> Plan:
    """A unary op on a strided view, through kept launches. A view that is no permutation of a dense
    block (`-x[..., d:]`, RoPE's rotate_half on every decoding step): the copy kernel gathers it into the
    fresh contiguous result (its geometry decided here once) and the unary kernel runs in place there
    (the implementation took ~33 us: its layout and checks, a general copy and launch). A permutation of
    a dense block (a transpose): torch lays the result out as the input (`laid_out`: the input's strides
    but on dims of size 1), so the kernel runs over the block in memory order into a result allocated so,
    with no view made (the implementation permuted the input and the result back: two view ops).
    NO_PLAN for a view the copy kernel cannot express, or whose result torch lays out otherwise."""
    _, op_name, dtype, shape, strides, index = key
    n = math.prod(shape)
    if dtype not in FLOATS or n == 0:
        return NO_PLAN
    meta = torch.empty_strided(shape, strides, device="meta")
    gather, laid_out = None, None
    if output_order(meta) is None:
        gather = contiguous_copier(tuple(shape), tuple(strides))
        if gather is None:
            return NO_PLAN
    else:
        laid_out = (-meta).stride()
        pairs = zip(shape, laid_out, strides, strict=True)
        if not (is_dense_permutation(shape, strides) and all(size == 1 or a == b for size, a, b in pairs)):
            return NO_PLAN
    launch_key, keywords, programs = unary_launch(op_name, (dtype, dtype), n)
    plan = Plan(_k("elementwise").unary_kernel, launch_key, keywords, programs, 1, tuple(shape), dtype,
                (0,) if scanned else ())
    finite = scanner(dtype, n) if scanned else None
    # the gathered copy's allocation; a permutation's result is allocated with its strides per call
    new = _memory.allocator(shape, dtype, index) if gather is not None else None
    empty_strided = _memory.empty_strided

    def run(operands: tuple) -> Tensor | None:
        x, p, _ = operands
        launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
        if gather is not None:
            source = target = new()
            gather(x, target)
        else:
            source, target = x, None
        if finite is not None and not finite(source):
            return None  # the implementation decides (its NaN/Inf handling)
        if target is None:
            target = empty_strided(shape, laid_out, dtype, index)
        if launcher is None or (programs > 1 and device_tp(index) > 1):
            plan.launch_checked((source, target, n, float(p)))
        else:
            launcher(programs, 1, 1, source, target, n, float(p))
        return target

    plan.run = run
    return plan


# pow(x, exponent) -> (unary op, its parameter) for the exponents torch special-cases, computed as it
# does (products and a division, no exp/log; 2 is x * x, a binary mul)
_POW_UNARY = {1: ("scale", 1.0), 0.5: ("sqrt", 0.0), 3: ("cube", 0.0), -1: ("reciprocal", 0.0),
              -2: ("reciprocal_square", 0.0), -0.5: ("rsqrt", 0.0)}


def pow_unary(exponent: float) -> tuple[str, float]:
    """(unary op, its parameter) of `pow(x, exponent)` for a real exponent other than 2: a special case
    above, else the generic "pow" with p = exponent (the checked `table._pow_scalar` and the plans)."""
    return _POW_UNARY.get(exponent) or ("pow", float(exponent))


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
        op, p = pow_unary(exponent)
        return _unary_key(op, x, p, target)

    def plan(key: tuple, operands: tuple) -> Plan:
        if key[0] is True:  # the square's binary key (a unary key starts with False or "strided")
            return binary_plan(key, operands, inplace=False, comparison=False)
        return unary_plan(key, operands)

    return Family(signature, plan)


# ---------------------------------------------------------------- fill

_FILLED_EXACTLY = (*INTEGERS, torch.bool)  # fills that `integer_fill` runs on the integer kernel


def fill_family(*, zero: bool) -> Family:
    """`fill_(x, value)` (`zero`: `zero_(x)`) on a contiguous rbln tensor: the FILL op of `unary_kernel`
    for floats, the integer kernel's fill for bool and int32/int64 (`torch.full`/`ones` of masks and
    ids, every generation step) with an int the dtype holds. x is only written, so nothing is scanned.
    Until another op has loaded the kernels, fills stay on the host (`fill`): no signature then."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if kwargs or len(args) != 2 - zero or not _modules:
            return None
        value = 0.0
        if not zero:
            value = args[1]
            kind = type(value)
            if kind is not float and kind is not int and kind is not bool:
                return None
        x = args[0]
        if not isinstance(x, Tensor):
            return None
        if x.dtype in _FILLED_EXACTLY:  # the integer kernel's fill, with an int the dtype holds
            number = integral(value)  # (torch.ones fills with 1.0)
            if number is None or not held(number, x.dtype):
                return None  # (a fraction, an overflow: the implementation decides)
            return _binary_key("fill", x, number, 1, None, "fill")
        if not zero and x.dtype in FLOATS and beyond_dtype(float(value), x.dtype):
            return None  # (the implementation declines it: torch's overflow error)
        return _unary_key("fill", x, float(value), x)

    def plan(key: tuple, operands: tuple) -> Plan:
        if key[0] == "fill":
            return integer_plan(key, operands, inplace=True, comparison=False, bitwise=False, own_dtype=True)
        return unary_plan(key, operands, scanned=False)

    return Family(signature, plan)


# ---------------------------------------------------------------- where, masked_fill

def where_family(*, out: bool = False) -> Family:
    """`where(condition, a, b)` on contiguous rbln tensors (a bool condition, `a` and `b` of one
    floating dtype) whose shapes broadcast: `where`'s launch. `out`: `where.self_out`."""

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
    """The plan of `_where`'s launch on contiguous operands of `shapes` (condition, a, b): `where`
    (`a_scalar` False), or `masked_fill` (`a` the value's float32 one-element tensor, the result written
    to b when `inplace`). NO_PLAN for what `_where` launches otherwise (64-bit ints, > 4 dims). A select
    moves values (NaN, infinities and signed zeros as they are): nothing is scanned."""
    if dtype not in FLOATS:
        return NO_PLAN
    c_shape, a_shape, b_shape = shapes
    shape = tuple(_broadcast(c_shape, b_shape) if a_scalar else _broadcast(c_shape, a_shape, b_shape))
    n = math.prod(shape)
    if (inplace and shape != tuple(b_shape)) or n == 0 or \
            (out_key is not None and out_key != (dtype, shape, index)):
        return NO_PLAN
    try:
        geometry = where_geometry(list(shape), list(operands), a_scalar=a_scalar)
    except Decline:
        return NO_PLAN  # more than four dims: the general path decides
    g = where_launch((torch.bool, torch.float32 if a_scalar else dtype, dtype, dtype), n, *geometry)
    if g.key is None:
        return NO_PLAN
    plan, ints = Plan.of(g, shape, dtype, ()), g.ints
    programs, rows = g.programs, g.rows
    split = programs * rows > 1
    new = _memory.allocator(shape, dtype, index)

    def run(operands: tuple) -> Tensor | None:
        condition, a, b, target = operands
        if a_scalar:
            a = _scalar_tensor(a, index)
            if inplace:
                target = b
        elif target is not None and overlaps(target, condition, a, b):
            return None
        launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
        if target is None:
            target = new()
        if launcher is None or (split and device_tp(index) > 1):
            plan.launch_checked((condition, a, b, target, *ints))
        elif target is b:  # in place: b is read through its strides and written (the alias-safe kernel)
            getattr(launcher, "aliasing", launcher)(programs, rows, 1, condition, a, b, target, *ints)
        else:
            launcher(programs, rows, 1, condition, a, b, target, *ints)
        return target

    plan.run = run
    return plan


_c_float = ctypes.c_float  # a float32 at an address: an rbln tensor's memory is host memory


def _value_number(value: Tensor, index: int) -> float | None:
    """The number a 0-d value tensor holds, as `masked_fill` reads it (`.item()`), for a value the
    dispatcher's checks pass (on the CPU or rbln:index; float32/16/bf16, NaN and infinities included:
    masked_fill is exact, or an integer); None otherwise. A float32 value is read straight from memory
    (`.item()` costs a dispatch)."""
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
    return number


def nan_to_num(x: Tensor, nan=None, posinf=None, neginf=None, *, out: Tensor | None = None,
               inplace: bool = False) -> Tensor:
    """torch.nan_to_num of a contiguous float tensor as three masked fills: NaN by `nan` (0), +inf by
    `posinf` and -inf by `neginf` (the dtype's largest and lowest finite values). Integer and bool
    tensors (torch returns them as they are), non-contiguous ones (the fills run in place on dense rows)
    and an `out=` of another dtype or shape (torch resizes or raises) decline to the CPU."""
    if x.dtype not in FLOATS:
        raise Decline(f"nan_to_num of {x.dtype}")
    if not x.is_contiguous():
        raise Decline("nan_to_num of a non-contiguous tensor")
    if out is not None and (out.dtype is not x.dtype or out.shape != x.shape):
        raise Decline("out= of another dtype or shape")
    info = torch.finfo(x.dtype)
    values = (0.0 if nan is None else real_number(nan, "nan"),
              info.max if posinf is None else real_number(posinf, "posinf"),
              info.min if neginf is None else real_number(neginf, "neginf"))
    masks = (binary("ne", x, x, comparison=True), binary("eq", x, math.inf, comparison=True),
             binary("eq", x, -math.inf, comparison=True))
    result = x if inplace else cast_copy(x, x.dtype) if out is None else out.copy_(x)
    for mask, value in zip(masks, values, strict=True):
        result = masked_fill(result, mask, value, inplace=True)
    return result


def nan_to_num_(x: Tensor, nan=None, posinf=None, neginf=None) -> Tensor:
    return nan_to_num(x, nan, posinf, neginf, inplace=True)


def masked_fill_family(*, inplace: bool) -> Family:
    """`masked_fill(x, mask, value)` / `masked_fill_` with a number or 0-d tensor value, a contiguous
    floating `x` and a contiguous bool `mask` that broadcasts to it (an attention mask): the where
    launch of `masked_fill` (the value as a float32 one-element tensor)."""

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
        if x.dtype in FLOATS and beyond_dtype(number, x.dtype):
            return None  # (the implementation declines it: torch's overflow error)
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
        # Both launches are made here, every check first (the clip writes the first launch's fresh
        # result in place: none of a binary run's overlap or NaN/Inf checks applies to it); calling
        # the first plan's run, then the clip's, cost ~2 us more per call than one flat run.
        (p1, r1), (p2, r2) = ((p.programs, p.rows) for p in (first, clip))
        n1, n2 = math.prod(first.shape) // r1, math.prod(clip.shape) // r2  # the dense kernel's row lengths
        split = p1 * r1 > 1 or p2 * r2 > 1
        scan, mask = contiguous_scan(high_dtype)
        x_numel, low_numel, high_numel = math.prod(key[3]), math.prod(key[5][1]), math.prod(high_shape)
        small = max(x_numel, low_numel, high_numel) < PARALLEL_MIN
        shape, dtype, empty_ = first.shape, first.dtype, _memory.empty

        def run(operands: tuple) -> Tensor | None:
            x, low, high, target = operands
            if target is not None and (target is high or overlaps(target, x, low, high)):
                return None  # out= shares memory with an input: the implementation decides
            storage = x.untyped_storage().data_ptr()
            if inplace and ((low.untyped_storage().data_ptr() == storage and low is not x) or
                            high.untyped_storage().data_ptr() == storage):
                return None  # the bounds overlap the result: the implementation decides
            if not config.deploy_mode():
                if small:
                    if not (scan(x.data_ptr(), x_numel, mask) and scan(low.data_ptr(), low_numel, mask) and
                            scan(high.data_ptr(), high_numel, mask)):
                        return None  # a NaN/Inf input: the implementation's CPU fallback
                elif not (all_finite(x) and all_finite(low) and all_finite(high)):
                    return None
            result = x if inplace else target if target is not None else empty_(shape, dtype, high_index)
            several = split and device_tp(high_index) > 1
            launcher = first.launcher if first.backend == requested_backend() else first.kept()
            if launcher is None or several:
                first.launch_checked((x, low, result, n1, 1.0))
            else:
                launcher(p1, r1, 1, x, low, result, n1, 1.0)
            launcher = clip.launcher if clip.backend == requested_backend() else clip.kept()
            if launcher is None or several:
                clip.launch_checked((result, high, result, n2, 1.0))
            else:
                launcher(p2, r2, 1, result, high, result, n2, 1.0)
            return result

        plan.run = run
        return plan

    return Family(signature, plan)
