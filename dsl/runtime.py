"""Host memory access for kernel arguments.

Kernels address tensor arguments through zero-copy host (numpy) views.  CPU tensors are used as they
are; a tensor on another device type needs a *host view* function returning a CPU tensor that shares
its memory: registered here, or offered by the device module as `torch.<device>.host_view` (torch.rbln
does).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import dtypes as D
from .driver import driver  # noqa: F401  (`triton.runtime.driver`)

_HOST_VIEWS: dict[str, Callable] = {}


def register_host_view(device_type: str, fn: Callable) -> None:
    """Register `fn(tensor) -> cpu tensor sharing memory` for tensors whose `device.type` is `device_type`."""
    if not isinstance(device_type, str) or not callable(fn):
        raise TypeError("register_host_view(device_type: str, fn: callable)")
    _HOST_VIEWS[device_type] = fn


def unregister_host_view(device_type: str) -> None:
    _HOST_VIEWS.pop(device_type, None)


def host_view(t):
    """A CPU tensor sharing memory with `t`."""
    dev = t.device.type
    if dev == "cpu":
        return t
    fn = _HOST_VIEWS.get(dev)
    if fn is None:
        # A device module may offer the view itself (`torch.<device>.host_view`), as torch.rbln does.
        import torch

        fn = getattr(getattr(torch, dev, None), "host_view", None)
    if fn is None:
        raise ValueError(
            f"cannot run a DSL kernel on a tensor on device '{t.device}': no host view is "
            f"registered for device type '{dev}' (known: {sorted(['cpu', *_HOST_VIEWS])})"
        )
    h = fn(t)
    if h.device.type != "cpu":
        raise ValueError(f"the host view registered for '{dev}' returned a tensor on {h.device}")
    return h


def flat_numpy_view(t, dt: D.dtype) -> np.ndarray:
    """1-D numpy array over the elements reachable from `t.data_ptr()` (its span, in elements).

    Element offset 0 is `t.data_ptr()`; the span is 1 + sum((size - 1) * stride), or 0 when empty."""
    import torch

    h = host_view(t).detach()
    if h.numel() == 0:
        span = 0
    else:
        span = 1 + sum((s - 1) * st for s, st in zip(h.shape, h.stride(), strict=False))
    flat = torch.as_strided(h, (span,), (1,), h.storage_offset())
    if h.dtype == torch.bfloat16:
        return flat.view(torch.int16).numpy().view(D.numpy_dtype(D.bfloat16))
    if h.dtype not in (
        torch.float16,
        torch.float32,
        torch.float64,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.bool,
    ):
        if h.dtype.itemsize == 1:  # fp8: raw codes viewed as the ml_dtypes float8 type
            return flat.view(torch.uint8).numpy().view(D.numpy_dtype(dt))
        if h.dtype.itemsize == 2:
            return flat.view(torch.int16).numpy().view(D.numpy_dtype(dt))
        if h.dtype.itemsize == 4:
            return flat.view(torch.int32).numpy().view(D.numpy_dtype(dt))
        return flat.view(torch.int64).numpy().view(D.numpy_dtype(dt))
    return flat.numpy()
