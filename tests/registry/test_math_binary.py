"""fmod, remainder, atan2, hypot and xlogy on the float binary kernels (`kernels/elementwise.py` op codes
FMOD..XLOGY, registered by `table._binary_family` under aten's overload names). fmod and remainder
compute what torch's CPU kernel computes (C's fmod, then the divisor added where the signs differ), so
they are compared bit for bit (NaN as NaN, whatever its sign), infinities, signed zeros and zero
divisors included, unscanned; atan2 (libm), hypot (float64) and xlogy (kl_div's target * log(target))
within a few float32 ulps."""

from __future__ import annotations

import math

import pytest
import torch

from torch_rbln import registry

from .checks import cpu_calls

SPECIAL = [0.0, -0.0, 1.5, -1.5, 7.0, -7.25, 1e-30, 3e38, float("inf"), float("-inf"), float("nan")]


def _pairs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Every pair of special values, then random values: a (n,) dividend and divisor."""
    values = torch.tensor(SPECIAL)
    a, b = values.repeat_interleave(len(SPECIAL)), values.repeat(len(SPECIAL))
    generator = torch.Generator().manual_seed(0)
    a = torch.cat([a, torch.randn(200, generator=generator) * 50])
    b = torch.cat([b, torch.randn(200, generator=generator) * 5])
    return a.to(dtype), b.to(dtype)


def _same_bits(got: torch.Tensor, expected: torch.Tensor, where: torch.Tensor | None = None) -> bool:
    """The same dtype, NaN where the CPU has NaN (whatever its sign and payload), the same bits elsewhere
    (signed zeros and infinities included); only at `where` when given."""
    got = got.cpu()
    if where is not None:
        got, expected = got[where], expected[where]
    bits = torch.int16 if got.element_size() == 2 else torch.int32
    nan = expected.isnan()
    return got.dtype == expected.dtype and torch.equal(got.isnan(), nan) and \
        torch.equal(got[~nan].view(bits), expected[~nan].view(bits))


def _representable_quotient(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Where |a / b| does not overflow the dtype: there torch's vectorised CPU fmod (a - trunc(a / b) * b)
    gives NaN for finite operands (fmod(3e38, 1e-30)), its scalar path and ours C's exact remainder."""
    with torch.no_grad():
        quotient = (a.double() / b.double()).abs()
    return ~(quotient.isfinite() & (quotient > torch.finfo(a.dtype).max))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", ["fmod", "remainder"])
def test_fmod_and_remainder_are_the_cpus_bits_special_values_included(op, dtype):
    a, b = _pairs(dtype)
    function = getattr(torch, op)
    registry.reset_fallback_report()
    forms = {
        "tensors": lambda x, y: function(x, y),
        "by a number": lambda x, y: function(x, -2.5),
        "broadcast": lambda x, y: function(x.view(-1, 1)[:40], y[:7]),
        "out=": lambda x, y: function(x, y, out=torch.empty_like(x)),
        "in place": lambda x, y: getattr(x.clone(), op + "_")(y),
    }
    for form, call in forms.items():
        got = call(a.to("rbln"), b.to("rbln"))
        where = _representable_quotient(a, b) if form in ("tensors", "out=", "in place") else None
        assert _same_bits(got, call(a, b), where), (op, dtype, form)
    assert not cpu_calls(), cpu_calls()


def test_fmod_of_a_quotient_beyond_float32_is_cs_exact_remainder():
    got = torch.fmod(torch.tensor([3e38]).to("rbln"), torch.tensor([1e-30]).to("rbln")).cpu()
    assert got.item() == torch.tensor(math.fmod(torch.tensor(3e38).item(), torch.tensor(1e-30).item())).item()


def test_python_modulo_of_a_float_tensor_runs_on_the_device():
    a, b = _pairs(torch.float32)
    registry.reset_fallback_report()
    assert _same_bits(a.to("rbln") % b.to("rbln"), a % b, _representable_quotient(a, b))
    assert _same_bits(a.to("rbln") % 3, a % 3)
    assert not cpu_calls()


@pytest.mark.parametrize("op", ["atan2", "hypot", "xlogy"])
def test_atan2_hypot_and_xlogy_match_the_cpu_within_float32_ulps(op):
    generator = torch.Generator().manual_seed(1)
    a = torch.randn(40, 33, generator=generator) * 10
    b = torch.randn(40, 33, generator=generator) * 10
    if op == "xlogy":
        a[a.abs() < 3], b = 0.0, b.abs() + 1e-3  # x = 0 gives 0 whatever log(y) is
    function = getattr(torch, op)
    registry.reset_fallback_report()
    for call in (lambda x, y: function(x, y), lambda x, y: function(x, y[0]),
                 lambda x, y: function(x, y, out=torch.empty_like(x)),
                 lambda x, y: getattr(x.clone(), op + "_")(y)):
        torch.testing.assert_close(call(a.to("rbln"), b.to("rbln")).cpu(), call(a, b), atol=1e-6, rtol=2e-6)
    assert not cpu_calls(), cpu_calls()


def test_special_values_of_the_libm_grade_ops_take_the_cpu_and_its_values():
    a, b = _pairs(torch.float32)
    registry.reset_fallback_report()
    for op in ("atan2", "hypot", "xlogy"):
        got = getattr(torch, op)(a.to("rbln"), b.to("rbln")).cpu()
        torch.testing.assert_close(got, getattr(torch, op)(a, b), equal_nan=True, atol=0, rtol=0)
    assert set(cpu_calls()) == {"aten::atan2", "aten::hypot", "aten::xlogy"}


def test_kl_div_runs_on_the_device():
    generator = torch.Generator().manual_seed(2)
    logits, target = torch.randn(8, 10, generator=generator), torch.randn(8, 10, generator=generator)

    def kl(x, y):
        return torch.nn.functional.kl_div(x.log_softmax(1), y.softmax(1), reduction="batchmean")

    registry.reset_fallback_report()
    torch.testing.assert_close(kl(logits.to("rbln"), target.to("rbln")).cpu(), kl(logits, target),
                               atol=1e-6, rtol=1e-5)
    assert not cpu_calls(), cpu_calls()
