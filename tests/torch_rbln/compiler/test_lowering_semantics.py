"""Every pointwise rule of the compiler (`lowering.POINTWISE`) against PyTorch on special values.

Fused kernels compute each op from the expression `lowering` writes for it, eager kernels from the op
library's definitions: two texts of one op. This differential test keeps the fused ones torch's on
infinities, NaN, signed zeros, subnormals and bounds in the wrong order, for every overload the compiler
fuses (it fails when a rule is added without a case here). It found four miscompiles: `x ** 0` gave NaN
for an infinite or NaN x (torch: 1), `clamp(x, 5, 3)` gave 5 below 5 (torch: the max bound
everywhere), `add(x, 1.5, alpha=2)` of a number ignored alpha (the Scalar overloads pass it
positionally), and `x.half().float()` inside a fused chain did not round to float16. Non-integer
powers are not fused; the eager kernel's `pow(-inf, 2.5)` gave NaN (C's pow: +inf).
"""

from __future__ import annotations

import math

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln.compiler import lowering

aten = torch.ops.aten
INF, NAN = math.inf, math.nan
X = torch.tensor([-INF, -3.5, -1.0, -0.5, -0.0, 0.0, 1e-40, 0.5, 1.0, 2.0, 3.5, 100.0, INF, NAN, 7.25, -2.0])
Y = torch.tensor([2.0, -0.0, 0.0, INF, -1.0, 3.0, NAN, -INF, 0.5, 2.0, -3.5, 1e-40, INF, 1.0, -7.25, 0.0])

EXPONENTS = (0, 0.0, 1, 2, 3, -1, -2, 0.5, -0.5, 2.5, -2.5)  # the special-cased ones, and the general pow


def _of_x(fn):
    """A case of a one-operand op: `fn` of x (y unused)."""
    return lambda x, y: fn(x)


# overload -> (function of x and y, exact): exact ops must give torch's bits (NaN where torch's are NaN,
# signed zeros); the others torch's values within float32 rounding of transcendental functions
CASES = {
    aten.add.Tensor: (lambda x, y: x + y, True),
    aten.add.Scalar: (lambda x, y: aten.add.Scalar(x, 1.5, alpha=2), True),
    aten.sub.Tensor: (lambda x, y: aten.sub.Tensor(x, y, alpha=0.5), True),
    aten.sub.Scalar: (lambda x, y: aten.sub.Scalar(x, -2.0), True),
    aten.rsub.Scalar: (lambda x, y: aten.rsub.Scalar(x, 1.0, alpha=3), True),
    aten.rsub.Tensor: (lambda x, y: aten.rsub.Tensor(x, y), True),
    aten.mul.Tensor: (lambda x, y: x * y, True),
    aten.mul.Scalar: (lambda x, y: aten.mul.Scalar(x, -0.5), True),
    aten.div.Tensor: (lambda x, y: x / y, True),
    aten.div.Scalar: (lambda x, y: aten.div.Scalar(x, 3.0), True),
    aten.div.Tensor_mode: (lambda x, y: aten.div.Tensor_mode(x, y, rounding_mode=None), True),
    aten.neg.default: (_of_x(torch.neg), True),
    aten.exp.default: (_of_x(torch.exp), False),
    aten.log.default: (_of_x(torch.log), False),
    aten.sqrt.default: (_of_x(torch.sqrt), True),
    aten.rsqrt.default: (_of_x(torch.rsqrt), False),
    aten.sigmoid.default: (_of_x(torch.sigmoid), False),
    aten.tanh.default: (_of_x(torch.tanh), False),
    aten.erf.default: (_of_x(torch.erf), False),
    aten.sin.default: (_of_x(torch.sin), False),
    aten.cos.default: (_of_x(torch.cos), False),
    aten.abs.default: (_of_x(torch.abs), True),
    aten.reciprocal.default: (_of_x(torch.reciprocal), True),
    aten.relu.default: (_of_x(torch.relu), True),
    aten.silu.default: (_of_x(torch.nn.functional.silu), False),
    # (finite: torch's CPU gelu gives NaN at +inf, ours the limit, +inf)
    aten.gelu.default: (lambda x, y: torch.nn.functional.gelu(x.clamp(-1e30, 1e30)) +
                        torch.nn.functional.gelu(y.clamp(-1e30, 1e30), approximate="tanh"), False),
    aten.pow.Tensor_Scalar: (lambda x, y: torch.stack([x ** e for e in EXPONENTS]), False),
    aten.where.self: (lambda x, y: torch.where(x > y, x, y), True),
    aten.maximum.default: (torch.maximum, True),
    aten.minimum.default: (torch.minimum, True),
    aten.clamp.default: (lambda x, y: torch.stack([x.clamp(-1.0, 2.0), x.clamp(5.0, 3.0), x.clamp(min=0.5),
                                                   x.clamp(max=-0.5)]), True),
    aten.clone.default: (lambda x, y: x.clone(), True),
    aten._to_copy.default: (lambda x, y: torch.stack([x.half().float(), x.bfloat16().float()]), True),
    aten.logical_not.default: (lambda x, y: torch.logical_not(x), True),
    aten.gt.Tensor: (lambda x, y: x > y, True),
    aten.gt.Scalar: (lambda x, y: x > 0.5, True),
    aten.ge.Tensor: (lambda x, y: x >= y, True),
    aten.ge.Scalar: (lambda x, y: x >= -0.0, True),
    aten.lt.Tensor: (lambda x, y: x < y, True),
    aten.lt.Scalar: (lambda x, y: x < 2.0, True),
    aten.le.Tensor: (lambda x, y: x <= y, True),
    aten.le.Scalar: (lambda x, y: x <= INF, True),
    aten.eq.Tensor: (lambda x, y: x == y, True),
    aten.eq.Scalar: (lambda x, y: x == 0.0, True),
    aten.ne.Tensor: (lambda x, y: x != y, True),
    aten.ne.Scalar: (lambda x, y: x != NAN, True),
}

def test_every_pointwise_rule_has_a_case():
    assert set(CASES) == set(lowering.POINTWISE)


def _same_bits(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    if actual.dtype == torch.bool:
        return torch.equal(actual, expected)
    same_nan = torch.equal(actual.isnan(), expected.isnan())
    values = torch.equal(actual.nan_to_num(0.0), expected.nan_to_num(0.0))
    signs = torch.equal(actual.signbit() | actual.isnan(), expected.signbit() | expected.isnan())
    return same_nan and values and signs


@pytest.mark.parametrize("overload", list(CASES), ids=str)
def test_a_fused_op_computes_what_torch_computes(overload):
    fn, exact = CASES[overload]

    def graph(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # the op between two other fused ops, so that it is computed inside a fused kernel
        return fn(x * 1.0, y * 1.0) * 1

    expected = fn(X, Y) * 1
    actual = torch.compile(graph, backend="rbln")(X.to("rbln"), Y.to("rbln")).cpu()
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if exact:
        assert _same_bits(actual, expected), (actual, expected)
    else:
        torch.testing.assert_close(actual, expected, rtol=2e-6, atol=1e-6, equal_nan=True)
        assert torch.equal(actual.isinf(), expected.isinf())


# the reductions the compiler fuses (`lowering.REDUCTIONS`), over rows holding infinities, NaN and zeros
M = torch.stack([X, Y, X.flip(0), torch.where(X.isnan(), 0.0, X), Y.nan_to_num(0.0, 1e30, -1e30), -X])
REDUCTION_CASES = {
    aten.sum.dim_IntList: lambda m: m.sum(dim=1),
    aten.sum.default: lambda m: m.nan_to_num(0.0, 1e30, -1e30).sum(),
    aten.mean.dim: lambda m: m.mean(dim=0, keepdim=True),
    aten.mean.default: lambda m: m.nan_to_num(0.0, 1e30, -1e30).mean(),
    aten.amax.default: lambda m: m.amax(dim=1),
    aten.amin.default: lambda m: m.amin(dim=-1),
}


def test_every_reduction_rule_has_a_case():
    assert set(REDUCTION_CASES) == set(lowering.REDUCTIONS)


@pytest.mark.parametrize("overload", list(REDUCTION_CASES), ids=str)
def test_a_fused_reduction_computes_what_torch_computes(overload):
    fn = REDUCTION_CASES[overload]

    def graph(m: torch.Tensor) -> torch.Tensor:
        return fn(m * 1.0) * 1

    expected = fn(M) * 1
    actual = torch.compile(graph, backend="rbln")(M.to("rbln")).cpu()
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert torch.equal(actual.isinf() & (actual > 0), expected.isinf() & (expected > 0))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_fused_chain_of_half_tensors_rounds_as_torch(dtype):
    """Half inputs are computed in float32 and rounded once at the store, as torch's CPU kernels do for
    one op: a chain of ops rounds each op's result in eager torch, so the reference here is a chain of
    float32 ops rounded once (what inductor computes too) within one half ulp."""
    x, y = X.to(dtype), Y.to(dtype)

    def graph(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.where(x > y, torch.sigmoid(x) * y, x.clamp(-1.0, 2.0) - y)

    expected = graph(x.float(), y.float()).to(dtype)
    actual = torch.compile(graph, backend="rbln")(x.to("rbln"), y.to("rbln")).cpu()
    assert actual.dtype == dtype
    torch.testing.assert_close(actual.float(), expected.float(), rtol=0, atol=0, equal_nan=True)
