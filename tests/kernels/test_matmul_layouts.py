"""matmul_kernel on the operand layouts the numba backend's `tl.dot` stages differently: row-major
tiles (C arrays), column-major ones such as `linear`'s transposed weight (Fortran arrays read by BLAS
through its transpose flag), full contiguous fp32 tiles passed as views without a copy (their offsets
must be right), partial tiles padded in the staging buffer, and tiles with no unit stride at all.

The shapes are small enough that `_prune_tiles` keeps only the 32x32x32 tile: one specialisation per
(dtype, bias), and the tile facts below (which tile is full, which K block spans K) hold for it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch_rbln.kernels import matmul
from torch_rbln.registry.table import MATMUL

import torch_rbln  # noqa: F401
from torch_rbln import registry

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    atol, rtol = MATMUL[str(expected.dtype).removeprefix("torch.")]
    assert actual.device.type == "rbln" and actual.dtype == expected.dtype
    torch.testing.assert_close(actual.cpu(), expected, atol=atol, rtol=rtol)


def _ran_on_device(op: str, calls: int) -> None:
    """`calls` calls of `op` ran the device kernel and nothing fell back to the CPU."""
    report = registry.fallback_report()
    assert all(row["cpu"] == 0 for row in report.values()), registry.format_report(report)
    assert registry.device_counts().get(op, 0) == calls, registry.format_report(report)


def _randn(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


def test_tile_pruning() -> None:
    """The premise of this file's shapes: only the 32-tile survives pruning below ~4x its volume, while
    1024^3 (the benchmark) keeps every tl.dot tile for the autotuner, except on a tensor-parallel group with
    more NPUs than a tile has M x N blocks (a launch of fewer programs than NPUs is refused)."""
    configs = matmul.matmul_kernel.configs
    kept = matmul._prune_tiles(configs, {"M": 64, "N": 96, "K": 32})
    assert [c.kwargs["BLOCK_K"] for c in kept] == [32]
    assert matmul._prune_tiles(configs, {"M": 1, "N": 4096, "K": 4096}) == configs[:1]
    dot_tiles = [c for c in configs if not matmul._is_product(c)]  # the product tiles are for tiny shapes
    assert matmul._prune_tiles(configs, {"M": 1024, "N": 1024, "K": 1024}) == dot_tiles
    assert [c.kwargs["BLOCK_K"] for c in matmul._prune_tiles(configs, {"M": 2, "N": 2, "K": 2})] == [8]
    kept = matmul._prune_tiles(configs, {"M": 1024, "N": 1024, "K": 1024}, tp=8)
    assert [c.kwargs["BLOCK_M"] for c in kept] == [32, 128, 256]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_linear_reads_the_transposed_weight(dtype: torch.dtype) -> None:
    """F.linear(x, w, b) = addmm(b, x, w.t()): the weight tile is column-major. At (64, 96, 32) every
    tile is full and K fits one block, so in fp32 both operands go to BLAS as views of device memory
    (x row-major, w.t() as a Fortran view); at (37, 45, 50) the tiles are partial and staged with
    zero padding. f16/bf16 tiles are always converted into the staging buffers."""
    registry.reset_fallback_report()
    for m, n, k in ((64, 96, 32), (37, 45, 50)):
        x, w, b = _randn(m, k, dtype=dtype), _randn(n, k, dtype=dtype), _randn(n, dtype=dtype)
        _close(F.linear(x.to("rbln"), w.to("rbln"), b.to("rbln")), F.linear(x, w, b))
    _ran_on_device("aten::addmm", 2)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_mm_both_transposed_and_row_major_views(dtype: torch.dtype) -> None:
    """a.t() @ b.t() stages both operands as Fortran arrays (one gemm with both transpose flags). In
    (96, 64) @ (64, 32) B's rows are exactly one tile wide, so its two K blocks are contiguous: fp32
    passes them as views at K offsets 0 and 32 rows, while A (64 wide, two blocks) is copied."""
    registry.reset_fallback_report()
    a, b = _randn(50, 70, dtype=dtype), _randn(41, 50, dtype=dtype)
    _close(a.to("rbln").t() @ b.to("rbln").t(), a.t() @ b.t())
    a, b = _randn(96, 64, dtype=dtype), _randn(64, 32, dtype=dtype)
    _close(a.to("rbln") @ b.to("rbln"), a @ b)
    _ran_on_device("aten::mm", 2)


def test_no_unit_stride_batched_and_scaled() -> None:
    """Operands with no unit stride take the general strided copy; bmm of a transposed operand stages
    each batch at its own offset (attention's q @ k^T); addmm's alpha/beta with a broadcast row bias."""
    registry.reset_fallback_report()
    x, w = torch.randn(40, 90), torch.randn(66, 135)
    dx, dw = x.to("rbln"), w.to("rbln")
    _close(dx[:, ::2] @ dw[::2, ::3].t(), x[:, ::2] @ w[::2, ::3].t())
    q, k = torch.randn(3, 40, 24), torch.randn(3, 33, 24)
    _close(torch.bmm(q.to("rbln"), k.to("rbln").transpose(1, 2)), torch.bmm(q, k.transpose(1, 2)))
    c, a, b = torch.randn(1, 33), torch.randn(40, 24), torch.randn(33, 24)
    expected = torch.addmm(c, a, b.t(), beta=0.5, alpha=-2.0)
    _close(torch.addmm(c.to("rbln"), a.to("rbln"), b.to("rbln").t(), beta=0.5, alpha=-2.0), expected)
    _ran_on_device("aten::mm", 1)
    _ran_on_device("aten::bmm", 1)
    _ran_on_device("aten::addmm", 1)


@pytest.mark.parametrize("bias", ["row", "column", "full", "strided row", "scalar"])
def test_every_bias_layout_matches_cpu(bias: str) -> None:
    """A row of unit-stride values (linear's bias) is read as one (HAS_BIAS=2, `registry.matmul.bias_kind`);
    every other bias layout through its strides, each with alpha and beta, planned and checked calls."""
    from torch_rbln.registry.matmul import bias_kind

    gen = torch.Generator().manual_seed(len(bias))
    a, b = torch.randn(40, 24, generator=gen), torch.randn(24, 33, generator=gen)
    c = {"row": torch.randn(33, generator=gen), "column": torch.randn(40, 1, generator=gen),
         "full": torch.randn(40, 33, generator=gen), "strided row": torch.randn(66, generator=gen)[::2],
         "scalar": torch.randn(1, generator=gen)}[bias]
    expected = torch.addmm(c, a, b, beta=0.5, alpha=-2.0)
    for _ in range(2):  # the checked call, then the plan's
        _close(torch.addmm(c.to("rbln"), a.to("rbln"), b.to("rbln"), beta=0.5, alpha=-2.0), expected)
    assert (bias_kind((0, 1)), bias_kind((1, 0)), bias_kind(None)) == (2, 1, 0)
