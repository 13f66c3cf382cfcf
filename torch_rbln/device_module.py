"""`torch.rbln`: the device module, shaped like `torch.cuda` where it makes sense for an NPU.

A pure-Python device has no C++ current-device slot: PyTorch's C++ `Tensor.to` fills a missing index
from the device guard, whose Python stub always says 0. So once a thread makes another device current
(`set_device(1)`, `with torch.rbln.device(1)`), `Tensor.to` is wrapped to add the current index to an
unindexed rbln target itself (`_current_device.install`), and `x.to("rbln")`, `Module.to("rbln")` land
on the current device as with CUDA. `torch.accelerator`'s index functions are routed here too.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import torch

from . import _current_device, _dlpack, _memory, _runtime
from . import topology as _topology

_state = threading.local()

DeviceLike = int | str | torch.device | None


def _index_of(device: DeviceLike, *, optional: bool = True) -> int:
    """Normalise a device argument to a logical index, validating it against the topology."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return _runtime.check_index(device)
    device = torch.device(device)
    if device.type != "rbln":
        raise ValueError(f"Expected an rbln device, got '{device}'")
    if device.index is None:
        return current_device()
    return _runtime.check_index(device.index)


def is_available() -> bool:
    """True when at least one logical rbln device exists (simulated NPUs count)."""
    try:
        return _runtime.device_count() > 0
    except (RuntimeError, ValueError):
        return False


def is_initialized() -> bool:
    """Whether the device topology has been built (it is built lazily, at first device use)."""
    return _topology.is_initialized()


def init() -> None:
    """Build the device topology now instead of at first use (raises on invalid mapping variables)."""
    _topology.get_topology()


def device_count() -> int:
    """Number of logical devices `rbln:0..N-1`."""
    return _runtime.device_count()


def physical_device_count() -> int:
    """Number of physical NPUs this process sees."""
    return _topology.physical_device_count()


def current_device() -> int:
    """The calling thread's current logical device index (default 0)."""
    return getattr(_state, "index", 0)


def set_device(device: DeviceLike) -> None:
    """Set the calling thread's current logical device."""
    index = _index_of(device)
    if index:
        _current_device.install()
    _state.index = index


class device:
    """Context manager that makes `device` current for the enclosed block, like `torch.cuda.device`."""

    def __init__(self, device: DeviceLike) -> None:
        self.index = -1 if device is None else _index_of(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        if self.index >= 0:
            set_device(self.index)

    def __exit__(self, *exc: Any) -> bool:
        if self.index >= 0:
            _state.index = self.previous
        return False


class device_of(device):
    """Context manager that makes the device of `tensor` current (a no-op for CPU tensors)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        super().__init__(tensor.get_device() if tensor.device.type == "rbln" else None)


def synchronize(device: DeviceLike = None) -> None:
    """Execution on simulated NPUs is synchronous: validates the device and returns at once."""
    _index_of(device)


def get_device_name(device: DeviceLike = None) -> str:
    index = _index_of(device)
    npus = _runtime.npus_of(index)
    return f"RBLN NPU (simulated, {len(npus)} NPU{'s' if len(npus) > 1 else ''})"


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """What `torch.rbln.get_device_properties` says about a logical device, read like
    `torch.cuda.get_device_properties(i)`'s result (`.name`, `.total_memory`); `props["name"]` also
    works, for code written against the earlier dict."""

    name: str
    npus: tuple[int, ...]
    total_memory: int
    index: int

    @property
    def npu_count(self) -> int:
        return len(self.npus)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def __repr__(self) -> str:
        return (f"_RblnDeviceProperties(name='{self.name}', total_memory={self.total_memory // 2**20}MB, "
                f"npus={list(self.npus)})")


def get_device_properties(device: DeviceLike = None) -> DeviceProperties:
    index = _index_of(device)
    npus = tuple(_runtime.npus_of(index))
    return DeviceProperties(get_device_name(index), npus, _memory.capacity(index), index)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 kernels exist for every op family (float32 accumulation)."""
    return True


def memory_summary(device: DeviceLike = None, abbreviated: bool = False) -> str:
    """A readable table of the device's memory counters, like `torch.cuda.memory_summary`."""
    index = _index_of(device)
    stats = _memory.memory_stats(index)
    free, total = _memory.mem_get_info(index)
    rows = [
        ("allocated now", stats.get("allocated_bytes.all.current", 0)),
        ("allocated peak", stats.get("allocated_bytes.all.peak", 0)),
        ("allocated in total", stats.get("allocated_bytes.all.allocated", 0)),
        ("freed in total", stats.get("allocated_bytes.all.freed", 0)),
        ("free", free),
        ("capacity", total),
    ]
    if abbreviated:
        rows = rows[:2] + rows[-2:]
    width = max(len(label) for label, _ in rows)
    lines = [f"rbln:{index} memory summary ({get_device_name(index)})"]
    lines += [f"  {label:<{width}}  {_memory._fmt(value):>12}" for label, value in rows]
    return "\n".join(lines)


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


def _is_in_bad_fork() -> bool:
    return False


def host_view(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor sharing memory (and sizes, strides, conj/neg bits) with an rbln tensor: simulated
    NPU memory is host memory. DSL kernels and the CPU fallback read and write through it."""
    return _dlpack.to_host_view(tensor)


# -- random numbers: rbln random ops run on the CPU generator ------------------------------------


def manual_seed(seed: int) -> None:
    """Seed the generator rbln random ops draw from (PyTorch's default CPU generator)."""
    torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    torch.default_generator.seed()


def seed_all() -> None:
    seed()


def initial_seed() -> int:
    return torch.default_generator.initial_seed()


def get_rng_state(device: DeviceLike = "rbln") -> torch.Tensor:
    _index_of(device)
    return torch.default_generator.get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state: torch.Tensor, device: DeviceLike = "rbln") -> None:
    _index_of(device)
    torch.default_generator.set_state(new_state.cpu())


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


# -- memory --------------------------------------------------------------------------------------


def memory_allocated(device: DeviceLike = None) -> int:
    return _memory.memory_allocated(_index_of(device))


def max_memory_allocated(device: DeviceLike = None) -> int:
    return _memory.max_memory_allocated(_index_of(device))


def memory_reserved(device: DeviceLike = None) -> int:
    """Equals memory_allocated: there is no caching allocator holding freed blocks."""
    return _memory.memory_allocated(_index_of(device))


def max_memory_reserved(device: DeviceLike = None) -> int:
    return _memory.max_memory_allocated(_index_of(device))


def memory_stats(device: DeviceLike = None) -> dict[str, int]:
    return _memory.memory_stats(_index_of(device))


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    _memory.reset_peak(_index_of(device))


def reset_max_memory_allocated(device: DeviceLike = None) -> None:
    reset_peak_memory_stats(device)


def empty_cache() -> None:
    """Nothing is cached: freed memory returns to the host at once."""


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of the logical device."""
    return _memory.mem_get_info(_index_of(device))


# -- topology --------------------------------------------------------------------------------------


def device_summary() -> str:
    """Print and return the logical -> physical device table."""
    return _topology.device_summary()


def topology() -> _topology.Topology:
    """The device mapping: logical devices (index, physical NPU ids, aggregated flag) and unused NPUs."""
    return _topology.get_topology()


# -- streams and events (a synchronous device: see torch_rbln._streams) ---------------------------

from ._streams import Event, Stream, current_stream, default_stream, set_stream, stream  # noqa: E402, F401
