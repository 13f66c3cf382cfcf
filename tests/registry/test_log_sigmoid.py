"""log_sigmoid's forward (the result and torch's exp(-|x|) buffer) and backward on device kernels, and
`binary_cross_entropy_with_logits`, which calls them, against the CPU in three dtypes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry

TOLERANCE = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def _cpu_calls() -> dict:
    return {op: row["reasons"] for op, row in registry.fallback_report().items() if row["cpu"]}


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
def test_log_sigmoid_and_its_buffer_and_gradient_match_the_cpu(dtype):
    generator = torch.Generator().manual_seed(9)
    # both tails (log1p of a tiny exp(-|x|) must not round to 0), zeros of both signs
    tails = torch.tensor([-100.0, -30.0, -0.0, 0.0, 30.0, 100.0])
    x = torch.cat([tails, torch.randn(50, generator=generator) * 5]).to(dtype)
    tolerance = TOLERANCE[dtype]
    registry.reset_fallback_report()
    expected, expected_buffer = torch.ops.aten.log_sigmoid_forward(x)
    got, buffer = torch.ops.aten.log_sigmoid_forward(x.to("rbln"))
    subnormal = torch.finfo(dtype).tiny  # exp(-100) is subnormal in float32: an ulp there is relative
    torch.testing.assert_close(got.cpu(), expected, rtol=tolerance, atol=subnormal)
    torch.testing.assert_close(buffer.cpu(), expected_buffer, rtol=tolerance, atol=subnormal)
    assert got.cpu()[4].item() == expected[4].item() and got.cpu()[-1].item() < 0  # log1p's tail kept
    grad = torch.randn(x.shape, generator=generator).to(dtype)
    leaf, device_leaf = x.clone().requires_grad_(), x.to("rbln").requires_grad_()
    F.logsigmoid(leaf).backward(grad)
    F.logsigmoid(device_leaf).backward(grad.to("rbln"))
    torch.testing.assert_close(device_leaf.grad.cpu(), leaf.grad, rtol=tolerance, atol=tolerance)
    assert not _cpu_calls()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_binary_cross_entropy_with_logits_runs_on_device(dtype):
    generator = torch.Generator().manual_seed(10)
    logits = torch.randn(8, 5, generator=generator).to(dtype)
    target = torch.rand(8, 5, generator=generator).to(dtype)
    weight = torch.rand(5, generator=generator).to(dtype)
    tolerance = TOLERANCE[dtype] * 10
    registry.reset_fallback_report()
    leaf, device_leaf = logits.clone().requires_grad_(), logits.to("rbln").requires_grad_()
    expected = F.binary_cross_entropy_with_logits(leaf, target, pos_weight=weight)
    got = F.binary_cross_entropy_with_logits(device_leaf, target.to("rbln"), pos_weight=weight.to("rbln"))
    torch.testing.assert_close(got.cpu(), expected, rtol=tolerance, atol=tolerance)
    expected.backward()
    got.backward()
    torch.testing.assert_close(device_leaf.grad.cpu(), leaf.grad, rtol=tolerance, atol=tolerance)
    assert not _cpu_calls()
