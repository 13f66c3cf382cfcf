"""Fast paths of row and reduction overloads beyond `_fastpath`'s: softmax and layer-norm backward,
max/min with indices, arg-reductions, var/std, losses, embedding, index_select, cat, arange.

`FAST_PATHS` maps aten overload names to fast paths (see `_fastpath`); `table` merges it into its
entries. Each takes the plain case only (contiguous rbln tensors of one floating dtype on one device,
the shape the general implementation launches one row/gather kernel for, a kept launch of that
specialisation, finite inputs unless deploy mode, one NPU for a grid of several programs) and runs
the launch the general implementation (`_ops`, `_reduce`, `_loss`) makes, with the same arguments, so
results are bitwise the same. Anything else returns None: the general path decides and logs.
Every tensor the general path's input check scans (`registry.check_inputs`: each floating tensor
argument) is scanned here too, so a NaN/Inf input takes the same logged CPU fallback either way.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from torch_rbln import _memory, config
from torch_rbln.tp import device_tp as _device_tp

from ._fastpath import FastPath, _contiguous_rbln, _Plan
from ._finite_scan import PARALLEL_MIN, all_finite
from ._memo import PlanMemo
from ._ops import (
    _I32,
    _TILED_MIN,
    ARANGE_ONE_CHUNK,
    FLOATS,
    _block,
    _cdiv,
    _collapse,
    _k,
    _row_block,
    arange_vector_layout,
    split_double,
    splits_exactly,
)

_INDICES = (torch.int64, torch.int32)
_NUMBER = (int, float)


def _ready(plan: _Plan | None, index: int):
    """The plan's kept launch without a NaN/Inf scan (the caller scans what it reads), or None: no
    plan, no kept launch yet, or a grid of several programs on a tensor-parallel device."""
    return None if plan is None else plan.kept(index)


def _finite(plan: _Plan, *tensors: Tensor | None) -> bool:
    """Every given floating tensor (None skipped) is free of NaN/Inf, or deploy mode is on. (Loops, not
    generators: this runs on every call, and a generator costs a few hundred ns to make.)"""
    if config.deploy_mode():
        return True
    scan, mask = plan.scan, plan.mask
    for t in tensors:
        if t is not None:
            numel = t.numel()
            if not (scan(t.data_ptr(), numel, mask) if numel < PARALLEL_MIN else all_finite(t)):
                return False
    return True


def _same(index: int, dtype: torch.dtype, *tensors: Tensor | None) -> bool:
    """Every given tensor (None skipped) is a contiguous rbln tensor of `dtype` on device `index`."""
    for t in tensors:
        if t is not None and (type(t) is not Tensor and not isinstance(t, Tensor) or t.dtype is not dtype
                              or not t.is_contiguous() or t.get_device() != index):
            return False
    return True


# ---------------------------------------------------------------- gathers: index_select, embedding backward

class _GatherPlan(_Plan):
    """index_select's launch for one (dtype, shape, dim, index dtype, index shape): grid (count, outer)
    over an (outer, size, inner) view, and the result shape."""

    __slots__ = ("shape", "ints", "outer", "in_range")


def index_select() -> FastPath:
    """`index_select(x, dim, index)` with a contiguous int64/int32 index of at most one dim on x's
    device, range-checked by the compiled scan: the gather launch of `_ops.index_select`."""

    def new_plan(plan_key: tuple) -> _GatherPlan | None:
        dtype, shape, dim, index_dtype, index_shape = plan_key
        nd = len(shape)
        if dtype not in FLOATS or nd == 0 or not -nd <= dim < nd or len(index_shape) > 1:
            return None
        dim %= nd
        count = math.prod(index_shape)
        size = shape[dim]
        if count == 0 or math.prod(shape) == 0:
            return None
        outer = math.prod(shape[:dim])
        inner = math.prod(shape[dim + 1:])
        block = _row_block(inner)
        key = (dtype, index_dtype, block, size < _I32, count < _I32, inner < _I32)
        plan = _GatherPlan(_k("embedding").index_select_kernel, key, 0, dtype, dtype, count * outer)
        plan.n = size
        plan.outer = outer
        plan.ints = (size, count, inner)
        plan.shape = shape[:dim] + (count,) + shape[dim + 1:]
        Em = _k("embedding")
        plan.in_range = Em.in_range_64 if index_dtype is torch.int64 else Em.in_range_32
        return plan

    plans: dict[tuple, _GatherPlan | None] = PlanMemo(1024, new_plan)

    def fast(args: tuple, kwargs: dict) -> Tensor | None:
        if len(args) != 3 or kwargs:
            return None
        x, dim, indices = args
        index = _contiguous_rbln(x)
        if index < 0 or type(dim) is not int or _contiguous_rbln(indices) != index:
            return None
        index_dtype = indices.dtype
        if index_dtype not in _INDICES:
            return None
        plan = plans[(x.dtype, x.shape, dim, index_dtype, indices.shape)]
        run = _ready(plan, index)
        if run is None or not _finite(plan, x):
            return None
        if not plan.in_range(indices.data_ptr(), plan.ints[1], plan.n, 0):
            return None  # out of range: the general path declines (0 stands in for "none ignored")
        out = _memory.empty(plan.shape, plan.out_dtype, index)
        run(plan.programs // plan.outer, plan.outer, 1, x, indices, out, *plan.ints)
        return out

    return fast


def embedding_backward() -> FastPath:
    """`embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq=False)`: the
    launch of `_ops.embedding_backward` (one program per weight row)."""

    def new_plan(plan_key: tuple) -> _Plan | None:
        dtype, shape, index_dtype, count, num_weights, padding_idx = plan_key
        if dtype not in FLOATS or not shape or count == 0 or num_weights <= 0:
            return None
        dim = shape[-1]
        if dim == 0 or math.prod(shape) != count * dim:
            return None
        block_d = min(256, max(16, 1 << (dim - 1).bit_length()))
        key = (dtype, index_dtype, block_d, *(abs(v) < _I32 for v in (count, dim, padding_idx)))
        plan = _Plan(_k("embedding").embedding_backward_kernel, key, 0, dtype, dtype, num_weights)
        plan.n = dim
        return plan

    plans: dict[tuple, _Plan | None] = PlanMemo(1024, new_plan)

    def fast(args: tuple, kwargs: dict) -> Tensor | None:
        if len(args) != 5 or kwargs:
            return None
        grad, indices, num_weights, padding_idx, scale = args
        index = _contiguous_rbln(grad)
        if index < 0 or scale is not False or type(num_weights) is not int or type(padding_idx) is not int:
            return None
        if _contiguous_rbln(indices) != index or indices.dtype not in _INDICES:
            return None
        count = indices.numel()
        plan = plans[(grad.dtype, grad.shape, indices.dtype, count, num_weights, padding_idx)]
        run = _ready(plan, index)
        if run is None or not _finite(plan, grad):
            return None
        out = _memory.empty((num_weights, plan.n), plan.out_dtype, index)
        run(num_weights, 1, 1, grad, indices, out, count, plan.n, padding_idx)
        return out

    return fast


# ---------------------------------------------------------------- cat, arange

class _CatPlan:
    """cat's launches for one (dtype, shapes, dim): the result shape and, per input, the strided copy
    kernel's plan and int arguments (as `_ops.cat` computes them for contiguous inputs); for two inputs
    instead `pair`, the one launch of the pair kernel, and its int arguments."""

    __slots__ = ("shape", "parts", "wide", "pair", "pair_ints")

    def __init__(self, shape: tuple, parts: list, pair: _Plan | None = None, pair_ints: tuple = ()) -> None:
        self.shape, self.parts, self.pair, self.pair_ints = shape, parts, pair, pair_ints
        self.wide = any(plan.programs > 1 for plan, _ in parts)  # a grid a TP group would split


def _cat_plan(dtype: torch.dtype, shapes: tuple, dim: int) -> _CatPlan | None:
    if dtype not in FLOATS or not shapes:
        return None
    nd = len(shapes[0])
    if nd == 0 or not -nd <= dim < nd:
        return None
    dim %= nd
    ref = [s for i, s in enumerate(shapes[0]) if i != dim]
    for shape in shapes:
        if len(shape) != nd or [s for i, s in enumerate(shape) if i != dim] != ref or math.prod(shape) == 0:
            return None  # (empty inputs: the general path drops or rejects them)
    out_shape = list(shapes[0])
    out_shape[dim] = sum(shape[dim] for shape in shapes)
    if math.prod(out_shape) >= _TILED_MIN:
        return None  # the general path copies large inputs in tiles
    if len(shapes) == 2:  # `_ops.cat`'s pair kernel
        total = math.prod(out_shape)
        block = _block(total)
        pair = _Plan(_k("rows").cat_pair_kernel, (dtype, block), 0, dtype, dtype, _cdiv(total, block))
        pair.n = total
        ints = (total, math.prod(shapes[0][dim:]), math.prod(shapes[1][dim:]))
        return _CatPlan(tuple(out_shape), [], pair, ints)
    out_strides = _memory.contiguous_strides(out_shape)
    kernel = _k("elementwise").strided_copy_kernel
    parts = []
    offset = 0
    for shape in shapes:
        n = math.prod(shape)
        sizes, (src, dst) = _collapse(list(shape), [_memory.contiguous_strides(shape), list(out_strides)])
        if len(sizes) > 4:
            return None
        if not sizes:
            sizes, src, dst = [1], [0], [0]
        pad = 4 - len(sizes)
        sizes, src, dst = [1] * pad + sizes, [0] * pad + src, [0] * pad + dst
        ints = (offset * out_strides[dim], n, *sizes[1:], *src, *dst)
        if max(map(abs, ints)) >= _I32:
            return None
        block = _block(n)
        plan = _Plan(kernel, (dtype, dtype, block), 0, dtype, dtype, _cdiv(n, block))
        plan.n = n
        parts.append((plan, ints))
        offset += shape[dim]
    return _CatPlan(tuple(out_shape), parts)


def cat() -> FastPath:
    """`cat(tensors, dim=0)` of non-empty contiguous tensors of one floating dtype on one device: the
    launches of `_ops.cat` (two inputs: one pair-kernel launch; more: a strided copy per input)."""
    plans: dict[tuple, _CatPlan | None] = PlanMemo(1024, lambda key: _cat_plan(*key))

    def fast(args: tuple, kwargs: dict) -> Tensor | None:
        if kwargs or not 1 <= len(args) <= 2:
            return None
        tensors = args[0]
        dim = args[1] if len(args) == 2 else 0
        if type(tensors) not in (list, tuple) or not tensors or type(dim) is not int:
            return None
        first = tensors[0]
        index = _contiguous_rbln(first)
        if index < 0:
            return None
        dtype = first.dtype
        shapes = []
        for t in tensors:  # one flat loop: cat of two small tensors is mostly this function's own time
            if not isinstance(t, Tensor) or t.dtype is not dtype or not t.is_contiguous() or \
                    t.get_device() != index:
                return None
            shapes.append(t.shape)
        plan = plans[(dtype, tuple(shapes), dim)]
        if plan is None:
            return None
        deploy = config.deploy_mode()
        pair = plan.pair
        if pair is not None:  # two inputs: one launch
            run = _ready(pair, index)
            a, b = tensors
            if run is None or not (deploy or (pair.finite(a, a.numel()) and pair.finite(b, b.numel()))):
                return None
            out = _memory.empty(plan.shape, dtype, index)
            run(pair.programs, 1, 1, a, b, out, *plan.pair_ints)
            return out
        if plan.wide and _device_tp(index) > 1:
            return None
        runs = []
        for (part, _), t in zip(plan.parts, tensors, strict=True):
            run = part.launcher()
            if run is None or not (deploy or part.finite(t, part.n)):
                return None
            runs.append(run)
        out = _memory.empty(plan.shape, dtype, index)
        for run, (part, ints), t in zip(runs, plan.parts, tensors, strict=True):
            run(part.programs, 1, 1, t, out, *ints)
        return out

    return fast


def arange() -> FastPath:
    """`arange.start_out(start, end, step=1, *, out)` with Python-number bounds into a contiguous rbln
    `out` that already has the result's length: the launch of `_ops.arange` (nothing is read, so
    nothing is scanned)."""

    def new_plan(plan_key: tuple) -> _Plan | None:
        dtype, n = plan_key
        if dtype not in (*_INDICES, *FLOATS) or n <= 0:
            return None
        if dtype.is_floating_point and n > ARANGE_ONE_CHUNK:
            return None
        block = _block(n)
        lanes, n_vec = arange_vector_layout(dtype, n)
        plan = _Plan(_k("elementwise").arange_kernel, (dtype, block, n < _I32, lanes), 0, dtype,
                     torch.float32, _cdiv(n, block))
        plan.n = n
        plan.n_vec = n_vec
        return plan

    plans: dict[tuple, _Plan | None] = PlanMemo(1024, new_plan)

    def fast(args: tuple, kwargs: dict) -> Tensor | None:
        count = len(args)
        if not 2 <= count <= 3 or len(kwargs) != 1:
            return None
        out = kwargs.get("out")
        start, end = args[0], args[1]
        step = args[2] if count == 3 else 1
        if type(start) not in _NUMBER or type(end) not in _NUMBER or type(step) not in _NUMBER or step == 0:
            return None
        if abs(start) > 2 ** 24 or abs(end) > 2 ** 24 or not (splits_exactly(start) and splits_exactly(step)):
            return None
        index = _contiguous_rbln(out)
        if index < 0 or out.dim() != 1:
            return None
        n = max(0, math.ceil((end - start) / step))
        if out.shape[0] != n:
            return None
        plan = plans[(out.dtype, n)]
        run = _ready(plan, index)
        if run is None:
            return None
        run(plan.programs, 1, 1, out, n, plan.n_vec, *split_double(start), *split_double(step))
        return out

    return fast


FAST_PATHS: dict[str, FastPath] = {
    "index_select.default": index_select(),
    "embedding_dense_backward.default": embedding_backward(),
    "cat.default": cat(),
    "arange.start_out": arange(),
}
