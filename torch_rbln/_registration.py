"""One-time wiring of the rbln device into PyTorch, in pure Python.

Idempotent: `import torch_rbln` twice, or after the `torch.backends` autoload, registers once.
"""

from __future__ import annotations

import sys
import threading

import torch

from . import (
    _accelerator,
    _autocast,
    _autograd,
    _module_conversion,
    _printing,
    _serialization,
    _structural,
    device_module,
    fallback,
)

BACKEND = "rbln"
_lock = threading.Lock()
_done = False
_libraries: list[torch.library.Library] = []  # registrations live as long as these objects


class _DeviceGuard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return device_module.is_available()

    def is_built(self) -> bool:
        return True

    def has_primary_context(self, device_index: int) -> bool:
        return True


def _rename_backend() -> None:
    current = torch._C._get_privateuse1_backend_name()
    if current == BACKEND:
        return
    if current != "privateuseone":
        raise RuntimeError(
            f"torch_rbln cannot register: the PrivateUse1 backend is already named '{current}' "
            "by another extension in this process."
        )
    torch.utils.rename_privateuse1_backend(BACKEND)


_STRUCTURED_COMPOSITE = "CompositeExplicitAutogradNonFunctional"


def _functional_variants() -> list[str]:
    """Structured ops reach a new device as empty_strided + `.out` (two Python calls); binding the
    fallback to their functional and in-place overloads directly halves that overhead."""
    names = []
    for qualified in torch._C._dispatch_get_all_op_names():
        if not qualified.startswith("aten::"):
            continue
        if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, _STRUCTURED_COMPOSITE):
            names.append(qualified[len("aten::"):])
    return names


def _direct_fallback(name: str):
    """The CPU-fallback kernel of one aten overload. The OpOverload is looked up on the first call:
    looking up ~350 of them while `import torch` runs cost ~100 ms."""
    packet_name, _, overload_name = name.partition(".")
    resolved = []

    def kernel(*args, **kwargs):
        if not resolved:
            resolved.append(getattr(getattr(torch.ops.aten, packet_name), overload_name or "default"))
        return fallback.cpu_fallback(resolved[0], *args, **kwargs)

    return kernel


def _with_default(name: str) -> str:
    return name if "." in name else f"{name}.default"


def _create_rbln_ccl(*args):
    """Creator of an `rbln-ccl` group backend; imports the backend on first use only."""
    from torch_rbln.distributed import _backend

    return _backend.create(*args)


def _register_distributed() -> None:
    """Name the `rbln-ccl` backend to torch.distributed (a few dict entries). `import torch` has loaded
    distributed_c10d already; where it has not (a torch without distributed, or one that loads it
    lazily), importing `torch_rbln.distributed` registers instead, so `import torch` stays cheap."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is not None and "RBLN-CCL" not in c10d.Backend._plugins:
        c10d.Backend.register_backend("rbln-ccl", _create_rbln_ccl, devices=["rbln", "cpu"])


def register() -> None:
    global _done
    if _done:
        return
    with _lock:
        if _done:
            return
        _rename_backend()
        if not hasattr(torch.Tensor, "is_rbln"):
            torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
            torch.nn.Module.rbln = _module_conversion.swap_for_rbln(torch.nn.Module.rbln)
        _module_conversion.install()
        _accelerator.install()
        _printing.install()
        module = sys.modules.get("torch.rbln")
        if module is None:
            torch._register_device_module(BACKEND, device_module)
            sys.modules["torch.rbln"] = device_module
        torch._C._acc.register_python_privateuseone_hook(_Hooks())
        torch._C._acc.register_python_privateuseone_device_guard(_DeviceGuard())

        aten_impl = torch.library.Library("aten", "IMPL")
        _structural.register(aten_impl)
        from torch_rbln.registry.table import NAMES as kernel_ops  # no kernels imported here

        structural = {*_structural.METADATA_OPS, *_structural.KERNELS}
        for name in _functional_variants():
            if name not in structural and _with_default(name) not in kernel_ops:
                aten_impl.impl(name, _direct_fallback(name), "PrivateUse1")
        catch_all = torch.library.Library("_", "IMPL")
        catch_all.fallback(fallback.cpu_fallback, dispatch_key="PrivateUse1")
        from torch_rbln import registry

        registry.register_table(aten_impl)  # op-library kernels, replacing the fallback for their overloads
        _libraries.extend([aten_impl, catch_all, *_autocast.register()])
        _serialization.register()
        _autograd.register()
        _register_distributed()
        _done = True
