"""Accuracy of the numba backend's own float32 math (erf32, exp32) against libm in float64."""

from __future__ import annotations

import math

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


def _run(kernel, xs: np.ndarray) -> np.ndarray:
    out = np.empty_like(xs)
    kernel(xs, out)
    return out


def test_erf32_is_within_3e_7_and_about_one_ulp_near_zero():
    xs = np.linspace(-7, 7, 400_001, dtype=np.float32)
    got = _run(_apply_erf, xs).astype(np.float64)
    ref = np.array([math.erf(float(x)) for x in xs])
    assert np.abs(got - ref).max() < 4e-7
    small = np.abs(xs) < 0.5
    relative = np.abs(got[small] - ref[small]) / np.maximum(np.abs(ref[small]), 1e-38)
    assert relative.max() < 2.5e-7  # about 2 ulp where erf(x) ~ x


@pytest.mark.parametrize(("x", "expected"), [(0.0, 0.0), (-0.0, -0.0), (np.inf, 1.0), (-np.inf, -1.0)])
def test_erf32_special_values(x, expected):
    got = _run(_apply_erf, np.float32([x]))[0]
    assert got == np.float32(expected) and math.copysign(1, got) == math.copysign(1, expected)
    assert math.isnan(_run(_apply_erf, np.float32([np.nan]))[0])
    tiny = np.float32(1e-30)
    assert _run(_apply_erf, np.float32([tiny]))[0] == pytest.approx(2 / math.sqrt(math.pi) * tiny, rel=2.5e-7)


def test_exp32_is_within_3_ulp():
    xs = np.linspace(-87, 88, 200_001, dtype=np.float32)
    got = _run(_apply_exp, xs).astype(np.float64)
    ref = np.exp(xs.astype(np.float64))
    assert (np.abs(got - ref) / ref).max() < 3 * np.finfo(np.float32).eps
