"""Rotary position embedding (GPT-NeoX / Llama "rotate half" form), one program per row of x:
out[:h] = x[:h] * cos[:h] - x[h:] * sin[:h]; out[h:] = x[h:] * cos[h:] + x[:h] * sin[h:] (h = D / 2).
cos/sin are (cs_rows, D) and broadcast over the leading dims of x (row r uses row r % cs_rows)."""

from __future__ import annotations

import torch_rbln.dsl as tl


@tl.jit
def rotary_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, D, cs_rows, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cs = row % cs_rows
    half = D // 2
    cols = tl.arange(0, BLOCK)
    mask = cols < half
    x1 = tl.load(x_ptr + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + row * D + half + cols, mask=mask, other=0.0).to(tl.float32)
    c1 = tl.load(cos_ptr + cs * D + cols, mask=mask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + cs * D + half + cols, mask=mask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + cs * D + cols, mask=mask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + cs * D + half + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * D + cols, (x1 * c1 - x2 * s1).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_ptr + row * D + half + cols, (x2 * c2 + x1 * s2).to(out_ptr.dtype.element_ty), mask=mask)
