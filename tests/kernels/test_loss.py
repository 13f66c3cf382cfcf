"""nll_loss forward/backward kernels (and so cross_entropy) against CPU, on device."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry

CASES = [  # (input shape, reduction, class weights?, ignore_index)
    ((5, 7), "mean", False, -100),
    ((5, 7), "sum", True, 2),
    ((5, 7), "none", True, 2),
    ((7,), "none", False, -100),
    ((7,), "mean", True, 3),
    ((3000, 11), "mean", True, 1),  # several row blocks
    ((3000, 11), "none", False, 1),
]


@pytest.mark.parametrize("shape,reduction,weighted,ignore_index", CASES, ids=str)
def test_nll_loss_forward_backward_match_cpu(shape, reduction, weighted, ignore_index):
    generator = torch.Generator().manual_seed(len(shape) * 100 + shape[0])
    x = torch.randn(*shape, generator=generator).log_softmax(-1).requires_grad_()
    target = torch.randint(0, shape[-1], shape[:-1], generator=generator)
    if target.dim():
        target[0] = ignore_index
    weight = torch.rand(shape[-1], generator=generator) if weighted else None
    expected = F.nll_loss(x, target, weight, ignore_index=ignore_index, reduction=reduction)
    grad = torch.randn(expected.shape, generator=generator)
    expected.backward(grad)

    device_x = x.detach().to("rbln").requires_grad_()
    registry.reset_fallback_report()
    actual = F.nll_loss(device_x, target.to("rbln"), weight.to("rbln") if weighted else None,
                        ignore_index=ignore_index, reduction=reduction)
    actual.backward(grad.to("rbln"))
    torch.testing.assert_close(actual.cpu(), expected.detach(), atol=1e-5, rtol=1e-5, equal_nan=True)
    torch.testing.assert_close(device_x.grad.cpu(), x.grad, atol=1e-6, rtol=1e-5, equal_nan=True)
    report = registry.fallback_report()
    for op in ("aten::nll_loss_forward", "aten::nll_loss_backward"):
        assert report[op] == {"device": 1, "cpu": 0, "reasons": {}}, registry.format_report(report)


def test_cross_entropy_in_half_precision():
    logits = torch.randn(64, 50).half()
    target = torch.randint(0, 50, (64,))
    registry.reset_fallback_report()
    actual = F.cross_entropy(logits.to("rbln"), target.to("rbln"))
    torch.testing.assert_close(actual.cpu(), F.cross_entropy(logits, target), atol=2e-2, rtol=2e-2)
    assert registry.fallback_report()["aten::nll_loss_forward"]["device"] == 1


def test_out_of_range_target_raises_torch_error_from_cpu():
    x = torch.randn(3, 4).log_softmax(-1).to("rbln")
    registry.reset_fallback_report()
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        F.nll_loss(x, torch.tensor([0, 1, 7]).to("rbln"))
    assert registry.fallback_report()["aten::nll_loss_forward"]["reasons"] == {"target out of bounds": 1}
