"""The device side of the custom ops `torch.ops.rbln.rms_norm` (forward and backward kernels) and
`torch.ops.rbln.rotary_embedding` (forward kernel; backward through registered aten ops).

Their definitions (references, fake and autograd formulas) live in `custom_ops`, which registration
imports at `import torch`; this module, with the kernels it launches, loads on the first call.

Each forward has its checked implementation (`_rms_norm_device`, `_rotary_device`) and its `Family`
(`rms_norm_family`, `rotary_family`, see `plan.py`), whose plans the custom op's shortcut runs
(`_rms_norm_fast`, `_rotary_fast`: `plan.memoized`); both launch what one decision function says
(`rms_norm_launch`, `rotary_launch`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from torch_rbln import _memory, config
from torch_rbln.tp import device_tp, requested_backend

from . import _launch
from ._ops import FLOATS, Decline, _k, contiguous, empty, fill_floats
from .custom_ops import (  # noqa: F401  (re-exported)
    _rms_norm_backward_fake,
    _rms_norm_backward_reference,
    _rms_norm_reference,
    _rotary_reference,
)
from .geometry import I32, row_block
from .matmul import launch as _matmul_launch
from .plan import (
    NO_PLAN,
    Family,
    Launch,
    Plan,
    contiguous_on,
    contiguous_rbln,
    finite_of,
    memoized,
    write_only_buffer,
)
from .rows import norm_launch

# ---------------------------------------------------------------- rms_norm


def rms_norm_launch(dtype: torch.dtype, shape: tuple, w_dtype: torch.dtype | None, w_shape: tuple | None
                    ) -> Launch:
    """rms_norm's forward on an x of `shape` with an optional weight (`w_dtype` None: none), one program
    per row, ints (n,); Decline for what the kernel does not take."""
    if not shape or not math.prod(shape):
        raise Decline("empty tensor")
    n = shape[-1]
    if w_dtype is not None and (w_dtype != dtype or tuple(w_shape) != (n,)):
        raise Decline("weight dtype/shape")
    kernel, key, keywords = norm_launch(dtype, dtype, dtype, dtype, torch.float32, n, rms=True,
                                        has_w=w_dtype is not None, has_b=False)
    return Launch(kernel, key, keywords, math.prod(shape) // n, 1, (n,))


def rms_norm_forward(x: Tensor, weight: Tensor | None, eps: float) -> tuple[Tensor, Tensor]:
    """(y, rstd) of RMS norm over the last dim; rstd is float32 of shape (rows,)."""
    g = rms_norm_launch(x.dtype, tuple(x.shape), None if weight is None else weight.dtype,
                        None if weight is None else tuple(weight.shape))
    x = contiguous(x)
    index = x.get_device()
    out = empty(x.shape, x.dtype, index)
    rstd = empty([g.programs], torch.float32, index)
    w = contiguous(weight) if weight is not None else x
    _launch.launch(g.kernel, g.programs, g.key, (x, w, x, out, rstd, rstd, *g.ints, float(eps)), g.keywords)
    return out, rstd


def rms_norm_backward(grad: Tensor, x: Tensor, weight: Tensor | None, rstd: Tensor
                      ) -> tuple[Tensor, Tensor | None]:
    """(dx, dweight) of RMS norm; dweight (None without a weight) sums the rows of x's float32 share
    on the matmul kernel (ones(1, rows) @ gx)."""
    n = x.shape[-1]
    x, grad = contiguous(x), contiguous(grad)
    rows = x.numel() // n
    index = x.get_device()
    dx = empty(x.shape, x.dtype, index)
    need_gx = weight is not None
    gx = empty([rows, n], torch.float32, index) if need_gx else dx
    w = contiguous(weight) if weight is not None else x
    _k("rows").norm_backward_kernel[(rows,)](grad, x, w, rstd, rstd, dx, gx, n, RMS=True, HAS_W=need_gx,
                                             NEED_GX=need_gx, BLOCK=row_block(n))
    if not need_gx:
        return dx, None
    ones = fill_floats(empty([rows], gx.dtype, index), 1.0)
    dw = empty([n], weight.dtype, index)
    _matmul_launch(ones, gx, dw, None, 1, n, rows, (0, 0, 1), (0, n, 1), (0, 0, 1), (0, 0), 1.0, 0.0, 1)
    return dx, dw


def _rms_norm_backward_device(grad: Tensor, x: Tensor, weight: Tensor | None, eps: float
                              ) -> tuple[Tensor, Tensor]:
    if x.dim() == 0 or x.numel() == 0 or grad.shape != x.shape:
        raise Decline("empty tensor or grad shape")
    if grad.dtype != x.dtype or x.dtype not in FLOATS:
        raise Decline("dtypes")
    _, rstd = rms_norm_forward(x, weight, eps)
    dx, dw = rms_norm_backward(grad, x, weight, rstd)
    return dx, (dw.view(weight.shape) if weight is not None else x.new_empty(0))


def _rms_norm_device(x: Tensor, weight: Tensor | None, eps: float) -> Tensor:
    return rms_norm_forward(x, weight, eps)[0]


_SCRATCH_ROWS = 1 << 14  # at most 64 KiB of kept rstd scratch per plan and device


def rms_norm_family() -> Family:
    """`rms_norm(x, weight, eps)` with x (and the weight) contiguous of one floating dtype on one rbln
    device: `rms_norm_forward`'s one launch. The kernel also writes each row's rstd (float32), which
    this forward (no autograd) never reads: up to `_SCRATCH_ROWS` rows it goes to a buffer the plan
    keeps per device (`write_only_buffer`) instead of a fresh allocation per call."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 3 or kwargs or type(args[2]) is not float:
            return None
        x, weight = args[0], args[1]
        index = contiguous_rbln(x)
        if index < 0 or (weight is not None and
                         not (contiguous_on(weight, index) and weight.dtype is x.dtype)):
            return None
        return (x.dtype, x.shape, None if weight is None else weight.shape, index), args

    def plan(key: tuple, operands: tuple) -> Plan:
        dtype, shape, w_shape, index = key
        if dtype not in FLOATS or math.prod(shape) >= I32:
            return NO_PLAN
        has_w = w_shape is not None
        g = rms_norm_launch(dtype, tuple(shape), dtype if has_w else None, w_shape)
        plan = Plan.of(g, tuple(shape), dtype, (0, 1) if has_w else (0,))
        rows, (n,) = g.programs, g.ints
        finite, deploy_mode, scratch = finite_of(dtype), config.deploy_mode, {}
        new = _memory.allocator(shape, dtype, index)

        def run(operands: tuple) -> Tensor | None:
            x, weight, eps = operands
            launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
            if not deploy_mode() and not (finite(x, rows * n) and (not has_w or finite(weight, n))):
                return None
            rstd = write_only_buffer(scratch, index, (rows,), _SCRATCH_ROWS)
            out = new()
            w = weight if has_w else x
            if launcher is None or (rows > 1 and device_tp(index) > 1):
                plan.launch_checked((x, w, x, out, rstd, rstd, n, eps))
            else:
                launcher(rows, 1, 1, x, w, x, out, rstd, rstd, n, eps)
            return out

        plan.run = run
        return plan

    return Family(signature, plan)


# ---------------------------------------------------------------- rotary_embedding

def rotary_launch(dtype: torch.dtype, shape: tuple, cs_dtypes: tuple, cs_shapes: tuple) -> Launch:
    """rotary_embedding on an x of `shape` with cos and sin of `cs_dtypes` and `cs_shapes`, one program
    per row, ints (n, cos/sin rows); Decline for what the kernel does not take (cos/sin broadcast over
    other than x's leading dims)."""
    n = shape[-1] if shape else 0
    numel = math.prod(shape)
    if n == 0 or n % 2 or numel == 0:
        raise Decline("last dim must be even and non-empty")
    cs_shape = tuple(cs_shapes[0])
    if cs_shape != tuple(cs_shapes[1]) or not cs_shape or cs_shape[-1] != n or \
            cs_dtypes[0] != dtype or cs_dtypes[1] != dtype:
        raise Decline("cos/sin shape or dtype")
    core = cs_shape
    while core and core[0] == 1:
        core = core[1:]
    if tuple(shape[len(shape) - len(core):]) != core:
        raise Decline("cos/sin broadcast over other than the leading dims")
    block = max(16, 1 << (n // 2 - 1).bit_length())
    key = (dtype, block) if numel < I32 else (dtype, block, "int64")
    return Launch(_k("rotary").rotary_kernel, key, {"BLOCK": block}, numel // n, 1,
                  (n, math.prod(cs_shape) // n))


def _rotary_device(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    g = rotary_launch(x.dtype, tuple(x.shape), (cos.dtype, sin.dtype), (cos.shape, sin.shape))
    x, cos, sin = contiguous(x), contiguous(cos), contiguous(sin)
    out = empty(x.shape, x.dtype, x.get_device())
    _launch.launch(g.kernel, g.programs, g.key, (x, cos, sin, out, *g.ints), g.keywords)
    return out


def rotary_family() -> Family:
    """`rotary_embedding(x, cos, sin)` on contiguous rbln tensors of one floating dtype:
    `_rotary_device`'s one launch."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 3 or kwargs:
            return None
        x, cos, sin = args
        index = contiguous_rbln(x)
        if index < 0 or not (contiguous_on(cos, index) and contiguous_on(sin, index)):
            return None
        return (x.dtype, x.shape, cos.dtype, cos.shape, sin.dtype, sin.shape, index), args

    def plan(key: tuple, operands: tuple) -> Plan:
        dtype, shape, cos_dtype, cos_shape, sin_dtype, sin_shape, index = key
        if dtype not in FLOATS:
            return NO_PLAN
        g = rotary_launch(dtype, tuple(shape), (cos_dtype, sin_dtype), (cos_shape, sin_shape))
        plan = Plan.of(g, tuple(shape), dtype, (0, 1, 2))
        rows, (n, cs_rows) = g.programs, g.ints
        finite, deploy_mode, numel, cs_numel = finite_of(dtype), config.deploy_mode, rows * n, cs_rows * n
        new = _memory.allocator(shape, dtype, index)

        def run(operands: tuple) -> Tensor | None:
            x, cos, sin = operands
            launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
            if not deploy_mode() and not (finite(x, numel) and finite(cos, cs_numel) and
                                          finite(sin, cs_numel)):
                return None
            out = new()
            if launcher is None or (rows > 1 and device_tp(index) > 1):
                plan.launch_checked((x, cos, sin, out, n, cs_rows))
            else:
                launcher(rows, 1, 1, x, cos, sin, out, n, cs_rows)
            return out

        plan.run = run
        return plan

    return Family(signature, plan)


# the custom ops' shortcuts for plain calls (`registry._register_custom`'s `fast`)
_rms_norm_fast = memoized(rms_norm_family())
_rotary_fast = memoized(rotary_family())
