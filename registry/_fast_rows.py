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
from torch_rbln.tp import requested_backend

from . import _loss
from ._fastpath import FastPath, _contiguous_rbln, _Plan
from ._finite_scan import PARALLEL_MIN, all_finite
from ._memo import PlanMemo
from ._ops import (
    _I32,
    _NORM_BACKWARD_SMALL_ROWS,
    _ONE_BLOCK,
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


_range_entry: list = []  # [in_range_64's compiled entry point] once made


def _in_range_64(address: int, n: int, stop: int, ignore: int) -> bool:
    """`kernels.embedding.in_range_64` through its compiled int64 entry point (numba's per-call typing
    of four arguments skipped, ~0.2 us a call: the losses range-check their targets on every call)."""
    if not _range_entry:
        from ._finite_numba import int64_entry

        _range_entry.append(int64_entry(_k("embedding").in_range_64, 4))
    return _range_entry[0](address, n, stop, ignore)


# ---------------------------------------------------------------- softmax / log_softmax backward

def softmax_backward(*, log: bool) -> FastPath:
    """`_softmax_backward_data` / `_log_softmax_backward_data(grad, output, dim, input_dtype)` over the
    last dim: the row-kernel launch of `_ops.softmax_backward`."""

    def new_plan(plan_key: tuple) -> _Plan | None:
        dtype, shape, dim = plan_key
        nd = len(shape)
        if dtype not in FLOATS or nd == 0 or not -nd <= dim < nd or dim % nd != nd - 1:
            return None
        n = shape[-1]
        numel = math.prod(shape)
        if numel == 0:
            return None
        block = _row_block(n)
        key = (dtype, dtype, log, block, n < _I32)
        plan = _Plan(_k("rows").softmax_backward_kernel, key, 0, dtype, dtype, numel // n)
        plan.n = n
        return plan

    plans: dict[tuple, _Plan | None] = PlanMemo(1024, new_plan)

    def fast(args: tuple, kwargs: dict) -> Tensor | None:
        if len(args) != 4 or kwargs:
            return None
        grad, output, dim, input_dtype = args
        index = _contiguous_rbln(output)
        if index < 0 or type(dim) is not int:
            return None
        dtype = output.dtype
        shape = output.shape
        if input_dtype is not dtype or not isinstance(grad, Tensor) or grad.dtype is not dtype or \
                not grad.is_contiguous() or grad.get_device() != index or grad.shape != shape:
            return None
        plan = plans[(dtype, shape, dim)]
        run = _ready(plan, index)
        if run is None:
            return None
        if not config.deploy_mode():  # written flat: on 4 elements each call is a share of the op
            numel = plan.programs * plan.n
            if numel < PARALLEL_MIN:
                scan, mask = plan.scan, plan.mask
                if not (scan(grad.data_ptr(), numel, mask) and scan(output.data_ptr(), numel, mask)):
                    return None
            elif not (all_finite(grad) and all_finite(output)):
                return None
        out = _memory.empty(shape, dtype, index)
        run(plan.programs, 1, 1, grad, output, out, plan.n)
        return out

    return fast


# ---------------------------------------------------------------- layer norm backward

class _NormBackwardPlan:
    """A layer-norm backward's launches for one (dtype, shape, normalized shape, weight?, bias?, output
    mask, deploy mode): the one-program kernel's plan (`fused`: a few short rows) or the dx row
    kernel's (`first`) and the dw/db column kernel's (`params`); the input scan (`scan_all` over grad,
    x, mean, rstd, weight, bias with their element `counts`, `wide` for 32-bit words); the element
    counts the fused launch by address passes (`spans`); and the `_memory.triple_layout` of (dx, dw, db)
    when all three are asked for over one normalized dim (`layout`; other calls build theirs per
    call). Outside deploy mode the one-program kernel checks its inputs itself (CHECK), so its launch
    by address needs no scan."""

    __slots__ = ("first", "params", "fused", "rows", "n", "need_dw", "need_db", "scan_all",
                 "counts", "wide", "spans", "layout")


def layer_norm_backward() -> FastPath:
    """`native_layer_norm_backward(grad, x, normalized_shape, mean, rstd, weight, bias, output_mask)`
    with everything contiguous of x's dtype on its device: the launches of `_ops.layer_norm_backward`
    (a few short rows: the one-program kernel; else the dx row kernel and the dw/db column kernel),
    same arguments."""

    def new_plan(plan_key: tuple) -> _NormBackwardPlan | None:
        dtype, shape, normalized, has_w, has_b, mask, deploy = plan_key
        tail = len(normalized)
        if dtype not in FLOATS or tail == 0 or tail > len(shape) or tuple(shape[-tail:]) != normalized:
            return None
        n = math.prod(normalized)
        numel = math.prod(shape)
        if n == 0 or numel == 0:
            return None
        rows = numel // n
        R = _k("rows")
        need_dx, need_dw, need_db = mask
        need_dw, need_db = need_dw and has_w, need_db and has_b
        if not (need_dx or need_dw or need_db):
            return None
        plan = _NormBackwardPlan()
        plan.rows, plan.n, plan.need_dw, plan.need_db = rows, n, need_dw, need_db
        # the input scan: grad, x, mean, rstd, weight, bias (an absent one scans 0 elements)
        plan.scan_all = R.inputs_finite_entry(6) if numel < PARALLEL_MIN else None
        plan.counts = (numel, numel, rows, rows, n if has_w else 0, n if has_b else 0)
        plan.wide = int(dtype == torch.float32)
        # one normalized dim: a weight and bias of one dim and n elements have exactly that shape
        kept = need_dx and need_dw and need_db and tail == 1
        plan.layout = _memory.triple_layout(shape, normalized, normalized) if kept else None
        plan.first = plan.params = plan.spans = None
        plan.fused = rows <= _NORM_BACKWARD_SMALL_ROWS and n <= _ONE_BLOCK
        if plan.fused:
            key = (dtype,) * 9 + (has_w, has_b, need_dx, need_dw, need_db, not deploy, _row_block(n),
                                  rows < _I32, n < _I32)
            plan.first = _Plan(R.norm_backward_small_kernel, key, 0, dtype, dtype)
            # the element counts of its launch by address: grad, x, weight, bias (x stands in for an
            # absent one), mean, rstd, dx, dw, db (grad stands in for an absent result)
            plan.spans = (numel, numel, n if has_w else numel, n if has_b else numel, rows, rows, numel,
                          n if need_dw else numel, n if need_db else numel)
            return plan
        if need_dx:
            key = (dtype,) * 6 + (has_w, _row_block(n), n < _I32)
            plan.first = _Plan(R.norm_backward_kernel, key, 0, dtype, dtype, rows)
        if need_dw or need_db:
            block = 16 if n <= 16 else 128
            key = (dtype,) * 6 + (need_dw, need_db, block, rows < _I32, n < _I32)
            plan.params = _Plan(R.norm_param_grad_kernel, key, 0, dtype, dtype, _cdiv(n, block))
        return plan

    plans = PlanMemo(1024, new_plan)

    def fast(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 8 or kwargs:
            return None
        grad, x, normalized, mean, rstd, weight, bias, mask = args
        index = _contiguous_rbln(x)
        kind = type(mask)
        if index < 0 or (kind is not list and kind is not tuple) or len(mask) != 3:
            return None
        kind = type(normalized)
        if kind is not list and kind is not tuple:
            return None
        dtype = x.dtype
        if not (isinstance(grad, Tensor) and grad.dtype is dtype and grad.is_contiguous()
                and grad.get_device() == index and isinstance(mean, Tensor) and mean.dtype is dtype
                and mean.is_contiguous() and mean.get_device() == index and isinstance(rstd, Tensor)
                and rstd.dtype is dtype and rstd.is_contiguous() and rstd.get_device() == index):
            return None
        has_w, has_b = weight is not None, bias is not None
        if (has_w or has_b) and not _same(index, dtype, weight, bias):
            return None
        shape = x.shape
        if grad.shape != shape:
            return None
        need_dx, need_dw, need_db = mask
        if type(need_dx) is not bool or type(need_dw) is not bool or type(need_db) is not bool:
            return None
        deploy = config.deploy_mode()
        plan = plans[(dtype, shape, tuple(normalized), has_w, has_b, (need_dx, need_dw, need_db), deploy)]
        if plan is None:
            return None
        rows, n = plan.rows, plan.n
        if mean.numel() != rows or rstd.numel() != rows or (has_w and weight.numel() != n) \
                or (has_b and bias.numel() != n):
            return None
        first, params = plan.first, plan.params
        run = run_params = None
        if first is not None:
            run = first.run  # `first.kept(index)`, inline
            if run is None or first.backend != requested_backend():
                run = first.launcher()
                if run is None:
                    return None  # no kept launch yet
            if first.programs > 1 and _device_tp(index) > 1:
                return None  # a grid split over a tensor-parallel group: the general launch's
        if params is not None:
            run_params = _ready(params, index)
            if run_params is None:
                return None
        w = x if weight is None else weight  # an absent weight/bias is not read: x stands in
        # the one-program kernel launched by address checks its inputs itself: no scan
        checked = plan.fused and first.by_address is not None
        if not deploy and not checked:
            scan_all = plan.scan_all
            if scan_all is not None:  # one compiled call scans the six inputs
                x_address = x.data_ptr()
                addresses = (grad.data_ptr(), x_address, mean.data_ptr(), rstd.data_ptr(),
                             x_address if weight is None else weight.data_ptr(),
                             x_address if bias is None else bias.data_ptr())
                if not scan_all(addresses, plan.counts, (first or params).mask, plan.wide):
                    return None
            elif not _finite(first or params, grad, x, mean, rstd, weight, bias):
                return None
        layout = plan.layout
        if layout is not None and weight.dim() == 1 and bias.dim() == 1:
            # training's usual call: the three in one allocation, weight and bias of the normalized shape
            dx, dw, db = _memory.empty_triple_of(layout, dtype, index)
        elif need_dx and plan.need_dw and plan.need_db:
            dx, dw, db = _memory.empty_triple(shape, weight.shape, bias.shape, dtype, index)
        else:
            dx = _memory.empty(shape, dtype, index) if need_dx else None
            dw = _memory.empty(weight.shape, dtype, index) if plan.need_dw else None
            db = _memory.empty(bias.shape, dtype, index) if plan.need_db else None
        dw_t = grad if dw is None else dw  # an absent result is never written: grad stands in, as there
        db_t = grad if db is None else db
        if plan.fused:  # the one-program kernel
            if not checked:
                run(1, 1, 1, grad, x, w, x if bias is None else bias, mean, rstd, grad if dx is None else dx,
                    dw_t, db_t, rows, n)
                return dx, dw, db
            ga, xa = grad.data_ptr(), x.data_ptr()
            sg, sx, sw, sb, sm, sr, sdx, sdw, sdb = plan.spans
            if not first.by_address(1, 1, 1, ga, sg, xa, sx, xa if weight is None else weight.data_ptr(), sw,
                                    xa if bias is None else bias.data_ptr(), sb, mean.data_ptr(), sm,
                                    rstd.data_ptr(), sr, ga if dx is None else dx.data_ptr(), sdx,
                                    dw_t.data_ptr(), sdw, db_t.data_ptr(), sdb, rows, n):
                # a fault: outside deploy mode most likely the kernel's NaN/Inf check; the general
                # path re-runs the call, which scans (and takes the CPU for such inputs) or reports it
                return None
            return dx, dw, db
        if run is not None:
            run(rows, 1, 1, grad, x, w, mean, rstd, dx, dx, n)
        if run_params is not None:
            run_params(params.programs, 1, 1, grad, x, mean, rstd, dw_t, db_t, rows, n)
        return dx, dw, db

    fast.plans = plans  # type: ignore[attr-defined]  # for tests that inspect the plans
    return fast


# ---------------------------------------------------------------- nll loss

class _LossPlan(_Plan):
    """An nll_loss launch with its per-call check (`kernels.loss.inputs_plain`: targets in range, float
    inputs finite) as one compiled entry, `check`, and the element counts it scans of each float input
    (`counts`: 0 for an absent weight; `unscanned`, all 0, in deploy mode), or `check` None when the
    inputs are large enough for the tensor-parallel scan."""

    __slots__ = ("check", "counts", "unscanned", "wide")

    def prepare_check(self, counts: tuple, dtype: torch.dtype) -> None:
        numel = max(counts)
        self.check = _k("loss").inputs_plain_entry(len(counts)) if numel < PARALLEL_MIN else None
        self.counts = counts
        self.unscanned = (0,) * len(counts)
        self.wide = int(dtype == torch.float32)


def nll_loss_forward() -> FastPath:
    """`nll_loss_forward(x, target, weight, reduction, ignore_index)` with reduction mean or sum (none
    also fills total_weight: the general path), targets range-checked by the compiled scan as there:
    the one launch of `_loss.nll_loss_forward`."""

    def new_plan(plan_key: tuple) -> _LossPlan | None:
        dtype, shape, target_shape, reduction, ignore_index, has_w = plan_key
        if dtype not in FLOATS or len(shape) not in (1, 2) or len(target_shape) != len(shape) - 1:
            return None
        rows = shape[0] if len(shape) == 2 else 1
        classes = shape[-1]
        if rows != math.prod(target_shape) or rows == 0 or classes == 0:
            return None
        block = _block(rows)
        ints = (rows, classes, ignore_index, reduction, int(has_w))
        key = _loss.forward_key(dtype, dtype, block, ints)
        plan = _LossPlan(_k("loss").nll_loss_kernel, key, 0, dtype, dtype)
        plan.n = classes
        plan.prepare_check((rows * classes, classes if has_w else 0), dtype)  # x, weight
        return plan

    plans: dict[tuple, _LossPlan | None] = PlanMemo(1024, new_plan)

    def fast(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 5 or kwargs:  # written flat, as nll_loss_backward's
            return None
        x, target, weight, reduction, ignore_index = args
        if not isinstance(x, Tensor) or not x.is_contiguous() or (reduction != 1 and reduction != 2) or \
                type(ignore_index) is not int:
            return None
        index = x.get_device()
        if index < 0 or not isinstance(target, Tensor) or target.dtype is not torch.int64 or \
                not target.is_contiguous() or target.get_device() != index:
            return None
        dtype = x.dtype
        has_w = weight is not None
        if has_w and not _same(index, dtype, weight):
            return None
        plan = plans[(dtype, x.shape, target.shape, reduction, ignore_index, has_w)]
        if plan is None:
            return None
        classes = plan.n
        if has_w and weight.numel() != classes:
            return None
        run = plan.run  # `plan.kept(index)`, inline (one program)
        if run is None or plan.backend != requested_backend():
            run = plan.launcher()
            if run is None:
                return None  # no kept launch yet
        w = weight if has_w else x  # not read without HAS_W: x stands in
        rows = target.numel()
        check = plan.check
        if check is not None:  # targets in range and x, weight finite: one compiled call
            if not check(target.data_ptr(), rows, classes, ignore_index, (x.data_ptr(), w.data_ptr()),
                         plan.unscanned if config.deploy_mode() else plan.counts, plan.mask, plan.wide):
                return None  # a bad target: the general path declines, torch's error from the CPU kernel
        elif not _finite(plan, x, weight) or not _in_range_64(target.data_ptr(), rows, classes, ignore_index):
            return None
        loss, total_weight = _memory.empty_pair((), (), dtype, index)
        run(1, 1, 1, x, target, w, loss, total_weight, rows, classes, ignore_index, reduction, int(has_w))
        return loss, total_weight

    return fast


def nll_loss_backward() -> FastPath:
    """`nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight)`: the one
    launch of `_loss.nll_loss_backward` (it writes whole rows of dx, so no zero fill)."""

    def new_plan(plan_key: tuple) -> _LossPlan | None:
        dtype, shape, target_shape, grad_numel, reduction, ignore_index, has_w = plan_key
        if dtype not in FLOATS or len(shape) not in (1, 2) or len(target_shape) != len(shape) - 1:
            return None
        rows = shape[0] if len(shape) == 2 else 1
        classes = shape[-1]
        if rows != math.prod(target_shape) or rows == 0 or classes == 0 or reduction not in _loss.REDUCTIONS:
            return None
        if grad_numel != (rows if reduction == 0 and len(shape) == 2 else 1):
            return None
        block = _row_block(classes)
        ints = (classes, ignore_index, reduction, int(has_w))
        key = _loss.backward_key(dtype, dtype, dtype, dtype, block, ints)
        plan = _LossPlan(_k("loss").nll_loss_backward_kernel, key, 0, dtype, dtype, rows)
        plan.n = classes
        plan.prepare_check((grad_numel, rows * classes, classes if has_w else 0, 1), dtype)  # grad, x, w, tw
        return plan

    plans: dict[tuple, _LossPlan | None] = PlanMemo(1024, new_plan)

    def fast(args: tuple, kwargs: dict) -> Tensor | None:
        # written flat (type and layout checks inline, the kept launch read inline, one compiled check):
        # on 4 elements each Python call on the way to the launch is a measurable share of the op
        if len(args) != 7 or kwargs:
            return None
        grad, x, target, weight, reduction, ignore_index, total_weight = args
        if not isinstance(x, Tensor) or not x.is_contiguous() or type(reduction) is not int or \
                type(ignore_index) is not int:
            return None
        index = x.get_device()
        if index < 0 or not isinstance(target, Tensor) or target.dtype is not torch.int64 or \
                not target.is_contiguous() or target.get_device() != index:
            return None
        dtype = x.dtype
        if not isinstance(grad, Tensor) or grad.dtype is not dtype or not grad.is_contiguous() or \
                grad.get_device() != index:
            return None
        if not isinstance(total_weight, Tensor) or total_weight.dtype is not dtype or \
                total_weight.numel() != 1 or total_weight.get_device() != index:
            return None  # (one element: contiguous)
        has_w = weight is not None
        if has_w and not _same(index, dtype, weight):
            return None
        shape = x.shape
        plan = plans[(dtype, shape, target.shape, grad.numel(), reduction, ignore_index, has_w)]
        if plan is None:
            return None
        classes = plan.n
        if has_w and weight.numel() != classes:
            return None
        run = plan.run  # `plan.kept(index)`, inline
        if run is None or plan.backend != requested_backend():
            run = plan.launcher()
            if run is None:
                return None  # no kept launch yet
        programs = plan.programs
        if programs > 1 and _device_tp(index) > 1:
            return None  # a grid split over a tensor-parallel group: the general launch's
        w = weight if has_w else grad  # not read without HAS_W: grad stands in
        check = plan.check
        if check is not None:  # targets in range and grad, x, weight, total_weight finite: one call
            if not check(target.data_ptr(), target.numel(), classes, ignore_index,
                         (grad.data_ptr(), x.data_ptr(), w.data_ptr(), total_weight.data_ptr()),
                         plan.unscanned if config.deploy_mode() else plan.counts, plan.mask, plan.wide):
                return None
        elif not _finite(plan, grad, x, weight, total_weight) or \
                not _in_range_64(target.data_ptr(), target.numel(), classes, ignore_index):
            return None
        dx = _memory.empty(shape, dtype, index)
        run(programs, 1, 1, grad, target, w, total_weight, dx, classes, ignore_index, reduction, int(has_w))
        return dx

    return fast


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
    "_softmax_backward_data.default": softmax_backward(log=False),
    "_log_softmax_backward_data.default": softmax_backward(log=True),
    "native_layer_norm_backward.default": layer_norm_backward(),
    "nll_loss_forward.default": nll_loss_forward(),
    "nll_loss_backward.default": nll_loss_backward(),
    "index_select.default": index_select(),
    "embedding_dense_backward.default": embedding_backward(),
    "cat.default": cat(),
    "arange.start_out": arange(),
}
