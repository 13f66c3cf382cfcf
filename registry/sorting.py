"""Sorting and scanning along one dim: `sort` (stable), `topk` and `cumsum` (`kernels/sorting.py`).

MoE routers call all three on every step (`topk` over the experts' scores, `sort` of the chosen expert
ids to group tokens, `cumsum` of the tokens per expert for the groups' offsets). Results follow
torch's CPU kernels: `sort` is stable (equal values keep their index order, NaN sorts as the largest
value), `topk` returns its k values in sorted order (for ties the lower index first, one of the orders
torch allows), integer `cumsum` without `dtype=` gives int64. A call the kernels do not cover (a 0-d
tensor, a line longer than `RANK_LIMIT` for the sorts, an unsupported dtype, an invalid argument)
declines with its reason, so the CPU fallback runs it and raises torch's own errors.
"""

from __future__ import annotations

import math

import torch

from ._base import FLOATS, Decline
from ._launch import kernel_module as _k
from ._launch import launch_grid
from ._ops import contiguous, empty
from .geometry import cdiv

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
    if n > kernels.RANK_LIMIT:
        raise Decline(f"{op} of lines longer than {kernels.RANK_LIMIT} elements (the rank kernel compares "
                      "every pair)")
    k = n if k is None else k
    if not 0 <= k <= n:
        raise Decline("k out of range")  # torch's error from the CPU fallback
    shape = list(x.shape)
    shape[dim] = k
    index = x.get_device()
    values = empty(shape, x.dtype, index)
    indices = empty(shape, torch.int64, index)
    if values.numel():
        launch_grid(kernels.rank_kernel, (cdiv(n, kernels.RANK_BLOCK), outer * inner),
                    (contiguous(x), values, indices, n, inner, k), DESCENDING=bool(descending),
                    BLOCK=kernels.RANK_BLOCK, CHUNK=kernels.RANK_CHUNK)
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
        launch_grid(kernels.cumsum_kernel, (outer * inner, 1), (contiguous(x), result, n, inner),
                    ACC=_accumulator(result_dtype),
                    BLOCK=kernels.SCAN_BLOCK)
    return result


def cumsum_(x: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`aten::cumsum_`: in place (a line's block is read before it is written)."""
    if dtype is not None and dtype != x.dtype:
        raise Decline("dtype differs from the tensor's")  # torch's error
    return cumsum(x, dim, dtype=x.dtype, out=x)
