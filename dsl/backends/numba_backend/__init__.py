"""The numba backend: IR -> jinja2 template -> Python source -> numba machine code."""

import os

# One simulated NPU is one host thread, and `tl.dot` calls BLAS from inside it: a multi-threaded
# BLAS would oversubscribe the cores (OpenBLAS busy-waits; small GEMMs got 100x slower under load).
# Must be set before scipy's BLAS loads; an explicit user setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .executable import Executable, compile  # noqa: E402, F401
