"""Stream compaction: the positions (`nonzero`) or the values (`masked_select`) of a contiguous tensor's
selected elements, in row-major order.

Two launches over blocks of BLOCK elements. `count_kernel` counts each block's selected elements; the
registry turns the counts into each block's end slot (a cumsum, on the device) and reads the last one,
the total, which sizes the result (as torch's CPU kernel counts first). `nonzero_kernel` and
`masked_select_kernel` then give each selected element its slot, the block's first slot plus the number
selected before it in the block (a `tl.cumsum` of the flags), and write it there: the result is exact
and in torch's order. Selected means nonzero as torch counts it: NaN is, -0.0 is not.
"""

from __future__ import annotations

import torch_rbln.dsl as tl

BLOCK = 1024


@tl.jit
def count_kernel(x_ptr, counts_ptr, n, BLOCK: tl.constexpr):
    """counts[b] = the nonzero elements among x[b * BLOCK:(b + 1) * BLOCK]. Grid (cdiv(n, BLOCK),)."""
    block = tl.program_id(0)
    at = block * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + at, mask=at < n, other=0)
    tl.store(counts_ptr + block, tl.sum((x != 0).to(tl.int64), axis=0))


@tl.jit
def _block_slots(x_ptr, ends_ptr, counts_ptr, n, BLOCK: tl.constexpr):
    """(flat indices, selected flags, output slots) of this program's block of x."""
    block = tl.program_id(0)
    at = block * BLOCK + tl.arange(0, BLOCK)
    inside = at < n
    selected = (tl.load(x_ptr + at, mask=inside, other=0) != 0) & inside
    first = tl.load(ends_ptr + block) - tl.load(counts_ptr + block)
    return at, selected, first + tl.cumsum(selected.to(tl.int64), 0) - 1


@tl.jit
def nonzero_kernel(x_ptr, ends_ptr, counts_ptr, geometry_ptr, out_ptr, n, ndim, BLOCK: tl.constexpr):
    """out[slot, d] = coordinate d of each nonzero element of x (a row-major (count, ndim) int64 result),
    `geometry` holding (stride, size) per dim of x's row-major shape as int32 (x has fewer than 2**31
    elements: 32-bit division is the cheaper). Grid (blocks, ndim): program (b, d) writes dim d of block
    b's elements."""
    at, selected, slots = _block_slots(x_ptr, ends_ptr, counts_ptr, n, BLOCK)
    dim = tl.program_id(1)
    stride = tl.load(geometry_ptr + 2 * dim)
    size = tl.load(geometry_ptr + 2 * dim + 1)
    tl.store(out_ptr + slots * ndim + dim, ((at // stride) % size).to(tl.int64), mask=selected)


@tl.jit
def masked_select_kernel(x_ptr, mask_ptr, ends_ptr, counts_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[slot] = x[i] for each i where the mask (x's shape, contiguous) is true. Grid (blocks,)."""
    at, selected, slots = _block_slots(mask_ptr, ends_ptr, counts_ptr, n, BLOCK)
    tl.store(out_ptr + slots, tl.load(x_ptr + at, mask=selected), mask=selected)
