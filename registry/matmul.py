"""The matmul family: `mm`, `bmm`, `addmm` and their `out=` forms (`F.linear` reaches `addmm` / `mm`
with the transposed weight `w.t()`), its general path and its plans; `launch` is also the product that
`conv` and `custom` launch.

The general path (`mm`, `addmm`, `bmm`: any strides, the kernel reads them) launches through `launch`,
which keeps the autotuner's tile per launch shape (`_launch.tuned`). Why plans: on small operands (a
linear layer on a few tokens, attention on a short sequence) the general path's generic checks, `out=`
handling, bias broadcasting and launch bookkeeping cost several times the product itself. A signature
keys everything the general path decides from (`_dims`): dtype, device, the operands' shapes and
strides (dense ones only: contiguous, or a permutation of a contiguous block such as `linear`'s `w.t()`),
the bias's (contiguous), and the `out=` tensor's (the result's exact shape, strides and dtype). The
plan holds the result's allocation and the launch's int arguments; the tile config is the one the
general path's first launch of that shape kept: until then a plan's run leaves the call to the general
path (which tunes), after that it launches that config itself and keeps the direct launch.

`MatmulPlan.direct(operands)` describes the kept launch for a compiled graph (`torch_rbln.compiler`),
which launches it by address with no per-call check (see `plan.Direct`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from torch_rbln import _memory
from torch_rbln.tp import device_tp, requested_backend

from . import _launch
from ._base import require_float
from ._finite_scan import is_dense_permutation
from ._ops import FLOATS, Decline, _broadcast, _check_out, _device_index, _k, fill_floats
from .geometry import I32, broadcast_strides, cdiv, expanded_strides
from .plan import NO_PLAN, Direct, Family, Plan

_NO_BIAS = (0, 0)  # bias strides of a launch without bias


def bias_kind(sbias: tuple | None) -> int:
    """matmul_kernel's HAS_BIAS for a bias with strides `sbias` over the (M, N) result (None: no bias):
    2 for a row of N unit-stride values broadcast over the rows (linear's bias), which the kernel reads
    with a literal unit stride (a vector loop) instead of a gather over runtime strides; 1 for any other
    bias; 0 for none."""
    if sbias is None:
        return 0
    return 2 if tuple(sbias) == (0, 1) else 1


def shape_key(dtypes: tuple, M: int, N: int, K: int, has_bias: int, batch: int, index: int) -> tuple:
    """The launch shape `launch` keeps the autotuner's tile under (`_launch.tuned`): the four tensors'
    dtypes, M, N, K, the bias kind (`bias_kind`), batch, the device's tensor-parallel size and the
    requested DSL backend, everything the tuner's decision and its keywords depend on."""
    return (*dtypes, M, N, K, has_bias, batch, device_tp(index), requested_backend())


def launch(a, b, c, bias, M, N, K, sa, sb, sc, sbias, alpha, beta, batch) -> None:
    """One matmul_kernel launch. The autotuner picks the tile config on the first launch of a shape;
    later launches of that shape run the kernel with that config directly (`_launch.tuned`), since the
    tuner's own per-call key and grid callback cost more than a small matmul computes. A transposed
    weight is dense too: the kept unchecked launch takes it."""
    has_bias = bias_kind(sbias if bias is not None else None)
    operand = bias if bias is not None else c
    tensors = (a, b, c, operand)
    dtypes = (a.dtype, b.dtype, c.dtype, operand.dtype)
    args = (*tensors, M, N, K, *sa, *sb, *sc, *sbias, float(alpha), float(beta))
    tiles = lambda meta: (cdiv(M, meta["BLOCK_M"]), cdiv(N, meta["BLOCK_N"]), batch)  # noqa: E731
    key = shape_key(dtypes, M, N, K, has_bias, batch, c.get_device())
    _launch.tuned(_k("matmul").matmul_kernel, key, args, {"HAS_BIAS": has_bias}, tiles, dtypes, tensors,
                  max(M, N, K, *map(abs, (*sa, *sb, *sc, *sbias))) < I32)


def _dims(a_shape: tuple, b_shape: tuple, batched: bool) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of `a @ b` (3-D operands when `batched`, else 2-D), or Decline."""
    if batched:
        if len(a_shape) != 3 or len(b_shape) != 3 or a_shape[0] != b_shape[0] or a_shape[2] != b_shape[1]:
            raise Decline("shape mismatch")
        return a_shape[0], a_shape[1], b_shape[2], a_shape[2]
    if len(a_shape) != 2 or len(b_shape) != 2 or a_shape[1] != b_shape[0]:
        raise Decline("shape mismatch")
    return 1, a_shape[0], b_shape[1], a_shape[1]


# ---------------------------------------------------------------- the general path

def mm(a, b, out=None):
    return _product(a, b, None, out, 1.0, 0.0, False)


def bmm(a, b, out=None):
    return _product(a, b, None, out, 1.0, 0.0, True)


def addmm(bias, a, b, beta=1, alpha=1, out=None):
    if alpha == 0 or beta == 0:
        # torch then reads neither operand (alpha 0) or not the bias (beta 0), so their NaN/Inf do not
        # reach the result; the kernel's 0 * NaN would (the family is exact: nothing is scanned)
        raise Decline("alpha or beta 0")
    return _product(a, b, bias, out, alpha, beta, False)


def baddbmm(c, a, b, beta=1, alpha=1):
    """`beta * c + alpha * (a @ b)` per batch (BLOOM's and Falcon's attention scores): the batched
    product, then `c` (broadcast) scaled and added on the elementwise kernels. As torch: beta 0 reads
    no `c` (its NaN do not reach the result); alpha 0 (no product read) declines."""
    from .elementwise import binary

    if alpha == 0:
        raise Decline("alpha 0")
    if not isinstance(c, Tensor) or c.dtype != a.dtype:
        raise Decline("mixed dtypes")
    product = _product(a, b, None, None, 1.0, 0.0, True)
    if beta == 0:
        return product if alpha == 1 else binary("mul", product, alpha)
    if _broadcast(c.shape, product.shape) != list(product.shape):
        raise Decline("shape mismatch")  # torch's error, from the CPU
    return binary("add", c if beta == 1 else binary("mul", c, beta), product, alpha)


def dot(a, b):
    """`torch.dot` of two 1-D float tensors: a (1 x K) @ (K x 1) product, returned 0-dim."""
    if a.dim() != 1 or b.dim() != 1 or a.shape != b.shape:
        raise Decline("shape mismatch")  # torch's error, from the CPU
    return _product(a.view(1, -1), b.view(-1, 1), None, None, 1.0, 0.0, False).view(())


def _product(a, b, bias, out, alpha, beta, batched: bool):
    """`alpha * a @ b + beta * bias` (a bias only unbatched) into `out` or a new tensor, any strides."""
    dtype = a.dtype
    for t in (a, b) if bias is None else (bias, a, b):
        if t.dtype != dtype:
            raise Decline("mixed dtypes")
    require_float(dtype)
    batch, M, N, K = _dims(a.shape, b.shape, batched)
    c = _check_out(out, [batch, M, N] if batched else [M, N], dtype, _device_index(a, b))
    if bias is None:
        if c.numel() == 0:
            return c
        if K == 0:
            return fill_floats(c, 0.0)
        sbias = _NO_BIAS
    else:
        if c.numel() == 0 or K == 0:
            raise Decline("empty tensor")
        if _broadcast(bias.shape, (M, N)) != [M, N]:
            raise Decline("shape mismatch")
        sbias = tuple(expanded_strides(bias, [M, N]))
    if batched:
        sa, sb, sc = a.stride(), b.stride(), c.stride()
    else:  # an unbatched launch: batch strides 0
        sa, sb, sc = (0, *a.stride()), (0, *b.stride()), (0, *c.stride())
    launch(a, b, c, bias, M, N, K, sa, sb, sc, sbias, alpha, beta, batch)
    return c


# ---------------------------------------------------------------- plans


class MatmulPlan(Plan):
    """One launch geometry: the result's shape and strides, the launch's int arguments after the four
    tensors (`launch`'s order), the autotuner's shape key, and once resolved the tuned config's grid
    (`grid`), keywords and whether a call must check the device's tensor-parallel size (`needs_tp`).
    No operand is scanned for NaN/Inf: the matmul family is exact (`table.py`)."""

    __slots__ = ("c_strides", "tail", "shape_key", "grid", "needs_tp", "index", "tuned")

    def __init__(self, dtype: torch.dtype, shape: tuple, index: int, M: int, N: int, K: int, sa: tuple,
                 sb: tuple, sbias: tuple | None, batch: int) -> None:
        super().__init__(_k("matmul").matmul_kernel.fn, (), None, 1, 1, shape, dtype, scanned=())
        self.index = index
        self.c_strides = tuple(_memory.contiguous_strides(list(shape)))
        sc = self.c_strides if len(shape) == 3 else (0, *self.c_strides)  # mm: batch stride 0
        bias = sbias is not None
        self.tail = (M, N, K, *sa, *sb, *sc, *(sbias if bias else _NO_BIAS))
        # (`shape_key`'s, tp aside)
        self.shape_key = (dtype, dtype, dtype, dtype, M, N, K, bias_kind(sbias), batch)
        self.grid: tuple | None = None
        self.needs_tp = True
        self.tuned: dict | None = None

    def resolve(self) -> dict | None:
        """The kernel keywords of the general path's config for this shape, with `grid` and `needs_tp`
        set from it; None while there is none (the general path has not launched this shape with the
        current backend and tensor-parallel size) or when the launch needs the general path's
        tensor-parallel handling (a grid of several programs, or a config that depends on the group
        size, on a device with tp > 1)."""
        K = _k("matmul")
        found = _launch.tuned_config(K.matmul_kernel, shape_key(self.shape_key[:4], *self.shape_key[4:],
                                                                self.index))
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
    index, shape, dtype, tail = plan.index, plan.shape, plan.dtype, plan.tail
    new = _memory.allocator(shape, dtype, index)

    def run(operands: tuple) -> Tensor | None:
        a, b, bias, out, alpha, beta = operands
        if out is not None:
            storage = out.untyped_storage().data_ptr()
            if a.untyped_storage().data_ptr() == storage or b.untyped_storage().data_ptr() == storage or \
                    (bias is not None and bias.untyped_storage().data_ptr() == storage):
                return None  # the result would overwrite an operand it reads: the general path decides
        launcher = plan.launcher
        fresh = launcher is None or plan.backend != requested_backend()
        if not fresh and plan.needs_tp and device_tp(index) != 1:
            return None  # the general launch splits the grid over the group (or re-tunes for it)
        c = new() if out is None else out
        if fresh:
            args = (a, b, c, c if bias is None else bias, *tail, float(alpha), float(beta))
            keywords = plan.resolve()
            if keywords is None:
                return None
            if plan.keep(args, keywords):
                return c
            launcher = plan.launcher
            if launcher is None:
                return None
        g0, g1, g2 = plan.grid
        launcher(g0, g1, g2, a, b, c, c if bias is None else bias, *tail, float(alpha), float(beta))
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
        return (*key, None, out_key), (a, b, None, out, 1.0, 0.0)

    return Family(signature, lambda key, operands: _plan(key, batched))


def mm_family() -> Family:
    """`mm(a, b)` and `mm.out(a, b, out=)`."""
    return _without_bias(False)


def bmm_family() -> Family:
    """`bmm(a, b)` and `bmm.out(a, b, out=)`."""
    return _without_bias(True)


def addmm_family() -> Family:
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
            if alpha == 0 or beta == 0:
                return None  # the general path declines it (`addmm`)
        bias, a, b = args
        key = _operand_key(a, b)
        if key is None or not isinstance(bias, Tensor) or bias.dtype is not key[0] or \
                bias.get_device() != key[1]:
            return None
        out_key = _out_key(out, key[1])
        if out_key is False:
            return None
        return (*key, (bias.shape, bias.stride()), out_key), (a, b, bias, out, alpha, beta)

    return Family(signature, lambda key, operands: _plan(key, False))


def _plan(key: tuple, batched: bool) -> Plan:
    """The plan of `a @ b` (dense operands) with an optional bias (shape, strides) as `_product` launches
    it, or NO_PLAN for a call it would launch otherwise (another dtype, an empty result or K, a bias
    that is not contiguous or does not broadcast, an `out=` other than the result's exact layout)."""
    dtype, index, a_shape, a_strides, b_shape, b_strides, bias, out_key = key
    if dtype not in FLOATS:
        return NO_PLAN
    try:
        batch, M, N, K = _dims(a_shape, b_shape, batched)
        if bias is not None and _broadcast(bias[0], (M, N)) != [M, N]:
            return NO_PLAN
    except Decline:
        return NO_PLAN  # the general path declines it (the CPU raises torch's error)
    if batch * M * N * K == 0 or not (is_dense_permutation(a_shape, a_strides) and
                                      is_dense_permutation(b_shape, b_strides)):
        return NO_PLAN
    if batched:
        sa, sb = tuple(a_strides), tuple(b_strides)
    else:
        sa, sb = (0, *a_strides), (0, *b_strides)
    sbias = None
    if bias is not None:
        bias_shape, bias_strides = bias
        if tuple(bias_strides) != tuple(_memory.contiguous_strides(list(bias_shape))) or 0 in bias_shape:
            return NO_PLAN  # the plan's bias strides are a contiguous one's
        sbias = tuple(broadcast_strides(bias_shape, bias_strides, [M, N]))
    shape = (batch, M, N) if batched else (M, N)
    plan = MatmulPlan(dtype, shape, index, M, N, K, sa, sb, sbias, batch)
    if out_key is not None and out_key != (plan.dtype, plan.shape, plan.c_strides):
        return NO_PLAN
    plan.run = _run(plan)
    return plan
