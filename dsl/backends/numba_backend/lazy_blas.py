"""numba's BLAS check, moved from the first kernel of a process to the first kernel that calls BLAS.

`numba.np.arraymath` runs `_HAVE_BLAS = _check_blas()` when it is imported, and numba imports it while it
sets up its CPU target: at the first compile or cache load of any kernel of the process, `tl.dot` or not.
The check imports `scipy.linalg.cython_blas`, which runs all of `scipy.linalg`'s package init (0.2-0.6 s
here): a large share of a warm process's first launch of a kernel that never multiplies matrices.

The flag only picks, when numba types `np.vdot`-like code, between a BLAS call and a loop, so it may be
answered from the installed files (is scipy's `cython_blas` extension there?). `defer_numba_blas_check`
imports arraymath once with numba's `ensure_blas` answering so, under numba's compiler lock, and puts
numba's function back. The real check (importing scipy's BLAS and numba's guard against a scipy built for
the other Fortran integer width) then runs in numba's own typing of `np.dot` (a compile) and, for kernels
loaded from the cache, in `ensure_blas` below, which the executable calls for each kernel that calls BLAS
before it first runs."""

from __future__ import annotations

import functools
import importlib.util
import os
import sys


def _cython_blas_installed() -> bool:
    """Whether scipy's `linalg/cython_blas` extension is installed, found without importing scipy.linalg."""
    spec = importlib.util.find_spec("scipy")
    if spec is None or not spec.submodule_search_locations:
        return False
    for location in spec.submodule_search_locations:
        try:
            names = os.listdir(os.path.join(location, "linalg"))
        except OSError:
            continue
        if any(name.startswith("cython_blas.") and name.endswith((".so", ".pyd")) for name in names):
            return True
    return False


def defer_numba_blas_check() -> bool:
    """Import `numba.np.arraymath` without its scipy import (see the module docstring); False when numba
    had imported it already (then the check has run: nothing to defer)."""
    if "numba.np.arraymath" in sys.modules:
        return False
    from numba.core.compiler_lock import global_compiler_lock
    from numba.np import linalg

    installed = _cython_blas_installed()

    def answer_from_the_files() -> None:
        if not installed:
            raise ImportError("scipy 0.16+ is required for linear algebra")  # numba's own message

    with global_compiler_lock:  # no compile of another thread sees the stand-in
        if "numba.np.arraymath" in sys.modules:
            return False
        real = linalg.ensure_blas
        linalg.ensure_blas = answer_from_the_files
        try:
            import numba.np.arraymath as arraymath
        finally:
            linalg.ensure_blas = real
        if getattr(arraymath, "ensure_blas", None) is answer_from_the_files:
            arraymath.ensure_blas = real
    return True


@functools.cache
def ensure_blas() -> None:
    """numba's BLAS check (scipy's BLAS imported, its integer width checked), once per process: for a
    kernel loaded from numba's cache, whose first call binds scipy's BLAS without numba typing it."""
    from numba.np.linalg import ensure_blas as check

    check()
