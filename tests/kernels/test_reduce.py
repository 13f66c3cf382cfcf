"""Reductions over any dims: trailing (row kernel), leading/middle runs (in-place middle kernel),
scattered dims (one permuting copy), all dims; ties and NaN follow torch; everything on device."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

SHAPE = (3, 5, 7, 4)
DIM_CASES = [0, 1, 2, -1, (0, 1), (1, 2), (2, 3), (0, 2), (0, 3), (1, 3), (0, 1, 2, 3), ()]
TOL = {"atol": 1e-5, "rtol": 1e-5}


def _assert_on_device() -> None:
    report = registry.fallback_report()
    assert all(row["cpu"] == 0 for row in report.values()), registry.format_report(report)
    assert sum(row["device"] for row in report.values()) > 0


@pytest.mark.parametrize("dim", DIM_CASES, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_amax_var_over_any_dims(dim, keepdim):
    x = torch.randn(SHAPE)
    d = x.to("rbln")
    registry.reset_fallback_report()
    torch.testing.assert_close(d.sum(dim, keepdim=keepdim).cpu(), x.sum(dim, keepdim=keepdim), **TOL)
    torch.testing.assert_close(d.mean(dim, keepdim=keepdim).cpu(), x.mean(dim, keepdim=keepdim), **TOL)
    torch.testing.assert_close(d.amax(dim, keepdim=keepdim).cpu(), x.amax(dim, keepdim=keepdim))
    torch.testing.assert_close(d.amin(dim, keepdim=keepdim).cpu(), x.amin(dim, keepdim=keepdim))
    torch.testing.assert_close(torch.var(d, dim, keepdim=keepdim).cpu(), torch.var(x, dim, keepdim=keepdim),
                               **TOL)
    torch.testing.assert_close(torch.std(d, dim, correction=0, keepdim=keepdim).cpu(),
                               torch.std(x, dim, correction=0, keepdim=keepdim), **TOL)
    _assert_on_device()


@pytest.mark.parametrize("dim", [0, 1, 2, 3])
def test_max_min_argmax_with_ties_and_nan_match_torch(dim):
    x = torch.randint(0, 3, SHAPE).float()  # many ties: the first index must win
    d = x.to("rbln")
    registry.reset_fallback_report()
    for op in (torch.max, torch.min):
        values, indices = op(d, dim)
        expected = op(x, dim)
        torch.testing.assert_close(values.cpu(), expected.values)
        assert torch.equal(indices.cpu(), expected.indices), op
    assert torch.equal(torch.argmax(d, dim).cpu(), torch.argmax(x, dim))
    assert torch.equal(torch.argmin(d, dim, keepdim=True).cpu(), torch.argmin(x, dim, keepdim=True))
    _assert_on_device()
    # NaN inputs take the exact CPU path (SPEC: nan_inf) unless deploy mode; the kernel itself also
    # propagates NaN with its first index, checked through the registry's kernel directly.
    from torch_rbln.registry import reduce

    x[1, 2, 3, 0] = float("nan")
    values, indices = reduce.reduce("max", x.to("rbln"), dim)
    expected = torch.max(x, dim)
    torch.testing.assert_close(values.cpu(), expected.values, equal_nan=True)
    assert torch.equal(indices.cpu(), expected.indices)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_accumulates_in_float32(dtype):
    x = torch.randn(64, 33, 9).to(dtype)
    d = x.to("rbln")
    registry.reset_fallback_report()
    expected = x.float().sum(1).to(dtype)
    torch.testing.assert_close(d.sum(1).cpu(), expected, atol=2e-2, rtol=1e-2)
    torch.testing.assert_close(d.mean((0, 2)).cpu(), x.float().mean((0, 2)).to(dtype), atol=1e-2, rtol=1e-2)
    _assert_on_device()


# (dim, keepdim): the row kernel, the middle kernel, every dim, scattered dims (a permuting copy first)
STD_DIMS = [(-1, False), (0, True), (None, False), ((0, 2), False)]


@pytest.mark.parametrize("dim, keepdim", STD_DIMS, ids=str)
def test_float16_std_whose_variance_overflows_is_finite(dim, keepdim):
    """std takes the root in float32 before the store rounds: values near 60,000 have a variance past
    float16's largest value (65,504) but a standard deviation of ~49,000. std stored the variance in
    float16 (inf) and took its root after, until session 39."""
    x = torch.tensor([[60000.0, -60000.0, 0.0, 1000.0], [1.0, 2.0, 3.0, 4.0]]).repeat(3, 1, 1).half()
    d = x.to("rbln")
    registry.reset_fallback_report()
    for correction in (1, 0):
        expected = x.std(dim, correction=correction, keepdim=keepdim)
        assert expected.isfinite().all()  # the CPU's, from float32
        for _ in range(2):  # the first call (checked) and the plan's
            torch.testing.assert_close(d.std(dim, correction=correction, keepdim=keepdim).cpu(), expected,
                                       atol=0, rtol=1e-3)
    spread, mean = torch.std_mean(d, dim, keepdim=keepdim)
    expected_spread, expected_mean = torch.std_mean(x, dim, keepdim=keepdim)
    torch.testing.assert_close(spread.cpu(), expected_spread, atol=0, rtol=1e-3)
    torch.testing.assert_close(mean.cpu(), expected_mean, atol=1e-2, rtol=1e-3)
    _assert_on_device()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [-1, 0], ids=["rows", "columns"])
def test_var_and_std_of_values_whose_squares_overflow_float32(dim, dtype):
    """Deviations past ~1.8e19 square past float32's range; torch's CPU sums them in float64. The
    kernels take the overflowed rows (columns: the middle kernel) again, each deviation divided by the
    largest: std is finite where it fits, var is inf only where the variance itself is past the range,
    and every other row keeps its bits (an infinite input still gives NaN, as torch's)."""
    x = torch.tensor([[3e19, -3e19, 1e19, 0.0], [1e19, -1e19, 5e18, 2e18], [1.0, 2.0, 3.0, 4.0],
                      [2e19, 2e19, 2e19, 2e19]])
    x = (x if dim == -1 else x.T.contiguous()).to(dtype)
    d = x.to("rbln")
    registry.reset_fallback_report()
    for _ in range(2):  # the first call (checked) and the plan's
        for op in (torch.var, torch.std):
            expected = op(x, dim)
            got = op(d, dim).cpu()
            torch.testing.assert_close(got, expected, atol=0, rtol=2e-7 if dtype == torch.float32 else 0)
    assert torch.std(d, dim).cpu().isfinite().all()
    _assert_on_device()


def test_noncontiguous_input_and_wide_inner_block():
    x = torch.randn(6, 40, 1100)
    d = x.to("rbln")
    registry.reset_fallback_report()
    torch.testing.assert_close(d.sum(1).cpu(), x.sum(1), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(d.transpose(0, 2).amax(1).cpu(), x.transpose(0, 2).amax(1))
    _assert_on_device()


def test_out_of_range_dim_raises_torch_error():
    d = torch.randn(2, 3).to("rbln")
    with pytest.raises(IndexError, match="Dimension out of range"):
        d.sum(5)


def test_row_kernel_without_write_index_stores_the_same_values_and_no_index():
    """amax/amin's specialisation (WRITE_INDEX=False) of the row kernel: the values of max/min's, bit
    for bit (ties, NaN, rows longer than a block), and the index buffer left alone."""
    from torch_rbln.kernels import rows
    from torch_rbln.registry import reduce

    x = torch.randint(0, 3, (3, 1500)).float()
    x[1, 700] = float("nan")
    x[2, 5] = -float("inf")
    for op in (rows.R_MAX, rows.R_MIN):
        key, constexprs = reduce.row_key(x.dtype, x.dtype, torch.int64, op, x.shape[1], write_index=True)
        values, indices = torch.empty(3), torch.full((3,), -7, dtype=torch.int64)
        rows.reduce_kernel[(3,)](x, values, indices, x.shape[1], 1.0, **constexprs)
        key, constexprs = reduce.row_key(x.dtype, x.dtype, x.dtype, op, x.shape[1], write_index=False)
        assert constexprs["WRITE_INDEX"] is False  # and the key names the specialisation:
        assert key != reduce.row_key(x.dtype, x.dtype, x.dtype, op, x.shape[1], write_index=True)[0]
        alone = torch.full((3,), 123.0)
        only = torch.empty(3)
        rows.reduce_kernel[(3,)](x, only, alone, x.shape[1], 1.0, **constexprs)
        assert torch.equal(only.view(torch.int32), values.view(torch.int32)), op
        assert torch.equal(alone, torch.full((3,), 123.0))  # no index stored
        expected = (torch.max if op == rows.R_MAX else torch.min)(x, 1)
        torch.testing.assert_close(values, expected.values, equal_nan=True)
        assert torch.equal(indices, expected.indices)


def test_row_kernel_argmax_needs_write_index():
    from torch_rbln.dsl.errors import CompilationError
    from torch_rbln.kernels import rows

    x = torch.randn(2, 4)
    with pytest.raises(CompilationError, match="argmax/argmin store indices: set WRITE_INDEX"):
        rows.reduce_kernel[(2,)](x, x, torch.empty(2, dtype=torch.int64), 4, 1.0, OP=rows.R_ARGMAX,
                                 WRITE_INDEX=False, BLOCK=4)


def test_amax_amin_allocate_no_index_tensor(monkeypatch):
    """amax/amin (a new plan, then its kept launch) allocate their result only; max.dim still its
    indices (values and indices in one allocation, `_memory.empty_pair`)."""
    from torch_rbln import _memory

    allocated = []
    original, original_pair = _memory.empty, _memory.empty_pair

    def recording(shape, dtype, index):
        allocated.append(dtype)
        return original(shape, dtype, index)

    def recording_pair(first, second, dtype, index, second_dtype=None):
        allocated.extend((dtype, second_dtype or dtype))
        return original_pair(first, second, dtype, index, second_dtype)

    x = torch.randn(4, 6)
    d = x.to("rbln")
    monkeypatch.setattr(_memory, "empty", recording)
    monkeypatch.setattr(_memory, "empty_pair", recording_pair)
    for name in ("amax.default", "amin.default", "max.dim"):  # plans keep the allocator they were made with
        registry._kernels[name].plans().clear()
    registry.reset_fallback_report()
    for _ in range(2):  # a new plan, then the kept one
        assert torch.equal(d.amax(-1).cpu(), x.amax(-1)) and torch.equal(d.amin(-1).cpu(), x.amin(-1))
        assert torch.equal(d.amax(0).cpu(), x.amax(0))  # the middle kernel (it keeps a scratch index)
    assert allocated.count(torch.int64) == 2 and allocated.count(torch.float32) == 6
    allocated.clear()
    values, indices = d.max(-1)
    assert torch.equal(indices.cpu(), x.max(-1).indices) and sorted(map(str, allocated)) == [
        "torch.float32", "torch.int64"]  # values and indices, in either order
    _assert_on_device()
