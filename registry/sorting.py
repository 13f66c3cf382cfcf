"""Sorting, scanning and counting: `sort` (stable), `topk`, `cumsum` and `histc` (`kernels/sorting.py`).

MoE routers call these on every step (`topk` over the experts' scores, `sort` of the chosen expert
ids to group tokens, `histc` and `cumsum` for the tokens per expert and the groups' offsets). Results
follow torch's CPU kernels: `sort` is stable (equal values keep their index order, NaN sorts as the largest
value), `topk` returns its k values in sorted order (for ties the lower index first, one of the orders
torch allows), integer `cumsum` without `dtype=` gives int64. A call the kernels do not cover (a 0-d
tensor, a line longer than `RANK_LIMIT` for a sort or a large-k topk, an unsupported dtype, an
invalid argument) declines with its reason, so the CPU fallback runs it and raises torch's own errors.
"""

from __future__ import annotations

import math

import torch

from ._base import FLOATS, Decline
from ._launch import kernel_module as _k
from ._launch import launch_grid
from ._ops import contiguous, empty
from .geometry import cdiv, next_power_of_2

_INTEGERS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
_ORDERED = (*FLOATS, *_INTEGERS)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _lines(x: torch.Tensor, dim: int, op: str) -> tuple[int, int, int, int]:
    """(dim normalised, outer, n, inner) of `x` viewed as (outer, n, inner) around `dim`."""
    if x.dim() == 0:
        raise Decline(f"{op} of a 0-d tensor")
    if not -x.dim() <= dim < x.dim():
        raise Decline("dim out of range")  # torch's error from the CPU fallback
    dim %= x.dim()
    shape = x.shape
    return dim, math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])


def _rank(x: torch.Tensor, dim: int, k: int | None, descending: bool, op: str
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """The first k positions (all for None) of `x` sorted along `dim` (stable): (values, int64 indices),
    contiguous."""
    if x.dtype not in _ORDERED:
        raise Decline(f"dtype {_dtype_name(x.dtype)}")
    dim, outer, n, inner = _lines(x, dim, op)
    kernels = _k("sorting")
    k = n if k is None else k
    if not 0 <= k <= n:
        raise Decline("k out of range")  # torch's error from the CPU fallback
    select = k <= kernels.SELECT_LIMIT and k < n
    if not select and n > kernels.RANK_LIMIT:
        raise Decline(f"{op} of lines longer than {kernels.RANK_LIMIT} elements (the rank kernel compares "
                      f"every pair; topk with k <= {kernels.SELECT_LIMIT} has no such limit)")
    shape = list(x.shape)
    shape[dim] = k
    index = x.get_device()
    values = empty(shape, x.dtype, index)
    indices = empty(shape, torch.int64, index)
    if not values.numel():
        return values, indices
    if select:
        chunk, k_block = kernels.select_blocks(n, k)
        launch_grid(kernels.select_kernel, (outer * inner, 1),
                    (contiguous(x), values, indices, n, inner, k, int(bool(descending))), CHUNK=chunk,
                    K_BLOCK=k_block)
    else:
        # lanes fitted to short lines: a (4096, 4) sort ran 64 x 256 comparisons per line of 4 elements
        fitted = max(16, next_power_of_2(n))
        rank_block, chunk = min(kernels.RANK_BLOCK, fitted), min(kernels.RANK_CHUNK, fitted)
        launch_grid(kernels.rank_kernel, (cdiv(n, rank_block), outer * inner),
                    (contiguous(x), values, indices, n, inner, k), DESCENDING=bool(descending),
                    BLOCK=rank_block, CHUNK=chunk)
    return values, indices


def sort(x: torch.Tensor, dim: int = -1, descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """`aten::sort.default`: stable, as torch's CPU sort."""
    return _rank(x, dim, None, descending, "sort")


def sort_stable(x: torch.Tensor, *, stable: bool | None = None, dim: int = -1,
                descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """`aten::sort.stable`: every sort here is stable, so `stable` changes nothing."""
    del stable
    return sort(x, dim, descending)


def topk(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True,
         sorted: bool = True) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: A002 (aten's name)
    """`aten::topk`: the k largest (smallest) values and their indices, in sorted order either way
    (`sorted=False` allows any order)."""
    del sorted
    return _rank(x, dim, k, largest, "topk")


def _accumulator(dtype: torch.dtype) -> object:
    """The DSL dtype cumsum accumulates in: torch's CPU accumulation type (double for float32)."""
    import torch_rbln.dsl as tl

    if dtype in _INTEGERS or dtype is torch.bool:
        return tl.int64
    return tl.float32 if dtype in (torch.float16, torch.bfloat16) else tl.float64


def cumsum(x: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """`aten::cumsum` (and `cumsum_` through `out=x`): integer and bool inputs give int64 unless
    `dtype=` says otherwise."""
    if x.dtype not in _ORDERED and x.dtype is not torch.bool:
        raise Decline(f"dtype {_dtype_name(x.dtype)}")
    result_dtype = dtype or (torch.int64 if x.dtype in _INTEGERS or x.dtype is torch.bool else x.dtype)
    if result_dtype not in _ORDERED:
        raise Decline(f"result dtype {_dtype_name(result_dtype)}")
    dim, outer, n, inner = _lines(x, dim, "cumsum")
    if out is not None and (out.dtype != result_dtype or not out.is_contiguous() or out.shape != x.shape):
        raise Decline("in-place cumsum into another dtype or a strided tensor")
    result = out if out is not None else empty(x.shape, result_dtype, x.get_device())
    if result.numel():
        kernels = _k("sorting")
        # a block fitted to short lines (a cumsum over a 64-element dim ran 256 lanes a line)
        launch_grid(kernels.cumsum_kernel, (outer * inner, 1), (contiguous(x), result, n, inner),
                    ACC=_accumulator(result_dtype),
                    BLOCK=min(kernels.SCAN_BLOCK, max(16, next_power_of_2(n))))
    return result


def cumsum_(x: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`aten::cumsum_`: in place (a line's block is read before it is written)."""
    if dtype is not None and dtype != x.dtype:
        raise Decline("dtype differs from the tensor's")  # torch's error
    return cumsum(x, dim, dtype=x.dtype, out=x)


def _steps() -> dict:
    import torch_rbln.dsl as tl

    return {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


_EXACT_COUNTS = 1 << 24


def _exact_in_float32(value: float) -> bool:
    import numpy as np

    return float(np.float32(value)) == float(value)


def histc(x: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:  # noqa: A002
    """`aten::histc` with an explicit range (`min < max`): floating inputs as torch's CPU kernel computes
    them (in their own precision; counts are exact, where the CPU's 16-bit counts stop growing at 256
    or 2048), integer inputs as CUDA counts them (the bin computed in float64,
    counts in the input's dtype; transformers' MoE load-balancing loss passes int32 on any device but
    the CPU)."""
    if x.dtype not in _ORDERED:
        raise Decline(f"dtype {_dtype_name(x.dtype)}")
    if not isinstance(bins, int) or bins <= 0 or not min < max:
        raise Decline("bins <= 0, or a range taken from the data (min >= max)")  # the CPU decides/raises
    if x.dtype in _INTEGERS and not (_exact_in_float32(min) and _exact_in_float32(max)):
        raise Decline("integer histc with bounds that float32 does not hold exactly")
    import torch_rbln.dsl as tl

    compute = tl.float64 if x.dtype in _INTEGERS else tl.float32
    # counts are float32 (exact to 2**24), cast to the result's dtype at the end: 16-bit floats' own
    # counts stop growing at 256 (bfloat16) or 2048 (float16), and float32 zeros are a device fill
    n = x.numel()
    if n > _EXACT_COUNTS:
        raise Decline(f"histc of more than {_EXACT_COUNTS} elements (counted in float32)")
    counts = empty([bins], torch.float32, x.get_device()).zero_()
    if n:
        kernels = _k("sorting")
        launch_grid(kernels.histc_kernel, (cdiv(n, kernels.HISTC_BLOCK), 1),
                    (contiguous(x), counts, n, float(min), float(max), bins),
                    COMPUTE=compute, STEP=_steps().get(x.dtype, compute), BLOCK=kernels.HISTC_BLOCK)
    return counts if x.dtype is torch.float32 else counts.to(x.dtype)
