"""var_mean and std_mean (two device reductions each) against the CPU, and group_norm, which calls
var_mean, running every op call of its forward on device kernels."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry

TOLERANCE = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (3e-2, 3e-2)}


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("function", [torch.var_mean, torch.std_mean], ids=["var_mean", "std_mean"])
def test_var_mean_and_std_mean_match_the_cpu_on_device(function, dtype):
    x = torch.randn(4, 8, 6, generator=torch.Generator().manual_seed(6)).to(dtype)
    atol, rtol = TOLERANCE[dtype]
    registry.reset_fallback_report()
    for keywords in ({}, {"dim": 1}, {"dim": (0, 2), "keepdim": True, "correction": 0}):
        for expected, got in zip(function(x, **keywords), function(x.to("rbln"), **keywords), strict=True):
            assert got.shape == expected.shape and got.dtype == expected.dtype
            torch.testing.assert_close(got.cpu(), expected, atol=atol, rtol=rtol)
    assert not any(row["cpu"] for row in registry.fallback_report().values())


def test_group_norm_runs_on_device_and_matches_the_cpu():
    generator = torch.Generator().manual_seed(7)
    x, weight, bias = torch.randn(4, 8, 6, 6, generator=generator), torch.randn(8, generator=generator), \
        torch.randn(8, generator=generator)
    registry.reset_fallback_report()
    got = F.group_norm(x.to("rbln"), 2, weight.to("rbln"), bias.to("rbln"))
    torch.testing.assert_close(got.cpu(), F.group_norm(x, 2, weight, bias), atol=1e-4, rtol=1e-4)
    assert not {op: row for op, row in registry.fallback_report().items() if row["cpu"]}
