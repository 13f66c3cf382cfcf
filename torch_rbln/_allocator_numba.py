"""The compiled rbln allocator: one numba call allocates an output and builds its DLPack tensor.

Why: an rbln tensor used to be a fresh CPU tensor re-tagged through a DLPack round trip, watched by a
weak reference whose callback queued its free for Python to count. On a 4-element op that allocation
and free cost more than the kernel (~8 us of a ~18 us call). Here `allocate_contiguous` reserves the
bytes in the device's counters (atomically), takes one 64-byte aligned block from the C heap that
holds a `DLManagedTensor` header followed by the data, and returns the block; PyTorch imports it as a
PrivateUse1 tensor (`_memory`). When PyTorch frees that storage it calls `release`, a C callback that
un-counts the bytes (atomically: it may run on any thread, without the GIL) and frees the block. No
Python object watches the tensor, so no Python code runs when it dies.

Counters are one int64 row per device (`FIELDS`, shared with `_memory`, which reads them for
statistics). Every update from compiled code is an atomic read-modify-write; `_memory` routes its own
updates through `add`/`store` here once this module is in use, so no update is ever lost.

A module of its own so that `import torch_rbln` never imports numba: `_memory.enable_compiled_allocator`
switches to it once the op library has loaded numba anyway.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils

from torch_rbln.dsl.backends.numba_backend.support import as_pointer

# Column of each statistic in a device's counters row.
FIELDS = ("current", "peak", "allocated_total", "freed_total", "count_current", "count_peak",
          "count_allocated", "count_freed", "largest_request", "num_ooms")
CURRENT, PEAK, ALLOCATED, FREED, COUNT, COUNT_PEAK, COUNT_ALLOCATED, COUNT_FREED, LARGEST, OOMS = range(10)

# Layout of a block: the DLManagedTensor (DLPack's C ABI: data, device (type, id), ndim, dtype, shape,
# strides, byte_offset, manager_ctx, deleter), then the accounted byte count, then shape and strides,
# then the data at the next 64-byte boundary (the alignment PyTorch's CPU allocator gives).
_MANAGER_CTX = 48
_DELETER = 56
_NBYTES = 64
_DIMS = 80
ALIGNMENT = 64
DL_EXT_DEV = 12  # kDLExtDev: what PyTorch maps PrivateUse1 to

# Results of allocate_contiguous that are not a block address.
OVER_CAPACITY = -1
HEAP_EXHAUSTED = 0
TOO_LARGE = -2  # at least `pool_min` bytes: the caller takes its recycled-buffer path instead

_i64 = ir.IntType(64)
_bytes_ptr = ir.IntType(8).as_pointer()


@numba.extending.intrinsic
def _aligned_alloc(typingctx, alignment, size):
    """C11 aligned_alloc(alignment, size) as an address (0 when the heap is exhausted)."""
    def codegen(context, builder, sig, args):
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_bytes_ptr, [_i64, _i64]), "aligned_alloc")
        return builder.ptrtoint(builder.call(function, args), _i64)

    return types.int64(types.int64, types.int64), codegen


@numba.extending.intrinsic
def _free(typingctx, address):
    """C free() of a block from `_aligned_alloc`."""
    def codegen(context, builder, sig, args):
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [_bytes_ptr]), "free")
        builder.call(function, [builder.inttoptr(args[0], _bytes_ptr)])
        return context.get_dummy_value()

    return types.void(types.int64), codegen


def _atomic(operation: str):
    @numba.extending.intrinsic
    def atomic(typingctx, address, value):
        def codegen(context, builder, sig, args):
            pointer = builder.inttoptr(args[0], _i64.as_pointer())
            return builder.atomic_rmw(operation, pointer, args[1], "seq_cst")

        return types.int64(types.int64, types.int64), codegen

    atomic.__doc__ = f"Atomic `{operation}` of an int64 at an address; returns the previous value."
    return atomic


_atomic_add = _atomic("add")
_atomic_max = _atomic("max")
_atomic_exchange = _atomic("xchg")


@numba.njit(cache=True)
def add(row, field, value):
    """Atomically add `value` to counter `field` of the row at address `row`."""
    _atomic_add(row + 8 * field, value)


@numba.njit(cache=True)
def store(row, field, value):
    """Atomically set counter `field` of the row at address `row`."""
    _atomic_exchange(row + 8 * field, value)


@numba.njit(cache=True)
def reserve(row, nbytes, capacity):
    """Count an allocation of `nbytes` in the row at address `row`; False (and one more OOM counted,
    nothing else changed) when it would exceed `capacity`."""
    current = _atomic_add(row + 8 * CURRENT, nbytes) + nbytes
    if current > capacity:
        _atomic_add(row + 8 * CURRENT, -nbytes)
        _atomic_add(row + 8 * OOMS, 1)
        return False
    _atomic_max(row + 8 * PEAK, current)
    _atomic_add(row + 8 * ALLOCATED, nbytes)
    _atomic_max(row + 8 * COUNT_PEAK, _atomic_add(row + 8 * COUNT, 1) + 1)
    _atomic_add(row + 8 * COUNT_ALLOCATED, 1)
    _atomic_max(row + 8 * LARGEST, nbytes)
    return True


@numba.njit(cache=True)
def unreserve(row, nbytes):
    """Count a free of `nbytes` in the row at address `row`."""
    _atomic_add(row + 8 * CURRENT, -nbytes)
    _atomic_add(row + 8 * FREED, nbytes)
    _atomic_add(row + 8 * COUNT, -1)
    _atomic_add(row + 8 * COUNT_FREED, 1)


@numba.cfunc(types.void(types.int64), cache=True, nogil=True)
def release(block):
    """The DLPack deleter of every block: un-count its bytes in its device's row, free the block. Also
    what undoes an allocation PyTorch did not take (`release.ctypes(block)`)."""
    words = numba.carray(as_pointer(block, np.int64), _DIMS // 8)
    unreserve(words[_MANAGER_CTX // 8], words[_NBYTES // 8])
    _free(block)


@numba.njit(cache=True)
def allocate_contiguous(size, ndim, dtype_word, itemsize, device_id, row, capacity, pool_min, deleter):
    """A block for a row-major tensor of the first `ndim` extents of `size` (a non-empty tuple: numba
    cannot type an empty one, so a 0-d tensor passes `(1,)` and ndim 0) whose DLPack dtype is
    `dtype_word`, counted on the row at address `row`: its address, or OVER_CAPACITY, HEAP_EXHAUSTED or
    TOO_LARGE. `deleter` is `release.address`, passed in because a cached compilation must not keep one
    process's address."""
    nbytes = itemsize
    for dim in range(ndim):
        nbytes *= size[dim]
    if nbytes >= pool_min:
        return TOO_LARGE
    header = (_DIMS + 16 * ndim + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    if not reserve(row, nbytes, capacity):
        return OVER_CAPACITY
    block = _aligned_alloc(ALIGNMENT, header + (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT)
    if block == 0:
        unreserve(row, nbytes)
        return HEAP_EXHAUSTED
    words = numba.carray(as_pointer(block, np.int64), _DIMS // 8 + 2 * ndim)
    halves = numba.carray(as_pointer(block + 8, np.int32), 4)
    words[0] = block + header if nbytes else 0  # data (NULL when empty, as PyTorch's allocator gives)
    halves[0] = DL_EXT_DEV
    halves[1] = device_id
    halves[2] = ndim
    halves[3] = dtype_word  # code, bits, lanes packed as DLPack lays them out
    words[3] = block + _DIMS  # shape
    words[4] = block + _DIMS + 8 * ndim  # strides
    words[5] = 0  # byte_offset
    words[_MANAGER_CTX // 8] = row
    words[_DELETER // 8] = deleter
    words[_NBYTES // 8] = nbytes
    stride = 1
    for dim in range(ndim - 1, -1, -1):
        words[_DIMS // 8 + dim] = size[dim]
        words[_DIMS // 8 + ndim + dim] = stride
        stride *= max(size[dim], 1)
    return block
