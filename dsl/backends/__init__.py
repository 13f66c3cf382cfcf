"""Backend table.  A backend turns an `ir.Function` into an executable with
`run(grid: tuple[int, int, int], args: list)` where `args` holds, per `Function.params` entry, a numpy
flat view (ptr), a Python number (scalar) or None (none/constexpr).  An executable with
`takes_tensors = True` is launched with `launch(grid, values, tp)` instead (tensors, numbers or None
per param, and the tensor-parallel size), and `compile_now(values)` compiles without running.

- `numba` (default): IR -> jinja2 template -> Python source -> numba machine code.
- `interpret`: numpy, one program at a time; exact reference semantics, works under pdb.
- `rebel`: Rebellions' compiler (`rebel.triton`), where installed; handled in `jit` since it takes
  the kernel's Triton source rather than our IR.

Backends register a factory `compile(fn: ir.Function) -> executable` under a name; the factory module
is imported lazily, so adding `numba` or `rebel` later is one line in `_BACKENDS`.
"""

from __future__ import annotations

import importlib

ENV_VAR = "TORCH_RBLN_DSL_BACKEND"
DEFAULT = "numba"

# name -> (module, factory attribute)
_BACKENDS: dict[str, tuple[str, str]] = {
    "numba": ("torch_rbln.dsl.backends.numba_backend", "compile"),
    "interpret": ("torch_rbln.dsl.backends.interpret", "compile"),
    "rebel": ("torch_rbln.dsl.backends.rebel", "compile_ir"),
}
_extra: dict[str, object] = {}


def register_backend(name: str, factory) -> None:
    """Register a backend factory `factory(fn: ir.Function) -> executable`."""
    _extra[name] = factory


def available() -> list[str]:
    return sorted(set(_BACKENDS) | set(_extra))


def requested() -> str | None:
    """The raw $TORCH_RBLN_DSL_BACKEND (None when unset), cheaply: part of every launch's cache key."""
    from torch_rbln import config

    return config.raw(ENV_VAR)


def resolve(name: str | None) -> str:
    """The backend name to use: `name`, else $TORCH_RBLN_DSL_BACKEND, else the default."""
    source = "backend="
    if name is None:
        name = requested()
        source = ENV_VAR + "="
    if name is None:
        return DEFAULT
    if not isinstance(name, str):
        raise ValueError(f"backend= must be a string, got {name!r}; valid backends: {', '.join(available())}")
    name = name.strip().lower()
    if name not in _BACKENDS and name not in _extra:
        raise ValueError(f"unknown DSL backend {source}{name!r}; valid backends: {', '.join(available())}")
    return name


def get_factory(name: str):
    name = resolve(name)
    if name in _extra:
        return _extra[name]
    mod, attr = _BACKENDS[name]
    return getattr(importlib.import_module(mod), attr)
