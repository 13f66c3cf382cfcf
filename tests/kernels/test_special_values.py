"""The elementwise kernels on every special value and pair of special values, against torch's CPU ops.

Outside deploy mode the registry sends NaN/Inf inputs of the ops it does not call exact to the CPU, so
the kernels' own answers there show only with `TORCH_RBLN_DEPLOY=ON`, in compiled graphs (a fused
kernel has no scan) and for the exact ops. This sweep launches each op's kernel as the registry decides
the launch (so it reuses the specialisations the rest of the suite compiles) on infinities, NaN, signed
zeros, a subnormal and ordinary values. It found pow's special cases (-inf or an infinite exponent with a
negative base, 1 ** NaN, 0 ** NaN, the sign of -0.0 to an odd power) and hypot(inf, NaN).

Where torch's own CPU kernels leave C's results, the kernel keeps C's (`TORCH_QUIRKS`).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch_rbln.kernels import elementwise as E
from torch_rbln.registry.elementwise import dense_binary_launch, unary_launch

import torch_rbln  # noqa: F401

aten = torch.ops.aten
INF, NAN = math.inf, math.nan
VALUES = [-INF, -100.0, -3.5, -1.0, -0.5, -0.0, 0.0, 1e-40, 0.5, 1.0, 3.5, 89.0, 100.0, INF, NAN]
PAIR_VALUES = [-INF, -3.5, -1.0, -0.0, 0.0, 1e-40, 0.5, 1.0, 2.0, 3.0, INF, NAN]

UNARY = {
    "neg": torch.neg, "exp": torch.exp, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "sigmoid": torch.sigmoid,
    "tanh": torch.tanh, "relu": torch.relu, "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "abs": torch.abs, "log": torch.log,
    "cube": lambda x: x ** 3, "reciprocal": torch.reciprocal,
    "reciprocal_square": lambda x: x ** -2, "cos": torch.cos, "sin": torch.sin, "floor": torch.floor,
    "ceil": torch.ceil, "trunc": torch.trunc, "sign": torch.sign, "erf": torch.erf, "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid, "log_sigmoid": F.logsigmoid, "softplus": F.softplus, "log1p": torch.log1p,
    "expm1": torch.expm1, "round": torch.round, "elu": F.elu, "mish": F.mish, "erfinv": torch.erfinv,
    "pow": lambda x: x ** 2.5,
}
UNARY_PARAMETER = {"softplus": 20.0, "elu": 1.0, "pow": 2.5}

BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "maximum": torch.maximum,
    "minimum": torch.minimum, "pow": torch.pow, "fmod": torch.fmod, "remainder": torch.remainder,
    "atan2": torch.atan2, "hypot": torch.hypot, "xlogy": torch.xlogy,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc_scalar": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "gelu_backward": aten.gelu_backward,
    "gelu_tanh_backward": lambda g, x: aten.gelu_backward(g, x, approximate="tanh"),
    "sigmoid_backward": aten.sigmoid_backward, "tanh_backward": aten.tanh_backward,
    "silu_backward": aten.silu_backward, "mish_backward": aten.mish_backward,
    "threshold_backward": lambda g, x: aten.threshold_backward(g, x, 0.0),
    "leaky_relu_backward": lambda g, x: aten.leaky_relu_backward(g, x, 0.01, False),
    "softplus_backward": lambda g, x: aten.softplus_backward(g, x, 1.0, 20.0),
    "elu_backward": lambda g, x: aten.elu_backward(g, 1.0, 1, 1, False, x),
}
BINARY_ALPHA = {"add": 1.0, "sub": 1.0, "threshold_backward": 0.0, "leaky_relu_backward": 0.01,
                "softplus_backward": 20.0, "elu_backward": 1.0}

# (op, operands) where torch's CPU kernel is not C's: gelu(+inf) is NaN in torch's vector code (the
# limit, +inf, here); a subnormal divisor gives NaN in torch's fmod/remainder (C's exact remainder
# here); elu_backward of a NaN input returns the gradient for a positive one (NaN here, for all)
TORCH_QUIRKS = {
    ("gelu", (INF,)),
    *(("fmod", (a, 1e-40)) for a in PAIR_VALUES), *(("remainder", (a, 1e-40)) for a in PAIR_VALUES),
    *(("elu_backward", (grad, NAN)) for grad in PAIR_VALUES if grad > 0),
}


def _agrees(actual: float, expected: float) -> bool:
    """The same NaN-ness, infinity and zero sign, and finite values within a few float32 ulps (the
    backward formulas' cancellations; subnormal results to within their spacing)."""
    if math.isnan(actual) or math.isnan(expected):
        return math.isnan(actual) and math.isnan(expected)
    if math.isinf(actual) or math.isinf(expected) or expected == 0.0:
        return actual == expected and math.copysign(1.0, actual) == math.copysign(1.0, expected)
    return abs(actual - expected) <= 2e-5 * abs(expected) + 1e-38


def _disagreements(op: str, operands: tuple, actual: torch.Tensor, expected: torch.Tensor) -> list:
    wrong = []
    for i, (value, reference) in enumerate(zip(actual.tolist(), expected.tolist(), strict=True)):
        point = tuple(float(operand[i]) for operand in operands)
        if not _agrees(value, reference) and (op, point) not in TORCH_QUIRKS:
            wrong.append((point, value, reference))
    return wrong


@pytest.mark.parametrize("op", list(UNARY))
def test_a_unary_kernel_gives_torchs_special_values(op):
    x = torch.tensor(VALUES).to("rbln")
    out = torch.empty_like(x)
    _, keywords, programs = unary_launch(op, (torch.float32, torch.float32), x.numel())
    E.unary_kernel[(programs,)](x, out, x.numel(), UNARY_PARAMETER.get(op, 0.0), **keywords)
    assert _disagreements(op, (VALUES,), out.cpu(), UNARY[op](torch.tensor(VALUES))) == []


@pytest.mark.parametrize("op", list(BINARY))
def test_a_binary_kernel_gives_torchs_special_values(op):
    pairs = list(itertools.product(PAIR_VALUES, PAIR_VALUES))
    a_values, b_values = [a for a, _ in pairs], [b for _, b in pairs]
    a, b = torch.tensor(a_values).to("rbln"), torch.tensor(b_values).to("rbln")
    out = torch.empty_like(a)
    dtypes = (torch.float32,) * 3
    _, keywords, programs, rows, ncols = dense_binary_launch(op, (a, b), dtypes, [a.numel()], a.numel())
    E.binary_dense_kernel[(programs, rows)](a, b, out, ncols, BINARY_ALPHA.get(op, 1.0), **keywords)
    expected = BINARY[op](torch.tensor(a_values), torch.tensor(b_values))
    assert _disagreements(op, (a_values, b_values), out.cpu(), expected) == []


@pytest.mark.parametrize("exponent", [2.5, -2.5, 3.0, -3.0, 2.0, 0.0])
def test_the_unary_pow_kernel_gives_cs_special_values(exponent):
    """pow by a number (the unary kernel, its parameter the exponent) on the bases C's pow special-cases:
    -inf to a non-integer power is +inf or +0 (|x| ** p), not NaN; -0.0 to an odd power keeps its sign
    (-0.0 ** -3 is -inf). Signs of zeros compared too."""
    x = torch.tensor([-INF, INF, -0.0, 0.0, -2.0, 1.0])
    out = torch.empty_like(x)
    _, keywords, programs = unary_launch("pow", (torch.float32, torch.float32), x.numel())
    E.unary_kernel[(programs,)](x, out, x.numel(), exponent, **keywords)
    expected = torch.pow(x, exponent)
    torch.testing.assert_close(out, expected, equal_nan=True, rtol=1e-6, atol=0)
    assert torch.equal(out.signbit() & ~out.isnan(), expected.signbit() & ~expected.isnan())
