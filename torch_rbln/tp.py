"""Tensor-parallel settings (SPEC-device.md, "Tensor parallelism").

* Eager ops and DSL kernel launches use tp=1 unless ``TORCH_RBLN_USE_DEVICE_TP=ON``, then the logical
  device's group size (:func:`tp_size_for`).
* ``torch.compile(..., backend="rbln")``: ``tensor_parallel_size`` defaults to the group size; an explicit
  option wins (:func:`compile_tp_size`).
* ``TORCH_RBLN_USE_TP_FAILOVER=ON``: a RuntimeError with tp>1 (not set explicitly) is retried with tp=1
  on the root NPU, after a WARNING (:func:`run_with_tp_failover`).

This module is also the rbln device's launch policy for the DSL (:func:`device_tp`,
:func:`requested_backend`): `torch_rbln.dsl.jit` asks it through one hook (`set_device_policy`), bound
on the first launch, so the language imports no device module at start-up. Every "tp must be a positive
integer" check is :func:`check_tp`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from torch_rbln import config, topology
from torch_rbln.log import get_logger

__all__ = ["tp_size_for", "group_size", "root_npu", "compile_tp_size", "run_with_tp_failover", "check_tp",
           "device_tp", "requested_backend"]

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
        return check_tp(option, "tensor_parallel_size"), True
    return group_size(device_index), False


def check_tp(value: object, what: str = "tp") -> int:
    """`value` when it is a positive int (not a bool), else ValueError naming `what` (the one place that
    says what a tp is: launch options, autotune keys, torch.compile's tensor_parallel_size)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return value


_group_sizes: dict[int, tuple[object, int]] = {}  # device index -> (topology, group size)


def device_tp(device_index: int) -> int:
    """`tp_size_for(device_index)` without its per-call parsing: the group size is remembered per
    (device, topology object), and TORCH_RBLN_USE_DEVICE_TP is only read for groups of several NPUs (a
    one-NPU device launches with tp=1 whatever it says). Tests that rebuild the topology or change the
    variable get fresh answers. (Fast paths ask on every call of a grid of several programs: the built
    topology is read directly.)"""
    current = topology._topology or topology.get_topology()
    entry = _group_sizes.get(device_index)
    if entry is not None and entry[0] is current:
        size = entry[1]
    else:
        size = group_size(device_index)  # validates the index
        _group_sizes[device_index] = (current, size)
    if size == 1:
        return 1
    return tp_size_for(device_index)


_DSL_BACKEND = "TORCH_RBLN_DSL_BACKEND"


# `requested_backend()`: the raw $TORCH_RBLN_DSL_BACKEND (validated where a backend is chosen), read
# without `os.environ.get`'s KeyError path for a missing key, which cost more than the rest of a cached
# launch's key (every plan's run reads it)
requested_backend: Callable[[], str | None] = config.environ_reader(_DSL_BACKEND)


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
