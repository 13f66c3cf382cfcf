"""Keep `Module.to("rbln")` (and `.cpu()`, `.half()` ... on rbln modules) in place, as for CUDA.

`nn.Module._apply` converts a parameter in place (`param.data = converted`) only when the two tensors
have a "compatible shallow-copy type", a C++ check that lists CPU, CUDA, MPS, HIP, XPU and HPU but not
PrivateUse1. For rbln it therefore builds new `Parameter` objects, which silently unties shared weights
(a language model's embedding and LM head become two copies, and training updates only one) and
invalidates parameter references held elsewhere (an optimizer built before `.to`).

PyTorch's own remedy is swap mode (`torch.__future__.set_swap_module_params_on_conversion(True)`):
the existing Parameter objects receive the converted tensors via `torch.utils.swap_tensors`, so ties
and references survive. We switch it on for exactly the conversions that involve rbln: `Module.to`
with an rbln target, `Module.rbln()`, and any `_apply` on a module that holds rbln tensors.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch

_lock = threading.RLock()
_installed = False


def _holds_rbln(module: torch.nn.Module) -> bool:
    tensors = (*module.parameters(), *module.buffers())
    return any(tensor.device.type == "rbln" for tensor in tensors)


def _target_is_rbln(args: tuple, kwargs: dict) -> bool:
    try:
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
    except (TypeError, RuntimeError):
        return False  # Module.to raises its own error for these arguments
    return device is not None and device.type == "rbln"


def _swapping(call: Callable[..., Any]) -> Any:
    """Run `call()` with swap mode on (restored after, also on error)."""
    with _lock:
        previous = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(True)
        try:
            return call()
        finally:
            torch.__future__.set_swap_module_params_on_conversion(previous)


def install() -> None:
    """Wrap `nn.Module.to` and `nn.Module._apply` (idempotent)."""
    global _installed
    if _installed:
        return
    original_to = torch.nn.Module.to
    original_apply = torch.nn.Module._apply

    @functools.wraps(original_to)
    def to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        if _target_is_rbln(args, kwargs):
            return _swapping(lambda: original_to(self, *args, **kwargs))
        return original_to(self, *args, **kwargs)

    @functools.wraps(original_apply)
    def _apply(self: torch.nn.Module, fn: Callable, recurse: bool = True) -> torch.nn.Module:
        if not torch.__future__.get_swap_module_params_on_conversion() and _holds_rbln(self):
            try:
                return _swapping(lambda: original_apply(self, fn, recurse))
            except RuntimeError as error:
                if "Couldn't swap" not in str(error):
                    raise
                return _apply_with_new_parameters(self, fn, recurse, error)
        return original_apply(self, fn, recurse)

    torch.nn.Module.to = to
    torch.nn.Module._apply = _apply
    _installed = True


def _apply_with_new_parameters(module: torch.nn.Module, fn: Callable, recurse: bool,
                               error: RuntimeError) -> torch.nn.Module:
    """Convert when swap mode cannot: a parameter referenced by a live autograd graph (an output of the
    module still alive) cannot be swapped, and a pure-Python device cannot change a tensor's device in
    place either (CUDA's `param.data = ...`). The module gets new Parameter objects, one per original
    (a parameter shared by several modules stays shared), with their gradients converted too; a WARNING
    says that references held elsewhere (an optimizer) still see the old tensors. A swap may have
    happened before the failure: those parameters are converted already and are left as they are."""
    from .log import get_logger

    converted: dict[int, torch.Tensor] = {}
    target = None
    modules = list(module.modules()) if recurse else [module]
    for owner in modules:
        for key, param in owner._parameters.items():
            if param is None:
                continue
            new = converted.get(id(param))
            if new is None:
                with torch.no_grad():
                    applied = fn(param)
                if applied is param:
                    new = param
                else:
                    new = torch.nn.Parameter(applied, param.requires_grad)
                    if param.grad is not None:
                        new.grad = fn(param.grad)
                converted[id(param)] = new
                target = target or new.device
            owner._parameters[key] = new
        for key, buffer in owner._buffers.items():
            if buffer is not None:
                new = converted.get(id(buffer))
                if new is None:
                    new = converted[id(buffer)] = fn(buffer)
                owner._buffers[key] = new
    get_logger("device").warning(
        "%s: %s (its parameters are used by a live autograd graph, e.g. an output that is still alive); "
        "converted it to %s with new Parameter objects instead (parameters shared between modules stay "
        "shared). An optimizer built before this conversion still holds the old tensors: rebuild it.",
        type(module).__name__, error, target,
    )
    return module


def swap_for_rbln(method: Callable[..., torch.nn.Module]) -> Callable[..., torch.nn.Module]:
    """Wrap a conversion method that always targets rbln (the generated `Module.rbln()`)."""

    @functools.wraps(method)
    def converted(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        return _swapping(lambda: method(self, *args, **kwargs))

    return converted
