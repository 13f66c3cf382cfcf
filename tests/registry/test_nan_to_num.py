"""`torch.nan_to_num` on device kernels (three masked fills: NaN, +inf, -inf), registered exact since
NaN and Inf inputs are what it is for: bitwise the CPU's for the default and given replacement values,
in float32 and half precision (defaults: the dtype's largest and lowest finite values), every form;
integer and non-contiguous inputs go to the CPU visibly."""

from __future__ import annotations

import math

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

VALUES = [1.0, math.nan, math.inf, -math.inf, -0.0, 3.5e38, -2.0, 1e-40]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("replacements", [{}, {"nan": 7.0}, {"nan": 1.0, "posinf": 5.0, "neginf": -5.0}],
                         ids=["defaults", "nan", "all"])
def test_matches_the_cpu_bitwise_on_device(dtype, replacements):
    registry.reset_fallback_report()
    x = torch.tensor(VALUES).to(dtype)
    got, expected = torch.nan_to_num(x.to("rbln"), **replacements).cpu(), torch.nan_to_num(x, **replacements)
    assert torch.equal(got, expected) and torch.equal(torch.signbit(got), torch.signbit(expected))
    assert registry.fallback_report()["aten::nan_to_num"] == {"device": 1, "cpu": 0, "reasons": {}}


def test_in_place_and_out_forms():
    x = torch.tensor(VALUES)
    device = x.to("rbln")
    assert torch.nan_to_num_(device) is device and torch.equal(device.cpu(), torch.nan_to_num(x))
    out = torch.empty(len(VALUES), device="rbln")
    assert torch.nan_to_num(x.to("rbln"), nan=2.0, out=out) is out
    assert torch.equal(out.cpu(), torch.nan_to_num(x, nan=2.0))


def test_integer_and_non_contiguous_inputs_go_to_the_cpu_visibly():
    registry.reset_fallback_report()
    ints = torch.arange(4)
    assert torch.equal(torch.nan_to_num(ints.to("rbln")).cpu(), ints)
    strided = torch.tensor([[1.0, math.nan], [math.inf, 2.0]]).t()
    got = torch.nan_to_num(strided.to("rbln"))
    assert torch.equal(got.cpu(), torch.nan_to_num(strided)) and got.stride() == strided.stride()
    row = registry.fallback_report()["aten::nan_to_num"]
    assert row["device"] == 0 and row["cpu"] == 2, row
