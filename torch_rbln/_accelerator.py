"""`torch.accelerator` for rbln: route the calls a pure-Python device cannot serve from C++.

`torch.accelerator.synchronize()`, `memory_stats()` (and `memory_allocated()` & co., which read it),
`reset_peak_memory_stats()`, `empty_cache()`, `get_memory_info()` and the current-device index go
through PyTorch's C++ device guard and caching-allocator registry. A Python PrivateUse1 backend can
register neither (its device guard is a fixed stub), so those calls raise ("Backend doesn't support
synchronizing all streams on device", an internal assert asking users to report a PyTorch bug).

Each function below replaces its `torch.accelerator` counterpart with one that serves the call from
`torch.rbln` when the current accelerator is rbln and calls PyTorch's own otherwise, so a program that
uses another accelerator alongside torch_rbln is unaffected.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["install"]


def _on_rbln(device: Any) -> bool:
    """Whether a `torch.accelerator` call with this device argument is about an rbln device."""
    if device is not None and not isinstance(device, int):
        return torch.device(device).type == "rbln"
    accelerator = torch._C._accelerator_getAccelerator()
    return accelerator is not None and accelerator.type == "rbln"


def _routed(original: Callable, ours: Callable) -> Callable:
    @functools.wraps(original)
    def call(device: Any = None, /) -> Any:
        if _on_rbln(device):
            return ours(device)
        return original() if device is None else original(device)

    call.__wrapped_for_rbln__ = True
    return call


def _memory_stats(device: Any) -> OrderedDict[str, Any]:
    return OrderedDict(sorted(torch.rbln.memory_stats(device).items()))


def _set_device_index(device: Any) -> None:
    torch.rbln.set_device(device)


def _current_device_index_for(original: Callable) -> Callable:
    @functools.wraps(original)
    def call() -> int:
        if _on_rbln(None):
            return torch.rbln.current_device()
        return original()

    call.__wrapped_for_rbln__ = True
    return call


_ROUTES: dict[str, Callable[[Any], Any]] = {
    "synchronize": lambda device: torch.rbln.synchronize(device),
    "memory_stats": _memory_stats,
    "reset_peak_memory_stats": lambda device: torch.rbln.reset_peak_memory_stats(device),
    "reset_accumulated_memory_stats": lambda device: torch.rbln.reset_peak_memory_stats(device),
    "empty_cache": lambda device: torch.rbln.empty_cache(),
    "get_memory_info": lambda device: torch.rbln.mem_get_info(device),
}


def install() -> None:
    """Replace the `torch.accelerator` functions above (idempotent)."""
    import torch.accelerator as accelerator
    import torch.accelerator.memory as memory

    for name, ours in _ROUTES.items():
        for module in (accelerator, memory):
            original = getattr(module, name, None)
            if original is None or getattr(original, "__wrapped_for_rbln__", False):
                continue
            setattr(module, name, _routed(original, ours))
    for name in ("set_device_index", "set_device_idx"):
        original = getattr(accelerator, name, None)
        if original is not None and not getattr(original, "__wrapped_for_rbln__", False):
            setattr(accelerator, name, _routed(original, _set_device_index))
    for name in ("current_device_index", "current_device_idx"):
        original = getattr(accelerator, name, None)
        if original is not None and not getattr(original, "__wrapped_for_rbln__", False):
            setattr(accelerator, name, _current_device_index_for(original))
