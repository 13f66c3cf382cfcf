"""The matmul family's plans: `mm`, `bmm`, `addmm` and their `out=` forms (`F.linear` reaches `addmm` /
`mm` with the transposed weight `w.t()`).

Why plans: on small operands (a linear layer on a few tokens, attention on a short sequence) the general
path's generic checks, `out=` handling, bias broadcasting and launch bookkeeping cost several times the
product itself. A signature keys everything the general path (`_ops.mm` / `addmm` / `bmm`, through
`_ops._matmul_launch`) decides from: dtype, device, the operands' shapes and strides (dense ones only:
contiguous, or a permutation of a contiguous block such as `linear`'s `w.t()`, which the kernel reads
through its strides), the bias's (contiguous), and the `out=` tensor's (the result's exact shape,
strides and dtype). The plan holds the result's allocation and the launch's int arguments; the tile
config is the autotuner's choice for that launch shape, which the general path keeps in
`_launch.tuned` when it first launches the shape: until then a plan's run leaves the call to the
general path (which tunes), after that it launches that config itself and keeps the direct launch.

`MatmulPlan.direct(operands)` describes the kept launch for a compiled graph (`torch_rbln.compiler`),
which launches it by address with no per-call check (see `plan.Direct`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from torch_rbln import _memory, config
from torch_rbln.tp import device_tp, requested_backend

from . import _launch, _ops
from ._finite_scan import PARALLEL_MIN, all_finite, contiguous_scan, is_dense_permutation
from .plan import NO_PLAN, Direct, Family, Plan

_NO_BIAS = (0, 0)  # bias strides of a launch without bias (as `_ops.mm` / `bmm` pass them)


class MatmulPlan(Plan):
    """One launch geometry: the result's shape and strides, the launch's int arguments after the four
    tensors (`_ops._matmul_launch`'s order), the autotuner's shape key, the element counts of the read
    operands (their NaN/Inf scans), and once resolved the tuned config's grid (`grid`), keywords and
    whether a call must check the device's tensor-parallel size (`needs_tp`)."""

    __slots__ = ("c_strides", "tail", "shape_key", "numels", "small", "scan_fn", "mask", "grid", "needs_tp",
                 "index", "tuned")

    def __init__(self, dtype: torch.dtype, shape: tuple, index: int, M: int, N: int, K: int, sa: tuple,
                 sb: tuple, sbias: tuple | None, batch: int, numels: tuple) -> None:
        super().__init__(_ops._k("matmul").matmul_kernel.fn, (), None, 1, 1, shape, dtype,
                         tuple(range(len(numels))))
        self.index = index
        self.c_strides = tuple(_memory.contiguous_strides(list(shape)))
        sc = self.c_strides if len(shape) == 3 else (0, *self.c_strides)  # mm: batch stride 0
        bias = sbias is not None
        self.tail = (M, N, K, *sa, *sb, *sc, *(sbias if bias else _NO_BIAS))
        self.shape_key = (dtype, dtype, dtype, dtype, M, N, K, bias, batch)
        self.numels = numels
        self.small = max(numels) < PARALLEL_MIN  # every read operand is scanned in one compiled call
        self.scan_fn, self.mask = contiguous_scan(dtype)
        self.grid: tuple | None = None
        self.needs_tp = True
        self.tuned: dict | None = None

    def finite(self, operands: tuple) -> bool:
        """No NaN/Inf in the read operands (a, b and the bias, all dense)."""
        if self.small:  # the compiled scans, called directly (the usual case: one call each)
            scan, mask = self.scan_fn, self.mask
            return all(scan(t.data_ptr(), n, mask) for t, n in zip(operands, self.numels, strict=False))
        return all(all_finite(t) for t in operands)

    def resolve(self) -> dict | None:
        """The kernel keywords of the general path's config for this shape, with `grid` and `needs_tp`
        set from it; None while there is none (the general path has not launched this shape with the
        current backend and tensor-parallel size) or when the launch needs the general path's
        tensor-parallel handling (a grid of several programs, or a config that depends on the group
        size, on a device with tp > 1)."""
        K = _ops._k("matmul")
        shape_key = _ops.matmul_shape_key(self.shape_key[:4], *self.shape_key[4:], self.index)
        found = _launch.tuned_config(K.matmul_kernel, shape_key)
        if found is None:
            return None
        grid, keywords = tuple(found[0][:3]), found[1]
        product = max(keywords["BLOCK_M"], keywords["BLOCK_N"], keywords["BLOCK_K"]) <= K.PRODUCT_BLOCK
        needs_tp = not (product and math.prod(grid) == 1)  # a product tile's choice ignores tp
        if needs_tp and device_tp(self.index) != 1:
            return None
        self.grid, self.needs_tp, self.tuned = grid, needs_tp, keywords
        return keywords

    def keep(self, args: tuple, keywords: dict) -> bool:
        """Keep the direct launch of the specialisation for `args` and `keywords` (`launcher`). The
        autotuner's launch of a new shape leaves none: then launch `args` through the checked launch,
        as the general path's next call of this shape would, keep the one that leaves, and return True
        (the result is written)."""
        kernel = self.kernel
        launch = kernel.launcher(*args, **keywords)
        ran = launch is None
        if ran:
            kernel.run(*args, grid=self.grid, **keywords)
            launch = kernel.launcher(*args, **keywords)
        self.launcher = None if launch is None else launch.unchecked
        self.backend = requested_backend()
        return ran

    def direct(self, operands: tuple) -> Direct | None:
        """The kept launch for a compiled graph, once a run has kept it: operands 0, 1 (and 2, the bias)
        by address, the result, the int arguments and this call's alpha and beta (graph constants)."""
        launcher = self.launcher
        if launcher is None or self.backend != requested_backend() or self.grid is None or \
                (self.needs_tp and device_tp(self.index) != 1) or not hasattr(launcher, "by_address"):
            return None
        _, _, bias, _, alpha, beta = operands
        args = (("tensor", 0), ("tensor", 1), ("out", None), ("out", None) if bias is None else ("tensor", 2),
                *(("value", v) for v in self.tail), ("value", float(alpha)), ("value", float(beta)))
        return Direct(launcher.by_address, self.grid, args)


def _run(plan: MatmulPlan) -> Callable[[tuple], Tensor | None]:
    index, shape, dtype = plan.index, plan.shape, plan.dtype
    empty, deploy_mode = _memory.empty, config.deploy_mode

    def run(operands: tuple) -> Tensor | None:
        a, b, bias, out, alpha, beta = operands
        if out is not None:
            storage = out.untyped_storage().data_ptr()
            if any(t is not None and t.untyped_storage().data_ptr() == storage for t in (a, b, bias)):
                return None  # the result would overwrite an operand it reads: the general path decides
        launcher = plan.launcher
        fresh = launcher is None or plan.backend != requested_backend()
        if not fresh and plan.needs_tp and device_tp(index) != 1:
            return None  # the general launch splits the grid over the group (or re-tunes for it)
        if not deploy_mode() and not plan.finite((a, b) if bias is None else (a, b, bias)):
            return None
        c = empty(shape, dtype, index) if out is None else out
        args = (a, b, c, c if bias is None else bias, *plan.tail, float(alpha), float(beta))
        if fresh:
            keywords = plan.resolve()
            if keywords is None:
                return None
            if plan.keep(args, keywords):
                return c
            launcher = plan.launcher
            if launcher is None:
                return None
        grid = plan.grid
        launcher(grid[0], grid[1], grid[2], *args)
        return c

    return run


# ---------------------------------------------------------------- signatures

def _out_key(out: Any, index: int) -> tuple | None | bool:
    """(dtype, shape, strides) of an `out=` tensor on device `index`, None for none, False otherwise."""
    if out is None:
        return None
    if not isinstance(out, Tensor) or out.get_device() != index:
        return False
    return out.dtype, out.shape, out.stride()


def _numbers(kwargs: dict, names: tuple) -> tuple | None:
    """(out, {name: number}) from `kwargs` holding only `out` and Python-number keywords `names`."""
    out = None
    numbers = {}
    for name, value in kwargs.items():
        if name == "out":
            out = value
        elif name in names:
            kind = type(value)
            if kind is not int and kind is not float:
                return None
            numbers[name] = value
        else:
            return None
    return out, numbers


def _operand_key(a: Any, b: Any) -> tuple | None:
    """(dtype, index, a's shape and strides, b's) of two rbln tensors of one dtype on one device."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        return None
    dtype = a.dtype
    index = a.get_device()
    if index < 0 or b.dtype is not dtype or b.get_device() != index:
        return None
    return dtype, index, a.shape, a.stride(), b.shape, b.stride()


def _without_bias(batched: bool) -> Family:
    """`mm(a, b)` / `bmm(a, b)` and their `out=` forms."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 2:
            return None
        out = None
        if kwargs:
            if len(kwargs) != 1:
                return None
            out = kwargs.get("out")
            if out is None:
                return None
        a, b = args
        key = _operand_key(a, b)
        if key is None:
            return None
        out_key = _out_key(out, key[1])
        if out_key is False:
            return None
        return (batched, *key, None, out_key), (a, b, None, out, 1.0, 0.0)

    def plan(key: tuple, operands: tuple) -> Plan:
        _, dtype, index, a_shape, a_strides, b_shape, b_strides, _, out_key = key
        if batched:
            built = _plan_bmm(dtype, index, a_shape, a_strides, b_shape, b_strides)
        else:
            built = _plan_2d(dtype, index, a_shape, a_strides, b_shape, b_strides, None)
        return _finish(built, out_key)

    return Family(signature, plan)


def mm() -> Family:
    """`mm(a, b)` and `mm.out(a, b, out=)`."""
    return _without_bias(False)


def bmm() -> Family:
    """`bmm(a, b)` and `bmm.out(a, b, out=)`."""
    return _without_bias(True)


def addmm() -> Family:
    """`addmm(bias, a, b, beta=, alpha=)` and its `out=` form."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 3:
            return None
        out, alpha, beta = None, 1.0, 1.0
        if kwargs:
            found = _numbers(kwargs, ("alpha", "beta"))
            if found is None:
                return None
            out, numbers = found
            alpha, beta = numbers.get("alpha", 1.0), numbers.get("beta", 1.0)
        bias, a, b = args
        key = _operand_key(a, b)
        if key is None or not isinstance(bias, Tensor) or bias.dtype is not key[0] or \
                bias.get_device() != key[1]:
            return None
        out_key = _out_key(out, key[1])
        if out_key is False:
            return None
        return (None, *key, (bias.shape, bias.stride()), out_key), (a, b, bias, out, alpha, beta)

    def plan(key: tuple, operands: tuple) -> Plan:
        _, dtype, index, a_shape, a_strides, b_shape, b_strides, bias, out_key = key
        return _finish(_plan_2d(dtype, index, a_shape, a_strides, b_shape, b_strides, bias), out_key)

    return Family(signature, plan)


def _finish(plan: MatmulPlan | None, out_key: tuple | None) -> Plan:
    """`plan` with its run, or NO_PLAN (no plan, or an `out=` other than the result's exact layout)."""
    if plan is None or (out_key is not None and out_key != (plan.dtype, plan.shape, plan.c_strides)):
        return NO_PLAN
    plan.run = _run(plan)
    return plan


def _plan_2d(dtype: torch.dtype, index: int, a_shape: tuple, a_strides: tuple, b_shape: tuple,
             b_strides: tuple, bias: tuple | None) -> MatmulPlan | None:
    """The plan of `a @ b` (2-D, dense) with an optional bias (shape, strides), as `_ops.mm` and
    `_ops.addmm` launch it; None for a call they would not launch so (another dtype, shapes that do not
    match, an empty result or K, a bias that does not broadcast or is not contiguous)."""
    if dtype not in _ops.FLOATS or len(a_shape) != 2 or len(b_shape) != 2 or a_shape[1] != b_shape[0]:
        return None
    (M, K), N = a_shape, b_shape[1]
    if M == 0 or N == 0 or K == 0 or not (is_dense_permutation(a_shape, a_strides) and
                                          is_dense_permutation(b_shape, b_strides)):
        return None
    sbias = None
    numels = (M * K, K * N)
    if bias is not None:
        bias_shape, bias_strides = bias
        if tuple(bias_strides) != tuple(_memory.contiguous_strides(list(bias_shape))) or \
                0 in bias_shape:
            return None  # only a contiguous bias is scanned for NaN/Inf here
        try:
            if _ops._broadcast(bias_shape, (M, N)) != [M, N]:
                return None
        except _ops.Decline:
            return None  # the general path raises torch's error
        stand_in = torch.empty(bias_shape, device="meta")
        sbias = tuple(_ops._expanded_strides(stand_in, [M, N]))
        numels += (stand_in.numel(),)
    return MatmulPlan(dtype, (M, N), index, M, N, K, (0, *a_strides), (0, *b_strides), sbias, 1, numels)


def _plan_bmm(dtype: torch.dtype, index: int, a_shape: tuple, a_strides: tuple, b_shape: tuple,
              b_strides: tuple) -> MatmulPlan | None:
    """The plan of a batched `a @ b` (3-D, dense) as `_ops.bmm` launches it, or None."""
    if dtype not in _ops.FLOATS or len(a_shape) != 3 or len(b_shape) != 3 or a_shape[0] != b_shape[0] or \
            a_shape[2] != b_shape[1]:
        return None
    B, M, K = a_shape
    N = b_shape[2]
    if B * M * N * K == 0 or not (is_dense_permutation(a_shape, a_strides) and
                                  is_dense_permutation(b_shape, b_strides)):
        return None
    return MatmulPlan(dtype, (B, M, N), index, M, N, K, tuple(a_strides), tuple(b_strides), None, B,
                      (B * M * K, B * K * N))
