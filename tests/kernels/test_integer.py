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
    "floor division rounds toward -inf": lambda a, b: (a - 2**45) // 7,
    "floor division by a negative number": lambda a, b: torch.div(b, -3, rounding_mode="floor"),
    "floor division of the minimum by -1 wraps": lambda a, b: torch.full(
        (2,), -2**63, dtype=torch.int64).to(a.device) // -1,
    "abs and neg": lambda a, b: torch.abs(b) - torch.neg(a - 2**45),
    "abs of the minimum wraps": lambda a, b: torch.abs(
        torch.full((1,), -2**31, dtype=torch.int32).to(a.device)),
    "fill int64 beyond float32": lambda a, b: a.clone().fill_(2**40 + 1),
    "fill bool and zero_": lambda a, b: (a > 0).fill_(True).long() + a.clone().zero_(),
    # true division: each operand converted to the default float dtype, then divided (as torch does,
    # so int64 values beyond float32's exact integers round identically)
    "true division by a number": lambda a, b: a / 7,
    "true division by a tensor (broadcast, int64 by int32)": lambda a, b: a / b,
    "true division of bools by a wrapped-number tensor": lambda a, b: (b > 0) / torch.tensor(3),
    "true division into out=": lambda a, b: torch.div(b, 3, out=torch.empty(4).to(b.device)),
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
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type"):
        a.clone().div_(2)  # true division in place of an integer tensor: torch's error, from the CPU
    with pytest.raises(RuntimeError, match="alpha must not be a floating point"):
        torch.add(a, b, alpha=1.5)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        a // 0  # integer division by zero: torch's error, from the CPU
    report = registry.fallback_report()
    assert report["aten::floor_divide"]["reasons"] == {"integer floor division by a tensor or by zero": 1}
    assert report["aten::div_"]["reasons"] == {"dtype int64": 1}
    assert report["aten::add"]["reasons"] == {"non-integer alpha": 1}


MASK_A = torch.tensor([[True, False, True], [False, False, True]])
MASK_B = torch.tensor([True, True, False])
I64 = torch.tensor([5, -3, 0, 2**40 + 255], dtype=torch.int64)
J64 = torch.tensor([3, 6, -1, 1], dtype=torch.int64)

BITWISE = {
    "and of bool masks (broadcast)": lambda: MASK_A & MASK_B,
    "or of bool masks": lambda: MASK_A | MASK_B,
    "xor of bool masks": lambda: MASK_A ^ MASK_B,
    "and int64 beyond float32": lambda: I64 & J64,
    "or with an int": lambda: I64 | 6,
    "xor int32 with int64": lambda: J64.int() ^ I64,
    "not bool": lambda: ~MASK_A,
    "not int64": lambda: ~I64,
    "not uint8 wraps": lambda: ~torch.tensor([0, 5, 255], dtype=torch.uint8),
    "not int16": lambda: ~torch.tensor([0, -7, 32767], dtype=torch.int16),
    "clamp int64 with int bounds": lambda: torch.clamp(I64, -1, 2**41),
    "clamp int64 upper only": lambda: torch.clamp(I64, max=4),
    "clamp low > high gives high": lambda: torch.clamp(J64, 5, 2),
    "clamp int32 stays int32": lambda: torch.clamp(J64.int(), min=0),
}


def _on_rbln(value):
    return value.to("rbln") if isinstance(value, torch.Tensor) else value


@pytest.mark.parametrize("case", BITWISE.values(), ids=BITWISE.keys())
def test_bitwise_ops_and_integer_clamp_are_exact_on_device(case):
    expected = case()
    # the same expression on rbln: the module's tensors moved to the device, the ones it builds made there
    registry.reset_fallback_report()
    globals_rbln = {name: _on_rbln(value) for name, value in
                    {"MASK_A": MASK_A, "MASK_B": MASK_B, "I64": I64, "J64": J64}.items()}
    actual = _replay(case, globals_rbln)
    assert actual.device.type == "rbln" and actual.dtype == expected.dtype
    assert torch.equal(actual.cpu(), expected)
    report = registry.fallback_report()
    assert all(row["cpu"] == 0 for row in report.values()), registry.format_report(report)


def _replay(case, tensors: dict):
    """Run `case` with this module's tensors swapped for `tensors` (literal tensors it builds itself are
    moved to rbln by `torch.tensor`'s device default)."""
    saved = {name: globals()[name] for name in tensors}
    globals().update(tensors)
    try:
        with torch.device("rbln"):
            return case()
    finally:
        globals().update(saved)


def test_bitwise_in_place_and_out_forms():
    x = I64.to("rbln")
    x &= J64.to("rbln")
    assert torch.equal(x.cpu(), I64 & J64)
    out = torch.empty(4, dtype=torch.int64).to("rbln")
    torch.bitwise_or(I64.to("rbln"), J64.to("rbln"), out=out)
    assert torch.equal(out.cpu(), I64 | J64)
    mask = MASK_A.clone().to("rbln")
    mask.bitwise_not_()
    assert torch.equal(mask.cpu(), ~MASK_A)
    y = J64.to("rbln")
    y.clamp_(0, 4)
    assert torch.equal(y.cpu(), J64.clamp(0, 4))


def test_bitwise_of_floats_raises_torchs_error_and_int8_clamp_declines():
    registry.reset_fallback_report()
    with pytest.raises(RuntimeError, match="not implemented for 'Float'"):
        torch.ones(2).to("rbln") & torch.ones(2).to("rbln")
    assert registry.fallback_report()["aten::bitwise_and"]["reasons"] == {"dtype float32": 1}
    x = torch.tensor([1, 7, -2], dtype=torch.int8)
    assert torch.equal(torch.clamp(x.to("rbln"), 0).cpu(), torch.clamp(x, 0))  # on the CPU fallback
    assert registry.fallback_report()["aten::clamp"]["reasons"] == {"dtype int8 with these bounds": 1}
    # float bounds promote an integer tensor, as on the CPU: the float kernel
    torch.testing.assert_close(torch.clamp(I64.to("rbln"), 0.5, 3).cpu(), torch.clamp(I64, 0.5, 3))
