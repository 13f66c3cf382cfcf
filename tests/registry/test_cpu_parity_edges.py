"""Eager results and errors that must be those of the CPU: outputs aliasing inputs, float -> int casts
of NaN/Inf/out-of-range values, float arange."""

from __future__ import annotations

import math

import pytest
import torch

import torch_rbln  # noqa: F401


def _outcome(fn, device):
    try:
        return "ok", fn(device).cpu()
    except RuntimeError as error:
        return "error", str(error)


def _same_as_cpu(fn):
    cpu, rbln = _outcome(fn, "cpu"), _outcome(fn, "rbln")
    assert cpu[0] == rbln[0], (cpu, rbln)
    if cpu[0] == "ok":
        torch.testing.assert_close(rbln[1], cpu[1], rtol=0, atol=0, equal_nan=True)
    else:
        assert rbln[1] == cpu[1]


def _add_into_transpose(device):
    x, y = torch.ones(3, 3, device=device), torch.ones(3, 3, device=device)
    return torch.add(x, y, out=x.t())


def _cat_into_input(device):
    x = torch.ones(3, device=device)
    return torch.cat([x, x], out=x)


def _cat_into_its_own_parts(device):
    x = torch.arange(6.0, device=device)
    return torch.cat([x[:3], x[3:]], out=x)


def _mul_into_shifted_view(device):
    x = torch.arange(8.0, device=device)
    return torch.mul(x[:6], 2, out=x[2:])


def _inplace_with_transpose(device):
    x = torch.ones(3, 3, device=device)
    return x.add_(x.t())


def _add_into_itself(device):  # the same view: allowed
    x = torch.arange(4.0, device=device)
    return torch.add(x, x, out=x)


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
@pytest.mark.parametrize("fn", [_add_into_transpose, _cat_into_input, _cat_into_its_own_parts,
                                _mul_into_shifted_view, _inplace_with_transpose, _add_into_itself])
def test_output_aliasing_an_input_behaves_as_on_cpu(fn):
    _same_as_cpu(fn)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                                   torch.bool])
@pytest.mark.parametrize("source", [torch.float32, torch.float16, torch.bfloat16])
def test_float_to_int_casts_of_special_values_match_cpu(source, dtype):
    values = [float("nan"), float("inf"), -float("inf"), 1e30, -1e30, 300.0, -129.5, 2.7, -2.7, 0.0]
    _same_as_cpu(lambda device: torch.tensor(values, dtype=source, device=device).to(dtype))
    _same_as_cpu(lambda device: torch.tensor(values[3:], dtype=source, device=device).to(dtype))  # no NaN


def test_float_to_int_casts_of_ordinary_values_run_on_device():
    from torch_rbln.registry import fallback_report, reset_fallback_report

    reset_fallback_report()
    x = torch.linspace(-100, 100, 64).to("rbln")
    assert torch.equal(x.to(torch.int32).cpu(), torch.linspace(-100, 100, 64).to(torch.int32))
    assert fallback_report().get("aten::_copy_from", {}).get("cpu", 0) == 0


@pytest.mark.parametrize("args", [(0, 1, 0.1), (1, -1, -0.3), (-2.5, 7.25, 0.35), (0, 100, 0.7), (3,),
                                  (0.1, 0.2, 0.01), (-3, 497, 0.1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64])
def test_arange_matches_cpu_bit_for_bit(args, dtype):
    if dtype == torch.int64 and any(isinstance(a, float) for a in args):
        dtype = torch.float32
    _same_as_cpu(lambda device: torch.arange(*args, dtype=dtype, device=device))


@pytest.mark.parametrize(("dtype", "value"), [(torch.float16, 65519.0), (torch.float16, -1e30),
                                              (torch.bfloat16, 3.39e38)])
def test_fill_and_masked_fill_beyond_the_dtype_raise_torchs_overflow_error(dtype, value):
    """torch refuses to write a finite number larger than the dtype's largest value (a kernel would store
    an infinity); infinities and the largest value itself are written. Plan and checked path both."""
    torch.ones(1, device="rbln").add_(1)  # the kernels are loaded: fill_ then takes its plan
    mask = torch.tensor([True, False, True])
    for _ in range(2):
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.zeros(3, dtype=dtype, device="rbln").masked_fill(mask.to("rbln"), value)
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.zeros(3, dtype=dtype, device="rbln").fill_(value)
    largest = torch.finfo(dtype).max
    for fine in (largest, -math.inf):
        got = torch.zeros(3, dtype=dtype, device="rbln").masked_fill(mask.to("rbln"), fine)
        assert torch.equal(got.cpu(), torch.zeros(3, dtype=dtype).masked_fill(mask, fine))
        assert torch.equal(torch.zeros(3, dtype=dtype, device="rbln").fill_(fine).cpu(),
                           torch.full((3,), fine, dtype=dtype))
