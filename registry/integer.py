"""Integer and bool elementwise ops on the exact integer kernel (`kernels/integer.py`): binary ops on
int32/int64 tensors (position ids, cache positions, index arithmetic: add/sub with alpha, mul,
comparisons, maximum/minimum, floor division by a number), bitwise and/or/xor/not, integer abs, neg
and fill. `elementwise.binary` / `unary` / `fill` send integer results here; ops without an integer
kernel (pow, ...) decline with the dtype as the reason. True division of integers converts them to the
default float dtype on the device first (`true_division_operands`), as torch computes it.
"""

from __future__ import annotations

import torch

from . import _launch
from ._base import INTEGERS, StridedTarget
from ._memo import BoundedMemo
from ._ops import Decline, _device_index, _geometry, _k, binary_output
from .geometry import I32, cdiv, fused_block, small_tile_shape
from .plan import Launch

INTEGER_NAMES = ("add", "sub", "mul", "eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum", "div_floor",
                  "remainder", "abs", "fill")
_INT64 = (-(2**63), 2**63)


def integer_scalar(value) -> int | None:
    """A Python int or bool (or a 0-dim CPU integer or bool tensor, a wrapped number) as an int; None
    otherwise."""
    if isinstance(value, torch.Tensor):
        if value.is_cpu and value.dim() == 0 and not value.dtype.is_floating_point and \
                not value.dtype.is_complex:
            return int(value.item())
        return None
    if isinstance(value, int) and _INT64[0] <= value < _INT64[1]:
        return int(value)  # a bool is 0 or 1, as torch reads it (`all_finished & (early_stopping is True)`)
    return None


BITWISE_NAMES = ("bitwise_and", "bitwise_or", "bitwise_xor")
BITWISE_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def bitwise(name: str, a, b, out=None, *, inplace: bool = False) -> torch.Tensor:
    """bitwise_and/or/xor of bool and integer tensors (or an int), exact on the integer kernel; float
    operands are declined, so the CPU fallback raises torch's error."""
    compute = torch.result_type(a, b)
    if compute not in BITWISE_DTYPES:
        raise Decline(f"dtype {str(compute).replace('torch.', '')}")
    return integer_binary(name, a, b, 1, out, comparison=False, inplace=inplace)


def bitwise_not(x, out=None, *, inplace: bool = False) -> torch.Tensor:
    """~x: xor with all bits set (1 for bool), in x's dtype."""
    if not isinstance(x, torch.Tensor) or x.dtype not in BITWISE_DTYPES:
        raise Decline(f"dtype {str(getattr(x, 'dtype', type(x))).replace('torch.', '')}")
    return integer_binary("bitwise_xor", x, 1 if x.dtype == torch.bool else -1, 1, out, comparison=False,
                          inplace=inplace, compute=x.dtype)


def integer_binary(name: str, a, b, alpha, out, *, comparison: bool, inplace: bool,
                   compute: torch.dtype | None = None) -> torch.Tensor:
    """`name` on the exact integer kernel; `compute` (the result dtype) defaults to torch's promotion."""
    compute = torch.result_type(a, b) if compute is None else compute
    if name not in INTEGER_NAMES and name not in BITWISE_NAMES:
        raise Decline(f"dtype {str(compute).replace('torch.', '')}")
    if not isinstance(a, torch.Tensor) or a.is_cpu:
        # a number first (`1 - t` is sub(wrapped 1, t): Hugging Face's generate computes
        # `1 - unfinished_sequences` every step): the number as a 0-dim tensor on t's device
        first = integer_scalar(a)
        if first is None or inplace or compute not in INTEGERS or not isinstance(b, torch.Tensor) or b.is_cpu:
            raise Decline("integer op with a number or CPU tensor as its first operand")
        a = device_scalar(wrapped_int(first, compute), compute, b.get_device())
    if isinstance(alpha, bool) or not isinstance(alpha, int):
        raise Decline("non-integer alpha")  # the CPU kernel raises torch's error for float alpha
    scalar = integer_scalar(b)
    if scalar is None and (not isinstance(b, torch.Tensor) or b.is_cpu):
        raise Decline("operand")
    if scalar is not None and compute is not torch.bool:
        scalar = wrapped_int(scalar, compute)
    if (name == "div_floor" or name == "remainder") and not scalar:
        # torch raises ZeroDivisionError for an integer divisor of 0, which a kernel cannot
        raise Decline(f"integer {'floor division' if name == 'div_floor' else name} by a tensor or by zero")
    index = _device_index(a)
    operands = (a,) if scalar is not None else (a, b)
    out = binary_output(a, b, compute, out, index, operands, comparison=comparison, inplace=inplace)
    n = out.numel()
    if n == 0:
        return out
    tensor_b = a if scalar is not None else b
    dtypes = (a.dtype, tensor_b.dtype, out.dtype)
    g = integer_launch(name, dtypes, list(out.shape), n, operands, scalar, alpha)
    _launch.launch_decided(g, (a, tensor_b, g.ints[0], out, *g.ints[1:]))
    return out


_device_scalars: dict[tuple[int, torch.dtype, int], torch.Tensor] = BoundedMemo(256)


def device_scalar(value: int, dtype: torch.dtype, index: int) -> torch.Tensor:
    """A 0-dim `dtype` tensor on rbln:`index` holding `value` (kept: a number operand of every
    generation step), which broadcasts to any shape. Kernels only read it."""
    key = (value, dtype, index)
    tensor = _device_scalars.get(key)
    if tensor is None:
        from torch_rbln import _dlpack, _memory

        tensor = _memory.empty_strided([], [], dtype, index)
        _dlpack.to_host_view(tensor).fill_(value)
        _device_scalars[key] = tensor
    return tensor


def wrapped_int(value: int, dtype: torch.dtype) -> int:
    """`value` as `dtype` holds it, wrapped as torch converts a number operand to the result's dtype
    (`int32_tensor < 2**40` compares with 0; the kernel would compare with the full value)."""
    info = torch.iinfo(dtype)
    if info.min <= value <= info.max:
        return value
    span = info.max - info.min + 1
    return (value - info.min) % span + info.min


def integer_launch(name: str, dtypes: tuple, shape: list[int], n: int, operands: tuple, scalar: int | None,
                   alpha: int) -> Launch:
    """The integer kernel's launch for op `name` over a contiguous result of `shape` (`n` elements),
    reading `operands` (a, and b unless it is the number `scalar`); `dtypes`: a's, b's (a's for a
    number) and the result's. Operands in the result's layout take `int_binary_kernel`, one element per
    lane; broadcast or strided ones `int_binary_tiled_kernel` in `small_tile_shape` tiles. Its ints:
    (scalar or 0, n, alpha, then the op code, or the sizes, a's and b's strides and the op code): the
    launch's arguments after a and b, the result between the first and the rest. The key (every dtype,
    the constexprs, each int's width: what picks the specialisation) is None when an int needs 64 bits.
    Shared by `integer_binary` and the integer plans (`elementwise.integer_plan`)."""
    bcast, sizes, strides = _geometry(shape, list(operands))
    kernels = _k("integer")
    op = kernels.INTEGER_ONLY.get(name) or _k("elementwise").BINARY[name]
    fast = kernels.integer_fast_op(op, bcast)
    head = (0 if scalar is None else scalar, n, alpha)
    if bcast:
        _, s2, s3 = sizes
        block_m, block_n = small_tile_shape(n, s2, s3)
        keywords = {"FAST_OP": fast, "B_SCALAR": scalar is not None, "BLOCK_M": block_m, "BLOCK_N": block_n}
        ints = (*head, *sizes, *strides[0], *(strides[1] if scalar is None else (0, 0, 0, 0)), op)
        kernel, programs, rows = kernels.int_binary_tiled_kernel, cdiv(s2, block_m) * cdiv(s3, block_n), \
            n // (s2 * s3)
    else:
        size = fused_block(n, fast in kernels.FAST_INTEGER)
        keywords = {"FAST_OP": fast, "B_SCALAR": scalar is not None, "BLOCK": size}
        ints, kernel, programs, rows = (*head, op), kernels.int_binary_kernel, cdiv(n, size), 1
    fits = all(-I32 <= v < I32 for v in ints)
    return Launch(kernel, (*dtypes, *keywords.values()) if fits else None, keywords, programs, rows, ints)


def true_division_operands(a, b) -> tuple:
    """(a, b) ready for the float `div` kernel: when both are integers or bools, the device tensors among
    them converted to the default float dtype, which is the result's dtype and the dtype torch divides
    in (each operand converted, then divided: int64 values beyond 2**24 round the same way); numbers and
    CPU scalar tensors stay as they are (the float kernel promotes them). Anything else unchanged."""
    if torch.result_type(a, b).is_floating_point or torch.result_type(a, b).is_complex:
        return a, b
    dtype = torch.get_default_dtype()
    return tuple(x.to(dtype) if isinstance(x, torch.Tensor) and not x.is_cpu else x for x in (a, b))


def integral(value) -> int | None:
    """A number as the int a bool or integer tensor would hold exactly (an integral float included),
    or None (a fractional float, a complex: torch decides what writing it means)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return int(value) if isinstance(value, int) else None


def held(value: int, dtype: torch.dtype) -> bool:
    """Whether the bool or integer `dtype` holds `value` (bool: 0 and 1)."""
    if dtype is torch.bool:
        return 0 <= value <= 1
    info = torch.iinfo(dtype)
    return info.min <= value <= info.max


def integer_fill(x: torch.Tensor, value) -> torch.Tensor:
    """fill_ of a bool or integer tensor with a number its dtype holds, on the integer kernel."""
    number = integral(value)
    if number is None:
        raise Decline(f"fill of {str(x.dtype).replace('torch.', '')} with {value!r}")  # torch decides
    if not held(number, x.dtype):
        raise Decline("fill value out of the dtype's range")  # torch's overflow error from the CPU
    if not x.is_contiguous():
        raise StridedTarget("non-contiguous in-place")
    return integer_binary("fill", x, number, 1, x, comparison=False, inplace=True, compute=x.dtype)
