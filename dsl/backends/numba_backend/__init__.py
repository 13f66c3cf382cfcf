"""The numba backend: IR -> jinja2 template -> Python source -> numba machine code."""

from .executable import Executable, compile  # noqa: F401
