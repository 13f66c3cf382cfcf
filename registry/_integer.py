"""Binary ops on int32/int64 tensors (position ids, cache positions, index arithmetic) on the exact
integer kernel (`kernels/integer.py`): add/sub with alpha, mul, comparisons, maximum/minimum.

`_ops.binary` sends integer results here; ops without an integer kernel (true division, pow, ...)
decline with the dtype as the reason, as before.
"""

from __future__ import annotations

import torch

from ._ops import Decline, _block, _cdiv, _device_index, _geometry, _k, binary_output

_NAMES = ("add", "sub", "mul", "eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum")
_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
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


def binary(name: str, a, b, alpha, out, *, comparison: bool, inplace: bool) -> torch.Tensor:
    compute = torch.result_type(a, b)
    if name not in _NAMES or not isinstance(a, torch.Tensor) or a.is_cpu:
        raise Decline(f"dtype {str(compute).replace('torch.', '')}")
    if isinstance(alpha, bool) or not isinstance(alpha, int):
        raise Decline("non-integer alpha")  # the CPU kernel raises torch's error for float alpha
    scalar = _integer_scalar(b)
    if scalar is None and (not isinstance(b, torch.Tensor) or b.is_cpu):
        raise Decline("operand")
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
        *b_strides, OP=_k("elementwise").BINARY[name], B_SCALAR=scalar is not None, BCAST=bcast, BLOCK=block,
    )
    return out
