"""torch_rbln: Rebellions NPUs as the PyTorch device `rbln`, in pure Python.

`import torch_rbln` (or the `torch.backends` autoload on `import torch`) registers the device;
everything heavy (numba, jinja2, sqlite-utils, torch._dynamo) is imported lazily on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"


def _autoload() -> None:
    """Entry point of torch's `torch.backends` group: importing this package registered the device."""


from ._registration import register as _register  # noqa: E402

_register()

from . import device_module as rbln  # noqa: E402  (torch.rbln, after registration)
from .fallback import fallback_counts, reset_fallback_counts  # noqa: E402

__all__ = ["__version__", "fallback_counts", "reset_fallback_counts", "rbln"]
