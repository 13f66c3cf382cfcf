"""Printing an rbln tensor formats a host copy of its values, as torch does for XLA and MTIA tensors.

`repr(t)` runs torch's formatter, which slices, takes `abs`/`min`/`max`, compares, `ceil`s and converts
to float64 on the tensor itself: about twenty small ops per print. On rbln each would compile a kernel the
first time (seconds, cold) or take the CPU fallback (float64 has no kernels), so a `print(x)` while
debugging would fill the fallback report with ops the user never called. torch sidesteps the same
problem for its compiled devices by copying to the host first (`_str_intern`'s list of device types is
fixed, so it cannot be extended). We do the same through the formatter's own hook: the values are
formatted from one device-to-host copy and passed as `tensor_contents`, and torch still writes the
suffixes (`device='rbln:0'`, dtype, `grad_fn`, `requires_grad`) from the rbln tensor itself, so the text
is exactly what torch prints for the same values on the host plus the device.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch
import torch._tensor_str as tensor_str

_PREFIX_INDENT = len("tensor(")  # the formatter's indent for a plain tensor or Parameter
_lock = threading.Lock()
_installed: list[Callable] = []  # torch's own `_str`, once replaced


def _host_contents(tensor: torch.Tensor) -> str | None:
    """The formatted values of an rbln tensor from a host copy; None where torch's own path is needed
    (subclasses, other layouts, nested, quantized, functorch wrappers, meta/fake and empty tensors, whose
    text depends on more than the values)."""
    if type(tensor) not in (torch.Tensor, torch.nn.Parameter) or tensor.device.type != "rbln":
        return None
    if tensor.layout != torch.strided or tensor.is_nested or tensor.is_quantized or tensor.is_meta:
        return None
    if torch._C._functorch.is_functorch_wrapped_tensor(tensor) or torch._is_functional_tensor(tensor):
        return None
    if tensor.numel() == 0:
        return None
    with torch.no_grad():
        host = tensor.detach().to("cpu")
    return tensor_str._tensor_str(host, _PREFIX_INDENT)


def install() -> None:
    """Route `repr`/`str` of rbln tensors through `_host_contents` (idempotent)."""
    with _lock:
        if _installed:
            return
        original = tensor_str._str

        def _str(self, *, tensor_contents=None):
            if tensor_contents is None:
                tensor_contents = _host_contents(self)
            return original(self, tensor_contents=tensor_contents)

        _str.__doc__ = original.__doc__
        _str.__wrapped__ = original  # type: ignore[attr-defined]
        tensor_str._str = _str
        _installed.append(original)
