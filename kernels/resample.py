"""The plane gather of resampling and padding: out[p, i, j] = x[p, rows[i], cols[j]].

Nearest upsampling, reflection and replication pads, and each tap of a linear resize, move every output
element from one input element chosen by a row index and a column index that depend on the sizes only
(`registry/resample.py` computes them as torch's CPU kernels do). One program gathers a block of output
rows of one plane, in column blocks: where the `index_select` kernel along the last dim copied one
element per program (a 64-channel 64 x 64 image upsampled twice took 10 ms against the CPU's 0.6).

The indices are the host's own, in range by construction; a row's base and the column offsets are
bounded by the launch's checks like any gather's.
"""

from __future__ import annotations

import torch_rbln.dsl as tl

BLOCK_ELEMENTS = 2048  # a program's tile: BLOCK_H x BLOCK_W output elements


@tl.jit
def _plane_rows(in_ptr, out_ptr, height, width, out_height, out_width, BLOCK_H: tl.constexpr):
    """(this program's plane of the input, of the output, its block of output rows, their bounds mask):
    every kernel here runs on grid (cdiv(out_height, BLOCK_H), planes)."""
    plane = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)
    return in_ptr + plane * height * width, out_ptr + plane * out_height * out_width, rows, rows < out_height


@tl.jit
def gather_plane_kernel(x_ptr, rows_ptr, cols_ptr, out_ptr, height, width, out_height, out_width,
                        BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    """out[p, i, j] = x[p, rows[i], cols[j]] for a contiguous (planes, height, width) x and a contiguous
    (planes, out_height, out_width) out; grid (cdiv(out_height, BLOCK_H), planes)."""
    x_plane, out_plane, oi, i_ok = _plane_rows(x_ptr, out_ptr, height, width, out_height, out_width, BLOCK_H)
    source_rows = tl.load(rows_ptr + oi, mask=i_ok, other=0)
    oj0 = tl.arange(0, BLOCK_W)
    for start in range(0, out_width, BLOCK_W):
        oj = start + oj0
        j_ok = oj < out_width
        source_cols = tl.load(cols_ptr + oj, mask=j_ok, other=0)
        ok = i_ok[:, None] & j_ok[None, :]
        v = tl.load(x_plane + source_rows[:, None] * width + source_cols[None, :], mask=ok, other=0.0)
        tl.store(out_plane + oi[:, None] * out_width + oj[None, :], v, mask=ok)


@tl.jit
def linear_plane_kernel(x_ptr, rows0_ptr, rows1_ptr, row_w0_ptr, row_w1_ptr, cols0_ptr, cols1_ptr, col_w0_ptr,
                        col_w1_ptr, out_ptr, height, width, out_height, out_width,
                        RESIZE_ROWS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    """A linear resize of the last dim (and of the one before it when RESIZE_ROWS) of a contiguous
    (planes, height, width) x into a contiguous (planes, out_height, out_width) out, in float32 as
    torch's CPU kernel nests it: per output row, t = x[r, c0] * wc0 + x[r, c1] * wc1 for its source
    rows r, then t0 * wr0 + t1 * wr1 (without RESIZE_ROWS the row is the output's own: t alone);
    grid (cdiv(out_height, BLOCK_H), planes)."""
    x_plane, out_plane, oi, i_ok = _plane_rows(x_ptr, out_ptr, height, width, out_height, out_width, BLOCK_H)
    if RESIZE_ROWS:
        r0 = tl.load(rows0_ptr + oi, mask=i_ok, other=0)
        r1 = tl.load(rows1_ptr + oi, mask=i_ok, other=0)
        wr0 = tl.load(row_w0_ptr + oi, mask=i_ok, other=0.0)
        wr1 = tl.load(row_w1_ptr + oi, mask=i_ok, other=0.0)
    else:
        r0 = oi
    oj0 = tl.arange(0, BLOCK_W)
    for start in range(0, out_width, BLOCK_W):
        oj = start + oj0
        j_ok = oj < out_width
        c0 = tl.load(cols0_ptr + oj, mask=j_ok, other=0)
        c1 = tl.load(cols1_ptr + oj, mask=j_ok, other=0)
        wc0 = tl.load(col_w0_ptr + oj, mask=j_ok, other=0.0)[None, :]
        wc1 = tl.load(col_w1_ptr + oj, mask=j_ok, other=0.0)[None, :]
        ok = i_ok[:, None] & j_ok[None, :]
        near = x_plane + r0[:, None] * width
        t0 = tl.load(near + c0[None, :], mask=ok, other=0.0).to(tl.float32) * wc0 + \
            tl.load(near + c1[None, :], mask=ok, other=0.0).to(tl.float32) * wc1
        if RESIZE_ROWS:
            far = x_plane + r1[:, None] * width
            t1 = tl.load(far + c0[None, :], mask=ok, other=0.0).to(tl.float32) * wc0 + \
                tl.load(far + c1[None, :], mask=ok, other=0.0).to(tl.float32) * wc1
            t0 = t0 * wr0[:, None] + t1 * wr1[:, None]
        tl.store(out_plane + oi[:, None] * out_width + oj[None, :], t0.to(out_ptr.dtype.element_ty), mask=ok)


@tl.jit
def _tap_weights(first_ptr, w0_ptr, w1_ptr, outputs, ok, target, size):
    """The weight with which each of `outputs` (a run) reaches input `target` through a linear
    resize's two taps: w0 where its first source is the target, plus w1 where its second one is (the
    second source is the first's successor, or the first itself at the last input)."""
    first = tl.load(first_ptr + outputs, mask=ok, other=-1)
    second = first + (first < size - 1).to(first.dtype)
    w0 = tl.load(w0_ptr + outputs, mask=ok, other=0.0)
    w1 = tl.load(w1_ptr + outputs, mask=ok, other=0.0)
    return tl.where(ok & (first == target), w0, 0.0) + tl.where(ok & (second == target), w1, 0.0)


@tl.jit
def run_sum_plane_kernel(g_ptr, row_start_ptr, row_count_ptr, row_first_ptr, row_w0_ptr, row_w1_ptr,
                         col_start_ptr, col_count_ptr, col_first_ptr, col_w0_ptr, col_w1_ptr, out_ptr,
                         height, width, out_height, out_width, max_rows, max_cols,
                         WEIGHTED: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    """The gradient of a plane gather or linear resize whose sources never decrease: input (r, c) of
    each plane receives the output rows [row_start[r], + row_count[r]) x columns [col_start[c],
    + col_count[c]) of the contiguous (planes, height, width) gradient g, summed in float32 in row-major
    order (as torch's CPU backward adds them) into the contiguous (planes, out_height, out_width) out;
    grid (cdiv(out_height, BLOCK_H), planes). Without WEIGHTED (nearest, replication pads) each
    output's gradient is added as it is, and the first/w0/w1 tables are not read; with it (linear
    modes: the runs hold the outputs whose first source is r - 1 or r) times the two taps' weights
    with which it reaches (r, c) (`_tap_weights`)."""
    g_plane, out_plane, r, r_ok = _plane_rows(g_ptr, out_ptr, height, width, out_height, out_width, BLOCK_H)
    first_row = tl.load(row_start_ptr + r, mask=r_ok, other=0)
    rows = tl.load(row_count_ptr + r, mask=r_ok, other=0)
    c0 = tl.arange(0, BLOCK_W)
    for start in range(0, out_width, BLOCK_W):
        c = start + c0
        c_ok = c < out_width
        first_col = tl.load(col_start_ptr + c, mask=c_ok, other=0)
        cols = tl.load(col_count_ptr + c, mask=c_ok, other=0)
        acc = tl.zeros((BLOCK_H, BLOCK_W), dtype=tl.float32)
        for i in range(0, max_rows):
            row_in = r_ok & (i < rows)
            if WEIGHTED:
                wr = _tap_weights(row_first_ptr, row_w0_ptr, row_w1_ptr, first_row + i, row_in, r, out_height)
            for j in range(0, max_cols):
                col_in = c_ok & (j < cols)
                ok = row_in[:, None] & col_in[None, :]
                g = tl.load(g_plane + (first_row + i)[:, None] * width + (first_col + j)[None, :], mask=ok,
                            other=0.0).to(tl.float32)
                if WEIGHTED:
                    wc = _tap_weights(col_first_ptr, col_w0_ptr, col_w1_ptr, first_col + j, col_in, c,
                                      out_width)
                    acc += wr[:, None] * wc[None, :] * g
                else:
                    acc += g
        tl.store(out_plane + r[:, None] * out_width + c[None, :], acc.to(out_ptr.dtype.element_ty),
                 mask=r_ok[:, None] & c_ok[None, :])
