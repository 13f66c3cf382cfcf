"""Arithmetic of bool tensors, which torch computes as logic (mul and minimum `and`, add and maximum `or`,
ne `xor`), on the integer kernel's bitwise ops (`registry.elementwise.binary`). `isfinite` multiplies two
bool masks, so `isclose` and `allclose` went to the CPU for it. Each result is compared with the CPU's,
dtype included."""

from __future__ import annotations

import pytest
import torch

from torch_rbln import registry


def _masks() -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(0)
    cpu = (torch.rand(6, 5, generator=generator) > 0.5, torch.rand(6, 5, generator=generator) > 0.5,
           torch.rand(5, generator=generator) > 0.5)
    return cpu, tuple(t.to("rbln") for t in cpu)


CASES = {
    "mul": lambda a, b, c: a * b,
    "add": lambda a, b, c: a + b,
    "maximum": lambda a, b, c: torch.maximum(a, b),
    "minimum broadcast": lambda a, b, c: torch.minimum(a, c),
    "ne broadcast": lambda a, b, c: a != c,
    "mul by True": lambda a, b, c: a * True,
    "add False": lambda a, b, c: a + False,
    "mul_": lambda a, b, c: a.clone().mul_(b),
    "add_ broadcast": lambda a, b, c: a.clone().add_(c),
    "mul out=": lambda a, b, c: torch.mul(a, b, out=torch.empty_like(a)),
}


@pytest.mark.parametrize("case", CASES)
def test_bool_arithmetic_matches_the_cpu_on_the_device(case):
    cpu, device = _masks()
    registry.reset_fallback_report()
    got = CASES[case](*device)
    expected = CASES[case](*cpu)
    assert got.device.type == "rbln" and got.dtype == expected.dtype == torch.bool
    assert torch.equal(got.cpu(), expected)
    assert not {op: row for op, row in registry.fallback_report().items() if row["cpu"]}


def test_isclose_and_allclose_run_on_the_device():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(64, generator=generator)
    y = x + torch.randn(64, generator=generator) * 1e-6
    y[3], x[5], y[5] = float("nan"), float("inf"), float("inf")
    registry.reset_fallback_report()
    for equal_nan in (False, True):
        got = torch.isclose(x.to("rbln"), y.to("rbln"), equal_nan=equal_nan)
        assert torch.equal(got.cpu(), torch.isclose(x, y, equal_nan=equal_nan))
    assert torch.allclose(x.to("rbln"), x.to("rbln")) and not torch.allclose(x.to("rbln"), y.to("rbln"))
    assert not {op: row for op, row in registry.fallback_report().items() if row["cpu"]}


def test_what_bools_do_not_allow_still_raises_torchs_error():
    _, (a, b, _) = _masks()
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors"):
        a - b
