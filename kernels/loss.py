"""Negative log-likelihood loss (the second half of cross-entropy after log_softmax), forward and backward.

Inputs are log-probabilities `x` of shape (N, C) and class targets `t` of shape (N,). Every row gathers
one element, so the forward pass is a gathered load over rows: `loss[i] = -w[t[i]] * x[i, t[i]]`, zero
where `t[i] == ignore_index`. The reductions (`mean` divides by the summed weights of the kept rows, as
torch does) run in one program that walks the rows in blocks, so results are deterministic and need no
atomics. Reduction codes follow aten: 0 none, 1 mean, 2 sum. The reduction and whether class weights
are given (HAS_W) are runtime arguments: each dtype compiles one kernel that serves all of them.
"""

from __future__ import annotations

from collections.abc import Callable

import numba
import torch_rbln.dsl as tl

from .embedding import in_range_64
from .rows import inputs_finite


@tl.jit
def nll_loss_kernel(
    x_ptr, t_ptr, w_ptr, loss_ptr, total_weight_ptr, rows, classes, ignore_index, REDUCTION, HAS_W,
    BLOCK: tl.constexpr,
):
    """REDUCTION 0: loss[i] per row (grid: row blocks); 1/2: loss[0] and total_weight[0] (grid: 1)."""
    offsets = tl.arange(0, BLOCK)
    loss_acc = tl.zeros((BLOCK,), dtype=tl.float32)
    weight_acc = tl.zeros((BLOCK,), dtype=tl.float32)
    first = tl.program_id(0) * BLOCK
    stop = rows if REDUCTION != 0 else first + BLOCK
    for start in range(first, stop, BLOCK):
        row = start + offsets
        in_rows = row < rows
        target = tl.load(t_ptr + row, mask=in_rows, other=ignore_index).to(tl.int64)
        keep = in_rows & (target != ignore_index)
        safe_target = tl.where(keep, target, 0)
        x = tl.load(x_ptr + row * classes + safe_target, mask=keep, other=0.0).to(tl.float32)
        if HAS_W:
            w = tl.load(w_ptr + safe_target, mask=keep, other=0.0).to(tl.float32)
        else:
            w = tl.where(keep, 1.0, 0.0)
        loss = -w * x
        if REDUCTION == 0:
            tl.store(loss_ptr + row, loss.to(loss_ptr.dtype.element_ty), mask=in_rows)
        loss_acc += loss
        weight_acc += w
    if REDUCTION != 0:
        total = tl.sum(loss_acc, axis=0)
        total_weight = tl.sum(weight_acc, axis=0)
        if REDUCTION == 1:
            total = total / total_weight
        tl.store(loss_ptr, total.to(loss_ptr.dtype.element_ty))
        tl.store(total_weight_ptr, total_weight.to(total_weight_ptr.dtype.element_ty))


@tl.jit
def nll_loss_backward_kernel(
    g_ptr, t_ptr, w_ptr, total_weight_ptr, dx_ptr, classes, ignore_index, REDUCTION, HAS_W,
    BLOCK: tl.constexpr,
):
    """Row `program_id(0)` of dx, whole: -w[t] * g at the target class (g[i] for reduction none,
    g / total_weight for mean), zero elsewhere and on an ignored row. Writing every element makes a
    zero-fill launch before it unnecessary."""
    row = tl.program_id(0)
    target = tl.load(t_ptr + row).to(tl.int64)
    keep = target != ignore_index
    safe_target = tl.where(keep, target, 0)
    if REDUCTION == 0:
        g = tl.load(g_ptr + row).to(tl.float32)
    else:
        g = tl.load(g_ptr).to(tl.float32)
        if REDUCTION == 1:
            g = g / tl.load(total_weight_ptr).to(tl.float32)
    if HAS_W:
        w = tl.load(w_ptr + safe_target).to(tl.float32)
    else:
        w = 1.0
    grad = tl.where(keep, -w * g, 0.0)
    cols = tl.arange(0, BLOCK)
    for start in range(0, classes, BLOCK):
        c = start + cols
        value = tl.where(c == target, grad, 0.0)
        tl.store(dx_ptr + row * classes + c, value.to(dx_ptr.dtype.element_ty), mask=c < classes)


# ---------------------------------------------------------------- host-side input check of the fast paths


@numba.njit(nogil=True, cache=True, boundscheck=False)
def inputs_plain(target, rows, classes, ignore_index, addresses, counts, mask, wide):
    """Every one of the `rows` int64 targets at `target` is a class in [0, classes) or `ignore_index`,
    and the float inputs (`kernels.rows.inputs_finite` of `addresses`, `counts`, `mask`, `wide`) hold no
    NaN/Inf: the per-call checks of an nll_loss fast path in one compiled call. False sends the call
    to the general path (a bad target then raises torch's own error from the CPU kernel)."""
    return in_range_64(target, rows, classes, ignore_index) and inputs_finite(addresses, counts, mask, wide)


_plain_entries: dict[int, Callable] = {}


def inputs_plain_entry(count: int) -> Callable:
    """`inputs_plain`'s compiled entry for `count` float inputs (numba's per-call typing skipped)."""
    entry = _plain_entries.get(count)
    if entry is None:
        int64 = numba.types.int64
        signature = (int64,) * 4 + (numba.types.UniTuple(int64, count),) * 2 + (int64, int64)
        inputs_plain.compile(signature)
        entry = _plain_entries[count] = inputs_plain.overloads[signature].entry_point
    return entry
