"""cross_entropy of (N, C, H, W) logits (segmentation): `nll_loss2d_forward` / `_backward` run as
`nll_loss`'s kernels over the pixels as rows (`registry/loss.py`). Losses and gradients are compared with
the CPU's for every reduction, with and without class weights and ignored pixels; torch's errors for
mismatched targets and out-of-range classes still come from the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from .checks import loss_and_gradient


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_image_cross_entropy_and_its_gradient_match_the_cpu(reduction, weighted):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 6, 7, generator=generator)
    target = torch.randint(0, 5, (2, 6, 7), generator=generator)
    target[0, 0, :3] = -100  # ignored pixels
    weight = torch.rand(5, generator=generator) + 0.5 if weighted else None
    gradient = loss_and_gradient(F.cross_entropy, logits, target, weight, reduction, generator, 1e-6)
    assert gradient.is_contiguous()


def test_half_precision_and_a_single_image():
    generator = torch.Generator().manual_seed(1)
    for dtype, shape in ((torch.float16, (1, 3, 4, 4)), (torch.float32, (1, 8, 1, 9))):
        logits = torch.randn(shape, generator=generator).to(dtype)
        target = torch.randint(0, shape[1], (shape[0], *shape[2:]), generator=generator)
        got = F.nll_loss(logits.to("rbln"), target.to("rbln"))
        torch.testing.assert_close(got.cpu(), F.nll_loss(logits, target), atol=2e-3, rtol=2e-3)


def test_targets_torch_refuses_still_raise_torchs_errors():
    logits = torch.randn(2, 3, 4, 4).to("rbln")
    with pytest.raises(IndexError, match="out of bounds"):
        F.nll_loss(logits, torch.full((2, 4, 4), 7).to("rbln"))
    with pytest.raises(RuntimeError, match="size mismatch|only batches of spatial targets"):
        F.nll_loss(logits, torch.zeros(2, 4, 5, dtype=torch.int64).to("rbln"))
