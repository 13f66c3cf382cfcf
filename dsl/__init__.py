"""torch_rbln.dsl: a Triton-compatible kernel language.

This module is both `triton` (`jit`, `cdiv`, `next_power_of_2`, `heuristics`, `CompilationError`) and
`triton.language` (`program_id`, `load`, `store`, `dot`, dtypes, ...), so existing kernels run after
changing only their imports::

    import torch_rbln.dsl as tl                    # or: from torch_rbln.dsl import language as tl
    from torch_rbln import dsl as triton
    from torch_rbln.dsl import rbln as rblib       # RBLN libdevice intrinsics

Kernels are compiled to a typed block IR (`torch_rbln.dsl.ir`) and run by a backend chosen with
`backend=` or $TORCH_RBLN_DSL_BACKEND (`torch_rbln.dsl.backends`).
"""

from __future__ import annotations

from . import core as _core
from . import extra, math, runtime  # noqa: F401
from .core import *  # noqa: F401,F403
from .errors import CompilationError, KernelRuntimeError, LaunchError  # noqa: F401
from .jit import CompiledKernel, JITFunction, Specialization, heuristics, jit, specialize  # noqa: F401
from .runtime import register_host_view  # noqa: F401


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def __getattr__(name):
    import importlib

    if name in ("rbln", "language", "testing", "tools", "driver"):
        return importlib.import_module(f"{__name__}.{name}")
    if name in ("autotune", "Config"):  # `triton.autotune` / `triton.Config` live in torch_rbln.autotune
        return getattr(importlib.import_module("torch_rbln.autotune"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_core.__all__) + [
    "jit",
    "JITFunction",
    "CompilationError",
    "KernelRuntimeError",
    "LaunchError",
    "next_power_of_2",
    "heuristics",
    "register_host_view",
    "CompiledKernel",
    "Specialization",
    "specialize",
    "math",
    "extra",
    "runtime",
]
