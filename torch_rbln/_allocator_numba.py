"""The compiled rbln allocator: one numba call allocates an output and hands Python its DLPack capsule.

Why: an rbln tensor used to be a fresh CPU tensor re-tagged through a DLPack round trip, watched by a
weak reference whose callback queued its free for Python to count. On a 4-element op that allocation
and free cost more than the kernel (~8 us of a ~18 us call). Here `allocate_contiguous` reserves the
bytes in the device's counters (atomically), takes one 64-byte aligned block from the C heap that
holds a `DLManagedTensor` header followed by the data, and returns the block already wrapped in a
"dltensor" capsule (boxed by numba's return path: a ctypes `PyCapsule_New` per output cost ~0.4 us);
PyTorch imports it as a PrivateUse1 tensor (`_memory`). When PyTorch frees that storage it calls
`release`, a C callback that un-counts the bytes (atomically: it may run on any thread, without the
GIL) and frees the block. No Python object watches the tensor, so no Python code runs when it dies.
A capsule that PyTorch never imported (an exception in between) releases its block when it dies
(`release_unused_capsule`, its destructor), so no path leaks a block or its count.

`allocate_pair`/`allocate_triple` make the outputs of a multi-output op (mean and rstd with a layer
norm's output, a loss and its total weight) in one call: all or none, with the counters ending exactly
as after that many `allocate_contiguous` calls.

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
from numba.core.datamodel import models
from numba.extending import box, intrinsic, register_model

from torch_rbln.dsl.backends.numba_backend.support import as_pointer

# Column of each statistic in a device's counters row.
FIELDS = ("current", "peak", "allocated_total", "freed_total", "count_current", "count_peak",
          "count_allocated", "count_freed", "largest_request", "num_ooms")
CURRENT, PEAK, ALLOCATED, FREED, COUNT, COUNT_PEAK, COUNT_ALLOCATED, COUNT_FREED, LARGEST, OOMS = range(10)
CAPACITY = 10  # the row's last word: the device's capacity in bytes (set by `_memory`, read here)
ROW_WORDS = 11

# An allocation context: int64 words describing what every allocation of one dtype on one device
# passes (one address instead of seven arguments: each costs the entry ~15 ns to unbox).
DTYPE_WORD, ITEMSIZE, DEVICE_ID, ROW, POOL_MIN, DELETER, DESTRUCTOR = range(7)
CONTEXT_WORDS = 7

# Layout of a block: the DLManagedTensor (DLPack's C ABI: data, device (type, id), ndim, dtype, shape,
# strides, byte_offset, manager_ctx, deleter), then the accounted byte count, then the destructor of
# its capsule, then shape and strides, then the data at the next 64-byte boundary (the alignment
# PyTorch's CPU allocator gives).
_MANAGER_CTX = 48
_DELETER = 56
_NBYTES = 64
_DESTRUCTOR = 72
_DIMS = 80
ALIGNMENT = 64
DL_EXT_DEV = 12  # kDLExtDev: what PyTorch maps PrivateUse1 to

# Results of allocate_contiguous that are not a block address.
OVER_CAPACITY = -1
HEAP_EXHAUSTED = 0
TOO_LARGE = -2  # at least `pool_min` bytes: the caller takes its recycled-buffer path instead
NOT_MADE = -3  # of a group: another output of it failed, so this one was not made (or was undone)

_i64 = ir.IntType(64)
_bytes_ptr = ir.IntType(8).as_pointer()


@intrinsic
def _aligned_alloc(typingctx, alignment, size):
    """C11 aligned_alloc(alignment, size) as an address (0 when the heap is exhausted)."""
    def codegen(context, builder, sig, args):
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_bytes_ptr, [_i64, _i64]), "aligned_alloc")
        return builder.ptrtoint(builder.call(function, args), _i64)

    return types.int64(types.int64, types.int64), codegen


@intrinsic
def _free(typingctx, address):
    """C free() of a block from `_aligned_alloc`."""
    def codegen(context, builder, sig, args):
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [_bytes_ptr]), "free")
        builder.call(function, [builder.inttoptr(args[0], _bytes_ptr)])
        return context.get_dummy_value()

    return types.void(types.int64), codegen


def _atomic(operation: str):
    @intrinsic
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


@numba.njit(cache=True)
def _release_block(block):
    words = numba.carray(as_pointer(block, np.int64), _DIMS // 8)
    unreserve(words[_MANAGER_CTX // 8], words[_NBYTES // 8])
    _free(block)


@numba.cfunc(types.void(types.int64), cache=True, nogil=True)
def release(block):
    """The DLPack deleter of every block: un-count its bytes in its device's row, free the block."""
    _release_block(block)


@intrinsic
def _unconsumed_block(typingctx, capsule):
    """The block of a capsule that is still named "dltensor" (PyTorch renames the capsules it imports),
    else 0."""
    def codegen(context, builder, sig, args):
        module = builder.module
        name = context.insert_const_string(module, "dltensor")
        pointer = builder.inttoptr(args[0], _bytes_ptr)
        is_valid = cgutils.get_or_insert_function(
            module, ir.FunctionType(ir.IntType(32), [_bytes_ptr, _bytes_ptr]), "PyCapsule_IsValid")
        get_pointer = cgutils.get_or_insert_function(
            module, ir.FunctionType(_bytes_ptr, [_bytes_ptr, _bytes_ptr]), "PyCapsule_GetPointer")
        block = cgutils.alloca_once_value(builder, ir.Constant(_i64, 0))
        valid = builder.icmp_signed("!=", builder.call(is_valid, [pointer, name]),
                                    ir.Constant(ir.IntType(32), 0))
        with builder.if_then(valid):
            builder.store(builder.ptrtoint(builder.call(get_pointer, [pointer, name]), _i64), block)
        return builder.load(block)

    return types.int64(types.int64), codegen


@numba.cfunc(types.void(types.int64), cache=True)
def release_unused_capsule(capsule):
    """The destructor of every capsule `allocate_*` returns: releases the block when PyTorch did not
    import it (an exception between allocation and import), does nothing when it did."""
    block = _unconsumed_block(capsule)
    if block != 0:
        _release_block(block)


class Block(types.Type):
    """What an allocation returns to Python: a "dltensor" capsule of the block when it is an address
    (> 0), else the int result code (OVER_CAPACITY, HEAP_EXHAUSTED, TOO_LARGE, NOT_MADE)."""

    def __init__(self) -> None:
        super().__init__(name="rbln_block")


block_type = Block()


@register_model(Block)
class _BlockModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type) -> None:
        super().__init__(dmm, fe_type, _i64)


@intrinsic
def _as_block(typingctx, value):
    """An int64 address or result code as a `Block` (boxed to a capsule or an int on return)."""
    def codegen(context, builder, sig, args):
        return args[0]

    return block_type(types.int64), codegen


@box(Block)
def _box_block(typ, val, c):
    """A block address becomes a capsule whose destructor is the one stored in the block; a result code
    becomes an int. Should the capsule itself fail to allocate, the block is released first."""
    builder, pyapi = c.builder, c.pyapi
    result = cgutils.alloca_once(builder, pyapi.pyobj)
    with builder.if_else(builder.icmp_signed(">", val, ir.Constant(_i64, 0))) as (is_block, is_code):
        with is_block:
            words = builder.inttoptr(val, _i64.as_pointer())
            destructor = builder.load(builder.gep(words, [ir.Constant(_i64, _DESTRUCTOR // 8)]))
            new_capsule = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(pyapi.pyobj, [_bytes_ptr, _bytes_ptr, _bytes_ptr]),
                "PyCapsule_New")
            name = c.context.insert_const_string(builder.module, "dltensor")
            capsule = builder.call(new_capsule, [builder.inttoptr(val, _bytes_ptr), name,
                                                 builder.inttoptr(destructor, _bytes_ptr)])
            with builder.if_then(cgutils.is_null(builder, capsule), likely=False):
                deleter = builder.load(builder.gep(words, [ir.Constant(_i64, _DELETER // 8)]))
                deleter_type = ir.FunctionType(ir.VoidType(), [_i64])
                builder.call(builder.inttoptr(deleter, deleter_type.as_pointer()), [val])
            builder.store(capsule, result)
        with is_code:
            builder.store(pyapi.long_from_longlong(val), result)
    return builder.load(result)


# Compile cost: every entry point below is compiled once per length of its sizes tuple (numba types a
# tuple by its length), on first use and again on a fresh install (numba's cache of this module
# empty). So everything that does not need the tuple, the reservation and the block's header, is
# `_new_block`, compiled once for all lengths; what reads the tuple (`_nbytes`, `_set_dims`) is inlined
# into each entry at numba's IR level, not compiled, optimised and cached as a function of its own per
# length. This cut the README demo's allocator compiles (four lengths of allocate_contiguous, two of
# allocate_triple, one of allocate_pair) from 5.5-7 s to 3-4 s of CPU on a loaded 2-core host.
_inline = numba.njit(cache=True, inline="always")


@_inline
def _nbytes(size, start, ndim, itemsize):
    nbytes = itemsize
    for dim in range(start, start + ndim):
        nbytes *= size[dim]
    return nbytes


@numba.njit(cache=True)
def _new_block(ndim, nbytes, context):
    """Reserve `nbytes` and build the header of the block of a row-major tensor of `ndim` dims described
    by the words at `context` (see CONTEXT_WORDS), all but its shape and strides (`_set_dims`): its
    address, or OVER_CAPACITY / HEAP_EXHAUSTED (nothing left reserved, one OOM counted for the former)."""
    words_in = numba.carray(as_pointer(context, np.int64), CONTEXT_WORDS)
    row = words_in[ROW]
    capacity = numba.carray(as_pointer(row, np.int64), ROW_WORDS)[CAPACITY]
    header = (_DIMS + 16 * ndim + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    if not reserve(row, nbytes, capacity):
        return OVER_CAPACITY
    block = _aligned_alloc(ALIGNMENT, header + (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT)
    if block == 0:
        unreserve(row, nbytes)
        return HEAP_EXHAUSTED
    words = numba.carray(as_pointer(block, np.int64), _DIMS // 8)
    halves = numba.carray(as_pointer(block + 8, np.int32), 4)
    words[0] = block + header if nbytes else 0  # data (NULL when empty, as PyTorch's allocator gives)
    halves[0] = DL_EXT_DEV
    halves[1] = words_in[DEVICE_ID]
    halves[2] = ndim
    halves[3] = words_in[DTYPE_WORD]  # code, bits, lanes packed as DLPack lays them out
    words[3] = block + _DIMS  # shape
    words[4] = block + _DIMS + 8 * ndim  # strides
    words[5] = 0  # byte_offset
    words[_MANAGER_CTX // 8] = row
    words[_DELETER // 8] = words_in[DELETER]
    words[_NBYTES // 8] = nbytes
    words[_DESTRUCTOR // 8] = words_in[DESTRUCTOR]
    return block


@_inline
def _set_dims(block, size, start, ndim):
    """Write the extents size[start:start + ndim] and their row-major strides into a new block (whose
    header `_new_block` sized for `ndim` dims)."""
    dims = numba.carray(as_pointer(block + _DIMS, np.int64), 2 * ndim)
    stride = 1
    for dim in range(ndim - 1, -1, -1):
        dims[dim] = size[start + dim]
        dims[ndim + dim] = stride
        stride *= max(size[start + dim], 1)


@_inline
def _allocate(size, start, ndim, nbytes, context):
    """The block of a row-major tensor of extents size[start:start + ndim] (see `_new_block`), or
    OVER_CAPACITY / HEAP_EXHAUSTED."""
    block = _new_block(ndim, nbytes, context)
    if block > 0:
        _set_dims(block, size, start, ndim)
    return block


@numba.njit(cache=True)
def _sizes(context):
    """(itemsize, pool_min) of an allocation context."""
    words = numba.carray(as_pointer(context, np.int64), CONTEXT_WORDS)
    return words[ITEMSIZE], words[POOL_MIN]


@numba.njit(cache=True)
def allocate_contiguous(size, ndim, context):
    """A row-major tensor of the first `ndim` extents of `size` (a non-empty tuple: numba cannot type an
    empty one, so a 0-d tensor passes `(1,)` and ndim 0) of the dtype and device of the allocation
    context at address `context` (its words: the DLPack dtype word, item size, device id, counters row
    address, `pool_min`, then `release.address` and `release_unused_capsule.address`, kept there
    because a cached compilation must not keep one process's addresses): its capsule (a `Block`), or
    OVER_CAPACITY, HEAP_EXHAUSTED or TOO_LARGE (at least pool_min bytes)."""
    itemsize, pool_min = _sizes(context)
    nbytes = _nbytes(size, 0, ndim, itemsize)
    if nbytes >= pool_min:
        return _as_block(TOO_LARGE)
    return _as_block(_allocate(size, 0, ndim, nbytes, context))


@numba.njit(cache=True)
def allocate_pair(sizes, ndims, first_context, second_context):
    """Two row-major tensors in one call, each of its allocation context (of one device: the dtypes
    may differ, as a max's values and indices): the extents of the first are sizes[:ndims[0]], those
    of the second follow (`(1,)` stands for no extents at all). Both capsules, or the failing one's
    code (TOO_LARGE: either is large, nothing reserved; OVER_CAPACITY or HEAP_EXHAUSTED: the other is
    NOT_MADE, and released if it had been made)."""
    itemsize, pool_min = _sizes(first_context)
    first = _nbytes(sizes, 0, ndims[0], itemsize)
    itemsize, pool_min = _sizes(second_context)
    second = _nbytes(sizes, ndims[0], ndims[1], itemsize)
    if first >= pool_min or second >= pool_min:
        return _as_block(TOO_LARGE), _as_block(TOO_LARGE)
    a = _allocate(sizes, 0, ndims[0], first, first_context)
    if a <= 0:
        return _as_block(a), _as_block(NOT_MADE)
    b = _allocate(sizes, ndims[0], ndims[1], second, second_context)
    if b <= 0:
        _release_block(a)
        return _as_block(NOT_MADE), _as_block(b)
    return _as_block(a), _as_block(b)


@numba.njit(cache=True)
def allocate_triple(sizes, ndims, context):
    """`allocate_pair` for three tensors: all three capsules, or the failing one's code and NOT_MADE
    for the others (each made one released)."""
    itemsize, pool_min = _sizes(context)
    second_at = ndims[0]
    third_at = second_at + ndims[1]
    first = _nbytes(sizes, 0, ndims[0], itemsize)
    second = _nbytes(sizes, second_at, ndims[1], itemsize)
    third = _nbytes(sizes, third_at, ndims[2], itemsize)
    if first >= pool_min or second >= pool_min or third >= pool_min:
        return _as_block(TOO_LARGE), _as_block(TOO_LARGE), _as_block(TOO_LARGE)
    a = _allocate(sizes, 0, ndims[0], first, context)
    if a <= 0:
        return _as_block(a), _as_block(NOT_MADE), _as_block(NOT_MADE)
    b = _allocate(sizes, second_at, ndims[1], second, context)
    if b <= 0:
        _release_block(a)
        return _as_block(NOT_MADE), _as_block(b), _as_block(NOT_MADE)
    c = _allocate(sizes, third_at, ndims[2], third, context)
    if c <= 0:
        _release_block(a)
        _release_block(b)
        return _as_block(NOT_MADE), _as_block(NOT_MADE), _as_block(c)
    return _as_block(a), _as_block(b), _as_block(c)
