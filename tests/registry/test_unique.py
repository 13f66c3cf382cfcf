"""`torch.unique` without `dim` (`aten::_unique2`) on the device (`registry/indexing.py`): a stable sort,
the flags of new values, `masked_select`, ranks written back through the permutation, counts from the
gaps. Values, inverse indices and counts are compared exactly with the CPU's: NaN distinct from itself,
-0.0 and 0.0 one value (the first in index order), outputs not asked for empty."""

from __future__ import annotations

import itertools

import pytest
import torch

from torch_rbln import registry

from .checks import cpu_calls


def _same(got: torch.Tensor, expected: torch.Tensor) -> bool:
    got = got.cpu()
    if got.is_floating_point():
        return got.shape == expected.shape and torch.equal(got.signbit(), expected.signbit()) and \
            torch.equal(got.nan_to_num(9.0), expected.nan_to_num(9.0))
    return got.dtype == expected.dtype and torch.equal(got, expected)


@pytest.mark.parametrize("flags", list(itertools.product([True, False], repeat=2)))
def test_unique_of_floats_with_nan_and_signed_zeros(flags):
    x = torch.tensor([[3.0, float("nan"), 1.0], [float("nan"), 3.0, -0.0], [0.0, 2.0, 2.0]])
    registry.reset_fallback_report()
    got = torch.ops.aten._unique2(x.to("rbln"), True, *flags)
    for value, expected in zip(got, torch.ops.aten._unique2(x, True, *flags), strict=True):
        assert _same(value, expected)
    assert not cpu_calls(), cpu_calls()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float16])
def test_unique_with_inverse_and_counts_matches_the_cpu(dtype):
    x = torch.randint(-5, 5, (7, 9), generator=torch.Generator().manual_seed(0)).to(dtype)
    registry.reset_fallback_report()
    got = torch.unique(x.to("rbln"), return_inverse=True, return_counts=True)
    for value, expected in zip(got, torch.unique(x, return_inverse=True, return_counts=True), strict=True):
        assert _same(value, expected)
    assert torch.equal(got[0].cpu()[got[1].cpu()], x)  # values[inverse] rebuilds the input
    assert not cpu_calls(), cpu_calls()


def test_a_single_element_and_unsorted_output():
    one = torch.tensor([7]).to("rbln")
    values, counts = torch.unique(one, return_counts=True)
    assert values.cpu().tolist() == [7] and counts.cpu().tolist() == [1]
    assert torch.unique(torch.tensor([2, 1, 2]).to("rbln"), sorted=False).cpu().tolist() == [1, 2]
