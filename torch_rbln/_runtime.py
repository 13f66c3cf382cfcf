"""The device runtime's view of the hardware: logical devices, their NPUs and memory sizes.

A thin facade over `topology` (device mapping) and `config` (memory size), so the allocator and
the fallback ask one place and never parse the environment themselves.
"""

from __future__ import annotations

from . import config, topology


def device_count() -> int:
    return topology.device_count()


def check_index(index: int) -> int:
    """`index` if `rbln:index` is an assigned logical device; the SPEC's RuntimeError otherwise."""
    topology.check_device_index(index)
    return index


def npus_of(index: int) -> tuple[int, ...]:
    return topology.check_device_index(index).npus


def memory_per_npu_gb() -> float:
    return config.settings().sim_memory_gb
