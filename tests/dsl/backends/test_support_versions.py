"""support's helpers compile few type versions (`support._one_version`): compiled callers convert the
arguments at the call site, and the results equal those of the helper's body called with the types as
they were (`impl`, the body the helper had before), for every integer and float type generated code
passes."""

from __future__ import annotations

import itertools
import re

import numba
import numpy as np
import pytest
from torch_rbln.dsl.backends.numba_backend import support

INTEGERS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@numba.njit(error_model="numpy")
def _divide(a, b):
    return support.trunc_div(a, b), support.trunc_mod(a, b)


def _body(helper):
    """The helper's body in a dispatcher of its own, compiled for the types it is given: what a compiled
    call computed before (its own `impl` keeps only the converted versions, which a test counts)."""
    return numba.njit(error_model="numpy")(helper.impl.py_func)


_DIV, _MOD = _body(support.trunc_div), _body(support.trunc_mod)


@numba.njit(error_model="numpy")
def _divide_as_typed(a, b):
    return _DIV(a, b), _MOD(a, b)


def _values(kind: type) -> list:
    info = np.iinfo(kind)
    values = {0, 1, 2, 3, 7, 100, int(info.max), int(info.max) - 1}
    if info.min < 0:
        values |= {-1, -2, -3, -7, -100, int(info.min), int(info.min) + 1}
    return [kind(v) for v in sorted(values)]


# Each pair compiles two small functions (~0.5 s): by default every type against itself and the pairs
# whose conversions differ in kind (widening, signed with unsigned, the uint64 mixes numba takes to
# float64); the whole 8 x 8 product with -m slow.
_DEFAULT_PAIRS = {(t, t) for t in INTEGERS} | {
    (np.int32, np.int64), (np.int64, np.int32), (np.int8, np.uint8), (np.uint16, np.int16),
    (np.uint32, np.int32), (np.int64, np.uint64), (np.uint64, np.int8), (np.uint8, np.uint64)}
_PAIRS = [pair if pair in _DEFAULT_PAIRS else pytest.param(*pair, marks=pytest.mark.slow)
          for pair in itertools.product(INTEGERS, INTEGERS)]


@pytest.mark.parametrize("a_type,b_type", _PAIRS, ids=lambda t: t.__name__)
def test_trunc_div_and_mod_equal_their_bodies_on_the_original_types(a_type: type, b_type: type):
    for a in _values(a_type):
        for b in _values(b_type):
            got, expected = _divide(a, b), _divide_as_typed(a, b)
            for g, e in zip(got, expected, strict=True):
                # the generated code casts the result to the op's dtype: compare as that would
                assert np.asarray(g).astype(a_type) == np.asarray(e).astype(a_type), (a, b, got, expected)


def test_trunc_div_rounds_toward_zero_and_gives_0_for_division_by_zero():
    assert _divide(np.int32(-7), np.int32(2)) == (-3, -1)
    assert _divide(np.int32(7), np.int32(-2)) == (-3, 1)
    assert _divide(np.int64(-8), np.int32(2)) == (-4, 0)
    assert _divide(np.int32(5), np.int32(0)) == (0, 0)


def test_integer_pairs_share_two_versions():
    for a_type, b_type in _DEFAULT_PAIRS:  # (every pair of the product: -m slow, above)
        _divide(a_type(7), b_type(2))
    versions = {str(s) for s in support.trunc_div.impl.signatures}
    # int64 and uint64, and the types as they are for uint64 with a signed integer (numba's float64)
    expected = {"(int64, int64)", "(uint64, uint64)"} | {f"(uint64, {t.__name__})" for t in INTEGERS[:4]} | \
        {f"({t.__name__}, uint64)" for t in INTEGERS[:4]}
    assert versions <= expected | {"(float64, float64)"}, versions
    assert "(int32, int32)" not in versions and "(int32, int64)" not in versions


@numba.njit(error_model="numpy")
def _floats(x, y):
    return (support.exp32(x), support.fmax(x, y), support.fmin(x, y), support.round_bf16(x),
            support.round_f16(x), support.round_bf16_64(x), support.round_f16_64(x))


_EXP, _FMAX, _FMIN, _RBF16, _RF16, _RBF16_64, _RF16_64 = (
    _body(h) for h in (support.exp32, support.fmax, support.fmin, support.round_bf16, support.round_f16,
                       support.round_bf16_64, support.round_f16_64))


@numba.njit(error_model="numpy")
def _floats_as_typed(x, y):
    return _EXP(x), _FMAX(x, y), _FMIN(x, y), _RBF16(x), _RF16(x), _RBF16_64(x), _RF16_64(x)


FLOAT_VALUES = [0.0, -0.0, 1.5, -2.25, 1e-40, 3.0e38, 70000.0, 1e-6, np.inf, -np.inf, np.nan, 88.7, -104.0,
                1.0000001, 0.333333333333]


@pytest.mark.parametrize("x_type,y_type", [(np.float32, np.float32), (np.float64, np.float64),
                                           (np.float32, np.float64), (np.float64, np.float32),
                                           (np.int32, np.float32), (np.int64, np.float64)],
                         ids=lambda t: t.__name__)
def test_float_helpers_equal_their_bodies_on_the_original_types(x_type: type, y_type: type):
    for x in FLOAT_VALUES:
        if np.issubdtype(x_type, np.integer) and not np.isfinite(x):
            continue
        for y in (0.5, -3.0, np.nan, -0.0):
            xv = x_type(x) if np.issubdtype(x_type, np.floating) else x_type(int(min(max(x, -1e9), 1e9)))
            got, expected = _floats(xv, y_type(y)), _floats_as_typed(xv, y_type(y))
            for g, e in zip(got, expected, strict=True):
                same = g == e and np.signbit(g) == np.signbit(e)
                assert same or (g != g and e != e), (xv, y, got, expected)


@numba.njit(error_model="numpy")
def _exp_loop(xs, out):
    for i in range(xs.shape[0]):
        out[i] = support.exp32(xs[i])


def test_exp32_loop_still_vectorises_through_the_conversion():
    xs = np.zeros(8, dtype=np.float32)
    _exp_loop(xs, np.empty_like(xs))
    ir = _exp_loop.inspect_llvm(_exp_loop.signatures[0])
    assert "@expf" not in ir
    assert re.search(r"<\d+ x float>", ir), "the exp32 loop stayed scalar"


def test_python_callers_run_the_body():
    assert support.trunc_div(-7, 2) == -3 and support.trunc_mod(-7, 2) == -1
    assert support.exp32(np.float32(0.0)) == np.float32(1.0)
    assert np.isnan(support.fmax(np.float32(np.nan), np.float32(1.0)))
