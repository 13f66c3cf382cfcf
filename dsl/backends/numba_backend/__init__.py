"""The numba backend: IR -> jinja2 template -> Python source -> numba machine code."""

from . import liveness

liveness.install()  # before any kernel compiles: numba's liveness analysis on bit sets (see liveness.py)

from .executable import Executable, compile  # noqa: E402, F401
