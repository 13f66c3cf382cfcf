"""The loss family's plans (registry/loss.py): nll_loss forward and backward give the checked
implementation's results bitwise (`planned.general_path`) from the first call on, counted as device
calls; their one compiled check declines out-of-range targets and NaN/Inf inputs (targets still
checked in deploy mode); calls they do not key go to the implementation."""

from __future__ import annotations

import pytest
import torch
from torch_rbln.registry import _launch, loss

import torch_rbln  # noqa: F401
from torch_rbln import registry

from .planned import general_path, planned, to_cpu

A = torch.ops.aten


def _row(name: str) -> dict:
    return registry.fallback_report().get(name, {"device": 0, "cpu": 0, "reasons": {}})


def _logp():
    return torch.log_softmax(torch.randn(4, 3), 1)


TARGET = [0, 2, -100, 1]  # with an ignored row

CASES = {
    "nll_mean": ("nll_loss_forward.default", lambda: ((_logp(), torch.tensor(TARGET), None, 1, -100), {})),
    "nll_sum_weighted": ("nll_loss_forward.default",
                         lambda: ((_logp(), torch.tensor(TARGET), torch.rand(3) + 0.5, 2, -100), {})),
    "nll_backward": ("nll_loss_backward.default",
                     lambda: ((torch.tensor(1.5), _logp(), torch.tensor(TARGET), None, 1, -100,
                               torch.tensor(3.0)), {})),
    "nll_backward_none": ("nll_loss_backward.default",
                          lambda: ((torch.randn(4), _logp(), torch.tensor(TARGET), None, 0, -100,
                                    torch.tensor(0.0)), {})),
    "nll_backward_weighted_vector": ("nll_loss_backward.default",
                                     lambda: ((torch.tensor(0.5), torch.log_softmax(torch.randn(3), 0),
                                               torch.tensor(2), torch.rand(3) + 0.5, 2, -100,
                                               torch.tensor(1.0)), {})),
}


@pytest.mark.parametrize("case", list(CASES))
def test_plain_loss_calls_take_the_plan_with_the_general_results(case, monkeypatch):
    name, make = CASES[case]
    overload = registry._overload(name)
    torch.manual_seed(0)
    args, kwargs = make()
    dargs = tuple(a.to("rbln") if isinstance(a, torch.Tensor) else a for a in args)
    with general_path():
        general = overload(*dargs, **kwargs)  # the reference: the checked implementation
    registry._kernels[name].plans().clear()
    registry.reset_fallback_report()
    first = overload(*dargs, **kwargs)  # a new plan: the checked launch
    monkeypatch.setattr(_launch, "launch", lambda *a, **k: (_ for _ in ()).throw(AssertionError("checked")))
    again = overload(*dargs, **kwargs)  # the kept launch
    row = _row(f"aten::{name.split('.')[0]}")
    assert row["device"] == 2 and row["cpu"] == 0, row
    assert len(registry._kernels[name].plans()) == 1
    expected = overload(*args, **kwargs)
    expected = list(expected) if isinstance(expected, tuple) else expected
    for fast in (first, again):
        torch.testing.assert_close(to_cpu(fast), to_cpu(general), atol=0, rtol=0)
        torch.testing.assert_close(to_cpu(fast), expected, atol=1e-5, rtol=1e-5)


def test_the_loss_plans_decline_an_out_of_range_target():
    """The compiled range check of the targets: an out-of-range class leaves the plan (the
    implementation then raises torch's error); an ignored target (ignore_index) does not."""
    x = _logp().to("rbln")
    good, bad = torch.tensor([0, 2, 1, 1]).to("rbln"), torch.tensor([0, 3, 1, 1]).to("rbln")
    ignored = torch.tensor([0, -100, 1, 1]).to("rbln")
    _, total = A.nll_loss_forward.default(x, good, None, 1, -100)
    grad = torch.ones(()).to("rbln")
    forward, backward = planned("nll_loss_forward.default"), planned("nll_loss_backward.default")
    assert forward((x, good, None, 1, -100), {}) is not None
    assert forward((x, ignored, None, 1, -100), {}) is not None
    assert forward((x, bad, None, 1, -100), {}) is None
    assert backward((grad, x, good, None, 1, -100, total), {}) is not None
    assert backward((grad, x, bad, None, 1, -100, total), {}) is None
    for _ in range(2):  # the second call meets a kept plan: it must decline all the same
        registry.reset_fallback_report()
        with pytest.raises(IndexError):
            A.nll_loss_forward.default(x, bad, None, 1, -100)
        assert _row("aten::nll_loss_forward")["reasons"] == {"target out of bounds": 1}
        A.nll_loss_forward.default(x, good, None, 1, -100)


def test_the_loss_plans_decline_a_nan_input_and_check_targets_in_deploy_mode(monkeypatch):
    """nll_loss's one compiled check: a NaN in x (forward), in grad or total_weight (backward) leaves
    the plan; in deploy mode the NaN runs on it, but an out-of-range target never does."""
    x = _logp().to("rbln")
    good, bad = torch.tensor([0, 2, 1, 1]).to("rbln"), torch.tensor([0, 3, 1, 1]).to("rbln")
    weight = torch.rand(3).to("rbln")
    _, total = A.nll_loss_forward.default(x, good, weight, 2, -100)
    grad = torch.ones(()).to("rbln")
    forward, backward = planned("nll_loss_forward.default"), planned("nll_loss_backward.default")
    nan_x = x.cpu().clone()
    nan_x[3, 1] = float("nan")
    nan_x = nan_x.to("rbln")
    nan_scalar = torch.tensor(float("nan")).to("rbln")
    nan_weight = torch.tensor([1.0, float("inf"), 1.0]).to("rbln")
    assert forward((x, good, weight, 2, -100), {}) is not None
    assert forward((nan_x, good, weight, 2, -100), {}) is None
    assert forward((x, good, nan_weight, 2, -100), {}) is None
    assert backward((grad, x, good, weight, 2, -100, total), {}) is not None
    assert backward((grad, nan_x, good, weight, 2, -100, total), {}) is None
    assert backward((nan_scalar, x, good, weight, 2, -100, total), {}) is None
    assert backward((grad, x, good, weight, 2, -100, nan_scalar), {}) is None
    monkeypatch.setenv("TORCH_RBLN_DEPLOY", "ON")
    assert forward((nan_x, good, weight, 2, -100), {}) is not None
    assert backward((grad, nan_x, good, weight, 2, -100, total), {}) is not None
    assert forward((x, bad, weight, 2, -100), {}) is None
    assert backward((grad, x, bad, weight, 2, -100, total), {}) is None


def test_loss_calls_no_plan_takes_go_to_the_implementation():
    x = _logp().to("rbln")
    target = torch.tensor([0, 2, 1, 1]).to("rbln")
    forward = planned("nll_loss_forward.default")
    assert forward((x, target, None, 0, -100), {}) is None  # reduction none: total_weight filled there
    assert forward((x, target.cpu(), None, 1, -100), {}) is None  # CPU targets
    assert forward((x, target.int(), None, 1, -100), {}) is None  # int32 targets
    assert forward((x.t(), target[:3], None, 1, -100), {}) is None  # not contiguous
    assert forward((x, target, torch.rand(4).to("rbln"), 1, -100), {}) is None  # a weight of another size
    assert forward((x, target[:2], None, 1, -100), {}) is None  # rows and targets do not line up
    assert forward((x.double(), target, None, 1, -100), {}) is None  # a dtype without kernels
    backward = planned("nll_loss_backward.default")
    grad, total = torch.ones(()).to("rbln"), torch.ones(()).to("rbln")
    assert backward((grad, x, target, None, 1, -100, total), {}) is not None
    assert backward((torch.ones(2).to("rbln"), x, target, None, 1, -100, total), {}) is None  # grad shape
    assert backward((grad, x, target, None, 5, -100, total), {}) is None  # an unknown reduction
    assert loss.REDUCTIONS == (0, 1, 2)
