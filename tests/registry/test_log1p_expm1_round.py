"""log1p, expm1 and round on the unary kernel: against the CPU on special and hard values (ties of
round, tiny arguments where log(1 + x) and exp(x) - 1 cancel, -1, +-Inf, NaN, +-0, subnormals), in
float32 and half precision, every form (new, `out=`, in place), and all on device kernels (the three
are registered exact: their special values are the CPU's, so inputs are not scanned)."""

from __future__ import annotations

import math

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

HARD = [0.0, -0.0, 1e-8, -1e-8, 1e-4, -1e-4, -0.3, 0.5, -0.5, 1.5, 2.5, -2.5, 3.5, 0.49999997, -0.49999997,
        -1.0, -1.5, -0.9999999, 8388607.5, 8388609.0, -8388607.5, 1e10, 88.0, 89.0, -104.0, -20.0, 20.0,
        math.inf, -math.inf, math.nan, 1e-40, -1e-40, 0.6931472]
OPS = ["log1p", "expm1", "round"]
# float32: relative to the CPU's value (a few ulps: both are ~1 ulp from the exact result); half
# precision: computed in float32 and rounded once, as the CPU does
RTOL = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", OPS)
def test_hard_values_match_the_cpu_on_device(name, dtype):
    registry.reset_fallback_report()
    x = torch.tensor(HARD).to(dtype)
    op = getattr(torch, name)
    got, expected = op(x.to("rbln")).cpu(), op(x)
    assert torch.equal(got.isnan(), expected.isnan())
    special = expected.isinf() | (expected == 0)  # (NaN where the CPU's is; its payload bits may differ)
    assert torch.equal(_bits(got[special]), _bits(expected[special])), name  # +-Inf, signed zeros
    torch.testing.assert_close(got, expected, rtol=RTOL[dtype], atol=0, equal_nan=True)
    if name == "round":
        finite = ~expected.isnan()
        assert torch.equal(_bits(got[finite]), _bits(expected[finite]))  # ties to even, exactly
    assert all(entry["cpu"] == 0 for entry in registry.fallback_report().values())


@pytest.mark.parametrize("name", OPS)
def test_random_values_every_form(name):
    registry.reset_fallback_report()
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(3, 1000, generator=generator) * 4
    if name == "log1p":
        x = x.clamp_min(-0.999)
    op = getattr(torch, name)
    expected = op(x)
    device = x.to("rbln")
    torch.testing.assert_close(op(device).cpu(), expected, rtol=1e-6, atol=1e-7)
    out = torch.empty_like(device)
    assert op(device, out=out) is out
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-6, atol=1e-7)
    in_place = device.clone()
    assert getattr(in_place, f"{name}_")() is in_place
    torch.testing.assert_close(in_place.cpu(), expected, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(op(device.t()).cpu(), op(x.t()), rtol=1e-6, atol=1e-7)  # strided
    assert all(entry["cpu"] == 0 for entry in registry.fallback_report().values())


def test_round_with_decimals_runs_on_the_cpu_visibly():
    registry.reset_fallback_report()
    x = torch.tensor([1.2345, -2.5551])
    torch.testing.assert_close(torch.round(x.to("rbln"), decimals=2).cpu(), torch.round(x, decimals=2))
    report = registry.fallback_report()["aten::round"]  # round.decimals: no rbln kernel
    assert report == {"device": 0, "cpu": 1, "reasons": {"no rbln kernel": 1}}
