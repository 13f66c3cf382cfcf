"""`linalg_vector_norm` and `logsumexp` (registry/norms.py): orders 2, 1, +-inf over all dims, one dim
and several, with keepdim and dtype=, against the CPU; half-precision inputs whose squares overflow their
own range; logsumexp of large values and of -inf rows; what declines to the CPU fallback (another order,
an empty input, a NaN, integers) is counted with its reason."""

from __future__ import annotations

import math

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

TOLERANCE = {torch.float32: 2e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def _row() -> dict:
    return registry.fallback_report().get("aten::linalg_vector_norm", {"device": 0, "cpu": 0, "reasons": {}})


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("order", [2, 1, math.inf, -math.inf], ids=str)
def test_each_order_matches_the_cpu_on_device(order, dtype):
    x = (torch.randn(6, 5, 4, generator=torch.Generator().manual_seed(3)) * 300).to(dtype)  # squares > 65504
    registry.reset_fallback_report()
    cases = [(None, False), (1, True), ((0, 2), False), (-1, False)]
    for dim, keepdim in cases:
        expected = torch.linalg.vector_norm(x, order, dim, keepdim)
        got = torch.linalg.vector_norm(x.to("rbln"), order, dim, keepdim).cpu()
        assert got.dtype == expected.dtype and got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=TOLERANCE[dtype], atol=0)
    widened = torch.linalg.vector_norm(x.to("rbln"), order, dtype=torch.float32).cpu()
    assert widened.dtype is torch.float32
    expected = torch.linalg.vector_norm(x, order, dtype=torch.float32)
    torch.testing.assert_close(widened, expected, rtol=2e-6, atol=0)
    assert _row()["cpu"] == 0 and _row()["device"] == len(cases) + 1
    if dtype is not torch.float32:  # a narrower dtype= is torch's error, from the CPU
        with pytest.raises(RuntimeError, match="without narrowing"):
            torch.linalg.vector_norm(x.float().to("rbln"), order, dtype=dtype)


@pytest.mark.parametrize("case, reason", [("order 3", "ord 3"), ("empty", "empty tensor"),
                                          ("nan", "nan_inf")])
def test_what_the_device_path_does_not_take_runs_on_the_cpu_visibly(case, reason):
    x = torch.randn(4, 5)
    order = 2
    if case == "order 3":
        order = 3
    elif case == "empty":
        x = torch.randn(0, 5)
    else:
        x[1, 2] = math.nan
    registry.reset_fallback_report()
    got = torch.linalg.vector_norm(x.to("rbln"), order, dim=-1)
    torch.testing.assert_close(got.cpu(), torch.linalg.vector_norm(x, order, dim=-1), equal_nan=True)
    assert any(reason in r for r in _row()["reasons"]), _row()


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
def test_logsumexp_matches_the_cpu_on_device(dtype):
    x = (torch.randn(6, 5, 4, generator=torch.Generator().manual_seed(5)) * 30).to(dtype)
    x[2, :, 1] = -math.inf  # a row of -inf: -inf, as torch's (its maximum taken as 0)
    x[3, 1, :] = 80.0  # exp(80) overflows float32: the maximum is subtracted first
    x[4, 2, 3] = math.inf  # a row with +inf: +inf
    x[5, 0, 0] = math.nan  # a row with NaN: NaN
    registry.reset_fallback_report()
    cases = [(1, False), ((0, 2), True), (-1, False), ([0, 1, 2], False)]
    for dim, keepdim in cases:
        expected = torch.logsumexp(x, dim, keepdim)
        got = torch.logsumexp(x.to("rbln"), dim, keepdim).cpu()
        assert got.shape == expected.shape and got.dtype == expected.dtype
        tolerance = TOLERANCE[dtype]
        torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance, equal_nan=True)
    # registered exact: the special values are the CPU's, so they stay on the device
    assert registry.fallback_report()["aten::logsumexp"] == {"device": len(cases), "cpu": 0, "reasons": {}}


def test_logsumexp_declines_visibly():
    registry.reset_fallback_report()
    ints = torch.arange(12).reshape(3, 4)
    torch.testing.assert_close(torch.logsumexp(ints.to("rbln"), 1).cpu(), torch.logsumexp(ints, 1))
    empty = torch.empty(0, 3)
    torch.testing.assert_close(torch.logsumexp(empty.to("rbln"), 0).cpu(), torch.logsumexp(empty, 0))
    row = registry.fallback_report()["aten::logsumexp"]
    assert row["device"] == 0 and row["cpu"] == 2 and sum(row["reasons"].values()) == 2, row


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
def test_group_norm_statistics_are_float32_and_match_the_cpu(dtype, affine):
    """A group of float16 values of a few hundred has a variance past 65,504: torch's composite for
    devices (statistics in the input's dtype) normalised it to zeros; ours gives the CPU kernel's
    values, mean and rstd in the input's dtype, channels-last inputs included."""
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(2, 6, 3, 5, generator=generator)
    x[0, :2] *= 300
    x = x.to(dtype)
    weight = torch.randn(6, generator=generator).to(dtype) if affine else None
    bias = torch.randn(6, generator=generator).to(dtype) if affine else None
    on_device = [None if t is None else t.to("rbln") for t in (weight, bias)]
    registry.reset_fallback_report()
    for layout in (torch.contiguous_format, torch.channels_last):
        expected = torch.ops.aten.native_group_norm(x, weight, bias, 2, 6, 15, 3, 1e-5)
        got = torch.ops.aten.native_group_norm(x.to("rbln").contiguous(memory_format=layout), *on_device,
                                               2, 6, 15, 3, 1e-5)
        for g, e in zip(got, expected, strict=True):
            assert g.dtype == e.dtype and g.shape == e.shape and g.isfinite().all()
            torch.testing.assert_close(g.cpu(), e, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    row = registry.fallback_report()["aten::native_group_norm"]
    assert (row["device"], row["cpu"]) == (2, 0)


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
def test_group_norm_trains_on_the_device(dtype, affine):
    """The backward (`native_group_norm_backward`, which torch has no composite for: it ran on the CPU
    fallback) gives the CPU's gradients of x, the weight and the bias, and only those asked for."""
    generator = torch.Generator().manual_seed(5)
    x = (torch.randn(2, 6, 4, 3, generator=generator) * 3).to(dtype)
    upstream = torch.randn(2, 6, 4, 3, generator=generator).to(dtype)
    parameters = [torch.randn(6, generator=generator).to(dtype) for _ in range(2)] if affine else []

    def gradients(device: str, x_grad: bool) -> list:
        leaves = [t.detach().clone().to(device).requires_grad_() for t in (x, *parameters)]
        leaves[0].requires_grad_(x_grad)
        out = torch.nn.functional.group_norm(leaves[0], 3, *leaves[1:])
        (out * upstream.to(device)).sum().backward()
        return [None if t.grad is None else t.grad.cpu() for t in leaves]

    registry.reset_fallback_report()
    for x_grad in (True, False) if affine else (True,):
        for got, expected in zip(gradients("rbln", x_grad), gradients("cpu", x_grad), strict=True):
            assert (got is None) == (expected is None)
            if got is not None:
                assert got.dtype == expected.dtype
                tolerance = 4 * TOLERANCE[dtype]
                torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)
    row = registry.fallback_report()["aten::native_group_norm_backward"]
    assert row["cpu"] == 0 and row["device"] == (2 if affine else 1)
