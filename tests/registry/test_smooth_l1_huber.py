"""`F.smooth_l1_loss` and `F.huber_loss` with their gradients on device kernels (the binary kernel's
piecewise loss and gradient, then the registry's reduction), against the CPU for every reduction, betas
and deltas on both sides of the data's differences, broadcast targets, half precision; NaN inputs go to
the CPU (scanned) and so does an invalid beta (torch's error)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry

LOSSES = [(F.smooth_l1_loss, "beta", "aten::smooth_l1_loss"), (F.huber_loss, "delta", "aten::huber_loss")]


@pytest.mark.parametrize(("loss", "keyword", "name"), LOSSES, ids=["smooth_l1", "huber"])
@pytest.mark.parametrize("parameter", [1.0, 0.3, 2.5])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_loss_and_gradient_match_the_cpu_on_device(loss, keyword, name, parameter, reduction):
    registry.reset_fallback_report()
    generator = torch.Generator().manual_seed(9)
    x, target = torch.randn(30, 20, generator=generator) * 2, torch.randn(30, 20, generator=generator)
    device, cpu = x.to("rbln").requires_grad_(), x.clone().requires_grad_()
    got = loss(device, target.to("rbln"), reduction=reduction, **{keyword: parameter})
    expected = loss(cpu, target, reduction=reduction, **{keyword: parameter})
    torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    weights = torch.randn(expected.shape, generator=generator)
    (got * weights.to("rbln")).sum().backward()
    (expected * weights).sum().backward()
    torch.testing.assert_close(device.grad.cpu(), cpu.grad, rtol=1e-5, atol=1e-6)
    report = registry.fallback_report()
    assert report[name]["cpu"] == 0 and report[f"{name}_backward"] == {"device": 1, "cpu": 0, "reasons": {}}


@pytest.mark.parametrize(("loss", "keyword", "name"), LOSSES, ids=["smooth_l1", "huber"])
def test_half_precision_and_broadcast_targets(loss, keyword, name):
    registry.reset_fallback_report()
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(2)).half()
    target = torch.randn(8).half()
    with pytest.warns(UserWarning):  # torch's broadcasting warning, on both devices
        got = loss(x.to("rbln"), target.to("rbln"), reduction="none", **{keyword: 0.5}).cpu()
    expected = loss(x, target.expand(6, 8), reduction="none", **{keyword: 0.5})
    torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3)
    assert registry.fallback_report()[name]["cpu"] == 0


def test_nan_inputs_and_invalid_parameters_go_to_the_cpu_visibly():
    registry.reset_fallback_report()
    x, target = torch.tensor([1.0, math.nan, 3.0]), torch.zeros(3)
    torch.testing.assert_close(F.huber_loss(x.to("rbln"), target.to("rbln")).cpu(), F.huber_loss(x, target),
                               equal_nan=True)
    with pytest.raises(RuntimeError):
        F.huber_loss(x.to("rbln"), target.to("rbln"), delta=-1.0)
    row = registry.fallback_report()["aten::huber_loss"]
    assert row["device"] == 0 and row["cpu"] == 2, row
