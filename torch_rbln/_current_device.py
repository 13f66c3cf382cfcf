"""`Tensor.to("rbln")` on the current device, for a device whose C++ guard cannot say which that is.

PyTorch's C++ `to()` gives an unindexed device its index from the device guard before any kernel
runs; a Python PrivateUse1 backend's guard is a stub that answers 0. The wrapper installed here adds
the calling thread's current rbln index (`torch.rbln.current_device()`) to an unindexed rbln target
first. It is installed the first time a thread makes a device other than 0 current, so programs that
only use rbln:0 (or explicit indices) never pay for it; afterwards it costs one thread-local read per
`Tensor.to` call.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch

__all__ = ["install"]

_lock = threading.Lock()
_installed = False


def _indexed(device: Any, index: int) -> Any:
    """`device` with the current index when it is an unindexed rbln device, else unchanged."""
    if type(device) is str:
        return torch.device("rbln", index) if device == "rbln" else device
    if type(device) is torch.device and device.type == "rbln" and device.index is None:
        return torch.device("rbln", index)
    return device


def install() -> None:
    """Wrap `torch.Tensor.to` (idempotent)."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        from .device_module import current_device

        original = torch.Tensor.to

        @functools.wraps(original)
        def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            index = current_device()
            if index:
                if args:
                    args = (_indexed(args[0], index), *args[1:])
                device = kwargs.get("device")
                if device is not None:
                    kwargs["device"] = _indexed(device, index)
            return original(self, *args, **kwargs)

        torch.Tensor.to = to
        _installed = True
