"""`tile_dot`, the runtime half of `tl.dot` on 2-D tiles for the numba backend.

Why a compiled helper rather than generated code: gemm reads only C- or Fortran-ordered operands
(numba's `np.dot` copies anything else first), and a tile's layout is known only at run time, from the
strides. Staging each operand in the layout of its memory (a row-major tile as a C array, a
column-major one such as `linear`'s transposed weight as a Fortran array that gemm reads through its
transpose flag), passing a full contiguous tile as a view, and calling gemm for whichever pair of
layouts results takes a dozen loop nests and four gemm specialisations. Emitted into every kernel they
tripled a matmul kernel's compile time (3.5 s -> 12 s); here they compile once per operand
dtype and are cached on disk, and a kernel only links them.

Tiles of memory of the work dtype whose rows or columns have a unit stride (every tile of a float32
matmul, edges included when their masked lanes read 0) skip staging: one BLAS gemm reads both
operands where they lie, each with its own leading dimension (Fortran BLAS gemm: torch's MKL where
torch exports it, else scipy's, see `_bind_gemm`). Staging copied each operand tile on every
`tl.dot` (two of the three memory passes of a 64x64x64 product) and multiplied the masked rows of an
edge tile too (a 256-row tile over Llama's 128 tokens did twice the work).

An operand is described as a box load: `rows x cols` lanes, lane (i, j) reading
`memory[base + i * row_stride + j * col_stride]` when `i < count_rows and j < count_cols`, else
`fill`; f16/bf16 memory holds raw bits (`bits` 1/2) and is converted while staging. Generated
kernels name a hash of this file (`codegen._dot_support_digest`), so a changed helper is never run
from a stale numba cache of a kernel that inlined an older one.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numba
import numba.extending
import numpy as np
from numba import types

from .support import as_pointer, bf16_bits_to_f32, f16_bits_to_f32

_jit = numba.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
# No numba `np.dot` here: the staged tiles' product takes the same bound gemm as the direct one
# (`_gemm_tiles`), so scipy.linalg is imported only where gemm is bound to scipy's BLAS (`_bind_gemm`,
# where torch exports none); importing it at this module's import cost each process's first `tl.dot`
# kernel ~0.25 s


def _capsule_address(module: object, name: str) -> int:
    """The address of a Cython module's exported C function (its `__pyx_capi__` capsule)."""
    capsule = module.__pyx_capi__[name]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get_pointer(capsule, get_name(capsule))


def _torch_blas() -> dict[str, int]:
    """The Fortran gemm entries of the BLAS linked into torch's CPU library (MKL in the x86-64 wheels:
    sgemm_, dgemm_ and its per-thread thread count), by address; {} where it exports none."""
    import torch

    path = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        library = ctypes.CDLL(str(path))
        return {name: ctypes.cast(getattr(library, name), ctypes.c_void_p).value
                for name in ("sgemm_", "dgemm_", "mkl_set_num_threads_local")}
    except (OSError, AttributeError):
        return {}


@numba.cfunc(types.intc(types.voidptr))
def _no_thread_setting(count):  # pragma: no cover  (called from compiled code)
    return 0


def _bind_gemm() -> str:
    """Bind the symbols `tile_dot`'s direct gemm calls: `torch_rbln_sgemm`/`torch_rbln_dgemm` (Fortran
    BLAS gemm: pointers to transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) and
    `torch_rbln_blas_threads_local` (MKL's `mkl_set_num_threads_local`, its count by address as the
    Fortran entry it exports takes it: 1 for this thread's gemm, then the previous setting back, so a
    kernel's gemm stays on its simulated NPU's one thread and torch's own MKL calls keep theirs).
    Torch's MKL where it exports them: at Llama's shapes it ran ~107 GFLOP/s on one thread where
    scipy's OpenBLAS ran ~80. Else scipy's BLAS (whose threads
    `blas.py` limits) and a no-op thread setting. Bound by name at import, before any kernel is
    loaded, so kernels cached by another process link whichever this one has. Returns the source."""
    import llvmlite.binding as ll

    found = _torch_blas()
    if len(found) == 3:
        ll.add_symbol("torch_rbln_sgemm", found["sgemm_"])
        ll.add_symbol("torch_rbln_dgemm", found["dgemm_"])
        ll.add_symbol("torch_rbln_blas_threads_local", found["mkl_set_num_threads_local"])
        return "torch (MKL)"
    import scipy.linalg.cython_blas as cython_blas

    from .blas import limit_kernel_blas

    limit_kernel_blas()  # kernels' gemm on one thread of scipy's BLAS
    ll.add_symbol("torch_rbln_sgemm", _capsule_address(cython_blas, "sgemm"))
    ll.add_symbol("torch_rbln_dgemm", _capsule_address(cython_blas, "dgemm"))
    ll.add_symbol("torch_rbln_blas_threads_local", _no_thread_setting.address)
    return "scipy"


GEMM_SOURCE = _bind_gemm()
# Every pointer as an int64 address (the same register on x86-64 and aarch64): array `.ctypes` objects
# passed across a call each took a reference count increment and decrement, ~0.3 us of a 16x16x16
# gemm's 0.55 (0.23 by address).
_GEMM_SIGNATURE = types.void(*[types.int64] * 13)
_sgemm = types.ExternalFunction("torch_rbln_sgemm", _GEMM_SIGNATURE)
_dgemm = types.ExternalFunction("torch_rbln_dgemm", _GEMM_SIGNATURE)
_threads_local = types.ExternalFunction("torch_rbln_blas_threads_local", types.intc(types.int64))
_NOTRANS, _TRANS = ord("n"), ord("t")
_INT32_MAX = 2**31 - 1

# `_stage` results: which array holds the operand
VIEW_C, VIEW_F, STAGED_C, STAGED_F = 0, 1, 2, 3
F16_BITS, BF16_BITS = 1, 2


def _element(value, bits):  # pragma: no cover  (numba overload below)
    raise NotImplementedError


@numba.extending.overload(_element, jit_options={"cache": True})
def _element_impl(value, bits):
    """A memory element as a float: raw f16/bf16 bits converted, floats as they are (the branch on
    `bits` is only compiled for 16-bit memory)."""
    if isinstance(value, numba.types.Integer):
        def convert(value, bits):
            if bits == BF16_BITS:
                return bf16_bits_to_f32(value)
            return f16_bits_to_f32(value)
        return convert
    return lambda value, bits: value


def _view(memory, base, like):  # pragma: no cover  (numba overload below)
    raise NotImplementedError


@numba.extending.overload(_view, jit_options={"cache": True})
def _view_impl(memory, base, like):
    """`like`-shaped C view of `memory[base:]` when the memory has the work dtype; otherwise `like`
    itself (never asked for: `_stage` only views memory of the work dtype, but both branches must
    type-check)."""
    if memory.dtype == like.dtype:
        def view(memory, base, like):
            rows, cols = like.shape
            return memory[base:base + rows * cols].reshape((rows, cols))
        return view
    return lambda memory, base, like: like


@_jit
def _copy(memory, base, outer_stride, inner_stride, count_outer, count_inner, out, bits):
    """out[i, j] = memory[base + i * outer_stride + j * inner_stride] over the counted box; the unit
    inner stride (the layout `_stage` picks whenever the memory has one) gets its own loop, which
    LLVM vectorises."""
    if inner_stride == 1:
        for i in range(count_outer):
            row = base + i * outer_stride
            for j in range(count_inner):
                out[i, j] = _element(memory[row + j], bits)
    else:
        for i in range(count_outer):
            row = base + i * outer_stride
            for j in range(count_inner):
                out[i, j] = _element(memory[row + j * inner_stride], bits)


@_jit
def _stage(memory, base, row_stride, col_stride, count_rows, count_cols, fill, staged_c, staged_t, bits,
           exact):
    """Put the operand where gemm reads it without a transposing copy; returns VIEW_C, VIEW_F,
    STAGED_C (in `staged_c`) or STAGED_F (in `staged_t`, the transposed tile: its `.T` is the
    Fortran operand). `exact`: the memory holds the work dtype, so a full contiguous tile is a view."""
    rows, cols = staged_c.shape
    full = count_rows == rows and count_cols == cols
    if abs(col_stride) <= abs(row_stride):  # row-major (or no unit stride: either order will do)
        if exact and full and col_stride == 1 and row_stride == cols:
            return VIEW_C
        if not full:
            staged_c[:, :] = fill
        _copy(memory, base, row_stride, col_stride, count_rows, count_cols, staged_c, bits)
        return STAGED_C
    if exact and full and row_stride == 1 and col_stride == rows:
        return VIEW_F
    if not full:
        staged_t[:, :] = fill
    _copy(memory, base, col_stride, row_stride, count_cols, count_rows, staged_t, bits)
    return STAGED_F


def _gemm(dtype, *args):  # pragma: no cover  (numba overload below)
    raise NotImplementedError


@numba.extending.overload(_gemm, jit_options={"cache": True})
def _gemm_impl(dtype, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads):
    """The Fortran gemm of `dtype` (float32 sgemm, float64 dgemm; every argument an address) on one BLAS
    thread: `threads` addresses an int32 holding 1, which takes the previous setting meanwhile."""
    gemm = _dgemm if dtype.dtype == types.float64 else _sgemm

    def call(dtype, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads):
        previous = _threads_local(threads)
        gemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        numba.carray(as_pointer(threads, np.int32), 1)[0] = previous
        _threads_local(threads)  # (0, the usual previous setting, means torch's global count)
    return call


@_jit
def _leading(row_stride, col_stride, rows, cols):
    """How gemm reads an operand tile where it lies: (0, ld) when its columns have unit stride (a
    row-major matrix with leading dimension `ld`), (1, ld) when its rows do (column-major), (-1, 0)
    when neither or when `ld` would be below what BLAS accepts (the contiguous extent) or overlap.
    A dim of one element has no stride that matters."""
    if (cols == 1 or col_stride == 1) and (rows == 1 or row_stride >= cols):
        return 0, row_stride if rows > 1 else cols
    if (rows == 1 or row_stride == 1) and (cols == 1 or col_stride >= rows):
        return 1, col_stride if cols > 1 else rows
    return -1, 0


@_jit
def _finite(value):
    return value - value == 0  # False for NaN and +-Inf


@_jit
def _zero_or_nan(memory, base, stride, count):
    """The padded lane's sum, fill 0 times each of `count` elements: 0, or NaN when one of them is NaN
    or Inf (0 * Inf is NaN)."""
    for k in range(count):
        if not _finite(memory[base + k * stride]):
            return np.nan
    return 0.0


@_jit
def _gemm_call(a_memory, a_base, a_row_stride, a_col_stride, b_memory, b_base, b_row_stride, b_col_stride,
               count_m, count_n, depth, out, out_base, ldc, alpha=1.0, beta=0.0):
    """out[out_base + i * ldc + j] = alpha * (a @ b)[i, j] (+ beta * itself) for i < count_m, j < count_n,
    by one gemm reading both operands (memory of out's dtype) where they lie; False, with nothing
    written, when BLAS cannot read them so (no unit stride, a leading dimension below the extent or
    beyond int32) or `ldc` is."""
    a_order, a_ld = _leading(a_row_stride, a_col_stride, count_m, depth)
    b_order, b_ld = _leading(b_row_stride, b_col_stride, depth, count_n)
    if a_order < 0 or b_order < 0 or a_base < 0 or b_base < 0 or out_base < 0 or ldc < count_n or \
            max(a_ld, b_ld, ldc) > _INT32_MAX:
        return False  # (LP64 BLAS takes 32-bit sizes)
    # b row-major is b^T column-major ('n'); a row-major is a^T column-major ('n'). Fortran BLAS takes
    # every argument by address: [transa, transb], [m, n, k, ldb, lda, ldc, BLAS threads], [alpha, beta].
    flags = np.empty(2, dtype=np.uint8)
    flags[0] = _NOTRANS if b_order == 0 else _TRANS
    flags[1] = _NOTRANS if a_order == 0 else _TRANS
    sizes = np.empty(7, dtype=np.int32)
    sizes[0], sizes[1], sizes[2] = count_n, count_m, depth
    sizes[3], sizes[4], sizes[5], sizes[6] = b_ld, a_ld, ldc, 1
    scale = np.empty(2, dtype=out.dtype)
    scale[0], scale[1] = alpha, beta
    f, i, s, item = flags.ctypes.data, sizes.ctypes.data, scale.ctypes.data, out.itemsize
    _gemm(out, f, f + 1, i, i + 4, i + 8, s, b_memory.ctypes.data + b_base * item, i + 12,
          a_memory.ctypes.data + a_base * item, i + 16, s + item, out.ctypes.data + out_base * item, i + 20,
          i + 24)
    # used after the call, so that numba releases the three arrays only then (it frees an array after
    # its last use, and raw addresses are not uses)
    return flags.size + sizes.size + scale.size > 0


@_jit
def _direct(a_memory, a_base, a_row_stride, a_col_stride, a_rows, a_cols, a_count_rows, a_count_cols, a_fill,
            b_memory, b_base, b_row_stride, b_col_stride, b_rows, b_cols, b_count_rows, b_count_cols, b_fill,
            out, padding_read):
    """`out` = a @ b by one gemm on the counted part of the operands' memory (of the work dtype), or
    False with nothing written. `out` is (M, N) C-contiguous: gemm writes the column-major transpose
    of its counted (count_m, count_n) block, b^T a^T, with leading dimension N.

    With `padding_read` False (the generated kernel reads the product only at counted rows and columns:
    `dot_padding`), the lanes outside the counted block are left as they are. Else masked lanes must
    be exact too (nothing else says a caller stores only counted ones), so each edge needs fill 0
    there: K lanes masked on both sides alike add 0 * 0 to every sum; a masked row of a sums
    0 * b[k, n] over k, which is 0 unless column n of b holds a NaN/Inf (then NaN), and that
    column's NaN/Inf would make the counted row 0's sum non-finite as well, so b is read only when
    out[0, n] is not finite (rare); masked columns of b likewise; the corner is 0."""
    count_m, count_n, depth = a_count_rows, b_count_cols, a_count_cols
    if count_m <= 0 or count_n <= 0 or depth < 0:
        return False
    if (count_m != a_rows and a_fill != 0) or (count_n != b_cols and b_fill != 0):
        return False
    if a_count_cols != a_cols or b_count_rows != b_rows:
        if a_count_cols != b_count_rows or a_fill != 0 or b_fill != 0:
            return False
    if depth == 0:
        out[:, :] = 0
        return True
    if not _gemm_call(a_memory, a_base, a_row_stride, a_col_stride, b_memory, b_base, b_row_stride,
                      b_col_stride, count_m, count_n, depth, out.reshape(out.size), 0, out.shape[1]):
        return False
    rows, cols = out.shape
    if not padding_read:
        return True
    if count_m < rows:
        for n in range(count_n):
            value = 0.0
            if not _finite(out[0, n]):
                value = _zero_or_nan(b_memory, b_base + n * b_col_stride, b_row_stride, depth)
            for m in range(count_m, rows):
                out[m, n] = value
    if count_n < cols:
        for m in range(count_m):
            value = 0.0
            if not _finite(out[m, 0]):
                value = _zero_or_nan(a_memory, a_base + m * a_row_stride, a_col_stride, depth)
            for n in range(count_n, cols):
                out[m, n] = value
        out[count_m:, count_n:] = 0
    return True


@_jit
def tile_dot_into(out, a_memory, a_base, a_row_stride, a_col_stride, a_rows, a_cols, a_fill, a_c, a_t, a_bits,
                  a_exact, b_memory, b_base, b_row_stride, b_col_stride, b_rows, b_cols, b_fill, b_c, b_t,
                  b_bits, b_exact, padding_read):
    """`tile_dot`'s product written into `out`, an (M, N) C-contiguous array of the work dtype, instead
    of a new array: what `dot_call`'s C entry runs (its caller owns the product). The direct gemm where
    both operands' memory has the work dtype and a unit stride, else the staged tiles' gemm
    (`_gemm_tiles`: the same gemm, reading the staged or viewed tiles). `padding_read` False: the
    caller reads only the counted rows and columns, so the direct gemm leaves the others unwritten.

    Staging buffers at address 0 are codegen's placeholders for operands that the direct gemm should
    read in place (memory of the work dtype): allocated here only when this call stages after all (a
    stride that is not unit, a fill in a masked row). Why: the buffers of a wide tile (two of up to
    4 MB per operand) were allocated on every launch and never touched; on a heap that shrinks after
    each launch that meant fresh pages and ~35 page faults per launch (32 x 64 x 64 linear: 117 us,
    torch 6 us)."""
    if a_exact and b_exact:
        rows, depth = a_c.shape
        if _direct(a_memory, a_base, a_row_stride, a_col_stride, rows, depth, a_rows, a_cols, a_fill,
                   b_memory, b_base, b_row_stride, b_col_stride, depth, b_c.shape[1], b_rows, b_cols, b_fill,
                   out, padding_read):
            return
    if a_c.ctypes.data == 0:
        a_c = np.empty(a_c.shape, dtype=a_c.dtype)
        a_t = np.empty(a_t.shape, dtype=a_t.dtype)
    if b_c.ctypes.data == 0:
        b_c = np.empty(b_c.shape, dtype=b_c.dtype)
        b_t = np.empty(b_t.shape, dtype=b_t.dtype)
    a_kind = _stage(a_memory, a_base, a_row_stride, a_col_stride, a_rows, a_cols, a_fill, a_c, a_t, a_bits,
                    a_exact)
    b_kind = _stage(b_memory, b_base, b_row_stride, b_col_stride, b_rows, b_cols, b_fill, b_c, b_t, b_bits,
                    b_exact)
    a_tile = _view(a_memory, a_base, a_t if a_kind == VIEW_F else a_c) if a_kind <= VIEW_F else \
        (a_t if a_kind == STAGED_F else a_c)
    b_tile = _view(b_memory, b_base, b_t if b_kind == VIEW_F else b_c) if b_kind <= VIEW_F else \
        (b_t if b_kind == STAGED_F else b_c)
    a_is_c, b_is_c = a_kind == VIEW_C or a_kind == STAGED_C, b_kind == VIEW_C or b_kind == STAGED_C
    _gemm_tiles(a_tile, a_is_c, b_tile, b_is_c, out)


@_jit
def tile_dot_store(dest, dest_base, dest_ld, scale, accumulate, a_memory, a_base, a_row_stride, a_col_stride,
                   a_rows, a_cols, a_fill, a_c, a_t, a_bits, a_exact, b_memory, b_base, b_row_stride,
                   b_col_stride, b_rows, b_cols, b_fill, b_c, b_t, b_bits, b_exact):
    """The store `dest[dest_base + i * dest_ld + j] = (a @ b)[i, j] * scale` (`accumulate`: `+=`, onto
    the addend the caller stored there) over the counted rows of a (i < a_rows) and columns of b
    (j < b_cols): what a kernel's `tl.store(ptr, tl.dot(a, b) * scale [+ addend])` of a row-major block
    writes (`codegen`'s direct dot store), without the product tile in between.

    Where `tile_dot` would take the direct gemm (both operands of the work dtype, read in place), gemm
    writes the block itself (leading dimension `dest_ld`): without `accumulate` a scale other than 1
    multiplies it there, the same float32 product, rounded, then scaled, as the tile's path computes;
    with it gemm adds `scale * product` to the addend (beta 1, as torch's addmm), rounding once or
    twice as its BLAS does. Otherwise (staging, no unit stride, a product of depth 0, a scale of 0 or
    not finite, whose products gemm would skip) the product tile is computed as `tile_dot` computes it
    and copied (added), scaled, into the block."""
    count_m, count_n, depth = a_rows, b_cols, a_cols
    if count_m <= 0 or count_n <= 0:
        return
    # one counted depth for both, and masked depth lanes (if any) that add 0 * 0 to every sum
    direct = a_exact and b_exact and depth > 0 and depth == b_rows and scale != 0 and scale - scale == 0 and \
        (depth == a_c.shape[1] or (a_fill == 0 and b_fill == 0))
    if direct and accumulate:
        if _gemm_call(a_memory, a_base, a_row_stride, a_col_stride, b_memory, b_base, b_row_stride,
                      b_col_stride, count_m, count_n, depth, dest, dest_base, dest_ld, scale, 1.0):
            return
    elif direct and _gemm_call(a_memory, a_base, a_row_stride, a_col_stride, b_memory, b_base, b_row_stride,
                               b_col_stride, count_m, count_n, depth, dest, dest_base, dest_ld):
        if scale != 1:
            for i in range(count_m):
                row = dest_base + i * dest_ld
                for j in range(count_n):
                    dest[row + j] = dest[row + j] * scale
        return
    out = np.empty((a_c.shape[0], b_c.shape[1]), dtype=a_c.dtype)
    tile_dot_into(out, a_memory, a_base, a_row_stride, a_col_stride, a_rows, a_cols, a_fill, a_c, a_t, a_bits,
                  a_exact, b_memory, b_base, b_row_stride, b_col_stride, b_rows, b_cols, b_fill, b_c, b_t,
                  b_bits, b_exact, False)
    for i in range(count_m):
        row = dest_base + i * dest_ld
        if accumulate:
            for j in range(count_n):
                dest[row + j] = dest[row + j] + out[i, j] * scale
        else:
            for j in range(count_n):
                dest[row + j] = out[i, j] * scale


@_jit
def _gemm_tiles(a, a_is_c, b, b_is_c, out):
    """out = A @ B for staged or viewed tiles, each a C-contiguous array holding A (`a_is_c`) or its
    transpose: the same Fortran gemm as the direct path (torch's MKL where torch exports it), not
    numba's `np.dot`, which binds scipy's BLAS and so imported scipy.linalg (~0.25 s) in every process
    that ran a kernel with `tl.dot`. A loop takes the product if gemm cannot (never for a tile)."""
    rows, depth = (a.shape[0], a.shape[1]) if a_is_c else (a.shape[1], a.shape[0])
    cols = b.shape[1] if b_is_c else b.shape[0]
    a_flat, b_flat = a.reshape(a.size), b.reshape(b.size)
    a_row, a_col = (depth, 1) if a_is_c else (1, rows)
    b_row, b_col = (cols, 1) if b_is_c else (1, depth)
    if _direct(a_flat, 0, a_row, a_col, rows, depth, rows, depth, 0, b_flat, 0, b_row, b_col, depth, cols,
               depth, cols, 0, out, False):
        return
    for m in range(rows):
        for n in range(cols):
            total = 0.0
            for k in range(depth):
                total += a_flat[m * a_row + k * a_col] * b_flat[k * b_row + n * b_col]
            out[m, n] = total


@_jit
def tile_dot(a_memory, a_base, a_row_stride, a_col_stride, a_rows, a_cols, a_fill, a_c, a_t, a_bits, a_exact,
             b_memory, b_base, b_row_stride, b_col_stride, b_rows, b_cols, b_fill, b_c, b_t, b_bits, b_exact):
    """The (M, N) C-contiguous product of two box-load tiles (see the module docstring); `a_c`/`b_c`
    are their C staging buffers, `a_t`/`b_t` those of their transposes, all of the work dtype.
    Generated kernels reach it through `dot_call`'s C entry (`tile_dot_into`); this is its array
    interface, the reference that `tests/dsl/backends/test_dot_call.py` holds the entry to."""
    out = np.empty((a_c.shape[0], b_c.shape[1]), dtype=a_c.dtype)
    tile_dot_into(out, a_memory, a_base, a_row_stride, a_col_stride, a_rows, a_cols, a_fill, a_c, a_t, a_bits,
                  a_exact, b_memory, b_base, b_row_stride, b_col_stride, b_rows, b_cols, b_fill, b_c, b_t,
                  b_bits, b_exact, True)
    return out
