"""Indexing by an integer tensor: `index` (`x[idx]`, `x[:, idx]`) and the scatters `index_put_`
(`x[idx] = v`, `x[idx] += v`, and the embedding gradient that compiled graphs build from
`index_put(..., accumulate=True)`), `slice_scatter` and `select_scatter` (slicing's backward in compiled
graphs).

`index` gathers with `index_select`'s kernel; `index_put` runs `kernels/embedding.index_put_kernel`, the
scatter that undoes `index_select`. Both take one integer index tensor on one dim (every dim before it
a full slice, `None` in aten's index list); index_put a contiguous destination and values that
broadcast to the indexed shape. Everything else (boolean masks, several index tensors, negative
indices, bool accumulation) is declined, so the CPU fallback runs it with torch's own semantics and
errors.
The scatters copy through the copy kernels, and so do `flip` (a copy whose destination strides are
negated on the flipped dims) and `roll` (two copies per rolled dim, into the result's two slices).
"""

from __future__ import annotations

import math

import torch

from . import _copy, _launch
from ._base import FLOATS, Decline
from ._launch import kernel_module as _k
from ._ops import contiguous, empty
from .gather import index_select
from .geometry import I32, row_block

# index_put's kernel moves values of any of these (integers exactly: `inv_perm[perm] = arange(n)` in
# MoE routing); accumulating adds in the tensor's own dtype, as torch's CPU kernel does
_PUT_DTYPES = (*FLOATS, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)


def _index_dim(self: torch.Tensor, indices: list) -> tuple[int, torch.Tensor]:
    """(dim, index tensor) of an aten index list that indexes one dim with one integer tensor."""
    present = [(d, t) for d, t in enumerate(indices) if t is not None]
    if len(present) != 1:
        raise Decline(f"{len(present)} index tensors (one supported)")
    dim, index = present[0]
    if dim >= self.dim():
        raise Decline("more indices than dims")  # the CPU fallback raises torch's error
    if not isinstance(index, torch.Tensor) or index.is_cpu:
        raise Decline("CPU index")
    if index.dtype not in (torch.int64, torch.int32):
        raise Decline(f"index dtype {str(index.dtype).replace('torch.', '')} (boolean masks run on the CPU)")
    return dim, index


def index(self: torch.Tensor, indices: list) -> torch.Tensor:
    """`aten::index.Tensor` (`x[idx]`, `x[:, idx]`) with one integer index tensor of any shape: the
    rows it names, gathered by `index_select` and viewed in the indexed shape."""
    dim, index_tensor = _index_dim(self, indices)
    flat = index_tensor.reshape(-1)
    if flat.numel() == 0:
        raise Decline("empty index")
    gathered = index_select(self, dim, flat)
    return gathered.view([*self.shape[:dim], *index_tensor.shape, *self.shape[dim + 1:]])


def index_put_(self: torch.Tensor, indices: list, values: torch.Tensor, accumulate: bool = False,
               unsafe: bool = False) -> torch.Tensor:
    """`aten::_index_put_impl_`: `self[..., index, ...] = values` (`+=` with `accumulate`), in place.

    Repeated indices: without `accumulate` the last write wins, with it every value is added in index
    order (the kernel's programs run in order on one NPU), as torch's CPU kernel does."""
    del unsafe  # torch's own check that indices do not repeat; ours handles repeats either way
    if self.dtype not in _PUT_DTYPES or (accumulate and self.dtype is torch.bool):
        raise Decline(f"dtype {str(self.dtype).replace('torch.', '')}")
    if not isinstance(values, torch.Tensor) or values.is_cpu:
        raise Decline("CPU values")
    if values.dtype != self.dtype:
        raise Decline("values dtype differs from the destination's")  # torch raises its own error
    if not self.is_contiguous():
        raise Decline("non-contiguous destination")
    dim, index = _index_dim(self, indices)
    size = self.shape[dim]
    count = index.numel()
    indexed_shape = [*self.shape[:dim], *index.shape, *self.shape[dim + 1:]]
    try:
        values = values.expand(indexed_shape)
    except RuntimeError as error:
        raise Decline("values do not broadcast to the indexed shape") from error  # torch's error on CPU
    if count == 0 or self.numel() == 0:
        return self
    index = contiguous(index)
    if not _k("embedding").indices_in_range(index, size):
        raise Decline("negative or out-of-range index")  # torch wraps negatives / raises on the CPU
    if values.untyped_storage().data_ptr() == self.untyped_storage().data_ptr() or \
            not values.is_contiguous():
        values = values.clone(memory_format=torch.contiguous_format)  # read every value before any is written
    outer = math.prod(self.shape[:dim])
    inner = math.prod(self.shape[dim + 1:])
    block = row_block(inner)
    key = (self.dtype, index.dtype, bool(accumulate), block, self.numel() < I32, count < I32)
    _launch.launch(_k("embedding").index_put_kernel, count, key,
                   (self, index, values, size, count, inner),
                   {"ACCUMULATE": bool(accumulate), "BLOCK": block}, rows=outer)
    return self


def _scatter(self: torch.Tensor, src: torch.Tensor, view) -> torch.Tensor:
    """A contiguous copy of `self` with `view(copy)` overwritten by `src` (which must match its shape)."""
    if self.dtype != src.dtype or src.is_cpu:
        raise Decline("src dtype or device")  # torch raises its own error on the CPU
    out = self.clone(memory_format=torch.contiguous_format)
    target = view(out)
    if tuple(target.shape) != tuple(src.shape):
        raise Decline("src shape differs from the slice's")
    _copy.copy_into(src, target)
    return out


def slice_scatter(self: torch.Tensor, src: torch.Tensor, dim: int = 0, start: int | None = None,
                  end: int | None = None, step: int = 1) -> torch.Tensor:
    """`aten::slice_scatter`: `self` with `self[..., start:end:step, ...]` (on `dim`) replaced by `src`."""
    if step <= 0 or self.dim() == 0:
        raise Decline("non-positive step or zero-dim tensor")  # torch's error from the CPU fallback
    dim %= self.dim()
    return _scatter(self, src, lambda t: t[(slice(None),) * dim + (slice(start, end, step),)])


def select_scatter(self: torch.Tensor, src: torch.Tensor, dim: int, index: int) -> torch.Tensor:
    """`aten::select_scatter`: `self` with `self.select(dim, index)` replaced by `src`."""
    if self.dim() == 0 or not -self.shape[dim] <= index < self.shape[dim]:
        raise Decline("index out of range")  # torch's error from the CPU fallback
    return _scatter(self, src, lambda t: t.select(dim, index))


def flip(x: torch.Tensor, dims) -> torch.Tensor:
    """`torch.flip(x, dims)`: a contiguous copy of `x` with the order along `dims` reversed, on the
    copy kernel (any dtype it copies). Duplicate or out-of-range dims decline, so the CPU raises
    torch's error."""
    ndim = max(x.dim(), 1)
    wrapped = [d + ndim if d < 0 else d for d in dims]
    if any(not 0 <= d < ndim for d in wrapped) or len(set(wrapped)) != len(wrapped):
        raise Decline("dims out of range or repeated")  # torch's error, from the CPU
    out = empty(x.shape, x.dtype, x.get_device())
    _copy.reversed_copy(x, out, [d for d in wrapped if d < x.dim() and x.shape[d] > 1])
    return out


def roll(x: torch.Tensor, shifts, dims=()) -> torch.Tensor:
    """`torch.roll(x, shifts, dims)`: per rolled dim, the last `shift` elements are copied to the front
    of a fresh tensor and the rest after them (two copy launches into the result's slices); without
    dims, the flattened tensor rolls (one shift). Mismatched shifts and dims decline, so the CPU
    raises torch's error."""
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not dims:
        if len(shifts) != 1:
            raise Decline("several shifts without dims")  # torch's error, from the CPU
        return roll(contiguous(x).view(-1), shifts, [0]).view(x.shape)
    ndim = max(x.dim(), 1)
    if len(shifts) != len(dims) or any(not -ndim <= d < ndim for d in dims):
        raise Decline("shifts and dims differ in length, or a dim is out of range")
    current = x
    for shift, dim in zip(shifts, dims, strict=True):
        rolled = empty(current.shape, x.dtype, x.get_device())
        size = current.shape[dim] if current.dim() else 1
        step = shift % size if size else 0
        if step == 0 or current.dim() == 0:
            _copy.copy_into(current, rolled)
        else:
            _copy.copy_into(current.narrow(dim, 0, size - step), rolled.narrow(dim, step, size - step))
            _copy.copy_into(current.narrow(dim, size - step, step), rolled.narrow(dim, 0, step))
        current = rolled
    return current
