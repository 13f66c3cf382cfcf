"""`backend="rebel"`: hand a kernel to Rebellions' compiler (`rebel.triton`) where it is installed.

A DSL kernel *is* a Triton kernel, so nothing is translated: the original Python function goes to
`rebel.triton.jit`, is compiled per shape and tensor-parallel size with `warmup(..., grid=...)` and
then launched. Without rebel-compiler (hosts with no NPU), a clear error says what to install.
This module is thin on purpose: everything it does is visible in `handoff()`, which tests check.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

INSTALL_HINT = (
    "backend='rebel' needs Rebellions' rebel-compiler (its Triton front end `rebel.triton`), which is "
    "not installed in this environment. Install it from Rebellions' package index "
    "(pip install rebel-compiler, with your RBLN credentials) on a host with RBLN NPUs, or use "
    "backend='numba' (the simulated NPU, default) or backend='interpret' (numpy, for debugging)."
)


class RebelNotInstalled(ImportError):
    """rebel-compiler is missing; the message says what to install and which backends work instead."""


def rebel_triton():
    """The `rebel.triton` module, imported on first use only."""
    try:
        return importlib.import_module("rebel.triton")
    except ImportError as error:
        raise RebelNotInstalled(INSTALL_HINT) from error


@dataclass(frozen=True)
class Handoff:
    """Exactly what goes to rebel.triton for one launch."""

    function: Any  # the kernel's Python function (Triton source)
    source: str
    args: tuple
    constexprs: dict[str, Any] = field(default_factory=dict)
    grid: tuple[int, ...] = (1,)
    tensor_parallel_size: int = 1
    cache_key: tuple = ()


def handoff(kernel, args: tuple, kwargs: dict, grid: tuple[int, ...], tp: int) -> Handoff:
    """Describe the launch of DSL kernel `kernel` (a JITFunction) for rebel.triton.

    Constexpr arguments become keyword meta-parameters (Triton's convention); the compile cache key
    is the kernel source hash, the constexpr values, the argument dtypes/shapes and the TP size, since
    rebel compiles per shape and TP size."""
    bound = kernel.bind(args, dict(kwargs))
    runtime, constexprs = [], {}
    for name in kernel.arg_names:
        if name in kernel.constexpr_params:
            constexprs[name] = bound[name]
        else:
            runtime.append(bound[name])
    shapes = tuple(
        (tuple(value.shape), str(value.dtype)) if hasattr(value, "shape") else type(value).__name__
        for value in runtime
    )
    key = (kernel.cache_key, tuple(sorted(constexprs.items())), shapes, tuple(grid), tp)
    return Handoff(kernel.fn, kernel.src, tuple(runtime), constexprs, tuple(grid), tp, key)


_compiled: dict[tuple, Any] = {}


def compile(kernel, args: tuple, kwargs: dict, grid: tuple[int, ...], tp: int = 1):  # noqa: A001
    """Compile the kernel with rebel.triton for this shape and TP size (once; cached in memory)."""
    plan = handoff(kernel, args, kwargs, grid, tp)
    compiled = _compiled.get(plan.cache_key)
    if compiled is None:
        jitted = rebel_triton().jit(plan.function)
        options = {"tensor_parallel_size": tp} if tp > 1 else {}
        compiled = jitted.warmup(*plan.args, grid=plan.grid, **plan.constexprs, **options)
        _compiled[plan.cache_key] = compiled
    return compiled


def launch(kernel, args: tuple, kwargs: dict, grid: tuple[int, ...], tp: int = 1):
    """Compile (once per shape and TP size) and run the kernel on RBLN NPUs through rebel.triton."""
    plan = handoff(kernel, args, kwargs, grid, tp)
    return compile(kernel, args, kwargs, grid, tp)[plan.grid](*plan.args)


def compile_ir(fn):
    """The backend-table entry: rebel compiles Triton source, not our IR, so `jit` routes kernels to
    `launch` directly; reaching this means something bypassed `jit`."""
    rebel_triton()
    raise RuntimeError(
        f"backend 'rebel' compiles the kernel's Triton source; launch '{fn.name}' with kernel[grid]"
    )
