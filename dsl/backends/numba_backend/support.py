"""Scalar helpers the generated kernels call: exact f16/bf16 conversions, C-style integer division,
NaN-propagating min/max, erf. Every function is a small numba `njit(inline="always")` function, so
generated code reads like the math it does and LLVM sees straight-line code."""

from __future__ import annotations

import math

import llvmlite.ir as llvmlite_ir
import numba
import numba.extending
import numpy as np

from .vector_width import WideVectorCompiler

_inline = numba.njit(cache=True, error_model="numpy")


def _one_version(convert):
    """Decorator: the helper keeps one compiled version per kind of argument, not one per combination
    of argument types.

    Why: numba compiles a dispatcher once per argument-type signature, and generated code passes
    whatever its expressions type as (`trunc_div` got int32/int64 in every combination, `exp32` ints,
    float32 and float64): 52 versions of trunc_div/trunc_mod and 10 of exp32 in the test suite, each a
    compile of ~0.1 s on a cold cache. The decorated body compiles as `impl`; the public name is a plain
    function (Python callers run `impl`) with an inline overload that converts each argument with
    `convert(*numba types)` (numpy scalar types, or None: call with the types as they are) at the call
    site, so every caller reaches one of a few versions. `convert` picks only conversions that give the
    body the values and the arithmetic it had (the body converts or promotes to that type itself)."""

    def decorate(function):
        impl = _inline(function)
        if function.__code__.co_argcount == 1:
            def public(x):
                return impl(x)

            def converted(x):
                (t0,) = convert(x) or (None,)
                if t0 is None:
                    return lambda x: impl(x)
                return lambda x: impl(t0(x))
        else:
            def public(a, b):
                return impl(a, b)

            def converted(a, b):
                t0, t1 = convert(a, b) or (None, None)
                if t0 is None:
                    return lambda a, b: impl(a, b)
                return lambda a, b: impl(t0(a), t1(b))
        public.__name__, public.__qualname__, public.__doc__ = function.__name__, function.__qualname__, \
            function.__doc__
        public.impl = impl
        numba.extending.overload(public, inline="always")(converted)
        return public

    return decorate


def _as_float32(x):
    """exp32 and the float32 -> f16/bf16 conversions start with np.float32(x): convert there."""
    return (np.float32,) if isinstance(x, numba.types.Number) else None


def _as_float64(x):
    return (np.float64,) if isinstance(x, numba.types.Number) else None


def _as_uint32(x):
    """The f16/bf16 bit patterns start with np.uint32(bits)."""
    return (np.uint32,) if isinstance(x, numba.types.Integer) else None


def _as_64_bit_integers(a, b):
    """trunc_div/trunc_mod: numba computes any two integers of the same signedness, or of mixed
    signedness below 64 bits, in 64 bits (int64, or uint64 for two unsigned ones), so converting first
    changes nothing; a uint64 with a signed one (numba's float64) and non-integers keep their types."""
    if not (isinstance(a, numba.types.Integer) and isinstance(b, numba.types.Integer)):
        return None
    if not a.signed and not b.signed:
        return np.uint64, np.uint64
    if (not a.signed and a.bitwidth == 64) or (not b.signed and b.bitwidth == 64):
        return None
    return np.int64, np.int64


def _as_common_float(a, b):
    """fmax/fmin: two float32 stay float32 (vectorised loops keep their width), any other two numbers
    unify to float64 in numba's typing anyway."""
    if a == numba.types.float32 and b == numba.types.float32:
        return None
    if isinstance(a, numba.types.Number) and isinstance(b, numba.types.Number):
        return np.float64, np.float64
    return None


@_one_version(_as_uint32)
def bf16_bits_to_f32(bits):
    return np.uint32(np.uint32(bits) << np.uint32(16)).view(np.float32)


@_one_version(_as_float32)
def f32_to_bf16_bits(x):
    """Round to nearest even; NaN stays a quiet NaN."""
    bits = np.float32(x).view(np.uint32)
    if (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint16((bits >> np.uint32(16)) | np.uint32(0x0040))
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return np.uint16((bits + rounding) >> np.uint32(16))


@_one_version(_as_float32)
def round_bf16(x):
    """The bf16 value nearest to `x` (ties to even), as float32."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


def _half_in_hardware() -> bool:
    """Whether this host converts float32 <-> float16 in one instruction that LLVM emits for `fptrunc`
    / `fpext` (x86-64 with F16C, or AArch64). Elsewhere LLVM would call a compiler-rt routine that
    numba's JIT may not link, so the bit arithmetic below converts instead."""
    import llvmlite.binding as llvm

    triple = llvm.get_process_triple()
    if triple.startswith(("aarch64", "arm64")):
        return True
    return triple.startswith("x86_64") and "+f16c" in llvm.get_host_cpu_features().flatten().split(",")


# Read once per process, frozen into each helper's compiled code (numba's cache keys a compiled helper by
# the host CPU's name and features too, so a cache copied to another host recompiles there).
HALF_IN_HARDWARE = _half_in_hardware()


@numba.extending.intrinsic
def _f32_to_f16_instruction(typingctx, x):
    """float32 -> the bits of the nearest float16 (ties to even; overflow to Inf; NaN quieted with its
    payload's top bits and sign, as x86's vcvtps2ph and torch's vectorised CPU conversion give it) in one
    `fptrunc`, which LLVM vectorises: ~0.065 ns per element on an AVX-512 host where the bit arithmetic
    took ~0.63."""
    if x != numba.types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(builder.fptrunc(args[0], llvmlite_ir.HalfType()), llvmlite_ir.IntType(16))

    return numba.types.uint16(numba.types.float32), codegen


@numba.extending.intrinsic
def _f16_bits_to_f32_instruction(typingctx, bits):
    """The bits of a float16 -> its float32 value (exact; a NaN quieted, as vcvtph2ps does) in one
    `fpext`."""
    if bits != numba.types.uint16:
        return None

    def codegen(context, builder, sig, args):
        return builder.fpext(builder.bitcast(args[0], llvmlite_ir.HalfType()), llvmlite_ir.FloatType())

    return numba.types.float32(numba.types.uint16), codegen


@_one_version(_as_uint32)
def f16_bits_to_f32(bits):
    if HALF_IN_HARDWARE:
        return _f16_bits_to_f32_instruction(np.uint16(bits))
    return f16_bits_to_f32_arithmetic(np.uint32(bits))


@_inline
def f16_bits_to_f32_arithmetic(bits):
    """`f16_bits_to_f32` in integer arithmetic (hosts without a conversion instruction): exact, a NaN's
    bits kept as they are."""
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


@_one_version(_as_float32)
def f32_to_f16_bits(x):
    """IEEE binary16, round to nearest even, overflow to inf, gradual underflow."""
    if HALF_IN_HARDWARE:
        return _f32_to_f16_instruction(np.float32(x))
    return f32_to_f16_bits_arithmetic(np.float32(x))


@_inline
def f32_to_f16_bits_arithmetic(x):
    """`f32_to_f16_bits` in integer arithmetic (hosts without a conversion instruction): the same bits
    but for NaN, which becomes the sign and 0x7E00."""
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


@_one_version(_as_float32)
def round_f16(x):
    return f16_bits_to_f32(f32_to_f16_bits(x))


@_one_version(_as_64_bit_integers)
def trunc_div(a, b):
    """Integer division rounding toward zero (C semantics, as Triton); 0 for division by zero."""
    if b == 0:
        return a - a
    q = a // b
    if q < 0 and q * b != a:
        q += 1
    return q


@_one_version(_as_64_bit_integers)
def trunc_mod(a, b):
    if b == 0:
        return a - a
    return a - trunc_div(a, b) * b


@_one_version(_as_common_float)
def fmax(a, b):
    """max that propagates NaN from either side."""
    if a != a:
        return a
    if b != b:
        return b
    return a if a >= b else b


@_one_version(_as_common_float)
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


@numba.extending.intrinsic
def _fmaf(typingctx, a, b, c):
    """a * b + c for float32 with one rounding (llvm.fma: one vfmadd where the CPU has FMA). exp32's and
    erf32's Horner steps use it: half the roundings of a multiply and an add, and half the instructions."""
    f32 = numba.types.float32
    if not (a == f32 and b == f32 and c == f32):
        return None
    signature = f32(f32, f32, f32)

    def codegen(context, builder, sig, args):
        return builder.fma(*args)

    return signature, codegen


_LOG2E = np.float32(1.4426950408889634)
_LN2_HI = np.float32(0.693359375)
_LN2_LO = np.float32(-2.12194440e-4)


@_one_version(_as_float32)
def exp32(x):
    """expf in plain arithmetic (Cody-Waite reduction, degree-6 polynomial; ~1 ulp), so LLVM can
    vectorise loops that call it; libm's expf is a scalar call."""
    x = np.float32(x)
    if x != x:
        return x
    # Inputs whose result is 0 (-inf: every masked score of a softmax or attention tile) are computed
    # as exp(0) and replaced below: through the clamp they gave a subnormal 2**-149 product, and each
    # subnormal multiply is a microcode assist (~7 ns per element against ~0.7: a causal 16x16
    # attention tile spent a quarter of its time there). Results that are subnormal stay exact.
    clamped = min(max(x, np.float32(-103.0)), np.float32(88.72283935546875))
    if x < np.float32(-103.972084):
        clamped = np.float32(0.0)
    n = np.rint(clamped * _LOG2E)
    # Horner steps and the two-part reduction as fused multiply-adds: 0.66 -> 0.49 ns per element (a
    # quarter fewer instructions), the same largest error (2.0 eps on [-87, 88]); the polynomial's
    # p * r^2 + r is summed before the 1 is added (Cephes' order), so r keeps its low bits.
    r = _fmaf(n, -_LN2_LO, _fmaf(n, -_LN2_HI, clamped))
    p = _fmaf(np.float32(1.3981999507e-3), r, np.float32(8.3334519073e-3))
    p = _fmaf(p, r, np.float32(4.1665795894e-2))
    p = _fmaf(p, r, np.float32(1.6666665459e-1))
    p = _fmaf(p, r, np.float32(5.0000001201e-1))
    p = _fmaf(p, r * r, r) + np.float32(1.0)
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


# erf(x) = x * P(t) / Q(t), t = min(x^2, _ERF_T_MAX), P and Q of degree 5 (Q(0) = 1), then clamped to
# [-1, 1]. The coefficients are our own fit: minimax relative error of P/Q to erf(x)/x on 0 <= x <= 3.92
# (Gauss-Newton steps on Lawson-reweighted residuals, float64; 1.9e-8 there, 5e-8 with the coefficients
# rounded to float32). All are positive, so neither polynomial cancels. Evaluated in float32 (Estrin
# order, fma), the largest error over 10^7 float32 points in [-5, 5] is 3.0e-7 absolute (~5 ulp, near
# |x| = 3.3) and 3.4e-7 relative (normal floats; near |x| = 0.06). erf(x) rounds to +-1 in float32 from
# |x| = 3.9192 on; the formula gives exactly 1 at 3.92 and, with t clamped there, more above it, which
# the final clamp turns into +-1 (also for +-inf, where x * p / q is +-inf).
# No exp, no branch: ten fma, three multiplies, a division and three min/max, which LLVM vectorises.
_ERF_T_MAX = np.float32(3.92 * 3.92)
_ERF_P0, _ERF_P1, _ERF_P2, _ERF_P3, _ERF_P4, _ERF_P5 = (
    np.float32(c) for c in (1.1283791, 0.1904091, 0.052749038, 0.0037657216, 0.0002848836, 2.050047e-06)
)
_ERF_Q0, _ERF_Q1, _ERF_Q2, _ERF_Q3, _ERF_Q4, _ERF_Q5 = (
    np.float32(c) for c in (1.0, 0.5020784, 0.11411017, 0.014969426, 0.0011625582, 3.8091348e-05)
)
_ONE = np.float32(1.0)


@numba.njit(cache=True, error_model="numpy", inline="always")  # inlined at numba level: LLVM does not
def erf32(x):  # inline a callee this size into the caller's loop, which then would not vectorise
    """erf in float32 arithmetic (3.0e-7 absolute, 3.4e-7 relative, see the fit above), so loops calling
    it vectorise: libm's erf is a scalar call per element, and the previous exp-based form (Abramowitz &
    Stegun 7.1.26 with a Taylor branch) cost about four times as much per element. NaN stays NaN
    (min/max pass it on), +-0 keeps its sign, +-inf gives +-1."""
    x = np.float32(x)
    t = min(x * x, _ERF_T_MAX)
    t2 = t * t
    p_high = _fmaf(_fmaf(_ERF_P5, t, _ERF_P4), t2, _fmaf(_ERF_P3, t, _ERF_P2))
    p = _fmaf(p_high, t2, _fmaf(_ERF_P1, t, _ERF_P0))
    q_high = _fmaf(_fmaf(_ERF_Q5, t, _ERF_Q4), t2, _fmaf(_ERF_Q3, t, _ERF_Q2))
    q = _fmaf(q_high, t2, _fmaf(_ERF_Q1, t, _ERF_Q0))
    return min(max(x * p / q, -_ONE), _ONE)


# tanh in float32, Cephes' tanhf scheme: for |x| < 0.625 the odd polynomial x + x^3 P(x^2), P of degree 4
# with Cephes' minimax coefficients (relative error ~1.2e-7 there); above, sign(x) (1 - 2 / (exp(2|x|) + 1))
# through exp32, where tanh >= 0.55 and the division loses nothing.
_TANH_P4, _TANH_P3, _TANH_P2, _TANH_P1, _TANH_P0 = (
    np.float32(c) for c in (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
                            -3.33332819422e-1)
)
_TANH_SMALL = np.float32(0.625)
_TWO = np.float32(2.0)


@_one_version(_as_float32)
def tanh32(x):
    """tanh in float32 arithmetic (largest relative error 1.4e-7, 1.2 float32 eps, near |x| = 0.626, on
    4 million points in [-12, 12]; tests/dsl/backends/test_support.py bounds it by 3 eps), so loops calling
    it vectorise: libm's tanhf is a scalar call (GPT-2's tanh GELU
    ran ~11 ns per element). Both branches are computed and one is selected, so the loop body has no
    branch. NaN stays NaN, +-0 keeps its sign, +-inf gives +-1."""
    x = np.float32(x)
    z = x * x
    p = ((((_TANH_P4 * z + _TANH_P3) * z + _TANH_P2) * z + _TANH_P1) * z + _TANH_P0) * z
    a = abs(x)
    small = p * x + x if a != np.float32(0.0) else x  # (-0 + 0 would be +0)
    large = _ONE - _TWO / (exp32(a + a) + _ONE)
    large = large if x >= np.float32(0.0) else -large
    return small if a < _TANH_SMALL else large


@_one_version(_as_float64)
def round_bf16_64(x):
    """bf16 nearest to a float64 (ties to even), rounded once (no float32 step), as float32."""
    x = np.float64(x)
    if x != x or abs(x) == np.inf or abs(x) < 2.0**-126:
        return round_bf16(np.float32(x))
    bits = np.uint64(x.view(np.uint64))
    lsb = (bits >> np.uint64(45)) & np.uint64(1)
    rounded = np.uint64((bits + np.uint64((1 << 44) - 1) + lsb) & np.uint64(0xFFFFE00000000000))
    return np.float32(rounded.view(np.float64))


@_one_version(_as_float64)
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


@_inline
def holds(block, view):
    """Whether `view` starts inside `block`'s memory: whether it is `block` or a view of it, for arrays
    the kernel allocated (distinct allocations never overlap). A loop-yielded buffer alternates
    between two arrays and takes the one no carried variable holds (`codegen._alternate`)."""
    start = block.ctypes.data
    return start <= view.ctypes.data < start + block.nbytes


# Reductions over one contiguous row. The kernels themselves are compiled without fast-math, so
# elementwise results round exactly as the IR says; only these helpers may reassociate, which is
# what lets LLVM vectorise a sum (the order of a float sum is unspecified in Triton too). The loops
# index the row: with numba 0.68 `for value in row` compiled to code that took 3.2x as long on a
# 4096-element row sum, which made every row kernel's reductions the slowest part of it.
_reassociating = numba.njit(cache=True, error_model="numpy", fastmath={"reassoc"})
_no_nans = numba.njit(cache=True, error_model="numpy", fastmath={"reassoc", "nnan", "nsz"})


@_reassociating
def row_sum(row):
    total = row.dtype.type(0)
    for i in range(row.shape[0]):
        total += row[i]
    return total


@_inline
def row_has_nan(row):
    seen = False
    for i in range(row.shape[0]):
        seen |= row[i] != row[i]
    return seen


# max/min of a contiguous float32/float64 row: one pass over its bits as integers. LLVM (numba 0.68) does not
# vectorise a float max reduction in any loop form tried (1.0-1.1 ns per element as a compare chain,
# with or without nnan), but does an integer one: each float's bits map to an integer of the same
# order (negative floats get their magnitude bits flipped), and bits above infinity's are a NaN. A
# 16-lane tile row took 50 ns in the two-pass float form (NaN scan, then eight running values) and
# takes 6 ns; a 1024-lane row 440 -> 225 ns. Ties of -0 and +0 give +0 for the max and -0 for the min
# (IEEE 754-2019 maximum/minimum) in either order. Other rows (strided, other dtypes) take the
# float form, eight running values after a NaN scan; the min is the max of the negated row.
@_no_nans
def _row_max_of_signed(row, sign):
    """max(sign * row) (-inf for an empty row), in eight running values."""
    n = row.shape[0]
    b0 = b1 = b2 = b3 = b4 = b5 = b6 = b7 = row.dtype.type(-np.inf)
    whole = n - n % 8
    for s in range(0, whole, 8):
        b0 = max(b0, sign * row[s])
        b1 = max(b1, sign * row[s + 1])
        b2 = max(b2, sign * row[s + 2])
        b3 = max(b3, sign * row[s + 3])
        b4 = max(b4, sign * row[s + 4])
        b5 = max(b5, sign * row[s + 5])
        b6 = max(b6, sign * row[s + 6])
        b7 = max(b7, sign * row[s + 7])
    best = max(max(max(b0, b1), max(b2, b3)), max(max(b4, b5), max(b6, b7)))
    for i in range(whole, n):
        best = max(best, sign * row[i])
    return best


def _row_extreme(row, minimum):  # pragma: no cover  (numba overload below)
    raise NotImplementedError("called from numba code only")


# Compiled with 512-bit vectors (`vector_width`) whatever the calling kernel's width: a helper's loop
# is vectorised in its own compile, and LLVM inlines it into kernels already vectorised. 16K floats in
# rows of 16 / 128 / 1024 lanes: 7.9 / 4.1 / 3.6 us at 256 bits, 6.4 / 2.5 / 2.0 us at 512 (a 128 x 128
# attention tile's row maxima are the middle case).
@numba.extending.overload(_row_extreme, jit_options={"cache": True, "pipeline_class": WideVectorCompiler})
def _row_extreme_impl(row, minimum):
    """max (`minimum` False) or min of `row` with NaN propagation (-inf / +inf for an empty row)."""
    if row.layout != "C" or row.dtype not in (numba.types.float32, numba.types.float64):
        def by_floats(row, minimum):
            if row_has_nan(row):
                return row.dtype.type(np.nan)
            if minimum:
                return -_row_max_of_signed(row, row.dtype.type(-1))
            return _row_max_of_signed(row, row.dtype.type(1))
        return by_floats
    wide = row.dtype == numba.types.float64
    bits_type, float_type = (np.int64, np.float64) if wide else (np.int32, np.float32)
    shift = bits_type(63 if wide else 31)
    magnitude = bits_type(2**63 - 1 if wide else 2**31 - 1)
    infinity = bits_type(0x7FF0000000000000 if wide else 0x7F800000)
    lowest = bits_type((int(infinity) | -(2 ** int(shift))) ^ int(magnitude))  # -inf's key

    def by_bits(row, minimum):
        bits = numba.carray(as_pointer(row.ctypes.data, bits_type), row.shape[0])
        flip = bits_type(-1) if minimum else bits_type(0)  # ~key reverses the order: min = ~max(~key)
        best = (infinity if minimum else lowest) ^ flip  # the key of the empty row's result
        nan = False
        for i in range(bits.shape[0]):
            b = bits[i]
            nan |= (b & magnitude) > infinity
            key = (b ^ ((b >> shift) & magnitude)) ^ flip
            best = key if key > best else best
        best ^= flip
        if nan:
            return float_type(np.nan)
        return bits_type(best ^ ((best >> shift) & magnitude)).view(float_type)
    return by_bits


@_inline
def row_max(row):
    """max with NaN propagation (see `_row_extreme`)."""
    return _row_extreme(row, False)


@_inline
def row_min(row):
    """min with NaN propagation (see `_row_extreme`)."""
    return _row_extreme(row, True)
