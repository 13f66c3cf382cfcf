"""gelu (erf form) and its backward on rbln against torch on the CPU and against a float64 reference.

Both kernels call the numba backend's erf32 (a rational approximation, ~3e-7 absolute): these tests
check that its error stays far inside the registry's float32 tolerance over the whole range gelu sees,
including the saturated tails, the special values and the block tails of a multi-block tensor."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry

_F32_TOL = {"atol": 1e-5, "rtol": 1.3e-6}  # tests/registry/test_opinfo_table.py's float32 tolerance
_SPECIAL = [math.inf, -math.inf, math.nan, -0.0, 0.0, 1e-30, -1e-30, 1e-42, 3e38, -3e38]


def _inputs(special: bool = False) -> torch.Tensor:
    """200,001 points over [-12, 12] (48 blocks of 4096 and a partial one), then the special values.
    Default mode sends a tensor with NaN/Inf to the CPU fallback, so those run with TORCH_RBLN_DEPLOY=ON."""
    return torch.cat([torch.linspace(-12, 12, 200_001), torch.tensor(_SPECIAL if special else [])])


def _gelu64(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def _assert_on_device() -> None:
    report = registry.fallback_report()
    assert all(row["cpu"] == 0 for row in report.values()), registry.format_report(report)


def test_gelu_matches_cpu_and_float64_reference():
    x = _inputs()
    registry.reset_fallback_report()
    got = F.gelu(x.to("rbln")).cpu()
    _assert_on_device()
    torch.testing.assert_close(got, F.gelu(x), **_F32_TOL)
    # Against exact gelu, relative to |x| (erf32 error scaled by 0.5 |x|): measured 2.0e-7 (torch 2.5e-7).
    error = (got.double() - _gelu64(x)).abs()
    assert (error <= 3e-7 * x.double().abs()).all(), float((error / x.abs()).max())


def test_gelu_special_values_in_deploy_mode(monkeypatch):
    """+-inf, nan, signed zeros, subnormals and +-3e38 (x * 0.5 stays finite) as torch's formula gives
    them element by element. The special values are compared with torch one element at a time: its
    vectorised CPU kernel (AVX2/AVX512 builds) gives gelu(inf) = nan and gelu(3e38) = inf where its
    scalar tail gives inf and 3e38, so a whole-tensor result depends on where a value falls in a
    vector."""
    monkeypatch.setenv("TORCH_RBLN_DEPLOY", "ON")
    x = _inputs(special=True)
    registry.reset_fallback_report()
    got = F.gelu(x.to("rbln")).cpu()
    _assert_on_device()
    count = len(_SPECIAL)
    torch.testing.assert_close(got[:-count], F.gelu(x[:-count]), **_F32_TOL)
    each = torch.cat([F.gelu(torch.tensor([value])) for value in _SPECIAL])
    assert each[0] == math.inf and each[-2] == 3e38  # torch's formula, one element at a time
    torch.testing.assert_close(got[-count:], each, equal_nan=True, atol=0, rtol=0)


def test_gelu_saturates_exactly_in_the_tails():
    """Beyond |x| = 5.55 erf(x / sqrt 2) is +-1 in float32: gelu(x) is x, and 0 below."""
    x = torch.tensor([5.6, 8.0, 30.0, 1e6, -5.6, -8.0, -30.0, -1e6])
    got = F.gelu(x.to("rbln")).cpu()
    assert torch.equal(got[:4], x[:4])
    assert torch.equal(got[4:].abs(), torch.zeros(4))


def test_gelu_backward_matches_cpu(monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_DEPLOY", "ON")
    x = _inputs(special=True)
    grad = torch.randn(x.shape)
    registry.reset_fallback_report()
    got = torch.ops.aten.gelu_backward(grad.to("rbln"), x.to("rbln")).cpu()
    _assert_on_device()
    torch.testing.assert_close(got, torch.ops.aten.gelu_backward(grad, x), equal_nan=True, **_F32_TOL)
    # Against the exact derivative Phi(x) + x phi(x) (at most ~1.13): measured 2.0e-7 (torch 2.6e-7).
    finite = torch.isfinite(x)
    xd = x[finite].double()
    exact = 0.5 * (1 + torch.erf(xd / math.sqrt(2))) + xd * torch.exp(-0.5 * xd * xd) / math.sqrt(2 * math.pi)
    ones = torch.ones(int(finite.sum()))
    derivative = torch.ops.aten.gelu_backward(ones.to("rbln"), x[finite].to("rbln")).cpu().double()
    assert (derivative - exact).abs().max() <= 3e-7


def test_gelu_through_autograd_on_device():
    x = torch.linspace(-6, 6, 10_001, requires_grad=True)
    d = x.detach().to("rbln").requires_grad_()
    F.gelu(d).sum().backward()
    F.gelu(x).sum().backward()
    torch.testing.assert_close(d.grad.cpu(), x.grad, **_F32_TOL)
