"""leaky_relu (forward, in place, backward; registered exact) and mse_loss (forward and backward, each
reduction; composed of device launches in loss.py) against the CPU in three dtypes, on device kernels."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry

FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def _cpu_calls() -> dict:
    return {op: row["reasons"] for op, row in registry.fallback_report().items() if row["cpu"]}


def _same_specials(got: torch.Tensor, expected: torch.Tensor) -> None:
    got = got.cpu()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
    kept = ~torch.isnan(expected)
    assert torch.equal(torch.signbit(got[kept]), torch.signbit(expected[kept]))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_leaky_relu_gives_the_cpus_bits_special_values_included(dtype):
    info = torch.finfo(dtype)
    specials = [math.nan, math.inf, -math.inf, 0.0, -0.0, info.tiny / 4, -info.tiny / 4, -info.max, info.max]
    values = torch.randn(40, generator=torch.Generator().manual_seed(2))
    x = torch.cat([torch.tensor(specials), values]).to(dtype)
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(3)).to(dtype)
    registry.reset_fallback_report()
    for slope in (0.01, 0.2, -0.5, 3.0):
        _same_specials(F.leaky_relu(x.to("rbln"), slope), F.leaky_relu(x, slope))
    expected = x.clone()
    got = x.to("rbln")
    F.leaky_relu(expected, 0.3, inplace=True)
    F.leaky_relu(got, 0.3, inplace=True)
    _same_specials(got, expected)
    leaf, device_leaf = x.clone().requires_grad_(), x.to("rbln").requires_grad_()
    F.leaky_relu(leaf, 0.1).backward(grad)
    F.leaky_relu(device_leaf, 0.1).backward(grad.to("rbln"))
    _same_specials(device_leaf.grad, leaf.grad)
    assert not _cpu_calls()


TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_and_its_gradient_match_the_cpu_on_device(reduction, dtype):
    generator = torch.Generator().manual_seed(4)
    x, target = (torch.randn(6, 7, generator=generator).to(dtype) for _ in range(2))
    leaf, device_leaf = x.clone().requires_grad_(), x.to("rbln").requires_grad_()
    registry.reset_fallback_report()
    expected = F.mse_loss(leaf, target, reduction=reduction)
    got = F.mse_loss(device_leaf, target.to("rbln"), reduction=reduction)
    tolerance = TOLERANCE[dtype]
    torch.testing.assert_close(got.cpu(), expected, rtol=tolerance, atol=tolerance)
    grad = torch.randn(expected.shape, generator=generator).to(dtype)
    expected.backward(grad)
    got.backward(grad.to("rbln"))
    if dtype is torch.float32:  # torch's norm * (x - target) * grad, in its order: the same bits
        assert torch.equal(device_leaf.grad.cpu(), leaf.grad)
    torch.testing.assert_close(device_leaf.grad.cpu(), leaf.grad, rtol=tolerance, atol=tolerance)
    assert not _cpu_calls()


def test_an_mse_loss_of_two_dtypes_runs_on_the_cpu_visibly():
    x, target = torch.randn(4, 3), torch.randn(4, 3).half()
    registry.reset_fallback_report()
    got = F.mse_loss(x.to("rbln"), target.to("rbln"))
    torch.testing.assert_close(got.cpu(), F.mse_loss(x, target))
    assert "target of another dtype" in _cpu_calls().get("aten::mse_loss", {})
