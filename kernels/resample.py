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
def gather_plane_kernel(x_ptr, rows_ptr, cols_ptr, out_ptr, height, width, out_height, out_width,
                        BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    """out[p, i, j] = x[p, rows[i], cols[j]] for a contiguous (planes, height, width) x and a contiguous
    (planes, out_height, out_width) out; grid (cdiv(out_height, BLOCK_H), planes)."""
    plane = tl.program_id(1).to(tl.int64)
    oi = tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)
    i_ok = oi < out_height
    source_rows = tl.load(rows_ptr + oi, mask=i_ok, other=0)
    x_plane = x_ptr + plane * height * width
    out_plane = out_ptr + plane * out_height * out_width
    oj0 = tl.arange(0, BLOCK_W)
    for start in range(0, out_width, BLOCK_W):
        oj = start + oj0
        j_ok = oj < out_width
        source_cols = tl.load(cols_ptr + oj, mask=j_ok, other=0)
        ok = i_ok[:, None] & j_ok[None, :]
        v = tl.load(x_plane + source_rows[:, None] * width + source_cols[None, :], mask=ok, other=0.0)
        tl.store(out_plane + oi[:, None] * out_width + oj[None, :], v, mask=ok)
