"""erfinv on the device (`kernels/elementwise.py` `_erfinv`: Giles' single-precision guess, then one
Newton step in float64): within one float32 ulp of the float64 result over (-1, 1) (torch's CPU kernel
is within 0.54), the special values as torch's, both DSL backends; `trunc_normal_` (which calls
`erfinv_`) initialises rbln parameters without the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torch_rbln import registry

from .checks import cpu_calls


def _ulps(got: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    spacing = torch.from_numpy(np.spacing(np.abs(exact.float().numpy()))).double()
    return (got.double() - exact).abs() / spacing


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_erfinv_is_within_one_ulp_over_the_open_interval(backend, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", backend)
    points = 200_001 if backend == "numba" else 4_001
    x = torch.linspace(-1, 1, points)[1:-1]
    x = torch.cat([x, torch.tensor([1e-38, -1e-30, 0.5, 0.9999999, -0.99999994, 0.84, -0.97])])
    registry.reset_fallback_report()
    got = torch.erfinv(x.to("rbln")).cpu()
    assert _ulps(got, torch.erfinv(x.double())).max() <= 1.0
    assert not cpu_calls(), cpu_calls()


def test_special_values_are_torchs():
    x = torch.tensor([1.0, -1.0, 0.0, -0.0, 1.5, -2.0, float("inf")])
    got = torch.erfinv(x.to("rbln")).cpu()
    expected = torch.erfinv(x)
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(got[:4], expected[:4]) and torch.equal(got[:4].signbit(), expected[:4].signbit())


def test_half_types_and_in_place():
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(257, generator=generator) * 1.98 - 0.99
    for dtype in (torch.float16, torch.bfloat16):
        torch.testing.assert_close(torch.erfinv(x.to(dtype).to("rbln")).cpu(), torch.erfinv(x.to(dtype)),
                                   atol=0, rtol=1e-2)
    y = x.to("rbln")
    y.erfinv_()
    torch.testing.assert_close(y.cpu(), torch.erfinv(x), atol=1e-6, rtol=1e-6)


def test_trunc_normal_initialises_on_the_device():
    weight = torch.empty(64, 64).to("rbln")
    registry.reset_fallback_report()
    torch.nn.init.trunc_normal_(weight, std=0.02, a=-0.04, b=0.04)
    values = weight.cpu()
    assert values.abs().max() <= 0.04 and 0.01 < values.std() < 0.03
    assert not cpu_calls(), cpu_calls()
