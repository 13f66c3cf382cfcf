"""Device-to-device copies (`clone`, `.contiguous()`, `.to(dtype)`, `copy_` into views) on the copy
kernels, counted as `aten::_copy_from` in the fallback report.

Host<->rbln transfers stay host memcpy (that is the DMA of a simulated NPU). A copy between two rbln
tensors is device work: it reads the source and writes the destination through their own strides (up
to four collapsed dims) and converts the dtype on the way. `tiled_copy_kernel` copies tiles of two dims,
so a transpose reads and writes each tile within the cache and a row copy moves contiguous runs. Every
copy takes it, one collapsed dim included (a `clone` of a contiguous tensor is a tiled copy of one row).
Why not a flat kernel (one element per lane) for any of them: it splits each lane's index over four dims,
six integer divisions per operand, ~36-80 ns per lane over its whole block of 1,024 lanes whatever the
copy's size: the `.contiguous()` of a transposed (2, 4, 16, 16) attention tensor took 112 us there, 10 us
tiled, and the clone of a 1,000-element (4,000-element) tensor 83 (315) us. Copies they cannot express take
the host path, recorded with the reason.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch_rbln.dsl.jit import peer_access

from torch_rbln import fallback
from torch_rbln._memory import contiguous_strides
from torch_rbln.tp import device_tp as _device_tp

from . import _launch
from ._base import Decline, InvalidCall
from ._checks import _device_counts
from ._finite_scan import is_dense_permutation
from ._launch import kernel_module as _k
from ._memo import PlanMemo
from .geometry import I32 as _I32
from .geometry import broadcast_strides, small_tile_shape
from .geometry import cdiv as _cdiv
from .geometry import collapse as _collapse

NAME = "aten::_copy_from"
_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool})


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    """[first byte, last byte + 1) that `tensor`'s elements can touch."""
    extent = sum((size - 1) * abs(stride) for size, stride in zip(tensor.shape, tensor.stride(), strict=True))
    start = tensor.data_ptr()
    return start, start + (extent + 1) * tensor.element_size()


def _overlap(src: torch.Tensor, dst: torch.Tensor) -> str | None:
    """None when the copy may run as is; "same" for a copy onto itself; else why the host must do it.

    Mirrors torch's `assert_no_overlap` for copy_: two dense tensors whose memory intersects are an
    error (raised here with torch's message, since our host views hide the aliasing from torch); for
    strided views that merely span each other (x[::2] vs x[1::2]) torch cannot tell either, and the
    host copy keeps its element order."""
    if src.untyped_storage().data_ptr() != dst.untyped_storage().data_ptr():
        return None
    (s0, s1), (d0, d1) = _span(src), _span(dst)
    if s1 <= d0 or d1 <= s0:
        return None
    if (s0, s1) == (d0, d1) and src.dtype == dst.dtype and src.stride() == dst.stride() \
            and src.shape == dst.shape:
        return "same"
    if is_non_overlapping_and_dense_or_false(src) and is_non_overlapping_and_dense_or_false(dst):
        raise InvalidCall(
            "unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
            "single memory location. Please clone() the tensor before performing the operation."
        )
    return "source and destination overlap"


def _dtype_unsupported(src: torch.Tensor, dst: torch.Tensor) -> str | None:
    for tensor in (src, dst):
        if tensor.dtype not in _DTYPES:
            return f"dtype {str(tensor.dtype).replace('torch.', '')}"
    if src.dtype.is_floating_point and not dst.dtype.is_floating_point and dst.dtype is not torch.bool:
        return _float_to_int_outside_range(src, dst.dtype)
    return None


# Float values a cast to each integer dtype takes exactly (truncation toward zero) on every backend.
_INT_RANGES = {torch.int64: (-2.0**63, 2.0**63), torch.int32: (-2.0**31, 2.0**31),
               torch.int16: (-2.0**15, 2.0**15), torch.int8: (-128.0, 128.0), torch.uint8: (0.0, 256.0)}


def _float_to_int_outside_range(src: torch.Tensor, dtype: torch.dtype) -> str | None:
    """Why a float -> `dtype` cast must run on the CPU, or None. NaN, Inf and values the integer type
    cannot hold convert by the CPU's instruction set on the CPU (x86 gives INT64_MIN / INT32_MIN for all
    of them) but saturate or give 0 in a kernel, so such inputs take the CPU path to match PyTorch."""
    if src.numel() == 0:
        return None
    low, high = _INT_RANGES.get(dtype, (0.0, 0.0))
    from torch_rbln._dlpack import to_host_view

    smallest, largest = torch.aminmax(to_host_view(src).detach())
    if bool(smallest >= low) and bool(largest < high):  # both False for NaN
        return None
    return f"float -> {str(dtype).replace('torch.', '')} cast of NaN, Inf or out-of-range values"


def _unsupported(src: torch.Tensor, dst: torch.Tensor) -> str | None:
    return _dtype_unsupported(src, dst) or _overlap(src, dst)


def dense_copy(src: torch.Tensor, dst: torch.Tensor) -> bool:
    """The commonest copy (`clone`, `copy_` or `.to(dtype)` between same-shape contiguous tensors in
    separate storages), without the general path's overlap and dtype checks (separate storages cannot
    overlap; a float -> int cast is left to the general path, which checks the values' range first);
    False when this is not that copy."""
    if not (src.is_contiguous() and dst.is_contiguous() and src.shape == dst.shape and dst.numel()
            and src.untyped_storage().data_ptr() != dst.untyped_storage().data_ptr()):
        return False
    src_dtype, dst_dtype = src.dtype, dst.dtype
    if src_dtype not in _DTYPES or dst_dtype not in _DTYPES:
        return False
    if src_dtype.is_floating_point and not dst_dtype.is_floating_point:
        return False
    _run(_dense_geometries[dst.numel()], src, dst)
    _device_counts[NAME] += 1
    return True


class _CopyLaunch(NamedTuple):
    """How one copy geometry runs: `tiled_copy_kernel` (every copy's kernel: `kernel`, its name, is a
    class constant, not per-launch state) on a grid of (programs, rows) with `ints` after the two
    pointers; `constexprs` also complete its launch key; `fits`: every int fits in 32 bits; `dense`:
    both operands cover exactly their numel elements (contiguous, or a permutation of a contiguous
    block such as a transpose), so the kept launch may take them unchecked."""

    kernel = "tiled_copy_kernel"
    ints: tuple
    programs: int
    rows: int
    constexprs: dict
    fits: bool
    dense: bool


_TRANSPOSE_TILE = 128  # measured on a 4096x4096 transpose: 16: 37 ms, 64: 41, 128: 29, 256: 32


def _innermost(sizes: list[int], strides: list[int]) -> int | None:
    """The dim (of size > 1) with the smallest nonzero stride: what a read or write moves along."""
    moving = [d for d in range(len(sizes)) if sizes[d] > 1 and strides[d] != 0]
    return min(moving, key=lambda d: abs(strides[d]), default=None)


def _tiled(n: int, sizes: list[int], src_strides: list[int], dst_strides: list[int], dense: bool
           ) -> _CopyLaunch:
    """`tiled_copy_kernel`'s launch for `n` elements: the destination's innermost dim goes last and,
    when the source moves along another one (a transpose), that one next to it, in square tiles;
    otherwise the tiles are rows of up to 1024 elements of the last dim, several rows of the one before
    when they are short, and a copy of fewer than TILED_MIN elements takes one of `small_tile_shape`'s
    four tiles (a tile per power of two of the sizes made the test suite's copies 58 specialisations,
    ~0.8 s of numba each, and the README demo's five)."""
    write = _innermost(sizes, dst_strides)
    read = _innermost(sizes, src_strides)
    if write is None:
        write = 3
    transpose = read is not None and read != write
    last = [read, write] if transpose else [write]
    order = [d for d in range(4) if d not in last] + last
    sizes, src_strides, dst_strides = ([values[d] for d in order]
                                       for values in (sizes, src_strides, dst_strides))
    if transpose:
        unit, block_m, block_n = False, _TRANSPOSE_TILE, _TRANSPOSE_TILE
    else:
        unit = src_strides[3] == 1 and dst_strides[3] == 1
        block_m, block_n = small_tile_shape(n, sizes[2], sizes[3])
    ints = (0, *sizes[1:], *src_strides, *dst_strides)
    tiles = _cdiv(sizes[2], block_m) * _cdiv(sizes[3], block_n)
    return _CopyLaunch(ints, tiles, sizes[0] * sizes[1],
                       {"UNIT_INNER": unit, "BLOCK_M": block_m, "BLOCK_N": block_n},
                       max(map(abs, ints)) < _I32, dense)


def _copy_geometry(geometry_key: tuple) -> _CopyLaunch | str:
    """The launch of a copy between tensors of these shapes and strides, or why no kernel can express
    it. Dims that are contiguous in both operands merge first (`_collapse`), so a copy reaches the
    kernels as at most four dims of sizes and strides."""
    dst_shape, src_shape, src_strides, dst_strides = geometry_key
    shape = list(dst_shape)
    expanded = broadcast_strides(src_shape, src_strides, shape)
    sizes, (src_strides, dst_strides) = _collapse(shape, [expanded, list(dst_strides)])
    if len(sizes) > 4:
        return f"more than 4 non-mergeable dims ({len(sizes)})"
    if not sizes:  # a single element
        sizes, src_strides, dst_strides = [1], [0], [0]
    pad = 4 - len(sizes)
    sizes = [1] * pad + sizes
    src_strides, dst_strides = [0] * pad + src_strides, [0] * pad + dst_strides
    n = math.prod(dst_shape)
    dense = all(math.prod(shape) == math.prod(size) and is_dense_permutation(size, strides)
                for size, strides in ((src_shape, geometry_key[2]), (dst_shape, geometry_key[3])))
    return _tiled(n, sizes, src_strides, dst_strides, dense)


# (dst shape, src shape, src strides, dst strides) -> `_copy_geometry`'s launch or reason
_geometries: dict[tuple, _CopyLaunch | str] = PlanMemo(4096, _copy_geometry)
# numel -> the launch of a copy between two contiguous tensors of that many elements (`dense_copy`): the
# same `_copy_geometry` decision (one collapsed dim), keyed by one int instead of four size tuples
_dense_geometries: dict[int, _CopyLaunch] = PlanMemo(4096, lambda n: _copy_geometry(((n,), (n,), (1,), (1,))))


def _run(geometry: _CopyLaunch, src: torch.Tensor, dst: torch.Tensor) -> None:
    """Launch `geometry`'s kernel copying `src` into `dst` (across devices: a peer copy)."""
    if src.get_device() != dst.get_device():
        with peer_access():
            _run_on_one_device(geometry, src, dst)
        return
    _run_on_one_device(geometry, src, dst)


def _extent(tensor: torch.Tensor) -> int:
    """Elements from `tensor`'s data pointer to the end of its storage: what a kernel may address
    through it."""
    return tensor.untyped_storage().nbytes() // tensor.element_size() - tensor.storage_offset()


def _run_on_one_device(geometry: _CopyLaunch, src: torch.Tensor, dst: torch.Tensor) -> None:
    kernel = _k("elementwise").tiled_copy_kernel
    ints, programs, rows = geometry.ints, geometry.programs, geometry.rows
    if geometry.fits:
        # every int argument fits in 32 bits, so dtypes and constexprs determine the specialisation:
        # the launch kept under that key skips the general launch's per-argument key (a clone's copy)
        key = (src.dtype, dst.dtype, *geometry.constexprs.values())
        run = _launch.unchecked(kernel, key)
        if run is not None and not src.is_cpu and (programs * rows == 1 or _device_tp(dst.get_device()) == 1):
            if geometry.dense:  # `.contiguous()` of a transpose: dense, not contiguous
                run(programs, rows, 1, src, dst, *ints)
                return
            # a strided view (a slice with a step, a narrowed dim) spans more than its numel elements:
            # each operand goes by address with its extent to the end of its storage, which bounds the
            # kernel's own access checks; a fault (or an aliasing refusal) reruns on the general launch,
            # which raises it
            if run.by_address(programs, rows, 1, src.data_ptr(), _extent(src), dst.data_ptr(), _extent(dst),
                              *ints):
                return
        _launch.launch(kernel, programs, key, (src, dst, *ints), geometry.constexprs, rows)
    else:
        kernel[(programs, rows)](src, dst, *ints, **geometry.constexprs)


def contiguous_copier(shape: tuple, strides: tuple) -> Callable[[torch.Tensor, torch.Tensor], None] | None:
    """`copy(src, dst)` for a source of `shape` and `strides` and a fresh contiguous `dst` of that shape on
    its device, with the geometry decided here once (a plan's copy of a strided operand); None where
    the kernels cannot express the copy."""
    return _copier(shape, tuple(strides), tuple(contiguous_strides(shape)))


def strided_writer(shape: tuple, strides: tuple, dtype: torch.dtype, *, broadcast: bool = False
                   ) -> Callable[[torch.Tensor, torch.Tensor], None] | None:
    """`copy(src, dst)` for a contiguous `src` of `shape` (`broadcast`: of one element, written to every
    element) written into a `dst` view of that shape with `strides` on its device, both of `dtype`
    (`staging.py`: a result written through a contiguous staging tensor; a fill of a view); None where
    the kernels cannot express the copy (its geometry or dtype)."""
    if dtype not in _DTYPES:
        return None
    if broadcast:
        return _copier(shape, (0,) * len(shape), tuple(strides), src_shape=(1,) * len(shape))
    return _copier(shape, tuple(contiguous_strides(shape)), tuple(strides))


def _copier(shape: tuple, src_strides: tuple, dst_strides: tuple, src_shape: tuple | None = None
            ) -> Callable | None:
    geometry = _geometries[(torch.Size(shape), torch.Size(src_shape or shape), src_strides, dst_strides)]
    if type(geometry) is str:
        return None
    return functools.partial(_run, geometry)


def copy_into(src: torch.Tensor, dst: torch.Tensor) -> None:
    """Copy `src` into the fresh rbln tensor `dst` (same shape; an op's own contiguous or dtype-cast
    copy of an operand, which the report counts under that op, not as a `_copy_from` call). Raises
    `Decline` where the kernels cannot express the copy."""
    if dst.numel() == 0:
        return
    geometry = _geometries[(dst.shape, src.shape, src.stride(), dst.stride())]
    if type(geometry) is str:
        raise Decline(geometry)
    _run(geometry, src, dst)


def reversed_copy(src: torch.Tensor, dst: torch.Tensor, dims: Sequence[int]) -> None:
    """Copy `src` into the fresh contiguous rbln tensor `dst` (same shape) with the order of `dims`
    reversed (`torch.flip`): the destination is written through negated strides on those dims,
    starting from its last element along each (the kernel's `dst_offset`), so every write stays
    inside `dst`. Raises `Decline` where the kernels cannot express the copy."""
    if dst.numel() == 0:
        return
    strides = list(dst.stride())
    offset = 0
    for dim in dims:
        offset += (dst.shape[dim] - 1) * strides[dim]
        strides[dim] = -strides[dim]
    geometry = _geometries[(dst.shape, src.shape, src.stride(), tuple(strides))]
    if type(geometry) is str:
        raise Decline(geometry)
    _run(geometry._replace(ints=(offset, *geometry.ints[1:]), dense=False), src, dst)


def copy_on_device(src: torch.Tensor, dst: torch.Tensor, *, fresh: bool = False) -> bool:
    """Copy `src` (broadcastable to `dst`) into `dst`, both rbln; False when the host must do it.
    `fresh`: `dst` was just allocated for this copy (clone), so it cannot overlap `src`."""
    if dense_copy(src, dst):
        return True
    if dst.numel() == 0:
        return False
    reason = _dtype_unsupported(src, dst) if fresh else _unsupported(src, dst)
    if reason == "same":
        return True  # copying a tensor onto itself changes nothing
    if reason is None:
        geometry = _geometries[(dst.shape, src.shape, src.stride(), dst.stride())]
        if type(geometry) is str:
            reason = geometry
    if reason is not None:
        fallback.record(NAME, reason)
        return False
    _run(geometry, src, dst)
    _device_counts[NAME] += 1
    return True
