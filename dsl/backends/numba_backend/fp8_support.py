"""fp8 helpers the generated kernels call (decode, encode, round for the four fp8 formats with torch
counterparts). Kept apart from support.py because their tables come from ml_dtypes, whose import costs
about a second: only kernels that use fp8 import this module (the template imports it on demand), so
every other process's first kernel launch does not pay for it. fp8 kernels name a hash of this file
(`codegen._fp8_support_digest`), as for support.py."""

from __future__ import annotations

import numba
import numpy as np

from .support import _inline


# fp8 (the four formats with torch counterparts): a value is held as the float32 it stands for; memory
# holds the codes.  Decoding indexes a 256-entry table; encoding rounds to the nearest code (ties to the
# even code) with the same tables and rules as dtypes.round_to_fp8_codes, which the interpreter uses.
def _fp8_constants(name):
    from torch_rbln.dsl import dtypes as D

    t = D.from_name(name)
    values, positive, nan = D.fp8_tables(t)
    finite = values[positive]
    if name == "fp8e5":
        over = 0x7C
    elif name == "fp8e4nv":
        over = int(positive[-1])
    else:
        over = nan
    return (values.astype(np.float32), finite, positive.astype(np.int64), nan, over,
            name in ("fp8e5", "fp8e4nv"))


@numba.njit(cache=True, error_model="numpy")
def _encode_fp8(x, finite, codes, nan, over, negzero_ok):
    v = np.float64(x)
    if v != v:
        return np.uint8(nan)
    mag = abs(v)
    top = finite.shape[0] - 1
    lo, hi = 0, top
    while lo < hi:  # the last finite value <= mag
        mid = (lo + hi + 1) // 2
        if finite[mid] <= mag:
            lo = mid
        else:
            hi = mid - 1
    step = finite[lo + 1] - finite[lo] if lo < top else finite[top] - finite[top - 1]
    diff = mag - finite[lo]
    code = codes[lo]
    if diff > step / 2 or (diff == step / 2 and (code & 1) == 1):
        code += 1
    if code > codes[top]:
        code = over
    if v < 0 or (v == 0 and np.signbit(v)):
        if code != nan and (negzero_ok or code != 0):
            code |= 0x80
    return np.uint8(code)


(_E5_VALUES, _E5_FINITE, _E5_CODES, _E5_NAN, _E5_OVER, _E5_NZ) = _fp8_constants("fp8e5")
(_E4_VALUES, _E4_FINITE, _E4_CODES, _E4_NAN, _E4_OVER, _E4_NZ) = _fp8_constants("fp8e4nv")
(_E4B8_VALUES, _E4B8_FINITE, _E4B8_CODES, _E4B8_NAN, _E4B8_OVER, _E4B8_NZ) = _fp8_constants("fp8e4b8")
(_E5B16_VALUES, _E5B16_FINITE, _E5B16_CODES, _E5B16_NAN, _E5B16_OVER, _E5B16_NZ) = _fp8_constants("fp8e5b16")


@_inline
def fp8e5_bits_to_f32(bits):
    return _E5_VALUES[np.uint8(bits)]


@_inline
def f32_to_fp8e5_bits(x):
    return _encode_fp8(x, _E5_FINITE, _E5_CODES, _E5_NAN, _E5_OVER, _E5_NZ)


@_inline
def round_fp8e5(x):
    return _E5_VALUES[f32_to_fp8e5_bits(x)]


@_inline
def fp8e4nv_bits_to_f32(bits):
    return _E4_VALUES[np.uint8(bits)]


@_inline
def f32_to_fp8e4nv_bits(x):
    return _encode_fp8(x, _E4_FINITE, _E4_CODES, _E4_NAN, _E4_OVER, _E4_NZ)


@_inline
def round_fp8e4nv(x):
    return _E4_VALUES[f32_to_fp8e4nv_bits(x)]


@_inline
def fp8e4b8_bits_to_f32(bits):
    return _E4B8_VALUES[np.uint8(bits)]


@_inline
def f32_to_fp8e4b8_bits(x):
    return _encode_fp8(x, _E4B8_FINITE, _E4B8_CODES, _E4B8_NAN, _E4B8_OVER, _E4B8_NZ)


@_inline
def round_fp8e4b8(x):
    return _E4B8_VALUES[f32_to_fp8e4b8_bits(x)]


@_inline
def fp8e5b16_bits_to_f32(bits):
    return _E5B16_VALUES[np.uint8(bits)]


@_inline
def f32_to_fp8e5b16_bits(x):
    return _encode_fp8(x, _E5B16_FINITE, _E5B16_CODES, _E5B16_NAN, _E5B16_OVER, _E5B16_NZ)


@_inline
def round_fp8e5b16(x):
    return _E5B16_VALUES[f32_to_fp8e5b16_bits(x)]
