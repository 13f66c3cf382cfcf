"""Fast paths of the row families not yet migrated to per-signature plans (`plan.py`): softmax over
short rows, layer norm, and sum/mean/amax/amin over the last dim or over all elements; and `_Plan`,
the kept-launch record that `_fast_rows`, `_fast_matmul`, `attention` and `custom` build on.
(The elementwise family runs on plans: `elementwise.py`.)

A registered op pays for generality on every call: the generic input checks, type promotion,
broadcasting and `out=` handling, the kernel's launch bookkeeping. On a small tensor that is most of
the time. A fast path takes a call only when it is the plain case (tensors of one floating dtype, one
shape, contiguous, on one rbln device, finite unless TORCH_RBLN_DEPLOY=ON, a kernel specialisation
that has run before, one NPU for the grid) and returns None otherwise, so the dispatcher runs the
general implementation, which makes every decision again and logs any fallback. Results are the
same either way: the same kernel runs with the same arguments.
"""

from __future__ import annotations

import math
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
from ._memo import PlanMemo
from ._ops import (
    _ONE_BLOCK,
    FLOATS,
    _k,
    norm_launch,
    softmax_row_key,
)

FastPath = Callable[[tuple, dict], "Tensor | None"]


def _contiguous_rbln(x) -> int:
    """The device index of `x` when it is a contiguous rbln tensor, else -1 (a CPU or meta tensor, a
    strided one, not a tensor)."""
    if not isinstance(x, Tensor) or not x.is_contiguous():
        return -1
    return x.get_device()  # -1 for CPU and meta tensors


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


def _row_launch(plan: _Plan | None, x: Tensor, index: int) -> Callable | None:
    """`plan.ready` for a row kernel's plan (`programs` rows of `n` elements), None without a plan."""
    return None if plan is None else plan.ready(x, index, plan.programs * plan.n)


_PLANS: weakref.WeakSet[_Plan] = weakref.WeakSet()  # every live plan (a memo's eviction drops its own)


def _reset_plans(kernel) -> None:
    """Make the plans of `kernel` fetch their launch again (`launcher`): its `clear_cache()` ran and
    `_launch` dropped the launches they hold, so the next call takes the general path, which compiles
    afresh and keeps the new launch."""
    for plan in list(_PLANS):
        if plan.kernel is kernel:
            plan.run = plan.backend = None


on_clear_cache(_reset_plans)


def softmax(*, log: bool) -> FastPath:
    """The fast path of `_softmax` / `_log_softmax(x, dim, half_to_float=False)` over the last dim of a
    contiguous tensor whose rows fit one block (the one-pass row kernel). Flat, as `binary`."""
    def new_plan(plan_key: tuple) -> _Plan | None:
        dtype, shape, dim = plan_key
        nd = len(shape)
        if dtype not in FLOATS or nd == 0 or dim % nd != nd - 1:
            return None
        n = shape[-1]
        if n == 0 or n > _ONE_BLOCK:
            return None
        key, _ = softmax_row_key(dtype, n, log)
        plan = _Plan(_k("rows").softmax_row_kernel, key, 0, dtype, dtype, math.prod(shape) // n)
        plan.n = n
        return plan

    plans: dict[tuple, _Plan | None] = PlanMemo(1024, new_plan)  # (dtype, shape, dim) -> plan or None

    def fast(args: tuple, kwargs: dict) -> Tensor | None:
        if len(args) != 3 or kwargs:
            return None
        x, dim, half_to_float = args
        if half_to_float is not False or type(dim) is not int:
            return None
        index = _contiguous_rbln(x)
        if index < 0:
            return None
        dtype = x.dtype
        shape = x.shape
        plan = plans[(dtype, shape, dim)]
        run = _row_launch(plan, x, index)
        if run is None:
            return None
        out = _memory.empty(shape, dtype, index)
        run(plan.programs, 1, 1, x, out, plan.n)
        return out

    return fast


class _NormPlan(_Plan):
    """A layer norm's launch for one (dtype, shape, normalized shape, weight?, bias?, deploy mode):
    `programs` rows of `n` elements, the `_memory.triple_layout` of its outputs (out, mean, rstd), and
    its input scan: `scan_all` (one compiled call over x, weight and bias,
    `kernels.rows.inputs_finite`) with the element `counts` it scans of each (0 for an absent weight or
    bias) and whether the words are 32-bit (`wide`). Outside deploy mode the kernel checks its inputs
    itself (`norm_launch`'s check), so the launch by address needs no scan: the scan serves backends
    without one."""

    __slots__ = ("layout", "scan_all", "counts", "wide", "spans")


def layer_norm() -> FastPath:
    """The fast path of `native_layer_norm(x, normalized_shape, weight, bias, eps)` on a contiguous
    tensor with weight and bias (or None) contiguous of its dtype on its device: the launch of
    `_ops.layer_norm`, with the same arguments and outputs (out, mean, rstd)."""

    def new_plan(plan_key: tuple) -> _NormPlan | None:
        dtype, shape, normalized, has_w, has_b, deploy = plan_key
        tail = len(normalized)
        if dtype not in FLOATS or tail == 0 or tail > len(shape) or tuple(shape[-tail:]) != normalized:
            return None
        n = math.prod(normalized)
        numel = math.prod(shape)
        if n == 0 or numel == 0:
            return None
        kernel, key, _ = norm_launch(dtype, dtype, dtype, dtype, dtype, n, rms=False, has_w=has_w,
                                     has_b=has_b, check=not deploy)
        plan = _NormPlan(kernel, key, 0, dtype, dtype, numel // n)
        plan.n = n
        stats_shape = tuple(shape[:-tail]) + (1,) * tail
        plan.layout = _memory.triple_layout(shape, stats_shape, stats_shape)
        plan.scan_all = _k("rows").inputs_finite_entry(3) if numel < PARALLEL_MIN else None
        plan.counts = (numel, n if has_w else 0, n if has_b else 0)
        plan.wide = int(dtype == torch.float32)
        rows = numel // n
        # the element counts `by_address` passes: x, weight, bias (x stands in for an absent one), out,
        # mean, rstd
        plan.spans = (numel, n if has_w else numel, n if has_b else numel, numel, rows, rows)
        return plan

    plans: dict[tuple, _NormPlan | None] = PlanMemo(1024, new_plan)

    def fast(args: tuple, kwargs: dict) -> tuple | None:
        # written flat (one deploy-mode read, the kept launch read inline, no input scan where the
        # checking kernel launches by address): on 4 elements each Python call on the way to the launch
        # is a measurable share
        if len(args) != 5 or kwargs:
            return None
        x, normalized, weight, bias, eps = args
        if not isinstance(x, Tensor) or not x.is_contiguous():
            return None
        index = x.get_device()
        kind = type(eps)
        if index < 0 or (kind is not float and kind is not int):
            return None
        dtype = x.dtype
        kind = type(normalized)
        if kind is not list and kind is not tuple:
            return None
        has_w, has_b = weight is not None, bias is not None
        if has_w and (not isinstance(weight, Tensor) or weight.dtype is not dtype
                      or not weight.is_contiguous() or weight.get_device() != index):
            return None
        if has_b and (not isinstance(bias, Tensor) or bias.dtype is not dtype or not bias.is_contiguous()
                      or bias.get_device() != index):
            return None
        deploy = config.deploy_mode()
        plan = plans[(dtype, x.shape, tuple(normalized), has_w, has_b, deploy)]
        if plan is None:
            return None
        n = plan.n
        if (has_w and weight.numel() != n) or (has_b and bias.numel() != n):
            return None
        programs = plan.programs
        run = plan.run  # `plan.kept(index)`, inline
        if run is None or plan.backend != requested_backend():
            run = plan.launcher()
            if run is None:
                return None  # no kept launch yet
        if programs > 1 and _device_tp(index) > 1:
            return None  # a grid split over a tensor-parallel group: the general launch's
        w = weight if has_w else x  # an absent weight/bias is not read (HAS_W/HAS_B): x stands in
        b = bias if has_b else x
        by_address = plan.by_address
        if by_address is None:  # a launch that raises its faults: scan first, as the general path does
            if not deploy:
                scan_all = plan.scan_all
                if scan_all is not None:
                    xa = x.data_ptr()
                    addresses = (xa, w.data_ptr() if has_w else xa, b.data_ptr() if has_b else xa)
                    if not scan_all(addresses, plan.counts, plan.mask, plan.wide):
                        return None
                elif not (all_finite(x) and (not has_w or plan.finite(weight, n))
                          and (not has_b or plan.finite(bias, n))):
                    return None
            out, mean, rstd = _memory.empty_triple_of(plan.layout, dtype, index)
            run(programs, 1, 1, x, w, b, out, mean, rstd, n, float(eps))
            return out, mean, rstd
        out, mean, rstd = _memory.empty_triple_of(plan.layout, dtype, index)
        xa = x.data_ptr()
        sx, sw, sb, so, sm, sr = plan.spans
        if not by_address(programs, 1, 1, xa, sx, w.data_ptr() if has_w else xa, sw,
                          b.data_ptr() if has_b else xa, sb, out.data_ptr(), so, mean.data_ptr(), sm,
                          rstd.data_ptr(), sr, n, float(eps)):
            # a fault: outside deploy mode most likely the kernel's NaN/Inf check; the general path
            # re-runs the call, which scans (and takes the CPU for such inputs) or reports the fault
            return None
        return out, mean, rstd

    return fast
