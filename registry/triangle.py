"""`tril`, `triu` and their in-place forms on device (`kernels/triangle.py`).

Registered `exact` in the table: the ops move values without arithmetic, so a causal mask full of
-inf (`torch.triu(torch.full((L, L), -inf), 1)`) runs here instead of taking the NaN/Inf CPU path.
Results are contiguous, as torch's CPU kernels return them; the matrices of a batch are addressed by
one stride, so inputs whose leading dims do not collapse are copied contiguous first.
"""

from __future__ import annotations

import math

import torch

from ._base import Decline, StridedTarget
from ._launch import kernel_module as _k
from ._launch import launch_grid
from ._ops import contiguous, empty
from .geometry import cdiv


def _batched(t: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
    """(t or a contiguous copy, batch stride, row stride, column stride) of t as a stack of matrices."""
    if t.dim() > 3:
        t = contiguous(t)
    if t.dim() == 3:
        return t, t.stride(0), t.stride(1), t.stride(2)
    if t.dim() > 3:
        return t, t.shape[-2] * t.shape[-1], t.stride(-2), t.stride(-1)
    return t, 0, t.stride(0), t.stride(1)


def _triangle(x: torch.Tensor, diagonal: int, upper: bool, out: torch.Tensor | None) -> torch.Tensor:
    if x.dim() < 2:
        raise Decline("tril/triu of fewer than 2 dims")  # torch's error from the CPU
    if isinstance(diagonal, bool) or not isinstance(diagonal, int):
        raise Decline("non-integer diagonal")
    if x.dtype.is_complex:
        raise Decline(f"dtype {str(x.dtype).replace('torch.', '')}")
    if out is None:
        out = empty(x.shape, x.dtype, x.get_device())
    elif not out.is_contiguous():
        raise StridedTarget("non-contiguous in-place")
    if x.numel() == 0:
        return out
    R, C = x.shape[-2], x.shape[-1]
    matrices = math.prod(x.shape[:-2])
    source, sxb, sxr, sxc = _batched(x)
    kernels = _k("triangle")
    col_tiles = cdiv(C, kernels.BLOCK_C)
    diagonal = max(min(diagonal, C), -R)  # beyond the matrix the result no longer changes
    launch_grid(kernels.triangle_kernel, (cdiv(R, kernels.BLOCK_R) * col_tiles, matrices),
                (source.view(matrices, R, C) if source.dim() > 3 else source, out,
                 R, C, sxb, sxr, sxc, R * C, C, 1, diagonal, col_tiles, int(upper)),
                BLOCK_R=kernels.BLOCK_R, BLOCK_C=kernels.BLOCK_C)
    return out


def tril(x: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    return _triangle(x, diagonal, False, None)


def triu(x: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    return _triangle(x, diagonal, True, None)


def tril_(x: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    return _triangle(x, diagonal, False, x)


def triu_(x: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    return _triangle(x, diagonal, True, x)
