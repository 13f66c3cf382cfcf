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
