"""Elementwise kernels: unary, binary (dense rows or broadcast tiles), ternary (`where`; addcmul, addcdiv,
lerp), tiled copy.

Every kernel computes in float32 and stores in the output's dtype. The operation is a constexpr code
(`UNARY`, `BINARY` below): each op compiles alone, in a fraction of the time that a runtime switch over
every op took (see the note above FUSED_BINARY). Dense operands are read as rows (`binary_dense_kernel`);
broadcast or strided ones through up to four collapsed dims in tiles of the last two, each operand's
offsets affine in the tile (strides 0 where it broadcasts).
"""

from __future__ import annotations

import torch_rbln.dsl as tl
from torch_rbln.dsl.extra import libdevice

# Unary op codes.
(NEG, EXP, SQRT, RSQRT, SIGMOID, TANH, RELU, GELU, GELU_TANH, SILU, POW, FILL, ABS, LOG, SCALE,
 CUBE, RECIPROCAL, RECIPROCAL_SQUARE, COS, SIN, LEAKY_RELU, FLOOR, CEIL, TRUNC, SIGN, ERF, HARDSWISH,
 HARDSIGMOID, EXP_NEG_ABS, LOG_SIGMOID, SOFTPLUS, LOG1P, EXPM1, ROUND, ELU, MISH, ERFINV) = range(37)
UNARY = {
    "neg": NEG, "exp": EXP, "sqrt": SQRT, "rsqrt": RSQRT, "sigmoid": SIGMOID, "tanh": TANH, "relu": RELU,
    "gelu": GELU, "gelu_tanh": GELU_TANH, "silu": SILU, "pow": POW, "fill": FILL, "abs": ABS, "log": LOG,
    "scale": SCALE, "cube": CUBE, "reciprocal": RECIPROCAL, "reciprocal_square": RECIPROCAL_SQUARE,
    "cos": COS, "sin": SIN, "leaky_relu": LEAKY_RELU, "floor": FLOOR, "ceil": CEIL, "trunc": TRUNC,
    "sign": SIGN, "erf": ERF, "hardswish": HARDSWISH, "hardsigmoid": HARDSIGMOID, "exp_neg_abs": EXP_NEG_ABS,
    "log_sigmoid": LOG_SIGMOID, "softplus": SOFTPLUS, "log1p": LOG1P, "expm1": EXPM1, "round": ROUND,
    "elu": ELU, "mish": MISH, "erfinv": ERFINV,
}
# Binary op codes (the first operand is `a`, the second `b`; `alpha` scales `b` for add/sub).
(ADD, SUB, MUL, DIV, EQ, NE, LT, LE, GT, GE, MAXIMUM, MINIMUM,
 GELU_BWD, GELU_TANH_BWD, THRESHOLD_BWD, SIGMOID_BWD, TANH_BWD, SILU_BWD, POW_T,
 DIV_TRUNC, DIV_FLOOR, CLAMP, DIV_TRUNC_SCALAR, LEAKY_RELU_BWD, SOFTPLUS_BWD, ELU_BWD,
 ELU_BWD_RESULT, MISH_BWD, SMOOTH_L1, HUBER, SMOOTH_L1_BWD, HUBER_BWD, FMOD, REMAINDER, ATAN2, HYPOT,
 XLOGY) = range(37)
BINARY = {
    "add": ADD, "sub": SUB, "mul": MUL, "div": DIV, "eq": EQ, "ne": NE, "lt": LT, "le": LE, "gt": GT,
    "ge": GE, "maximum": MAXIMUM, "minimum": MINIMUM, "gelu_backward": GELU_BWD,
    "gelu_tanh_backward": GELU_TANH_BWD, "threshold_backward": THRESHOLD_BWD,
    "sigmoid_backward": SIGMOID_BWD, "tanh_backward": TANH_BWD, "silu_backward": SILU_BWD, "pow": POW_T,
    "div_trunc": DIV_TRUNC, "div_floor": DIV_FLOOR, "clamp": CLAMP, "div_trunc_scalar": DIV_TRUNC_SCALAR,
    "leaky_relu_backward": LEAKY_RELU_BWD, "softplus_backward": SOFTPLUS_BWD,
    "elu_backward": ELU_BWD, "elu_backward_of_result": ELU_BWD_RESULT, "mish_backward": MISH_BWD,
    "smooth_l1": SMOOTH_L1, "huber": HUBER, "smooth_l1_backward": SMOOTH_L1_BWD, "huber_backward": HUBER_BWD,
    "fmod": FMOD, "remainder": REMAINDER, "atan2": ATAN2, "hypot": HYPOT, "xlogy": XLOGY,
}
COMPARISONS = frozenset({EQ, NE, LT, LE, GT, GE})
# Ternary op codes of `ternary_tiled_kernel` (a, b, c: self, tensor1/end, tensor2/weight).
ADDCMUL, ADDCDIV, LERP, LERP_SCALAR, LOG_SIGMOID_BWD = range(5)
TERNARY = {"addcmul": ADDCMUL, "addcdiv": ADDCDIV, "lerp": LERP, "lerp_scalar": LERP_SCALAR,
           "log_sigmoid_backward": LOG_SIGMOID_BWD}


@tl.jit
def _log1p(x):
    """log(1 + x) to within a few ulps for small x too (Goldberg's: log(u) * x / (u - 1), u = 1 + x
    rounded, whose error cancels; x itself where u rounds to 1, so -0.0 stays -0.0); +inf stays +inf,
    -1 gives -inf, below -1 and NaN give NaN (log of a negative u)."""
    u = 1.0 + x
    return tl.where(u == 1.0, x, tl.where(u == float("inf"), u, tl.log(u) * (x / (u - 1.0))))


@tl.jit
def _expm1(x):
    """exp(x) - 1 to within a few ulps for small x too (Kahan's: (u - 1) * x / log(u), u = exp(x)
    rounded, whose errors cancel; x itself where u rounds to 1, -1 where u - 1 does); +inf stays
    +inf, -inf gives -1, NaN NaN."""
    u = tl.exp(x)
    um1 = u - 1.0
    kahan = tl.where(u == float("inf"), u, um1 * (x / tl.log(u)))
    return tl.where(u == 1.0, x, tl.where(um1 == -1.0, -1.0, kahan))


@tl.jit
def _round_half_even(x):
    """torch.round: the nearest integer, ties to even, in float32 arithmetic: |x| + 2^23 rounds away
    the fraction (round-to-nearest-even, float32's own), and subtracting 2^23 back is exact; |x| >=
    2^23 (already an integer), +-Inf, NaN and +-0 are x itself; the sign is x's (-0.3 gives -0.0)."""
    magnitude = tl.abs(x)
    rounded = (magnitude + 8388608.0) - 8388608.0
    signed = tl.where(x < 0.0, -rounded, rounded)
    return tl.where((magnitude < 8388608.0) & (x != 0.0), signed, x)


@tl.jit
def _gelu_tanh_inner(x):
    return 0.7978845608028654 * (x + 0.044715 * x * x * x)


@tl.jit
def _pow(x, p):
    """x ** p as torch (C's pow) computes it for real x: a negative base needs an integer exponent,
    except -inf and an infinite exponent (|x| ** p); 1 ** p and x ** 0 are 1 (NaN too); (-1) ** +-inf
    is 1; a zero base gives 0 or inf, signed for -0.0 to an odd power."""
    magnitude = tl.abs(x)
    y = tl.exp(tl.log(magnitude) * p)
    infinite_p = tl.abs(p) == float("inf")
    y = tl.where((magnitude == 1.0) & infinite_p, 1.0, y)  # log(1) * inf is NaN
    frac = p - tl.floor(p)
    half = p * 0.5
    odd = (frac == 0.0) & (half - tl.floor(half) != 0.0)
    integral = tl.where(odd, -y, y)
    negative = tl.where(frac == 0.0, integral, tl.where((x == -float("inf")) | infinite_p, y, float("nan")))
    y = tl.where(x < 0.0, negative, y)
    zero = tl.where(p < 0.0, float("inf"), 0.0)  # (1 / -0.0 is -inf: the sign of a zero base)
    y = tl.where((x == 0.0) & (p == p), tl.where(odd & (1.0 / x < 0.0), -zero, zero), y)
    return tl.where((p == 0.0) | (x == 1.0), 1.0, y)


@tl.jit
def _div_floor(a, b):
    """Python/torch floor division of floats: exact via fmod, not floor(a / b) (which rounds first)."""
    mod = a % b
    div = (a - mod) / b
    div = tl.where((mod != 0.0) & ((b < 0.0) != (mod < 0.0)), div - 1.0, div)
    floordiv = tl.floor(div)
    floordiv = tl.where(div - floordiv > 0.5, floordiv + 1.0, floordiv)
    # zero keeps the sign of the true quotient; a zero divisor gives a / b (inf or nan) as torch does
    floordiv = tl.where(div == 0.0, 0.0 * (a / b), floordiv)
    return tl.where(b == 0.0, a / b, floordiv)


# The unary ops whose specialisation the numba backend fuses (load, math and store in one loop over the
# lanes that exist: x read once, no select), so BLOCK only bounds that loop and one BLOCK serves every
# size (`registry.geometry.fused_block`). The others (relu's where, gelu, silu, cube, pow) use x more
# than once: x is materialised in a BLOCK-long buffer whose masked lanes are filled on every launch.
# tests/kernels/test_fast_specialisations.py reads the generated code to keep this list true.
FUSED_UNARY = frozenset({NEG, EXP, SQRT, RSQRT, SIGMOID, TANH, FILL, ABS, LOG, SCALE, RECIPROCAL, COS, SIN,
                         FLOOR, CEIL, ERF, HARDSIGMOID, EXP_NEG_ABS})


# erfinv's first guess: M. Giles' single-precision approximation ("Approximating the erfinv function",
# GPU Computing Gems, 2011), a polynomial in w - 2.5 for w = -log((1 - x)(1 + x)) < 5 and in sqrt(w) - 3
# beyond, Horner order from the highest degree; within 4 float32 ulps on (-1, 1).
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                   -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


@tl.jit
def _erfinv(x):
    """erfinv of float32 values: Giles' guess, then one Newton step on erf(y) = x in float64 (erf's
    derivative 2 / sqrt(pi) exp(-y^2)), which leaves about half an ulp, torch's CPU accuracy; +-1 give
    +-inf, |x| > 1 and NaN give NaN, -0.0 stays -0.0."""
    w = -tl.log((1.0 - x) * (1.0 + x))
    central = w - 2.5
    tail = tl.sqrt(w) - 3.0
    p = tl.full(x.shape, _ERFINV_CENTRAL[0], tl.float32)
    q = tl.full(x.shape, _ERFINV_TAIL[0], tl.float32)
    for k in tl.static_range(1, 9):
        p = p * central + _ERFINV_CENTRAL[k]
        q = q * tail + _ERFINV_TAIL[k]
    guess = tl.where(w < 5.0, p, q) * x
    y = guess.to(tl.float64)
    y = y - (tl.erf(y) - x.to(tl.float64)) / (1.1283791670955126 * tl.exp(-y * y))
    return tl.where(tl.abs(x) == 1.0, x * float("inf"), y.to(tl.float32))


@tl.jit
def _unary_op(x, p, OP: tl.constexpr):
    """The unary op `OP` (a constexpr code, see UNARY: the switch folds to its one branch) on float32
    values, with parameter `p` (pow's exponent, scale's factor)."""
    if OP == 0:
        y = -x
    elif OP == 1:
        y = tl.exp(x)
    elif OP == 2:
        y = tl.sqrt(x)
    elif OP == 3:
        y = tl.rsqrt(x)
    elif OP == 4:
        y = tl.sigmoid(x)
    elif OP == 5:
        y = tl.tanh(x)
    elif OP == 6:
        y = tl.where(x < 0.0, 0.0, x)  # relu as torch: NaN and -0.0 pass through
    elif OP == 7:
        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    elif OP == 8:
        y = 0.5 * x * (1.0 + tl.tanh(_gelu_tanh_inner(x)))
    elif OP == 9:
        y = x * tl.sigmoid(x)
    elif OP == 10:
        y = _pow(x, p)
    elif OP == 12:
        y = tl.abs(x)
    elif OP == 13:
        y = tl.log(x)
    elif OP == 14:
        y = x * p
    elif OP == 15:  # pow(x, 3), 1 / x and 1 / x^2 as torch computes them (no exp/log)
        y = x * x * x
    elif OP == 16:
        y = 1.0 / x
    elif OP == 17:
        y = 1.0 / (x * x)
    elif OP == 18:
        y = tl.cos(x)
    elif OP == 19:
        y = tl.sin(x)
    elif OP == 20:  # leaky_relu as torch computes it, x > 0 ? x : x * slope (NaN and -0.0 as the CPU's)
        y = tl.where(x > 0.0, x, x * p)
    elif OP == 21:
        y = tl.floor(x)
    elif OP == 22:
        y = tl.ceil(x)
    elif OP == 23:  # toward zero; -0.5 gives -0.0 as torch's
        y = tl.where(x < 0.0, tl.ceil(x), tl.floor(x))
    elif OP == 24:  # torch's (0 < x) - (x < 0): NaN and -0.0 give +0.0
        y = tl.where(x > 0.0, 1.0, 0.0) - tl.where(x < 0.0, 1.0, 0.0)
    elif OP == 25:
        y = tl.erf(x)
    elif OP == 26:  # hardswish as torch: x * min(max(x + 3, 0), 6) / 6 (-inf gives NaN, as -inf * 0)
        y = x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0
    elif OP == 27:  # hardsigmoid: min(max(x + 3, 0), 6) / 6, NaN kept
        y = tl.minimum(tl.maximum(x + 3.0, 0.0, propagate_nan=tl.PropagateNan.ALL), 6.0,
                       propagate_nan=tl.PropagateNan.ALL) / 6.0
    elif OP == 28:  # exp(-|x|): log_sigmoid's buffer, as torch's CPU kernel stores it
        y = tl.exp(-tl.abs(x))
    elif OP == 29:  # log_sigmoid as torch's CPU kernel: min(x, 0) - log1p(exp(-|x|)), in float32
        y = tl.minimum(x, 0.0, propagate_nan=tl.PropagateNan.ALL) - _log1p(tl.exp(-tl.abs(x)))
    elif OP == 30:  # softplus with beta 1 as torch: x > threshold (p) ? x : log1p(exp(x))
        y = tl.where(x > p, x, _log1p(tl.exp(x)))
    elif OP == 31:
        y = _log1p(x)
    elif OP == 32:
        y = _expm1(x)
    elif OP == 33:  # round half to even (`_round_half_even`)
        y = _round_half_even(x)
    elif OP == 34:  # elu (scale and input_scale 1) as torch's CPU kernel: x > 0 ? x : expm1(x) * alpha (p)
        y = tl.where(x > 0.0, x, _expm1(x) * p)
    elif OP == 35:  # mish as torch's CPU kernel: x * tanh(log1p(exp(x)))
        y = x * tl.tanh(_log1p(tl.exp(x)))
    else:
        y = _erfinv(x)
    return y


@tl.jit
def unary_kernel(x_ptr, out_ptr, n, p, OP: tl.constexpr, BLOCK: tl.constexpr):
    """The unary op `OP` (see UNARY) over `n` elements, `p` its parameter. OP is a constexpr: each op
    compiles alone. Why not one specialisation with a runtime switch over all ops: numba compiled that
    switch in 2.4 s (float32) to 4 s (float16) against ~0.4 s for one op, and behind it no loop fused,
    so a single hot activation ran several times slower; a program uses a handful of unary ops."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    if OP == 11:  # fill: reads no input (not `zeros + p`: 0.0 + -0.0 is +0.0, and torch fills -0.0)
        y = tl.full((BLOCK,), p, tl.float32)
    else:
        y = _unary_op(tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32), p, OP)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


@tl.jit
def _plane_tile(t, cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Rows (a column vector) and columns (a row vector) of tile `t` of a plane `cols` wide, tiles
    numbered row-major."""
    tiles_n = tl.cdiv(cols, BLOCK_N)
    rows = ((t // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M))[:, None]
    return rows, ((t % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N))[None, :]


@tl.jit
def _tile_lanes(s2, s3, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """This program's tile of the tiled kernels: the index of dims 0 and 1 (grid axis 1), the tile's
    rows of dim 2 and columns of dim 3 (grid axis 0 numbers the tiles, `_plane_tile`'s order), and
    its in-bounds mask."""
    rows, cols = _plane_tile(tl.program_id(0), s3, BLOCK_M, BLOCK_N)
    return tl.program_id(1), rows, cols, (rows < s2) & (cols < s3)


@tl.jit
def _tile_offsets(outer, rows, cols, s1, t0, t1, t2, t3):
    """Offsets of an operand with strides t0..t3 over one tile of the tiled kernels: `outer` indexes
    dims 0 and 1 (of sizes . x s1), `rows` and `cols` dims 2 and 3."""
    return (outer // s1) * t0 + (outer % s1) * t1 + rows * t2 + cols * t3


@tl.jit
def _comparison(a, b, OP):
    """The comparison `OP` (EQ..GE) of two values of one dtype (float32 or int64)."""
    if OP == 4:
        y = a == b
    elif OP == 5:
        y = a != b
    elif OP == 6:
        y = a < b
    elif OP == 7:
        y = a <= b
    elif OP == 8:
        y = a > b
    else:
        y = a >= b
    return y


@tl.jit
def _binary_op(a, b, alpha, OP: tl.constexpr, out_ptr):
    """The binary op `OP` (a constexpr code, see BINARY: the switch folds to its one branch) on float32
    values (`out_ptr` gives the output dtype, to which trunc division rounds its quotient first)."""
    if OP == 0:
        y = a + alpha * b
    elif OP == 1:
        y = a - alpha * b
    elif OP == 2:
        y = a * b
    elif OP == 3:
        y = a / b
    elif OP <= 9:
        y = _comparison(a, b, OP)
    elif OP == 10:
        y = tl.where((a > b) | (a != a), a, b)
    elif OP == 11:
        y = tl.where((a < b) | (a != a), a, b)
    elif OP == 12:  # gelu backward (erf): a = grad, b = x
        cdf = 0.5 * (1.0 + tl.erf(b * 0.7071067811865476))
        pdf = tl.exp(-0.5 * b * b) * 0.3989422804014327
        y = a * (cdf + b * pdf)
    elif OP == 13:  # gelu backward (tanh)
        inner = _gelu_tanh_inner(b)
        t = tl.tanh(inner)
        d_inner = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * b * b)
        y = a * (0.5 * (1.0 + t) + 0.5 * b * (1.0 - t * t) * d_inner)
    elif OP == 14:  # threshold backward: a = grad, b = self, alpha = threshold
        y = tl.where(b <= alpha, 0.0, a)
    elif OP == 15:  # sigmoid backward: a = grad, b = output
        y = a * (1.0 - b) * b
    elif OP == 16:  # tanh backward: a = grad, b = output
        y = a * (1.0 - b * b)
    elif OP == 17:  # silu backward: a = grad, b = x
        s = tl.sigmoid(b)
        y = a * s * (1.0 + b * (1.0 - s))
    elif OP == 18:
        y = _pow(a, b)
    elif OP == 19:  # div, rounding_mode="trunc": torch rounds the quotient to the tensor dtype first
        q = (a / b).to(out_ptr.dtype.element_ty).to(tl.float32)
        y = tl.where(q < 0.0, -tl.floor(-q), tl.floor(q))
    elif OP == 20:  # div, rounding_mode="floor"
        y = _div_floor(a, b)
    elif OP == 21:  # clamp: a = x, b = lower bound, alpha = upper bound (torch: min > max gives max)
        y = tl.minimum(tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL), alpha,
                       propagate_nan=tl.PropagateNan.ALL)  # torch.clamp keeps a NaN
    elif OP == 22:  # div by a scalar, rounding_mode="trunc": torch truncates the float32 quotient directly
        q = a / b
        y = tl.where(q < 0.0, -tl.floor(-q), tl.floor(q))
    elif OP == 23:  # leaky_relu backward: a = grad, b = self, alpha = the negative slope
        y = tl.where(b > 0.0, a, a * alpha)
    elif OP == 24:  # softplus backward (beta 1): a = grad, b = self, alpha = threshold; grad * z / (z + 1)
        z = tl.exp(b)
        y = tl.where(b > alpha, a, a * z / (z + 1.0))
    elif OP == 25:  # elu backward from the input (scales 1): a = grad, b = x; torch's grad * alpha * exp(x)
        y = tl.where(b > 0.0, a, a * alpha * tl.exp(b))
    elif OP == 26:  # elu backward from the result (elu_'s): a = grad, b = the result; grad * (y + alpha)
        y = tl.where(b > 0.0, a, a * (b + alpha))
    elif OP == 27:  # mish backward as torch's: a = grad, b = x; grad * (t + x sigmoid(x) (1 - t^2))
        t = tl.tanh(_log1p(tl.exp(b)))
        y = a * (t + b * (1.0 / (1.0 + tl.exp(-b))) * (1.0 - t * t))
    elif OP == 28:  # smooth L1 loss as torch: z = |x - target|, z < beta ? 0.5 z^2 / beta : z - beta / 2
        z = tl.abs(a - b)
        y = tl.where(z < alpha, 0.5 * z * z / alpha, z - 0.5 * alpha)
    elif OP == 29:  # huber loss as torch: z < delta ? 0.5 z^2 : delta (z - delta / 2)
        z = tl.abs(a - b)
        y = tl.where(z < alpha, 0.5 * z * z, alpha * (z - 0.5 * alpha))
    elif OP == 30:  # smooth L1 backward: a = x - target, b = norm * grad, alpha = beta (torch's branches)
        y = tl.where(a <= -alpha, -b, tl.where(a >= alpha, b, a * b / alpha))
    elif OP == 31:  # huber backward: a = x - target, b = norm * grad, alpha = delta
        y = tl.where(a <= -alpha, -alpha * b, tl.where(a >= alpha, alpha * b, a * b))
    elif OP == 32:  # fmod: C's, the sign of a (exact: a - n * b is representable)
        y = a % b
    elif OP == 33:  # remainder as torch's CPU kernel: fmod, then b added where the signs differ
        mod = a % b
        y = tl.where((mod != 0.0) & ((b < 0.0) != (mod < 0.0)), mod + b, mod)
    elif OP == 34:  # atan2(a, b): the angle of the point (b, a)
        y = libdevice.atan2(a, b)
    elif OP == 35:  # hypot: sqrt(a^2 + b^2) in float64, where neither square overflows nor underflows
        wide_a = a.to(tl.float64)
        wide_b = b.to(tl.float64)
        wide = tl.sqrt(wide_a * wide_a + wide_b * wide_b).to(tl.float32)
        # C's hypot: an infinite operand gives +inf, even beside a NaN (reading a and b twice: not in
        # FUSED_BINARY)
        y = tl.where((tl.abs(a) == float("inf")) | (tl.abs(b) == float("inf")), float("inf"), wide)
    else:  # xlogy as torch's: NaN where b is NaN, else 0 where a is 0, else a * log(b)
        y = tl.where(b != b, b, tl.where(a == 0.0, 0.0, a * tl.log(b)))
    return y


@tl.jit
def binary_kernel(a_ptr, b_ptr, out_ptr, n, alpha, OP: tl.constexpr, BLOCK: tl.constexpr):
    """A binary op on two operands of the output's dense layout, one element per lane: for outputs of
    2^31 or more elements, whose rows `binary_dense_kernel` indexes in int32 (broadcast or strided
    operands take `binary_tiled_kernel`)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask, other=1.0).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask, other=1.0).to(tl.float32)
    y = _binary_op(a, b, alpha, OP, out_ptr)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


@tl.jit
def _row_operand(ptr, cols, offsets, mask, MODE: tl.constexpr):
    """An operand of `binary_dense_kernel` in float32, read as its MODE says."""
    if MODE == 0:
        value = tl.load(ptr + offsets, mask=mask, other=1.0).to(tl.float32)
    elif MODE == 1:
        value = tl.load(ptr).to(tl.float32)
    elif MODE == 2:
        value = tl.load(ptr + cols, mask=mask, other=1.0).to(tl.float32)
    else:
        value = tl.load(ptr + tl.program_id(1)).to(tl.float32)
    return value


@tl.jit
def binary_dense_kernel(
    a_ptr, b_ptr, out_ptr, ncols, alpha,
    OP: tl.constexpr, A_MODE: tl.constexpr, B_MODE: tl.constexpr, BLOCK: tl.constexpr,
):
    """`binary_kernel` for the common layouts, with few runtime arguments (each costs time in every
    launch of a small op) and no index decomposition. The contiguous output is seen as rows of `ncols`
    (grid: column blocks x rows; one row when nothing repeats). Each operand is, by its MODE: 0 dense
    (the output's layout), 1 a scalar (one element, broadcast), 2 one row repeated for every row (a
    bias vector, any contiguous trailing block of the output's shape), 3 one value per row (a column:
    `x * rsqrt(mean(x * x, -1, keepdim=True))`). OP is a constexpr, as in every float elementwise
    kernel: each op compiles alone (see the note above FUSED_BINARY)."""
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < ncols
    offsets = tl.program_id(1) * ncols + cols
    a = _row_operand(a_ptr, cols, offsets, mask, A_MODE)
    b = _row_operand(b_ptr, cols, offsets, mask, B_MODE)
    y = _binary_op(a, b, alpha, OP, out_ptr)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


@tl.jit
def binary_tiled_kernel(
    a_ptr, b_ptr, out_ptr, alpha, s1, s2, s3, a0, a1, a2, a3, b0, b1, b2, b3,
    OP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """`binary_kernel` over large outputs (broadcast or strided operands), one BLOCK_M x BLOCK_N tile of
    dims 2 and 3 per program (grid axis 0: the tiles, axis 1: the index of dims 0 and 1), as
    `where_tiled_kernel`, one specialisation per op as `binary_dense_kernel`. Why: the flat kernel
    divides every lane's index by three sizes for each operand and runs the op switch: Llama's RoPE
    `q * cos` (a permuted q, a broadcast cos; 65536 elements) took ~2.3 ms, ~36 ns per element."""
    outer, rows, cols, mask = _tile_lanes(s2, s3, BLOCK_M, BLOCK_N)
    a = tl.load(a_ptr + _tile_offsets(outer, rows, cols, s1, a0, a1, a2, a3), mask=mask, other=1.0)
    b = tl.load(b_ptr + _tile_offsets(outer, rows, cols, s1, b0, b1, b2, b3), mask=mask, other=1.0)
    y = _binary_op(a.to(tl.float32), b.to(tl.float32), alpha, OP, out_ptr)
    tl.store(out_ptr + (outer * s2 + rows) * s3 + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


# Why each binary op compiles alone (OP a constexpr) instead of sharing one specialisation with a
# runtime switch over the 23 ops: numba compiled that switch in 3.4-3.8 s (float32) and 9-14 s (float16,
# bfloat16) per (dtypes, layout, block), a single op in 0.4-1.4 s, and behind the switch add/sub/mul/div
# ran ~4x slower (no loop fused). A program uses a handful of binary ops; the switch paid for all 23.
#
# The binary ops whose specialisation fuses in every float dtype and operand layout (see FUSED_UNARY);
# maximum/minimum, pow and the activation backwards read an operand more than once.
FUSED_BINARY = frozenset({ADD, SUB, MUL, DIV, EQ, NE, LT, LE, GT, GE, THRESHOLD_BWD, CLAMP, FMOD, ATAN2})


@tl.jit
def where_tiled_kernel(
    c_ptr, a_ptr, b_ptr, out_ptr, s1, s2, s3,
    c0, c1, c2, c3, a0, a1, a2, a3, b0, b1, b2, b3,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """`torch.where`, one BLOCK_M x BLOCK_N tile of dims 2 and 3 per program (grid axis 0: the tiles,
    axis 1: the index of dims 0 and 1), as `tiled_copy_kernel`: each operand's offsets are affine in the
    tile, where a flat kernel divided every lane's index by the sizes. The promoted type of a and b:
    exact for integers too."""
    outer, rows, cols, mask = _tile_lanes(s2, s3, BLOCK_M, BLOCK_N)
    c = tl.load(c_ptr + _tile_offsets(outer, rows, cols, s1, c0, c1, c2, c3), mask=mask, other=0)
    a = tl.load(a_ptr + _tile_offsets(outer, rows, cols, s1, a0, a1, a2, a3), mask=mask, other=0)
    b = tl.load(b_ptr + _tile_offsets(outer, rows, cols, s1, b0, b1, b2, b3), mask=mask, other=0)
    y = tl.where(c != 0, a, b)
    tl.store(out_ptr + (outer * s2 + rows) * s3 + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@tl.jit
def _ternary_op(a, b, c, value, OP: tl.constexpr):
    """addcmul (a + value * b * c), addcdiv (a + value * b / c), lerp (from a to b by weight c: a
    tensor, or the number for LERP_SCALAR) or log_sigmoid's backward (input a, buffer b, gradient c) in
    float32 (torch's opmath type for every float dtype here),
    rounded as torch's CPU kernels round: value * b first, then one fused multiply-add with c and a
    (addcmul) or c's quotient and a's sum (addcdiv); lerp one fused multiply-add coeff * (b - a) + base,
    with (coeff, base) = (w, a) for |w| < 0.5 and (w - 1, b) otherwise, so a weight of 1 gives b
    exactly. Bitwise the CPU's results, special values included (`tests/registry/test_ternary.py`)."""
    if OP == ADDCMUL:
        y = tl.fma(value * b, c, a)
    elif OP == ADDCDIV:
        y = a + value * b / c
    elif OP == LOG_SIGMOID_BWD:  # a = input, b = buffer exp(-|a|), c = grad: torch's CPU formula
        negative = a < 0.0
        y = (tl.where(negative, 1.0, 0.0) - tl.where(negative, 1.0, -1.0) * (b / (1.0 + b))) * c
    else:
        small = tl.abs(c) < 0.5
        y = tl.fma(tl.where(small, c, c - 1.0), b - a, tl.where(small, a, b))
    return y


@tl.jit
def ternary_dense_kernel(a_ptr, b_ptr, c_ptr, out_ptr, value, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    """`_ternary_op` over `n` elements of three operands in the output's dense layout (c not read for
    LERP_SCALAR): flat offsets, which the numba backend reads as unit-stride runs in one vector loop (in
    place too: its same-memory variant); the tiled kernel's runtime strides gather every lane (an
    optimizer's addcmul_ on 65,536 elements: 32-38 us, torch's 8)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    if OP == LERP_SCALAR:
        c = value
    else:
        c = tl.load(c_ptr + offsets, mask=mask, other=1.0).to(tl.float32)
    tl.store(out_ptr + offsets, _ternary_op(a, b, c, value, OP).to(out_ptr.dtype.element_ty), mask=mask)


@tl.jit
def ternary_tiled_kernel(
    a_ptr, b_ptr, c_ptr, out_ptr, value, s1, s2, s3,
    a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3,
    OP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """`_ternary_op` on broadcast or strided operands, tiled as `where_tiled_kernel`."""
    outer, rows, cols, mask = _tile_lanes(s2, s3, BLOCK_M, BLOCK_N)
    a = tl.load(a_ptr + _tile_offsets(outer, rows, cols, s1, a0, a1, a2, a3), mask=mask, other=0.0)
    b = tl.load(b_ptr + _tile_offsets(outer, rows, cols, s1, b0, b1, b2, b3), mask=mask, other=0.0)
    if OP == LERP_SCALAR:
        c = value
    else:
        c = tl.load(c_ptr + _tile_offsets(outer, rows, cols, s1, c0, c1, c2, c3), mask=mask, other=1.0)
        c = c.to(tl.float32)
    y = _ternary_op(a.to(tl.float32), b.to(tl.float32), c, value, OP)
    tl.store(out_ptr + (outer * s2 + rows) * s3 + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@tl.jit
def tiled_copy_kernel(
    src_ptr, dst_ptr, dst_offset, s1, s2, s3, t0, t1, t2, t3, d0, d1, d2, d3,
    UNIT_INNER: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """dst (from element dst_offset, strides d0..d3) = src (strides t0..t3) over sizes (., s1, s2, s3),
    dtype cast, one BLOCK_M x BLOCK_N tile of dims 2 and 3 per program (grid axis 0: the tiles, axis 1:
    the index of dims 0 and 1, whose offsets each program computes once).

    The registry orders the dims so that the destination is written along dim 3 and, for a transpose,
    the source read along dim 2: a tile's rows and columns then stay in cache between the read and the
    write. UNIT_INNER: both move along dim 3 with stride 1 (t3 and d3 are ignored), so every tile row is
    a contiguous run on both sides, which the backend copies in vector instructions."""
    tiles_n = tl.cdiv(s3, BLOCK_N)
    tile = tl.program_id(0)
    outer = tl.program_id(1)
    rows = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < s2) & (cols[None, :] < s3)
    i0 = outer // s1
    i1 = outer % s1
    source = src_ptr + i0 * t0 + i1 * t1 + rows[:, None] * t2
    target = dst_ptr + dst_offset + i0 * d0 + i1 * d1 + rows[:, None] * d2
    if UNIT_INNER:
        x = tl.load(source + cols[None, :], mask=mask, other=0)
        tl.store(target + cols[None, :], x.to(dst_ptr.dtype.element_ty), mask=mask)
    else:
        x = tl.load(source + cols[None, :] * t3, mask=mask, other=0)
        tl.store(target + cols[None, :] * d3, x.to(dst_ptr.dtype.element_ty), mask=mask)


@tl.jit
def arange_kernel(out_ptr, n, n_vec, start_hi, start_mid, start_lo, step_hi, step_mid, step_lo,
                  BLOCK: tl.constexpr, LANES: tl.constexpr):
    """PyTorch's CPU arange, bit for bit: elements below `n_vec` as its vectorised loop makes them (a
    vector of LANES elements from its first one rounded to the output dtype: `base + lane * step`),
    the others as its scalar loop (`start + i * step`), all in float64 and rounded to the output dtype.
    Float scalars reach a kernel as float32, so the host splits each double into three float32 parts
    (`_ops.split_double`) whose float64 sum is the double exactly."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    start = start_hi.to(tl.float64) + start_mid.to(tl.float64) + start_lo.to(tl.float64)
    step = step_hi.to(tl.float64) + step_mid.to(tl.float64) + step_lo.to(tl.float64)
    dtype = out_ptr.dtype.element_ty
    lane = offsets % LANES
    base = (start + (offsets - lane).to(tl.float64) * step).to(dtype).to(tl.float64)
    vectorised = base + lane.to(tl.float64) * step
    scalar = start + offsets.to(tl.float64) * step
    y = tl.where(offsets < n_vec, vectorised, scalar)
    tl.store(out_ptr + offsets, y.to(dtype), mask=mask)
