"""Memory of the simulated NPUs: host allocations handed to PyTorch as rbln, with exact per-device accounting.

Every rbln storage is ordinary host memory that PyTorch holds as PrivateUse1 memory through DLPack
(zero-copy). Kernel outputs, the hot path, come from the compiled allocator (`_allocator_numba`, once
the op library has loaded numba): one call counts the bytes and builds the DLPack tensor, and its C
deleter un-counts them when PyTorch frees the storage, so no Python runs when a tensor dies. Every
other storage (copies, adopted CPU results, large recycled buffers, and everything before numba is
loaded) is a CPU tensor re-tagged through DLPack; the Python object of that CPU tensor, or of the rbln
storage, lives exactly as long as the memory, so a weak reference to it tells us when it is released.
"""

from __future__ import annotations

import ctypes
import functools
import math
import threading
import weakref
from collections import deque
from collections.abc import Callable, Sequence

import torch

from . import _dlpack, _runtime, log, topology

_GiB = 1 << 30

# Columns of a device's counters row (the order `_allocator_numba.FIELDS` uses), then its capacity.
(_CURRENT, _PEAK, _ALLOCATED, _FREED, _COUNT, _COUNT_PEAK, _COUNT_ALLOCATED, _COUNT_FREED, _LARGEST,
 _OOMS, _CAPACITY) = range(11)
_Row = ctypes.c_int64 * 11
_Context = ctypes.c_int64 * 7  # an allocation context of the compiled allocator (its CONTEXT_WORDS)


class _DeviceCounters:
    """PyTorch-style allocator statistics of one logical device: a row of int64 counters at a fixed
    address (the compiled allocator and its deleter update it in place) whose last word is the device's
    capacity (the compiled allocator reads it there), the topology that capacity was derived from, and
    the compiled allocator's context per dtype (`_context_for`)."""

    __slots__ = ("row", "address", "topology", "contexts")

    def __init__(self) -> None:
        self.row = _Row()  # never freed: deleters of live blocks point at it
        self.address = ctypes.addressof(self.row)
        self.topology: object = None
        self.contexts: dict[torch.dtype, int] = {}  # dtype -> address of its allocation context

    @property
    def capacity(self) -> int:
        return self.row[_CAPACITY]

    @capacity.setter
    def capacity(self, nbytes: int) -> None:
        self.row[_CAPACITY] = nbytes


_lock = threading.Lock()  # counters updates of the portable path; the recycled-buffer pool
_counters: dict[int, _DeviceCounters] = {}
# Frees of watched objects are queued by weakref callbacks and applied by the next allocation or
# statistics read: a callback can fire anywhere (even inside our own locked section, when the garbage
# collector runs), so it never takes the lock or updates counters itself.
_pending_frees: deque[int] = deque()
# Per watched object (an rbln storage, or the host tensor that lives exactly as long), keyed by the id
# of its weak reference (kept here, so the id stays unique): (the reference, device index, bytes, the
# host buffer to recycle when it dies, or None). Not keyed by the reference itself: its hash is the
# object's id, which a loop of allocate-and-drop reuses, so queued dead references would all collide.
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


# -- counter updates: under `_lock` in Python, or atomic once the compiled allocator is in use (its
# deleters run on any thread, without the GIL, so Python must not read-modify-write the row then).


def _count_portable(counters: _DeviceCounters, nbytes: int) -> bool:
    """Count an allocation of `nbytes`; False (one more OOM counted, nothing else) over capacity."""
    row = counters.row
    with _lock:
        current = row[_CURRENT] + nbytes
        if current > counters.capacity:
            row[_OOMS] += 1
            return False
        row[_CURRENT] = current
        row[_PEAK] = max(row[_PEAK], current)
        row[_ALLOCATED] += nbytes
        row[_COUNT] += 1
        row[_COUNT_PEAK] = max(row[_COUNT_PEAK], row[_COUNT])
        row[_COUNT_ALLOCATED] += 1
        row[_LARGEST] = max(row[_LARGEST], nbytes)
    return True


def _uncount_portable(counters: _DeviceCounters, nbytes: int) -> None:
    row = counters.row
    with _lock:
        row[_CURRENT] -= nbytes
        row[_FREED] += nbytes
        row[_COUNT] -= 1
        row[_COUNT_FREED] += 1


def _reset_peak_portable(counters: _DeviceCounters) -> None:
    row = counters.row
    with _lock:
        row[_PEAK] = row[_CURRENT]
        row[_COUNT_PEAK] = row[_COUNT]


_count: Callable[[_DeviceCounters, int], bool] = _count_portable
_uncount: Callable[[_DeviceCounters, int], None] = _uncount_portable
_reset_peak: Callable[[_DeviceCounters], None] = _reset_peak_portable


# -- the compiled allocator


_compiled = None  # the _allocator_numba module once enabled
_context_blocks: list = []  # every allocation context made (never freed: small, one per dtype and device)
_dtype_words: dict[torch.dtype, int] = {}  # DLPack dtype (code, bits, lanes) as one int32, per dtype
_from_dlpack = torch._C._from_dlpack
_SCALAR_DIMS = (1,)  # what a 0-d tensor passes as its sizes (numba cannot type an empty tuple)
_DTYPE_OFFSET = 20  # of DLTensor.dtype: data pointer (8), device (8), ndim (4)


def _dlpack_dtype_word(dtype: torch.dtype) -> int | None:
    """How PyTorch writes `dtype` into a DLTensor (read from a capsule it exports), or None when
    PyTorch cannot export it."""
    try:
        capsule = torch._C._to_dlpack(torch.empty(0, dtype=dtype))
    except Exception:  # noqa: BLE001 - a dtype DLPack cannot carry: the portable path keeps it
        return None
    address = _dlpack._capsule_pointer(capsule, b"dltensor")
    return ctypes.c_int32.from_address(address + _DTYPE_OFFSET).value


def enable_compiled_allocator() -> bool:
    """Allocate kernel outputs with `_allocator_numba` from now on, once it produces tensors exactly as
    the portable path does here (device, sizes, strides, dtype, data address, accounting); called once
    the op library has loaded numba anyway. Returns whether the compiled allocator is in use."""
    global _compiled, _count, _uncount, _reset_peak
    if _compiled is not None:
        return True
    try:
        from . import _allocator_numba as compiled

        words = {}
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
                      torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128):
            word = _dlpack_dtype_word(dtype)
            if word is not None:
                words[dtype] = word
        if not _probe(compiled, words):
            return False
    except Exception as error:  # noqa: BLE001 - numba missing or failing: the portable path stays
        log.get_logger("memory").debug("compiled allocator unavailable (%s): using the portable one", error)
        return False
    with _lock:
        _dtype_words.update(words)
        _count = _count_compiled
        _uncount = _uncount_compiled
        _reset_peak = _reset_peak_compiled
        _compiled = compiled
    return True


def _new_context(compiled, word: int, itemsize: int, index: int, row: int) -> int:
    """The address of a new allocation context of the compiled allocator (its CONTEXT_WORDS)."""
    context = _Context(word, itemsize, index, row, _POOL_MIN, compiled.release.address,
                       compiled.release_unused_capsule.address)
    _context_blocks.append(context)
    return ctypes.addressof(context)


def _context_for(counters: _DeviceCounters, dtype: torch.dtype, index: int) -> int:
    """The compiled allocator's context for `dtype` on device `index` (made once), or 0 when the
    compiled allocator is not in use or does not know `dtype` (the re-tagging path then)."""
    if _compiled is None:
        return 0
    word = _dtype_words.get(dtype)
    if word is None:
        return 0
    context = _new_context(_compiled, word, dtype.itemsize, index, counters.address)
    counters.contexts[dtype] = context
    return context


def _probe(compiled, words: dict[torch.dtype, int]) -> bool:
    """Whether a capsule from the compiled allocator imports as the rbln tensor it describes, PyTorch's
    free of it un-counts it, and a capsule never imported releases its block when dropped (on a private
    counters row, so no device's statistics change)."""
    probe_row = _DeviceCounters()
    probe_row.capacity = 1 << 20
    context = _new_context(compiled, words[torch.float32], 4, 0, probe_row.address)
    capsule = compiled.allocate_contiguous((2, 3), 2, context)
    if type(capsule) is int:
        return False
    tensor = _from_dlpack(capsule)
    ok = (tensor.device == torch.device("rbln:0") and tensor.shape == (2, 3) and tensor.stride() == (3, 1)
          and tensor.dtype == torch.float32 and tensor.data_ptr() % compiled.ALIGNMENT == 0
          and probe_row.row[_CURRENT] == 24)
    del tensor, capsule
    ok = ok and probe_row.row[_CURRENT] == 0 and probe_row.row[_FREED] == 24
    unused = compiled.allocate_contiguous((2,), 1, context)
    ok = ok and type(unused) is not int and probe_row.row[_CURRENT] == 8
    del unused
    return ok and probe_row.row[_CURRENT] == 0 and probe_row.row[_FREED] == 32


def _count_compiled(counters: _DeviceCounters, nbytes: int) -> bool:
    return _compiled.reserve(counters.address, nbytes, counters.capacity)


def _uncount_compiled(counters: _DeviceCounters, nbytes: int) -> None:
    _compiled.unreserve(counters.address, nbytes)


def _reset_peak_compiled(counters: _DeviceCounters) -> None:
    row = counters.row
    _compiled.store(counters.address, _PEAK, row[_CURRENT])
    _compiled.store(counters.address, _COUNT_PEAK, row[_COUNT])


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
        free = _pool.get(nbytes)
        if free:
            _pool_bytes -= nbytes
            return free.pop()
    return torch.empty(nbytes, dtype=torch.uint8)


def _apply_pending_frees() -> None:
    """Un-count the watched objects that died (caller holds no lock)."""
    global _pool_bytes
    while _pending_frees:
        try:
            _, index, nbytes, buffer = _watched.pop(_pending_frees.popleft())
        except IndexError:  # another thread took the last one
            return
        if buffer is not None:
            with _lock:
                if _pool_bytes + nbytes <= _POOL_CAP:
                    _pool.setdefault(nbytes, []).append(buffer)
                    _pool_bytes += nbytes
        _uncount(_counters[index], nbytes)


def _out_of_memory(index: int, nbytes: int, counters: _DeviceCounters) -> torch.OutOfMemoryError:
    total = counters.capacity
    current = counters.row[_CURRENT]
    free = max(total - current, 0)
    return torch.OutOfMemoryError(
        f"RBLN out of memory on rbln:{index}: tried to allocate {_fmt(nbytes)} ({nbytes} bytes); "
        f"{_fmt(free)} free of {_fmt(total)} total, {_fmt(current)} allocated. "
        "Free tensors you no longer need, or raise TORCH_RBLN_SIM_MEMORY_GB."
    )


def _host_out_of_memory(index: int, nbytes: int) -> torch.OutOfMemoryError:
    return torch.OutOfMemoryError(
        f"RBLN out of memory on rbln:{index}: the host heap that simulates the device could not give "
        f"{_fmt(nbytes)} ({nbytes} bytes). Free tensors you no longer need, or lower "
        "TORCH_RBLN_SIM_MEMORY_GB to what this machine has."
    )


def _fmt(nbytes: int) -> str:
    for unit, size in (("GiB", _GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} bytes"


def _reserve(index: int, nbytes: int) -> None:
    """Check capacity and count `nbytes` as allocated on `index` (raises OutOfMemoryError). Frees of
    objects that died are applied first, so capacity, peaks and counts are judged exactly."""
    counters = _counters_for(index)
    if _pending_frees:
        _apply_pending_frees()
    if not _count(counters, nbytes):
        raise _out_of_memory(index, nbytes, counters)


def _unreserve(index: int, nbytes: int) -> None:
    """Undo `_reserve` for an allocation that failed after it (counted as allocated and freed)."""
    _uncount(_counters[index], nbytes)


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


@functools.lru_cache(maxsize=4096)
def _row_major(size: tuple) -> tuple | None:
    """`contiguous_strides(size)` as a tuple, memoised (every `empty_like`/`clone` asks), or None for a
    size with a negative extent (which `empty_strided` rejects with torch's error)."""
    if any(extent < 0 for extent in size):
        return None
    return tuple(contiguous_strides(size))


def storage_nbytes(size: Sequence[int], stride: Sequence[int], dtype: torch.dtype) -> int:
    if any(s == 0 for s in size):
        return 0
    span = 1 + sum((s - 1) * st for s, st in zip(size, stride, strict=True))
    return span * dtype.itemsize


_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset._handle.redispatch_boxed


def empty_strided(size: Sequence[int], stride: Sequence[int], dtype: torch.dtype, index: int) -> torch.Tensor:
    """Allocate an uninitialised rbln:index tensor, accounted, raising OutOfMemoryError when full.
    Row-major strides (`empty_like`/`clone` of a contiguous tensor ask for them) take `empty`."""
    size, stride = tuple(size), tuple(stride)
    if stride == _row_major(size):
        return empty(size, dtype, index)
    if len(stride) == len(size):
        # another layout (a transpose's empty_like, a permuted clone): the elements it spans, allocated
        # as every output is, then given these sizes and strides by the CPU set_ kernel (metadata only,
        # the dispatcher is not re-entered): ~3 us less than re-tagging a CPU tensor. Negative sizes or
        # strides take the re-tagging path, whose empty_strided raises torch's error.
        span = 1
        for extent, step in zip(size, stride, strict=True):
            if extent < 0 or step < 0:
                span = -1
                break
            if extent == 0:
                span = 0
            elif span:
                span += (extent - 1) * step
        if span >= 0:
            flat = empty((span,), dtype, index)
            return _set_storage(_CPU_KEYS, flat, flat.untyped_storage(), 0, size, stride)
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
    """A row-major rbln:index tensor of `size`: what every kernel output is, so this is the hot path
    of an op. The compiled allocator builds it in one call when it is in use; large outputs (which
    recycle host buffers) and dtypes it does not know take the re-tagging path."""
    counters = _counters.get(index)
    if counters is None or counters.topology is not topology._topology:
        counters = _counters_for(index)
    context = counters.contexts.get(dtype) or _context_for(counters, dtype, index)
    if context:
        if _pending_frees:
            _apply_pending_frees()
        dims = tuple(size)
        ndim = len(dims)
        allocate = _allocators.get(ndim) or _allocator_for(ndim)
        capsule = allocate(dims or _SCALAR_DIMS, ndim, context)
        # a capsule PyTorch fails to import releases its block when it dies (its destructor)
        if type(capsule) is not int:
            return _from_dlpack(capsule)
        _raise_if_full(capsule, index, dims, dtype, counters)
    return _empty_retagged(size, dtype, index)


def allocator(size: Sequence[int], dtype: torch.dtype, index: int) -> Callable[[], torch.Tensor]:
    """`new()`, which makes `empty(size, dtype, index)`, for a caller that allocates one output layout on
    every call (a plan): what `empty` looks up per call (the device's counters, the dtype's context, the
    compiled entry for this rank) is looked up here once, so a call is the compiled allocation and the
    DLPack import (~0.3 us less per op call). Anything `empty` must re-derive (frees waiting to be
    applied, a rebuilt topology) and anything the compiled allocator refuses takes `empty` itself."""
    dims = tuple(size)
    ndim = len(dims)
    counters = _counters_for(index)
    context = counters.contexts.get(dtype) or _context_for(counters, dtype, index)
    if not context:  # the compiled allocator is off, or does not know this dtype
        return functools.partial(empty, dims, dtype, index)
    allocate = _allocators.get(ndim) or _allocator_for(ndim)
    passed = dims or _SCALAR_DIMS
    pending, from_dlpack, topologies = _pending_frees, _from_dlpack, topology

    def new() -> torch.Tensor:
        if pending or counters.topology is not topologies._topology:
            return empty(dims, dtype, index)
        capsule = allocate(passed, ndim, context)
        if type(capsule) is not int:
            return from_dlpack(capsule)
        _raise_if_full(capsule, index, dims, dtype, counters)
        return _empty_retagged(dims, dtype, index)

    return new


def _raise_if_full(code: int, index: int, dims: tuple, dtype: torch.dtype, counters: _DeviceCounters) -> None:
    """Raise the OutOfMemoryError of an allocation of `dims` that the compiled allocator refused with
    `code`; return for TOO_LARGE (the caller takes the recycled-buffer path)."""
    if code == _compiled.OVER_CAPACITY:
        raise _out_of_memory(index, math.prod(dims) * dtype.itemsize, counters)
    if code == _compiled.HEAP_EXHAUSTED:
        raise _host_out_of_memory(index, math.prod(dims) * dtype.itemsize)


def empty_pair(first: Sequence[int], second: Sequence[int], dtype: torch.dtype, index: int,
               second_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`(empty(first, dtype, ...), empty(second, second_dtype or dtype, ...))` in one compiled call: the
    outputs of a two-output op (a loss and its total weight; a max's values and int64 indices). Same
    tensors and statistics as the two calls."""
    counters = _counters.get(index)
    if counters is None or counters.topology is not topology._topology:
        counters = _counters_for(index)
    contexts = counters.contexts
    context = contexts.get(dtype) or _context_for(counters, dtype, index)
    if second_dtype is None:
        second_dtype, second_context = dtype, context
    else:
        second_context = contexts.get(second_dtype) or _context_for(counters, second_dtype, index)
    if context and second_context:
        if _pending_frees:
            _apply_pending_frees()
        sizes = (*first, *second)
        allocate = _pairs.get(len(sizes)) or _group_allocator_for(2, len(sizes))
        a, b = allocate(sizes or _SCALAR_DIMS, (len(first), len(second)), context, second_context)
        if type(a) is not int:  # the first is a capsule only when both are
            return _from_dlpack(a), _from_dlpack(b)
        _group_refused((a, b), (first, second), index, (dtype, second_dtype), counters)
    return empty(first, dtype, index), empty(second, second_dtype, index)


def empty_triple(first: Sequence[int], second: Sequence[int], third: Sequence[int], dtype: torch.dtype,
                 index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`empty_pair` for three outputs of one dtype (a layer norm's output, mean and rstd; its three
    gradients)."""
    return empty_triple_of(triple_layout(first, second, third), dtype, index)


def triple_layout(first: Sequence[int], second: Sequence[int], third: Sequence[int]) -> tuple:
    """What `empty_triple_of` takes for outputs of these sizes: all extents in one tuple (`(1,)` when
    there are none) and the number of each. A caller whose sizes repeat (a fast path's plan) keeps
    it, saving the per-call flattening."""
    sizes = (*first, *second, *third)
    return sizes or _SCALAR_DIMS, (len(first), len(second), len(third)), len(sizes)


def empty_triple_of(layout: tuple, dtype: torch.dtype, index: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`empty_triple` of the sizes a `triple_layout` describes."""
    counters = _counters.get(index)
    if counters is None or counters.topology is not topology._topology:
        counters = _counters_for(index)
    context = counters.contexts.get(dtype) or _context_for(counters, dtype, index)
    sizes, ndims, extents = layout
    if context:
        if _pending_frees:
            _apply_pending_frees()
        allocate = _triples.get(extents) or _group_allocator_for(3, extents)
        a, b, c = allocate(sizes, ndims, context)
        if type(a) is not int:  # the first is a capsule only when all are
            return _from_dlpack(a), _from_dlpack(b), _from_dlpack(c)
    shapes = (sizes[:ndims[0]], sizes[ndims[0]:ndims[0] + ndims[1]], sizes[ndims[0] + ndims[1]:extents])
    if context:
        _group_refused((a, b, c), shapes, index, (dtype,) * 3, counters)
    return empty(shapes[0], dtype, index), empty(shapes[1], dtype, index), empty(shapes[2], dtype, index)


def _group_refused(codes: tuple, shapes: tuple, index: int, dtypes: tuple, counters: _DeviceCounters) -> None:
    """Raise the OutOfMemoryError of the output a group allocation failed on (the others were undone:
    counted as allocated and freed, as separate allocations would end once the made ones die); return
    when it refused for size (TOO_LARGE, nothing reserved: the caller allocates each on its own)."""
    for code, shape, dtype in zip(codes, shapes, dtypes, strict=True):
        if code != _compiled.NOT_MADE and code != _compiled.TOO_LARGE:
            _raise_if_full(code, index, tuple(shape), dtype, counters)


_allocators: dict[int, Callable] = {}  # ndim -> the compiled allocate_contiguous's entry for it
_pairs: dict[int, Callable] = {}  # number of extents in all -> allocate_pair's entry for it
_triples: dict[int, Callable] = {}  # the same for allocate_triple


def _entry(dispatcher, signature: tuple) -> Callable:
    """The entry point of `dispatcher` compiled for `signature`: calling it skips numba's per-call
    typing of the arguments (a third of the call)."""
    dispatcher.compile(signature)
    return dispatcher.overloads[signature].entry_point


def _allocator_for(ndim: int) -> Callable:
    """The entry point of `allocate_contiguous` compiled for `ndim` sizes."""
    import numba

    int64 = numba.types.int64
    signature = (numba.types.UniTuple(int64, max(ndim, 1)), int64, int64)
    entry = _allocators[ndim] = _entry(_compiled.allocate_contiguous, signature)
    return entry


def _group_allocator_for(count: int, extents: int) -> Callable:
    """The entry point of `allocate_pair` (count 2) or `allocate_triple` (3) for `extents` extents."""
    import numba

    int64 = numba.types.int64
    sizes = (numba.types.UniTuple(int64, max(extents, 1)), numba.types.UniTuple(int64, count))
    if count == 2:  # a context per output
        entries, dispatcher, signature = _pairs, _compiled.allocate_pair, sizes + (int64, int64)
    else:  # one context for all three
        entries, dispatcher, signature = _triples, _compiled.allocate_triple, sizes + (int64,)
    entry = entries[extents] = _entry(dispatcher, signature)
    return entry


def _empty_retagged(size: Sequence[int], dtype: torch.dtype, index: int) -> torch.Tensor:
    """`empty` through a host tensor re-tagged as rbln (large outputs recycle their host buffer)."""
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
    # it saves building the storage's Python object.
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
    if _pending_frees:
        _apply_pending_frees()
    return counters


def memory_allocated(index: int) -> int:
    return _settled(index).row[_CURRENT]


def max_memory_allocated(index: int) -> int:
    return _settled(index).row[_PEAK]


def reset_peak(index: int) -> None:
    _reset_peak(_settled(index))


def memory_stats(index: int) -> dict[str, int]:
    """The `torch.cuda.memory_stats` key family; reserved equals allocated (recycled host buffers of
    freed outputs are host memory waiting for reuse, not device memory: they are not counted)."""
    counters = _settled(index)
    row = list(counters.row)  # one snapshot: deleters may update the row meanwhile
    byte_counts = {"current": row[_CURRENT], "peak": row[_PEAK], "allocated": row[_ALLOCATED],
                   "freed": row[_FREED]}
    counts = {"current": row[_COUNT], "peak": row[_COUNT_PEAK], "allocated": row[_COUNT_ALLOCATED],
              "freed": row[_COUNT_FREED]}
    stats: dict[str, int] = {}
    for prefixes, values in ((("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"),
                              byte_counts), (("allocation", "segment", "active"), counts)):
        for prefix in prefixes:
            for pool in ("all", "large_pool", "small_pool"):
                for key, value in values.items():
                    stats[f"{prefix}.{pool}.{key}"] = value if pool == "all" else 0
    stats["num_ooms"] = row[_OOMS]
    stats["num_alloc_retries"] = 0
    stats["max_split_size"] = -1
    stats["oversize_allocations.current"] = 0
    stats["requested_bytes.all.largest"] = row[_LARGEST]
    return stats


def mem_get_info(index: int) -> tuple[int, int]:
    counters = _settled(index)
    return counters.capacity - counters.row[_CURRENT], counters.capacity
