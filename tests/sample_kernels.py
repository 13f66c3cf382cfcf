"""DSL kernels that several test modules launch (importable from any test: tests/ is on sys.path)."""

from __future__ import annotations

import torch
import torch_rbln.dsl as tl


@tl.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)


def double(x: torch.Tensor, block: int = 64) -> torch.Tensor:
    """`2 * x` (contiguous `x`) by `double_kernel` on blocks of `block` elements."""
    out = torch.empty_like(x)
    double_kernel[(-(-x.numel() // block),)](x, out, x.numel(), BLOCK=block)
    return out
