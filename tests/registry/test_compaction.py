"""`nonzero`, `masked_select` and indexing by a boolean mask on the device (`registry/indexing.py`,
`kernels/compaction.py`): a count per block, its cumsum, then each selected element written at its
slot. Results are compared exactly with the CPU's (NaN counts as nonzero, -0.0 does not), on both DSL
backends, across block boundaries."""

from __future__ import annotations

import pytest
import torch
from torch_rbln.kernels import compaction

from torch_rbln import registry

from .checks import cpu_calls

BLOCK = compaction.BLOCK


def _sparse(shape, dtype=torch.float32, seed=0) -> torch.Tensor:
    """Values with about half zeros, a NaN and a -0.0 (when there is room) in `dtype`."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator)
    x[x.abs() < 0.7] = 0
    flat = x.view(-1)
    if flat.numel() > 2:
        flat[1], flat[2] = float("nan"), -0.0
    return x.to(dtype) if dtype.is_floating_point else (x * 3).to(dtype)


SHAPES = [(), (1,), (7,), (BLOCK + 5,), (3, BLOCK // 2 + 1), (2, 3, 5, 7), (0, 4)]


@pytest.mark.parametrize("backend", ["numba", "interpret"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_nonzero_matches_the_cpu(shape, backend, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", backend)
    for dtype in (torch.float32, torch.int64, torch.bool):
        x = _sparse(shape, dtype) if dtype is not torch.bool else _sparse(shape) > 0
        registry.reset_fallback_report()
        got = torch.nonzero(x.to("rbln"))
        assert got.device.type == "rbln" and not cpu_calls()
        assert got.dtype == torch.int64 and torch.equal(got.cpu(), torch.nonzero(x)), (shape, dtype)


def test_nonzero_of_all_zeros_all_ones_and_half_types():
    for x in (torch.zeros(3, BLOCK + 1), torch.ones(2, 3, BLOCK), _sparse((9, 33), torch.float16),
              _sparse((9, 33), torch.bfloat16)):
        assert torch.equal(torch.nonzero(x.to("rbln")).cpu(), torch.nonzero(x))
    x = _sparse((4, 6)).to("rbln")
    assert all(torch.equal(a.cpu(), b) for a, b in zip(torch.where(x), torch.where(x.cpu()), strict=True))


@pytest.mark.parametrize("x_shape,mask_shape", [((6, 40), (6, 40)), ((6, 40), (40,)), ((40,), (6, 40)),
                                                ((3, BLOCK + 7), (3, BLOCK + 7)), ((2, 0), (2, 0))])
def test_masked_select_matches_the_cpu_with_broadcasting(x_shape, mask_shape):
    x = _sparse(x_shape, seed=1)
    mask = _sparse(mask_shape, seed=2) > 0
    registry.reset_fallback_report()
    got = torch.masked_select(x.to("rbln"), mask.to("rbln"))
    assert not cpu_calls()
    expected = torch.masked_select(x, mask)
    assert got.shape == expected.shape and torch.equal(got.cpu().nan_to_num(7.0), expected.nan_to_num(7.0))
    ints = (x * 10).to(torch.int32)
    got = torch.masked_select(ints.to("rbln"), mask.to("rbln"))
    assert torch.equal(got.cpu(), torch.masked_select(ints, mask))


@pytest.mark.parametrize("case", ["full", "leading dims", "after a slice", "none selected",
                                  "values with NaN"])
def test_indexing_by_a_boolean_mask_gathers_on_the_device(case):
    x = _sparse((5, 6, 7), seed=3)
    select = {
        "full": lambda t, m: t[m],
        "leading dims": lambda t, m: t[m[:, :, 0]],
        "after a slice": lambda t, m: t[:, m[0, :, 0]],
        "none selected": lambda t, m: t[m & False],
        "values with NaN": lambda t, m: t[m[:, 0, 0]],
    }[case]
    mask = _sparse((5, 6, 7), seed=4) > 0
    registry.reset_fallback_report()
    got = select(x.to("rbln"), mask.to("rbln"))
    assert not cpu_calls(), cpu_calls()
    expected = select(x, mask)
    assert got.shape == expected.shape and torch.equal(got.cpu().nan_to_num(7.0), expected.nan_to_num(7.0))


def test_masks_torch_refuses_still_raise_torchs_errors():
    x = torch.randn(4, 5).to("rbln")
    with pytest.raises(IndexError, match="shape of the mask"):
        x[torch.ones(3, dtype=torch.bool).to("rbln")]
    with pytest.raises(RuntimeError, match="expected BoolTensor"):
        torch.masked_select(x, torch.ones(4, 5, dtype=torch.int64).to("rbln"))


@pytest.mark.parametrize("dim", [None, 0, 2, (0, 2)])
def test_count_nonzero_counts_as_torch_does(dim):
    """`x != 0` summed into int64 (NaN counts, -0.0 does not) over every dim, one or several."""
    x = _sparse((4, 5, 6), seed=5)
    registry.reset_fallback_report()
    for value in (x, x > 0, (x.nan_to_num(0.0) * 3).to(torch.int32)):
        args = () if dim is None else (dim,)
        got = torch.count_nonzero(value.to("rbln"), *args)
        expected = torch.count_nonzero(value, *args)
        assert got.dtype == expected.dtype and torch.equal(got.cpu(), expected)
    assert not cpu_calls(), cpu_calls()
