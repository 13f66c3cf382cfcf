"""One `Plan` per call signature: every decision of a registered call made once, then replayed.

A family module (`elementwise.py`, ...) exposes `signature(args, kwargs)`: a cheap hashable key of
everything its decisions read (dtypes, shapes, devices, contiguity, which overload form), with the
call's operands normalised for the plan, or None for a call whose decisions cannot be keyed (a strided
view, an argument of an unexpected kind: the implementation decides it afresh each time). Its
`plan(key, operands)` makes the decisions for that key (kernel and specialisation, grid, launch key,
output allocation, which inputs the NaN/Inf scan reads) and returns a `Plan`, `NO_PLAN` for a key the
implementation takes, or raises `Decline(reason)` for a key the CPU fallback takes. The dispatcher
(`registry._dispatcher`) keeps the answer per key: the "fast path" is a memo hit.

`Plan.run(operands)` is a flat closure: the result, or None when something only this call's values
show (a NaN/Inf input, an output overlapping an input) sends it to the implementation, which decides
it with its checks and logs any fallback.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch_rbln.dsl.jit import on_clear_cache

from torch_rbln import _memory, config
from torch_rbln.tp import device_tp, requested_backend

from . import _launch
from ._base import Decline
from ._finite_scan import PARALLEL_MIN, all_finite, contiguous_scan
from ._memo import BoundedMemo


def contiguous_rbln(x: Any) -> int:
    """The device index of `x` when it is a contiguous rbln tensor, else -1 (a CPU or meta tensor, a
    strided one, not a tensor): what a family's `signature` keys a plain operand by."""
    return x.get_device() if isinstance(x, Tensor) and x.is_contiguous() else -1


def contiguous_on(x: Any, index: int) -> bool:
    """Whether `x` is a contiguous tensor on rbln device `index`."""
    return isinstance(x, Tensor) and x.is_contiguous() and x.get_device() == index


def finite_of(dtype: torch.dtype) -> Callable[[Tensor, int], bool]:
    """`finite(x, n)`: whether the contiguous `x` of `dtype` (`n` elements) holds no NaN/Inf, through
    the compiled scan of its dtype below the tensor-parallel split size (`all_finite` above it)."""
    scan, mask = contiguous_scan(dtype)

    def finite(x: Tensor, n: int) -> bool:
        return scan(x.data_ptr(), n, mask) if n < PARALLEL_MIN else all_finite(x)

    return finite


def unscanned() -> bool:
    """Stands in for `config.deploy_mode()` in a run that scans nothing: its op is exact on NaN/Inf, or
    its inputs were checked already (integers hold none)."""
    return True


def scanner(dtype: torch.dtype, numel: int) -> Callable[[Tensor], bool]:
    """`finite(x)`: whether the contiguous `x` of `dtype` (`numel` elements) holds no NaN/Inf, True in
    deploy mode (`config.deploy_mode`, read per call)."""
    scan, mask = contiguous_scan(dtype)
    deploy_mode = config.deploy_mode
    if numel < PARALLEL_MIN:
        return lambda x: deploy_mode() or scan(x.data_ptr(), numel, mask)
    return lambda x: deploy_mode() or all_finite(x)


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


class Launch(NamedTuple):
    """One launch decided for a signature, shared by a family's checked implementation and its plans:
    `kernel[(programs, rows)](*tensors, *ints, **keywords)`, kept under `key` (which determines the
    specialisation)."""

    kernel: Any
    key: tuple
    keywords: dict
    programs: int = 1
    rows: int = 1
    ints: tuple = ()


class Family(NamedTuple):
    """One overload's planner: `signature(args, kwargs) -> (key, operands) | None` and `plan(key,
    operands) -> Plan` (or NO_PLAN, or raises `Decline`)."""

    signature: Callable[[tuple, dict], tuple | None]
    plan: Callable[[tuple, tuple], Any]


class Direct(NamedTuple):
    """A plan's kept launch as a compiled graph calls it (`torch_rbln.compiler.program`): by address,
    on a grid decided once, with no per-call check. `launcher(g0, g1, g2, *addressed)` is the kernel's
    `unchecked.by_address` (each tensor as its address and element count, then the scalars; False after
    a kernel fault). `args` lists the runtime arguments in order: ("tensor", i) the plan's operand i,
    ("out", None) the result (allocated as the plan's `shape` and `dtype`, contiguous), ("value", v) a
    number. A launch of several outputs lists them in `outputs` ((shape, strides, dtype) each; the
    call's result is their tuple, followed by `extra`, values the call returns beside them) and names
    them ("out", j)."""

    launcher: Callable
    grid: tuple
    args: tuple
    outputs: tuple | None = None
    extra: tuple = ()


class Plan:
    """Every decision for one call signature. `run(operands)` (set by the family) returns the result or
    None; `reason` is set instead for a signature the CPU fallback takes (`declined`).

    The kernel's kept direct launch (`launcher`, with `backend`, the DSL backend it was kept for, and
    `by_address`, its launch by address where the backend has one: `by_address(g0, g1, g2, address,
    count, ..., scalars)`, False after a kernel fault) is
    fetched from `_launch` on the first run after the plan's first checked launch (`launch_checked`),
    and dropped when the kernel's `clear_cache()` runs (`_forget`)."""

    __slots__ = ("run", "reason", "kernel", "key", "keywords", "programs", "rows", "shape", "dtype",
                 "scanned", "launcher", "by_address", "backend", "__weakref__")

    def __init__(self, kernel: Any = None, key: tuple = (), keywords: dict | None = None, programs: int = 1,
                 rows: int = 1, shape: tuple = (), dtype: Any = None, scanned: tuple = ()) -> None:
        self.run: Callable[[tuple], Any] | None = None
        self.reason: str | None = None
        self.kernel, self.key, self.keywords = kernel, key, keywords or {}
        self.programs, self.rows = programs, rows  # the grid
        self.shape, self.dtype = shape, dtype  # the output allocation
        self.scanned = scanned  # positions of the operands the NaN/Inf scan reads
        self.launcher: Callable | None = None
        self.by_address: Callable | None = None  # the kept launch by address, where the backend has one
        self.backend: str | None | bool = False  # False: no launch fetched (None is the default backend)
        if kernel is not None:
            _PLANS.add(self)

    @classmethod
    def of(cls, launch: Launch, shape: tuple, dtype: Any, scanned: tuple = (0,)) -> Plan:
        """The plan of one decided `launch` writing a result of `shape` and `dtype`."""
        return cls(launch.kernel, launch.key, launch.keywords, launch.programs, launch.rows, shape, dtype,
                   scanned)

    @classmethod
    def declined(cls, reason: str) -> Plan:
        plan = cls()
        plan.reason = reason
        return plan

    def kept(self) -> Callable | None:
        """The kept unchecked launch for the requested backend, or None before the first launch. A run
        reads it as `plan.launcher if plan.backend == requested_backend() else plan.kept()`: `backend`
        is False (never a backend's name, nor None, the default's) until a launch is fetched, and again
        after each checked launch, so that is one compare."""
        backend = requested_backend()
        if self.launcher is None or backend != self.backend:
            self.launcher = _launch.unchecked(self.kernel, self.key)
            self.by_address = getattr(self.launcher, "by_address", None)
            self.backend = backend
        return self.launcher

    def direct(self, operands: tuple) -> Direct | None:
        """The kept launch for a compiled graph (see `Direct`), or None (the default: a family that
        describes none, or no launch kept yet). `operands`: one call's, whose numbers it may bake in."""
        return None

    def direct_launcher(self, index: int) -> Callable | None:
        """`by_address` for a family's `direct` on rbln:`index`, or None: no launch kept yet, one kept
        for another DSL backend, or a grid of several programs that the device's tensor-parallel group
        would split (the checked launch's business)."""
        if self.by_address is None or self.backend != requested_backend() or \
                (self.programs * self.rows > 1 and device_tp(index) > 1):
            return None
        return self.by_address

    def launch_checked(self, args: tuple) -> None:
        """The checked launch (`kernel[grid]`, tensor-parallel groups included), which keeps the direct
        launch that later runs use."""
        _launch.launch(self.kernel, self.programs, self.key, args, self.keywords, rows=self.rows)
        self.launcher, self.backend = None, False  # the next run fetches the launch this one kept


NO_PLAN = Plan()  # a signature the implementation takes (it decides every call of it itself)
NO_PLAN.run = None


def memoized(family: Family, limit: int = 1024) -> Callable[..., Any]:
    """The plans of `family` outside the table's dispatcher (custom ops' shortcuts): `run(*args,
    **kwargs)` gives the result of the plan kept for the call's signature, or None where the checked
    path takes the call (no key, NO_PLAN, a declined key: the checked path declines it with its reason,
    or values that the plan's run leaves to it). Its memo is `run.plans`."""
    plans: dict = BoundedMemo(limit)
    signature, build = family.signature, family.plan

    def run(*args: Any, **kwargs: Any) -> Any:
        signed = signature(args, kwargs)
        if signed is None:
            return None
        key, operands = signed
        plan = plans.get(key)
        if plan is None:
            try:
                plan = build(key, operands)
            except Decline:
                plan = NO_PLAN
            plans[key] = plan
        return None if plan.run is None else plan.run(operands)

    run.plans = plans  # type: ignore[attr-defined]
    return run

_PLANS: weakref.WeakSet[Plan] = weakref.WeakSet()


def _forget(kernel) -> None:
    """`kernel.clear_cache()` ran: its plans fetch their launch afresh (after a checked launch)."""
    for plan in list(_PLANS):
        if plan.kernel is kernel:
            plan.launcher = plan.by_address = None
            plan.backend = False


on_clear_cache(_forget)
