"""Random ops on device: dropout (`native_dropout`) and its backward, `uniform_` and `normal_`
(`torch.rand` / `torch.randn` on rbln).

Random numbers come from `tl.rand(seed, offset)` (Philox 4x32, Triton's counter-based generator): the
element at flat offset i is kept when its uniform draw is >= p. The seed is drawn by the registry from
PyTorch's default generator, so `torch.manual_seed` makes a run repeat exactly; the masks differ from
the CPU's (another generator), as CUDA's do. Values are computed as torch's CPU kernels compute them,
`(x * mask) * scale` (so a dropped -x gives -0.0 and a dropped inf NaN, as there).
"""

from __future__ import annotations

import torch_rbln.dsl as tl

BLOCK = 1024


@tl.jit
def dropout_kernel(x_ptr, out_ptr, mask_ptr, n, p, scale, seed, BLOCK: tl.constexpr):
    """out = (x * keep) * scale and mask = keep, keep = rand(seed, i) >= p, over n contiguous elements.
    Grid (cdiv(n, BLOCK),)."""
    at = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = at < n
    keep = tl.rand(seed, at) >= p
    x = tl.load(x_ptr + at, mask=live, other=0).to(tl.float32)
    y = (x * keep.to(tl.float32)).to(out_ptr.dtype.element_ty).to(tl.float32) * scale
    tl.store(out_ptr + at, y.to(out_ptr.dtype.element_ty), mask=live)
    tl.store(mask_ptr + at, keep, mask=live)


@tl.jit
def dropout_backward_kernel(g_ptr, mask_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    """out = (g * mask) * scale over n contiguous elements. Grid (cdiv(n, BLOCK),)."""
    at = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = at < n
    g = tl.load(g_ptr + at, mask=live, other=0).to(tl.float32)
    keep = tl.load(mask_ptr + at, mask=live, other=0).to(tl.float32)
    y = (g * keep).to(out_ptr.dtype.element_ty).to(tl.float32) * scale
    tl.store(out_ptr + at, y.to(out_ptr.dtype.element_ty), mask=live)


@tl.jit
def uniform_kernel(out_ptr, n, low, high, seed, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    """out = low + (high - low) * u over n contiguous elements, u = rand(seed, i) truncated to a
    multiple of 1 / STEPS, STEPS = 2 ** (out dtype's significand digits): torch's CPU kernel draws u
    so, which keeps rand() in [0, 1) in half dtypes too (a float32 u near 1 would round up to 1.0).
    Computed in float32, rounded to out's dtype. Grid (cdiv(n, BLOCK),)."""
    at = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    u = (tl.rand(seed, at) * STEPS).to(tl.int32).to(tl.float32) / STEPS
    tl.store(out_ptr + at, (low + (high - low) * u).to(out_ptr.dtype.element_ty), mask=at < n)


@tl.jit
def normal_kernel(out_ptr, n, mean, std, seed, BLOCK: tl.constexpr):
    """out = mean + std * z, z = randn(seed, i) (standard normal, Box-Muller on Philox), over n
    contiguous elements. Grid (cdiv(n, BLOCK),)."""
    at = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    z = tl.randn(seed, at)
    tl.store(out_ptr + at, (mean + std * z).to(out_ptr.dtype.element_ty), mask=at < n)
