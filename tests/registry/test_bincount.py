"""`torch.bincount` on the device (`registry/indexing.py`): index_put_'s accumulation into max(x) + 1 bins,
in index order as torch's CPU loop, so counts and float32 weighted sums are the CPU's bits; MoE routing
counts tokens per expert with it."""

from __future__ import annotations

import pytest
import torch

from torch_rbln import registry

from .checks import cpu_calls


@pytest.mark.parametrize("case", ["counts", "int32", "weights", "minlength", "empty", "one value"])
def test_bincount_is_the_cpus(case):
    generator = torch.Generator().manual_seed(0)
    x = torch.randint(0, 9, (500,), generator=generator)
    weights = torch.rand(500, generator=generator)
    args = {"counts": (x,), "int32": (x.int(),), "weights": (x, weights), "minlength": (x, None, 20),
            "empty": (torch.tensor([], dtype=torch.int64), None, 3), "one value": (torch.tensor([5]),)}[case]
    registry.reset_fallback_report()
    got = torch.bincount(*[a.to("rbln") if isinstance(a, torch.Tensor) else a for a in args]).cpu()
    expected = torch.bincount(*args)
    assert got.dtype == expected.dtype and torch.equal(got, expected)
    assert not cpu_calls(), cpu_calls()


def test_tokens_per_expert_of_a_router():
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(64, 8, generator=generator)
    experts = logits.to("rbln").topk(2, dim=-1).indices.flatten()
    registry.reset_fallback_report()
    assert torch.equal(torch.bincount(experts, minlength=8).cpu(),
                       torch.bincount(logits.topk(2, dim=-1).indices.flatten(), minlength=8))
    assert not cpu_calls(), cpu_calls()


def test_negative_values_raise_torchs_error():
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([3, -1]).to("rbln"))
