"""The loss family: aten::nll_loss_forward / nll_loss_backward on the op-library kernels
(`kernels/loss.py`), and their plans (one per call signature, `plan.py`).

Cross-entropy decomposes into log_softmax + nll_loss, so with these a language model's loss and its
gradient stay on device. Targets are validated on the host first (a compiled pass over the N int64
values): an out-of-range target declines to the CPU kernel, which raises torch's own error message.
A plan makes that check and the NaN/Inf scan of its float inputs in one compiled call
(`kernels.loss.inputs_plain`) on small inputs.

`forward_launch` / `backward_launch` decide the launch (kernel, key, block, grid) for both the checked
implementations and the plans, so both launch the same specialisation with the same arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from torch_rbln import _memory, config
from torch_rbln.tp import device_tp, requested_backend

from . import _launch
from ._base import real_number, require_float
from ._finite_scan import PARALLEL_MIN, all_finite, contiguous_scan
from ._ops import FLOATS, Decline, _k, contiguous, empty, fill_floats
from .elementwise import binary, unary
from .geometry import I32, block, cdiv, row_block
from .plan import NO_PLAN, Family, Launch, Plan, contiguous_on
from .reduce import reduce

REDUCTIONS = (0, 1, 2)  # none, mean, sum (torch.nn._reduction.get_enum)


def _geometry(x_shape: tuple, target_shape: tuple) -> tuple[int, int] | None:
    """(rows, classes) of an (N, C) or (C,) input with its targets, or None when they do not line up."""
    nd = len(x_shape)
    if nd not in (1, 2) or len(target_shape) != nd - 1:
        return None
    rows = x_shape[0] if nd == 2 else 1
    classes = x_shape[-1]
    if rows != math.prod(target_shape) or rows == 0 or classes == 0:
        return None
    return rows, classes


def _checked(x: Tensor, target: Tensor, weight: Tensor | None, reduction: int, ignore_index: int
             ) -> tuple[int, int]:
    """(rows, classes) once the operands are within what the kernels support; Decline otherwise."""
    require_float(x.dtype)
    if x.dim() not in (1, 2) or target.dim() != x.dim() - 1:
        raise Decline("input other than (N, C) or (C,)")
    if target.dtype != torch.int64 or target.is_cpu:
        raise Decline("target dtype/device")
    if reduction not in REDUCTIONS:
        raise Decline(f"reduction {reduction}")
    geometry = _geometry(tuple(x.shape), tuple(target.shape))
    if geometry is None:
        raise Decline("empty or mismatched target")
    rows, classes = geometry
    if weight is not None and (weight.dtype != x.dtype or weight.numel() != classes or weight.is_cpu):
        raise Decline("weight dtype/shape/device")
    if not _k("embedding").indices_in_range(contiguous(target), classes, ignore_index):
        raise Decline("target out of bounds")
    return rows, classes


def forward_launch(x_dtype: torch.dtype, w_dtype: torch.dtype, ints: tuple) -> Launch:
    """`nll_loss_kernel` (target int64, loss and total weight of x's dtype) for its int arguments `ints`
    (rows, classes, ignore_index, reduction, has_w): the dtypes, the block and the width of each int
    determine its specialisation; one program reduces (mean, sum), several write per-row losses
    (none)."""
    rows, reduction = ints[0], ints[3]
    size = block(rows)
    key = (x_dtype, w_dtype, size, *(-I32 <= v < I32 for v in ints))
    return Launch(_k("loss").nll_loss_kernel, key, {"BLOCK": size}, cdiv(rows, size) if reduction == 0 else 1,
                  1, ints)


def backward_launch(g_dtype: torch.dtype, w_dtype: torch.dtype, tw_dtype: torch.dtype, dx_dtype: torch.dtype,
                    rows: int, ints: tuple) -> Launch:
    """`nll_loss_backward_kernel`, one program per row, as `forward_launch` (ints: classes,
    ignore_index, reduction, has_w)."""
    size = row_block(ints[0])
    key = (g_dtype, w_dtype, tw_dtype, dx_dtype, size, *(-I32 <= v < I32 for v in ints))
    return Launch(_k("loss").nll_loss_backward_kernel, key, {"BLOCK": size}, rows, 1, ints)


def nll_loss_forward(x, target, weight, reduction, ignore_index):
    rows, classes = _checked(x, target, weight, reduction, ignore_index)
    index = x.get_device()
    x, target = contiguous(x), contiguous(target)
    weight = contiguous(weight) if weight is not None else None
    w = weight if weight is not None else x  # not read without HAS_W: x stands in
    total_weight = empty([], x.dtype, index)
    g = forward_launch(x.dtype, w.dtype, (rows, classes, int(ignore_index), int(reduction),
                                          int(weight is not None)))
    if reduction == 0:
        loss = empty([rows] if x.dim() == 2 else [], x.dtype, index)
        fill_floats(total_weight, 0.0)  # torch reports a zero total weight when nothing is reduced
    else:
        loss = empty([], x.dtype, index)
    _launch.launch(g.kernel, g.programs, g.key, (x, target, w, loss, total_weight, *g.ints), g.keywords)
    return loss, total_weight


def nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    rows, classes = _checked(x, target, weight, reduction, ignore_index)
    if grad.dtype != x.dtype or grad.numel() != (rows if reduction == 0 and x.dim() == 2 else 1):
        raise Decline("grad_output dtype/shape")
    if total_weight.is_cpu or total_weight.numel() != 1:
        raise Decline("total_weight device/shape")
    index = x.get_device()
    grad, target = contiguous(grad), contiguous(target)
    weight = contiguous(weight) if weight is not None else None
    w = weight if weight is not None else grad  # not read without HAS_W: grad stands in
    dx = empty(list(x.shape), x.dtype, index)  # every element is written: no zero fill
    g = backward_launch(grad.dtype, w.dtype, total_weight.dtype, dx.dtype, rows,
                        (classes, int(ignore_index), int(reduction), int(weight is not None)))
    _launch.launch(g.kernel, rows, g.key, (grad, target, w, total_weight, dx, *g.ints), g.keywords)
    return dx


def _rows_2d(x: Tensor, target: Tensor) -> tuple[int, int, int, int]:
    """(N, C, H, W) of an (N, C, H, W) input whose (N, H, W) target lines up with it; Decline otherwise
    (torch's errors come from the CPU)."""
    if x.dim() != 4 or target.dim() != 3 or tuple(target.shape) != (x.shape[0], *x.shape[2:]):
        raise Decline("nll_loss2d input other than (N, C, H, W) with an (N, H, W) target")
    return tuple(x.shape)


def nll_loss2d_forward(x, target, weight, reduction, ignore_index):
    """`aten::nll_loss2d_forward` (cross_entropy of images: segmentation): the classes moved last, each
    pixel a row of `nll_loss_forward`, so every pixel's loss and the reduction run on its kernel."""
    n, c, h, w = _rows_2d(x, target)
    rows = contiguous(x.permute(0, 2, 3, 1)).view(-1, c)
    loss, total_weight = nll_loss_forward(rows, target.reshape(-1), weight, reduction, ignore_index)
    return (loss.view(n, h, w) if reduction == 0 else loss), total_weight


def nll_loss2d_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    """`aten::nll_loss2d_backward`: `nll_loss_backward` over the pixels as rows (the input only gives
    their shape: an expanded placeholder stands in for its channels-last copy), the gradient moved back
    to (N, C, H, W) and laid out contiguous, as torch's."""
    n, c, h, w = _rows_2d(x, target)
    shape_only = empty([], x.dtype, x.get_device()).expand(n * h * w, c)
    grad_rows = grad.reshape(-1) if reduction == 0 else grad
    dx = nll_loss_backward(grad_rows, shape_only, target.reshape(-1), weight, reduction, ignore_index,
                           total_weight)
    return contiguous(dx.view(n, h, w, c).permute(0, 3, 1, 2))


# ---------------------------------------------------------------- plans

_range_entry: list = []  # [in_range_64's compiled entry point] once made


def _in_range_64(address: int, n: int, stop: int, ignore: int) -> bool:
    """`kernels.embedding.in_range_64` through its compiled int64 entry point (numba's per-call typing
    of four arguments skipped, ~0.2 us a call: the plans range-check their targets on every call)."""
    if not _range_entry:
        from ._finite_numba import int64_entry

        _range_entry.append(int64_entry(_k("embedding").in_range_64, 4))
    return _range_entry[0](address, n, stop, ignore)


def _checks(dtype: torch.dtype, counts: tuple) -> tuple[Callable | None, Callable]:
    """(`plain`, `check`) for float inputs of `dtype` with element counts `counts` (a stand-in for an
    absent one is counted 0): `plain(target address, rows, classes, ignore_index, addresses, counts,
    mask, wide)`, the targets in [0, classes) or ignored and the floats free of NaN/Inf in one compiled
    call (`kernels.loss.inputs_plain`), for small inputs only (else None); `check(target, rows, classes,
    ignore_index, tensors)`, the same for large ones (their scans split over a tensor-parallel group).
    Outside deploy mode only: in deploy mode `plain` gets counts of 0 and `check` scans nothing."""
    scan, mask = contiguous_scan(dtype)
    deploy_mode = config.deploy_mode
    plain = _k("loss").inputs_plain_entry(len(counts)) if max(counts) < PARALLEL_MIN else None

    def check(target: Tensor, rows: int, classes: int, ignore_index: int, tensors: tuple) -> bool:
        if not deploy_mode():
            for t, count in zip(tensors, counts, strict=True):
                if count and not (scan(t.data_ptr(), count, mask) if count < PARALLEL_MIN else all_finite(t)):
                    return False
        return _in_range_64(target.data_ptr(), rows, classes, ignore_index)

    return plain, check


def forward_family() -> Family:
    """`nll_loss_forward(x, target, weight, reduction, ignore_index)` with reduction mean or sum (none
    also fills total_weight: the implementation), x and weight contiguous of one floating dtype, int64
    targets, all on one device: `nll_loss_forward`'s one launch."""
    int64 = torch.int64

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 5 or kwargs:
            return None
        x, target, weight, reduction, ignore_index = args
        if not isinstance(x, Tensor) or not x.is_contiguous() or type(reduction) is not int or \
                type(ignore_index) is not int:
            return None
        index, dtype = x.get_device(), x.dtype
        if index < 0 or not isinstance(target, Tensor) or target.dtype is not int64 or \
                not target.is_contiguous() or target.get_device() != index:
            return None
        if weight is not None and not (contiguous_on(weight, index) and weight.dtype is dtype):
            return None
        w_key = None if weight is None else weight.shape
        return (dtype, x.shape, target.shape, w_key, reduction, ignore_index, index), (x, target, weight)

    return Family(signature, _forward_plan)


def _forward_plan(key: tuple, operands: tuple) -> Plan:
    dtype, shape, target_shape, w_shape, reduction, ignore_index, index = key
    geometry = _geometry(tuple(shape), tuple(target_shape))
    if dtype not in FLOATS or geometry is None or reduction not in (1, 2):
        return NO_PLAN
    rows, classes = geometry
    has_w = w_shape is not None
    if has_w and math.prod(w_shape) != classes:
        return NO_PLAN
    g = forward_launch(dtype, dtype, (rows, classes, ignore_index, reduction, int(has_w)))
    plan, ints = Plan.of(g, (), dtype, (0, 2) if has_w else (0,)), g.ints
    counts = (rows * classes, classes if has_w else 0)  # x, weight
    plain, check = _checks(dtype, counts)
    unscanned, (_, mask), wide = (0, 0), contiguous_scan(dtype), int(dtype == torch.float32)
    empty_pair, deploy_mode = _memory.empty_pair, config.deploy_mode

    def run(operands: tuple) -> tuple | None:
        x, target, weight = operands
        launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
        w = x if weight is None else weight  # not read without HAS_W: x stands in
        if plain is not None:  # targets in range and x, weight finite: one compiled call
            if not plain(target.data_ptr(), rows, classes, ignore_index, (x.data_ptr(), w.data_ptr()),
                         unscanned if deploy_mode() else counts, mask, wide):
                return None  # a bad target: the implementation declines (torch's error from the CPU kernel)
        elif not check(target, rows, classes, ignore_index, (x, w)):
            return None
        loss, total_weight = empty_pair((), (), dtype, index)
        if launcher is None:  # (one program: reduction mean or sum)
            plan.launch_checked((x, target, w, loss, total_weight, *ints))
        else:
            launcher(1, 1, 1, x, target, w, loss, total_weight, *ints)
        return loss, total_weight

    plan.run = run
    return plan


def backward_family() -> Family:
    """`nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight)`, every float
    tensor contiguous of x's dtype on its device: `nll_loss_backward`'s one launch (it writes whole
    rows of dx, so no zero fill)."""
    int64 = torch.int64

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 7 or kwargs:
            return None
        grad, x, target, weight, reduction, ignore_index, total_weight = args
        if not isinstance(x, Tensor) or not x.is_contiguous() or type(reduction) is not int or \
                type(ignore_index) is not int:
            return None
        index, dtype = x.get_device(), x.dtype
        if index < 0 or not isinstance(target, Tensor) or target.dtype is not int64 or \
                not target.is_contiguous() or target.get_device() != index:
            return None
        # written flat: on 4 elements each call on the way to the launch is a share of the op
        if not isinstance(grad, Tensor) or grad.dtype is not dtype or not grad.is_contiguous() or \
                grad.get_device() != index:
            return None
        if not isinstance(total_weight, Tensor) or total_weight.dtype is not dtype or \
                not total_weight.is_contiguous() or total_weight.get_device() != index:
            return None
        if weight is not None and not (contiguous_on(weight, index) and weight.dtype is dtype):
            return None
        return ((dtype, x.shape, target.shape, grad.shape, total_weight.shape,
                 None if weight is None else weight.shape, reduction, ignore_index, index),
                (grad, x, target, weight, total_weight))

    return Family(signature, _backward_plan)


def _backward_plan(key: tuple, operands: tuple) -> Plan:
    dtype, shape, target_shape, grad_shape, tw_shape, w_shape, reduction, ignore_index, index = key
    geometry = _geometry(tuple(shape), tuple(target_shape))
    if dtype not in FLOATS or geometry is None or reduction not in REDUCTIONS or math.prod(tw_shape) != 1:
        return NO_PLAN
    rows, classes = geometry
    grad_numel = math.prod(grad_shape)
    has_w = w_shape is not None
    if grad_numel != (rows if reduction == 0 and len(shape) == 2 else 1) or \
            (has_w and math.prod(w_shape) != classes):
        return NO_PLAN
    g = backward_launch(dtype, dtype, dtype, dtype, rows, (classes, ignore_index, reduction, int(has_w)))
    shape = tuple(shape)
    plan, ints = Plan.of(g, shape, dtype, (0, 1, 3, 4) if has_w else (0, 1, 4)), g.ints
    # grad, x, weight, total_weight
    counts = (grad_numel, rows * classes, classes if has_w else 0, 1)
    plain, check = _checks(dtype, counts)
    unscanned, (_, mask), wide = (0, 0, 0, 0), contiguous_scan(dtype), int(dtype == torch.float32)
    new, deploy_mode = _memory.allocator(shape, dtype, index), config.deploy_mode
    classes, ignore_index, reduction, weighted = ints

    def run(operands: tuple) -> Tensor | None:
        grad, x, target, weight, total_weight = operands
        launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
        w = grad if weight is None else weight  # not read without HAS_W: grad stands in
        if plain is not None:  # targets in range and grad, x, weight, total_weight finite: one call
            if not plain(target.data_ptr(), rows, classes, ignore_index,
                         (grad.data_ptr(), x.data_ptr(), w.data_ptr(), total_weight.data_ptr()),
                         unscanned if deploy_mode() else counts, mask, wide):
                return None
        elif not check(target, rows, classes, ignore_index, (grad, x, w, total_weight)):
            return None
        dx = new()
        if launcher is None or (rows > 1 and device_tp(index) > 1):
            plan.launch_checked((grad, target, w, total_weight, dx, *ints))
        else:
            launcher(rows, 1, 1, grad, target, w, total_weight, dx, classes, ignore_index, reduction,
                     weighted)
        return dx

    plan.run = run
    return plan


# ---------------------------------------------------------------- mse_loss, composed of device launches

_MSE_REDUCTIONS = dict(zip(REDUCTIONS, (None, "mean", "sum"), strict=True))  # the reduction's name


def _mse_operands(x: Tensor, target: Tensor, reduction: int) -> str | None:
    """The reduction's name (None for "none") of an mse_loss call the device launches compute: float
    tensors of one dtype on one rbln device; anything else declines to the CPU."""
    if reduction not in _MSE_REDUCTIONS:
        raise Decline(f"reduction {reduction!r}")
    if not isinstance(target, Tensor) or target.is_cpu or x.is_cpu or target.get_device() != x.get_device():
        raise Decline("target on another device")
    require_float(x.dtype)
    if target.dtype is not x.dtype:
        raise Decline("target of another dtype")  # torch promotes: the CPU's result
    return _MSE_REDUCTIONS[reduction]


def mse_loss(x: Tensor, target: Tensor, reduction: int = 1) -> Tensor:
    """`(x - target) ** 2`, reduced by its mean or sum (or not), as torch computes it: the difference,
    its square (one multiply), then the registry's reduction (another summation order than the CPU's:
    a tolerance, not bits). Why: regression models' loss (`F.mse_loss`) ran on the CPU fallback."""
    name = _mse_operands(x, target, reduction)
    difference = binary("sub", x, target)
    squares = binary("mul", difference, difference)
    return squares if name is None else reduce(name, squares)


def _backward_operands(grad: Tensor, x: Tensor, target: Tensor, reduction: int) -> str | None:
    """`_mse_operands` of a loss's backward, whose gradient must be an rbln tensor of x's dtype too."""
    name = _mse_operands(x, target, reduction)
    if not isinstance(grad, Tensor) or grad.is_cpu or grad.dtype is not x.dtype:
        raise Decline("gradient of another dtype or device")
    return name


def mse_loss_backward(grad: Tensor, x: Tensor, target: Tensor, reduction: int = 1) -> Tensor:
    """torch's `norm * (x - target) * grad`, norm = 2 / numel for the mean and 2 otherwise, in that order
    (the difference, scaled by the number, then times the gradient: a 0-dim one for a reduced loss)."""
    name = _backward_operands(grad, x, target, reduction)
    norm = 2.0 / x.numel() if name == "mean" else 2.0
    return binary("mul", binary("mul", binary("sub", x, target), norm), grad)


# ------------------------------------------- smooth_l1_loss and huber_loss, composed of device launches
def _pointwise_loss(name: str, x: Tensor, target: Tensor, reduction: int, parameter: float) -> Tensor:
    """`name`'s elementwise loss of x and target (the binary kernel, `parameter` its beta or delta),
    reduced by its mean or sum (or not)."""
    reduced = _mse_operands(x, target, reduction)
    losses = binary(name, x, target, parameter)
    return losses if reduced is None else reduce(reduced, losses)


def _pointwise_loss_backward(name: str, grad: Tensor, x: Tensor, target: Tensor, reduction: int,
                             parameter: float) -> Tensor:
    """torch's piecewise gradient of `name` at x - target, times norm * grad (norm = 1 / numel for the
    mean, else 1)."""
    reduced = _backward_operands(grad, x, target, reduction)
    scaled = binary("mul", grad, 1.0 / x.numel()) if reduced == "mean" else grad
    return binary(name, binary("sub", x, target), scaled, parameter)


def _positive(value: float, what: str) -> float:
    """beta or delta as a float above 0; 0 (smooth L1's L1 special case), negative and NaN values decline,
    so the CPU computes them or raises torch's error."""
    number = real_number(value, what)
    if not number > 0:
        raise Decline(f"{what} {value!r}")
    return number


def smooth_l1_loss(x: Tensor, target: Tensor, reduction: int = 1, beta: float = 1.0) -> Tensor:
    """torch's smooth L1: 0.5 z^2 / beta below beta, z - beta / 2 above (z = |x - target|); beta 0 (torch's
    L1 loss) declines to the CPU."""
    return _pointwise_loss("smooth_l1", x, target, reduction, _positive(beta, "beta"))


def smooth_l1_loss_backward(grad: Tensor, x: Tensor, target: Tensor, reduction: int, beta: float) -> Tensor:
    return _pointwise_loss_backward("smooth_l1_backward", grad, x, target, reduction,
                                    _positive(beta, "beta"))


def huber_loss(x: Tensor, target: Tensor, reduction: int = 1, delta: float = 1.0) -> Tensor:
    """torch's Huber loss: 0.5 z^2 below delta, delta (z - delta / 2) above (z = |x - target|)."""
    return _pointwise_loss("huber", x, target, reduction, _positive(delta, "delta"))


def huber_loss_backward(grad: Tensor, x: Tensor, target: Tensor, reduction: int, delta: float) -> Tensor:
    return _pointwise_loss_backward("huber_backward", grad, x, target, reduction,
                                    _positive(delta, "delta"))


# ---------------------------------- binary_cross_entropy (probabilities), composed of device launches
def _weight_like(x: Tensor, weight: Tensor | None) -> None:
    """Decline unless the weight, when given, is an rbln tensor of x's dtype (torch promotes or raises:
    the CPU's result)."""
    if weight is not None and (weight.is_cpu or weight.dtype is not x.dtype):
        raise Decline("weight of another dtype or device")


def _probabilities(x: Tensor, target: Tensor) -> None:
    """Decline unless every input and target value lies in [0, 1] (torch raises "all elements of input
    should be between 0 and 1", from the CPU): the range from two device reductions (of the elementwise
    minimum and maximum of both), read back."""
    if x.numel() == 0:
        return
    low = reduce("amin", binary("minimum", x, target))
    high = reduce("amax", binary("maximum", x, target))
    if not (low.item() >= 0.0 and high.item() <= 1.0):
        raise Decline("a probability or target outside [0, 1]")


def binary_cross_entropy(x: Tensor, target: Tensor, weight: Tensor | None = None,
                         reduction: int = 1) -> Tensor:
    """torch's CPU formula, op by op in the tensors' dtype: (t - 1) * max(log1p(-x), -100) - t * max(log(x),
    -100), times the weight, then the reduction. Why: GANs, VAEs and multi-label heads train on
    sigmoid probabilities with `F.binary_cross_entropy`, which ran on the CPU fallback."""
    name = _mse_operands(x, target, reduction)
    _weight_like(x, weight)
    _probabilities(x, target)
    log_x = binary("clamp", unary("log", x), -100.0, math.inf)
    log_rest = binary("clamp", unary("log1p", unary("neg", x)), -100.0, math.inf)
    losses = binary("sub", binary("mul", binary("sub", target, 1.0), log_rest), binary("mul", target, log_x))
    if weight is not None:
        losses = binary("mul", losses, weight)
    return losses if name is None else reduce(name, losses)


def binary_cross_entropy_backward(grad: Tensor, x: Tensor, target: Tensor, weight: Tensor | None = None,
                                  reduction: int = 1) -> Tensor:
    """torch's grad * (x - t) / max((1 - x) * x, 1e-12), times the weight, divided by numel for the mean."""
    name = _backward_operands(grad, x, target, reduction)
    _weight_like(x, weight)
    denominator = binary("clamp", binary("mul", binary("sub", 1.0, x), x), 1e-12, math.inf)
    gradient = binary("div", binary("mul", grad, binary("sub", x, target)), denominator)
    if weight is not None:
        gradient = binary("mul", gradient, weight)
    return binary("div", gradient, float(x.numel())) if name == "mean" else gradient
