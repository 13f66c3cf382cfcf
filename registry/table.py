"""The declarative op table: one `Op` per aten overload bound to an op-library kernel.

The same table drives registration (`torch_rbln.registry.register_table`) and the OpInfo
consistency tests (`tests/registry`): `opinfo` names the entry of torch's `op_db` whose samples
exercise the overload. This module imports no kernels (they load on first call).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ._base import INTEGERS, Decline, LazyModule, Ref, real_number, resolve

# Placeholders until an op's first call imports them (see `_base.LazyModule`): the table itself, and so
# the registration that `import torch` runs, imports no implementation, kernel, DSL or numba module.
O = LazyModule(globals(), "O", "_ops")  # noqa: E741
R = LazyModule(globals(), "R", "reduce")
EW = LazyModule(globals(), "EW", "elementwise")
IN = LazyModule(globals(), "IN", "integer")
RW = LazyModule(globals(), "RW", "rows")
LS = LazyModule(globals(), "LS", "loss")
GA = LazyModule(globals(), "GA", "gather")
MM = LazyModule(globals(), "MM", "matmul")
IX = LazyModule(globals(), "IX", "indexing")


@dataclass(frozen=True)
class Op:
    name: str  # aten overload, e.g. "add.Tensor"
    impl: Callable | Ref  # called with the aten arguments; returns the result or raises Decline
    opinfo: str | None = None  # op_db entry ("name" or "name:variant") whose samples test this overload
    int_inputs: bool = False  # integer/bool tensors are legitimate inputs (indices, masks)
    tol: dict = field(default_factory=dict)  # dtype name -> (atol, rtol) for the tests
    overwrites_first: bool = False  # the first argument is only written (fill_, zero_): no NaN/Inf check
    # the kernel gives torch's CPU result for NaN/Inf too (values moved, as tril; IEEE arithmetic, as mul):
    # no input is scanned for NaN/Inf
    exact: bool = False
    # builds the entry's family planner (`signature`, `plan`: see plan.py) for families migrated to
    # per-signature plans; an entry with one has no fast path
    make_plan: Callable[[], object] | None = None

    @property
    def planner(self):
        """The family planner (built once, on the op's first call), or None."""
        planner = self.__dict__.get("_planner", _UNBUILT)
        if planner is _UNBUILT:
            planner = self.make_plan() if self.make_plan is not None else None
            object.__setattr__(self, "_planner", planner)
        return planner

    @property
    def kernel(self) -> Callable:
        """`impl`, imported if it is a `Ref`."""
        return resolve(self.impl)


_UNBUILT = object()


# aten's overload names of binary ops spelled otherwise than add's (`_binary_family`'s `overloads`)
_WITH_SCALAR_OUTS = (("Tensor", "Scalar"), ("Tensor_out", "Scalar_out"), ("Tensor", "Scalar"))  # fmod
_DEFAULT_ONLY = (("default",), ("out",), ("default",))  # atan2, hypot


def _binary_family(name: str, opinfo: str, *, alpha: bool = False, comparison: bool = False,
                   scalar: bool = True, exact: bool = False, overloads: tuple | None = None) -> list[Op]:
    """The functional, out= and in-place overloads of a binary op, all on `EW.binary(name, ...)` with its
    per-signature plan; the first functional one carries the OpInfo. `overloads`: (functional, out=,
    in-place) names as aten spells them for this op (fmod's `Tensor_out`, atan2's `default`); by default
    Tensor (and Scalar), `out` (`Tensor_out` for a comparison) and the in-place twins. `exact`: the
    kernel computes what torch's CPU kernel does for every input, NaN and Inf included (IEEE arithmetic
    and comparisons on the same float32 values), so no input is scanned for NaN/Inf: the scan would
    only cost time."""
    kw = {"comparison": comparison}
    family = {**kw, "scan": not exact}
    if alpha:
        f = lambda a, b, alpha=1: EW.binary(name, a, b, alpha, **kw)
        fo = lambda a, b, alpha=1, out=None: EW.binary(name, a, b, alpha, out=out, **kw)
        fi = lambda a, b, alpha=1: EW.binary(name, a, b, alpha, inplace=True, **kw)
    else:
        f = lambda a, b: EW.binary(name, a, b, **kw)
        fo = lambda a, b, out=None: EW.binary(name, a, b, out=out, **kw)
        fi = lambda a, b: EW.binary(name, a, b, inplace=True, **kw)
    if overloads is None:
        functional = ("Tensor", "Scalar") if scalar else ("Tensor",)
        overloads = (functional, ("Tensor_out",) if comparison else ("out",), functional)
    functional, outs, inplace = overloads
    # int_inputs: integer tensors reach EW.binary, which runs the exact integer kernel (add, sub, mul,
    # comparisons) or declines with the dtype.
    return [*(Op(f"{name}.{form}", f, opinfo if i == 0 else None, int_inputs=True, exact=exact,
                 make_plan=lambda: EW.binary_family(name, **family)) for i, form in enumerate(functional)),
            *(Op(f"{name}.{form}", fo, int_inputs=True, exact=exact,
                 make_plan=lambda: EW.binary_family(name, out=True, **family)) for form in outs),
            *(Op(f"{name}_.{form}", fi, int_inputs=True, exact=exact,
                 make_plan=lambda: EW.binary_family(name, inplace=True, **family)) for form in inplace)]


def _unary_family(name: str, opinfo: str | None, kernel: str | None = None, *, inplace: bool = True,
                  out: bool = True, overload: str = "default", int_inputs: bool = False,
                  exact: bool = False, parameter: float | None = None) -> list[Op]:
    """`int_inputs`: integer tensors reach EW.unary, which runs the exact integer kernel (abs, neg) or
    declines with the dtype. `exact`: the kernel gives torch's result for NaN/Inf too (neg, abs; sigmoid,
    tanh, silu with finite values within their tolerance), so the input is not scanned. `parameter`: the
    overloads take `(x, p=parameter)`, p the kernel's number (leaky_relu's negative slope)."""
    kernel = kernel or name
    suffix = f".{overload}"
    flags = {"int_inputs": int_inputs, "exact": exact}
    plans = {"scan": not exact, "parameter": parameter}

    def number(p: object) -> float:
        return 0.0 if parameter is None else real_number(p, "parameter")

    ops = [Op(f"{name}{suffix}", lambda x, p=parameter: EW.unary(kernel, x, number(p)), opinfo, **flags,
              make_plan=lambda: EW.unary_family(kernel, **plans))]
    if out:
        ops.append(Op(f"{name}.out", lambda x, p=parameter, out=None: EW.unary(kernel, x, number(p), out=out),
                      **flags, make_plan=lambda: EW.unary_family(kernel, out=True, **plans)))
    if inplace:
        ops.append(Op(f"{name}_{suffix}", lambda x, p=parameter: EW.unary(kernel, x, number(p), inplace=True),
                      **flags, make_plan=lambda: EW.unary_family(kernel, inplace=True, **plans)))
    return ops


_GELU_KERNELS = {"none": "gelu", "tanh": "gelu_tanh"}  # gelu's `approximate` -> elementwise kernel op


def _gelu(x, approximate="none", out=None, inplace=False):
    """gelu through the elementwise kernel of its `approximate` form. Another value is declined: the CPU
    fallback then raises torch's own error (its message and type, as on the CPU), recorded as a CPU call
    with the reason."""
    kernel = _GELU_KERNELS.get(approximate)
    if kernel is None:
        raise Decline(f"gelu approximate={approximate!r} (neither 'none' nor 'tanh')")
    return EW.unary(kernel, x, out=out, inplace=inplace)


_GELU_BACKWARD_OPS = {"none": "gelu_backward", "tanh": "gelu_tanh_backward"}


def _gelu_backward(grad, x, approximate="none"):
    """As `_gelu`: another `approximate` is declined, so the CPU fallback raises torch's error."""
    name = _GELU_BACKWARD_OPS.get(approximate)
    if name is None:
        raise Decline(f"gelu_backward approximate={approximate!r} (neither 'none' nor 'tanh')")
    return EW.binary(name, grad, x)


def _pow_scalar(x, exponent, out=None):
    if isinstance(exponent, (complex, bool)) or not isinstance(exponent, (int, float)):
        raise Decline("non-real exponent")
    if exponent == 2:
        return EW.binary("mul", x, x, out=out)
    op, p = EW.pow_unary(exponent)
    return EW.unary(op, x, p, out=out)


def _float(x):
    """x when it is a floating tensor; Decline otherwise (an integer tensor has no NaN/Inf: the CPU
    answers False everywhere without a kernel)."""
    if not x.dtype.is_floating_point:
        raise Decline(f"dtype {str(x.dtype).replace('torch.', '')}")
    return x


def _div_mode(a, b, rounding_mode=None, out=None, inplace=False):
    if rounding_mode not in (None, "trunc", "floor"):
        raise Decline(f"rounding_mode {rounding_mode!r}")  # the CPU kernel raises torch's error
    name = "div" if rounding_mode is None else f"div_{rounding_mode}"
    return EW.binary(name, a, b, out=out, inplace=inplace)


_DIV_OPS = {None: "div", "trunc": "div_trunc", "floor": "div_floor"}  # rounding_mode -> binary kernel op


def _div_plan(*, inplace: bool = False, out: bool = False):
    return EW.binary_family(keyword="rounding_mode", ops=_DIV_OPS, inplace=inplace, out=out)


def _gelu_plan(*, inplace: bool = False, out: bool = False):
    return EW.unary_family("gelu", keyword="approximate", ops=_GELU_KERNELS, inplace=inplace, out=out)


def _clamp(x, low=None, high=None, out=None, inplace=False):
    """clamp with Scalar bounds: one launch, min(max(x, low), high) (torch: low > high gives high)."""
    if low is None and high is None:
        raise Decline("clamp without bounds")  # the CPU kernel raises torch's error
    for bound in (low, high):
        if bound is not None and (isinstance(bound, (complex, bool)) or not isinstance(bound, (int, float))):
            raise Decline("non-real clamp bound")
    if not x.dtype.is_floating_point:
        if x.dtype in INTEGERS and all(bound is None or isinstance(bound, int) for bound in (low, high)):
            # int32/int64 with int bounds: exact on the integer kernel, maximum then minimum
            return _clamp_tensor(x, low, high, out, inplace)
        raise Decline(f"dtype {str(x.dtype).replace('torch.', '')} with these bounds")
    low = -math.inf if low is None else low
    high = math.inf if high is None else high
    return EW.binary("clamp", x, low, high, out=out, inplace=inplace)


def _bitwise_family(name: str) -> list[Op]:
    """bitwise_and/or/xor of bool and integer tensors: functional, in place and `out=` (Tensor and
    Scalar overloads)."""
    f = lambda a, b: IN.bitwise(name, a, b)
    fi = lambda a, b: IN.bitwise(name, a, b, inplace=True)
    plain = lambda: EW.binary_family(name, bitwise=True)
    inplace = lambda: EW.binary_family(name, inplace=True, bitwise=True)
    return [Op(f"{name}.Tensor", f, name, int_inputs=True, make_plan=plain),
            Op(f"{name}.Scalar", f, int_inputs=True, make_plan=plain),
            Op(f"{name}_.Tensor", fi, int_inputs=True, make_plan=inplace),
            Op(f"{name}_.Scalar", fi, int_inputs=True, make_plan=inplace),
            Op(f"{name}.Tensor_out", lambda a, b, out=None: IN.bitwise(name, a, b, out=out), int_inputs=True,
               make_plan=lambda: EW.binary_family(name, out=True, bitwise=True))]


def _clamp_tensor(x, low=None, high=None, out=None, inplace=False):
    """clamp with tensor bounds (broadcasting): maximum then minimum, two launches (the second in place
    into the first's result, so `out=` and in-place forms write their target exactly once each)."""
    if low is None and high is None:
        raise Decline("clamp without bounds")
    if low is None:
        return EW.binary("minimum", x, high, out=out, inplace=inplace)
    result = EW.binary("maximum", x, low, out=out, inplace=inplace)
    # (a decline here re-runs the whole clamp on CPU from `result`: clamping twice changes nothing)
    return result if high is None else EW.binary("minimum", result, high, inplace=True)


def _tensor_bound_entries() -> list[Op]:
    """maximum/minimum into `out=`, and clamp_min/clamp_max with a tensor bound (new, `out=`, in place):
    torch's maximum/minimum, whose CPU kernels they share (NaN from either operand). AdamW's amsgrad
    keeps its running maximum with `torch.maximum(..., out=)` or, in its `foreach` form, `clamp_min_`."""
    ops = []
    for clamp, name in (("clamp_min", "maximum"), ("clamp_max", "minimum")):
        ops += [Op(f"{name}.out", lambda a, b, out=None, _name=name: EW.binary(_name, a, b, out=out),
                   int_inputs=True, make_plan=lambda _name=name: EW.binary_family(_name, out=True))]
        ops += [Op(f"{clamp}.Tensor", lambda a, b, _name=name: EW.binary(_name, a, b), int_inputs=True,
                   make_plan=lambda _name=name: EW.binary_family(_name)),
                Op(f"{clamp}.Tensor_out", lambda a, b, out=None, _name=name: EW.binary(_name, a, b, out=out),
                   int_inputs=True, make_plan=lambda _name=name: EW.binary_family(_name, out=True)),
                Op(f"{clamp}_.Tensor", lambda a, b, _name=name: EW.binary(_name, a, b, inplace=True),
                   int_inputs=True, make_plan=lambda _name=name: EW.binary_family(_name, inplace=True))]
    return ops


def _leaky_relu_backward(grad, x, slope, self_is_result):
    """grad where x > 0, grad * slope elsewhere. With `self_is_result` (the backward of an in-place
    leaky_relu_) and a negative slope torch raises: the CPU's error."""
    if self_is_result and real_number(slope, "negative_slope") < 0:
        raise Decline("in-place leaky_relu backward with a negative slope")
    return EW.binary("leaky_relu_backward", grad, x, real_number(slope, "negative_slope"))


def _elu_alpha(alpha, scale, input_scale) -> float:
    """elu's alpha, for the forms the kernels compute: scale and input_scale 1 (`F.elu`); selu's and
    celu's scales decline to the CPU."""
    if real_number(scale, "scale") != 1.0 or real_number(input_scale, "input_scale") != 1.0:
        raise Decline("elu with scale or input_scale other than 1 (selu, celu)")
    return real_number(alpha, "alpha")


def _elu(x, alpha=1, scale=1, input_scale=1, out=None, inplace=False):
    """torch's CPU elu: x > 0 ? x : expm1(x) * alpha (NaN and -0.0 through)."""
    return EW.unary("elu", x, _elu_alpha(alpha, scale, input_scale), out=out, inplace=inplace)


def _elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result):
    """torch's CPU elu_backward with scales 1: grad where the input (or result) is positive, else
    grad * alpha * exp(x), or from elu_'s result y, grad * (y + alpha)."""
    name = "elu_backward_of_result" if is_result else "elu_backward"
    return EW.binary(name, grad, self_or_result, _elu_alpha(alpha, scale, input_scale))


def _softplus(x, beta=1, threshold=20, out=None):
    """softplus with beta 1 (torch's default; another beta declines to the CPU): x above the threshold,
    else log1p(exp(x)), log1p accurate for tiny arguments."""
    if real_number(beta, "beta") != 1.0:
        raise Decline(f"softplus beta={beta!r}")
    return EW.unary("softplus", x, real_number(threshold, "threshold"), out=out)


def _softplus_backward(grad, x, beta, threshold):
    if real_number(beta, "beta") != 1.0:
        raise Decline(f"softplus beta={beta!r}")
    return EW.binary("softplus_backward", grad, x, real_number(threshold, "threshold"))


def _threshold_backward(grad, x, threshold):
    return EW.binary("threshold_backward", grad, x, threshold)


def _sum(x, dim=None, keepdim=False, dtype=None):
    return R.reduce("sum", x, dim, keepdim, dtype)


def _count_nonzero(x, dim=None):
    """count_nonzero: the sum (into int64) of `x != 0` (NaN counts, -0.0 does not, as torch's), over `dim`
    (an int, a list of ints, or every dim)."""
    return R.reduce("sum", EW.binary("ne", x, 0, comparison=True), [dim] if isinstance(dim, int) else dim)


def _var(x, dim=None, correction=None, keepdim=False):
    return R.reduce("var", x, dim, keepdim, correction=correction)


def _std(x, dim=None, correction=None, keepdim=False):
    return R.reduce("std", x, dim, keepdim, correction=correction)


def _var_mean(x, dim=None, correction=None, keepdim=False, *, std=False):
    """(var or std, mean) as two reductions (normalisation statistics; group norm has its own entry,
    `norms.group_norm`, in float32). torch's CPU computes both in one Welford pass; the mean's
    summation order differs: a tolerance."""
    spread = (_std if std else _var)(x, dim, correction, keepdim)
    return spread, R.reduce("mean", x, dim, keepdim)


F = "float32"
LOOSE = {"float16": (2e-2, 2e-2), "bfloat16": (5e-2, 5e-2), "float32": (1e-4, 1e-4)}
MATMUL = {"float16": (5e-2, 2e-2), "bfloat16": (2e-1, 5e-2), "float32": (1e-3, 1e-4)}
CONV = {"float16": (5e-2, 2e-2), "bfloat16": (2e-1, 5e-2), "float32": (1e-4, 1e-4)}


CV = LazyModule(globals(), "CV", "conv")  # the CNN family (convolution, batch norm, pooling, gather)
TN = LazyModule(globals(), "TN", "ternary")  # addcmul, addcdiv, lerp (torch's optimizers)
RS = LazyModule(globals(), "RS", "resample")  # upsampling, reflection and replication pads
_NEAREST_PREFIXES = (("upsample_nearest", False), ("_upsample_nearest_exact", True))  # (aten name, exact)


def _ternary_entries() -> list[Op]:
    """addcmul and addcdiv (new, `out=`, in place) and lerp with a number or tensor weight, each form."""
    ops = []
    for name in ("addcmul", "addcdiv"):
        def new(a, b, c, *, value=1, _name=name):
            return getattr(TN, _name)(a, b, c, value=value)

        def out(a, b, c, *, value=1, out=None, _name=name):
            return getattr(TN, _name)(a, b, c, value=value, out=out)

        def inplace(a, b, c, *, value=1, _name=name):
            return getattr(TN, _name)(a, b, c, value=value, inplace=True)

        ops += [Op(f"{name}.default", new, name, exact=True,
                   make_plan=lambda _name=name: TN.ternary_family(_name)),
                Op(f"{name}.out", out, exact=True,
                   make_plan=lambda _name=name: TN.ternary_family(_name, out=True)),
                Op(f"{name}_.default", inplace, exact=True,
                   make_plan=lambda _name=name: TN.ternary_family(_name, inplace=True))]
    for form in ("Scalar", "Tensor"):
        ops += [Op(f"lerp.{form}", lambda a, end, weight: TN.lerp(a, end, weight), "lerp" if form == "Scalar"
                   else None, exact=True, make_plan=lambda: TN.ternary_family("lerp")),
                Op(f"lerp.{form}_out", lambda a, end, weight, out=None: TN.lerp(a, end, weight, out=out),
                   exact=True, make_plan=lambda: TN.ternary_family("lerp", out=True)),
                Op(f"lerp_.{form}", lambda a, end, weight: TN.lerp(a, end, weight, inplace=True), exact=True,
                   make_plan=lambda: TN.ternary_family("lerp", inplace=True))]
    return ops


def _scatter_add_inplace(x, dim, index, src):
    return CV.scatter_add(x, dim, index, src, inplace=True)


TABLE: list[Op] = [
    # ---- (1) elementwise binary with broadcasting and type promotion
    *_binary_family("add", "add", alpha=True, exact=True),
    *_binary_family("sub", "sub", alpha=True, exact=True),
    *_binary_family("mul", "mul", exact=True),
    *_binary_family("div", "div:no_rounding_mode", exact=True),
    # int_inputs: integer floor division by a non-zero number runs the exact integer kernel
    Op("div.Tensor_mode", _div_mode, "div:trunc_rounding", int_inputs=True, make_plan=lambda: _div_plan()),
    Op("div.Scalar_mode", _div_mode, int_inputs=True, make_plan=lambda: _div_plan()),
    Op("div.out_mode", lambda a, b, rounding_mode=None, out=None: _div_mode(a, b, rounding_mode, out=out),
       int_inputs=True, make_plan=lambda: _div_plan(out=True)),
    Op("div_.Tensor_mode", lambda a, b, rounding_mode=None: _div_mode(a, b, rounding_mode, inplace=True),
       int_inputs=True, make_plan=lambda: _div_plan(inplace=True)),
    Op("div_.Scalar_mode", lambda a, b, rounding_mode=None: _div_mode(a, b, rounding_mode, inplace=True),
       int_inputs=True, make_plan=lambda: _div_plan(inplace=True)),
    Op("floor_divide.default", lambda a, b: _div_mode(a, b, "floor"), "floor_divide", int_inputs=True,
       make_plan=lambda: EW.binary_family("div_floor")),
    *_binary_family("eq", "eq", comparison=True, exact=True),
    *_binary_family("ne", "ne", comparison=True, exact=True),
    *_binary_family("lt", "lt", comparison=True, exact=True),
    *_binary_family("le", "le", comparison=True, exact=True),
    *_binary_family("gt", "gt", comparison=True, exact=True),
    *_binary_family("ge", "ge", comparison=True, exact=True),
    # bool/integer masks (attention masks, compiled embedding backward)
    *_bitwise_family("bitwise_and"),
    *_bitwise_family("bitwise_or"),
    *_bitwise_family("bitwise_xor"),
    Op("bitwise_not.default", lambda x: IN.bitwise_not(x), "bitwise_not", int_inputs=True,
       make_plan=lambda: EW.bitwise_not_family()),
    Op("bitwise_not_.default", lambda x: IN.bitwise_not(x, inplace=True), int_inputs=True,
       make_plan=lambda: EW.bitwise_not_family(inplace=True)),
    Op("bitwise_not.out", lambda x, out=None: IN.bitwise_not(x, out=out), int_inputs=True,
       make_plan=lambda: EW.bitwise_not_family(out=True)),
    Op("logical_not.default", lambda x: EW.logical_not(x), "logical_not", int_inputs=True, exact=True),
    Op("clamp.default", _clamp, "clamp", int_inputs=True, make_plan=lambda: EW.binary_family(form="clamp")),
    Op("clamp.out", lambda x, low=None, high=None, out=None: _clamp(x, low, high, out=out), int_inputs=True,
       make_plan=lambda: EW.binary_family(form="clamp", out=True)),
    Op("clamp_.default", lambda x, low=None, high=None: _clamp(x, low, high, inplace=True), int_inputs=True,
       make_plan=lambda: EW.binary_family(form="clamp", inplace=True)),
    Op("clamp.Tensor", _clamp_tensor, make_plan=lambda: EW.clamp_tensor()),
    Op("clamp.Tensor_out", lambda x, low=None, high=None, out=None: _clamp_tensor(x, low, high, out=out),
       make_plan=lambda: EW.clamp_tensor(out=True)),
    Op("clamp_.Tensor", lambda x, low=None, high=None: _clamp_tensor(x, low, high, inplace=True),
       make_plan=lambda: EW.clamp_tensor(inplace=True)),
    Op("clamp_min.default", lambda x, low: _clamp(x, low, None),
       make_plan=lambda: EW.binary_family(form="clamp", only="min")),
    Op("clamp_max.default", lambda x, high: _clamp(x, None, high),
       make_plan=lambda: EW.binary_family(form="clamp", only="max")),
    Op("clamp_min_.default", lambda x, low: _clamp(x, low, None, inplace=True),
       make_plan=lambda: EW.binary_family(form="clamp", only="min", inplace=True)),
    Op("clamp_max_.default", lambda x, high: _clamp(x, None, high, inplace=True),
       make_plan=lambda: EW.binary_family(form="clamp", only="max", inplace=True)),
    *_tensor_bound_entries(),
    Op("maximum.default", lambda a, b: EW.binary("maximum", a, b), "maximum", int_inputs=True,
       make_plan=lambda: EW.binary_family("maximum")),
    Op("minimum.default", lambda a, b: EW.binary("minimum", a, b), "minimum", int_inputs=True,
       make_plan=lambda: EW.binary_family("minimum")),
    # ---- unary
    *_unary_family("neg", "neg", int_inputs=True, exact=True),
    *_unary_family("exp", "exp"),
    *_unary_family("sqrt", "sqrt"),
    *_unary_family("rsqrt", "rsqrt"),
    # sigmoid, tanh and silu: exact on NaN/+-Inf (NaN, the limits 0/+-1, silu(-inf) = -inf * 0 = NaN as
    # torch's) and on the sign of zero, finite values within a few float32 ulps
    *_unary_family("sigmoid", "sigmoid", exact=True),
    *_unary_family("tanh", "tanh", exact=True),
    *_unary_family("abs", "abs", int_inputs=True, exact=True),
    *_unary_family("log", "log"),
    *_unary_family("cos", "cos"),  # RoPE's tables in every Llama-style model
    *_unary_family("sin", "sin"),
    *_unary_family("reciprocal", "reciprocal"),
    # rounding and sign: IEEE operations on the same values (NaN, +-Inf, -0.0 as the CPU's): exact
    *_unary_family("floor", "floor", exact=True),
    *_unary_family("ceil", "ceil", exact=True),
    *_unary_family("trunc", "trunc", exact=True),
    *_unary_family("sign", "sign", exact=True),
    *_unary_family("erf", "erf"),
    # erfinv (trunc_normal_ initialisation): Giles' guess and a float64 Newton step (kernels/elementwise.py)
    *_unary_family("erfinv", "erfinv"),
    *_unary_family("log1p", "log1p", exact=True),
    *_unary_family("expm1", "expm1", exact=True),
    *_unary_family("round", "round", exact=True),
    *_unary_family("hardswish", "nn.functional.hardswish"),
    *_unary_family("hardsigmoid", "nn.functional.hardsigmoid"),
    # softplus with beta 1 (no OpInfo sweep: its samples all take beta=3, which declines to the CPU;
    # tests/registry/test_rounding_and_activations.py)
    Op("softplus.default", _softplus, tol=LOOSE),
    Op("softplus.out", lambda x, beta=1, threshold=20, out=None: _softplus(x, beta, threshold, out=out),
       tol=LOOSE),
    Op("softplus_backward.default", _softplus_backward, tol=LOOSE),
    # log_sigmoid (binary_cross_entropy_with_logits): the result and torch's exp(-|x|) buffer
    Op("log_sigmoid_forward.default", Ref("ternary", "log_sigmoid_forward"), "nn.functional.logsigmoid",
       tol=LOOSE),
    Op("log_sigmoid_backward.default", Ref("ternary", "log_sigmoid_backward"), tol=LOOSE),
    # relu is exact: `where(x < 0, 0, x)` keeps NaN and -0.0 as torch's relu does
    *_unary_family("relu", "nn.functional.relu", out=False, exact=True),
    # leaky_relu: x > 0 ? x : x * slope, as torch computes it (NaN and -0.0 through): exact
    *_unary_family("leaky_relu", "nn.functional.leaky_relu", exact=True, parameter=0.01),
    Op("leaky_relu_backward.default", lambda g, x, slope, self_is_result: _leaky_relu_backward(
        g, x, slope, self_is_result), exact=True),
    # elu: NaN, +-Inf and -0.0 as the CPU's (exp's +-Inf limits); finite values within tolerance
    Op("elu.default", _elu, "nn.functional.elu", exact=True),
    Op("elu.out", lambda x, alpha=1, scale=1, input_scale=1, out=None: _elu(x, alpha, scale, input_scale,
                                                                            out=out), exact=True),
    Op("elu_.default", lambda x, alpha=1, scale=1, input_scale=1: _elu(x, alpha, scale, input_scale,
                                                                       inplace=True), exact=True),
    Op("elu_backward.default", _elu_backward, exact=True),
    # nan_to_num: three masked fills (NaN, +inf, -inf); its inputs' NaN/Inf are what it is for: exact
    Op("nan_to_num.default", Ref("elementwise", "nan_to_num"), "nan_to_num", exact=True),
    Op("nan_to_num.out", Ref("elementwise", "nan_to_num"), exact=True),
    Op("nan_to_num_.default", Ref("elementwise", "nan_to_num_"), exact=True),
    # mish: x * tanh(log1p(exp(x))) as torch's CPU kernel; its backward on the binary kernel
    *_unary_family("mish", "nn.functional.mish"),
    Op("mish_backward.default", lambda grad, x: EW.binary("mish_backward", grad, x), tol=LOOSE),
    *_unary_family("silu", "nn.functional.silu", exact=True),
    Op("gelu.default", lambda x, approximate="none": _gelu(x, approximate), "nn.functional.gelu", tol=LOOSE,
       make_plan=lambda: _gelu_plan()),
    Op("gelu.out", lambda x, approximate="none", out=None: _gelu(x, approximate, out=out),
       make_plan=lambda: _gelu_plan(out=True)),
    Op("gelu_.default", lambda x, approximate="none": _gelu(x, approximate, inplace=True),
       make_plan=lambda: _gelu_plan(inplace=True)),
    Op("pow.Tensor_Tensor", lambda x, e: EW.binary("pow", x, e), "pow", tol=LOOSE,
       make_plan=lambda: EW.binary_family("pow")),
    Op("pow.Tensor_Tensor_out", lambda x, e, out=None: EW.binary("pow", x, e, out=out),
       make_plan=lambda: EW.binary_family("pow", out=True)),
    Op("pow.Tensor_Scalar", lambda x, e: _pow_scalar(x, e), tol=LOOSE, make_plan=lambda: EW.pow_scalar()),
    Op("pow.Tensor_Scalar_out", lambda x, e, out=None: _pow_scalar(x, e, out=out),
       make_plan=lambda: EW.pow_scalar(out=True)),
    # ---- elementwise backward
    Op("gelu_backward.default", _gelu_backward, tol=LOOSE, make_plan=lambda: EW.binary_family(
        keyword="approximate", ops=_GELU_BACKWARD_OPS, default="none")),
    Op("threshold_backward.default", _threshold_backward,
       make_plan=lambda: EW.binary_family("threshold_backward", form="third_as_alpha")),
    Op("sigmoid_backward.default", lambda g, y: EW.binary("sigmoid_backward", g, y),
       make_plan=lambda: EW.binary_family("sigmoid_backward")),
    Op("tanh_backward.default", lambda g, y: EW.binary("tanh_backward", g, y),
       make_plan=lambda: EW.binary_family("tanh_backward")),
    Op("silu_backward.default", lambda g, x: EW.binary("silu_backward", g, x),
       make_plan=lambda: EW.binary_family("silu_backward")),
    # fmod and remainder: C's fmod (exact), and torch's CPU formula for remainder (fmod, then the divisor
    # added where the signs differ), so NaN/Inf give the CPU's values unscanned; integers by a number
    # run the exact integer kernel (`take_along_dim`'s index arithmetic), by a tensor the CPU (torch
    # raises for a zero divisor, which a kernel cannot)
    *_binary_family("fmod", "fmod", exact=True, overloads=_WITH_SCALAR_OUTS),
    *_binary_family("remainder", "remainder", exact=True, overloads=_WITH_SCALAR_OUTS),
    # atan2, hypot (in float64) and xlogy (kl_div's target * log(target)): libm-grade results, so NaN/Inf
    # inputs are scanned and take the CPU
    *_binary_family("atan2", "atan2", overloads=_DEFAULT_ONLY),
    *_binary_family("hypot", "hypot", overloads=_DEFAULT_ONLY),
    *_binary_family("xlogy", "xlogy", overloads=(("Tensor", "Scalar_Other"), ("OutTensor", "OutScalar_Other"),
                                                 ("Tensor", "Scalar_Other"))),
    # ---- where, masked_fill, fill/zero (where and masked_fill select values: exact, never scanned, so a
    # mask of -inf scores stays on the device)
    Op("where.self", lambda c, a, b: EW.where(c, a, b), "where", int_inputs=True, exact=True,
       make_plan=lambda: EW.where_family()),
    Op("where.self_out", lambda c, a, b, out=None: EW.where(c, a, b, out=out), int_inputs=True, exact=True,
       make_plan=lambda: EW.where_family(out=True)),
    Op("masked_fill.Scalar", lambda x, m, v: EW.masked_fill(x, m, v), "masked_fill", int_inputs=True,
       exact=True, make_plan=lambda: EW.masked_fill_family(inplace=False)),
    Op("masked_fill_.Scalar", lambda x, m, v: EW.masked_fill(x, m, v, inplace=True), int_inputs=True,
       exact=True, make_plan=lambda: EW.masked_fill_family(inplace=True)),
    Op("masked_fill.Tensor", lambda x, m, v: EW.masked_fill(x, m, v), int_inputs=True, exact=True,
       make_plan=lambda: EW.masked_fill_family(inplace=False)),
    Op("masked_fill_.Tensor", lambda x, m, v: EW.masked_fill(x, m, v, inplace=True), int_inputs=True,
       exact=True, make_plan=lambda: EW.masked_fill_family(inplace=True)),
    # ---- addcmul, addcdiv, lerp (torch's optimizers): exact, the CPU's roundings and fused multiply-adds
    # on the same float32 values, so an optimizer's states and gradients are not scanned for NaN/Inf
    *_ternary_entries(),
    Op("fill_.Scalar", lambda x, v: EW.fill(x, v, first_use_ok=False), "fill", overwrites_first=True,
       make_plan=lambda: EW.fill_family(zero=False)),
    Op("zero_.default", lambda x: EW.fill(x, 0.0, first_use_ok=False), "zero_", overwrites_first=True,
       make_plan=lambda: EW.fill_family(zero=True)),
    # ---- (2) softmax, log_softmax, layer norm (+ backward)
    # softmax/log_softmax: exact on NaN/Inf (see rows.softmax), so scores masked with -inf stay on device
    Op("_softmax.default", lambda x, d, h: RW.softmax(x, d, h, log=False), "softmax", tol=LOOSE, exact=True,
       make_plan=lambda: RW.softmax_family(log=False)),
    Op("_log_softmax.default", lambda x, d, h: RW.softmax(x, d, h, log=True), "log_softmax", tol=LOOSE,
       exact=True, make_plan=lambda: RW.softmax_family(log=True)),
    Op("_softmax_backward_data.default", lambda g, y, d, t: RW.softmax_backward(g, y, d, t, log=False),
       make_plan=lambda: RW.softmax_backward_family(log=False)),
    Op("_log_softmax_backward_data.default", lambda g, y, d, t: RW.softmax_backward(g, y, d, t, log=True),
       make_plan=lambda: RW.softmax_backward_family(log=True)),
    Op("native_layer_norm.default", Ref("rows", "layer_norm"), "nn.functional.layer_norm", tol=LOOSE,
       make_plan=lambda: RW.layer_norm_family()),
    Op("native_layer_norm_backward.default", Ref("rows", "layer_norm_backward"),
       make_plan=lambda: RW.layer_norm_backward_family()),
    # ---- (3) matmul family (linear and matmul decompose into these). Exact: every product and sum is
    # IEEE arithmetic on the same float32 values as torch's gemm (BLAS gemm itself on the numba
    # backend), and a NaN/Inf term gives the same NaN or signed Inf in any summation order, so the
    # operands (a model's weights, read on every call) are not scanned; addmm with alpha or beta 0,
    # where torch skips an operand, declines
    Op("mm.default", lambda a, b: MM.mm(a, b), "mm", tol=MATMUL, exact=True,
       make_plan=lambda: MM.mm_family()),
    Op("mm.out", lambda a, b, out=None: MM.mm(a, b, out=out), exact=True, make_plan=lambda: MM.mm_family()),
    Op("bmm.default", lambda a, b: MM.bmm(a, b), "bmm", tol=MATMUL, exact=True,
       make_plan=lambda: MM.bmm_family()),
    Op("bmm.out", lambda a, b, out=None: MM.bmm(a, b, out=out), exact=True,
       make_plan=lambda: MM.bmm_family()),
    Op("addmm.default", lambda c, a, b, beta=1, alpha=1: MM.addmm(c, a, b, beta, alpha), "addmm", tol=MATMUL,
       exact=True, make_plan=lambda: MM.addmm_family()),
    Op("addmm.out", lambda c, a, b, beta=1, alpha=1, out=None: MM.addmm(c, a, b, beta, alpha, out=out),
       exact=True, make_plan=lambda: MM.addmm_family()),
    Op("baddbmm.default", lambda c, a, b, beta=1, alpha=1: MM.baddbmm(c, a, b, beta, alpha), "baddbmm",
       tol=MATMUL),
    Op("dot.default", lambda a, b: MM.dot(a, b), "dot", tol=MATMUL, exact=True),
    # ---- (4) reductions over any dims
    Op("sum.dim_IntList", _sum, "sum", tol=LOOSE, int_inputs=True,
       make_plan=lambda: R.family("sum", keywords=("dtype",))),
    Op("sum.default", lambda x, dtype=None: _sum(x, None, False, dtype), int_inputs=True,
       make_plan=lambda: R.family("sum", positional=1, keywords=("dtype",))),
    Op("count_nonzero.dim_IntList", _count_nonzero, "count_nonzero", int_inputs=True, exact=True),
    Op("count_nonzero.default", _count_nonzero, int_inputs=True, exact=True),
    Op("mean.dim", lambda x, dim, keepdim=False, dtype=None: R.reduce("mean", x, dim, keepdim, dtype),
       "mean", tol=LOOSE, make_plan=lambda: R.family("mean", keywords=("dtype",))),
    Op("mean.default", lambda x, dtype=None: R.reduce("mean", x, None, False, dtype),
       make_plan=lambda: R.family("mean", positional=1, keywords=("dtype",))),
    Op("amax.default", lambda x, dim=(), keepdim=False: R.reduce("amax", x, dim, keepdim), "amax",
       int_inputs=True, exact=True, make_plan=lambda: R.family("amax")),
    Op("amin.default", lambda x, dim=(), keepdim=False: R.reduce("amin", x, dim, keepdim), "amin",
       int_inputs=True, exact=True, make_plan=lambda: R.family("amin")),
    Op("max.dim", lambda x, dim, keepdim=False: R.reduce("max", x, dim, keepdim), "max:reduction_with_dim",
       int_inputs=True, exact=True, make_plan=lambda: R.family("max")),
    # max() of all elements: amax over every dim (ints exact on the integer kernel)
    Op("max.default", lambda x: R.reduce("amax", x), "max:reduction_no_dim", int_inputs=True, exact=True,
       make_plan=lambda: R.family("amax", positional=1)),
    Op("min.dim", lambda x, dim, keepdim=False: R.reduce("min", x, dim, keepdim), "min:reduction_with_dim",
       int_inputs=True, exact=True, make_plan=lambda: R.family("min")),
    # min() of all elements: amin over every dim (ints exact on the integer kernel)
    Op("min.default", lambda x: R.reduce("amin", x), "min:reduction_no_dim", int_inputs=True, exact=True,
       make_plan=lambda: R.family("amin", positional=1)),
    Op("argmax.default", lambda x, dim=None, keepdim=False: R.reduce("argmax", x, dim, keepdim), "argmax",
       int_inputs=True, exact=True, make_plan=lambda: R.family("argmax")),
    Op("argmin.default", lambda x, dim=None, keepdim=False: R.reduce("argmin", x, dim, keepdim), "argmin",
       int_inputs=True, exact=True, make_plan=lambda: R.family("argmin")),
    Op("var.correction", _var, "var", tol=LOOSE,
       make_plan=lambda: R.family("var", positional=2, keywords=("correction", "keepdim"))),
    # clip_grad_norm_'s norms (orders 2, 1, +-inf; see norms.py)
    Op("linalg_vector_norm.default", Ref("norms", "vector_norm"), "linalg.vector_norm", tol=LOOSE),
    Op("logsumexp.default", Ref("norms", "logsumexp"), "logsumexp", tol=LOOSE, exact=True),
    # group norm with float32 statistics (torch's composite computes them in the input's dtype; its
    # backward has no composite: it ran on the CPU)
    Op("native_group_norm.default", Ref("norms", "group_norm"), "nn.functional.group_norm", tol=LOOSE),
    Op("native_group_norm_backward.default", Ref("norms", "group_norm_backward")),
    Op("var_mean.correction", _var_mean, "var_mean", tol=LOOSE),
    Op("std_mean.correction", lambda x, dim=None, correction=None, keepdim=False: _var_mean(
        x, dim, correction, keepdim, std=True), "std_mean", tol=LOOSE),
    Op("std.correction", _std, "std", tol=LOOSE,
       make_plan=lambda: R.family("std", positional=2, keywords=("correction", "keepdim"))),
    # isin: a broadcast eq and an any over the test elements (exact: not scanned)
    Op("isin.Tensor_Tensor", Ref("reduce", "isin"), "isin", int_inputs=True, exact=True,
       make_plan=lambda: R.isin_family()),
    Op("isin.Tensor_Scalar", Ref("reduce", "isin"), int_inputs=True, exact=True),
    # all/any: a count of `x != 0` (exact for NaN/Inf, so not scanned) in one reduction launch
    *(Op(f"{name}.default", lambda x, name=name: R.logical(name, x), name, int_inputs=True, exact=True,
         make_plan=lambda name=name: R.family(name, positional=1)) for name in ("all", "any")),
    *(Op(f"{name}.dim", lambda x, dim, keepdim=False, name=name: R.logical(name, x, [dim], keepdim),
         int_inputs=True, exact=True, make_plan=lambda name=name: R.family(name)) for name in ("all", "any")),
    *(Op(f"{name}.dims", lambda x, dim=None, keepdim=False, name=name: R.logical(name, x, dim, keepdim),
         int_inputs=True, exact=True, make_plan=lambda name=name: R.family(name)) for name in ("all", "any")),
    # ---- (5) embedding (aten::embedding is index_select on rows)
    Op("index_select.default", Ref("gather", "index_select"), "nn.functional.embedding", int_inputs=True,
       exact=True, make_plan=lambda: GA.index_select_family()),
    Op("embedding_dense_backward.default", Ref("gather", "embedding_backward"), int_inputs=True,
       make_plan=lambda: GA.embedding_backward_family()),
    # ---- resampling and padding: gathers along each resized dim (values moved: exact)
    # (torch drops trailing default scales from a call: the implementations take what comes)
    *(Op(f"{prefix}{n}d.default", lambda x, size, *scales, exact=exact: RS.upsample_nearest(
        x, size, *scales, exact=exact), exact=True)
      for n in (1, 2, 3) for prefix, exact in _NEAREST_PREFIXES),
    *(Op(f"{prefix}{n}d_backward.default", lambda g, size, input_size, *scales, exact=exact:
         RS.upsample_nearest_backward(g, size, input_size, *scales, exact=exact), tol=LOOSE)
      for n in (1, 2, 3) for prefix, exact in _NEAREST_PREFIXES),
    *(Op(f"upsample_{mode}.default", lambda x, size, corners, *scales: RS.upsample_linear(x, size, corners,
                                                                                          *scales), tol=LOOSE)
      for mode in ("linear1d", "bilinear2d", "trilinear3d")),
    *(Op(f"upsample_{mode}_backward.default", lambda g, size, input_size, corners, *scales:
         RS.upsample_linear_backward(g, size, input_size, corners, *scales), tol=LOOSE)
      for mode in ("linear1d", "bilinear2d", "trilinear3d")),
    *(Op(f"{kind}_pad{n}d_backward.default", lambda g, x, padding, reflect=(kind == "reflection"):
         RS.pad_backward(g, x, padding, reflect=reflect), tol=LOOSE)
      for kind in ("reflection", "replication") for n in (1, 2, 3)),
    *(Op(f"{kind}_pad{n}d.default", lambda x, padding, reflect=(kind == "reflection"): RS.pad(x, padding,
                                                                                               reflect=reflect),
         exact=True) for kind in ("reflection", "replication") for n in (1, 2, 3)),
    # ---- indexing by a tensor and the scatters (index_put_ and index_put reach _index_put_impl_; the
    # embedding and slicing backward of compiled graphs)
    Op("index.Tensor", Ref("indexing", "index"), "__getitem__", int_inputs=True, exact=True),
    Op("nonzero.default", Ref("indexing", "nonzero"), "nonzero", int_inputs=True, exact=True),
    Op("masked_select.default", Ref("indexing", "masked_select"), "masked_select", int_inputs=True,
       exact=True),
    Op("_index_put_impl_.default", Ref("indexing", "index_put_"), "index_put", int_inputs=True),
    Op("slice_scatter.default", Ref("indexing", "slice_scatter"), "slice_scatter"),
    Op("select_scatter.default", Ref("indexing", "select_scatter"), "select_scatter"),
    Op("flip.default", Ref("indexing", "flip"), "flip", int_inputs=True, exact=True),
    Op("roll.default", Ref("indexing", "roll"), "roll", int_inputs=True, exact=True),
    Op("pixel_shuffle.default", Ref("indexing", "pixel_shuffle"), "nn.functional.pixel_shuffle",
       int_inputs=True, exact=True),
    Op("pixel_unshuffle.default", Ref("indexing", "pixel_unshuffle"), "nn.functional.pixel_unshuffle",
       int_inputs=True, exact=True),
    Op("diagonal_copy.default", Ref("indexing", "diagonal_copy"), "diagonal_copy", int_inputs=True,
       exact=True),
    # trace: the diagonal's sum (into int64 for integers, as torch's)
    Op("trace.default", lambda x: R.reduce("sum", IX.diagonal_copy(x)), "trace", int_inputs=True, tol=LOOSE),
    # ---- loss (cross_entropy = log_softmax + nll_loss)
    # mse_loss: composed of device launches (loss.py); the mean's summation order is the registry's
    Op("mse_loss.default", Ref("loss", "mse_loss"), "nn.functional.mse_loss", tol=LOOSE),
    Op("mse_loss_backward.default", Ref("loss", "mse_loss_backward"), tol=LOOSE),
    # smooth L1 and Huber losses: the binary kernel's piecewise loss and gradient, then the reduction
    Op("smooth_l1_loss.default", Ref("loss", "smooth_l1_loss"), "nn.functional.smooth_l1_loss", tol=LOOSE),
    Op("smooth_l1_loss_backward.default", Ref("loss", "smooth_l1_loss_backward"), tol=LOOSE),
    Op("huber_loss.default", Ref("loss", "huber_loss"), "nn.functional.huber_loss", tol=LOOSE),
    Op("huber_loss_backward.default", Ref("loss", "huber_loss_backward"), tol=LOOSE),
    Op("nll_loss_forward.default", Ref("loss", "nll_loss_forward"), "nn.functional.nll_loss",
       int_inputs=True, tol=LOOSE, make_plan=lambda: LS.forward_family()),
    Op("nll_loss_backward.default", Ref("loss", "nll_loss_backward"), int_inputs=True,
       make_plan=lambda: LS.backward_family()),
    # binary_cross_entropy on probabilities: torch's formula op by op (loss.py)
    Op("binary_cross_entropy.default", Ref("loss", "binary_cross_entropy"),
       "nn.functional.binary_cross_entropy", tol=LOOSE),
    Op("binary_cross_entropy_backward.default", Ref("loss", "binary_cross_entropy_backward"), tol=LOOSE),
    # nll_loss2d (cross_entropy of (N, C, H, W) logits): the pixels as rows of nll_loss's kernels
    Op("nll_loss2d_forward.default", Ref("loss", "nll_loss2d_forward"), int_inputs=True, tol=LOOSE),
    Op("nll_loss2d_backward.default", Ref("loss", "nll_loss2d_backward"), int_inputs=True, tol=LOOSE),
    # ---- shape building blocks models use
    Op("cat.default", Ref("gather", "cat"), "cat", int_inputs=True, exact=True,
       make_plan=lambda: GA.cat_family()),
    Op("arange.start_out", Ref("gather", "arange"), int_inputs=True, make_plan=lambda: GA.arange_family()),
    # ---- CNN family (registry/conv.py): convolution, batch norm, max pooling (+ backwards), gather
    Op("convolution.default", Ref("conv", "convolution"), "nn.functional.conv2d", tol=CONV),
    Op("convolution_backward.default", Ref("conv", "convolution_backward"), tol=CONV),
    Op("native_batch_norm.default", Ref("conv", "batch_norm"), "nn.functional.batch_norm", tol=LOOSE),
    Op("_native_batch_norm_legit.default", Ref("conv", "batch_norm"), tol=LOOSE),
    Op("_native_batch_norm_legit.no_stats", Ref("conv", "batch_norm_no_stats"), tol=LOOSE),
    Op("_native_batch_norm_legit_no_training.default", Ref("conv", "batch_norm_no_training"), tol=LOOSE),
    Op("native_batch_norm_backward.default", Ref("conv", "batch_norm_backward"), tol=LOOSE),
    Op("max_pool2d_with_indices.default", Ref("conv", "max_pool2d_with_indices"),
       "nn.functional.max_pool2d"),
    Op("max_pool2d_with_indices_backward.default", Ref("conv", "max_pool2d_with_indices_backward"),
       int_inputs=True),
    Op("avg_pool2d.default", Ref("conv", "avg_pool2d"), "nn.functional.avg_pool2d", tol=LOOSE),
    Op("avg_pool2d_backward.default", Ref("conv", "avg_pool2d_backward"), tol=LOOSE),
    Op("_adaptive_avg_pool2d.default", Ref("conv", "adaptive_avg_pool2d"),
       "nn.functional.adaptive_avg_pool2d", tol=LOOSE),
    Op("_adaptive_avg_pool2d_backward.default", Ref("conv", "adaptive_avg_pool2d_backward"), tol=LOOSE),
    Op("gather.default", Ref("conv", "gather"), "gather", int_inputs=True),
    Op("scatter_add.default", Ref("conv", "scatter_add"), "scatter_add", int_inputs=True, tol=LOOSE),
    Op("scatter_add_.default", lambda x, dim, index, src: _scatter_add_inplace(x, dim, index, src),
       int_inputs=True),
    Op("scatter.src", Ref("conv", "scatter"), "scatter", int_inputs=True),
    Op("scatter_.src", lambda x, dim, index, src: CV.scatter(x, dim, index, src, inplace=True),
       int_inputs=True),
    Op("scatter.value", Ref("conv", "scatter_value"), int_inputs=True),
    Op("scatter_.value", lambda x, dim, index, value: CV.scatter_value(x, dim, index, value, inplace=True),
       int_inputs=True),
    # ---- sorting, scanning, counting (registry/sorting.py; MoE routing: topk, sort, cumsum, histc)
    # sort/topk move values in torch's order, NaN the largest and -0 before +0 as equal values in index
    # order: exact, so scores masked with -inf (top-k/top-p sampling) stay on the device
    Op("sort.default", Ref("sorting", "sort"), "sort", int_inputs=True, exact=True),
    Op("sort.stable", Ref("sorting", "sort_stable"), int_inputs=True, exact=True),
    Op("topk.default", Ref("sorting", "topk"), "topk", int_inputs=True, exact=True),
    Op("cumsum.default", Ref("sorting", "cumsum"), "cumsum", int_inputs=True),
    Op("cumsum_.default", Ref("sorting", "cumsum_"), int_inputs=True),
    Op("histc.default", Ref("sorting", "histc"), "histc", int_inputs=True),
    # unique without dim: a stable sort, the flags of new values, their ranks and gaps (indexing.py)
    Op("_unique2.default", Ref("indexing", "unique"), "unique", int_inputs=True, exact=True),
    # bincount: index_put_'s accumulation of ones (or float32 weights) into max(x) + 1 bins (indexing.py)
    Op("bincount.default", Ref("indexing", "bincount"), "bincount", int_inputs=True),
    # ---- random ops (registry/random.py): dropout, rand/randn, seeded from the default generator
    Op("native_dropout.default", Ref("random", "native_dropout")),
    Op("native_dropout_backward.default", Ref("random", "native_dropout_backward"), int_inputs=True),
    # ---- float predicates: exact comparisons (IEEE NaN/Inf semantics), so their inputs are not scanned
    Op("isnan.default", lambda x: EW.binary("ne", _float(x), x, comparison=True), "isnan", exact=True,
       make_plan=lambda: EW.predicate_family("ne", None)),
    Op("isinf.default", lambda x: EW.binary("eq", EW.unary("abs", _float(x)), math.inf, comparison=True),
       "isinf", exact=True),
    Op("isposinf.default", lambda x: EW.binary("eq", _float(x), math.inf, comparison=True), "isposinf",
       exact=True, make_plan=lambda: EW.predicate_family("eq", math.inf)),
    Op("isneginf.default", lambda x: EW.binary("eq", _float(x), -math.inf, comparison=True), "isneginf",
       exact=True, make_plan=lambda: EW.predicate_family("eq", -math.inf)),
    # ---- triangles (causal masks): values moved, not computed on, so -inf masks stay on the device
    Op("tril.default", Ref("triangle", "tril"), "tril", int_inputs=True, exact=True),
    Op("triu.default", Ref("triangle", "triu"), "triu", int_inputs=True, exact=True),
    Op("tril_.default", Ref("triangle", "tril_"), int_inputs=True, exact=True),
    Op("triu_.default", Ref("triangle", "triu_"), int_inputs=True, exact=True),
    Op("multinomial.default", Ref("random", "multinomial")),
    Op("uniform_.default", Ref("random", "uniform_"), overwrites_first=True),
    Op("normal_.default", Ref("random", "normal_"), overwrites_first=True),
]



NAMES = frozenset(op.name for op in TABLE)
