"""Every float16 and bfloat16 bit pattern through the ops whose result is one rounding of a value the
kernel computes exactly (or as torch's CPU computes it, in float32): the device's bits must be the CPU's.

Why: half-precision tensors are read and written through hand-written conversions in the numba
backend (`f16_bits_to_f32`, `f32_to_f16_bits`, `round_bf16`, ...). A wrong subnormal, a rounding tie
sent the wrong way, a NaN turned into an infinity at the overflow threshold: each shows only on a
few of the 65,536 patterns, which the OpInfo samples' random values rarely hold. Deploy mode
(`TORCH_RBLN_DEPLOY=ON`) keeps NaN/Inf inputs on the device, so the kernels see every pattern.

fmod and remainder are compared with float64's exact remainder rounded once: that is what the
kernels compute, and torch's CPU too for short tensors, but its vectorised bfloat16 path divides
first and gives NaN (or a wrong value) for ~12% of random pairs (session 39: 24,662 of 200,000)."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

HALVES = [torch.float16, torch.bfloat16]


def _every_value(dtype: torch.dtype) -> torch.Tensor:
    """All 65,536 bit patterns of `dtype` (NaNs with every payload, both infinities and zeros, every
    subnormal), in bit order."""
    return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)


def _assert_same_bits(got: torch.Tensor, expected: torch.Tensor, inputs: tuple) -> None:
    """The same bits at every element but NaN, which must be NaN where the CPU's is (payloads may
    differ: a float32 round trip quiets them)."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    got = got.cpu()
    if not got.dtype.is_floating_point:
        wrong = got != expected
    else:
        both_nan = got.isnan() & expected.isnan()
        wrong = (got.view(torch.int16) != expected.view(torch.int16)) & ~both_nan
    if wrong.any():
        where = wrong.nonzero().flatten()[:5].tolist()
        cases = [(tuple(x[i].item() for x in inputs), got[i].item(), expected[i].item()) for i in where]
        raise AssertionError(f"{int(wrong.sum())} elements differ from the CPU, e.g. (inputs, rbln, cpu): "
                             f"{cases}")


def _device_calls(op: str) -> tuple[int, int]:
    row = registry.fallback_report().get(op, {"device": 0, "cpu": 0})
    return row["device"], row["cpu"]


UNARY = {"neg": torch.neg, "abs": torch.abs, "floor": torch.floor, "sqrt": torch.sqrt}


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_every_bit_pattern_through_a_unary_op_gives_the_cpus_bits(name, dtype, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_DEPLOY", "ON")
    x = _every_value(dtype)
    registry.reset_fallback_report()
    _assert_same_bits(UNARY[name](x.to("rbln")), UNARY[name](x), (x,))
    assert _device_calls(f"aten::{name}") == (1, 0)


# a is every pattern, b the same patterns shuffled: each value meets the others as either operand
BINARY = {"add": torch.add, "mul": torch.mul, "div": torch.div, "maximum": torch.maximum, "lt": torch.lt}
EXACT_REMAINDERS = {"fmod": torch.fmod, "remainder": torch.remainder}


def _pairs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    a = _every_value(dtype)
    return a, a[torch.randperm(a.numel(), generator=torch.Generator().manual_seed(5))]


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_every_bit_pattern_through_a_binary_op_gives_the_cpus_bits(name, dtype, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_DEPLOY", "ON")
    a, b = _pairs(dtype)
    registry.reset_fallback_report()
    _assert_same_bits(BINARY[name](a.to("rbln"), b.to("rbln")), BINARY[name](a, b), (a, b))
    assert _device_calls(f"aten::{name}") == (1, 0)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("name", sorted(EXACT_REMAINDERS))
def test_fmod_and_remainder_of_every_bit_pattern_are_exact(name, dtype, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_DEPLOY", "ON")
    a, b = _pairs(dtype)
    op = EXACT_REMAINDERS[name]
    registry.reset_fallback_report()
    got = op(a.to("rbln"), b.to("rbln"))
    _assert_same_bits(got, op(a.double(), b.double()).to(dtype), (a, b))
    assert _device_calls(f"aten::{name}") == (1, 0)
