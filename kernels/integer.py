"""Exact integer elementwise arithmetic (int32/int64): add/sub with alpha, mul, floor division by a
number, abs, comparisons, max/min; the bitwise and/or/xor of bool and integer tensors (bitwise_not is
xor with all bits set) and fill.

The float kernels compute in float32, which cannot hold every int64 (or even int32) value exactly, so
integer tensors (position ids, cache positions, index arithmetic) get their own kernel computing in
int64 and wrapping on overflow as torch does. Op codes are those of `elementwise.BINARY`; the second
operand is a tensor (broadcast through strides) or, with B_SCALAR, the integer `b_value`.
"""

from __future__ import annotations

import torch_rbln.dsl as tl

from .elementwise import (
    ADD,
    COMPARISONS,
    EQ,
    GE,
    GT,
    LE,
    LT,
    MAXIMUM,
    MINIMUM,
    MUL,
    NE,
    SUB,
    _comparison,
    _tile_lanes,
    _tile_offsets,
)

OPS = frozenset({ADD, SUB, MUL, EQ, NE, LT, LE, GT, GE, MAXIMUM, MINIMUM})
# Integer-only op codes, after elementwise.BINARY's (the float kernels have no bitwise ops).
BITWISE_AND, BITWISE_OR, BITWISE_XOR = 23, 24, 25
BITWISE = {"bitwise_and": BITWISE_AND, "bitwise_or": BITWISE_OR, "bitwise_xor": BITWISE_XOR}
FLOOR_DIVIDE, ABS, FILL, REMAINDER = 26, 27, 28, 29  # unary ones (abs, fill) ignore a / b
INTEGER_ONLY = {**BITWISE, "div_floor": FLOOR_DIVIDE, "abs": ABS, "fill": FILL, "remainder": REMAINDER}


# Ops that get a specialisation of their own in int_binary_kernel (FAST_OP = the op code), as every
# float op does in `elementwise`: the position and index arithmetic of models (add, sub, mul,
# fill, and maximum / minimum: clamped positions and lengths). Behind the 15-op runtime switch each
# compile took ~1.5-5 s of numba and its loops run in separate passes over BLOCK-long buffers; alone,
# with a plain tensor or scalar second operand (`int_binary_kernel`), loads, arithmetic and store fuse
# into one loop over the lanes that exist, so the registry gives them `geometry.FUSED_BLOCK` for every
# size. Comparisons share one specialisation (COMPARE_OPS) with the comparison switch alone; bitwise
# ops, floor division and remainder, and broadcast add/sub/mul share theirs (below); abs, which reads
# its operand twice (no fused loop), the generic one (FAST_OP=-1).
FAST_INTEGER = frozenset({ADD, SUB, MUL, FILL, MAXIMUM, MINIMUM})


# The bitwise ops share one specialisation with their three-way switch alone (the masks and flags of
# generation: `unfinished & ~done`, `a | b` of bools): behind the generic switch, whose floor division
# and remainder dominate numba's work, each of them compiled in 2.5-3 s per dtype triple. With a
# broadcast operand (`int_binary_tiled_kernel`) add, sub and mul share one too (ARITHMETIC_OPS): there
# each operand's tile offsets are computed and nothing fuses, so a switch costs little at run time, and
# each of them compiled ~1 s on its own.
COMPARE_OPS, BITWISE_OPS, ARITHMETIC_OPS, DIVISION_OPS = -2, -3, -4, -5
ARITHMETIC = frozenset({ADD, SUB, MUL})
DIVISION = frozenset({FLOOR_DIVIDE, REMAINDER})  # share DIVISION_OPS (beam search's `//` and `%`)


def integer_fast_op(op: int, bcast: bool = False) -> int:
    """int_binary_kernel's FAST_OP for the op code `op`, with a broadcast operand or not (`bcast`):
    comparisons share theirs whatever the output's dtype (an in-place one casts their bool to it), the
    bitwise ops share BITWISE_OPS, floor division and remainder DIVISION_OPS, broadcast add/sub/mul
    ARITHMETIC_OPS."""
    if op in BITWISE.values():
        return BITWISE_OPS
    if op in DIVISION:
        return DIVISION_OPS
    if bcast and op in ARITHMETIC:
        return ARITHMETIC_OPS
    if op in FAST_INTEGER:
        return op
    return COMPARE_OPS if op in COMPARISONS else -1


@tl.jit
def _bitwise(a, b, OP):
    """The bitwise op `OP` (BITWISE_AND..BITWISE_XOR, a runtime code) on int64 values."""
    if OP == 23:
        y = a & b
    elif OP == 24:
        y = a | b
    else:
        y = a ^ b
    return y


@tl.jit
def _arithmetic(a, b, alpha, OP):
    """add / sub with alpha, or mul (`OP`: ADD, SUB, MUL, a runtime code) on int64 values."""
    if OP == 0:
        y = a + alpha.to(tl.int64) * b
    elif OP == 1:
        y = a - alpha.to(tl.int64) * b
    else:
        y = a * b
    return y


@tl.jit
def _division(a, b, OP):
    """Floor division (OP 26) or Python's remainder (29, the divisor's sign) on int64 values; the
    caller passes a non-zero b. A divisor of -1 negates (wrapping, as torch) and leaves remainder 0:
    INT64_MIN // -1 would trap in the machine's division instruction."""
    divisor = tl.where(b == -1, 1, b)
    quotient = a // divisor
    remainder = a - quotient * divisor
    wrong_sign = (remainder != 0) & ((remainder < 0) != (divisor < 0))
    if OP == 26:
        y = tl.where(b == -1, 0 - a, tl.where(wrong_sign, quotient - 1, quotient))
    else:
        y = tl.where(b == -1, 0, tl.where(wrong_sign, remainder + divisor, remainder))
    return y


@tl.jit
def _integer_op(a, b, alpha, OP):
    """The op `OP` (a runtime code) on int64 values: the generic specialisation's switch."""
    if OP <= 2:
        y = _arithmetic(a, b, alpha, OP)
    elif OP <= 9:
        y = _comparison(a, b, OP)
    elif OP == 10:
        y = tl.maximum(a, b)
    elif OP == 11:
        y = tl.minimum(a, b)
    elif OP == 23 or OP == 24 or OP == 25:
        y = _bitwise(a, b, OP)
    elif OP == 26 or OP == 29:
        y = _division(a, b, OP)
    elif OP == 27:
        y = tl.where(a < 0, 0 - a, a)  # abs (wraps at the minimum, as torch)
    else:
        y = b  # fill
    return y


@tl.jit
def _int_result(a_ptr, a_off, b, alpha, OP, mask, FAST_OP: tl.constexpr):
    """The op on `b` (int64) and, except for a fill, the int64 values of `a_ptr` at `a_off`: FAST_OP's
    own specialisation, a group's switch alone, or the generic switch on OP (-1)."""
    if FAST_OP == 28:  # fill: `a` is not read
        y = b
    else:
        a = tl.load(a_ptr + a_off, mask=mask, other=0).to(tl.int64)
        if FAST_OP == -2:  # COMPARE_OPS
            y = _comparison(a, b, OP)
        elif FAST_OP == -3:  # BITWISE_OPS
            y = _bitwise(a, b, OP)
        elif FAST_OP == -4:  # ARITHMETIC_OPS
            y = _arithmetic(a, b, alpha, OP)
        elif FAST_OP == -5:  # DIVISION_OPS
            y = _division(a, b, OP)
        elif FAST_OP == -1:
            y = _integer_op(a, b, alpha, OP)
        else:  # the op alone: FAST_OP is a constexpr, so the switch folds to its one branch
            y = _integer_op(a, b, alpha, FAST_OP)
    return y


@tl.jit
def int_binary_kernel(
    a_ptr, b_ptr, b_value, out_ptr, n, alpha, OP,
    FAST_OP: tl.constexpr, B_SCALAR: tl.constexpr, BLOCK: tl.constexpr,
):
    """The op over a contiguous result whose operands share its layout (or b is the number
    `b_value`), one element per lane."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    if B_SCALAR:
        b = tl.zeros((BLOCK,), dtype=tl.int64) + b_value.to(tl.int64)
    else:
        b = tl.load(b_ptr + offsets, mask=mask, other=0).to(tl.int64)
    y = _int_result(a_ptr, offsets, b, alpha, OP, mask, FAST_OP)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


@tl.jit
def int_binary_tiled_kernel(
    a_ptr, b_ptr, b_value, out_ptr, n, alpha, s1, s2, s3, a0, a1, a2, a3, b0, b1, b2, b3, OP,
    FAST_OP: tl.constexpr, B_SCALAR: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """The op over a contiguous result with broadcast or strided operands (strides a0..a3, b0..b3 over
    sizes (., s1, s2, s3)), one BLOCK_M x BLOCK_N tile of dims 2 and 3 per program (grid axis 0: the
    tiles, axis 1: the index of dims 0 and 1), as the float `binary_tiled_kernel`; `n` (the result's
    element count, which the grid covers) unused, so that both integer kernels take the same leading
    arguments (`registry.integer.integer_launch`'s ints). Why tiles: a flat
    kernel divided every lane's index by three sizes for each operand, over its whole block whatever the
    result's size: `(1, 16) + (16, 1)` int64 took ~45 us, a (64, 64) + (64, 1) ~230 us."""
    outer, rows, cols, mask = _tile_lanes(s2, s3, BLOCK_M, BLOCK_N)
    if B_SCALAR:
        b = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int64) + b_value.to(tl.int64)
    else:
        b = tl.load(b_ptr + _tile_offsets(outer, rows, cols, s1, b0, b1, b2, b3), mask=mask,
                    other=0).to(tl.int64)
    a_off = _tile_offsets(outer, rows, cols, s1, a0, a1, a2, a3)
    y = _int_result(a_ptr, a_off, b, alpha, OP, mask, FAST_OP)
    tl.store(out_ptr + (outer * s2 + rows) * s3 + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@tl.jit
def int_row_reduce_kernel(x_ptr, values_ptr, idx_ptr, n, OP, WRITE_INDEX, BLOCK: tl.constexpr):
    """Reduce each contiguous row of `n` bool/integer elements (program i: row i) in int64, exact for
    every value (the float reduction kernel works in float32, which rounds int64 beyond 2**24): the sum
    (OP 0, wrapping as torch's int64 sum), the largest (OP 2, and argmax: 4) or smallest (OP 3, argmin:
    5). OP 0, 2 and 3 store the value into `values_ptr`; WRITE_INDEX stores the first index holding the
    extreme (int64) into `idx_ptr`.

    For the extremes every lane starts from the row's first element (index 0) and takes a later element
    only when it is strictly better, so each lane keeps the first index of its best value; of the lanes
    holding the row's extreme, the smallest index is the row's first.

    OP and WRITE_INDEX are runtime values: integer reductions are rare, and one compiled specialisation
    per dtype and block serves all of them (each would otherwise compile for seconds)."""
    row = tl.program_id(0)
    base = row.to(tl.int64) * n
    cols = tl.arange(0, BLOCK)
    if OP == 0:
        total = tl.zeros((BLOCK,), dtype=tl.int64)
        for start in range(0, n, BLOCK):
            total += tl.load(x_ptr + base + start + cols, mask=start + cols < n, other=0).to(tl.int64)
        tl.store(values_ptr + row, tl.sum(total, axis=0).to(values_ptr.dtype.element_ty))
    else:
        first = tl.load(x_ptr + base).to(tl.int64)
        best = tl.zeros((BLOCK,), dtype=tl.int64) + first
        best_i = tl.zeros((BLOCK,), dtype=tl.int64)
        for start in range(0, n, BLOCK):
            mask = start + cols < n
            x = tl.load(x_ptr + base + start + cols, mask=mask, other=0).to(tl.int64)
            if OP == 2 or OP == 4:
                better = mask & (x > best)
            else:
                better = mask & (x < best)
            best_i = tl.where(better, (start + cols).to(tl.int64), best_i)
            best = tl.where(better, x, best)
        if OP == 2 or OP == 4:
            extreme = tl.max(best, axis=0)
        else:
            extreme = tl.min(best, axis=0)
        if OP == 2 or OP == 3:
            tl.store(values_ptr + row, extreme.to(values_ptr.dtype.element_ty))
        if WRITE_INDEX:
            tl.store(idx_ptr + row, tl.min(tl.where(best == extreme, best_i, n), axis=0).to(tl.int64))
