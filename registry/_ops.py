"""Python implementations behind the table: argument handling, output allocation, kernel launches.

Each implementation returns a result, or a `Decline(reason)` when the inputs are outside what its
kernel supports; the dispatcher then runs the CPU fallback with that reason. Kernels are imported on
first call, so `import torch_rbln` never compiles or imports the DSL backends.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from torch_rbln import _memory
from torch_rbln.tp import device_tp as _device_tp
from torch_rbln.tp import requested_backend

from . import _launch
from ._base import FLOATS, INTEGERS, Decline, InvalidCall  # noqa: F401  (re-exported for the families)
from ._launch import _modules  # noqa: F401  (re-exported)
from ._launch import kernel_module as _k
from ._memo import BoundedMemo
from .geometry import (  # noqa: F401  (re-exported: the families import them from here)
    I32 as _I32,
)
from .geometry import (
    TILED_MIN as _TILED_MIN,
)
from .geometry import (
    block as _block,
)
from .geometry import (
    cdiv as _cdiv,
)
from .geometry import (
    collapse as _collapse,
)
from .geometry import (
    expanded_strides as _expanded_strides,
)
from .geometry import (
    tile_shape,
)


def empty(shape: Sequence[int], dtype: torch.dtype, index: int) -> torch.Tensor:
    return _memory.empty(shape, dtype, index)


# ---------------------------------------------------------------- operands and broadcasting

_scalar_cache: dict[tuple[float, int], torch.Tensor] = BoundedMemo(512)


def _scalar_tensor(value: float, index: int) -> torch.Tensor:
    """A 1-element float32 rbln tensor holding `value` (cached), broadcast with stride 0."""
    key = (value, index)
    tensor = _scalar_cache.get(key)
    if tensor is None:
        tensor = _memory.empty_strided([1], [1], torch.float32, index)
        from torch_rbln import _dlpack

        _dlpack.to_host_view(tensor).fill_(value)
        _scalar_cache[key] = tensor
    return tensor


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
    strides = [_expanded_strides(t, shape) for t in operands]
    sizes, strides = _collapse(shape, strides)
    if len(sizes) <= 1 and all(not st or st[0] == 1 for st in strides):
        return False, [1, 1, 1], [[0, 0, 0, 0] for _ in operands]
    if len(sizes) > 4:
        raise Decline(f"more than 4 non-mergeable dims ({len(sizes)})")
    pad = 4 - len(sizes)
    sizes = [1] * pad + sizes
    return True, sizes[1:], [[0] * pad + st for st in strides]


def _device_index(*tensors) -> int:
    for t in tensors:
        if isinstance(t, torch.Tensor) and not t.is_cpu:
            return t.get_device()
    raise Decline("scalar-only inputs")


# Binary ops whose CPU kernels read a scalar operand at full precision; every other op first rounds a
# scalar to the tensor's dtype (TensorIterator's common dtype): `x_f16 + 1e-3` adds float16(1e-3), and
# `x_f16 == 0.1` is true for x = float16(0.1).
_UNROUNDED_SCALAR = frozenset({"mul", "div", "div_trunc", "div_trunc_scalar", "div_floor"})
_HALVES = (torch.float16, torch.bfloat16)
_rounded: dict[tuple[float, torch.dtype], float] = BoundedMemo(512)


def scalar_value(name: str, value, dtype: torch.dtype) -> float:
    """The float a scalar operand of op `name` takes part with, as torch's CPU kernels use it."""
    value = float(value)
    if dtype not in _HALVES or name in _UNROUNDED_SCALAR:
        return value
    key = (value, dtype)
    rounded = _rounded.get(key)
    if rounded is None:
        rounded = _rounded[key] = torch.tensor(value, dtype=dtype).item()
    return rounded


def _operand(value, index: int, name: str = "", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A tensor operand as is; a Python or CPU 0-dim scalar as a one-element float32 rbln tensor holding
    the value op `name` computes with in `dtype` (see `scalar_value`)."""
    if isinstance(value, torch.Tensor):
        if value.is_cpu:
            if value.dim():
                raise Decline("CPU tensor operand")
            return _scalar_tensor(scalar_value(name, value.item(), dtype), index)
        return value
    if isinstance(value, complex):
        raise Decline("complex scalar")
    return _scalar_tensor(scalar_value(name, value, dtype), index)


def _check_out(out: torch.Tensor | None, shape, dtype, index) -> torch.Tensor:
    if out is None:
        return empty(shape, dtype, index)
    if list(out.shape) != list(shape):
        raise Decline("out= needs a resize")
    if not out.is_contiguous():
        raise Decline("non-contiguous output")
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


# ---------------------------------------------------------------- elementwise

def _promoted(a, b) -> torch.dtype:
    dtype = torch.result_type(a, b)
    if dtype not in FLOATS:
        raise Decline(f"dtype {str(dtype).replace('torch.', '')}")
    return dtype


def dense_binary_key(E, name: str, dtypes: tuple, ncols: int, modes: tuple[int, int] = (0, 0)
                     ) -> tuple[tuple, dict]:
    """(launch key, constexpr/op keywords) of `binary_dense_kernel` for op `name` on rows of `ncols`
    elements with operand and output `dtypes` and operand `modes` (see the kernel)."""
    block = _block(ncols)
    op = E.BINARY[name]
    fast = E.dense_fast_op(op, dtypes[2] == torch.bool)
    keywords = {"OP": op, "FAST_OP": fast, "A_MODE": modes[0], "B_MODE": modes[1], "BLOCK": block}
    return (dtypes, op, fast, modes, block), keywords


def _dense_layout(operands: tuple, shape: list[int], n: int) -> tuple[tuple[int, int], int] | None:
    """((mode of each operand), row length) of an elementwise op with a contiguous output of `shape`
    (`n` elements) in `binary_dense_kernel`, or None when the strided kernel must read them.

    Modes: 0 the output's layout, 1 a single element, 2 a contiguous trailing block of `shape` repeated
    over the leading dims (its size is the row length), 3 a contiguous leading block of `shape` whose
    value is broadcast over the trailing dims (one value per row; the broadcast dims make the row).
    Every operand must agree on the row length; one must span the output."""
    if n >= _I32:
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


def unary_key(E, name: str, dtypes: tuple, n: int) -> tuple[tuple, dict]:
    """(launch key, constexpr/op keywords) of `unary_kernel` for op `name` over `n` elements with input
    and output `dtypes`."""
    block = _block(n)
    op = E.UNARY[name]
    fast = op if op in E.FAST_UNARY else -1
    return (dtypes, op, fast, block, n < _I32), {"OP": op, "FAST_OP": fast, "BLOCK": block}


def binary(name: str, a, b, alpha=1, out=None, *, comparison=False, inplace=False):
    """The general binary op: promotion, broadcasting, scalars, out=, in place (the plain case of two
    same-shape contiguous tensors usually takes its plan, `elementwise.py`, before reaching here)."""
    E = _k("elementwise")
    if isinstance(alpha, complex) or (isinstance(alpha, torch.Tensor)):
        raise Decline("tensor/complex alpha")
    if torch.result_type(a, b) in INTEGERS:
        return _integer_binary(name, a, b, alpha, out, comparison=comparison, inplace=inplace)
    index = _device_index(a, b)
    compute = _promoted(a, b)
    if name == "div_trunc" and (not isinstance(b, torch.Tensor) or b.is_cpu):
        name = "div_trunc_scalar"  # a scalar divisor: torch does not round the quotient to a half dtype
    ta = _operand(a, index, name, compute)
    tb = _operand(b, index, name, compute)
    out = binary_output(a, b, compute, out, index, (ta, tb), comparison=comparison, inplace=inplace)
    shape = list(out.shape)
    n = out.numel()
    if n == 0:
        return out
    layout = _dense_layout((ta, tb), shape, n)
    if layout is not None:
        modes, ncols = layout
        key, keywords = dense_binary_key(E, name, (ta.dtype, tb.dtype, out.dtype), ncols, modes)
        _launch.launch(E.binary_dense_kernel, _cdiv(ncols, keywords["BLOCK"]), key,
                       (ta, tb, out, ncols, float(alpha)), keywords, rows=n // ncols)
        return out
    bcast, sizes, (sa, sb) = _geometry(shape, [ta, tb])
    block = _block(n)
    E.binary_kernel[(_cdiv(n, block),)](
        ta, tb, out, n, float(alpha), *sizes, *sa, *sb, OP=E.BINARY[name], BCAST=bcast, BLOCK=block
    )
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


# Binary ops on int32/int64 tensors (position ids, cache positions, index arithmetic) on the exact
# integer kernel (`kernels/integer.py`): add/sub with alpha, mul, comparisons, maximum/minimum. `binary`
# sends integer results here; ops without an integer kernel (true division, pow, ...) decline with the
# dtype as the reason.
_INTEGER_NAMES = ("add", "sub", "mul", "eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum", "div_floor",
                  "abs", "fill")
_INT64 = (-(2**63), 2**63)


def _integer_scalar(value) -> int | None:
    """A Python int (or 0-dim CPU integer tensor, a wrapped number) as an int; None otherwise."""
    if isinstance(value, torch.Tensor):
        if value.is_cpu and value.dim() == 0 and not value.dtype.is_floating_point and \
                not value.dtype.is_complex and value.dtype != torch.bool:
            return int(value.item())
        return None
    if isinstance(value, int) and not isinstance(value, bool) and _INT64[0] <= value < _INT64[1]:
        return value
    return None


_BITWISE_NAMES = ("bitwise_and", "bitwise_or", "bitwise_xor")
_BITWISE_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def bitwise(name: str, a, b, out=None, *, inplace: bool = False) -> torch.Tensor:
    """bitwise_and/or/xor of bool and integer tensors (or an int), exact on the integer kernel; float
    operands are declined, so the CPU fallback raises torch's error."""
    compute = torch.result_type(a, b)
    if compute not in _BITWISE_DTYPES:
        raise Decline(f"dtype {str(compute).replace('torch.', '')}")
    return _integer_binary(name, a, b, 1, out, comparison=False, inplace=inplace)


def bitwise_not(x, out=None, *, inplace: bool = False) -> torch.Tensor:
    """~x: xor with all bits set (1 for bool), in x's dtype."""
    if not isinstance(x, torch.Tensor) or x.dtype not in _BITWISE_DTYPES:
        raise Decline(f"dtype {str(getattr(x, 'dtype', type(x))).replace('torch.', '')}")
    return _integer_binary("bitwise_xor", x, 1 if x.dtype == torch.bool else -1, 1, out, comparison=False,
                           inplace=inplace, compute=x.dtype)


def _integer_binary(name: str, a, b, alpha, out, *, comparison: bool, inplace: bool,
                    compute: torch.dtype | None = None) -> torch.Tensor:
    """`name` on the exact integer kernel; `compute` (the result dtype) defaults to torch's promotion."""
    compute = torch.result_type(a, b) if compute is None else compute
    if name not in _INTEGER_NAMES and name not in _BITWISE_NAMES or not isinstance(a, torch.Tensor) or \
            a.is_cpu:
        raise Decline(f"dtype {str(compute).replace('torch.', '')}")
    if isinstance(alpha, bool) or not isinstance(alpha, int):
        raise Decline("non-integer alpha")  # the CPU kernel raises torch's error for float alpha
    scalar = _integer_scalar(b)
    if scalar is None and (not isinstance(b, torch.Tensor) or b.is_cpu):
        raise Decline("operand")
    if name == "div_floor" and not scalar:
        # torch raises ZeroDivisionError for an integer divisor of 0, which a kernel cannot
        raise Decline("integer floor division by a tensor or by zero")
    index = _device_index(a)
    operands = (a,) if scalar is not None else (a, b)
    out = binary_output(a, b, compute, out, index, operands, comparison=comparison, inplace=inplace)
    n = out.numel()
    if n == 0:
        return out
    bcast, sizes, strides = _geometry(list(out.shape), list(operands))
    a_strides = strides[0]
    b_strides = strides[1] if scalar is None else [0, 0, 0, 0]
    block = _block(n)
    _k("integer").int_binary_kernel[(_cdiv(n, block),)](
        a, b if scalar is None else a, 0 if scalar is None else scalar, out, n, alpha, *sizes, *a_strides,
        *b_strides, OP=_k("integer").INTEGER_ONLY.get(name) or _k("elementwise").BINARY[name],
        B_SCALAR=scalar is not None, BCAST=bcast, BLOCK=block,
    )
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


def unary(name: str, x: torch.Tensor, p: float = 0.0, out=None, *, inplace=False):
    E = _k("elementwise")
    index = _device_index(x)
    if x.dtype in INTEGERS and name in ("abs", "neg"):
        # exact on the integer kernel: abs, and neg as x * -1 (both wrap at the minimum, as torch)
        return _integer_binary("abs" if name == "abs" else "mul", x, 0 if name == "abs" else -1, 1, out,
                               comparison=False, inplace=inplace, compute=x.dtype)
    if x.dtype not in FLOATS:
        raise Decline(f"dtype {str(x.dtype).replace('torch.', '')}")
    if inplace:
        out = x
        if not x.is_contiguous():
            raise Decline("non-contiguous in-place")
    out = _check_out(out, x.shape, x.dtype, index)
    n = x.numel()
    if n == 0:
        return out
    src = contiguous(x)
    key, keywords = unary_key(E, name, (src.dtype, out.dtype), n)
    _launch.launch(E.unary_kernel, _cdiv(n, _block(n)), key, (src, out, n, float(p)), keywords)
    return out


def fill(x: torch.Tensor, value, *, first_use_ok: bool = True) -> torch.Tensor:
    if not first_use_ok and "elementwise" not in _modules:
        # A constant fill (torch.ones/zeros at start-up) does not justify loading the DSL compiler
        # (numba, jinja2): until another op has loaded the kernels, fills run on the host.
        raise Decline("DSL not loaded yet")
    E = _k("elementwise")
    if isinstance(value, torch.Tensor):
        if value.dim():
            raise Decline("fill with a non-scalar tensor")
        value = value.item()
    if x.dtype in INTEGERS or x.dtype is torch.bool:
        return _integer_fill(x, value)
    if x.dtype not in FLOATS:
        raise Decline(f"dtype {str(x.dtype).replace('torch.', '')}")
    if not x.is_contiguous():
        raise Decline("non-contiguous in-place")
    n = x.numel()
    if n:
        block = _block(n)
        E.unary_kernel[(_cdiv(n, block),)](x, x, n, float(value), OP=E.FILL, FAST_OP=E.FILL, BLOCK=block)
    return x


def _integer_fill(x: torch.Tensor, value) -> torch.Tensor:
    """fill_ of a bool or integer tensor with a number its dtype holds, on the integer kernel."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise Decline(f"fill of {str(x.dtype).replace('torch.', '')} with {value!r}")  # torch decides
    info = (0, 1) if x.dtype is torch.bool else (torch.iinfo(x.dtype).min, torch.iinfo(x.dtype).max)
    if not info[0] <= int(value) <= info[1]:
        raise Decline("fill value out of the dtype's range")  # torch's overflow error from the CPU
    if not x.is_contiguous():
        raise Decline("non-contiguous in-place")
    return _integer_binary("fill", x, int(value), 1, x, comparison=False, inplace=True, compute=x.dtype)


def where(condition: torch.Tensor, a, b, out=None):
    index = _device_index(condition, a, b)
    if condition.dtype != torch.bool:
        raise Decline("non-bool condition")
    if condition.is_cpu and condition.dim():
        raise Decline("CPU tensor operand")
    if torch.result_type(a, b) in INTEGERS:
        # integer operands select exactly in their own type; numbers would need an integer stand-in
        if not all(isinstance(t, torch.Tensor) and not t.is_cpu for t in (a, b)):
            raise Decline("integer where with a number operand")
        compute = torch.result_type(a, b)
    else:
        compute = _promoted(a, b)
    shapes = [t.shape for t in (condition, a, b) if isinstance(t, torch.Tensor)]
    shape = _broadcast(*shapes)
    tc = condition
    ta = _operand(a, index, "where", compute)  # a scalar is stored as the result dtype, rounded once
    tb = _operand(b, index, "where", compute)
    out = _check_out(out, shape, compute, index)
    n = out.numel()
    if n == 0:
        return out
    _where_launch(tc, ta, tb, out, n, *where_geometry(shape, [tc, ta, tb], a_scalar=False))
    return out


def masked_fill(x: torch.Tensor, mask: torch.Tensor, value, *, inplace=False):
    if isinstance(value, torch.Tensor):
        if value.dim():
            raise Decline("masked_fill with a non-scalar tensor")
        value = value.item()
    if x.dtype not in FLOATS:
        raise Decline(f"dtype {str(x.dtype).replace('torch.', '')}")
    index = x.get_device()
    if inplace:
        if _broadcast(x.shape, mask.shape) != list(x.shape):
            raise Decline("in-place result needs broadcasting of self")
        if not x.is_contiguous():
            raise Decline("non-contiguous in-place")
        out = x
    else:
        out = empty(_broadcast(mask.shape, x.shape), x.dtype, index)
    n = out.numel()
    if n:
        ta = _scalar_tensor(float(value), index)
        _where_launch(mask, ta, x, out, n, *where_geometry(list(out.shape), [mask, ta, x], a_scalar=True))
    return out


def where_geometry(shape: list[int], operands: list, *, a_scalar: bool) -> tuple:
    """(sizes, condition strides, a strides, b strides) of `where_kernel` over `shape`: `_geometry`'s,
    or one flat run of the elements when no operand needs broadcasting (`a_scalar`: `a` is a
    one-element value tensor, read at offset 0)."""
    _, sizes, (sc, sa, sb) = _geometry(shape, operands)
    if sizes == [1, 1, 1] and sc == [0, 0, 0, 0]:
        value = [0, 0, 0, 0] if a_scalar else [0, 0, 0, 1]
        return [1, 1, math.prod(shape)], [0, 0, 0, 1], value, [0, 0, 0, 1]
    return sizes, sc, sa, sb


def _where_launch(condition, a, b, out, n: int, sizes, sc, sa, sb) -> None:
    """`where_kernel` over the `n` elements of `out` (`where_tiled_kernel` from `_TILED_MIN` on). When
    every int argument fits in 32 bits, the dtypes and the block(s) determine the specialisation, so it
    runs through the launch kept under them (a masked_fill on attention scores skips the general
    launch's per-argument key: 17 arguments)."""
    E = _k("elementwise")
    fits = max(n, *map(abs, sc), *map(abs, sa), *map(abs, sb)) < _I32
    if n >= _TILED_MIN:
        _, s2, s3 = sizes
        block_m, block_n = tile_shape(s2, s3)
        kernel, args = E.where_tiled_kernel, (condition, a, b, out, *sizes, *sc, *sa, *sb)
        programs, rows = _cdiv(s2, block_m) * _cdiv(s3, block_n), n // (s2 * s3)
        keywords = {"BLOCK_M": block_m, "BLOCK_N": block_n}
    else:
        block = _block(n)
        kernel, args = E.where_kernel, (condition, a, b, out, n, *sizes, *sc, *sa, *sb)
        programs, rows = _cdiv(n, block), 1
        keywords = {"BLOCK": block}
    if fits:
        key = (condition.dtype, a.dtype, b.dtype, out.dtype, *keywords.values())
        _launch.launch(kernel, programs, key, args, keywords, rows)
    else:
        kernel[(programs, rows)](*args, **keywords)


# ---------------------------------------------------------------- matmul

def matmul_shape_key(dtypes: tuple, M: int, N: int, K: int, has_bias: bool, batch: int, index: int) -> tuple:
    """The launch shape `_matmul_launch` keeps the autotuner's tile under (`_launch.tuned`): the four
    tensors' dtypes, M, N, K, bias, batch, the device's tensor-parallel size and the requested DSL
    backend, everything the tuner's decision depends on."""
    return (*dtypes, M, N, K, has_bias, batch, _device_tp(index), requested_backend())


def _matmul_launch(a, b, c, bias, M, N, K, sa, sb, sc, sbias, alpha, beta, batch):
    """One matmul_kernel launch. The autotuner picks the tile config on the first launch of a shape;
    later launches of that shape run the kernel with that config directly (`_launch.tuned`), since the
    tuner's own per-call key and grid callback cost more than a small matmul computes. A transposed
    weight is dense too: the kept unchecked launch takes it."""
    has_bias = bias is not None
    operand = bias if has_bias else c
    tensors = (a, b, c, operand)
    dtypes = (a.dtype, b.dtype, c.dtype, operand.dtype)
    args = (*tensors, M, N, K, *sa, *sb, *sc, *sbias, float(alpha), float(beta))
    tiles = lambda meta: (_cdiv(M, meta["BLOCK_M"]), _cdiv(N, meta["BLOCK_N"]), batch)  # noqa: E731
    shape_key = matmul_shape_key(dtypes, M, N, K, has_bias, batch, c.get_device())
    _launch.tuned(_k("matmul").matmul_kernel, shape_key, args, {"HAS_BIAS": has_bias}, tiles, dtypes, tensors,
                  max(M, N, K, *map(abs, (*sa, *sb, *sc, *sbias))) < _I32)


def _mm_check(*tensors):
    dtype = tensors[0].dtype
    for t in tensors:
        if t.dtype != dtype:
            raise Decline("mixed dtypes")
    if dtype not in FLOATS:
        raise Decline(f"dtype {str(dtype).replace('torch.', '')}")


def mm(a, b, out=None):
    _mm_check(a, b)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise Decline("shape mismatch")
    M, K = a.shape
    N = b.shape[1]
    index = _device_index(a, b)
    c = _check_out(out, [M, N], a.dtype, index)
    if c.numel() == 0:
        return c
    if K == 0:
        return fill(c, 0.0)
    _matmul_launch(a, b, c, None, M, N, K, (0, *a.stride()), (0, *b.stride()), (0, *c.stride()),
                   (0, 0), 1.0, 0.0, 1)
    return c


def addmm(bias, a, b, beta=1, alpha=1, out=None):
    _mm_check(bias, a, b)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise Decline("shape mismatch")
    M, K = a.shape
    N = b.shape[1]
    index = _device_index(a, b)
    c = _check_out(out, [M, N], a.dtype, index)
    if c.numel() == 0 or K == 0:
        raise Decline("empty tensor")
    if _broadcast(bias.shape, (M, N)) != [M, N]:
        raise Decline("shape mismatch")
    sbias = _expanded_strides(bias, [M, N])
    _matmul_launch(a, b, c, bias, M, N, K, (0, *a.stride()), (0, *b.stride()), (0, *c.stride()),
                   tuple(sbias), alpha, beta, 1)
    return c


def bmm(a, b, out=None):
    _mm_check(a, b)
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise Decline("shape mismatch")
    B, M, K = a.shape
    N = b.shape[2]
    index = _device_index(a, b)
    c = _check_out(out, [B, M, N], a.dtype, index)
    if c.numel() == 0:
        return c
    if K == 0:
        return fill(c, 0.0)
    _matmul_launch(a, b, c, None, M, N, K, a.stride(), b.stride(), c.stride(), (0, 0), 1.0, 0.0, B)
    return c
