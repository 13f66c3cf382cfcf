"""`F.mish` and its gradient on device kernels (the unary kernel's x * tanh(log1p(exp(x))) and the binary
kernel's mish_backward, torch's CPU formulas), against the CPU over the activation's range, tails
included, in float32 and half precision."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry

TOLERANCE = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}


@pytest.mark.parametrize("dtype", list(TOLERANCE))
def test_forward_matches_the_cpu_on_device(dtype):
    registry.reset_fallback_report()
    x = torch.tensor([-30.0, -3.0, -0.5, -0.0, 0.0, 0.5, 3.0, 20.0, 100.0, -1e-6, 1e-6]).to(dtype)
    torch.testing.assert_close(F.mish(x.to("rbln")).cpu(), F.mish(x), rtol=TOLERANCE[dtype], atol=1e-7)
    assert registry.fallback_report()["aten::mish"] == {"device": 1, "cpu": 0, "reasons": {}}


def test_gradient_matches_the_cpu_on_device():
    registry.reset_fallback_report()
    x = torch.randn(50, 40, generator=torch.Generator().manual_seed(8)) * 4
    weights = torch.randn(50, 40)
    device, cpu = x.to("rbln").requires_grad_(), x.clone().requires_grad_()
    (F.mish(device) * weights.to("rbln")).sum().backward()
    (F.mish(cpu) * weights).sum().backward()
    torch.testing.assert_close(device.grad.cpu(), cpu.grad, rtol=1e-5, atol=1e-5)
    assert registry.fallback_report()["aten::mish_backward"] == {"device": 1, "cpu": 0, "reasons": {}}
