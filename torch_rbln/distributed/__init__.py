"""torch.distributed on rbln: the `rbln-ccl` process-group backend (README, "Distributed").

`import torch_rbln` registers the backend name; the backend itself (`_backend`) loads when the first
group using it is created. ``rbln-ccl`` runs collectives with gloo on zero-copy host views of rbln
tensors (rbln memory is host memory), so it serves any rbln dtype and layout gloo can move.

* ``dist.init_process_group("rbln-ccl")``: rbln and CPU tensors both go through rbln-ccl.
* ``dist.init_process_group()`` when rbln is the accelerator, or ``"cpu:gloo,rbln:rbln-ccl"``.
* Under torchrun (LOCAL_RANK set), creating a group makes ``rbln:LOCAL_RANK`` the current device
  (:func:`bind_local_device`); more ranks on a host than logical devices is a RuntimeError.
"""

from __future__ import annotations

BACKEND = "rbln-ccl"

__all__ = ["BACKEND", "bind_local_device", "register"]


def register() -> None:
    """Register `rbln-ccl` with torch.distributed (idempotent; `import torch_rbln` normally has)."""
    import torch.distributed as dist

    from .._registration import _create_rbln_ccl

    if dist.is_available() and BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create_rbln_ccl, devices=["rbln", "cpu"])


def bind_local_device() -> int | None:
    """Make ``rbln:LOCAL_RANK`` current (torchrun sets LOCAL_RANK); the index, or None when unset.
    Group creation calls this; call it earlier to place a model before ``init_process_group``."""
    from . import _backend

    return _backend.bind_local_device()


register()
