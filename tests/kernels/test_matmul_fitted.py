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


def _contiguous_nargs(m: int, n: int, k: int, dtype: torch.dtype = torch.float32, **strides: int) -> dict:
    """The autotuner's named arguments of `a (m x k) @ b (k x n)`, both row-major unless `strides`
    says otherwise (sam, sak, sbk, sbn)."""
    a, b = torch.empty(m, k, dtype=dtype), torch.empty(k, n, dtype=dtype)
    nargs = {"a_ptr": a, "b_ptr": b, "M": m, "N": n, "K": k, "sam": k, "sak": 1, "sbk": n, "sbn": 1}
    return {**nargs, **strides}


def test_operands_read_in_place_are_float32_with_a_unit_stride_each():
    assert matmul._reads_in_place(_contiguous_nargs(32, 64, 48))
    assert matmul._reads_in_place(_contiguous_nargs(32, 64, 48, sbk=1, sbn=48))  # linear's w.t()
    assert matmul._reads_in_place(_contiguous_nargs(32, 64, 48, sam=1, sak=32))  # a.t(): a weight gradient
    assert not matmul._reads_in_place(_contiguous_nargs(32, 64, 48, sak=2, sam=96))  # no unit stride
    assert not matmul._reads_in_place(_contiguous_nargs(32, 64, 48, sam=16))  # overlapping rows
    assert not matmul._reads_in_place(_contiguous_nargs(32, 64, 48, dtype=torch.float16))  # staged
    assert not matmul._reads_in_place({"M": 32, "N": 64, "K": 48})  # sizes only


def test_in_place_operands_share_one_k_block_up_to_256():
    tiles = {_in_place_tile(32, n, k) for k in (16, 32, 64, 100, 128, 192, 256) for n in (16, 64, 192, 1000)}
    # one specialisation for every K up to 256 and every N up to 1024: padded columns of a one-step
    # product are never read (dot_padding), so the widest N block the area allows costs nothing
    assert tiles == {(32, 1024, 256, True)}
    assert _in_place_tile(64, 64, 32) == (64, 512, 256, True)  # below _FITTED_MIN_VOLUME as well
    assert _in_place_tile(128, 48, 256) == (128, 256, 256, True)  # the row block alone tells them apart
    assert _in_place_tile(32, 2048, 64) == (32, 1024, 256, True)  # wider than the area: blocks of it
    # a longer K (up to _IN_PLACE_MAX_K) is one step too, its block the power of 2 spanning K, and its
    # row and N blocks fill the larger area: Llama's linears are one gemm call each, up to 512 rows
    assert _tile(128, 512, 1376) == (128, 256, 512, False)  # staged: the padded K block in steps
    assert _in_place_tile(128, 512, 1376) == (128, 4096, 2048, True)
    assert _in_place_tile(128, 1376, 512) == (128, 4096, 512, True)
    assert _in_place_tile(512, 512, 1376) == (512, 2048, 2048, True)
    assert _in_place_tile(1000, 1376, 512) == (512, 2048, 512, True)  # two row blocks
    assert _in_place_tile(512, 64, 64)[0] == 128  # K up to 256: the 128-row block as before
    assert _tile(32, 256, 300) == (32, 256, 512, True)
    assert _in_place_tile(32, 256, 300) == (32, 4096, 512, True)
    assert _in_place_tile(128, 512, 8192) == _tile(128, 512, 8192)  # past _IN_PLACE_MAX_K: K steps
    # a decoding step's few rows take a 16-row block (gemm multiplies the counted rows only); a problem
    # the product tiles hold whole, and N or K under 16, keep the listed tiles
    assert _in_place_tile(8, 64, 64) == (16, 2048, 256, True)
    assert _in_place_tile(1, 1376, 512) == (16, 4096, 512, True)  # the wide area's column cap
    assert _in_place_tile(8, 16, 16) is None and _in_place_tile(32, 8, 64) is None
    assert _tile(8, 64, 64) is None  # operands staged (not float32 in place): the listed tiles
    assert _in_place_tile(16, 16, 16, tp=4) is None  # no program per NPU: the listed tiles


def _in_place_tile(m: int, n: int, k: int, tp: int = 1) -> tuple | None:
    config = matmul._fitted_tile(m, n, k, tp, in_place=True)
    if config is None:
        return None
    return tuple(config.kwargs[name] for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "ONE_STEP"))


def _operand(rows: int, cols: int, transposed: bool) -> torch.Tensor:
    """A rows x cols float32 operand, row-major or a transposed (column-major) view."""
    return torch.randn(cols, rows).t() if transposed else torch.randn(rows, cols)


# Problems that share the in-place K block of 256 (odd sizes, K = 1 step of a longer block, partial
# M and N blocks), with each operand row- or column-major; the float16 row stages instead.
_SHARED_K = [(37, 70, 17), (32, 64, 64), (64, 64, 32), (20, 200, 255), (128, 48, 256), (17, 33, 16)]


@pytest.mark.parametrize("m,n,k", _SHARED_K, ids=[f"{m}x{n}x{k}" for m, n, k in _SHARED_K])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_products_on_the_shared_k_block_match_the_cpu(m: int, n: int, k: int, layout: str):
    assert _in_place_tile(m, n, k)[2:] == (256, True)  # the premise: these share the K block
    torch.manual_seed(m * n + k)
    a, b = _operand(m, k, layout[0] == "t"), _operand(k, n, layout[1] == "t")
    bias = torch.randn(n)
    atol, rtol = MATMUL["float32"]
    got = torch.mm(a.to("rbln"), b.to("rbln"))
    torch.testing.assert_close(got.cpu(), a @ b, atol=atol, rtol=rtol)
    got = torch.addmm(bias.to("rbln"), a.to("rbln"), b.to("rbln"), beta=0.5, alpha=2.0)
    torch.testing.assert_close(got.cpu(), torch.addmm(bias, a, b, beta=0.5, alpha=2.0), atol=atol, rtol=rtol)


def test_batched_products_on_the_shared_k_block_match_the_cpu():
    torch.manual_seed(11)
    a, b = torch.randn(3, 37, 100), torch.randn(3, 70, 100).transpose(1, 2)
    atol, rtol = MATMUL["float32"]
    got = torch.bmm(a.to("rbln"), b.to("rbln"))
    torch.testing.assert_close(got.cpu(), torch.bmm(a, b), atol=atol, rtol=rtol)


def test_the_shared_k_block_keeps_nan_and_inf_where_the_cpu_has_them():
    a, b = torch.randn(20, 24), torch.randn(24, 40)
    a[3, 5], b[7, 11] = float("nan"), float("inf")
    got = torch.mm(a.to("rbln"), b.to("rbln")).cpu()
    torch.testing.assert_close(got, a @ b, equal_nan=True, atol=1e-4, rtol=1e-4)


def test_operands_without_a_unit_stride_keep_their_fitted_k_block():
    torch.manual_seed(5)
    a, b = torch.randn(40, 2 * 96)[:, ::2], torch.randn(96, 3 * 80)[:, ::3]  # K = 96: staged tiles
    atol, rtol = MATMUL["float32"]
    torch.testing.assert_close(torch.mm(a.to("rbln"), b.to("rbln")).cpu(), a @ b, atol=atol, rtol=rtol)


@pytest.mark.parametrize("rows", [1, 3, 15])
def test_a_decoding_steps_few_rows_take_the_16_row_block_and_match_the_cpu(rows):
    """A linear of 1-15 tokens (a decoding step) over a transposed weight, with its bias, and an mm:
    the 16-row fitted block (gemm on the counted rows only; the padded rows are never stored)."""
    torch.manual_seed(rows)
    x, weight, bias = torch.randn(rows, 512), torch.randn(300, 512), torch.randn(300)
    nargs = _contiguous_nargs(rows, 300, 512, sbk=1, sbn=512)
    assert matmul._fitted_tile(rows, 300, 512, 1, matmul._reads_in_place(nargs)).kwargs["BLOCK_M"] == 16
    atol, rtol = MATMUL["float32"]
    got = torch.nn.functional.linear(x.to("rbln"), weight.to("rbln"), bias.to("rbln"))
    torch.testing.assert_close(got.cpu(), torch.nn.functional.linear(x, weight, bias), atol=atol, rtol=rtol)
    other = torch.randn(512, 40)
    torch.testing.assert_close((x.to("rbln") @ other.to("rbln")).cpu(), x @ other, atol=atol, rtol=rtol)
