"""Accuracy of the numba backend's own float32 math (erf32, exp32, tanh32) against libm in float64."""

from __future__ import annotations

import math
import re

import numba
import numpy as np
import pytest
from torch_rbln.dsl.backends.numba_backend import support


@numba.njit(error_model="numpy")
def _apply_erf(xs, out):
    for i in range(xs.shape[0]):
        out[i] = support.erf32(xs[i])


@numba.njit(error_model="numpy")
def _apply_exp(xs, out):
    for i in range(xs.shape[0]):
        out[i] = support.exp32(xs[i])


@numba.njit(error_model="numpy")
def _apply_tanh(xs, out):
    for i in range(xs.shape[0]):
        out[i] = support.tanh32(xs[i])


def _run(kernel, xs: np.ndarray) -> np.ndarray:
    out = np.empty_like(xs)
    kernel(xs, out)
    return out


@numba.njit(error_model="numpy")
def _libm_erf(xs, out):
    """float64 libm erf of each float32 input: the reference (0.5 ulp in float64)."""
    for i in range(xs.shape[0]):
        out[i] = math.erf(np.float64(xs[i]))


def _erf_errors(xs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    got = _run(_apply_erf, xs)
    ref = np.empty(xs.shape, dtype=np.float64)
    _libm_erf(xs, ref)
    return got, ref, np.abs(got.astype(np.float64) - ref)


def test_erf32_on_four_million_floats_within_3_1e_7_absolute_and_3_5e_7_relative():
    """The bounds the fit in support.py states (measured 3.01e-7 and 3.35e-7 on 10^7 points), on a grid
    over [-5, 5] and the positive and negative normal floats down to 2**-126, where erf(x) ~ 2x/sqrt(pi)."""
    tiny = np.float32(np.geomspace(np.finfo(np.float32).tiny, 5.0, 200_000))
    xs = np.concatenate([np.linspace(-5, 5, 4_000_001, dtype=np.float32), tiny, -tiny])
    got, ref, error = _erf_errors(xs)
    assert error.max() < 3.1e-7
    nonzero = xs != 0
    assert (error[nonzero] / np.abs(ref[nonzero])).max() < 3.5e-7
    assert np.abs(got).max() <= 1.0


def test_erf32_is_exactly_odd():
    """gelu(x) - gelu(-x) = x relies on erf(-x) = -erf(x); the formula only sees x through x^2 and x."""
    xs = np.linspace(0, 5, 2_000_001, dtype=np.float32)
    assert np.array_equal(_run(_apply_erf, xs), -_run(_apply_erf, -xs))


@pytest.mark.parametrize(("x", "expected"), [
    (0.0, 0.0), (-0.0, -0.0), (np.inf, 1.0), (-np.inf, -1.0), (3.92, 1.0), (3.9193, 1.0), (100.0, 1.0),
    (-3e38, -1.0), (3.4e38, 1.0),
])
def test_erf32_special_values(x, expected):
    got = _run(_apply_erf, np.float32([x]))[0]
    assert got == np.float32(expected) and math.copysign(1, got) == math.copysign(1, expected)


def test_erf32_nan_and_subnormals():
    assert math.isnan(_run(_apply_erf, np.float32([np.nan]))[0])
    for tiny in (1e-30, -1e-30, 1e-38):
        got = _run(_apply_erf, np.float32([tiny]))[0]
        assert got == pytest.approx(2 / math.sqrt(math.pi) * float(np.float32(tiny)), rel=2.5e-7)
    subnormal = np.float32(1e-42)  # erf rounds to a subnormal: at most half its (absolute) ulp off
    got = _run(_apply_erf, np.float32([subnormal]))[0]
    assert abs(float(got) - 2 / math.sqrt(math.pi) * float(subnormal)) <= 2 ** -150


def test_erf32_loop_vectorises():
    """The point of erf32 (no libm call, no branch): LLVM turns a loop over it into vector code."""
    _run(_apply_erf, np.zeros(8, dtype=np.float32))
    ir = _apply_erf.inspect_llvm(_apply_erf.signatures[0])
    assert "@erf" not in ir and "erff" not in ir
    assert re.search(r"fdiv <\d+ x float>", ir), "the division in erf32 stayed scalar"


def test_exp32_is_within_3_ulp():
    xs = np.linspace(-87, 88, 200_001, dtype=np.float32)
    got = _run(_apply_exp, xs).astype(np.float64)
    ref = np.exp(xs.astype(np.float64))
    assert (np.abs(got - ref) / ref).max() < 3 * np.finfo(np.float32).eps


def test_exp32_underflow_and_special_values():
    """The tail where exp32 substitutes its input (below -103.97, where exp rounds to 0, and -inf, the
    masked scores of softmax and attention) and the subnormal results just above it: each equals
    float64 exp rounded to float32 within 3 steps of 2**-149 (the 3 ulp of `test_exp32_is_within_3_ulp`
    where the results turn normal); overflow is inf, NaN stays NaN."""
    xs = np.concatenate([np.float32([-np.inf, -1e30, -200.0, -104.0, -103.98, 88.8, 1e30, np.inf]),
                         np.linspace(-103.9, -87.0, 20_001, dtype=np.float32)])
    got = _run(_apply_exp, xs)
    ref = np.exp(xs.astype(np.float64)).astype(np.float32)
    assert np.array_equal(got[:5], np.zeros(5, np.float32)) and np.isposinf(got[5:8]).all()
    assert (np.abs(got[8:].astype(np.float64) - ref[8:]) <= 3 * 2.0 ** -149).all()
    assert (got[8:] > 0).all()
    assert math.isnan(_run(_apply_exp, np.float32([np.nan]))[0])


def test_tanh32_on_four_million_floats_within_3_ulp():
    """A grid over [-12, 12] (both branches, the switch at |x| = 0.625, the saturation to +-1 near 9),
    and the normal floats down to 2**-126, where tanh(x) ~ x: relative error below 3 float32 ulp."""
    tiny = np.float32(np.geomspace(np.finfo(np.float32).tiny, 0.7, 200_000))
    xs = np.concatenate([np.linspace(-12, 12, 4_000_001, dtype=np.float32), tiny, -tiny])
    got = _run(_apply_tanh, xs).astype(np.float64)
    ref = np.tanh(xs.astype(np.float64))
    assert (np.abs(got - ref) / np.abs(ref))[xs != 0].max() < 3 * np.finfo(np.float32).eps
    assert np.abs(got).max() <= 1.0


@pytest.mark.parametrize(("x", "expected"), [
    (0.0, 0.0), (-0.0, -0.0), (np.inf, 1.0), (-np.inf, -1.0), (20.0, 1.0), (-50.0, -1.0), (3.4e38, 1.0),
])
def test_tanh32_special_values(x, expected):
    got = _run(_apply_tanh, np.float32([x]))[0]
    assert got == np.float32(expected) and math.copysign(1, got) == math.copysign(1, expected)
    assert math.isnan(_run(_apply_tanh, np.float32([np.nan]))[0])


def test_tanh32_is_exactly_odd_and_its_loop_vectorises():
    xs = np.linspace(0, 12, 1_000_001, dtype=np.float32)
    assert np.array_equal(_run(_apply_tanh, xs), -_run(_apply_tanh, -xs))
    ir = _apply_tanh.inspect_llvm(_apply_tanh.signatures[0])
    assert "tanhf" not in ir and "@tanh" not in ir
    assert re.search(r"fdiv <\d+ x float>", ir), "the tanh32 loop stayed scalar"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_reductions_match_numpy_at_every_length_around_the_unrolled_step(dtype):
    """row_max/row_min (one pass over a contiguous row's bits; eight running values over whole steps of
    eight and a tail for a strided one): every length from 0 to 40 (and a NaN anywhere) against numpy,
    contiguous and strided."""
    rng = np.random.default_rng(3)
    for n in range(41):
        row = rng.standard_normal(n).astype(dtype)
        if n == 0:
            assert support.row_max(row) == -np.inf and support.row_min(row) == np.inf
            continue
        assert support.row_max(row) == row.max() and support.row_min(row) == row.min(), n
        assert support.row_sum(row) == pytest.approx(float(row.sum(dtype=np.float64)), rel=1e-5, abs=1e-5)
        spoiled = row.copy()
        spoiled[(n * 5) // 7] = np.nan
        assert np.isnan(support.row_max(spoiled)) and np.isnan(support.row_min(spoiled)), n
        strided = np.repeat(row, 2)[::2]  # the same values through a stride of 2 (the float form)
        assert support.row_max(strided) == row.max() and support.row_min(strided) == row.min(), n


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_max_and_min_order_every_kind_of_float(dtype):
    """The bits-as-integers order against numpy on infinities, subnormals, both zeros and NaNs of either
    sign (a NaN with the sign bit set is still a NaN); ties of -0 and +0 give +0 (max) and -0 (min)."""
    tiny = np.finfo(dtype).smallest_subnormal
    values = np.array([-np.inf, np.inf, -tiny, tiny, -1.5, 2.5, np.finfo(dtype).max, -np.finfo(dtype).max],
                      dtype)
    rng = np.random.default_rng(0)
    for _ in range(200):
        row = rng.choice(values, size=int(rng.integers(1, 12)))
        assert support.row_max(row) == row.max() and support.row_min(row) == row.min(), row
    for row in ([-0.0, 0.0], [0.0, -0.0]):
        row = np.array(row, dtype)
        assert not np.signbit(support.row_max(row)) and np.signbit(support.row_min(row))
    negative_nan = np.array([1.0, -np.nan, 2.0], dtype)
    assert np.signbit(negative_nan[1]) and np.isnan(support.row_max(negative_nan))
    assert np.isnan(support.row_min(negative_nan))


def test_row_max_loop_vectorises():
    """The point of the bits form: LLVM turns the loop into vector integer compares."""
    row = np.zeros(64, dtype=np.float32)
    _apply_row_max(row)  # (a kernel of this file: numba's cached helpers cannot be inspected)
    ir = _apply_row_max.inspect_llvm(_apply_row_max.signatures[0])
    assert re.search(r"<\d+ x i32>", ir), "the row max loop stayed scalar"


@numba.njit(error_model="numpy")
def _apply_row_max(row):
    return support.row_max(row)


# ---------------------------------------------------------------- float16 conversions


@numba.njit(error_model="numpy")
def _to_half(xs, hardware_path, out):
    for i in range(xs.shape[0]):
        if hardware_path:
            out[i] = support.f32_to_f16_bits(xs[i])
        else:
            out[i] = support.f32_to_f16_bits_arithmetic(xs[i])


@numba.njit(error_model="numpy")
def _from_half(bits, hardware_path, out):
    for i in range(bits.shape[0]):
        if hardware_path:
            out[i] = support.f16_bits_to_f32(bits[i])
        else:
            out[i] = support.f16_bits_to_f32_arithmetic(bits[i])


def _float32_patterns() -> np.ndarray:
    """4 million random float32 bit patterns and the float16 edges: the largest finite, the rounding
    boundary to Inf, the smallest normal and subnormal, ties, signed zeros, Inf and NaN payloads."""
    random = np.random.default_rng(5).integers(0, 2**32, 4_000_000, dtype=np.uint64).astype(np.uint32)
    edges = np.array([0x477FE000, 0x477FEFFF, 0x477FF000, 0x38800000, 0x387FFFFF, 0x33800000, 0x33000000,
                      0x33000001, 0x32FFFFFF, 0x3F801000, 0x3F803000, 0, 0x80000000, 0x7F800000, 0xFF800000,
                      0x7FC00000, 0xFFC00001, 0x7F800001, 0x7FBFFFFF], np.uint32)
    return np.concatenate([random, edges]).view(np.float32)


@pytest.mark.parametrize("hardware_path", [True, False], ids=["f32_to_f16_bits", "arithmetic"])
def test_float32_to_float16_bits_are_torchs(hardware_path):
    """Both conversions give torch's CPU float16 for every pattern; the host's instruction (where it has
    one: `support.HALF_IN_HARDWARE`) NaN bits included, the arithmetic one a quiet NaN of the same sign."""
    import torch

    xs = _float32_patterns()
    got = np.empty(xs.shape[0], np.uint16)
    _to_half(xs, hardware_path, got)
    expected = torch.from_numpy(xs.copy()).to(torch.float16).view(torch.int16).numpy().view(np.uint16)
    nan = np.isnan(xs)
    assert np.array_equal(got[~nan], expected[~nan])
    assert np.array_equal(got[nan] & 0xFE00, (expected[nan] & 0x8000) | 0x7E00)  # quiet NaN, same sign
    if hardware_path and support.HALF_IN_HARDWARE:
        assert np.array_equal(got, expected)


@pytest.mark.parametrize("hardware_path", [True, False], ids=["f16_bits_to_f32", "arithmetic"])
def test_every_float16_converts_to_torchs_float32(hardware_path):
    import torch

    halves = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    got = np.empty(halves.shape[0], np.float32)
    _from_half(halves, hardware_path, got)
    # (a long tensor: torch's vectorised conversion, which quiets a NaN as the instruction does)
    expected = torch.from_numpy(halves.view(np.int16).copy()).view(torch.float16).float().numpy()
    nan = np.isnan(expected)
    assert np.array_equal(got.view(np.uint32)[~nan], expected.view(np.uint32)[~nan])
    assert np.isnan(got[nan]).all() and np.array_equal(np.signbit(got[nan]), np.signbit(expected[nan]))
    if hardware_path and support.HALF_IN_HARDWARE:
        assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_half_conversions_are_one_instruction_each_where_the_host_has_one():
    """The helpers lower to fptrunc / fpext (which LLVM vectorises), not to the bit arithmetic."""
    if not support.HALF_IN_HARDWARE:
        pytest.skip("this host converts float16 in integer arithmetic")
    # compiled here: the tests that call them may run in another xdist worker (none compiled: no IR)
    _to_half(np.zeros(1, np.float32), True, np.empty(1, np.uint16))
    _from_half(np.zeros(1, np.uint16), True, np.empty(1, np.float32))
    ir = next(iter(_to_half.inspect_llvm().values()))
    assert "fptrunc" in ir
    ir = next(iter(_from_half.inspect_llvm().values()))
    assert "fpext" in ir
