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
row) in passes that each cost a comparison per element: it bisects for the k-th element's key, writes
the elements at or above it and orders those k. About 20-35 passes whatever k is (it took k passes of a
tuple reduction before: 5-6.7 ms for k = 50 over a 50,257-token row, now ~1 ms), and its numba
compile takes 3.5-4.5 s where the tuple reduction's unrolled tree took ~6.7 s.

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
SELECT_LIMIT = 64  # largest k that topk takes by threshold (select_kernel's K_BLOCK)
SELECT_CHUNKS = (16, 128, 512)  # select_kernel's elements per step: the smallest holding the line
SELECT_K_BLOCKS = (8, SELECT_LIMIT)  # its block for the final ordering of the k taken
RANK_BLOCK = 64  # elements ranked per program
RANK_CHUNK = 256  # elements compared against per step
SCAN_BLOCK = 256
HISTC_BLOCK = 1024


def select_blocks(n: int, k: int) -> tuple[int, int]:
    """select_kernel's (CHUNK, K_BLOCK) for lines of n elements and k <= SELECT_LIMIT: a router's
    8 experts scan 16 lanes (~36 passes, so a 512-lane step would cost 30 times the work), not 512."""
    chunk = next((c for c in SELECT_CHUNKS if n <= c), SELECT_CHUNKS[-1])
    return chunk, next(b for b in SELECT_K_BLOCKS if k <= b)


@tl.jit
def _precedes(av, ai, bv, bi, DESCENDING: tl.constexpr):
    """Does the element (value av, index ai) come strictly before (bv, bi) in the sorted order: by
    value, NaN after every number (torch's order: the largest value), equal values (NaN among NaN) in
    index order, so the order is total and the sort stable. The rank kernel's order; `_order_key`
    encodes the same one as integers for the select kernel (tests/kernels/test_backends_agree.py and
    test_sorting.py compare both with torch's stable sort)."""
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


_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


@tl.jit
def _order_key(x, flip):
    """An int64 per element whose descending order is the sort order of the values x (`_precedes`'s
    order without the index tie-break): floats (16-bit ones exactly through float32) by their bits made
    monotone, -0 equal to +0 and every NaN one key above +inf; integers as they are. `flip` (int64) is 0
    for descending order and -1 for ascending, which flips the key: key ^ -1 == -1 - key, which never
    overflows. A runtime value, so `topk(largest=True)` and `largest=False` share one specialisation."""
    if x.dtype.is_floating():
        f = x.to(tl.float32)
        f = tl.where(f == 0.0, 0.0, f)
        bits = f.to(tl.int32, bitcast=True)
        key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.int64)
        key = tl.where(f != f, 1 << 31, key)
    else:
        key = x.to(tl.int64)
    return key ^ flip


@tl.jit
def _count_at_least(x_ptr, base, n, inner, threshold, flip, CHUNK: tl.constexpr):
    """How many elements of the line have an `_order_key` >= `threshold`."""
    count = threshold * 0
    for start in range(0, n, CHUNK):
        j = start + tl.arange(0, CHUNK)
        inside = j < n
        key = _order_key(tl.load(x_ptr + base + j * inner, mask=inside, other=0), flip)
        count += tl.sum((inside & (key >= threshold)).to(tl.int64), axis=0)
    return count


@tl.jit
def select_kernel(x_ptr, values_ptr, indices_ptr, n, inner, k, descending,
                  CHUNK: tl.constexpr, K_BLOCK: tl.constexpr):
    """`topk` for k <= K_BLOCK: values/indices[line, t] for t < k in the rank kernel's order, in
    passes over the line that each count or reduce (no pass costs more than a comparison per element):
    1. the smallest and largest `_order_key`;
    2. bisection for the threshold T, the largest key that at least k elements reach (at most 33
       passes for floats, 64 for int64; it stops early at a key exactly k elements reach), keeping
       the count of keys above it from the pass that moved the upper bound;
    3. one pass writing the elements above T and the first of those equal to T, k in all, to the
       outputs in index order (slots from a running count and a block cumsum);
    4. those k ordered in place by counting (stable: equal keys keep index order).
    x contiguous (outer, n, inner), k <= n; values, indices contiguous (outer, k, inner). Grid
    (outer * inner,). `descending`: 1 for the k largest, 0 for the k smallest (a runtime value)."""
    line = tl.program_id(0)
    o = line // inner
    c = line % inner
    base = o * n * inner + c
    out = o * k * inner + c
    zero = (line * 0).to(tl.int64)
    flip = zero + descending - 1  # 0 (descending) or -1 (ascending): `_order_key`
    lo = zero + _INT64_MAX
    hi = zero + _INT64_MIN
    for start in range(0, n, CHUNK):
        j = start + tl.arange(0, CHUNK)
        inside = j < n
        key = _order_key(tl.load(x_ptr + base + j * inner, mask=inside, other=0), flip)
        lo = tl.minimum(lo, tl.min(tl.where(inside, key, _INT64_MAX), axis=0))
        hi = tl.maximum(hi, tl.max(tl.where(inside, key, _INT64_MIN), axis=0))
    # invariant: at least k keys >= lo; `above` (< k) keys > hi. A key exactly k elements reach ends
    # the search: those k are the answer, ties at the threshold included.
    above = zero
    exact = zero != 0
    for _step in range(0, 65):
        if lo < hi:
            middle = (lo | hi) - ((lo ^ hi) >> 1)  # the upper middle, without overflow
            count = _count_at_least(x_ptr, base, n, inner, middle, flip, CHUNK)
            exact = count == k
            lo = tl.where(count >= k, middle, lo)
            above = tl.where(count < k, count, above)
            hi = tl.where(exact, middle, tl.where(count >= k, hi, middle - 1))
    threshold = lo
    ties_wanted = tl.where(exact, k, k - above)
    written = zero
    ties = zero
    for start in range(0, n, CHUNK):
        j = start + tl.arange(0, CHUNK)
        inside = j < n
        xj = tl.load(x_ptr + base + j * inner, mask=inside, other=0)
        key = _order_key(xj, flip)
        tie = (inside & (key == threshold)).to(tl.int64)
        wanted = (inside & (key > threshold)) | ((tie != 0) & (ties + tl.cumsum(tie, 0) <= ties_wanted))
        slot = written + tl.cumsum(wanted.to(tl.int64), 0) - 1
        tl.store(values_ptr + out + slot * inner, xj, mask=wanted)
        tl.store(indices_ptr + out + slot * inner, j.to(tl.int64), mask=wanted)
        written += tl.sum(wanted.to(tl.int64), axis=0)
        ties += tl.sum(tie, axis=0)
    tl.debug_barrier()
    t = tl.arange(0, K_BLOCK)
    held = t < k
    v = tl.load(values_ptr + out + t * inner, mask=held, other=0)
    i = tl.load(indices_ptr + out + t * inner, mask=held, other=0)
    key = _order_key(v, flip)
    # [K_BLOCK, K_BLOCK]: element s (held, in index order) comes before element t
    before = ((key[None, :] > key[:, None]) | ((key[None, :] == key[:, None]) & (t[None, :] < t[:, None])))
    rank = tl.sum((before & held[None, :]).to(tl.int64), axis=1)
    tl.debug_barrier()
    tl.store(values_ptr + out + rank * inner, v, mask=held)
    tl.store(indices_ptr + out + rank * inner, i, mask=held)


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
