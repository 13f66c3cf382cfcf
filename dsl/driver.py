"""`triton.runtime.driver` for the DSL: which torch device kernels run on, and what it looks like.

Triton keeps the language apart from the device: host code asks `triton.runtime.driver.active` for the
active torch device (`get_active_torch_device()`), the compilation target (`get_current_target()`, whose
`backend` tutorials compare with "cuda" / "hip") and device properties (`utils.get_device_properties`).
Here the active driver is the rbln driver when torch_rbln has registered the `rbln` device, and a CPU
driver otherwise; `driver.set_active(...)` swaps it, as Triton's `driver.set_active` does.

Programs of a DSL kernel run on host threads, so the "device properties" describe that execution model:
`multiprocessor_count` is the number of programs that can run at once (host CPUs), and the register and
shared-memory figures are nominal values chosen so that GPU occupancy formulas (02-fused-softmax) give a
finite, positive program count; no kernel result depends on them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["GPUTarget", "DeviceProperties", "RblnDriver", "CpuDriver", "driver"]

# Nominal figures (see the module docstring): a 64K-entry register file, 1 MiB of scratch per core.
_NOMINAL_REGS = 65536
_NOMINAL_SCRATCH = 1 << 20
_NOMINAL_LANES = 32
_NOMINAL_THREADS = 2048


@dataclass(frozen=True)
class GPUTarget:
    """Triton's `GPUTarget(backend, arch, warp_size)`; here `backend` is "rbln" or "cpu"."""

    backend: str
    arch: str
    warp_size: int


class DeviceProperties(dict):
    """The properties dict `utils.get_device_properties(index)` returns (Triton's keys)."""


class _Utils:
    """`driver.active.utils`: device queries by index, as Triton's driver utils."""

    def __init__(self, drv: _Driver):
        self._driver = drv

    def get_device_properties(self, index=None) -> DeviceProperties:
        cpus = os.cpu_count() or 1
        return DeviceProperties(
            multiprocessor_count=cpus,
            max_num_regs=_NOMINAL_REGS,
            max_shared_mem=_NOMINAL_SCRATCH,
            warpSize=_NOMINAL_LANES,
            max_threads_per_sm=_NOMINAL_THREADS,
            sm_clock_rate=0,
            mem_clock_rate=0,
            mem_bus_width=0,
            device=str(self._driver.get_active_torch_device()) if index is None else index,
        )

    def __getattr__(self, name):
        # CUDA-only utilities (fill_1d_tma_descriptor, ...): a clear error when *called*, so that code
        # which only looks them up (06-fused-attention's TMA helper) still imports.
        if name.startswith("_"):
            raise AttributeError(name)

        def unsupported(*_args, **_kwargs):
            raise NotImplementedError(
                f"driver.active.utils.{name} is a CUDA driver utility; the {self._driver.backend} driver "
                "has no such thing"
            )

        unsupported.__name__ = name
        return unsupported


class _Driver:
    backend = "cpu"
    arch = "host"

    def __init__(self):
        self.utils = _Utils(self)

    def is_active(self) -> bool:
        return True

    def get_current_target(self) -> GPUTarget:
        return GPUTarget(self.backend, self.arch, _NOMINAL_LANES)

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, index: int) -> None:
        return None

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_device_interface(self):
        import torch

        return torch.cpu

    def get_empty_cache_for_benchmark(self):
        """A buffer do_bench zeroes between runs to flush caches (Triton: 256 MB on the GPU; here 8 MB of
        host memory, about a host L3, which is the cache the programs of a kernel run through)."""
        import torch

        return torch.empty(8 << 20, dtype=torch.int8)

    def clear_cache(self, cache) -> None:
        cache.zero_()

    def __repr__(self):
        return f"<{type(self).__name__} backend={self.backend!r}>"


class CpuDriver(_Driver):
    """Kernels on CPU tensors (no rbln device registered)."""


class RblnDriver(_Driver):
    """Kernels on `rbln` tensors: the active torch device is `rbln:<current device>`."""

    backend = "rbln"
    arch = "rbln-sim"

    @staticmethod
    def available() -> bool:
        import torch

        return hasattr(torch, "rbln") and hasattr(torch.rbln, "current_device")

    def get_active_torch_device(self):
        import torch

        return torch.device("rbln", torch.rbln.current_device())

    def get_current_device(self) -> int:
        import torch

        return torch.rbln.current_device()

    def set_current_device(self, index: int) -> None:
        import torch

        torch.rbln.set_device(index)

    def get_device_interface(self):
        import torch

        return torch.rbln


class _DriverConfig:
    """`triton.runtime.driver`: `active` is chosen on first use (rbln when available) or set explicitly."""

    def __init__(self):
        self._active: _Driver | None = None
        self._default: _Driver | None = None

    @property
    def default(self) -> _Driver:
        if self._default is None:
            self._default = RblnDriver() if RblnDriver.available() else CpuDriver()
        return self._default

    @property
    def active(self) -> _Driver:
        return self._active if self._active is not None else self.default

    def set_active(self, drv: _Driver) -> None:
        self._active = drv

    def reset_active(self) -> None:
        self._active = None


driver = _DriverConfig()
