"""floor, ceil, trunc and sign (registered exact: special values stay on the device with the CPU's bits),
erf, hardswish and hardsigmoid (within float tolerances) on the unary kernel, against the CPU."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
EXACT = {"floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "sign": torch.sign}
CLOSE = {"erf": torch.erf, "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid}


def _values(dtype: torch.dtype) -> torch.Tensor:
    info = torch.finfo(dtype)
    specials = [math.nan, math.inf, -math.inf, 0.0, -0.0, info.tiny / 4, -info.tiny / 4, -info.max, info.max,
                2.5, -2.5, 0.5, -0.5, 3.0, -3.0]
    return torch.cat([torch.tensor(specials), torch.randn(60, generator=torch.Generator().manual_seed(8)) * 4]
                     ).to(dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_rounding_and_sign_give_the_cpus_bits_on_device(dtype):
    x = _values(dtype)
    registry.reset_fallback_report()
    for function in EXACT.values():
        expected, got = function(x), function(x.to("rbln")).cpu()
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
        kept = ~torch.isnan(expected)
        assert torch.equal(got[kept].signbit(), expected[kept].signbit())
    assert not any(row["cpu"] for row in registry.fallback_report().values())  # NaN/Inf not scanned


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_erf_and_the_hard_activations_match_the_cpu(dtype):
    x = _values(dtype)
    finite = x[torch.isfinite(x)]
    tolerance = {torch.float32: 2e-7, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
    registry.reset_fallback_report()
    for function in CLOSE.values():
        torch.testing.assert_close(function(finite.to("rbln")).cpu(), function(finite), rtol=tolerance,
                                   atol=tolerance)
        # a NaN/Inf input takes the CPU fallback (these are scanned), with the CPU's result
        torch.testing.assert_close(function(x.to("rbln")).cpu(), function(x), rtol=tolerance, atol=tolerance,
                                   equal_nan=True)
    rows = registry.fallback_report()
    assert sum(row["device"] for row in rows.values()) >= len(CLOSE)
    assert all(set(row["reasons"]) <= {"nan_inf"} for row in rows.values())


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_softplus_and_its_gradient_match_the_cpu_and_another_beta_declines(dtype):
    generator = torch.Generator().manual_seed(12)
    x = torch.cat([torch.tensor([-100.0, -30.0, -0.0, 0.0, 19.9, 20.0, 20.1, 1e-8]),
                   torch.randn(60, generator=generator) * 8]).to(dtype)
    tolerance = {torch.float32: 2e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
    subnormal = torch.finfo(dtype).tiny  # softplus(-100) is exp(-100): subnormal in float32
    registry.reset_fallback_report()
    for threshold in (20.0, 5.0):
        torch.testing.assert_close(F.softplus(x.to("rbln"), threshold=threshold).cpu(),
                                   F.softplus(x, threshold=threshold), rtol=tolerance, atol=subnormal)
    grad = torch.randn(x.shape, generator=generator).to(dtype)
    leaf, device_leaf = x.clone().requires_grad_(), x.to("rbln").requires_grad_()
    F.softplus(leaf).backward(grad)
    F.softplus(device_leaf).backward(grad.to("rbln"))
    torch.testing.assert_close(device_leaf.grad.cpu(), leaf.grad, rtol=tolerance, atol=subnormal)
    assert not any(row["cpu"] for row in registry.fallback_report().values())
    torch.testing.assert_close(F.softplus(x.to("rbln"), beta=2.0).cpu(), F.softplus(x, beta=2.0))
    assert registry.fallback_report()["aten::softplus"]["reasons"] == {"softplus beta=2.0": 1}
