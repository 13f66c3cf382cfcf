"""isnan / isinf / isposinf / isneginf on device: exact comparisons, registered `exact` so tensors that
hold NaN or Inf (the only ones worth asking about) are not sent to the CPU by the NaN/Inf scan."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

VALUES = torch.tensor([[1.0, float("nan"), float("inf")], [-float("inf"), 0.0, -2.0]])


@pytest.mark.parametrize("predicate", [torch.isnan, torch.isinf, torch.isposinf, torch.isneginf],
                         ids=lambda f: f.__name__)
def test_predicates_on_nan_and_inf_run_on_device(predicate):
    registry.reset_fallback_report()
    for x in (VALUES, VALUES.half(), VALUES.t()):  # float32, float16, a strided view
        got = predicate(x.to("rbln"))
        assert got.dtype == torch.bool and torch.equal(got.cpu(), predicate(x))
    name = f"aten::{predicate.__name__}"
    assert registry.fallback_report()[name] == {"device": 3, "cpu": 0, "reasons": {}}
    # integers hold no NaN/Inf: the CPU answers (all False) without a kernel
    assert not predicate(torch.arange(3).to("rbln")).cpu().any()
    assert registry.fallback_report()[name]["reasons"] == {"dtype int64": 1}


# all/any: a count of `x != 0` (NaN counts as non-zero) in one reduction launch, also `exact`
LOGICAL_INPUTS = [
    VALUES,  # NaN and +-Inf: not scanned, so on the device
    torch.tensor([[1.0, 0.0, 2.0], [3.0, 4.0, 5.0]]).half(),
    torch.tensor([[True, False, True], [True, True, True]]),
    torch.tensor([[0, 3, -1], [1, 2, 7]]),  # int64 through the exact integer comparison
    torch.full((3, 3), -float("inf")).triu(1),  # an SDPA causal mask
]


@pytest.mark.parametrize("reduction", [torch.all, torch.any], ids=lambda f: f.__name__)
@pytest.mark.parametrize("x", LOGICAL_INPUTS, ids=["nan_inf", "float16", "bool", "int64", "mask"])
def test_all_any_match_the_cpu_on_device(reduction, x):
    registry.reset_fallback_report()
    device = x.to("rbln")
    calls = [(), (0,), (1,), (-1, True)]
    for args in calls:
        got, expected = reduction(device, *args), reduction(x, *args)
        assert got.dtype == expected.dtype and torch.equal(got.cpu(), expected), args
    overload = getattr(torch.ops.aten, reduction.__name__).dims
    for dims in (None, [], [0, 1], [1]):  # None: every dim; []: none (elementwise)
        got, expected = overload(device, dims, True), overload(x, dims, True)
        assert got.dtype == expected.dtype and torch.equal(got.cpu(), expected), dims
    report = registry.fallback_report()[f"aten::{reduction.__name__}"]
    assert report == {"device": len(calls) + 4, "cpu": 0, "reasons": {}}


def test_all_any_decline_what_they_cannot_reduce():
    registry.reset_fallback_report()
    empty = torch.zeros(0, 3)
    assert torch.equal(torch.all(empty.to("rbln"), 1).cpu(), torch.all(empty, 1))
    ones = torch.ones(2, 2, dtype=torch.uint8)  # uint8 results are uint8, as torch's (on the device)
    got = torch.any(ones.to("rbln"))
    assert got.dtype == torch.uint8 and got.item() == 1
    reasons = registry.fallback_report()
    assert reasons["aten::all"]["reasons"] == {"empty tensor": 1}
    assert reasons["aten::any"] == {"device": 1, "cpu": 0, "reasons": {}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_all_any_take_their_plan_without_the_implementation(dtype, monkeypatch):
    """One launch per call (the row or middle reduction kernel counting non-zeros), kept per signature:
    once a signature has run, the checked implementation is not called again."""
    from torch_rbln.registry import reduce

    x = (torch.arange(24).reshape(2, 3, 4) % 5).to(dtype)
    device = x.to("rbln")
    calls = [lambda f, t: f(t), lambda f, t: f(t, 2), lambda f, t: f(t, 0, True), lambda f, t: f(t, (1, 2))]
    for call in calls:
        call(torch.any, device)
        call(torch.all, device)

    def refuse(*args, **kwargs):
        raise AssertionError("checked implementation reached")

    monkeypatch.setattr(reduce, "logical", refuse)
    registry.reset_fallback_report()
    for call in calls:
        for reduction in (torch.all, torch.any):
            got, expected = call(reduction, device), call(reduction, x)
            assert got.dtype == expected.dtype and torch.equal(got.cpu(), expected)
    assert registry.fallback_report()["aten::any"] == {"device": len(calls), "cpu": 0, "reasons": {}}


@pytest.mark.parametrize("predicate", [torch.isnan, torch.isposinf, torch.isneginf], ids=lambda f: f.__name__)
def test_single_comparison_predicates_take_their_plan(predicate, monkeypatch):
    """isnan (x != x) and isposinf / isneginf (x == +-inf) are one comparison's plan: NaN and Inf
    inputs included (exact, not scanned), without the checked implementation after the first call."""
    from torch_rbln.registry import elementwise

    for x in (VALUES, VALUES.half()):
        device = x.to("rbln")
        predicate(device)

        def refuse(*args, **kwargs):
            raise AssertionError("checked implementation reached")

        with monkeypatch.context() as patch:
            patch.setattr(elementwise, "binary", refuse)
            registry.reset_fallback_report()
            got = predicate(device)
        assert got.dtype == torch.bool and torch.equal(got.cpu(), predicate(x))
        assert registry.fallback_report()[f"aten::{predicate.__name__}"]["cpu"] == 0
