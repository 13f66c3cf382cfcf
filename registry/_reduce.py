"""Reductions over any set of dims (sum, mean, amax/amin, max/min with indices, argmax/argmin, var/std).

The reduced dims decide the kernel, so no case needs a transposing copy unless the dims are scattered:
- trailing dims (or all dims): the row kernel (`kernels/rows.py`), one program per output element;
- one contiguous run of dims in the middle or at the front: the (outer, r, inner) kernel
  (`kernels/reduce.py`), which reads the reduced rows in place with contiguous vector loads;
- scattered dims (`dim=(0, 2)` of a 3-d tensor): the kept dims are permuted to the front and copied
  once by the strided copy kernel, then the row kernel reduces the trailing block.
"""

from __future__ import annotations

import math

import torch

from . import _launch as launches
from ._ops import _I32, FLOATS, Decline, _block, _cdiv, _k, _row_block, cast_copy, contiguous, empty

_CODES = {"sum": 0, "mean": 1, "max": 2, "min": 3, "argmax": 4, "argmin": 5, "var": 6, "amax": 2, "amin": 3}
_INDEXED = ("max", "min", "argmax", "argmin")  # dim is one int; amax/amin take several dims


def reduced_dims(x: torch.Tensor, dim) -> list[int]:
    """The sorted, wrapped dims `dim` names; every dim for None / an empty list (torch's convention)."""
    nd = x.dim()
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(nd))
    dims = [dim] if isinstance(dim, int) else list(dim)
    width = max(nd, 1)
    wrapped = set()
    for d in dims:
        if not -width <= d < width:
            raise Decline(f"dim {d} out of range")  # the CPU kernel raises torch's IndexError
        wrapped.add(d % width)
    return sorted(wrapped) if nd else []


def _result_shape(x: torch.Tensor, dims: list[int], keepdim: bool) -> list[int]:
    if keepdim:
        return [1 if i in dims else size for i, size in enumerate(x.shape)]
    return [size for i, size in enumerate(x.shape) if i not in dims]


def reduce(name: str, x: torch.Tensor, dim=None, keepdim=False, dtype=None, correction=None):
    """`name` over `dim` of `x`: the values, (values, indices) for max/min, indices for argmax/argmin.

    `dim` follows the aten schema of each op: an int for max/min/argmax/argmin (None: all elements,
    flattened), an int list for the others (None or empty: all dims)."""
    if x.dtype not in FLOATS:
        raise Decline(f"dtype {str(x.dtype).replace('torch.', '')}")
    if dtype is not None and dtype != x.dtype:
        raise Decline("dtype= conversion")
    if x.numel() == 0:
        raise Decline("empty tensor")
    dims = reduced_dims(x, dim)
    shape = _result_shape(x, dims, keepdim)
    index = x.get_device()
    values = None if name in ("argmax", "argmin") else empty(shape, x.dtype, index)
    # amax/amin run the max/min kernel without indices (the row kernel's WRITE_INDEX=False)
    indices = empty(shape, torch.int64, index) if name in _INDEXED else None
    corr = 1.0 if correction is None else float(correction)
    _launch(name, x, dims, values, indices, corr)
    if name in ("argmax", "argmin"):
        return indices
    if name in ("max", "min"):
        return values, indices
    return values


def _launch(name: str, x: torch.Tensor, dims: list[int], values, indices, correction: float) -> None:
    op = _CODES[name]
    nd = x.dim()
    first, last = (dims[0], dims[-1] + 1) if dims else (0, nd)
    if dims and dims != list(range(first, last)):
        x = _kept_dims_first(x, dims)
        first, last = nd - len(dims), nd
    x = contiguous(x)
    outer = math.prod(x.shape[:first])
    r = math.prod(x.shape[first:last])
    inner = math.prod(x.shape[last:])
    # argmax/argmin store indices only; passing `x` as the unused values pointer keeps the
    # specialisation shared with max/min (same dtypes).
    values = values if values is not None else x
    write_index = indices is not None
    if inner == 1:
        indices = indices if write_index else values  # not touched without WRITE_INDEX
        key, constexprs = row_key(x.dtype, values.dtype, indices.dtype, op, r, write_index=write_index)
        launches.launch(_k("rows").reduce_kernel, outer, key, (x, values, indices, r, correction), constexprs)
    else:
        if not write_index:  # the middle kernel's max/min (amax/amin) always store an index: scratch
            scratch = op in (_CODES["max"], _CODES["min"])
            indices = empty(list(values.shape), torch.int64, values.get_device()) if scratch else values
        block = _block(inner)
        # kept under its key (dtypes, constexprs, int widths): a bias gradient's sum(0) skips the general
        # launch's per-argument key
        key = ("middle", x.dtype, values.dtype, indices.dtype, op, block, r < _I32, inner < _I32)
        launches.launch(_k("reduce").middle_reduce_kernel, outer, key,
                        (x, values, indices, r, inner, correction), {"OP": op, "BLOCK": block},
                        rows=_cdiv(inner, block))


def row_key(dtype: torch.dtype, values_dtype: torch.dtype, indices_dtype: torch.dtype, op: int, r: int, *,
            write_index: bool) -> tuple[tuple, dict]:
    """(launch key, constexpr keywords) of the row kernel `reduce_kernel` reducing rows of `r` elements
    of `dtype` with op code `op` into values/indices of the given dtypes, storing indices when
    `write_index` (max/min with indices, argmax/argmin; not amax/amin, nor sum/mean/var). The key holds
    every constexpr, so it determines the specialisation (the fast path in `_fastpath` keys its kept
    launch with it too, so both name the same one)."""
    block = _row_block(r)
    key = (dtype, values_dtype, indices_dtype, op, write_index, block, r < _I32)
    return key, {"OP": op, "WRITE_INDEX": write_index, "BLOCK": block}


def _kept_dims_first(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    """A contiguous copy of `x` with the kept dims first and the reduced dims last, in order."""
    kept = [d for d in range(x.dim()) if d not in dims]
    return cast_copy(x.permute(*kept, *dims), x.dtype)
