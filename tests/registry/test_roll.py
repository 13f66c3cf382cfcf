"""`torch.roll` on the copy kernel (registry/indexing.py `roll`: two copies per rolled dim into the
result's slices): bitwise against the CPU for shifts positive, negative, zero and beyond the size, one
dim and several, without dims (the flattened tensor), on contiguous, transposed and stepped inputs,
0-dim and empty tensors; its gradient; mismatched shifts and dims raise torch's error."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

CASES = [(1, 0), (-2, 1), (7, 2), (0, 1), (5, 0), ((1, -3), (0, 2)), ((1, 2, 3), (0, 1, 2)), (2, None),
         (-11, None)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_shifts_and_dims_match_the_cpu_bitwise(dtype):
    registry.reset_fallback_report()
    x = (torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(2)) * 10).to(dtype)
    calls = 0
    for shifts, dims in CASES:
        for view in (x, x.transpose(0, 2), x[:, ::2]):
            if dims is None:
                got, expected = torch.roll(view.to("rbln"), shifts), torch.roll(view, shifts)
            else:
                got, expected = torch.roll(view.to("rbln"), shifts, dims), torch.roll(view, shifts, dims)
            assert got.shape == expected.shape and torch.equal(got.cpu(), expected), (shifts, dims)
            calls += 1
    assert registry.fallback_report()["aten::roll"] == {"device": calls, "cpu": 0, "reasons": {}}


def test_scalar_empty_and_the_gradient():
    assert torch.equal(torch.roll(torch.tensor(3.0).to("rbln"), 1).cpu(), torch.tensor(3.0))
    empty = torch.empty(0, 3)
    assert torch.roll(empty.to("rbln"), 1, 0).shape == (0, 3)
    x = torch.randn(4, 6, requires_grad=True)
    weights = torch.randn(4, 6)
    device = x.detach().to("rbln").requires_grad_()
    (torch.roll(device, (1, -2), (0, 1)) * weights.to("rbln")).sum().backward()
    (torch.roll(x, (1, -2), (0, 1)) * weights).sum().backward()
    assert torch.equal(device.grad.cpu(), x.grad)


def test_mismatched_shifts_and_dims_raise_torchs_error():
    x = torch.randn(3, 4).to("rbln")
    with pytest.raises(RuntimeError):
        torch.roll(x, (1, 2), (0,))
    with pytest.raises(RuntimeError):
        torch.roll(x, (1, 2))
