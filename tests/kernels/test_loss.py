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


def test_the_fast_paths_one_call_check_of_targets_and_inputs():
    """`kernels.loss.inputs_plain` (the nll_loss fast paths' per-call check): targets in [0, classes)
    or ignore_index, and no NaN/Inf among the counted floats of each input (32- and 16-bit words);
    a count of 0 scans nothing (an absent weight, deploy mode)."""
    from torch_rbln.registry._ops import _k

    loss = _k("loss")
    check = loss.inputs_plain_entry(2)
    x = torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, -3.0]])
    weight = torch.tensor([1.0, float("nan"), 2.0])
    f32 = 0x7F800000

    def plain(targets, counts, tensors=(x, weight), mask=f32, wide=1, ignore=-100):
        t = torch.tensor(targets)
        return check(t.data_ptr(), t.numel(), 3, ignore, tuple(v.data_ptr() for v in tensors), counts, mask,
                     wide)

    assert plain([0, 2], (6, 0))
    assert not plain([0, 3], (6, 0))  # a class past the end
    assert not plain([-1, 2], (6, 0))  # a negative class
    assert plain([-100, 2], (6, 0))  # ignore_index
    assert plain([5, 2], (6, 0), ignore=5)
    assert not plain([0, 2], (6, 3))  # the NaN weight, now counted
    assert not plain([0, 3], (0, 0))  # deploy mode: nothing scanned, targets still checked
    half = x.to(torch.float16)
    half[1, 2] = float("inf")
    assert plain([0, 1], (5, 0), (half, half), 0x7C00, 0)  # the Inf is past the counted elements
    assert not plain([0, 1], (6, 0), (half, half), 0x7C00, 0)
    bf16 = x.to(torch.bfloat16)
    assert plain([0, 1], (6, 6), (bf16, bf16), 0x7F80, 0)
    bf16[0, 0] = float("nan")
    assert not plain([0, 1], (0, 6), (bf16, bf16), 0x7F80, 0)
