"""The user-facing language: Triton's `triton.language` builtins.

Each builtin is a small documented function; its meaning lives in `semantic.py`.  Builtins are called
by the frontend while it compiles a kernel (they emit IR through the current builder); calling one
outside a kernel raises an error, except for pure compile-time helpers such as `cdiv`.
"""

from __future__ import annotations

import builtins as _py

from . import dtypes as _dtypes
from . import semantic as S
from .dtypes import (  # noqa: F401  (re-exported)  # noqa: F401
    bfloat16,
    float8e4b8,
    float8e4b15,
    float8e4nv,
    float8e5,
    float8e5b16,
    float16,
    float32,
    float64,
    int1,
    int8,
    int16,
    int32,
    int64,
    pointer_type,
    uint8,
    uint16,
    uint32,
    uint64,
    void,
)
from .errors import DSLError
from .semantic import constexpr, tensor  # noqa: F401

bool_ = int1
pi32_t = pointer_type(int32)  # Triton's name for a pointer to int32


def builtin(fn):
    """Marks a function as a DSL builtin (called directly by the frontend)."""
    fn.__dsl_builtin__ = True
    return fn


def _u(x):
    return S.unwrap(x)


# ----------------------------------------------------------------------------------------------------
# programs and creation
# ----------------------------------------------------------------------------------------------------
@builtin
def program_id(axis):
    """Index of the current program along `axis` (0, 1 or 2); an int32 scalar."""
    return S.program_id(axis)


@builtin
def num_programs(axis):
    """Number of programs launched along `axis`; an int32 scalar."""
    return S.num_programs(axis)


@builtin
def arange(start, end):
    """int32 block `[start, end)`; the length must be a power of two (compile-time bounds)."""
    return S.arange(start, end)


@builtin
def zeros(shape, dtype):
    """A block of `shape` filled with zeros of `dtype`."""
    return S.full(shape, 0, dtype)


@builtin
def zeros_like(input, dtype=None):
    """Zeros with the shape (and by default dtype) of `input`."""
    return S.full(input.shape, 0, dtype or input.dtype)


@builtin
def full(shape, value, dtype):
    """A block of `shape` filled with `value` (a constant or a scalar tensor) cast to `dtype`."""
    return S.full(shape, value, dtype)


@builtin
def full_like(input, value, dtype=None):
    return S.full(input.shape, value, dtype or input.dtype)


# ----------------------------------------------------------------------------------------------------
# memory
# ----------------------------------------------------------------------------------------------------
@builtin
def load(
    pointer,
    mask=None,
    other=None,
    boundary_check=(),
    padding_option="",
    cache_modifier="",
    eviction_policy="",
    volatile=False,
):
    """Load a block from `pointer` (a pointer block or a block pointer).

    Lanes where `mask` is false read `other` (0 when absent).  With a block pointer, `boundary_check`
    lists the dims checked against the block pointer's shape; out-of-bounds lanes read `padding_option`
    ('zero' or 'nan')."""
    return S.load(pointer, mask, other, boundary_check, padding_option, volatile)


@builtin
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
    """Store `value` (broadcast to the pointer's shape and cast to its element type) where `mask` holds."""
    return S.store(pointer, value, mask, boundary_check)


@builtin
def make_block_ptr(base, shape, strides, offsets, block_shape, order=None):
    """A pointer to a `block_shape` block of the N-D tensor at `base` with `shape` and `strides`
    (in elements), starting at `offsets`."""
    return S.make_block_ptr(base, shape, strides, offsets, block_shape, order)


@builtin
def advance(base, offsets):
    """A block pointer moved by `offsets` (one per dim)."""
    return S.advance(base, offsets)


class tensor_descriptor:
    """A tensor descriptor (`make_tensor_descriptor`): `.load(offsets)` / `.store(offsets, value)` move a
    `block_shape` window over an N-D tensor; out-of-bounds elements read as zero and are not written."""

    def __init__(self, base, shape, strides, block_shape):
        self.base = base
        self.shape = tuple(shape)
        self.strides = tuple(strides)
        self.block_shape = tuple(_u(b) for b in block_shape)
        self.dtype = base.dtype.element_ty

    def _bptr(self, offsets):
        offsets = _u(offsets)
        if len(offsets) != len(self.block_shape):
            raise DSLError(f"tensor descriptor: expected {len(self.block_shape)} offsets, got {len(offsets)}")
        return S.make_block_ptr(self.base, self.shape, self.strides, offsets, self.block_shape)

    def load(self, offsets):
        return S.block_load(self._bptr(offsets), tuple(_py.range(len(self.block_shape))), "zero")

    def store(self, offsets, value):
        return S.block_store(self._bptr(offsets), value, tuple(_py.range(len(self.block_shape))))


@builtin
def make_tensor_descriptor(base, shape, strides, block_shape, padding_option="zero"):
    """Describe an N-D tensor at `base` for block loads/stores of `block_shape` (Triton >= 3.4)."""
    S._ptr_check(base, "tl.make_tensor_descriptor")
    n = len(_u(block_shape))
    if len(_u(shape)) != n or len(_u(strides)) != n:
        raise DSLError("make_tensor_descriptor: shape, strides and block_shape must have the same length")
    return tensor_descriptor(base, _u(shape), _u(strides), _u(block_shape))


@builtin
def load_tensor_descriptor(desc, offsets):
    return desc.load(offsets)


@builtin
def store_tensor_descriptor(desc, offsets, value):
    return desc.store(offsets, value)


@builtin
def atomic_add(pointer, val, mask=None, sem=None, scope=None):
    """Atomically add `val` at `pointer` where `mask` holds; returns the previous values."""
    return S.atomic("add", pointer, val, mask)


@builtin
def atomic_max(pointer, val, mask=None, sem=None, scope=None):
    return S.atomic("max", pointer, val, mask)


@builtin
def atomic_min(pointer, val, mask=None, sem=None, scope=None):
    return S.atomic("min", pointer, val, mask)


@builtin
def atomic_xchg(pointer, val, mask=None, sem=None, scope=None):
    return S.atomic("xchg", pointer, val, mask)


@builtin
def atomic_and(pointer, val, mask=None, sem=None, scope=None):
    return S.atomic("and", pointer, val, mask)


@builtin
def atomic_or(pointer, val, mask=None, sem=None, scope=None):
    return S.atomic("or", pointer, val, mask)


@builtin
def atomic_xor(pointer, val, mask=None, sem=None, scope=None):
    return S.atomic("xor", pointer, val, mask)


@builtin
def atomic_cas(pointer, cmp, val, sem=None, scope=None):
    return S.atomic_cas(pointer, cmp, val)


# ----------------------------------------------------------------------------------------------------
# elementwise
# ----------------------------------------------------------------------------------------------------
@builtin
def where(condition, x, y):
    """`x` where `condition` is true else `y`, with broadcasting and type promotion."""
    return S.where(condition, x, y)


class PropagateNan:
    """How `minimum`/`maximum`/`clamp` treat NaN (Triton's enum): `ALL` gives NaN when an operand is NaN;
    `NONE` (Triton's default, IEEE maxNum/minNum) gives the other operand (NaN only when both are)."""

    NONE = 0x0000
    ALL = 0xFFFF


def _nan_mode(propagate_nan):
    mode = _u(propagate_nan)
    if mode is None:
        return PropagateNan.NONE  # Triton's default
    if mode not in (PropagateNan.NONE, PropagateNan.ALL):
        raise DSLError(f"propagate_nan must be tl.PropagateNan.NONE or tl.PropagateNan.ALL, got {mode!r}")
    return mode


def _minmax(op, x, y, propagate_nan):
    """`op` ("minimum"/"maximum") of x and y.  The backends' min/max give NaN when either operand is NaN
    (PropagateNan.ALL); PropagateNan.NONE, Triton's default, selects the other operand where exactly one
    is NaN."""
    mode = _nan_mode(propagate_nan)
    r = S.minmax(op, x, y)
    if mode != PropagateNan.NONE or not isinstance(r, tensor) or not r.dtype.is_floating():
        return r
    x_nan, y_nan = S.unary("isnan", S.cast(x, r.dtype)), S.unary("isnan", S.cast(y, r.dtype))
    return S.where(x_nan, y, S.where(y_nan, x, r))


@builtin
def maximum(x, y, propagate_nan=None):
    """Elementwise maximum; `propagate_nan` is a `tl.PropagateNan` (see there)."""
    return _minmax("maximum", x, y, propagate_nan)


@builtin
def minimum(x, y, propagate_nan=None):
    """Elementwise minimum; `propagate_nan` is a `tl.PropagateNan` (see there)."""
    return _minmax("minimum", x, y, propagate_nan)


@builtin
def clamp(x, min, max, propagate_nan=None):
    """`x` limited to [min, max].  A NaN `x` gives NaN with PropagateNan.ALL, and `min` with
    PropagateNan.NONE, Triton's default (its clampf keeps the bound)."""
    mode = _nan_mode(propagate_nan)
    r = S.minmax("minimum", S.minmax("maximum", x, min), max)
    if mode != PropagateNan.NONE or not isinstance(r, tensor) or not r.dtype.is_floating():
        return r
    return S.where(S.unary("isnan", S.cast(x, r.dtype)), S.cast(min, r.dtype) if isinstance(min, tensor)
                   else min, r)


@builtin
def fma(x, y, z):
    """x * y + z."""
    return S.fma(x, y, z)


@builtin
def cdiv(x, div):
    """Ceiling division; works on constants (also on the host) and on tensors."""
    x, div = _u(x), _u(div)
    if not isinstance(x, tensor) and not isinstance(div, tensor):
        return (x + div - 1) // div
    return (x + div - 1) // div


def _unary(name, doc):
    def f(x):
        return S.unary(name, x)

    f.__name__ = name
    f.__qualname__ = name
    f.__doc__ = doc
    return builtin(f)


exp = _unary("exp", "e ** x (f16/bf16 computed in fp32 and rounded back).")
exp2 = _unary("exp2", "2 ** x.")
log = _unary("log", "Natural logarithm.")
log2 = _unary("log2", "Base-2 logarithm.")
sqrt = _unary("sqrt", "Square root.")
sqrt_rn = sqrt
rsqrt = _unary("rsqrt", "1 / sqrt(x).")
sin = _unary("sin", "Sine.")
cos = _unary("cos", "Cosine.")
erf = _unary("erf", "Error function.")
floor = _unary("floor", "Round toward -inf.")
ceil = _unary("ceil", "Round toward +inf.")
sigmoid = _unary("sigmoid", "1 / (1 + exp(-x)).")
tanh = _unary("tanh", "Hyperbolic tangent.")


@builtin
def abs(x):
    """|x| (integers too)."""
    return S.unary("abs", x)


@builtin
def umulhi(x, y):
    """High 32 bits of the 64-bit product of two 32-bit integers."""
    a, b = S._prepare(x, y)
    if not a.dtype.is_int() or a.dtype.primitive_bitwidth > 32:
        raise DSLError(f"umulhi needs integers of at most 32 bits, got {a.dtype}")
    return S.current().emit1("binary", [a.handle, b.handle], a.type, {"op": "umulhi"})


# ---- random numbers: Philox 4x32 as in triton.language.random --------------------------------------
_PHILOX_KEY_A = 0x9E3779B9
_PHILOX_KEY_B = 0xBB67AE85
_PHILOX_ROUND_A = 0xD2511F53
_PHILOX_ROUND_B = 0xCD9E8D57
N_ROUNDS_DEFAULT = 10


def _philox(seed, c0, c1, c2, c3, n_rounds):
    seed = S.to_tensor(_u(seed))
    if not seed.dtype.is_int():
        raise DSLError(f"the random seed must be an integer, got {seed.dtype}")
    if seed.dtype.is_int_signed():  # sign-extend, then reinterpret (as Triton's .to(tl.uint64))
        seed = S.cast(S.cast(seed, int64), uint64, bitcast=True)
    else:
        seed = S.cast(seed, uint64)
    k0 = S.cast(seed & 0xFFFFFFFF, uint32)
    k1 = S.cast((seed >> 32) & 0xFFFFFFFF, uint32)
    c0, c1, c2, c3 = (S.cast(c, uint32, bitcast=c.dtype is int32) for c in (c0, c1, c2, c3))
    for _ in _py.range(int(_u(n_rounds))):
        _c0, _c2 = c0, c2
        c0 = umulhi(S.constant(_PHILOX_ROUND_B, uint32), _c2) ^ c1 ^ k0
        c2 = umulhi(S.constant(_PHILOX_ROUND_A, uint32), _c0) ^ c3 ^ k1
        c1 = S.constant(_PHILOX_ROUND_B, uint32) * _c2
        c3 = S.constant(_PHILOX_ROUND_A, uint32) * _c0
        k0 = k0 + S.constant(_PHILOX_KEY_A, uint32)
        k1 = k1 + S.constant(_PHILOX_KEY_B, uint32)
    return c0, c1, c2, c3


@builtin
def randint4x(seed, offset, n_rounds=N_ROUNDS_DEFAULT):
    """Four blocks of random uint32 from (seed, offset) with Philox 4x32 (Triton's algorithm)."""
    off = S.to_tensor(_u(offset))
    if off.dtype.is_int_signed() and off.dtype.primitive_bitwidth == 32:
        off = S.cast(off, uint32, bitcast=True)
    else:
        off = S.cast(off, uint32)
    zero = off * 0
    return _philox(seed, off, zero, zero, zero, n_rounds)


@builtin
def randint(seed, offset, n_rounds=N_ROUNDS_DEFAULT):
    """A block of random uint32 from (seed, offset) (the first Philox output)."""
    return randint4x(seed, offset, n_rounds)[0]


def _uint_to_uniform_float(x):
    x = S.cast(x, int32, bitcast=True)
    x = S.where(S.compare("lt", x, 0), -x - 1, x)
    return S.cast(x, float32) * 4.6566127342e-10


@builtin
def rand(seed, offset, n_rounds=N_ROUNDS_DEFAULT):
    """Uniform fp32 in [0, 1) from (seed, offset)."""
    return _uint_to_uniform_float(randint(seed, offset, n_rounds))


@builtin
def randn(seed, offset, n_rounds=N_ROUNDS_DEFAULT):
    """Standard normal fp32 from (seed, offset) (Box-Muller on two Philox outputs)."""
    i1, i2, _, _ = randint4x(seed, offset, n_rounds)
    u1 = S.minmax("maximum", _uint_to_uniform_float(i1), 1.0e-7)
    u2 = _uint_to_uniform_float(i2)
    th = u2 * 6.283185307179586
    r = S.unary("sqrt", S.unary("log", u1) * -2.0)
    return r * S.unary("cos", th)


@builtin
def div_rn(x, y):
    return S.truediv(x, y)


@builtin
def fdiv(x, y, ieee_rounding=False):
    return S.truediv(x, y)


@builtin
def cast(input, dtype, fp_downcast_rounding=None, bitcast=False):
    """Convert to `dtype` (round to nearest even, or toward zero with `fp_downcast_rounding="rtz"` on a
    narrowing float conversion; float -> int truncates); `bitcast` reinterprets bits."""
    return S.cast(input, dtype, bitcast=_u(bitcast), fp_downcast_rounding=_u(fp_downcast_rounding))


# ----------------------------------------------------------------------------------------------------
# shapes
# ----------------------------------------------------------------------------------------------------
def _shape_varargs(shape):
    if len(shape) == 1 and isinstance(_u(shape[0]), (tuple, list)):
        return _u(shape[0])
    return shape


@builtin
def reshape(input, *shape, can_reorder=False):
    """Row-major reshape (`shape` as a tuple or varargs)."""
    return S.reshape(input, _shape_varargs(shape))


@builtin
def view(input, *shape):
    return S.reshape(input, _shape_varargs(shape))


@builtin
def ravel(x):
    return S.reshape(x, (S.to_tensor(x).numel,))


@builtin
def permute(input, *dims):
    """Permute dimensions (`dims` as a tuple or varargs)."""
    return S.permute(input, _shape_varargs(dims))


@builtin
def trans(input, *dims):
    """Transpose: `(1, 0)` for 2-D tensors, else a permutation given in `dims`."""
    return S.trans(input, _shape_varargs(dims) if dims else None)


@builtin
def broadcast_to(input, *shape):
    return S.broadcast_to_shape(S.to_tensor(input), S._shape_arg(_shape_varargs(shape)))


@builtin
def broadcast(input, other):
    a, b = S.to_tensor(input), S.to_tensor(other)
    shape = S.broadcast_shapes(a.shape, b.shape)
    return S.broadcast_to_shape(a, shape), S.broadcast_to_shape(b, shape)


@builtin
def expand_dims(input, axis):
    return S.expand_dims(input, axis)


@builtin
def join(a, b):
    """Stack two tensors of the same shape along a new last axis of size 2."""
    a, b = S.to_tensor(a), S.to_tensor(b)
    shape = S.broadcast_shapes(a.shape, b.shape)
    dt = S.computation_type(a.dtype, False, b.dtype, False, False)
    a = S.expand_dims(S.broadcast_to_shape(S.cast(a, dt), shape), -1)
    b = S.expand_dims(S.broadcast_to_shape(S.cast(b, dt), shape), -1)
    pads = [(0, 0)] * len(shape) + [(0, 1)]
    return S.dyn_update(S.pad(a, pads, 0), b, 1, -1)


@builtin
def split(a):
    """Split a tensor whose last axis has size 2 into two tensors (the inverse of `join`)."""
    a = S.to_tensor(a)
    if not a.shape or a.shape[-1] != 2:
        raise DSLError(f"tl.split needs a last dimension of size 2, got shape {list(a.shape)}")
    outs = [S.reshape(S.dyn_slice(a, i, 1, -1), a.shape[:-1]) for i in (0, 1)]
    return outs[0], outs[1]


@builtin
def interleave(a, b):
    """Interleave two tensors along their last axis: [a0, b0, a1, b1, ...]."""
    j = join(a, b)
    if len(j.shape) == 1:  # two scalars: the joined pair is already interleaved
        return j
    return S.reshape(j, j.shape[:-2] + (j.shape[-2] * 2,))


@builtin
def cat(input, other, can_reorder=False):
    """Concatenate along the first axis (element order kept)."""
    a, b = S.to_tensor(input), S.to_tensor(other)
    if a.shape[1:] != b.shape[1:] or not a.shape:
        raise DSLError(f"tl.cat: shapes {list(a.shape)} and {list(b.shape)} differ beyond the first axis")
    dt = S.computation_type(a.dtype, False, b.dtype, False, False)
    pads = [(0, b.shape[0])] + [(0, 0)] * (len(a.shape) - 1)
    return S.dyn_update(S.pad(S.cast(a, dt), pads, 0), S.cast(b, dt), a.shape[0], 0)


@builtin
def histogram(input, num_bins, mask=None):
    """int32 counts of the values of a 1-D int `input` in [0, num_bins) (other values are ignored)."""
    x = S.to_tensor(input)
    nb = int(_u(num_bins))
    if len(x.shape) != 1 or not x.dtype.is_int():
        raise DSLError("tl.histogram needs a 1-D integer tensor")
    hit = S.compare("eq", S.expand_dims(x, 1), S.expand_dims(S.iota(nb), 0))
    if _u(mask) is not None:
        hit = S.logical("and", hit, S.expand_dims(S.to_int1(S.to_tensor(_u(mask))), 1))
    return S.reduce("sum", S.cast(hit, int32), 0)


# ----------------------------------------------------------------------------------------------------
# dot, reductions, scans
# ----------------------------------------------------------------------------------------------------
@builtin
def dot(
    input,
    other,
    acc=None,
    input_precision=None,
    allow_tf32=None,
    max_num_imprecise_acc=None,
    out_dtype=float32,
):
    """Matrix product of [..., M, K] and [..., K, N] blocks (+ `acc`), accumulated in fp32 (int32 for
    integer inputs) and returned as `out_dtype` (or `acc`'s dtype)."""
    return S.dot(input, other, acc, input_precision, out_dtype)


@builtin
def sum(input, axis=None, keep_dims=False, dtype=None):
    """Sum along `axis` (all axes when None).  Ints narrower than 32 bits accumulate in int32."""
    return S.reduce("sum", input, axis, keep_dims, dtype)


@builtin
def xor_sum(input, axis=None, keep_dims=False):
    return S.reduce("xor_sum", input, axis, keep_dims)


@builtin
def max(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    """Maximum along `axis`; with `return_indices` returns (values, int32 indices)."""
    v = S.reduce("max", input, axis, keep_dims)
    if _u(return_indices):
        return v, S.reduce("argmax", input, axis, keep_dims)
    return v


@builtin
def min(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    v = S.reduce("min", input, axis, keep_dims)
    if _u(return_indices):
        return v, S.reduce("argmin", input, axis, keep_dims)
    return v


@builtin
def argmax(input, axis, tie_break_left=True, keep_dims=False):
    """int32 index of the maximum along `axis` (first occurrence)."""
    return S.reduce("argmax", input, axis, keep_dims)


@builtin
def argmin(input, axis, tie_break_left=True, keep_dims=False):
    return S.reduce("argmin", input, axis, keep_dims)


@builtin
def cumsum(input, axis=0, reverse=False, dtype=None):
    """Inclusive cumulative sum along `axis`."""
    return S.scan("sum", input, axis, reverse, dtype)


@builtin
def cumprod(input, axis=0, reverse=False):
    return S.scan("prod", input, axis, reverse)


def _combine(fn, a, b):
    comp = getattr(S.current(), "compiler", None)
    if comp is None:
        return fn(a, b)
    return comp.call(fn, (a, b))


@builtin
def reduce(input, axis, combine_fn, keep_dims=False):
    """Reduce along `axis` (all axes when None) with `combine_fn(a, b)` (a @jit function), combining
    halves pairwise (tree order).  A tuple `input` reduces its tensors together: `combine_fn` takes the
    two halves' elements (`a0, a1, ..., b0, b1, ...`) and returns a tuple; the result is a tuple."""
    if isinstance(_u(input), (tuple, list)):
        return _reduce_tuple(_u(input), _u(axis), combine_fn, _u(keep_dims))
    x = S.to_tensor(input)
    axis = _u(axis)
    if axis is None:
        orig_rank = len(x.shape)
        x = S.reshape(x, (x.numel,))
        ax = 0
    else:
        ax = S._norm_axis(axis, len(x.shape), "tl.reduce")
    n = x.shape[ax]
    while n > 1:
        h = n // 2
        a = S.dyn_slice(x, 0, h, ax)
        b = S.dyn_slice(x, h, h, ax)
        y = S.to_tensor(_combine(combine_fn, a, b))
        if n % 2:
            first = S.dyn_slice(y, 0, 1, ax)
            last = S.dyn_slice(x, n - 1, 1, ax)
            y = S.dyn_update(y, S.to_tensor(_combine(combine_fn, first, last)), 0, ax)
        x, n = y, h
    if axis is None:
        return S.reshape(x, (1,) * orig_rank if _u(keep_dims) else ())
    if not _u(keep_dims):
        x = S.reshape(x, x.shape[:ax] + x.shape[ax + 1 :])
    return x


@builtin
def associative_scan(input, axis, combine_fn, reverse=False):
    """Inclusive scan along `axis` with `combine_fn(a, b)` (Hillis-Steele doubling steps).  A tuple
    `input` scans its tensors together (`combine_fn(a0, a1, ..., b0, b1, ...)` returns a tuple).  As in
    Triton, a reverse scan is the forward scan of the flipped block, flipped back: the left argument is
    always the part that comes first in scan order, i.e. for `reverse=True` the elements at HIGHER
    indices (`out[i] = f(out[i + 1], x[i])` in sequential terms)."""
    if isinstance(_u(input), (tuple, list)):
        return _scan_tuple(_u(input), _u(axis), combine_fn, _u(reverse))
    x = S.to_tensor(input)
    ax = S._norm_axis(axis, len(x.shape), "tl.associative_scan")
    n = x.shape[ax]
    pos = S.reshape(S.iota(n), tuple(n if d == ax else 1 for d in _py.range(len(x.shape))))
    d = 1
    while d < n:
        pads = [(0, 0)] * len(x.shape)
        if _u(reverse):
            pads[ax] = (0, d)
            other = S.pad(S.dyn_slice(x, d, n - d, ax), pads, 0)
            # `other` holds x[i + d], which comes earlier in scan order: the left argument
            comb = S.to_tensor(_combine(combine_fn, other, x))
            x = S.where(S.compare("lt", pos, n - d), comb, x)
        else:
            pads[ax] = (d, 0)
            other = S.pad(S.dyn_slice(x, 0, n - d, ax), pads, 0)
            comb = S.to_tensor(_combine(combine_fn, other, x))
            x = S.where(S.compare("ge", pos, d), comb, x)
        d *= 2
    return x


def _combine_tuple(fn, a: tuple, b: tuple) -> tuple:
    comp = getattr(S.current(), "compiler", None)
    out = fn(*a, *b) if comp is None else comp.call(fn, (*a, *b))
    out = _u(out)
    if not isinstance(out, (tuple, list)) or len(out) != len(a):
        raise DSLError(f"the combine_fn of a reduction or scan over {len(a)} tensors must return a tuple of "
                       f"{len(a)} values")
    return tuple(S.to_tensor(v) for v in out)


def _tuple_operands(xs, what):
    ts = [S.to_tensor(v) for v in xs]
    if not ts or any(t.shape != ts[0].shape for t in ts):
        shapes = [list(t.shape) for t in ts]
        raise DSLError(f"the tensors of a tuple {what} must have one shape, got {shapes}")
    return ts


def _reduce_tuple(xs, axis, combine_fn, keep_dims):
    """`reduce` over several tensors at once, in the same tree order as the single-tensor reduce."""
    ts = _tuple_operands(xs, "tl.reduce")
    if axis is None:
        rank = len(ts[0].shape)
        ts = [S.reshape(t, (t.numel,)) for t in ts]
        ax = 0
    else:
        ax = S._norm_axis(axis, len(ts[0].shape), "tl.reduce")
    n = ts[0].shape[ax]
    while n > 1:
        h = n // 2
        ys = _combine_tuple(combine_fn, tuple(S.dyn_slice(t, 0, h, ax) for t in ts),
                            tuple(S.dyn_slice(t, h, h, ax) for t in ts))
        if n % 2:
            tail = _combine_tuple(combine_fn, tuple(S.dyn_slice(y, 0, 1, ax) for y in ys),
                                  tuple(S.dyn_slice(t, n - 1, 1, ax) for t in ts))
            ys = tuple(S.dyn_update(y, v, 0, ax) for y, v in zip(ys, tail, strict=True))
        ts, n = list(ys), h
    if axis is None:
        shape = (1,) * rank if keep_dims else ()
        return tuple(S.reshape(t, shape) for t in ts)
    if not keep_dims:
        ts = [S.reshape(t, t.shape[:ax] + t.shape[ax + 1 :]) for t in ts]
    return tuple(ts)


def _scan_tuple(xs, axis, combine_fn, reverse):
    """`associative_scan` over several tensors at once; `reverse` scans the flipped tensors forward and
    flips the results back, so element i combines (everything after i) with element i, as Triton."""
    ts = _tuple_operands(xs, "tl.associative_scan")
    ax = S._norm_axis(axis, len(ts[0].shape), "tl.associative_scan")
    if reverse:
        ts = [flip(t, ax) for t in ts]
    n = ts[0].shape[ax]
    pos = S.reshape(S.iota(n), tuple(n if d == ax else 1 for d in _py.range(len(ts[0].shape))))
    d = 1
    while d < n:
        pads = [(0, 0)] * len(ts[0].shape)
        pads[ax] = (d, 0)
        earlier = tuple(S.pad(S.dyn_slice(t, 0, n - d, ax), pads, 0) for t in ts)
        comb = _combine_tuple(combine_fn, earlier, tuple(ts))
        keep = S.compare("ge", pos, d)
        ts = [S.where(keep, c, t) for c, t in zip(comb, ts, strict=True)]
        d *= 2
    if reverse:
        ts = [flip(t, ax) for t in ts]
    return tuple(ts)


@builtin
def flip(x, dim=None):
    """Reverse `x` along `dim` (the last dim when None)."""
    x = S.to_tensor(x)
    ax = S._norm_axis(len(x.shape) - 1 if _u(dim) is None else _u(dim), len(x.shape), "tl.flip")
    return S.current().emit1("flip", [x.handle], x.type, {"axis": ax})


@builtin
def sort(x, dim=None, descending=False):
    """Sort `x` along `dim` (the last dim when None)."""
    x = S.to_tensor(x)
    ax = S._norm_axis(len(x.shape) - 1 if _u(dim) is None else _u(dim), len(x.shape), "tl.sort")
    return S.current().emit1("sort", [x.handle], x.type, {"axis": ax, "descending": bool(_u(descending))})


@builtin
def topk(x, k, dim=None):
    """The `k` largest values of `x` along `dim` (the last dim when None), in descending order."""
    x = S.to_tensor(x)
    ax = S._norm_axis(len(x.shape) - 1 if _u(dim) is None else _u(dim), len(x.shape), "tl.topk")
    k = int(_u(k))
    if not 0 < k <= x.shape[ax]:
        raise DSLError(f"tl.topk: k={k} must be in [1, {x.shape[ax]}]")
    return S.dyn_slice(sort(x, ax, descending=True), 0, k, ax)


_BITS_OF = {1: int8, 8: int8, 16: int16, 32: int32, 64: int64}


@builtin
def gather(src, index, axis):
    """`out[..., i, ...] = src[..., index[..., i, ...], ...]` along `axis` (Triton's tl.gather): `index`
    has src's rank and src's sizes on the other axes.  Built as a one-hot selection of the element's bits
    summed over `axis` (exactly one term is non-zero, so every value, NaN and -0.0 included, is kept
    exactly); an index outside [0, src.shape[axis]) gives zero bits."""
    src, index = S.to_tensor(src), S.to_tensor(index)
    rank = len(src.shape)
    if len(index.shape) != rank or not index.dtype.is_int():
        raise DSLError(f"tl.gather: index must be an integer tensor of src's rank {rank}, got {index.type}")
    ax = S._norm_axis(axis, rank, "tl.gather")
    for d in _py.range(rank):
        if d != ax and index.shape[d] != src.shape[d]:
            raise DSLError(f"tl.gather: index shape {list(index.shape)} and src shape {list(src.shape)} "
                           f"differ on axis {d}")
    n = src.shape[ax]
    bits_dt = _BITS_OF[src.dtype.primitive_bitwidth]
    bits = S.cast(src, bits_dt, bitcast=True) if src.dtype is not bits_dt else src
    if src.dtype.is_bool():
        bits = S.cast(src, int8)
    # index gets a new axis (size 1) after `ax`; src a new axis (size 1) at `ax`, its own axis after it
    idx = S.expand_dims(index, ax + 1)
    positions = S.reshape(S.iota(n), tuple(n if d == ax + 1 else 1 for d in _py.range(rank + 1)))
    hit = S.compare("eq", S.cast(idx, int64), S.cast(positions, int64))
    picked = S.where(hit, S.expand_dims(bits, ax), 0)
    out = S.reduce("sum", S.cast(picked, int64), ax + 1)
    out = S.cast(out, bits_dt)
    if src.dtype.is_bool():
        return S.cast(out, int1)
    return S.cast(out, src.dtype, bitcast=True) if src.dtype is not bits_dt else out


@builtin
def map_elementwise(scalar_fn, *args, pack=1):
    """Apply the @jit function `scalar_fn` to the elements of `args` (broadcast together).  The function is
    inlined on whole blocks, so it must be elementwise: branching on a value inside it is refused with a
    located error (`if` needs a scalar condition; use tl.where)."""
    if _u(pack) != 1:
        raise DSLError("tl.map_elementwise: pack > 1 is not supported (it only groups elements for a GPU)")
    ts = [S.to_tensor(a) for a in args]
    shape = ()
    for t in ts:
        shape = S.broadcast_shapes(shape, t.shape)
    ts = [S.broadcast_to_shape(t, shape) for t in ts]
    comp = getattr(S.current(), "compiler", None)
    return scalar_fn(*ts) if comp is None else comp.call(scalar_fn, tuple(ts))


@builtin
def swizzle2d(i, j, size_i, size_j, size_g):
    """Triton's grouped ordering of a (size_i, size_j) grid: maps (i, j) in row-major order to the
    (row, column) visited when rows are taken in groups of `size_g` (column-major inside a group)."""
    ij = i * size_j + j
    size_gj = size_g * size_j
    group_id = ij // size_gj
    off_i = group_id * size_g
    size_g = minimum(size_i - off_i, size_g)
    ij = ij % size_gj
    return off_i + ij % size_g, ij // size_g


@builtin
def inline_asm_elementwise(asm, constraints, args, dtype, is_pure, pack):
    """Refused: the assembly is PTX/AMDGCN text, which the DSL's host backends cannot execute."""
    raise DSLError(
        "tl.inline_asm_elementwise is not supported: its PTX/AMDGCN assembly cannot run on the DSL's "
        "backends; write the operation with tl functions instead"
    )


@builtin
def dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc=None, fast_math=False,
               lhs_k_pack=True, rhs_k_pack=True, out_dtype=float32):
    """Refused: microscaled (MX) operand formats are not implemented."""
    raise DSLError(
        "tl.dot_scaled is not supported: microscaled (MX fp4/fp6/fp8 with e8m0 scales) operands are not "
        "implemented; dequantize with tl.cast and multiply by the scales, then use tl.dot"
    )


TRITON_MAX_TENSOR_NUMEL = 1048576  # Triton's limit on the elements of one block


@builtin
def softmax(x, dim=None, keep_dims=False, ieee_rounding=False):
    """Softmax along `dim` (the last dim when None)."""
    x = S.to_tensor(x)
    ax = len(x.shape) - 1 if _u(dim) is None else _u(dim)
    z = x - S.reduce("max", x, ax, True)
    num = S.unary("exp", z)
    return S.truediv(num, S.reduce("sum", num, ax, True))


# ----------------------------------------------------------------------------------------------------
# compile-time helpers and debugging
# ----------------------------------------------------------------------------------------------------
class static_range:
    """`for i in tl.static_range(...)`: unrolled at compile time; bounds must be constexpr."""

    def __init__(self, arg1, arg2=None, step=None):
        self.args = (arg1, arg2, step)


class range:
    """`for i in tl.range(...)`: a runtime loop (same as Python's `range` inside a kernel).  Extra
    keyword arguments (num_stages, loop_unroll_factor, ...) are accepted and ignored."""

    def __init__(
        self,
        arg1,
        arg2=None,
        step=None,
        num_stages=None,
        loop_unroll_factor=None,
        disallow_acc_multi_buffer=False,
        flatten=False,
        warp_specialize=False,
        **kw,
    ):
        self.args = (arg1, arg2, step)


@builtin
def static_assert(cond, msg=""):
    """Compile-time assertion; `cond` must be a compile-time value."""
    cond = _u(cond)
    if isinstance(cond, tensor):
        raise DSLError("static_assert needs a compile-time condition (constexpr), got a runtime tensor")
    if not cond:
        raise DSLError(f"static_assert failed: {_u(msg)}" if _u(msg) else "static_assert failed")


@builtin
def static_print(*values, sep=" ", end="\n", file=None, flush=False):
    """Print at compile time (tensors print their type)."""
    _py.print(*[_u(v) for v in values], sep=sep, end=end, file=file, flush=flush)


@builtin
def device_print(prefix, *args, hex=False):
    """Print `prefix` and the values of `args`, once per program, while the kernel runs."""
    return S.device_print(prefix, *args, hex=hex)


@builtin
def device_assert(cond, msg="", mask=None):
    """Runtime assertion over all lanes of `cond`."""
    return S.device_assert(cond, msg)


@builtin
def debug_barrier():
    """No-op (programs run one after the other)."""
    return None


@builtin
def multiple_of(input, values):
    """Optimisation hint; returns `input`."""
    return input


@builtin
def max_contiguous(input, values):
    return input


@builtin
def max_constancy(input, values):
    return input


@builtin
def assume(cond):
    return None


TENSOR_METHODS = {
    "to": lambda x, dtype, fp_downcast_rounding=None, bitcast=False: S.cast(
        x, dtype, bitcast=_u(bitcast), fp_downcast_rounding=_u(fp_downcast_rounding)
    ),
    "sum": sum,
    "max": max,
    "min": min,
    "argmax": argmax,
    "argmin": argmin,
    "xor_sum": xor_sum,
    "cumsum": cumsum,
    "cumprod": cumprod,
    "reshape": reshape,
    "view": view,
    "permute": permute,
    "trans": trans,
    "broadcast_to": broadcast_to,
    "expand_dims": expand_dims,
    "ravel": ravel,
    "exp": exp,
    "exp2": exp2,
    "log": log,
    "log2": log2,
    "sqrt": sqrt,
    "rsqrt": rsqrt,
    "sin": sin,
    "cos": cos,
    "erf": erf,
    "abs": abs,
    "floor": floor,
    "ceil": ceil,
    "sigmoid": sigmoid,
    "softmax": softmax,
    "tanh": tanh,
    "flip": flip,
    "sort": sort,
    "cast": cast,
    "store": None,
    "logical_and": lambda x, y: S.logical("and", x, y),
    "logical_or": lambda x, y: S.logical("or", x, y),
}
TENSOR_METHODS = {k: v for k, v in TENSOR_METHODS.items() if v is not None}


dtype = _dtypes.dtype

__all__ = sorted(
    n
    for n, v in list(globals().items())
    if not n.startswith("_")
    and n not in ("annotations", "S", "DSLError", "builtin", "TENSOR_METHODS")
    and not isinstance(v, type(S))
)
