"""Dropout on device (`native_dropout` and its backward): the mask's statistics, values computed as
torch's CPU kernel computes them from that mask, seeded runs that repeat, and the forms that decline."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _row(op: str) -> dict:
    return registry.fallback_report().get(op, {"device": 0, "cpu": 0, "reasons": {}})


@pytest.fixture(autouse=True)
def _fresh_report():
    registry.reset_fallback_report()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_drops_a_p_share_and_scales_the_rest_as_the_cpu_does(dtype, p):
    torch.manual_seed(0)
    x = torch.randn(64, 1000, dtype=dtype)
    out, mask = torch.ops.aten.native_dropout(x.to("rbln"), p, True)
    out, mask = out.cpu(), mask.cpu()
    assert mask.dtype == torch.bool and out.dtype == dtype
    n = mask.numel()
    dropped = n - int(mask.sum())
    # a binomial count: 6 standard deviations leave no room for a flaky test, and catch a p/1-p swap
    assert abs(dropped - p * n) < 6 * (n * p * (1 - p)) ** 0.5, (dropped, p * n)
    expected = x * mask.to(dtype) * (1.0 / (1.0 - p))  # the CPU kernel's arithmetic on our mask
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    assert _row("aten::native_dropout") == {"device": 1, "cpu": 0, "reasons": {}}


def test_dropout_masks_repeat_under_manual_seed_and_differ_between_calls():
    x = torch.ones(4096).to("rbln")
    torch.manual_seed(7)
    first = torch.ops.aten.native_dropout(x, 0.5, True)[1].cpu()
    second = torch.ops.aten.native_dropout(x, 0.5, True)[1].cpu()
    torch.rbln.manual_seed(7)
    again = torch.ops.aten.native_dropout(x, 0.5, True)[1].cpu()
    assert torch.equal(first, again)
    assert not torch.equal(first, second)


def test_dropout_edges_p_zero_p_one_and_eval():
    x = torch.tensor([-1.0, 2.0, -0.0, 3.5])
    out, mask = torch.ops.aten.native_dropout(x.to("rbln"), 1.0, True)
    torch.testing.assert_close(out.cpu(), torch.ops.aten.native_dropout(x, 1.0, True)[0], atol=0, rtol=0)
    assert torch.equal(torch.signbit(out.cpu()), torch.tensor([True, False, True, False]))  # -x * 0
    assert not mask.cpu().any()
    for p, train in ((0.0, True), (0.7, False)):
        out, mask = torch.ops.aten.native_dropout(x.to("rbln"), p, train)
        torch.testing.assert_close(out.cpu(), x, atol=0, rtol=0)
        assert mask.cpu().all()


def test_dropout_backward_and_a_training_step_run_on_device():
    torch.manual_seed(3)
    layer = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Dropout(0.25)).to("rbln")
    x = torch.randn(8, 32).to("rbln")
    out = layer(x)
    grad = torch.randn(8, 32)
    out.backward(grad.to("rbln"))
    # the gradient reaching the linear layer's output is grad * mask / (1 - p): zero where dropped
    kept = (out.detach().cpu() != 0)
    weight_grad = layer[0].weight.grad.cpu()
    pre = layer[0](x).detach().cpu()
    mask = out.detach().cpu() == pre * (1 / 0.75)
    expected = (grad * mask * (1 / 0.75)).t() @ x.cpu()
    torch.testing.assert_close(weight_grad, expected, atol=1e-4, rtol=1e-4)
    assert kept.any() and not kept.all()
    assert _row("aten::native_dropout")["device"] == 1
    assert _row("aten::native_dropout_backward") == {"device": 1, "cpu": 0, "reasons": {}}


def test_dropout_backward_matches_the_cpu_exactly():
    torch.manual_seed(4)
    grad = torch.randn(300, dtype=torch.float16)
    mask = torch.rand(300) > 0.3
    expected = torch.ops.aten.native_dropout_backward(grad, mask, 1 / 0.7)
    actual = torch.ops.aten.native_dropout_backward(grad.to("rbln"), mask.to("rbln"), 1 / 0.7)
    torch.testing.assert_close(actual.cpu(), expected, atol=0, rtol=0)


def test_dropout_declines_what_it_does_not_cover():
    empty = torch.ops.aten.native_dropout(torch.empty(0).to("rbln"), 0.5, True)
    assert empty[0].numel() == 0
    assert "empty" in next(iter(_row("aten::native_dropout")["reasons"]))
    with pytest.raises(RuntimeError, match="expects p to be in"):  # p > 1: torch's own error, from the CPU
        torch.ops.aten.native_dropout(torch.ones(3).to("rbln"), 1.5, True)
    assert "p outside" in next(iter(_row("aten::native_dropout")["reasons"].keys() - {"empty tensor"}))
