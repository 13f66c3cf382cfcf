"""The registry's light vocabulary: what the dispatcher needs before any kernel module is imported.

`import torch` with torch_rbln autoloaded registers every table entry; that must not import the DSL,
the kernels or numba (the import-time budget is 150 ms over plain `import torch`). So the dispatcher
and the table use only this module and `Ref`; implementations load on an op's first call.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTEGERS = (torch.int32, torch.int64)


class Decline(Exception):
    """Raised by an implementation: these inputs take the CPU fallback, for `reason`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def require_float(dtype: torch.dtype) -> None:
    """Decline a dtype the floating kernels do not take (the CPU fallback computes it, or raises torch's
    error)."""
    if dtype not in FLOATS:
        raise Decline(f"dtype {str(dtype).replace('torch.', '')}")


class InvalidCall(RuntimeError):
    """Raised by an implementation for a call that torch rejects too (with torch's message), where the
    CPU fallback could not tell: our host views hide aliasing between rbln tensors from torch. The
    dispatcher lets it through to the caller."""


class Ref:
    """A not-yet-imported function, `Ref("rows", "layer_norm")` for `torch_rbln.registry.rows.layer_norm`:
    `ref.get()` imports the module and returns it. Closures that hold a Ref replace it by the function on
    their first call (`resolve`), so later calls pay nothing for the laziness; calling the Ref itself
    forwards to the function (for direct callers such as tests)."""

    __slots__ = ("module", "attr")

    def __init__(self, module: str, attr: str) -> None:
        self.module = module if "." in module else f"torch_rbln.registry.{module}"
        self.attr = attr

    def get(self) -> Any:
        return getattr(importlib.import_module(self.module), self.attr)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.get()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Ref({self.module}:{self.attr})"


def resolve(value: Any) -> Any:
    """`value` itself, or what it refers to when it is a `Ref`."""
    return value.get() if value.__class__ is Ref else value


class LazyModule:
    """A module placeholder bound to a global name: the first attribute read imports the module and
    rebinds the global to it, so code that reads `O.binary` through the global pays the import once and
    the placeholder never again."""

    __slots__ = ("_namespace", "_alias", "_module")

    def __init__(self, namespace: dict, alias: str, module: str) -> None:
        self._namespace, self._alias, self._module = namespace, alias, f"torch_rbln.registry.{module}"

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self._module)
        self._namespace[self._alias] = module
        return getattr(module, attr)
