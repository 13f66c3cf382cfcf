"""Memory of the simulated NPUs: host allocations re-tagged as rbln, with exact per-device accounting.

Every rbln storage is an ordinary CPU allocation handed to PyTorch as PrivateUse1 memory through
DLPack (zero-copy). The Python storage object of an rbln tensor is preserved by PyTorch for as long
as the storage lives, so a weak reference to it tells us, exactly, when the memory is released.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from . import _dlpack, _runtime, log, topology

_GiB = 1 << 30


@dataclass(slots=True)
class _DeviceCounters:
    """PyTorch-style allocator statistics of one logical device."""

    current: int = 0
    peak: int = 0
    allocated_total: int = 0
    freed_total: int = 0
    count_current: int = 0
    count_peak: int = 0
    count_allocated: int = 0
    count_freed: int = 0
    num_ooms: int = 0
    largest_request: int = 0
    capacity: int = 0
    topology: object = None  # the topology the capacity was derived from


_lock = threading.Lock()
_counters: dict[int, _DeviceCounters] = {}
# Frees are queued by weakref callbacks and applied under the lock by the next allocation or
# statistics read: a callback can fire anywhere (even inside our own locked section, when the
# garbage collector runs), so it must never take the lock or update counters itself.
_pending_frees: deque[int] = deque()
# Per watched object (an rbln storage, or the host tensor that lives exactly as long), keyed by the id
# of its weak reference (kept here, so the id stays unique): (the reference, device index, bytes, the
# host buffer to recycle when it dies, or None). Not keyed by the reference itself: its hash is the
# object's id, which a loop of allocate-and-drop reuses, so queued dead references would all collide.
# One shared callback instead of a closure per object keeps an allocation cheap.
_watched: dict[int, tuple[weakref.ref, int, int, torch.Tensor | None]] = {}


def _counters_for(index: int) -> _DeviceCounters:
    counters = _counters.get(index)
    if counters is not None and counters.topology is topology._topology:
        return counters  # the hot path of every allocation: no call to build or fetch the topology
    current = topology.get_topology()
    if counters is None or counters.topology is not current:
        # First use of this device (or a rebuilt topology, in tests): configure logging (which must
        # not happen at `import torch`), validate the index and derive the capacity of its group.
        log.configure()
        size = int(_runtime.memory_per_npu_gb() * _GiB) * len(_runtime.npus_of(index))
        if counters is None:
            counters = _counters.setdefault(index, _DeviceCounters())
        counters.capacity = size
        counters.topology = current
    return counters


def capacity(index: int) -> int:
    """Bytes of memory of logical device `index`: the sum over its physical NPUs."""
    return _counters_for(index).capacity


# Host buffers of large kernel outputs are recycled: a fresh multi-megabyte allocation is page-faulted
# in on first write, which cost a 2^24-element op as much as the op itself. A buffer whose rbln storage
# died goes to `_pool` (exact byte size; at most _POOL_CAP bytes kept) and backs the next output of that
# size. Accounting is unchanged: counters follow rbln storages, not host buffers.
_POOL_MIN = 1 << 20
_POOL_CAP = 512 << 20
_pool: dict[int, list[torch.Tensor]] = {}  # nbytes -> free uint8 host buffers
_pool_bytes = 0


def _take_buffer(nbytes: int) -> torch.Tensor:
    """A uint8 host buffer of `nbytes` bytes: a recycled one when available (caller holds no lock)."""
    global _pool_bytes
    with _lock:
        if _pending_frees:
            _apply_pending_frees()
        free = _pool.get(nbytes)
        if free:
            _pool_bytes -= nbytes
            return free.pop()
    return torch.empty(nbytes, dtype=torch.uint8)


def _apply_pending_frees() -> None:
    """Apply queued frees; the caller holds `_lock`."""
    global _pool_bytes
    while _pending_frees:
        _, index, nbytes, buffer = _watched.pop(_pending_frees.popleft())
        counters = _counters[index]
        if buffer is not None and _pool_bytes + nbytes <= _POOL_CAP:
            _pool.setdefault(nbytes, []).append(buffer)
            _pool_bytes += nbytes
        counters.current -= nbytes
        counters.freed_total += nbytes
        counters.count_current -= 1
        counters.count_freed += 1


def _out_of_memory(index: int, nbytes: int, counters: _DeviceCounters) -> torch.OutOfMemoryError:
    counters.num_ooms += 1
    total = counters.capacity
    free = max(total - counters.current, 0)
    return torch.OutOfMemoryError(
        f"RBLN out of memory on rbln:{index}: tried to allocate {_fmt(nbytes)} ({nbytes} bytes); "
        f"{_fmt(free)} free of {_fmt(total)} total, {_fmt(counters.current)} allocated. "
        "Free tensors you no longer need, or raise TORCH_RBLN_SIM_MEMORY_GB."
    )


def _fmt(nbytes: int) -> str:
    for unit, size in (("GiB", _GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} bytes"


_PENDING_LIMIT = 1024  # queued frees applied at the latest after this many


def _reserve(index: int, nbytes: int) -> None:
    """Check capacity and count `nbytes` as allocated on `index` (raises OutOfMemoryError).

    Queued frees are applied lazily: while the counters, frees not yet applied, stay below the peak,
    applying them could change neither the capacity check nor a peak (the peak is at most the capacity),
    so a loop of allocate-and-drop settles its frees in batches instead of one by one. Statistics
    readers settle first (`_settled`), so every reported figure is exact."""
    counters = _counters_for(index)
    with _lock:
        current = counters.current + nbytes
        count = counters.count_current + 1
        if current > counters.peak or count > counters.count_peak or len(_pending_frees) > _PENDING_LIMIT:
            if _pending_frees:
                _apply_pending_frees()
                current = counters.current + nbytes
                count = counters.count_current + 1
            if current > counters.capacity:
                raise _out_of_memory(index, nbytes, counters)
            if current > counters.peak:
                counters.peak = current
            if count > counters.count_peak:
                counters.count_peak = count
        counters.current = current
        counters.count_current = count
        counters.allocated_total += nbytes
        counters.count_allocated += 1
        if nbytes > counters.largest_request:
            counters.largest_request = nbytes


def _unreserve(index: int, nbytes: int) -> None:
    """Undo `_reserve` for an allocation that failed after it."""
    counters = _counters[index]
    with _lock:
        counters.current -= nbytes
        counters.allocated_total -= nbytes
        counters.count_current -= 1
        counters.count_allocated -= 1


def _storage_died(ref: weakref.ref) -> None:
    _pending_frees.append(id(ref))


def _watch(owner: torch.UntypedStorage | torch.Tensor, index: int, nbytes: int,
           buffer: torch.Tensor | None = None) -> None:
    """Queue a free of `nbytes` when `owner` dies: an rbln storage, or the host tensor behind one (each
    has a Python object that lives exactly as long as the memory); `buffer`, the host memory behind
    it, is then recycled."""
    ref = weakref.ref(owner, _storage_died)
    _watched[id(ref)] = (ref, index, nbytes, buffer)


def contiguous_strides(size: Sequence[int]) -> list[int]:
    """Row-major strides of `size` (size-0 dims count as 1, as PyTorch does)."""
    strides = [1] * len(size)
    running = 1
    for dim in range(len(size) - 1, -1, -1):
        strides[dim] = running
        running *= max(size[dim], 1)
    return strides


def storage_nbytes(size: Sequence[int], stride: Sequence[int], dtype: torch.dtype) -> int:
    if any(s == 0 for s in size):
        return 0
    span = 1 + sum((s - 1) * st for s, st in zip(size, stride, strict=True))
    return span * dtype.itemsize


def empty_strided(size: Sequence[int], stride: Sequence[int], dtype: torch.dtype, index: int) -> torch.Tensor:
    """Allocate an uninitialised rbln:index tensor, accounted, raising OutOfMemoryError when full."""
    nbytes = storage_nbytes(size, stride, dtype)
    _reserve(index, nbytes)
    try:
        device_tensor = _dlpack.to_device_view(torch.empty_strided(size, stride, dtype=dtype), index)
    except BaseException:
        _unreserve(index, nbytes)
        raise
    _watch(device_tensor.untyped_storage(), index, nbytes)
    return device_tensor


def empty(size: Sequence[int], dtype: torch.dtype, index: int) -> torch.Tensor:
    """`empty_strided` with row-major strides: what every kernel output is, so the hot path of an op
    skips computing strides and the storage span."""
    nbytes = math.prod(size) * dtype.itemsize
    _reserve(index, nbytes)
    buffer = None
    try:
        if nbytes >= _POOL_MIN:
            buffer = _take_buffer(nbytes)
            host = buffer.view(dtype).view(size)
        else:
            # Sizes unpacked: parsing a torch.Size argument costs more than the allocation.
            host = torch.empty(*size, dtype=dtype) if size else torch.empty((), dtype=dtype)
        # a fresh tensor has no conj/neg bits: re-tag it directly (what to_device_view does for it)
        device_tensor = _dlpack._retag(host, _dlpack.DL_EXT_DEV, index)
    except BaseException:
        _unreserve(index, nbytes)
        raise
    # The fresh host tensor lives exactly as long as the rbln storage: the DLPack context that the
    # storage's deleter frees holds it, and PyTorch keeps its Python object while it lives. Watching
    # it saves building the storage's Python object on this hot path.
    _watch(host, index, nbytes, buffer)
    return device_tensor


def adopt(host: torch.Tensor, index: int) -> torch.Tensor:
    """Turn a freshly computed CPU tensor into an rbln:index tensor that owns (and accounts) its memory.

    The rbln storage covers the whole CPU storage, so several results sharing one CPU buffer can be
    expressed as views of the first one adopted.
    """
    cpu_storage = host.untyped_storage()
    nbytes = cpu_storage.nbytes()
    _reserve(index, nbytes)
    if host.storage_offset() == 0:
        device_tensor = _dlpack.to_device_view(host, index)
    else:
        flat = torch.empty(0, dtype=torch.uint8).set_(cpu_storage)
        base = _dlpack.to_device_view(flat, index)
        device_tensor = torch.empty(0, dtype=host.dtype, device=base.device)
        with torch.no_grad():
            device_tensor.set_(base.untyped_storage(), host.storage_offset(), host.shape, host.stride())
    _watch(device_tensor.untyped_storage(), index, nbytes)
    return device_tensor


# -- statistics ---------------------------------------------------------------------------------


def _settled(index: int) -> _DeviceCounters:
    counters = _counters_for(index)
    with _lock:
        _apply_pending_frees()
    return counters


def memory_allocated(index: int) -> int:
    return _settled(index).current


def max_memory_allocated(index: int) -> int:
    return _settled(index).peak


def reset_peak(index: int) -> None:
    counters = _settled(index)
    with _lock:
        counters.peak = counters.current
        counters.count_peak = counters.count_current


def memory_stats(index: int) -> dict[str, int]:
    """The `torch.cuda.memory_stats` key family; reserved equals allocated (recycled host buffers of
    freed outputs are host memory waiting for reuse, not device memory: they are not counted)."""
    c = _settled(index)
    stats: dict[str, int] = {}
    for prefix in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
        for pool in ("all", "large_pool", "small_pool"):
            full = pool == "all"
            stats[f"{prefix}.{pool}.current"] = c.current if full else 0
            stats[f"{prefix}.{pool}.peak"] = c.peak if full else 0
            stats[f"{prefix}.{pool}.allocated"] = c.allocated_total if full else 0
            stats[f"{prefix}.{pool}.freed"] = c.freed_total if full else 0
    for prefix in ("allocation", "segment", "active"):
        for pool in ("all", "large_pool", "small_pool"):
            full = pool == "all"
            stats[f"{prefix}.{pool}.current"] = c.count_current if full else 0
            stats[f"{prefix}.{pool}.peak"] = c.count_peak if full else 0
            stats[f"{prefix}.{pool}.allocated"] = c.count_allocated if full else 0
            stats[f"{prefix}.{pool}.freed"] = c.count_freed if full else 0
    stats["num_ooms"] = c.num_ooms
    stats["num_alloc_retries"] = 0
    stats["max_split_size"] = -1
    stats["oversize_allocations.current"] = 0
    stats["requested_bytes.all.largest"] = c.largest_request
    return stats


def mem_get_info(index: int) -> tuple[int, int]:
    counters = _settled(index)
    return counters.capacity - counters.current, counters.capacity
