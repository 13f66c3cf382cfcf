"""Fast paths of the matmul overloads (mm, bmm, addmm and their `out=` forms).

`FAST_PATHS` maps aten overload names to fast paths (see `_fastpath`); `table` merges it into its
entries.

Why: on small operands (a linear layer on a few tokens, attention on a short sequence) the general
path's generic input checks, out= handling, bias broadcasting and launch bookkeeping cost several
times the product itself. A fast path takes the plain call: operands of one floating dtype on one
rbln device, each dense (contiguous, or a permutation of a contiguous block such as `linear`'s
transposed weight `w.t()`, which the kernel reads through its strides), a contiguous bias (addmm),
an `out=` of the result's exact shape, dtype and strides, finite values unless TORCH_RBLN_DEPLOY=ON,
and a shape the general path has launched before. It then runs the launch the general path
(`_ops._matmul_launch`) made for that shape: the tile config the autotuner chose (kept in
`_launch.tuned`), the same kernel specialisation, the same arguments. Anything else returns
None and the general path decides (and logs any fallback).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from torch_rbln import _memory, config
from torch_rbln.tp import device_tp as _device_tp
from torch_rbln.tp import requested_backend

from . import _launch, _ops
from ._fastpath import _PLANS, FastPath
from ._finite_scan import PARALLEL_MIN, all_finite, contiguous_scan, is_dense_permutation
from ._memo import PlanMemo

_NO_BIAS = (0, 0)  # bias strides of a launch without bias (as `_ops.mm`/`bmm` pass them)


class _MatmulPlan:
    """One matmul launch geometry (dtype, operand shapes and strides): the result shape and strides,
    the launch's int and float arguments after the four tensors (`_ops._matmul_launch`'s order), the
    autotuner's shape key, the element counts of the read operands (for their NaN/Inf scans), and,
    once the general path has launched this shape, its kept launch (`run`, for `backend`), grid and
    whether a call must check the device's tensor-parallel size (`needs_tp`). Listed in `_PLANS`, so
    `kernel.clear_cache()` resets `run` (`_fastpath._reset_plans`)."""

    __slots__ = ("kernel", "dtype", "shape", "c_strides", "tail", "shape_key", "numels", "small", "scan",
                 "mask", "run", "backend", "grid", "needs_tp", "__weakref__")

    def __init__(self, dtype: torch.dtype, shape: tuple, M: int, N: int, K: int, sa: tuple, sb: tuple,
                 sbias: tuple | None, batch: int, numels: tuple) -> None:
        self.kernel = _ops._k("matmul").matmul_kernel.fn
        self.dtype = dtype
        self.shape = shape
        self.c_strides = tuple(_memory.contiguous_strides(list(shape)))
        sc = self.c_strides if len(shape) == 3 else (0, *self.c_strides)  # mm: batch stride 0
        bias = sbias is not None
        self.tail = (M, N, K, *sa, *sb, *sc, *(sbias if bias else _NO_BIAS))
        self.shape_key = (dtype, dtype, dtype, dtype, M, N, K, bias, batch)
        self.numels = numels
        self.small = max(numels) < PARALLEL_MIN  # every read operand is scanned in one compiled call
        self.scan, self.mask = contiguous_scan(dtype)
        self.run = self.backend = self.grid = None
        self.needs_tp = True
        _PLANS.add(self)

    def finite(self, tensor: Tensor, numel: int) -> bool:
        """No NaN/Inf in the dense operand `tensor` of `numel` elements."""
        if numel < PARALLEL_MIN:
            return self.scan(tensor.data_ptr(), numel, self.mask)
        return all_finite(tensor)

    def resolve(self, index: int) -> dict | None:
        """The kernel keywords of the general path's config for this shape on device `index`, with
        `grid` and `needs_tp` set from it; None while there is none (the general path has not launched
        this shape with the current backend and tensor-parallel size) or when the launch needs the
        general path's tensor-parallel handling (a grid of several programs, or a config that depends
        on the group size, on a device with tp > 1)."""
        tp = _device_tp(index)
        shape_key = _ops.matmul_shape_key(self.shape_key[:4], *self.shape_key[4:], index)
        found = _launch.tuned_config(_ops._k("matmul").matmul_kernel, shape_key)
        if found is None:
            return None
        grid, keywords = found[0][:3], found[1]
        product = max(keywords["BLOCK_M"], keywords["BLOCK_N"], keywords["BLOCK_K"]) <= \
            _ops._k("matmul").PRODUCT_BLOCK
        needs_tp = not (product and math.prod(grid) == 1)  # a product tile's choice ignores tp
        if needs_tp and tp != 1:
            return None
        self.grid, self.needs_tp = grid, needs_tp
        return keywords

    def keep(self, args: tuple, keywords: dict) -> bool:
        """Keep the direct launch of the specialisation for `args` and `keywords` (`run`). The
        autotuner's launch of a new shape leaves none: then launch `args` through the checked launch,
        as the general path's next call of this shape would, keep the one that leaves, and return True
        (the result is written)."""
        launch = self.kernel.launcher(*args, **keywords)
        ran = launch is None
        if ran:
            self.kernel.run(*args, grid=self.grid, **keywords)
            launch = self.kernel.launcher(*args, **keywords)
        if launch is not None:
            self.run, self.backend = launch.unchecked, requested_backend()
        return ran


def _out_of(kwargs: dict, names: tuple) -> tuple[bool, Tensor | None, dict]:
    """(plain, out, numbers): whether `kwargs` holds only `out` (a tensor: the schema says so) and the
    Python-number keywords `names`, its `out=` (None without one) and those numbers."""
    out = None
    numbers = {}
    for name, value in kwargs.items():
        if name == "out":
            out = value
        elif name in names:
            kind = type(value)
            if kind is not int and kind is not float:
                return False, None, numbers
            numbers[name] = value
        else:
            return False, None, numbers
    return True, out, numbers


def _run(plan: _MatmulPlan | None, index: int, a: Tensor, b: Tensor, bias: Tensor | None, out: Tensor | None,
         alpha: float, beta: float) -> Tensor | None:
    """The launch of `plan` on operands already matched to it (dtype, device, shapes, strides): the
    checks that remain (out=, tensor-parallel size, NaN/Inf), the result and the kept launch. None for
    the general path."""
    if plan is None:
        return None
    if out is not None:
        if out.dtype is not plan.dtype or out.get_device() != index or out.shape != plan.shape or \
                out.stride() != plan.c_strides:
            return None
        c = out
    run = plan.run
    fresh = run is None or plan.backend != requested_backend()
    if not fresh and plan.needs_tp and _device_tp(index) != 1:
        return None  # the general launch splits the grid over the group (or re-tunes for it)
    if not config.deploy_mode():
        numels = plan.numels
        if plan.small:  # the compiled scans, called directly (the usual case: one call each)
            scan, mask = plan.scan, plan.mask
            if not (scan(a.data_ptr(), numels[0], mask) and scan(b.data_ptr(), numels[1], mask)
                    and (bias is None or scan(bias.data_ptr(), numels[2], mask))):
                return None
        elif not (plan.finite(a, numels[0]) and plan.finite(b, numels[1])
                  and (bias is None or plan.finite(bias, numels[2]))):
            return None
    if out is None:
        c = _memory.empty(plan.shape, plan.dtype, index)
    args = (a, b, c, c if bias is None else bias, *plan.tail, alpha, beta)
    if fresh:
        keywords = plan.resolve(index)
        if keywords is None:
            return None
        if plan.keep(args, keywords):
            return c
        run = plan.run
    grid = plan.grid
    run(grid[0], grid[1], grid[2], *args)
    return c


def _plan_2d(dtype: torch.dtype, a_shape: tuple, a_strides: tuple, b_shape: tuple, b_strides: tuple,
             bias: tuple | None) -> _MatmulPlan | None:
    """The plan of `a @ b` (2-D, dense) with an optional bias (shape, strides), as `_ops.mm` and
    `_ops.addmm` launch it; None for a call they would not launch so (another dtype, shapes that do not
    match, an empty result or K, a bias that does not broadcast or is not contiguous)."""
    if dtype not in _ops.FLOATS or len(a_shape) != 2 or len(b_shape) != 2 or a_shape[1] != b_shape[0]:
        return None
    (M, K), N = a_shape, b_shape[1]
    # dense operands (contiguous, or a permutation of a contiguous block such as a transposed weight)
    if M == 0 or N == 0 or K == 0 or not (is_dense_permutation(a_shape, a_strides) and
                                          is_dense_permutation(b_shape, b_strides)):
        return None
    sbias = None
    numels = (M * K, K * N)
    if bias is not None:
        bias_shape, bias_strides = bias
        stand_in = torch.empty(bias_shape, device="meta")
        if tuple(bias_strides) != stand_in.stride():
            return None  # only a contiguous bias is scanned for NaN/Inf here
        try:
            if _ops._broadcast(bias_shape, (M, N)) != [M, N]:
                return None
        except _ops.Decline:
            return None  # the general path raises torch's error
        sbias = tuple(_ops._expanded_strides(stand_in, [M, N]))
        numels += (stand_in.numel(),)
    return _MatmulPlan(dtype, (M, N), M, N, K, (0, *a_strides), (0, *b_strides), sbias, 1, numels)


def _plan_bmm(dtype: torch.dtype, a_shape: tuple, a_strides: tuple, b_shape: tuple, b_strides: tuple
              ) -> _MatmulPlan | None:
    """The plan of a batched `a @ b` (3-D, dense) as `_ops.bmm` launches it, or None."""
    if dtype not in _ops.FLOATS or len(a_shape) != 3 or len(b_shape) != 3 or a_shape[0] != b_shape[0] or \
            a_shape[2] != b_shape[1]:
        return None
    B, M, K = a_shape
    N = b_shape[2]
    if B * M * N * K == 0 or not (is_dense_permutation(a_shape, a_strides) and
                                  is_dense_permutation(b_shape, b_strides)):
        return None
    return _MatmulPlan(dtype, (B, M, N), M, N, K, tuple(a_strides), tuple(b_strides), None, B,
                       (B * M * K, B * K * N))


def _without_bias(build) -> FastPath:
    """The fast path of a product without bias, `op(a, b)` or `op.out(a, b, out=)`, whose plans
    `build(dtype, a's shape, a's strides, b's shape, b's strides)` makes."""
    plans: dict[tuple, _MatmulPlan | None] = PlanMemo(1024, lambda key: build(*key))

    def fast(args: tuple, kwargs: dict) -> Tensor | None:
        if len(args) != 2:
            return None
        out = None
        if kwargs:
            if len(kwargs) != 1:
                return None
            out = kwargs.get("out")
            if out is None:
                return None
        a, b = args  # tensors, as the schema says (the dispatcher checked them)
        dtype = a.dtype
        index = a.get_device()
        if index < 0 or b.dtype is not dtype or b.get_device() != index:
            return None
        plan = plans[(dtype, a.shape, a.stride(), b.shape, b.stride())]
        return _run(plan, index, a, b, None, out, 1.0, 0.0)

    return fast


def mm() -> FastPath:
    """The fast path of `mm(a, b)` and `mm.out(a, b, out=)` (`F.linear` without bias reaches it with
    `b` the transposed weight)."""
    return _without_bias(lambda *key: _plan_2d(*key, None))


def bmm() -> FastPath:
    """The fast path of `bmm(a, b)` and `bmm.out(a, b, out=)`."""
    return _without_bias(_plan_bmm)


def addmm() -> FastPath:
    """The fast path of `addmm(bias, a, b, beta=, alpha=)` and its `out=` form (`F.linear` with a bias
    reaches it with `b` the transposed weight)."""
    plans: dict[tuple, _MatmulPlan | None] = PlanMemo(
        1024, lambda key: _plan_2d(key[0], key[3], key[4], key[5], key[6], (key[1], key[2])))

    def fast(args: tuple, kwargs: dict) -> Tensor | None:
        if len(args) != 3:
            return None
        out = None
        alpha = beta = 1.0
        if kwargs:
            plain, out, numbers = _out_of(kwargs, ("alpha", "beta"))
            if not plain:
                return None
            alpha = float(numbers.get("alpha", 1.0))
            beta = float(numbers.get("beta", 1.0))
        bias, a, b = args  # tensors, as the schema says (the dispatcher checked them)
        dtype = a.dtype
        index = a.get_device()
        if index < 0 or b.dtype is not dtype or b.get_device() != index or bias.dtype is not dtype or \
                bias.get_device() != index:
            return None
        plan = plans[(dtype, bias.shape, bias.stride(), a.shape, a.stride(), b.shape, b.stride())]
        return _run(plan, index, a, b, bias, out, alpha, beta)

    return fast


_mm, _addmm, _bmm = mm(), addmm(), bmm()

FAST_PATHS: dict[str, FastPath] = {
    "mm.default": _mm,
    "mm.out": _mm,
    "addmm.default": _addmm,
    "addmm.out": _addmm,
    "bmm.default": _bmm,
    "bmm.out": _bmm,
}
