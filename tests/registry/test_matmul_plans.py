"""Matmul launches keep the autotuner's choice per launch shape: later launches skip the tuner."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch_rbln.registry import _ops

import torch_rbln  # noqa: F401
from torch_rbln import registry


def test_a_shape_seen_before_runs_the_tuners_config_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    tuner = _ops._k("matmul").matmul_kernel
    a, b, w, bias = torch.randn(3, 5), torch.randn(5, 7), torch.randn(6, 5), torch.randn(6)
    da, db, dw, dbias = a.to("rbln"), b.to("rbln"), w.to("rbln"), bias.to("rbln")
    first_mm = (da @ db).cpu()
    first_linear = F.linear(da, dw, dbias).cpu()

    tuned = []
    real_run = type(tuner).run
    monkeypatch.setattr(type(tuner), "run", lambda self, *args, **kwargs: tuned.append(1) or
                        real_run(self, *args, **kwargs))
    registry.reset_fallback_report()
    again_mm = (da @ db).cpu()
    again_linear = F.linear(da, dw, dbias).cpu()
    assert not tuned  # both shapes were planned by their first launch
    assert torch.equal(again_mm, first_mm) and torch.equal(again_linear, first_linear)
    torch.testing.assert_close(again_mm, a @ b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(again_linear, F.linear(a, w, bias), rtol=1e-5, atol=1e-5)
    assert all(row["cpu"] == 0 for row in registry.fallback_report().values())

    other = torch.randn(5, 9)
    torch.testing.assert_close((da @ other.to("rbln")).cpu(), a @ other, rtol=1e-5, atol=1e-5)
    assert tuned  # a new shape asks the tuner
