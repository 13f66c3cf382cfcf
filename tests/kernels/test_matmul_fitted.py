"""matmul_kernel's fitted tiles (`kernels.matmul._fitted_tile`): the tile chosen for problems of at
least 64^3 multiply-adds, and results against the CPU on shapes that take each of its cases (a K block
spanning K or several K steps, partial M / N tiles, a transposed weight, batches, f16)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch_rbln.kernels import matmul
from torch_rbln.registry.table import MATMUL

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _tile(m: int, n: int, k: int, tp: int = 1) -> tuple | None:
    config = matmul._fitted_tile(m, n, k, tp)
    if config is None:
        return None
    return tuple(config.kwargs[name] for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "ONE_STEP"))


def test_the_fitted_tile_pads_no_row_and_spans_a_power_of_two_k():
    assert _tile(64, 1024, 1024) == (64, 512, 1024, True)  # the MLP benchmark's linear
    assert _tile(128, 512, 512) == (128, 256, 512, True)  # Llama 512's projections
    assert _tile(128, 1376, 512) == (128, 256, 512, True)
    assert _tile(128, 512, 1376) == (128, 256, 512, False)  # K = 1376 in three steps
    assert _tile(32, 192, 64) == (32, 256, 64, True)
    assert _tile(1024, 1024, 1024) == (128, 256, 1024, True)
    assert _tile(8, 4096, 4096) is None and _tile(32, 32, 32) is None  # the listed tiles take these
    assert _tile(32, 256, 64, tp=4) == (32, 64, 64, True)  # a program for each NPU


def test_choose_tiles_falls_back_to_the_listed_tiles():
    configs = matmul.matmul_kernel.configs
    small = matmul._choose_tiles(configs, {"M": 64, "N": 96, "K": 32})
    assert small == matmul._prune_tiles(configs, {"M": 64, "N": 96, "K": 32})
    (fitted,) = matmul._choose_tiles(configs, {"M": 128, "N": 512, "K": 512})
    assert fitted.kwargs["BLOCK_M"] == 128 and fitted.kwargs["ONE_STEP"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("m,k,n", [(64, 1024, 64), (37, 300, 70), (130, 1376, 50)],
                         ids=["one-step-views", "one-step-padded-k", "three-k-steps-partial-m"])
def test_linear_on_fitted_tiles_matches_the_cpu(m: int, k: int, n: int, dtype: torch.dtype):
    torch.manual_seed(m + n + k)
    x, w, b = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype), torch.randn(n).to(dtype)
    assert matmul._fitted_tile(m, n, k, 1) is not None  # the premise: these take a fitted tile
    registry.reset_fallback_report()
    got = F.linear(x.to("rbln"), w.to("rbln"), b.to("rbln"))
    reference = F.linear(x.float(), w.float(), b.float()).to(dtype)
    atol, rtol = MATMUL[str(dtype).removeprefix("torch.")]
    torch.testing.assert_close(got.cpu(), reference, atol=atol, rtol=rtol)
    assert registry.device_counts().get("aten::addmm", 0) == 1


def test_bmm_on_a_fitted_tile_matches_the_cpu():
    torch.manual_seed(7)
    a, b = torch.randn(3, 40, 128), torch.randn(3, 128, 96)
    assert matmul._fitted_tile(40, 96, 128, 1) is not None
    got = torch.bmm(a.to("rbln"), b.to("rbln"))
    atol, rtol = MATMUL["float32"]
    torch.testing.assert_close(got.cpu(), torch.bmm(a, b), atol=atol, rtol=rtol)
