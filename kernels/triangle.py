"""Triangles of matrices (`tril`, `triu`): the causal masks of attention and their like.

One kernel for both: element (r, c) of each matrix is kept when c - r lies on the kept side of
`diagonal` (upper: c - r >= diagonal; lower: c - r <= diagonal), else written as zero. Values are only
moved, so any dtype (float, integer, bool) is exact and NaN/Inf pass through as they are.
"""

from __future__ import annotations

import torch_rbln.dsl as tl

BLOCK_R = 16
BLOCK_C = 64


@tl.jit
def triangle_kernel(x_ptr, y_ptr, R, C, sxb, sxr, sxc, syb, syr, syc, diagonal, col_tiles, upper,
                    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """y[b, r, c] = x[b, r, c] on the kept side of the diagonal, else 0. Grid (row tiles * col_tiles,
    matrices); x and y may be the same tensor (in place: each element is read before it is written,
    by the same program)."""
    tile = tl.program_id(0)
    b = tl.program_id(1)
    r = (tile // col_tiles) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
    c = (tile % col_tiles) * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    live = (r < R) & (c < C)
    # `upper` is a runtime flag, not a constexpr: tril and triu share one compiled kernel per dtype
    keep = tl.where(upper != 0, (c - r) >= diagonal, (c - r) <= diagonal)
    v = tl.load(x_ptr + b * sxb + r * sxr + c * sxc, mask=live & keep, other=0)
    tl.store(y_ptr + b * syb + r * syr + c * syc, v, mask=live)
