"""The per-call checks of the registry's dispatcher (device, dtype, NaN/Inf) and its per-op count of
device-kernel calls: a module of their own so that the op families (copy, attention) use them without
importing the package that registers them.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from torch_rbln import config

from ._base import FLOATS
from ._finite_scan import all_finite

_device_counts: Counter[str] = Counter()  # op name -> calls that ran a device kernel
# Counters added to `_device_counts` when it is read rather than on every call: a compiled program
# counts its calls (one integer) and registers here a function that adds calls x its per-call counts;
# adding them on every call cost a program call 3 us (the demo model's forward is ~350). Every reader
# of `_device_counts` calls `fold_deferred_counts()` first.
_deferred_counts: list[Callable[[], bool]] = []
_deferred_lock = threading.Lock()


def defer_counts(fold: Callable[[], bool]) -> None:
    """Register a deferred counter: `fold()` adds what it accumulated and returns whether it may count
    again (False once its program is gone, after which it is dropped)."""
    with _deferred_lock:
        _deferred_counts.append(fold)


def fold_deferred_counts() -> None:
    """Add what the deferred counters accumulated to `_device_counts`, dropping finished ones."""
    with _deferred_lock:
        _deferred_counts[:] = [fold for fold in _deferred_counts if fold()]


# (op name, reason) of device calls that took a slower device path and said why at INFO, once until the
# next `registry.reset_fallback_report()` (as CPU fallbacks are logged once per op and reason)
_device_notes: set[tuple[str, str]] = set()


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_inputs(args: tuple, kwargs: dict, int_inputs: bool = False, overwrites_first: bool = False,
                 exact: bool = False) -> str | None:
    """The generic per-call decision: None when a device kernel may run, else the reason.

    Every tensor (also inside list arguments) must be on one rbln device (a 0-dim CPU tensor is a
    wrapped scalar); tensors the kernel reads must be float32/float16/bfloat16 (any integer dtype with
    `int_inputs`) and, outside deploy mode, free of NaN/Inf. Not read: `out=` and the first argument of
    ops that overwrite it whole (fill_, zero_), whose old contents may be anything. `exact`: the op's
    kernel gives torch's CPU result for NaN/Inf too (it moves values, as tril, or does IEEE arithmetic
    on the same values, as mul), so its inputs need no scan.
    This runs on every call, so it is one flat loop (no generators, no helper objects) and a compiled
    scan per checked tensor."""
    check_values = not exact and not config.deploy_mode()
    written = kwargs.get("out") if kwargs else None
    device = None
    skip_first = overwrites_first
    for value in ((*args, *kwargs.values()) if kwargs else args):
        if isinstance(value, Tensor):
            group: tuple | list = (value,)
        elif isinstance(value, (list, tuple)):
            group = value
        else:
            continue
        read_group = value is not written
        for tensor in group:
            if not isinstance(tensor, Tensor):
                continue
            read = read_group and not skip_first
            skip_first = False
            if tensor.is_cpu:
                if tensor.dim():
                    return "CPU tensor operand"  # the fallback raises the device-mismatch error
            elif device is None:
                device = tensor.get_device()
            elif tensor.get_device() != device:
                return "tensors on several devices"
            if not read:
                continue  # only written (out=, a filled self): may be bool/int, the kernel checks it
            dtype = tensor.dtype
            if dtype in FLOATS:
                if check_values and not all_finite(tensor):
                    return "nan_inf"
            elif dtype.is_floating_point or dtype.is_complex or not int_inputs:
                return f"dtype {_dtype_name(dtype)}"
    return "scalar-only inputs" if device is None else None


def _run_device(name: str, impl: Callable, args: tuple, kwargs: dict) -> Any:
    result = impl(*args, **kwargs)
    _device_counts[name] += 1
    return result
