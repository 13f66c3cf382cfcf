"""`torch.flip` on the copy kernel (registry/indexing.py `flip`, `_copy.reversed_copy`): the copy writes its
destination through negated strides from the last element of each flipped dim. Bitwise against the CPU
for contiguous, transposed and stepped inputs, every dtype the copy moves, each subset of dims, negative
dims, sizes of 1 and 0; its gradient; what declines (5 non-mergeable dims, repeated dims) is visible."""

from __future__ import annotations

import itertools

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _views(x: torch.Tensor) -> list[torch.Tensor]:
    views = [x]
    if x.dim() > 1:
        views.append(x.transpose(0, -1))
    if x.dim() and x.shape[-1] > 2:
        views.append(x[..., ::2])
    return views


# every shape in float32; the other dtypes the copy moves on one 3-D shape (each dtype compiles its own
# copy specialisations)
CASES = [((7,), torch.float32), ((3, 4), torch.float32), ((2, 3, 4), torch.float32),
         ((2, 3, 4, 5), torch.float32), ((3, 1, 4), torch.float32), ((2, 3, 4), torch.float16),
         ((2, 3, 4), torch.bfloat16), ((2, 3, 4), torch.int64), ((2, 3, 4), torch.bool)]


@pytest.mark.parametrize(("shape", "dtype"), CASES, ids=[f"{s}-{d}" for s, d in CASES])
def test_every_subset_of_dims_matches_the_cpu_bitwise(shape, dtype):
    registry.reset_fallback_report()
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape))) * 10
    x = x > 0 if dtype is torch.bool else x.to(dtype)
    calls = 0
    for view in _views(x):
        for count in range(1, view.dim() + 1):
            for dims in itertools.combinations(range(view.dim()), count):
                negative = tuple(d - view.dim() for d in dims)
                for asked in (dims, negative):
                    got = torch.flip(view.to("rbln"), asked).cpu()
                    assert torch.equal(got, torch.flip(view, asked)), asked
                    calls += 1
    assert registry.fallback_report()["aten::flip"] == {"device": calls, "cpu": 0, "reasons": {}}


def test_empty_and_scalar_tensors_and_the_gradient():
    for x in (torch.empty(0, 3), torch.tensor(2.5)):
        dims = (0,) if x.dim() else ()
        got = torch.flip(x.to("rbln"), dims).cpu()
        assert torch.equal(got, torch.flip(x, dims)) and got.shape == x.shape
    x = torch.randn(4, 6, requires_grad=True)
    weights = torch.randn(4, 6)
    device = x.detach().to("rbln").requires_grad_()
    (torch.flip(device, (1,)) * weights.to("rbln")).sum().backward()
    (torch.flip(x, (1,)) * weights).sum().backward()
    assert torch.equal(device.grad.cpu(), x.grad)


def test_what_the_kernels_cannot_express_declines_visibly():
    registry.reset_fallback_report()
    five = torch.randn(2, 3, 2, 3, 2)
    assert torch.equal(torch.flip(five.to("rbln"), (0, 2, 4)).cpu(), torch.flip(five, (0, 2, 4)))
    with pytest.raises(RuntimeError, match="appears multiple times"):
        torch.flip(five.to("rbln"), (1, 1))
    row = registry.fallback_report()["aten::flip"]
    assert row["device"] == 0 and row["cpu"] == 2, row
