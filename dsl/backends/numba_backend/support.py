"""Scalar helpers the generated kernels call: exact f16/bf16 conversions, C-style integer division,
NaN-propagating min/max, erf. Every function is a small numba `njit(inline="always")` function, so
generated code reads like the math it does and LLVM sees straight-line code."""

from __future__ import annotations

import math

import numba
import numba.extending
import numpy as np

_inline = numba.njit(cache=True, error_model="numpy")


@_inline
def bf16_bits_to_f32(bits):
    return np.uint32(np.uint32(bits) << np.uint32(16)).view(np.float32)


@_inline
def f32_to_bf16_bits(x):
    """Round to nearest even; NaN stays a quiet NaN."""
    bits = np.float32(x).view(np.uint32)
    if (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint16((bits >> np.uint32(16)) | np.uint32(0x0040))
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return np.uint16((bits + rounding) >> np.uint32(16))


@_inline
def round_bf16(x):
    """The bf16 value nearest to `x` (ties to even), as float32."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


@_inline
def f16_bits_to_f32(bits):
    h = np.uint32(bits)
    sign = (h & np.uint32(0x8000)) << np.uint32(16)
    exponent = (h >> np.uint32(10)) & np.uint32(0x1F)
    mantissa = h & np.uint32(0x3FF)
    if exponent == np.uint32(0):
        if mantissa == np.uint32(0):
            return np.uint32(sign).view(np.float32)
        value = np.float32(mantissa) * np.float32(5.9604644775390625e-08)  # 2**-24
        return -value if sign else value
    if exponent == np.uint32(31):
        return np.uint32(sign | np.uint32(0x7F800000) | (mantissa << np.uint32(13))).view(np.float32)
    return np.uint32(
        sign | ((exponent + np.uint32(112)) << np.uint32(23)) | (mantissa << np.uint32(13))
    ).view(np.float32)


@_inline
def f32_to_f16_bits(x):
    """IEEE binary16, round to nearest even, overflow to inf, gradual underflow."""
    bits = np.float32(x).view(np.uint32)
    sign = np.uint16((bits >> np.uint32(16)) & np.uint32(0x8000))
    magnitude = bits & np.uint32(0x7FFFFFFF)
    if magnitude > np.uint32(0x7F800000):
        return np.uint16(sign | np.uint16(0x7E00))
    if magnitude >= np.uint32(0x477FF000):  # rounds to >= 65520: inf
        return np.uint16(sign | np.uint16(0x7C00))
    if magnitude < np.uint32(0x38800000):  # below 2**-14: subnormal half
        value = abs(np.float32(x)) * np.float32(16777216.0)  # in units of 2**-24
        return np.uint16(sign | np.uint16(np.int64(np.rint(value))))
    exponent_adjusted = magnitude - np.uint32(0x38000000)  # rebias 127 -> 15
    rounding = np.uint32(0xFFF) + ((exponent_adjusted >> np.uint32(13)) & np.uint32(1))
    return np.uint16(sign | np.uint16((exponent_adjusted + rounding) >> np.uint32(13)))


@_inline
def round_f16(x):
    return f16_bits_to_f32(f32_to_f16_bits(x))


@_inline
def trunc_div(a, b):
    """Integer division rounding toward zero (C semantics, as Triton); 0 for division by zero."""
    if b == 0:
        return a - a
    q = a // b
    if q < 0 and q * b != a:
        q += 1
    return q


@_inline
def trunc_mod(a, b):
    if b == 0:
        return a - a
    return a - trunc_div(a, b) * b


@_inline
def fmax(a, b):
    """max that propagates NaN from either side."""
    if a != a:
        return a
    if b != b:
        return b
    return a if a >= b else b


@_inline
def fmin(a, b):
    if a != a:
        return a
    if b != b:
        return b
    return a if a <= b else b


@_inline
def erf64(x):
    return math.erf(x)


@_inline
def fma32(a, b, c):
    return np.float32(np.float64(a) * np.float64(b) + np.float64(c))


_LOG2E = np.float32(1.4426950408889634)
_LN2_HI = np.float32(0.693359375)
_LN2_LO = np.float32(-2.12194440e-4)


@_inline
def exp32(x):
    """expf in plain arithmetic (Cody-Waite reduction, degree-6 polynomial; ~1 ulp), so LLVM can
    vectorise loops that call it; libm's expf is a scalar call."""
    x = np.float32(x)
    if x != x:
        return x
    clamped = min(max(x, np.float32(-103.0)), np.float32(88.72283935546875))
    n = np.rint(clamped * _LOG2E)
    r = clamped - n * _LN2_HI - n * _LN2_LO
    p = np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * r * r + r + np.float32(1.0)
    k = np.int32(n)
    # 2**k as two factors so that k down to -150 (gradual underflow) and up to 128 stay exact.
    half = k >> np.int32(1)
    scale1 = np.int32((half + np.int32(127)) << np.int32(23)).view(np.float32)
    scale2 = np.int32((k - half + np.int32(127)) << np.int32(23)).view(np.float32)
    value = np.float32(p * scale1 * scale2)
    if x > np.float32(88.72283935546875):
        value = np.float32(np.inf)
    if x < np.float32(-103.972084):
        value = np.float32(0.0)
    return value


# erf: 2/sqrt(pi) * (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320) below |x| = 0.5 (the next
# term is under half an ulp there), and Abramowitz & Stegun 7.1.26 above it (|error| <= 1.5e-7).
# Scalar module constants (not tuples) and copysign keep the function branch-free for LLVM.
_ERF_C0, _ERF_C1, _ERF_C2, _ERF_C3, _ERF_C4, _ERF_C5 = (
    np.float32(2.0 / math.sqrt(math.pi) * c)
    for c in (1.0, -1.0 / 3, 1.0 / 10, -1.0 / 42, 1.0 / 216, -1.0 / 1320)
)
_ERF_A1, _ERF_A2, _ERF_A3, _ERF_A4, _ERF_A5 = (
    np.float32(c) for c in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
)
_ERF_P = np.float32(0.3275911)
_ONE = np.float32(1.0)
_HALF = np.float32(0.5)


@numba.njit(cache=True, error_model="numpy", inline="always")  # inlined at numba level: LLVM does not
def erf32(x):  # inline a callee this size into the caller's loop, which then would not vectorise
    """erf in float32 arithmetic (about 3e-7 absolute, ~1 ulp near zero), so loops calling it vectorise;
    libm's erf is a scalar call per element (4M-element loop: ~15 ms instead of 75-90 ms)."""
    a = abs(x)
    x2 = x * x
    small = x * (_ERF_C0 + x2 * (_ERF_C1 + x2 * (_ERF_C2 + x2 * (_ERF_C3 + x2 * (_ERF_C4 + x2 * _ERF_C5)))))
    t = _ONE / (_ONE + _ERF_P * a)
    tail = t * (_ERF_A1 + t * (_ERF_A2 + t * (_ERF_A3 + t * (_ERF_A4 + t * _ERF_A5)))) * exp32(-x2)
    large = math.copysign(_ONE - tail, x)
    return small if a < _HALF else large


@_inline
def round_bf16_64(x):
    """bf16 nearest to a float64 (ties to even), rounded once (no float32 step), as float32."""
    x = np.float64(x)
    if x != x or abs(x) == np.inf or abs(x) < 2.0**-126:
        return round_bf16(np.float32(x))
    bits = np.uint64(x.view(np.uint64))
    lsb = (bits >> np.uint64(45)) & np.uint64(1)
    rounded = np.uint64((bits + np.uint64((1 << 44) - 1) + lsb) & np.uint64(0xFFFFE00000000000))
    return np.float32(rounded.view(np.float64))


@_inline
def round_f16_64(x):
    """float16 nearest to a float64 (ties to even), rounded once, as float32."""
    x = np.float64(x)
    if x != x or abs(x) == np.inf:
        return np.float32(x)
    if abs(x) >= 65520.0:
        return np.float32(np.inf) if x > 0 else np.float32(-np.inf)
    if abs(x) < 2.0**-14:
        return np.float32(np.rint(x * 16777216.0) / 16777216.0)
    bits = np.uint64(x.view(np.uint64))
    lsb = (bits >> np.uint64(42)) & np.uint64(1)
    rounded = np.uint64((bits + np.uint64((1 << 41) - 1) + lsb) & np.uint64(0xFFFFFC0000000000))
    return np.float32(rounded.view(np.float64))


@numba.extending.intrinsic
def as_pointer(typingctx, address, dtype):
    """`address` (an int) as a typed data pointer, so a kernel can view host memory with
    `numba.carray(as_pointer(address, np.float32), n)` without Python unboxing an array."""
    element = dtype.dtype
    signature = numba.types.CPointer(element)(address, dtype)

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], context.get_value_type(sig.return_type))

    return signature, codegen


# Reductions over one contiguous row. The kernels themselves are compiled without fast-math, so
# elementwise results round exactly as the IR says; only these helpers may reassociate, which is
# what lets LLVM vectorise a sum (the order of a float sum is unspecified in Triton too).
_reassociating = numba.njit(cache=True, error_model="numpy", fastmath={"reassoc"})
_no_nans = numba.njit(cache=True, error_model="numpy", fastmath={"reassoc", "nnan", "nsz"})


@_reassociating
def row_sum(row):
    total = row.dtype.type(0)
    for value in row:
        total += value
    return total


@_inline
def row_has_nan(row):
    seen = False
    for value in row:
        seen |= value != value
    return seen


@_no_nans
def _row_max_no_nan(row):
    best = row.dtype.type(-np.inf)
    for value in row:
        best = max(best, value)
    return best


@_no_nans
def _row_min_no_nan(row):
    best = row.dtype.type(np.inf)
    for value in row:
        best = min(best, value)
    return best


@_inline
def row_max(row):
    """max with NaN propagation, in two vectorisable passes."""
    if row_has_nan(row):
        return row.dtype.type(np.nan)
    return _row_max_no_nan(row)


@_inline
def row_min(row):
    if row_has_nan(row):
        return row.dtype.type(np.nan)
    return _row_min_no_nan(row)
