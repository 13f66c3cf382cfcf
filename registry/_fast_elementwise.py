"""Fast paths of the elementwise overloads that `_fastpath` does not cover: `out=` forms, in-place
comparisons, rounding divisions, elementwise backward ops, powers, tensor clamps and fills.

Each is the launch (or, for `clamp.Tensor`, the two launches) that the table's general implementation
makes for the plain case, built from `_fastpath`'s binary/unary/where/masked_fill fast paths: the
factories here only map an overload's arguments onto theirs (a keyword that picks the kernel op, a
positional argument that the kernel takes as alpha, a 0-d value tensor read as a number). Anything
else returns None, and the dispatcher runs the general implementation.

`FAST_PATHS` maps aten overload names to fast paths (see `_fastpath`); `table` merges it into its
entries.
"""

from __future__ import annotations

import ctypes
import math

import torch
from torch import Tensor

from torch_rbln import _memory, config
from torch_rbln.tp import device_tp as _device_tp

from . import _fastpath as FP
from . import _launch
from ._fastpath import FastPath, _contiguous_rbln, _unary_plans, _writable
from ._ops import FLOATS, _k, _modules, unary_key

_GELU_OPS = {"none": "gelu", "tanh": "gelu_tanh"}  # gelu's `approximate` -> kernel op, as `table._gelu`
_GELU_BACKWARD_OPS = {"none": "gelu_backward", "tanh": "gelu_tanh_backward"}
_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
_UNARY_OUT = ("abs", "exp", "log", "neg", "reciprocal", "rsqrt", "sigmoid", "sqrt", "tanh", "silu")


_c_float = ctypes.c_float  # a float32 at an address: an rbln tensor's memory is host memory
_NO_KEYWORDS: dict = {}  # passed on, never written: the fast paths only read their kwargs


def clamp_tensor(*, inplace: bool = False, out: bool = False) -> FastPath:
    """`clamp(x, min, max)` with tensor bounds (either may be None), functional, in place or into
    `out=`: the launches of `table._clamp_tensor`, maximum with `min` into the result, then minimum with
    `max` in place on it. With both bounds, every check of both launches is made before the first runs
    (plans, kept launches, `out=`, NaN/Inf scans of x, min and max: the intermediate result is finite
    when they are), so a call either makes both launches here or goes to the general path from the
    start; written flat, as `_fastpath.binary`, since on 4 elements each Python call here counts."""
    maximum = FP.binary("maximum", inplace=inplace, out=out)
    minimum = FP.binary("minimum", inplace=inplace, out=out)
    first_plans = maximum.plans  # type: ignore[attr-defined]
    clip_plans = FP.binary("minimum", inplace=True).plans  # type: ignore[attr-defined]

    def fast(args: tuple, kwargs: dict) -> Tensor | None:
        count = len(args)
        if not 2 <= count <= 3:
            return None
        x, low = args[0], args[1]
        high = args[2] if count == 3 else None
        if low is None or high is None:
            if low is None:
                return None if high is None else minimum((x, high), kwargs)
            return maximum((x, low), kwargs)
        target = None
        if kwargs or out:
            if len(kwargs) != out or not out:
                return None
            target = kwargs.get("out")
        index = _contiguous_rbln(x)
        if index < 0 or _contiguous_rbln(low) != index or _contiguous_rbln(high) != index:
            return None
        dtype = x.dtype
        if low.dtype is not dtype or high.dtype is not dtype:
            return None
        first = first_plans[(dtype, x.shape, low.shape)]
        if first is None:
            return None
        clip = clip_plans[(dtype, first.shape, high.shape)]
        if clip is None:
            return None
        if (first.programs * first.rows > 1 or clip.programs * clip.rows > 1) and _device_tp(index) > 1:
            return None  # a grid split over a tensor-parallel group: the general launches
        if out and (target is high or not _writable(target, index, dtype, first.shape, x, low, high)):
            return None
        if inplace and ((_storage(low) == _storage(x) and low is not x) or _storage(high) == _storage(x)):
            return None  # the bounds overlap the result: the general path decides
        run_first, run_clip = first.launcher(), clip.launcher()
        if run_first is None or run_clip is None:
            return None
        if not config.deploy_mode() and not (first.finite(x, first.a_numel) and
                                             first.finite(low, first.b_numel) and
                                             clip.finite(high, clip.b_numel)):
            return None
        if target is None:
            target = x if inplace else _memory.empty(first.shape, dtype, index)
        run_first(first.programs, first.rows, 1, x, low, target, first.n, 1.0, first.op)
        run_clip(clip.programs, clip.rows, 1, target, high, target, clip.n, 1.0, clip.op)
        return target

    return fast


def _storage(x: Tensor) -> int:
    """The address of `x`'s storage (tensors of one storage may overlap)."""
    return x.untyped_storage().data_ptr()


def masked_fill_tensor(masked_fill: FastPath, *, inplace: bool) -> FastPath:
    """`masked_fill(x, mask, value)` with a 0-d value tensor (a wrapped CPU scalar, or a 0-d rbln
    tensor on x's device): `masked_fill`'s fast path with the number `value.item()`, as `_ops.masked_fill`
    reads it (a float32 value, on the CPU or rbln, straight from its memory: `.item()` costs a dispatch,
    and an rbln one a host view, more than the rest of the call). The dispatcher's checks of the value
    are made here: a floating value of another dtype than float32/float16/bfloat16 or complex is
    declined, a NaN/Inf one too outside deploy mode. A float32 value (the common case: a wrapped Python
    number) goes straight to `masked_fill`'s launch (`fill_into`: the same plans, kept launch, arguments
    and bits); `inplace` must match `masked_fill`'s."""

    fill_into = masked_fill.fill_into

    def fast(args: tuple, kwargs: dict) -> Tensor | None:
        if len(args) != 3 or kwargs:
            return None
        x, mask, value = args
        if not isinstance(value, Tensor) or value.dim():
            return None
        dtype = value.dtype
        if dtype is torch.float32:  # the common case first: read the bits .item() reads, undispatched
            number = _c_float.from_address(value.data_ptr()).value
            if not math.isfinite(number) and not config.deploy_mode():
                return None
            device = value.get_device()  # -1 on the CPU (cheaper than .is_cpu)
            index = _contiguous_rbln(x)
            if index < 0 or (device >= 0 and device != index):
                return None
            return fill_into(x, mask, number, index)
        index = _contiguous_rbln(x)
        if index < 0 or not (value.is_cpu or value.get_device() == index):
            return None
        floating = dtype in FLOATS
        if not floating and (dtype.is_floating_point or dtype.is_complex):
            return None
        number = value.item()
        if floating and not math.isfinite(number) and not config.deploy_mode():
            return None
        return masked_fill((x, mask, float(number)), _NO_KEYWORDS)

    return fast


def fill(*, zero: bool) -> FastPath:
    """`fill_(x, value)` (`zero`: `zero_(x)`, value 0) on a contiguous floating rbln tensor: the FILL
    launch of `_ops.fill`. x is only written, so it is not scanned for NaN/Inf. `_ops.fill` launches
    through `kernel[grid]`, which keeps no direct launch; so the first call of a size here launches the
    same specialisation through `_launch.launch` (the checked launch, which keeps it), and later ones
    run the kept launch. Before any other op has loaded the kernels, fills stay on the host as in
    `_ops.fill` (None)."""

    def fast(args: tuple, kwargs: dict) -> Tensor | None:
        if kwargs or len(args) != 2 - zero:
            return None
        value = 0.0
        if not zero:
            value = args[1]
            kind = type(value)
            if kind is not float and kind is not int and kind is not bool:
                return None
            value = float(value)
        x = args[0]
        index = _contiguous_rbln(x)
        if index < 0 or "elementwise" not in _modules:
            return None
        n = x.numel()
        plan = _unary_plans[("fill", x.dtype, n)]
        if plan is None or (plan.programs > 1 and _device_tp(index) > 1):
            return None
        run = plan.launcher()
        if run is None:
            _, keywords = unary_key(_k("elementwise"), "fill", (x.dtype, x.dtype), n)
            _launch.launch(plan.kernel, plan.programs, plan.key, (x, x, n, value), keywords)
        else:
            run(plan.programs, 1, 1, x, x, n, value, plan.op)
        return x

    return fast


FAST_PATHS: dict[str, FastPath] = {
    "clamp.Tensor": clamp_tensor(),
    "clamp_.Tensor": clamp_tensor(inplace=True),
    "clamp.Tensor_out": clamp_tensor(out=True),
    "where.self_out": FP.where(out=True),
    "masked_fill.Tensor": masked_fill_tensor(FP.masked_fill(inplace=False), inplace=False),
    "masked_fill_.Tensor": masked_fill_tensor(FP.masked_fill(inplace=True), inplace=True),
    "fill_.Scalar": fill(zero=False),
    "zero_.default": fill(zero=True),
}
