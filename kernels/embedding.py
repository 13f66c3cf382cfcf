"""Gathers along one dim (embedding lookup, index_select), the scatter that undoes them (index_put), the
embedding gradient, plus the host-side range check of the indices these kernels (and the loss kernels)
read.

`index_select_kernel` views the source as (outer, size, inner) around the selected dim: program (i, o)
copies the `inner` contiguous elements of slice `indices[i]` of outer block `o`. An embedding lookup
is outer = 1, inner = the embedding width.

The kernels trust their indices (a gather has no way to raise), so the caller checks them first with
`indices_in_range`: a compiled scan over the raw int32/int64 values at the tensor's host address (an
rbln tensor's data pointer is host memory). Comparing a DLPack host view with torch took ~30 us on a
4-element index, more than the launch it guards.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend.support import as_pointer


@tl.jit
def index_select_kernel(x_ptr, idx_ptr, out_ptr, size, count, inner, BLOCK: tl.constexpr):
    """out[o, i, :] = x[o, indices[i], :] for a contiguous (outer, size, inner) source and a contiguous
    (outer, count, inner) result; grid (count, outer)."""
    i = tl.program_id(0)
    o = tl.program_id(1)
    row = tl.load(idx_ptr + i).to(tl.int64)
    src = (o * size + row) * inner
    dst = (o * count + i) * inner
    cols = tl.arange(0, BLOCK)
    for start in range(0, inner, BLOCK):
        mask = start + cols < inner
        v = tl.load(x_ptr + src + start + cols, mask=mask, other=0.0)
        tl.store(out_ptr + dst + start + cols, v, mask=mask)


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


@tl.jit
def index_put_kernel(out_ptr, idx_ptr, v_ptr, size, count, inner, ACCUMULATE: tl.constexpr,
                     BLOCK: tl.constexpr):
    """out[o, indices[i], :] = v[o, i, :] (or += with ACCUMULATE) for a contiguous (outer, size, inner)
    destination and contiguous (outer, count, inner) values; grid (count, outer): the scatter that
    undoes `index_select_kernel`. Accumulation is an atomic add, which runs the programs in order on
    one NPU: repeated indices add up in index order, as torch's serial CPU kernel does."""
    i = tl.program_id(0)
    o = tl.program_id(1)
    row = tl.load(idx_ptr + i).to(tl.int64)
    dst = (o * size + row) * inner
    src = (o * count + i) * inner
    cols = tl.arange(0, BLOCK)
    for start in range(0, inner, BLOCK):
        mask = start + cols < inner
        v = tl.load(v_ptr + src + start + cols, mask=mask, other=0)
        if ACCUMULATE:
            tl.atomic_add(out_ptr + dst + start + cols, v, mask=mask)
        else:
            tl.store(out_ptr + dst + start + cols, v, mask=mask)


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _in_range(values, stop, ignore):
    """Every value is in [0, stop) or equals `ignore`."""
    ok = True
    for i in range(values.shape[0]):
        v = values[i]
        ok &= (0 <= v < stop) | (v == ignore)
    return ok


@numba.njit(nogil=True, cache=True, boundscheck=False)
def in_range_64(address, n, stop, ignore):
    """`indices_in_range` of the n int64 values at `address` (for a caller that checked the dtype and
    contiguity, and that stop > 0)."""
    return _in_range(numba.carray(as_pointer(address, np.int64), n), stop, ignore)


@numba.njit(nogil=True, cache=True, boundscheck=False)
def in_range_32(address, n, stop, ignore):
    """`in_range_64` for int32 values."""
    return _in_range(numba.carray(as_pointer(address, np.int32), n), stop, ignore)


def indices_in_range(indices: torch.Tensor, stop: int, ignore: int | None = None) -> bool:
    """True when every element of the contiguous int32/int64 rbln tensor `indices` is in [0, stop) or
    equals `ignore` (nll_loss's ignore_index; None: no exception)."""
    if stop <= 0:
        return ignore is not None and bool((_host(indices) == ignore).all())
    scan = in_range_64 if indices.dtype == torch.int64 else in_range_32
    # without an exception, 0 stands in for it: 0 passes anyway once stop > 0
    return scan(indices.data_ptr(), indices.numel(), stop, 0 if ignore is None else ignore)


def _host(t: torch.Tensor) -> torch.Tensor:
    from torch_rbln import _dlpack

    return _dlpack.to_host_view(t)
