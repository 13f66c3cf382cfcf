"""The generic per-call checks look only at values a kernel reads (SPEC-device.md, NaN/Inf checks)."""

from __future__ import annotations

import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _row(name: str) -> dict:
    return registry.fallback_report().get(name, {"device": 0, "cpu": 0, "reasons": {}})


def test_nan_in_an_input_takes_the_exact_cpu_path():
    x = torch.tensor([1.0, float("nan"), 3.0, 4.0]).to("rbln")
    registry.reset_fallback_report()
    torch.testing.assert_close((x + 1).cpu(), torch.tensor([2.0, float("nan"), 4.0, 5.0]), equal_nan=True)
    assert _row("aten::add")["reasons"] == {"nan_inf": 1}


def test_out_and_overwritten_tensors_are_not_value_checked():
    garbage = torch.tensor([float("nan"), float("inf"), 0.0, 1.0])
    a, b = torch.ones(4).to("rbln"), torch.full((4,), 2.0).to("rbln")
    out = garbage.to("rbln")
    registry.reset_fallback_report()
    torch.add(a, b, out=out)
    torch.testing.assert_close(out.cpu(), torch.full((4,), 3.0))
    stale = garbage.to("rbln")
    stale.zero_()
    stale2 = garbage.to("rbln")
    stale2.fill_(5.0)
    torch.testing.assert_close(stale.cpu(), torch.zeros(4))
    torch.testing.assert_close(stale2.cpu(), torch.full((4,), 5.0))
    for name in ("aten::add", "aten::zero_", "aten::fill_"):
        assert _row(name)["cpu"] == 0 and _row(name)["device"] == 1, registry.format_report()
