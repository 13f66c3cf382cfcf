"""`F.elu` on device kernels (the unary kernel with alpha, `elu_backward` on the binary kernel, from the
input or, after an in-place `elu_`, from the result): special values as the CPU's (registered exact),
finite values within float32 rounding, every form; selu's and celu's scales decline visibly."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry

SPECIAL = [-3.0, -0.5, -0.0, 0.0, 0.5, 3.0, -1e-6, -20.0, math.inf, -math.inf, math.nan, -1e-40, 1e-40]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("alpha", [1.0, 0.3])
def test_forward_matches_the_cpu_with_special_values_on_device(alpha, dtype):
    registry.reset_fallback_report()
    x = torch.tensor(SPECIAL).to(dtype)
    got, expected = F.elu(x.to("rbln"), alpha).cpu(), F.elu(x, alpha)
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(torch.signbit(got[~got.isnan()]), torch.signbit(expected[~expected.isnan()]))
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7, equal_nan=True)
    assert registry.fallback_report()["aten::elu"] == {"device": 1, "cpu": 0, "reasons": {}}


def test_every_form_and_both_backwards_match_the_cpu():
    registry.reset_fallback_report()
    x = torch.randn(50, 40, generator=torch.Generator().manual_seed(6)) * 3
    weights = torch.randn(50, 40)
    device = x.to("rbln")
    out = torch.empty_like(device)
    torch.ops.aten.elu.out(device, 0.7, out=out)
    torch.testing.assert_close(out.cpu(), F.elu(x, 0.7), rtol=1e-6, atol=1e-7)
    leaf, cpu_leaf = device.clone().requires_grad_(), x.clone().requires_grad_()
    (F.elu(leaf, 0.7) * weights.to("rbln")).sum().backward()  # from the input
    (F.elu(cpu_leaf, 0.7) * weights).sum().backward()
    torch.testing.assert_close(leaf.grad.cpu(), cpu_leaf.grad, rtol=1e-6, atol=1e-7)
    leaf, cpu_leaf = device.clone().requires_grad_(), x.clone().requires_grad_()
    (F.elu(leaf * 1.0, 0.7, inplace=True) * weights.to("rbln")).sum().backward()  # from elu_'s result
    (F.elu(cpu_leaf * 1.0, 0.7, inplace=True) * weights).sum().backward()
    # grad * (y + alpha) cancels where y nears -alpha: y's last-bit difference from the CPU's grows there
    torch.testing.assert_close(leaf.grad.cpu(), cpu_leaf.grad, rtol=1e-5, atol=1e-6)
    report = registry.fallback_report()
    assert all(report[name]["cpu"] == 0 for name in ("aten::elu", "aten::elu_", "aten::elu_backward")), report
    assert report["aten::elu_backward"]["device"] == 2


def test_selu_and_celu_scales_decline_visibly():
    registry.reset_fallback_report()
    x = torch.randn(8)
    torch.testing.assert_close(F.selu(x.to("rbln")).cpu(), F.selu(x))
    reasons = registry.fallback_report()["aten::elu"]["reasons"]
    assert reasons == {"elu with scale or input_scale other than 1 (selu, celu): 1"} or \
        list(reasons) == ["elu with scale or input_scale other than 1 (selu, celu)"]
