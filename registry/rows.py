"""The rows family: softmax / log_softmax and their backward, layer norm and its backward: row kernels
(`kernels/rows.py`) over the last dim, and their plans (one per call signature, `plan.py`).

The launch decisions (`softmax_launch`, `softmax_backward_launch`, `norm_launch`,
`norm_backward_launches`) are made in one place each and used by both the checked implementations
(any layout: another dim is moved last by a copy, strided operands are copied first) and the plans
(contiguous operands of one floating dtype on one device, the last dim), so both launch the same
specialisation with the same arguments.

The layer-norm kernels check their inputs themselves outside deploy mode (CHECK), so a plan whose
kept launch can launch by address (`NormPlan.by_address`) scans nothing: a NaN/Inf makes the kernel
report a fault and the call goes to the implementation, which scans and takes the logged CPU fallback.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from torch_rbln import _memory, config
from torch_rbln.tp import device_tp, requested_backend

from . import _launch
from ._finite_scan import PARALLEL_MIN, all_finite, contiguous_scan
from ._ops import FLOATS, Decline, _k, cast_copy, contiguous, empty
from .geometry import I32, ONE_BLOCK, ROW_CHUNK, cdiv, column_block, row_block
from .plan import NO_PLAN, Family, Plan, unscanned

KernelKey = tuple  # (kernel, launch key, constexpr keywords): a launch whose grid the caller decides


class NormPlan(Plan):
    """A layer-norm plan: besides the kept launch (and its launch by address, `Plan.by_address`: False
    on a fault such as the kernel's NaN/Inf check), `scan_all`, one compiled scan of all inputs
    (`kernels.rows.inputs_finite`; None for inputs large enough for the tensor-parallel scan)."""

    __slots__ = ("scan_all",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scan_all: Callable | None = None


def _last_dim(dtype: torch.dtype, shape: tuple, dim: int) -> int | None:
    """The row length of a row kernel over `dim` of a contiguous tensor, when `dim` names its last dim
    (and the tensor is a non-empty one of a floating dtype); None otherwise."""
    nd = len(shape)
    if dtype not in FLOATS or nd == 0 or not -nd <= dim < nd or dim % nd != nd - 1 or not math.prod(shape):
        return None
    return shape[-1]


def _finite(scan: Callable, mask: int, tensors: tuple) -> bool:
    for t in tensors:
        numel = t.numel()
        if not (scan(t.data_ptr(), numel, mask) if numel < PARALLEL_MIN else all_finite(t)):
            return False
    return True


# ---------------------------------------------------------------- softmax, log_softmax (+ backward)

def _moved_last(x: Tensor, dim: int) -> tuple[Tensor, int | None]:
    """(`x` with `dim` moved last, contiguous; the dim to move back afterwards, None when it was last).
    The row kernels reduce along the last dim; another dim costs a copy there and one back."""
    if not x.dim() or dim % x.dim() == x.dim() - 1:
        return contiguous(x), None
    return cast_copy(x.movedim(dim, -1), x.dtype), dim % x.dim()


def _moved_back(out: Tensor, dim: int | None) -> Tensor:
    return out if dim is None else cast_copy(out.movedim(-1, dim), out.dtype)


def softmax_launch(dtype: torch.dtype, n: int, log: bool) -> KernelKey:
    """The one-pass row kernel over rows of `n` <= ONE_BLOCK elements."""
    block = row_block(n)
    return _k("rows").softmax_row_kernel, (dtype, log, block, n < I32), {"LOG": log, "BLOCK": block}


def softmax_backward_launch(grad_dtype: torch.dtype, output_dtype: torch.dtype, n: int, log: bool
                            ) -> KernelKey:
    block = row_block(n)
    return (_k("rows").softmax_backward_kernel, (grad_dtype, output_dtype, log, block, n < I32),
            {"LOG": log, "BLOCK": block})


def softmax(x: Tensor, dim: int, half_to_float: bool, *, log: bool) -> Tensor:
    """softmax / log_softmax along `dim`, registered exact: the kernels compute what torch's CPU kernels
    do for NaN and infinities (x - max(x) with a NaN-propagating max, then exp, sum and divide or log),
    so a row with -inf (masked scores) keeps its zeros / -inf on the device, and a row of only -inf, or
    with +inf or NaN, is NaN throughout, as on the CPU."""
    if half_to_float:
        raise Decline("half_to_float")
    if x.dim() > 1 and dim % x.dim() != x.dim() - 1:
        return _softmax_middle(x, dim % x.dim(), log)
    x, moved = _moved_last(x, dim)
    out = empty(x.shape, x.dtype, x.get_device())
    n = x.shape[-1] if x.dim() else 1
    if x.numel() == 0:
        return _moved_back(out, moved)
    if n <= ONE_BLOCK:
        kernel, key, keywords = softmax_launch(x.dtype, n, log)
        _launch.launch(kernel, x.numel() // n, key, (x, out, n), keywords)
    else:  # the chunked kernel
        rows = _k("rows")
        rows.softmax_kernel[(x.numel() // n,)](x, out, n, LOG=log, BLOCK=rows.SOFTMAX_CHUNK)
    return _moved_back(out, moved)


def _softmax_middle(x: Tensor, dim: int, log: bool) -> Tensor:
    """softmax over a dim other than the last: `softmax_middle_kernel` on x (contiguous) seen as
    (outer, r, inner), lanes from `column_block(inner)`; a contiguous result, as the moved-dim path."""
    x = contiguous(x)
    out = empty(x.shape, x.dtype, x.get_device())
    if x.numel() == 0:
        return out
    outer, r, inner = math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1:])
    lanes = column_block(inner)
    _launch.launch_grid(_k("rows").softmax_middle_kernel, (outer, cdiv(inner, lanes)), (x, out, r, inner),
                        LOG=log, BLOCK=lanes)
    return out


def softmax_backward(grad: Tensor, output: Tensor, dim: int, input_dtype, *, log: bool) -> Tensor:
    """dx of softmax / log_softmax: one row-kernel launch over the last dim (another dim is moved
    there and back)."""
    if input_dtype != grad.dtype:
        raise Decline("mixed input dtype")
    if grad.shape != output.shape:
        raise Decline("grad and output shapes differ")
    grad, _ = _moved_last(grad, dim)
    output, moved = _moved_last(output, dim)
    out = empty(output.shape, output.dtype, output.get_device())
    n = output.shape[-1] if output.dim() else 1
    if output.numel() == 0:
        return _moved_back(out, moved)
    kernel, key, keywords = softmax_backward_launch(grad.dtype, output.dtype, n, log)
    _launch.launch(kernel, output.numel() // n, key, (grad, output, out, n), keywords)
    return _moved_back(out, moved)


def _row_plan(launch: KernelKey, dtype: torch.dtype, shape: tuple, index: int, n: int, inputs: int, *,
              scan_inputs: bool = True) -> Plan:
    """The plan of one row-kernel launch `kernel(*inputs, out, n)` over contiguous inputs of `shape`
    with an output of that shape (written out per input count: on a few elements each step counts).
    `scan_inputs` False: the op is exact on NaN/Inf (softmax), nothing is scanned."""
    kernel, key, keywords = launch
    numel = math.prod(shape)
    rows = numel // n
    plan = Plan(kernel, key, keywords, rows, 1, shape, dtype, tuple(range(inputs)) if scan_inputs else ())
    scan, mask, small = *contiguous_scan(dtype), numel < PARALLEL_MIN  # (the scans inline: per-call cost)
    new = _memory.allocator(shape, dtype, index)
    deploy_mode = config.deploy_mode if scan_inputs else unscanned

    def run(operands: tuple) -> Tensor | None:  # one input (softmax)
        x, = operands
        launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
        if not deploy_mode() and not (scan(x.data_ptr(), numel, mask) if small else all_finite(x)):
            return None
        out = new()
        if launcher is None or (rows > 1 and device_tp(index) > 1):
            plan.launch_checked((x, out, n))
        else:
            launcher(rows, 1, 1, x, out, n)
        return out

    def run_two(operands: tuple) -> Tensor | None:  # two inputs (softmax backward: grad, output)
        g, y = operands
        launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
        if not deploy_mode() and not (scan(g.data_ptr(), numel, mask) and scan(y.data_ptr(), numel, mask)
                                      if small else all_finite(g) and all_finite(y)):
            return None
        out = new()
        if launcher is None or (rows > 1 and device_tp(index) > 1):
            plan.launch_checked((g, y, out, n))
        else:
            launcher(rows, 1, 1, g, y, out, n)
        return out

    plan.run = run if inputs == 1 else run_two
    return plan


def softmax_family(*, log: bool) -> Family:
    """`_softmax` / `_log_softmax(x, dim, half_to_float=False)` over the last dim of a contiguous tensor
    whose rows fit one block (longer rows: the implementation's chunked kernel)."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 3 or kwargs:
            return None
        x, dim, half_to_float = args
        if half_to_float is not False or type(dim) is not int or not isinstance(x, Tensor) or \
                not x.is_contiguous():
            return None
        index = x.get_device()
        return None if index < 0 else ((x.dtype, x.shape, index, dim), (x,))

    def plan(key: tuple, operands: tuple) -> Plan:
        dtype, shape, index, dim = key
        n = _last_dim(dtype, tuple(shape), dim)
        if n is None or n > ONE_BLOCK:
            return NO_PLAN
        return _row_plan(softmax_launch(dtype, n, log), dtype, tuple(shape), index, n, 1, scan_inputs=False)

    return Family(signature, plan)


def softmax_backward_family(*, log: bool) -> Family:
    """`_softmax_backward_data` / `_log_softmax_backward_data(grad, output, dim, input_dtype)` over the
    last dim, grad and output contiguous of one shape and dtype (input_dtype too)."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 4 or kwargs:
            return None
        grad, output, dim, input_dtype = args
        if not isinstance(output, Tensor) or not output.is_contiguous() or type(dim) is not int:
            return None
        index, dtype = output.get_device(), output.dtype
        if index < 0 or input_dtype is not dtype or not isinstance(grad, Tensor) or \
                grad.dtype is not dtype or not grad.is_contiguous() or grad.get_device() != index or \
                grad.shape != output.shape:
            return None
        return (dtype, output.shape, index, dim), (grad, output)

    def plan(key: tuple, operands: tuple) -> Plan:
        dtype, shape, index, dim = key
        n = _last_dim(dtype, tuple(shape), dim)
        if n is None:
            return NO_PLAN
        return _row_plan(softmax_backward_launch(dtype, dtype, n, log), dtype, tuple(shape), index, n, 2)

    return Family(signature, plan)


# ---------------------------------------------------------------- layer norm

def norm_launch(x_dtype, w_dtype, b_dtype, out_dtype, stats_dtype, n: int, *, rms: bool, has_w: bool,
                has_b: bool, check: bool = False) -> tuple:
    """(kernel, launch key, constexprs) of a layer/RMS norm launch over rows of `n` elements (`mean`
    and `rstd` both of `stats_dtype`; `check`: the kernel faults on a NaN/Inf input). n is the launch's
    only int argument, so the dtypes, the constexprs and n's width make the key."""
    R = _k("rows")
    kernel, block = (R.norm_row_kernel, row_block(n)) if n <= ONE_BLOCK else (R.norm_kernel, ROW_CHUNK)
    key = (x_dtype, w_dtype, b_dtype, out_dtype, stats_dtype, stats_dtype, rms, has_w, has_b, check, block,
           n < I32)
    return kernel, key, {"RMS": rms, "HAS_W": has_w, "HAS_B": has_b, "CHECK": check, "BLOCK": block}


def layer_norm(x, normalized_shape, weight, bias, eps):
    n = math.prod(normalized_shape)
    if n == 0 or x.numel() == 0:
        raise Decline("empty tensor")
    x = contiguous(x)
    rows = x.numel() // n
    index = x.get_device()
    out = empty(x.shape, x.dtype, index)
    axis = x.dim() - len(normalized_shape)
    stat_shape = list(x.shape[:axis]) + [1] * len(normalized_shape)
    mean = empty(stat_shape, x.dtype, index)
    rstd = empty(stat_shape, x.dtype, index)
    w = contiguous(weight) if weight is not None else x
    b = contiguous(bias) if bias is not None else x
    # outside deploy mode the kernel checks its inputs too (CHECK): the registry has scanned them
    # already, but the plans launch by address without a scan and rely on that check
    kernel, key, keywords = norm_launch(x.dtype, w.dtype, b.dtype, out.dtype, mean.dtype, n, rms=False,
                                        has_w=weight is not None, has_b=bias is not None,
                                        check=not config.deploy_mode())
    _launch.launch(kernel, rows, key, (x, w, b, out, mean, rstd, n, float(eps)), keywords)
    return out, mean, rstd


def _normalized(dtype: torch.dtype, shape: tuple, normalized: tuple, w_shape: tuple | None,
                b_shape: tuple | None) -> int | None:
    """The row length of a layer norm of a tensor of `shape` over its trailing dims `normalized` with a
    weight and bias of those shapes (None: absent), or None where no plan takes it (another dtype,
    shapes that do not line up, an empty tensor)."""
    tail = len(normalized)
    if dtype not in FLOATS or tail == 0 or tail > len(shape) or tuple(shape[-tail:]) != normalized:
        return None
    n = math.prod(normalized)
    if not n or not math.prod(shape) or any(s is not None and math.prod(s) != n for s in (w_shape, b_shape)):
        return None
    return n


def layer_norm_family() -> Family:
    """`native_layer_norm(x, normalized_shape, weight, bias, eps)` on a contiguous tensor with weight
    and bias (or None) contiguous of its dtype on its device: `layer_norm`'s launch, outputs (out, mean,
    rstd) allocated together."""
    deploy_mode = config.deploy_mode

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 5 or kwargs:
            return None
        x, normalized, weight, bias, eps = args
        if not isinstance(x, Tensor) or not x.is_contiguous():
            return None
        index = x.get_device()
        kind = type(eps)
        if index < 0 or (kind is not float and kind is not int):
            return None
        kind = type(normalized)
        if kind is not list and kind is not tuple:
            return None
        dtype = x.dtype
        w_key = b_key = None  # (written flat: on 4 elements each call on the way is a share of the op)
        if weight is not None:
            if not isinstance(weight, Tensor) or weight.dtype is not dtype or not weight.is_contiguous() or \
                    weight.get_device() != index:
                return None
            w_key = weight.shape
        if bias is not None:
            if not isinstance(bias, Tensor) or bias.dtype is not dtype or not bias.is_contiguous() or \
                    bias.get_device() != index:
                return None
            b_key = bias.shape
        return ((dtype, x.shape, index, tuple(normalized), w_key, b_key, deploy_mode()),
                (x, weight, bias, eps))

    return Family(signature, _layer_norm_plan)


def _layer_norm_plan(key: tuple, operands: tuple) -> Plan:
    dtype, shape, index, normalized, w_shape, b_shape, deploy = key
    shape = tuple(shape)
    n = _normalized(dtype, shape, normalized, w_shape, b_shape)
    if n is None:
        return NO_PLAN
    has_w, has_b = w_shape is not None, b_shape is not None
    numel = math.prod(shape)
    rows = numel // n
    kernel, launch_key, keywords = norm_launch(dtype, dtype, dtype, dtype, dtype, n, rms=False, has_w=has_w,
                                               has_b=has_b, check=not deploy)
    tail = len(normalized)
    stats_shape = shape[:-tail] + (1,) * tail
    plan = NormPlan(kernel, launch_key, keywords, rows, 1, shape, dtype, (0, 1, 2))
    plan.scan_all = _k("rows").inputs_finite_entry(3) if numel < PARALLEL_MIN else None
    layout = _memory.triple_layout(shape, stats_shape, stats_shape)
    counts = (numel, n if has_w else 0, n if has_b else 0)  # what the scan reads of x, weight, bias
    # the element counts the launch by address passes: x, weight, bias (x stands in for an absent one),
    # out, mean, rstd
    spans = (numel, n if has_w else numel, n if has_b else numel, numel, rows, rows)
    scan, mask = contiguous_scan(dtype)
    wide = int(dtype == torch.float32)
    split = rows > 1
    empty_triple_of = _memory.empty_triple_of

    def run(operands: tuple) -> tuple | None:
        x, weight, bias, eps = operands
        launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
        w = x if weight is None else weight  # an absent weight/bias is not read (HAS_W/HAS_B): x stands in
        b = x if bias is None else bias
        by_address = plan.by_address
        if by_address is None or (split and device_tp(index) > 1):
            # a launch that raises its faults: scan first, as the implementation's checks do
            if not deploy:
                scan_all = plan.scan_all
                if scan_all is not None:
                    xa = x.data_ptr()
                    if not scan_all((xa, w.data_ptr(), b.data_ptr()), counts, mask, wide):
                        return None
                elif not _finite(scan, mask, (x, w, b)):
                    return None
            out, mean, rstd = empty_triple_of(layout, dtype, index)
            args = (x, w, b, out, mean, rstd, n, float(eps))
            if launcher is None or (split and device_tp(index) > 1):
                plan.launch_checked(args)
            else:
                launcher(rows, 1, 1, *args)
            return out, mean, rstd
        out, mean, rstd = empty_triple_of(layout, dtype, index)
        xa = x.data_ptr()
        sx, sw, sb, so, sm, sr = spans
        if not by_address(rows, 1, 1, xa, sx, w.data_ptr(), sw, b.data_ptr(), sb, out.data_ptr(), so,
                          mean.data_ptr(), sm, rstd.data_ptr(), sr, n, float(eps)):
            # a fault: outside deploy mode most likely the kernel's NaN/Inf check; the implementation
            # re-runs the call, which scans (and takes the CPU for such inputs) or reports the fault
            return None
        return out, mean, rstd

    plan.run = run
    return plan


# ---------------------------------------------------------------- layer norm backward

SMALL_ROWS = 16  # up to this many rows (of at most ONE_BLOCK), one program does the whole backward


class NormBackward(NamedTuple):
    """The launches of a layer-norm backward: `fused` (the one-program kernel, a few short rows), else
    `dx` (the row kernel) and `params` (the dw/db column kernel, with its program count), each None
    when not needed."""

    fused: KernelKey | None
    dx: KernelKey | None
    params: tuple | None


def norm_backward_launches(dtypes: tuple, out_dtypes: tuple, rows: int, n: int, has_w: bool, has_b: bool,
                           need: tuple, check: bool) -> NormBackward:
    """`dtypes`: of grad, x, weight, bias, mean, rstd (an absent weight/bias: x's, which stands in);
    `out_dtypes`: of dx, dw, db (an absent one: grad's); `need`: (dx, dw, db) asked for and possible
    (dw/db need a weight/bias); `check`: the one-program kernel checks its inputs (not deploy mode)."""
    g, x, w, b, m, r = dtypes
    dx_t, dw_t, db_t = out_dtypes
    need_dx, need_dw, need_db = need
    if not (need_dx or need_dw or need_db):
        return NormBackward(None, None, None)
    R = _k("rows")
    if rows <= SMALL_ROWS and n <= ONE_BLOCK:
        block = row_block(n)
        key = (g, x, w, b, m, r, dx_t, dw_t, db_t, has_w, has_b, need_dx, need_dw, need_db, check, block,
               rows < I32, n < I32)
        return NormBackward((R.norm_backward_small_kernel, key,
                             {"HAS_W": has_w, "HAS_B": has_b, "NEED_DX": need_dx, "NEED_DW": need_dw,
                              "NEED_DB": need_db, "CHECK": check, "BLOCK": block}), None, None)
    dx = params = None
    if need_dx:
        block = row_block(n)
        dx = (R.norm_backward_kernel, (g, x, w, m, r, x, has_w, block, n < I32),
              {"RMS": False, "HAS_W": has_w, "NEED_GX": False, "BLOCK": block})
    if need_dw or need_db:
        block = 16 if n <= 16 else 128  # columns per program: several programs share a wide row
        key = (g, x, m, r, dw_t, db_t, need_dw, need_db, block, rows < I32, n < I32)
        params = (R.norm_param_grad_kernel, key, {"NEED_DW": need_dw, "NEED_DB": need_db, "BLOCK": block},
                  cdiv(n, block))
    return NormBackward(None, dx, params)


def layer_norm_backward(grad, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    """(dx, dw, db), each None unless `output_mask` asks for it (and, for dw/db, a weight/bias exists):
    a few short rows in one launch (`norm_backward_small_kernel`); else dx by the row kernel and dw, db
    together by one column kernel that reads grad and x in place."""
    n = math.prod(normalized_shape)
    if n == 0 or x.numel() == 0:
        raise Decline("empty tensor")
    if grad.shape != x.shape:
        raise Decline("grad and input shapes differ")
    x, grad, mean, rstd = contiguous(x), contiguous(grad), contiguous(mean), contiguous(rstd)
    rows = x.numel() // n
    index = x.get_device()
    has_w, has_b = weight is not None, bias is not None
    need = (bool(output_mask[0]), bool(output_mask[1] and has_w), bool(output_mask[2] and has_b))
    w = contiguous(weight) if has_w else x
    b = contiguous(bias) if has_b else x
    dx = empty(x.shape, x.dtype, index) if need[0] else None
    dw = empty(weight.shape, weight.dtype, index) if need[1] else None
    db = empty(bias.shape, bias.dtype, index) if need[2] else None
    outs = tuple(grad if t is None else t for t in (dx, dw, db))  # an absent result: grad stands in
    launches = norm_backward_launches((grad.dtype, x.dtype, w.dtype, b.dtype, mean.dtype, rstd.dtype),
                                      tuple(t.dtype for t in outs), rows, n, has_w, has_b, need,
                                      not config.deploy_mode())
    if launches.fused is not None:
        # outside deploy mode the kernel checks its inputs too (CHECK): the registry has scanned them
        # already, but the plans launch by address without a scan and rely on that check
        kernel, key, keywords = launches.fused
        _launch.launch(kernel, 1, key, (grad, x, w, b, mean, rstd, *outs, rows, n), keywords)
        return dx, dw, db
    if launches.dx is not None:
        kernel, key, keywords = launches.dx
        _launch.launch(kernel, rows, key, (grad, x, w, mean, rstd, dx, dx, n), keywords)
    if launches.params is not None:
        kernel, key, keywords, programs = launches.params
        _launch.launch(kernel, programs, key, (grad, x, mean, rstd, outs[1], outs[2], rows, n), keywords)
    return dx, dw, db


def layer_norm_backward_family() -> Family:
    """`native_layer_norm_backward(grad, x, normalized_shape, mean, rstd, weight, bias, output_mask)` with
    everything contiguous of x's dtype on its device: `layer_norm_backward`'s launches."""
    deploy_mode = config.deploy_mode

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 8 or kwargs:
            return None
        grad, x, normalized, mean, rstd, weight, bias, mask = args
        if not isinstance(x, Tensor) or not x.is_contiguous():
            return None
        index, dtype = x.get_device(), x.dtype
        kind = type(mask)
        if index < 0 or (kind is not list and kind is not tuple) or len(mask) != 3:
            return None
        need_dx, need_dw, need_db = mask
        if type(need_dx) is not bool or type(need_dw) is not bool or type(need_db) is not bool:
            return None
        kind = type(normalized)
        if kind is not list and kind is not tuple:
            return None
        shape = x.shape
        w_key = b_key = None
        # written flat: on 4 elements each call on the way is a share of the op
        for t in (grad, mean, rstd, weight, bias):
            if t is not None and (not isinstance(t, Tensor) or t.dtype is not dtype or not t.is_contiguous()
                                  or t.get_device() != index):
                return None
        if grad is None or mean is None or rstd is None or grad.shape != shape:
            return None
        if weight is not None:
            w_key = weight.shape
        if bias is not None:
            b_key = bias.shape
        return ((dtype, shape, index, tuple(normalized), mean.shape, rstd.shape, w_key, b_key,
                 (need_dx, need_dw, need_db), deploy_mode()), (grad, x, mean, rstd, weight, bias))

    return Family(signature, _layer_norm_backward_plan)


def _layer_norm_backward_plan(key: tuple, operands: tuple) -> Plan:
    dtype, shape, index, normalized, mean_shape, rstd_shape, w_shape, b_shape, mask, deploy = key
    shape = tuple(shape)
    n = _normalized(dtype, shape, normalized, w_shape, b_shape)
    if n is None:
        return NO_PLAN
    has_w, has_b = w_shape is not None, b_shape is not None
    numel = math.prod(shape)
    rows = numel // n
    if math.prod(mean_shape) != rows or math.prod(rstd_shape) != rows:
        return NO_PLAN
    need_dx, need_dw, need_db = mask[0], mask[1] and has_w, mask[2] and has_b
    launches = norm_backward_launches((dtype,) * 6, (dtype,) * 3, rows, n, has_w, has_b,
                                      (need_dx, need_dw, need_db), not deploy)
    if launches.fused is None and launches.dx is None and launches.params is None:
        return NO_PLAN  # nothing asked for
    # the scan of the six inputs: grad, x, mean, rstd, weight, bias (an absent one scans 0 elements)
    scan_all = _k("rows").inputs_finite_entry(6) if numel < PARALLEL_MIN else None
    counts = (numel, numel, rows, rows, n if has_w else 0, n if has_b else 0)
    scan, mask_bits = contiguous_scan(dtype)
    wide = int(dtype == torch.float32)
    w_shape = tuple(w_shape) if has_w else None
    b_shape = tuple(b_shape) if has_b else None
    # the three results in one allocation when all are asked for
    layout = _memory.triple_layout(shape, w_shape, b_shape) if need_dx and need_dw and need_db else None
    empty_, empty_triple_of = _memory.empty, _memory.empty_triple_of

    def scanned(grad: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, weight: Tensor | None,
                bias: Tensor | None, scan_all: Callable | None) -> bool:
        if scan_all is not None:  # one compiled call scans the six inputs
            xa = x.data_ptr()
            addresses = (grad.data_ptr(), xa, mean.data_ptr(), rstd.data_ptr(),
                         xa if weight is None else weight.data_ptr(), xa if bias is None else bias.data_ptr())
            return scan_all(addresses, counts, mask_bits, wide)
        present = tuple(t for t in (grad, x, mean, rstd, weight, bias) if t is not None)
        return _finite(scan, mask_bits, present)

    def results() -> tuple:
        if layout is not None:
            return empty_triple_of(layout, dtype, index)
        return (empty_(shape, dtype, index) if need_dx else None,
                empty_(w_shape, dtype, index) if need_dw else None,
                empty_(b_shape, dtype, index) if need_db else None)

    if launches.fused is not None:
        fused = NormPlan(*launches.fused, 1, 1, shape, dtype, (0, 1, 2, 3, 4, 5))
        fused.scan_all = scan_all
        # the element counts of its launch by address: grad, x, weight, bias (x stands in for an absent
        # one), mean, rstd, dx, dw, db (grad stands in for an absent result)
        spans = (numel, numel, n if has_w else numel, n if has_b else numel, rows, rows, numel,
                 n if need_dw else numel, n if need_db else numel)

        def run_fused(operands: tuple) -> tuple | None:
            grad, x, mean, rstd, weight, bias = operands
            launcher = fused.launcher if fused.backend == requested_backend() else fused.kept()
            by_address = fused.by_address
            if by_address is None and not deploy and not scanned(grad, x, mean, rstd, weight, bias,
                                                                 fused.scan_all):
                return None
            if layout is not None:
                dx, dw, db = empty_triple_of(layout, dtype, index)
                dx_t, dw_t, db_t = dx, dw, db
            else:
                dx, dw, db = results()
                dx_t = grad if dx is None else dx  # an absent result is never written: grad stands in
                dw_t = grad if dw is None else dw
                db_t = grad if db is None else db
            w = x if weight is None else weight
            b = x if bias is None else bias
            if by_address is None:
                args = (grad, x, w, b, mean, rstd, dx_t, dw_t, db_t, rows, n)
                if launcher is None:
                    fused.launch_checked(args)
                else:
                    launcher(1, 1, 1, *args)
                return dx, dw, db
            sg, sx, sw, sb, sm, sr, sdx, sdw, sdb = spans
            if not by_address(1, 1, 1, grad.data_ptr(), sg, x.data_ptr(), sx, w.data_ptr(), sw, b.data_ptr(),
                              sb, mean.data_ptr(), sm, rstd.data_ptr(), sr, dx_t.data_ptr(), sdx,
                              dw_t.data_ptr(), sdw, db_t.data_ptr(), sdb, rows, n):
                return None  # a fault (the kernel's NaN/Inf check): the implementation scans and decides
            return dx, dw, db

        fused.run = run_fused
        return fused

    first = Plan(*launches.dx, rows, 1, shape, dtype) if launches.dx is not None else None
    params = None
    if launches.params is not None:
        kernel, launch_key, keywords, programs = launches.params
        params = Plan(kernel, launch_key, keywords, programs, 1, (n,), dtype)
    plan = Plan(scanned=(0, 1, 2, 3, 4, 5))

    def run(operands: tuple) -> tuple | None:
        grad, x, mean, rstd, weight, bias = operands
        tp = device_tp(index) > 1  # grids of several programs: the checked launch splits them
        if not deploy and not scanned(grad, x, mean, rstd, weight, bias, scan_all):
            return None
        dx, dw, db = results()
        if first is not None:
            launcher = first.launcher if first.backend == requested_backend() else first.kept()
            w = x if weight is None else weight
            if launcher is None or (tp and rows > 1):
                first.launch_checked((grad, x, w, mean, rstd, dx, dx, n))
            else:
                launcher(rows, 1, 1, grad, x, w, mean, rstd, dx, dx, n)
        if params is not None:
            launcher = params.launcher if params.backend == requested_backend() else params.kept()
            dw_t = grad if dw is None else dw
            db_t = grad if db is None else db
            if launcher is None or (tp and params.programs > 1):
                params.launch_checked((grad, x, mean, rstd, dw_t, db_t, rows, n))
            else:
                launcher(params.programs, 1, 1, grad, x, mean, rstd, dw_t, db_t, rows, n)
        return dx, dw, db

    plan.run = run
    return plan
