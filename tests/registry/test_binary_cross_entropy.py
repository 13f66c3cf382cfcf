"""`F.binary_cross_entropy` on probabilities (`registry/loss.py`): torch's CPU formula op by op on the
device, its backward too. Losses and gradients are compared with the CPU's for every reduction, with and
without a weight, probabilities of exactly 0 and 1 included (the log clamped at -100, the gradient's
denominator at 1e-12); values outside [0, 1] still raise torch's error."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torch_rbln import registry

from .checks import cpu_calls, loss_and_gradient


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_loss_and_gradient_match_the_cpu(reduction, weighted):
    generator = torch.Generator().manual_seed(0)
    probabilities = torch.rand(6, 9, generator=generator)
    probabilities[0, 0], probabilities[0, 1] = 0.0, 1.0  # the clamps
    target = torch.rand(6, 9, generator=generator)
    target[1] = (target[1] > 0.5).float()
    weight = torch.rand(9, generator=generator) if weighted else None
    loss_and_gradient(F.binary_cross_entropy, probabilities, target, weight, reduction, generator, 1e-5)


def test_a_sigmoid_head_trains_on_the_device():
    generator = torch.Generator().manual_seed(1)
    layer = torch.nn.Linear(8, 3)
    inputs = torch.randn(16, 8, generator=generator)
    labels = (torch.rand(16, 3, generator=generator) > 0.5).float()
    reference = torch.nn.Linear(8, 3)
    reference.load_state_dict(layer.state_dict())
    layer.to("rbln")
    registry.reset_fallback_report()
    F.binary_cross_entropy(torch.sigmoid(layer(inputs.to("rbln"))), labels.to("rbln")).backward()
    F.binary_cross_entropy(torch.sigmoid(reference(inputs)), labels).backward()
    torch.testing.assert_close(layer.weight.grad.cpu(), reference.weight.grad, atol=1e-6, rtol=1e-5)
    assert not cpu_calls(), cpu_calls()


def test_values_outside_zero_one_raise_torchs_error():
    x = torch.full((4,), 0.5).to("rbln")
    with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
        F.binary_cross_entropy(x * 3, x)
    with pytest.raises(RuntimeError, match="all elements of target should be between 0 and 1"):
        F.binary_cross_entropy(x, x - 1)
