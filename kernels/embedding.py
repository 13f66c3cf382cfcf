"""Embedding lookup: out[i, :] = weight[indices[i], :], one program per index."""

from __future__ import annotations

import torch_rbln.dsl as tl


@tl.jit
def embedding_kernel(w_ptr, idx_ptr, out_ptr, dim, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    row = tl.load(idx_ptr + i).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    for start in range(0, dim, BLOCK):
        mask = start + cols < dim
        v = tl.load(w_ptr + row * dim + start + cols, mask=mask, other=0.0)
        tl.store(out_ptr + i * dim + start + cols, v, mask=mask)


@tl.jit
def embedding_backward_kernel(
    g_ptr, idx_ptr, out_ptr, count, dim, padding_idx, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """out[v, :] = sum of g[i, :] over the i with indices[i] == v (one program per row v), in float32;
    rows equal to padding_idx stay zero. Deterministic: no atomics."""
    v = tl.program_id(0)
    ri = tl.arange(0, BLOCK_I)
    rd = tl.arange(0, BLOCK_D)
    for d_start in range(0, dim, BLOCK_D):
        d_mask = d_start + rd < dim
        acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
        for i_start in range(0, count, BLOCK_I):
            i_mask = i_start + ri < count
            idx = tl.load(idx_ptr + i_start + ri, mask=i_mask, other=-1).to(tl.int64)
            hit = (idx == v) & i_mask
            g = tl.load(g_ptr + (i_start + ri)[:, None] * dim + d_start + rd[None, :],
                        mask=hit[:, None] & d_mask[None, :], other=0.0).to(tl.float32)
            acc += tl.sum(g, axis=0)
        acc = tl.where(v == padding_idx, 0.0, acc)
        tl.store(out_ptr + v * dim + d_start + rd, acc.to(out_ptr.dtype.element_ty), mask=d_mask)
