"""Exact integer elementwise ops (int32/int64) on device: no float rounding, wrap-around like torch."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

A = torch.arange(12, dtype=torch.int64).reshape(3, 4) * (2**40) + 3  # beyond float32's exact integers
B = torch.arange(4, dtype=torch.int32) - 1

CASES = {
    "add broadcast int64+int32": lambda a, b: a + b,
    "sub with alpha": lambda a, b: torch.sub(a, b, alpha=3),
    "mul": lambda a, b: a * b,
    "scalar add": lambda a, b: a + 7,
    "wrapped-number tensor": lambda a, b: a * torch.tensor(5),
    "le against a scaled int32": lambda a, b: a <= b * 2**40,
    "gt scalar": lambda a, b: b > 0,
    "maximum": lambda a, b: torch.maximum(a, b.long()),
    "int32 stays int32": lambda a, b: b + b,
    "overflow wraps": lambda a, b: torch.full((2,), 2**62, dtype=torch.int64).to(a.device) * 4,
}


@pytest.mark.parametrize("op", CASES.values(), ids=CASES.keys())
def test_integer_ops_are_exact_on_device(op):
    expected = op(A, B)
    a, b = A.to("rbln"), B.to("rbln")
    registry.reset_fallback_report()
    actual = op(a, b)
    assert actual.dtype == expected.dtype
    assert torch.equal(actual.cpu(), expected)
    report = registry.fallback_report()
    assert all(row["cpu"] == 0 for row in report.values()), registry.format_report(report)


def test_in_place_and_declines():
    a, b = A.to("rbln"), B.to("rbln")
    x = a.clone()
    x.add_(b, alpha=2)
    x *= 3
    assert torch.equal(x.cpu(), (A + 2 * B) * 3)
    registry.reset_fallback_report()
    assert torch.equal((a / 2).cpu(), A / 2)  # true division: float result, no integer kernel
    with pytest.raises(RuntimeError, match="alpha must not be a floating point"):
        torch.add(a, b, alpha=1.5)
    report = registry.fallback_report()
    assert report["aten::div"]["reasons"] == {"dtype int64": 1}
    assert report["aten::add"]["reasons"] == {"non-integer alpha": 1}
