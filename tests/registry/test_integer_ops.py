"""Integer, bool and membership ops that text generation calls between forwards (Hugging Face's
`generate`: `1 - unfinished_sequences`, `cat([input_ids, next_tokens[:, None]], -1)`,
`unfinished_sequences.max()`, `isin(last_tokens, eos_ids)`, `indices % size` inside `take_along_dim`,
`mask.sum(dim=1)`, `position_ids.masked_fill_(mask == 0, 1)`): each compared bit for bit (and dtype for
dtype) with torch's CPU kernels, and each must have run on a device kernel (the fallback report counts
no CPU call). Cases are few on purpose: each dtype and op is a numba specialisation compiled once per
fresh cache."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _on_device(fn: Callable, *inputs, ops: tuple[str, ...]) -> None:
    """`fn` on rbln copies of `inputs` equals `fn` on the CPU (values, dtype, shape), and every call of
    the aten ops `ops` ran a device kernel."""
    expected = fn(*inputs)
    registry.reset_fallback_report()
    actual = fn(*[x.to("rbln") if isinstance(x, torch.Tensor) else x for x in inputs])
    report = registry.fallback_report()
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    for got, want in zip(actual, expected, strict=True):
        assert got.device.type == "rbln"
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got.cpu(), want), (got.cpu(), want)
    for op in ops:
        counts = report.get(f"aten::{op}", {"device": 0, "cpu": 0})
        assert counts["cpu"] == 0 and counts["device"] >= 1, (op, report)


def _ints(dtype: torch.dtype, shape: tuple, low: int = -4, high: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# ---------------------------------------------------------------- a number as the first operand


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_number_minus_integer_tensor(dtype):
    x = _ints(dtype, (2, 8), -100, 100)
    _on_device(lambda t: 1 - t, x, ops=("sub",))
    _on_device(lambda t: torch.rsub(t, 7, alpha=2), x, ops=("sub",))
    _on_device(lambda t: torch.sub(torch.tensor(5), t), x, ops=("sub",))


def test_number_first_wraps_to_the_result_dtype():
    # 2**40 as an int32 operand wraps to 0, as torch converts it
    _on_device(lambda t: 2**40 - t, _ints(torch.int32, (5,), -100, 100), ops=("sub",))


def test_bool_number_operands_count_as_zero_and_one():
    mask = torch.tensor([[True, False, True]])
    _on_device(lambda m: m & False, mask, ops=("bitwise_and",))
    _on_device(lambda m: m | True, mask, ops=("bitwise_or",))
    _on_device(lambda t: t + True, torch.arange(3), ops=("add",))


# ---------------------------------------------------------------- remainder


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_remainder_by_a_number_has_the_divisors_sign(dtype):
    x = _ints(dtype, (3, 7), -50, 50, seed=1)
    info = torch.iinfo(dtype)
    x[0, 0], x[0, 1] = info.min, info.max
    for divisor in (3, -3, 1, -1, 7, torch.tensor(5)):
        _on_device(lambda t, d=divisor: torch.remainder(t, d), x, ops=("remainder",))
        _on_device(lambda t, d=divisor: t % d, x, ops=("remainder",))


def test_remainder_in_place_and_of_a_large_divisor():
    x = _ints(torch.int64, (4, 5), -(2**50), 2**50, seed=2)
    _on_device(lambda t: t.clone().remainder_(2**40 + 3), x, ops=("remainder_",))


def test_remainder_by_zero_raises_torchs_error_and_floats_run_on_the_float_kernel():
    x = torch.arange(4, device="rbln")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.remainder(x, 0)
    registry.reset_fallback_report()
    y = torch.remainder(torch.arange(4.0, device="rbln"), 3)
    assert torch.equal(y.cpu(), torch.remainder(torch.arange(4.0), 3))
    assert registry.fallback_report()["aten::remainder"] == {"device": 1, "cpu": 0, "reasons": {}}


# ---------------------------------------------------------------- masked_fill, cat


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_masked_fill_of_integer_and_bool_tensors(dtype):
    x = _ints(dtype, (2, 8), 0, 5, seed=3)
    mask = torch.tensor([True, False] * 4)
    _on_device(lambda t, m: t.masked_fill(m, 1), x, mask, ops=("masked_fill",))
    _on_device(lambda t, m: t.clone().masked_fill_(m, torch.tensor(0)), x, mask, ops=("masked_fill_",))


def test_masked_fill_of_an_int_tensor_with_a_value_it_cannot_hold_runs_on_the_cpu():
    x = torch.arange(4, dtype=torch.int32)
    registry.reset_fallback_report()
    got = x.to("rbln").masked_fill(torch.tensor([True, False, True, False], device="rbln"), 1.5)
    assert torch.equal(got.cpu(), x.masked_fill(torch.tensor([True, False, True, False]), 1.5))
    assert registry.fallback_report()["aten::masked_fill"]["cpu"] == 1


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_cat_of_integer_and_bool_tensors(dtype):
    x = _ints(dtype, (2, 8), 0, 3, seed=4)
    _on_device(lambda t: torch.cat([t, t[:, -1:]], -1), x, ops=("cat",))  # a generated sequence grows
    _on_device(lambda t: torch.cat([t, t, t[:, 2:]], 1), x, ops=("cat",))
    _on_device(lambda t: torch.cat([t.t(), t.t()], 0), x, ops=("cat",))


def test_cat_of_int64_keeps_its_plan_and_values_beyond_float_precision():
    x = torch.tensor([[2**62 + 1, -(2**53) - 1]])
    for _ in range(3):  # the first call builds the plan, the later ones run it
        _on_device(lambda t: torch.cat([t, t], -1), x, ops=("cat",))


# ---------------------------------------------------------------- reductions


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_extremes_with_ties_pick_the_first_index(dtype):
    x = _ints(dtype, (3, 9), seed=5)  # many ties among 8 values
    for fn in (lambda t: t.max(), lambda t: t.min(), lambda t: tuple(t.max(-1)), lambda t: tuple(t.min(0)),
               lambda t: t.argmax(), lambda t: t.argmin(1, keepdim=True), lambda t: t.amax(0)):
        _on_device(fn, x, ops=())
    _on_device(lambda t: t.max(), x, ops=("max",))


def test_int64_extremes_beyond_float32_precision():
    x = torch.tensor([2**40 + 1, 2**40, -(2**62), 2**40 + 1, 7])
    _on_device(lambda t: t.max(), x, ops=("max",))
    _on_device(lambda t: t.argmax(), x, ops=("argmax",))
    _on_device(lambda t: t.amin(), x, ops=("amin",))


def test_integer_reductions_over_scattered_dims_and_long_rows():
    x = _ints(torch.int64, (2, 3, 300), seed=6)
    _on_device(lambda t: t.amax((0, 2)), x, ops=("amax",))
    _on_device(lambda t: t.argmin(-1), x, ops=("argmin",))
    _on_device(lambda t: t.max(), torch.tensor(-3), ops=("max",))  # 0-dim


@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.int64])
def test_sum_of_bools_and_integers_is_int64(dtype):
    x = _ints(dtype, (2, 3, 40), 0 if dtype is torch.bool else -4, 2 if dtype is torch.bool else 4, seed=7)
    _on_device(lambda t: t.sum(), x, ops=("sum",))
    _on_device(lambda t: t.sum(1), x, ops=("sum",))  # beam search: `mask.sum(dim=1)`
    _on_device(lambda t: t.sum((0, 2), keepdim=True), x, ops=("sum",))


def test_int64_sum_wraps_as_torchs():
    _on_device(lambda t: t.sum(), torch.tensor([2**62, 2**62, 2**62, 5]), ops=("sum",))


def test_sum_to_another_dtype_runs_on_the_cpu():
    x = torch.tensor([True, False, True])
    registry.reset_fallback_report()
    got = x.to("rbln").sum(dtype=torch.int32)
    assert got.dtype == torch.int32 and got.item() == 2
    assert registry.fallback_report()["aten::sum"]["cpu"] == 1


# ---------------------------------------------------------------- isin


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_isin_matches_torch(dtype):
    elements = _ints(dtype, (3, 5), 0, 6, seed=8)
    if dtype.is_floating_point:
        elements[0, 0], elements[0, 1], elements[0, 2] = math.nan, math.inf, -math.inf
    tests = [torch.tensor([2, 3]).to(dtype), torch.tensor(5).to(dtype)]
    if dtype.is_floating_point:
        tests.append(torch.tensor([math.nan, math.inf, 1.0]))
    for test_elements in tests:
        for invert in (False, True):
            _on_device(lambda e, t, i=invert: torch.isin(e, t, invert=i), elements, test_elements,
                       ops=("isin",))
    _on_device(lambda e: torch.isin(e[:, -1:], torch.tensor([1, 4]).to(dtype).to(e.device)), elements,
               ops=("isin",))  # a strided view, as generate's last tokens
    _on_device(lambda e: torch.isin(e, 3), elements, ops=("isin",))


def test_isin_beyond_its_compare_limit_runs_on_the_cpu(monkeypatch):
    from torch_rbln.registry import reduce

    monkeypatch.setattr(reduce, "ISIN_LIMIT", 8)
    registry.reset_fallback_report()
    got = torch.isin(torch.arange(5, device="rbln"), torch.tensor([1, 3], device="rbln"))
    assert torch.equal(got.cpu(), torch.isin(torch.arange(5), torch.tensor([1, 3])))
    reasons = registry.fallback_report()["aten::isin"]["reasons"]
    assert list(reasons) == ["isin of 5 x 2 elements (above 8 compares)"]
