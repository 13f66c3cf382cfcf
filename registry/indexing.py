"""Indexing by an integer tensor: `index` (`x[idx]`, `x[:, idx]`) and the scatters `index_put_`
(`x[idx] = v`, `x[idx] += v`, and the embedding gradient that compiled graphs build from
`index_put(..., accumulate=True)`), `slice_scatter` and `select_scatter` (slicing's backward in compiled
graphs).

`index` gathers with `index_select`'s kernel; `index_put` runs `kernels/embedding.index_put_kernel`, the
scatter that undoes `index_select`. Both take one integer index tensor on one dim (every dim before it
a full slice, `None` in aten's index list); index_put a contiguous destination and values that
broadcast to the indexed shape. `index` also takes one boolean mask over consecutive dims (`x[mask]`,
`x[:, mask]`): the mask's `nonzero` positions, flattened, gather those dims viewed as one. `nonzero` and
`masked_select` are stream compactions (`kernels/compaction.py`). Everything else (several index
tensors, negative indices, bool accumulation) is declined, so the CPU fallback runs it with torch's
own semantics and errors.
The scatters copy through the copy kernels, and so do `flip` (a copy whose destination strides are
negated on the flipped dims), `roll` (two copies per rolled dim, into the result's two slices),
`pixel_shuffle` / `pixel_unshuffle` (r^2 copies of strided views) and `diagonal_copy` (`torch.diag`).
"""

from __future__ import annotations

import math

import torch

from torch_rbln import _dlpack

from . import _copy, _launch
from ._base import Decline
from ._launch import kernel_module as _k
from ._launch import launch_grid
from ._memo import BoundedMemo
from ._ops import contiguous, empty, fill_floats
from .elementwise import binary
from .gather import GATHERED, index_select
from .geometry import I32, cdiv, row_block
from .integer import device_scalar, integer_fill
from .reduce import reduce
from .sorting import cumsum, sort

# index_put's kernel moves values of any dtype a gather moves (integers exactly: `inv_perm[perm] =
# arange(n)` in MoE routing); accumulating adds in the tensor's own dtype, as torch's CPU kernel does
_PUT_DTYPES = GATHERED


def _present(indices: list) -> list[tuple[int, object]]:
    """(dim, index) of each index an aten index list gives (None: a full slice)."""
    return [(d, t) for d, t in enumerate(indices) if t is not None]


def _index_dim(self: torch.Tensor, present: list) -> tuple[int, torch.Tensor]:
    """(dim, index tensor) of an aten index list's `_present` indices that index one dim with one
    integer tensor."""
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
    rows it names, gathered by `index_select` and viewed in the indexed shape; or with one boolean mask
    (`_index_by_mask`)."""
    present = _present(indices)
    if len(present) == 1 and isinstance(present[0][1], torch.Tensor) and present[0][1].dtype is torch.bool:
        return _index_by_mask(self, *present[0])
    dim, index_tensor = _index_dim(self, present)
    flat = index_tensor.reshape(-1)
    if flat.numel() == 0:
        raise Decline("empty index")
    gathered = index_select(self, dim, flat)
    return gathered.view([*self.shape[:dim], *index_tensor.shape, *self.shape[dim + 1:]])


def _index_by_mask(self: torch.Tensor, dim: int, mask: torch.Tensor) -> torch.Tensor:
    """`x[..., mask]` for a bool mask over dims [dim, dim + mask.dim()) of x, of exactly their sizes: those
    dims viewed as one (of a contiguous x) and gathered at the mask's flat nonzero positions, as torch's
    `x[mask.nonzero(as_tuple=True)]` orders them. Another shape (torch's IndexError), a 0-dim mask (which
    adds a dim) or a CPU mask is declined."""
    span = mask.dim()
    if mask.is_cpu or span == 0 or tuple(self.shape[dim:dim + span]) != tuple(mask.shape):
        raise Decline("boolean mask of another shape than the dims it indexes, 0-dim, or on the CPU")
    positions = nonzero(contiguous(mask).view(-1)).view(-1)
    merged = contiguous(self).view(*self.shape[:dim], -1, *self.shape[dim + span:])
    if positions.numel() == 0:
        return empty([*self.shape[:dim], 0, *self.shape[dim + span:]], self.dtype, self.get_device())
    return index_select(merged, dim, positions)


_geometries: dict[tuple, torch.Tensor] = BoundedMemo(256)


def _selected_slots(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(counts, ends, total) of a contiguous rbln `x`'s nonzero elements per block of
    `compaction.BLOCK`: `count_kernel`'s counts, their cumsum on the device (each block's end slot), and
    the total read from the last end (the size of the result)."""
    kernels = _k("compaction")
    n = x.numel()
    blocks = cdiv(n, kernels.BLOCK)
    counts = empty((blocks,), torch.int64, x.get_device())
    launch_grid(kernels.count_kernel, (blocks, 1), (x, counts, n), BLOCK=kernels.BLOCK)
    ends = cumsum(counts, 0)
    return counts, ends, int(_dlpack.to_host_view(ends)[-1])


def _compactable(x: torch.Tensor) -> None:
    if x.is_complex() or x.numel() >= I32:
        raise Decline("complex, or 2**31 elements or more")


def nonzero(x: torch.Tensor) -> torch.Tensor:
    """`aten::nonzero`: the (count, x.dim()) int64 coordinates of x's nonzero elements in row-major
    order (NaN counts, -0.0 does not), from a stream compaction (`kernels/compaction.py`)."""
    _compactable(x)
    x = contiguous(x)
    ndim, index = x.dim(), x.get_device()
    if x.numel() == 0:
        return empty((0, ndim), torch.int64, index)
    counts, ends, total = _selected_slots(x)
    out = empty((total, ndim), torch.int64, index)
    if total and ndim:
        shape = tuple(x.shape)
        geometry = _geometries.get((shape, index))
        if geometry is None:
            strides = [math.prod(shape[d + 1:]) for d in range(ndim)]
            geometry = _geometries[(shape, index)] = empty((2 * ndim,), torch.int32, index)
            pairs = [value for pair in zip(strides, shape, strict=True) for value in pair]
            _dlpack.to_host_view(geometry).copy_(torch.tensor(pairs))
        kernels = _k("compaction")
        launch_grid(kernels.nonzero_kernel, (counts.numel(), ndim),
                    (x, ends, counts, geometry, out, x.numel(), ndim), BLOCK=kernels.BLOCK)
    return out


def masked_select(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`aten::masked_select`: the elements of x where the bool mask is true, both broadcast to one shape,
    as a 1-d tensor in row-major order (moved, exact). A mask of another dtype is declined (torch's
    error)."""
    if not isinstance(mask, torch.Tensor) or mask.dtype is not torch.bool or mask.is_cpu or x.is_cpu:
        raise Decline("mask not a bool rbln tensor")
    _compactable(x)
    try:
        shape = torch.broadcast_shapes(x.shape, mask.shape)
    except RuntimeError as error:
        raise Decline("x and mask do not broadcast") from error  # torch's error, from the CPU
    x, mask = contiguous(x.expand(shape)), contiguous(mask.expand(shape))
    if x.numel() == 0:
        return empty((0,), x.dtype, x.get_device())
    counts, ends, total = _selected_slots(mask)
    out = empty((total,), x.dtype, x.get_device())
    if total:
        kernels = _k("compaction")
        launch_grid(kernels.masked_select_kernel, (counts.numel(), 1),
                    (x, mask, ends, counts, out, x.numel()), BLOCK=kernels.BLOCK)
    return out


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
    dim, index = _index_dim(self, _present(indices))
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


def bincount(x: torch.Tensor, weights: torch.Tensor | None = None, minlength: int = 0) -> torch.Tensor:
    """`torch.bincount` of a 1-d int32/int64 tensor (MoE routing's tokens per expert): a zero tensor of
    max(max(x) + 1, minlength) bins (the extremes from two device reductions, read back) that
    `index_put_` accumulates ones (int64 counts) or the float32 weights into, in index order as torch's
    CPU loop adds them (the same bits). A negative value (torch's error), other dtypes and other
    weights go to the CPU."""
    if x.dim() != 1 or x.dtype not in (torch.int32, torch.int64) or type(minlength) is not int or \
            minlength < 0:
        raise Decline("input other than a 1-d int32/int64 tensor, or a negative minlength")
    if weights is not None and (weights.dtype is not torch.float32 or weights.is_cpu or
                                tuple(weights.shape) != tuple(x.shape)):
        raise Decline("weights other than float32 rbln values, one per input")
    index = x.get_device()
    bins = minlength
    if x.numel():
        if reduce("amin", x).item() < 0:
            raise Decline("a negative value")  # torch's error, from the CPU
        bins = max(bins, int(reduce("amax", x).item()) + 1)
    dtype = torch.int64 if weights is None else torch.float32
    out = empty((bins,), dtype, index)
    if weights is None:
        integer_fill(out, 0)
    else:
        fill_floats(out, 0.0)
    if x.numel():
        values = device_scalar(1, torch.int64, index) if weights is None else weights
        index_put_(out, [x], values, accumulate=True)
    return out


def unique(x: torch.Tensor, sorted: bool = True, return_inverse: bool = False,  # noqa: A002 (aten's name)
           return_counts: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`torch.unique` without `dim` (`aten::_unique2`): the distinct values in ascending order, each
    element's position among them, and each value's count, composed of device ops: a stable sort, the
    flags of sorted elements that differ from their predecessor (NaN differs from everything, as torch's;
    -0.0 and 0.0 are one value, the first in index order), the flagged values (`masked_select`), their
    ranks (a cumsum) written back through the sort's permutation, and the gaps between their positions.
    Inverse and counts not asked for are empty, as torch's. Unsorted output is sorted too (torch allows
    any order). Lines the sort kernel does not take (more than its rank limit) go to the CPU."""
    del sorted
    flat = contiguous(x).view(-1)
    n, index = flat.numel(), x.get_device()
    if n == 0:
        raise Decline("empty input")  # torch's empty results, from the CPU
    ordered, order = sort(flat)
    first = empty((n,), torch.bool, index)
    integer_fill(first[:1], 1)
    if n > 1:
        binary("ne", ordered[1:], ordered[:-1], out=first[1:], comparison=True)
    values = masked_select(ordered, first)
    nothing = empty((0,), torch.int64, index)
    inverse, counts = nothing, nothing
    if return_inverse:
        ranks = binary("sub", cumsum(first, 0), 1)
        inverse = empty((n,), torch.int64, index)
        index_put_(inverse, [order], ranks)
        inverse = inverse.view(x.shape)
    if return_counts:
        starts = nonzero(first).view(-1)
        ends = empty(starts.shape, torch.int64, index)
        _copy.copy_into(starts[1:], ends[:-1])
        integer_fill(ends[-1:], n)
        counts = binary("sub", ends, starts)
    return values, inverse, counts


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


def _shuffled(x: torch.Tensor, factor: int, up: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(source, result) of a pixel shuffle (`up`) or unshuffle: the result allocated, both viewed with
    the factor's two dims split out, shuffled side (..., C, r, r, H, W), spatial side (..., C, H, r, W, r),
    batch dims merged into one."""
    if x.dim() < 3 or type(factor) is not int or factor <= 0:
        raise Decline("fewer than 3 dims or a factor other than a positive int")  # torch's error, CPU
    *lead, channels, height, width = x.shape
    if up and channels % (factor * factor) or not up and (height % factor or width % factor):
        raise Decline("channels (or sizes) not divisible by the factor")
    c = channels // (factor * factor) if up else channels
    h, w = (height, width) if up else (height // factor, width // factor)
    shape = [*lead, c, h * factor, w * factor] if up else [*lead, c * factor * factor, h, w]
    out = empty(shape, x.dtype, x.get_device())
    shuffled, spatial = (contiguous(x), out) if up else (out, contiguous(x))
    return (shuffled.view(-1, c, factor, factor, h, w), spatial.view(-1, c, h, factor, w, factor))


def pixel_shuffle(x: torch.Tensor, upscale_factor: int) -> torch.Tensor:
    """`F.pixel_shuffle`: out[..., c, h r + i, w r + j] = x[..., c r^2 + i r + j, h, w], as r^2 copies of
    four-dim strided views (one per (i, j)), each within what the copy kernel addresses (the six-dim
    permutation is not)."""
    shuffled, spatial = _shuffled(x, upscale_factor, up=True)
    for i in range(upscale_factor):
        for j in range(upscale_factor):
            _copy.copy_into(shuffled[:, :, i, j], spatial[:, :, :, i, :, j])
    return spatial.view(*x.shape[:-3], -1, x.shape[-2] * upscale_factor, x.shape[-1] * upscale_factor)


def pixel_unshuffle(x: torch.Tensor, downscale_factor: int) -> torch.Tensor:
    """`F.pixel_unshuffle`, `pixel_shuffle`'s inverse: r^2 copies the other way."""
    shuffled, spatial = _shuffled(x, downscale_factor, up=False)
    for i in range(downscale_factor):
        for j in range(downscale_factor):
            _copy.copy_into(spatial[:, :, :, i, :, j], shuffled[:, :, i, j])
    return shuffled.view(*x.shape[:-3], -1, x.shape[-2] // downscale_factor, x.shape[-1] // downscale_factor)


def diagonal_copy(x: torch.Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> torch.Tensor:
    """`torch.diag` of a matrix (`diagonal_copy`): the strided diagonal view copied by the copy kernel."""
    try:
        view = x.diagonal(offset, dim1, dim2)
    except (IndexError, RuntimeError) as error:
        raise Decline("dims out of range or equal") from error  # torch's error, from the CPU
    out = empty(view.shape, x.dtype, x.get_device())
    _copy.copy_into(view, out)
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
