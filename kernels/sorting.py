"""Sorting, scanning and counting: `sort`, `topk` (rank kernel), `cumsum` (scan kernel), `histc`.

Both view a contiguous tensor as (outer, n, inner) around the dim they work on, so a dim other than the
last needs no transpose: line r (of outer * inner) starts at `(r // inner) * n * inner + r % inner`
and steps by `inner`.

`rank_kernel` sorts by counting: the position of element i of a line is the number of elements that
come before it in the sorted order, with ties in index order (a stable sort, as torch's CPU `sort`)
and NaN after every number (as torch orders NaN: the largest value). Each element is then written
straight to its position, so the result is exact and deterministic, and a `topk` is the same count
with only the first k positions written. The count costs n comparisons per element: the registry
uses it for lines up to `RANK_LIMIT` elements (MoE routing sorts a few thousand expert ids).
`select_kernel` takes a small k (a router's experts, a sampler's top tokens over a vocabulary-sized
row) in k passes over the line instead, each taking the next element in the same order.

`cumsum_kernel` scans each line in blocks (`tl.cumsum` inside a block, a running carry between them),
accumulating in ACC (float32 for 16-bit floats, int64 for integers: the same wrap-around as torch's
integer cumsum once cast to the output dtype).

`histc_kernel` counts with atomic adds into the bins (the programs run in order on one NPU, and counts
are exact integers either way), computing each element's bin in the same arithmetic as torch's CPU
kernel so that values on a bin edge land where they land on the CPU.
"""

from __future__ import annotations

import torch_rbln.dsl as tl

RANK_LIMIT = 1 << 12  # longest line the rank kernel sorts (n^2 comparisons: 4096 take ~40 ms)
SELECT_LIMIT = 64  # largest k that topk takes in k passes over the line (select_kernel)
SELECT_CHUNK = 512
RANK_BLOCK = 64  # elements ranked per program
RANK_CHUNK = 256  # elements compared against per step
SCAN_BLOCK = 256
HISTC_BLOCK = 1024


@tl.jit
def _precedes(av, ai, bv, bi, DESCENDING: tl.constexpr):
    """Does the element (value av, index ai) come strictly before (bv, bi) in the sorted order: by
    value, NaN after every number (torch's order: the largest value), equal values (NaN among NaN) in
    index order, so the order is total and the sort stable. The one definition of the order the rank
    and select kernels share."""
    a_nan = av != av
    b_nan = bv != bv
    if DESCENDING:
        strictly = (av > bv) | (a_nan & (bv == bv))
    else:
        strictly = (av < bv) | (b_nan & (av == av))
    tie = (av == bv) | (a_nan & b_nan)
    return strictly | (tie & (ai < bi))


@tl.jit
def rank_kernel(x_ptr, values_ptr, indices_ptr, n, inner, k, DESCENDING: tl.constexpr,
                BLOCK: tl.constexpr, CHUNK: tl.constexpr):
    """values/indices[line, p] for p < k: the element of the line that sorts to position p, and its
    index along the dim. x contiguous (outer, n, inner); values, indices contiguous (outer, k, inner).
    Grid (cdiv(n, BLOCK), outer * inner)."""
    line = tl.program_id(1)
    o = line // inner
    c = line % inner
    base = o * n * inner + c
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = i < n
    xi = tl.load(x_ptr + base + i * inner, mask=live, other=0)
    rank = tl.zeros([BLOCK], dtype=tl.int64)
    for start in range(0, n, CHUNK):
        j = start + tl.arange(0, CHUNK)
        inside = j < n
        xj = tl.load(x_ptr + base + j * inner, mask=inside, other=0)
        # [BLOCK, CHUNK]: element j comes before element i
        hit = _precedes(xj[None, :], j[None, :], xi[:, None], i[:, None], DESCENDING) & inside[None, :]
        rank += tl.sum(hit.to(tl.int64), axis=1)
    keep = live & (rank < k)
    out = o * k * inner + c + rank * inner
    tl.store(values_ptr + out, xi, mask=keep)
    tl.store(indices_ptr + out, i.to(tl.int64), mask=keep)


@tl.jit
def _first_descending(av, ai, bv, bi):
    """Of (value, index) pairs a and b, the one that comes first in descending order (`_precedes`); an
    index < 0 marks an empty slot, which comes last. A combine function of `tl.reduce`."""
    a_first = (bi < 0) | ((ai >= 0) & _precedes(av, ai, bv, bi, True))
    return tl.where(a_first, av, bv), tl.where(a_first, ai, bi)


@tl.jit
def _first_ascending(av, ai, bv, bi):
    """As `_first_descending` for ascending order."""
    a_first = (bi < 0) | ((ai >= 0) & _precedes(av, ai, bv, bi, False))
    return tl.where(a_first, av, bv), tl.where(a_first, ai, bi)


@tl.jit
def select_kernel(x_ptr, values_ptr, indices_ptr, n, inner, k, DESCENDING: tl.constexpr,
                  CHUNK: tl.constexpr):
    """`topk` for small k: values/indices[line, t] for t < k, found in k passes over the line, each
    taking the first element (in the rank kernel's order) of those after the one taken before: k * n
    work instead of n * n. x contiguous (outer, n, inner); values, indices contiguous (outer, k,
    inner). Grid (outer * inner,)."""
    line = tl.program_id(0)
    o = line // inner
    c = line % inner
    base = o * n * inner + c
    out = o * k * inner + c
    taken_v = tl.load(x_ptr + base)
    taken_i = (line * 0 - 1).to(tl.int64)  # nothing taken yet
    for t in range(0, k):
        best_v = taken_v
        best_i = (line * 0 - 1).to(tl.int64)
        for start in range(0, n, CHUNK):
            j = start + tl.arange(0, CHUNK)
            xj = tl.load(x_ptr + base + j * inner, mask=j < n, other=0)
            after = (taken_i < 0) | _precedes(taken_v, taken_i, xj, j, DESCENDING)
            candidate = tl.where((j < n) & after, j.to(tl.int64), -1)
            if DESCENDING:
                chunk_v, chunk_i = tl.reduce((xj, candidate), 0, _first_descending)
                best_v, best_i = _first_descending(best_v, best_i, chunk_v, chunk_i)
            else:
                chunk_v, chunk_i = tl.reduce((xj, candidate), 0, _first_ascending)
                best_v, best_i = _first_ascending(best_v, best_i, chunk_v, chunk_i)
        tl.store(values_ptr + out + t * inner, best_v)
        tl.store(indices_ptr + out + t * inner, best_i)
        taken_v = best_v
        taken_i = best_i


@tl.jit
def cumsum_kernel(x_ptr, out_ptr, n, inner, ACC: tl.constexpr, BLOCK: tl.constexpr):
    """out[line, j] = sum of x[line, :j + 1], accumulated in ACC; x and out contiguous (outer, n,
    inner). Grid (outer * inner,)."""
    line = tl.program_id(0)
    o = line // inner
    c = line % inner
    base = o * n * inner + c
    carry = tl.sum(tl.zeros([BLOCK], dtype=ACC), axis=0)
    for start in range(0, n, BLOCK):
        j = start + tl.arange(0, BLOCK)
        inside = j < n
        v = tl.load(x_ptr + base + j * inner, mask=inside, other=0).to(ACC)
        tl.store(out_ptr + base + j * inner, (tl.cumsum(v, 0) + carry).to(out_ptr.dtype.element_ty),
                 mask=inside)
        carry += tl.sum(v, axis=0)


@tl.jit
def histc_kernel(x_ptr, counts_ptr, n, low, high, bins, COMPUTE: tl.constexpr, STEP: tl.constexpr,
                 BLOCK: tl.constexpr):
    """counts[b] += the elements of x in bin b of `bins` equal bins over [low, high] (the last bin
    includes `high`; values outside, and NaN, are not counted), the bin computed as torch's CPU
    histogram does: ((x - low) * bins) / (high - low), truncated, each step computed in COMPUTE and
    rounded to STEP (a 16-bit float input's own type, as c10::Half arithmetic rounds every operation;
    else COMPUTE itself). Grid (cdiv(n, BLOCK),)."""
    at = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = at < n
    x = tl.load(x_ptr + at, mask=live, other=0).to(STEP).to(COMPUTE)
    lo = low.to(STEP).to(COMPUTE)
    hi = high.to(STEP).to(COMPUTE)
    inside = live & (x >= lo) & (x <= hi)
    offset = (x - lo).to(STEP).to(COMPUTE)
    scaled = (offset * bins.to(STEP).to(COMPUTE)).to(STEP).to(COMPUTE)
    span = (hi - lo).to(STEP).to(COMPUTE)
    position = (scaled / span).to(STEP).to(COMPUTE).to(tl.int64)
    position = tl.minimum(tl.maximum(position, 0), bins - 1)  # x == high lands on `bins`: the last bin
    tl.atomic_add(counts_ptr + position, tl.full([BLOCK], 1, counts_ptr.dtype.element_ty), mask=inside)
