"""One BLAS thread for the BLAS that kernels call, and only for it.

One simulated NPU is one host thread, and `tl.dot` calls BLAS gemm from inside it (numba's `np.dot`
binds scipy's BLAS). A multi-threaded BLAS under several NPU threads oversubscribes the cores
(OpenBLAS busy-waits: small GEMMs got 100x slower under load). Setting OPENBLAS_NUM_THREADS for the
whole process at import would also slow the user's own numpy and torch work, so this limits, through
threadpoolctl, just the library scipy's BLAS bindings load, the first time a kernel that multiplies
is built. An explicit OPENBLAS_NUM_THREADS is the user's choice and is left alone."""

from __future__ import annotations

import functools
import logging
import os

from torch_rbln import config


@functools.cache
def limit_kernel_blas() -> int:
    """Set scipy's BLAS to one thread (once per process); returns how many libraries were limited."""
    log = logging.getLogger("torch_rbln")
    if config.external("OPENBLAS_NUM_THREADS") is not None:
        return 0
    try:
        import scipy
        import scipy.linalg.cython_blas  # noqa: F401 - loads the library numba's np.dot calls
        import threadpoolctl
    except ImportError as error:
        log.debug("kernel BLAS threads not limited: %s", error)
        return 0
    package = os.path.dirname(os.path.realpath(scipy.__file__))
    homes = (package + os.sep, package + ".libs" + os.sep)  # a wheel's own libraries, or a build's
    libraries = [
        library for library in threadpoolctl.ThreadpoolController().lib_controllers
        if library.user_api == "blas" and os.path.realpath(library.filepath).startswith(homes)
    ]
    if not libraries:  # scipy uses a system BLAS that others share: limit that one, as before
        libraries = [library for library in threadpoolctl.ThreadpoolController().lib_controllers
                     if library.user_api == "blas" and library.internal_api == "openblas"]
    for library in libraries:
        library.set_num_threads(1)
    log.debug("kernel BLAS limited to one thread: %s", ", ".join(lib.filepath for lib in libraries))
    return len(libraries)
