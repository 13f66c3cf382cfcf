"""Tensor-parallel settings (SPEC-device.md, "Tensor parallelism").

* Eager ops and DSL kernel launches use tp=1 unless ``TORCH_RBLN_USE_DEVICE_TP=ON``, then the logical
  device's group size (:func:`tp_size_for`).
* ``torch.compile(..., backend="rbln")``: ``tensor_parallel_size`` defaults to the group size; an explicit
  option wins (:func:`compile_tp_size`).
* ``TORCH_RBLN_USE_TP_FAILOVER=ON``: a RuntimeError with tp>1 (not set explicitly) is retried with tp=1
  on the root NPU, after a WARNING (:func:`run_with_tp_failover`).

Imports only the standard library.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from torch_rbln import config, topology
from torch_rbln.log import get_logger

__all__ = ["tp_size_for", "group_size", "root_npu", "compile_tp_size", "run_with_tp_failover"]

T = TypeVar("T")


def group_size(device_index: int) -> int:
    """Number of physical NPUs of logical device ``rbln:<device_index>``."""
    return len(topology.check_device_index(device_index).npus)


def root_npu(device_index: int) -> int:
    """The root (first) physical NPU of logical device ``rbln:<device_index>``."""
    return topology.check_device_index(device_index).root


def tp_size_for(device_index: int) -> int:
    """tp for eager ops and DSL kernels: 1, or the group size when TORCH_RBLN_USE_DEVICE_TP=ON.

    The device index is validated in both cases.
    """
    size = group_size(device_index)
    return size if config.get("TORCH_RBLN_USE_DEVICE_TP") else 1


def compile_tp_size(device_index: int, option: int | None = None) -> tuple[int, bool]:
    """``(tp, explicit)`` for torch.compile: an explicit ``tensor_parallel_size`` option wins,
    otherwise the logical device's group size."""
    if option is not None:
        if isinstance(option, bool) or not isinstance(option, int) or option <= 0:
            raise ValueError(f"tensor_parallel_size must be a positive integer, got {option!r}")
        return option, True
    return group_size(device_index), False


def run_with_tp_failover(
    name: str,
    run: Callable[[int], T],
    *,
    device_index: int,
    tp: int,
    explicit: bool = False,
) -> T:
    """``run(tp)``; on RuntimeError with tp>1, not explicit, and TORCH_RBLN_USE_TP_FAILOVER=ON, log a
    WARNING and return ``run(1)`` (the caller runs tp=1 on the root NPU).  Otherwise the error propagates.
    """
    try:
        return run(tp)
    except RuntimeError:
        if tp <= 1 or explicit or not config.get("TORCH_RBLN_USE_TP_FAILOVER"):
            raise
        root = root_npu(device_index)
    get_logger("tp").warning(
        "Model '%s' unsupported with tp=%d. Retrying with tp=1 on root device (NPU %d).", name, tp, root
    )
    return run(1)
