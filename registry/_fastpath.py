"""`_Plan`, the kept-launch record that the families not yet on per-signature plans (`plan.py`) build
on (`attention`, `custom`), and `write_only_buffer`.

A `_Plan` names one kernel specialisation by a launch key and keeps its direct launch, with the DSL
backend it was kept for, so a caller's per-call lookup is one compare; `kernel.clear_cache()` resets
it (`_reset_plans`). Its `finite` is the NaN/Inf scan of an input of its dtype.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch import Tensor
from torch_rbln.dsl.jit import on_clear_cache

from torch_rbln import _memory, config
from torch_rbln.tp import device_tp as _device_tp
from torch_rbln.tp import requested_backend

from . import _launch
from ._finite_scan import PARALLEL_MIN, all_finite, contiguous_scan


class _Plan:
    """A fast path's launch for one (dtype, size): kernel, launch key, op code, output dtype, the kept
    direct launch with the DSL backend it was kept for (so the per-call lookup is one compare), and the
    NaN/Inf scan of its inputs (`contiguous_scan` of their dtype). Every plan is listed in `_PLANS` so
    that `kernel.clear_cache()` can reset its kept launch (`_reset_plans`) at no cost to the calls."""

    __slots__ = ("kernel", "key", "op", "out_dtype", "run", "by_address", "backend", "scan", "mask",
                 "programs", "n", "n_vec", "__weakref__")

    def __init__(self, kernel, key: tuple, op: int, out_dtype: torch.dtype, in_dtype: torch.dtype,
                 programs: int = 1) -> None:
        self.kernel, self.key, self.op, self.out_dtype = kernel, key, op, out_dtype
        self.programs = programs  # of an elementwise launch (its grid depends on the size only)
        self.n = 0  # the row length of a row kernel's launch
        self.run: Callable | None = None
        self.by_address: Callable | None = None  # `run.by_address` where the backend has it
        self.backend: str | None = None
        self.scan, self.mask = contiguous_scan(in_dtype)
        _PLANS.add(self)

    def finite(self, x: Tensor, n: int) -> bool:
        """`all_finite(x)` for an input of this plan (contiguous, of its dtype, `n` elements)."""
        return self.scan(x.data_ptr(), n, self.mask) if n < PARALLEL_MIN else all_finite(x)

    def ready(self, x: Tensor, index: int, numel: int) -> Callable | None:
        """The kept launch for a call on input `x` (`numel` elements) on device `index`, or None when the
        general path must take it: a grid split over a tensor-parallel group (the general launch
        handles TP and its failover), no kept launch yet, or a NaN/Inf in `x` outside deploy mode."""
        run = self.kept(index)
        if run is None or (not config.deploy_mode() and not self.finite(x, numel)):
            return None
        return run

    def kept(self, index: int) -> Callable | None:
        """`ready` without the scan: the kept launch, or None for a grid split over a tensor-parallel
        group or before one is kept (for fast paths that scan several inputs themselves)."""
        if self.programs > 1 and _device_tp(index) > 1:
            return None
        run = self.run
        if run is None or self.backend != requested_backend():
            run = self.launcher()
        return run

    def launcher(self) -> Callable | None:
        """The kept unchecked launch, or None until the general path has launched this specialisation
        once (or when the requested backend has none)."""
        backend = requested_backend()
        if self.run is None or backend != self.backend:
            self.run = _launch.unchecked(self.kernel, self.key)
            self.by_address = getattr(self.run, "by_address", None)
            self.backend = backend
        return self.run


def write_only_buffer(buffers: dict, index: int, shape: tuple, limit: int) -> Tensor:
    """A float32 rbln:index buffer of `shape` for a kernel output no caller reads (a forward's rstd or
    logsumexp without autograd): kept in `buffers` (a plan's, per device) when it has at most `limit`
    elements, so later calls skip the allocation. Concurrent calls may write it at once: nothing reads
    it, so that is harmless."""
    buffer = buffers.get(index)
    if buffer is None:
        buffer = _memory.empty(shape, torch.float32, index)
        if buffer.numel() <= limit:
            buffers[index] = buffer
    return buffer


_PLANS: weakref.WeakSet[_Plan] = weakref.WeakSet()  # every live plan (a memo's eviction drops its own)


def _reset_plans(kernel) -> None:
    """Make the plans of `kernel` fetch their launch again (`launcher`): its `clear_cache()` ran and
    `_launch` dropped the launches they hold, so the next call takes the general path, which compiles
    afresh and keeps the new launch."""
    for plan in list(_PLANS):
        if plan.kernel is kernel:
            plan.run = plan.backend = None


on_clear_cache(_reset_plans)
