"""The bounds check of a box access (a 1-D or 2-D block load or store), called from generated kernels.

Why a helper: the check `codegen._Lowering._check_box` emitted inline (a span per axis, the lowest and
highest offsets, the test and the four error writes) was ~60 statements of numba IR per access, a
fifth of the tiny attention backward's IR, typed and lowered again in every kernel; a call is a
dozen, and the helper compiles once per process (and is cached on disk). LLVM inlines it back, so the
compiled check is the same code. Only boxes whose offsets are proven not to wrap while lowering
(`_check_box`'s `exact`) call it; the others keep their inline float64 twin of the offset.

The box: lane (i, j) reads `memory[base + i * s0 + j * s1]` for i < c0, j < c1 (a count of 0 or
less: no lane at all). Out of bounds (an offset below 0 or at least `n`, the memory's length), the
helper writes `err` = [code, site, the offending offset, program] and returns True; the kernel then
returns. Generated kernels name a hash of this file (`codegen._box_check_digest`), so a changed
helper gives a new kernel file, never a stale numba cache entry.

Each helper is compiled for its one int64 signature when this module is imported (or loaded from the
disk cache), and never again: kernels pass the error code, the site and often a stride as literal
ints, and a lazily compiling dispatcher types a literal argument by its value, so it compiled (and
cached) one version of the check per call site, ~0.3 s of CPU each, 26 of them in the README demo."""

from __future__ import annotations

import numba
from numba import types


def _signature(integers: int):
    """bool(err, then `integers` int64 arguments): the one version each helper is compiled for."""
    return types.boolean(types.int64[::1], *([types.int64] * integers))


@numba.njit(_signature(6), cache=True, nogil=True, error_model="numpy", boundscheck=False)
def _outside(err, code, site, program, low, high, n):
    """Whether [low, high] leaves [0, n); if so the fault is recorded in `err` (the offending end)."""
    if low < 0 or high >= n:
        err[0] = code
        err[1] = site
        err[2] = low if low < 0 else high
        err[3] = program
        return True
    return False


@numba.njit(_signature(7), cache=True, nogil=True, error_model="numpy", boundscheck=False)
def box_fault1(err, code, site, program, base, s0, c0, n):
    """The check of a 1-D box (module docstring)."""
    if c0 <= 0:
        return False
    t0 = s0 * (c0 - 1)
    low = base + min(0, t0)
    return _outside(err, code, site, program, low, low + abs(t0), n)


@numba.njit(_signature(9), cache=True, nogil=True, error_model="numpy", boundscheck=False)
def box_fault2(err, code, site, program, base, s0, c0, s1, c1, n):
    """The check of a 2-D box (module docstring)."""
    if c0 <= 0 or c1 <= 0:
        return False
    t0 = s0 * (c0 - 1)
    t1 = s1 * (c1 - 1)
    low = base + min(0, t0) + min(0, t1)
    return _outside(err, code, site, program, low, low + abs(t0) + abs(t1), n)
