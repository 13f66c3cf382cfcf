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


class StridedTarget(Decline):
    """Raised where an implementation writes only contiguous tensors and the call's target (its `out=`,
    or `self` of an in-place op) is a strided view: the dispatcher then runs the call on a contiguous
    staging tensor and copies that into the view on the device (`staging.py`), the CPU fallback only
    where that cannot be done exactly."""


def require_float(dtype: torch.dtype) -> None:
    """Decline a dtype the floating kernels do not take (the CPU fallback computes it, or raises torch's
    error)."""
    if dtype not in FLOATS:
        raise Decline(f"dtype {str(dtype).replace('torch.', '')}")


def real_number(value: Any, what: str) -> float:
    """A real number argument (a Python bool, int or float: torch's Scalar) as a float; anything else
    (a tensor, a complex number) declines to the CPU fallback, which handles it or raises torch's error."""
    if not isinstance(value, (int, float)):
        raise Decline(f"{what} of type {type(value).__name__}")
    return float(value)


def partial_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether `a` and `b` share memory without being the same view (PyTorch's "partial overlap", which
    its CPU kernels refuse for an output and an input: the result would depend on the order of writes)."""
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr() or not a.numel() or not b.numel():
        return False
    if a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride():
        return False  # the same elements: an in-place style call, which is allowed
    spans = []
    for t in (a, b):
        extent = 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True))
        low = t.data_ptr() + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True)
                                 if stride < 0) * t.element_size()
        spans.append((low, low + extent * t.element_size()))
    return spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1]


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
