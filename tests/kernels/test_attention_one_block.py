"""The flash forward's ONE_BLOCK path (`kernels.attention._prune_forward_tiles`): a launch whose key
block holds every key of a head computes a plain softmax instead of the online one. It must give the
loop's results (the same kernel launched with ONE_BLOCK=False on the same tile) in every case the
loop handles: causal or not, boolean and additive masks, rows that see no key, NaN and Inf scores
(kernels see them in compiled programs, where inputs are not scanned), grouped key/value heads."""

from __future__ import annotations

import math

import pytest
import torch
from torch_rbln.kernels import attention as kernels
from torch_rbln.kernels.attention import _configs, _prune_forward_tiles

import torch_rbln  # noqa: F401


def _launch(q, k, v, mask, *, causal: bool, one_block: bool, block: tuple[int, int], scale: float = 0.3):
    """out, lse of one forward launch on rbln, (B, H, M, D) operands, with the given tile and path."""
    batch, heads, rows, dim = q.shape
    keys, group = k.shape[2], heads // k.shape[1]
    block_m, block_n = block
    out = torch.full_like(q, 7.0)
    lse = torch.full((batch, heads, rows), 7.0, device=q.device)
    has_mask = mask is not None
    mask_arg = mask if has_mask else q
    # a mask broadcast over batch or heads is read with stride 0 there, as the registry passes it
    mask_strides = tuple(mask.expand(batch, heads, rows, keys).stride()) if has_mask else (0, 0, 0, 0)
    grid = (-(-rows // block_m), batch * heads)
    kernels.attention_forward_kernel.fn[grid](
        q, k, v, mask_arg, out, lse, *q.stride(), *k.stride(), *v.stride(), *mask_strides, *out.stride(),
        heads, rows, keys, dim, scale, group, int(causal),
        HAS_MASK=has_mask, BOOL_MASK=has_mask and mask.dtype == torch.bool, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_D=16, ONE_BLOCK=one_block)
    return out.cpu(), lse.cpu()


def _operands(rows: int, keys: int, heads: int = 2, kv_heads: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, rows, 16, generator=g)
    k = torch.randn(1, kv_heads, keys, 16, generator=g)
    v = torch.randn(1, kv_heads, keys, 16, generator=g)
    return q, k, v


CASES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "causal_more_queries": dict(causal=True, rows=40),
    "bool_mask_with_empty_row": dict(mask="bool"),
    "additive_mask_with_minus_inf_row": dict(mask="float"),
    "nan_and_inf_scores": dict(special=True),
    "grouped_heads": dict(heads=4, kv_heads=2),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_one_block_equals_the_online_loop(case):
    spec = {"causal": False, "rows": 20, "keys": 27, "heads": 2, "kv_heads": 2, "mask": None,
            "special": False, **CASES[case]}
    q, k, v = _operands(spec["rows"], spec["keys"], spec["heads"], spec["kv_heads"])
    if spec["special"]:
        q[0, 0, 3, 2] = math.nan  # a NaN score row
        k[0, 1, 5, 0] = math.inf  # an Inf score column in head 1
    mask = None
    if spec["mask"] == "bool":
        mask = torch.rand(1, 1, spec["rows"], spec["keys"], generator=torch.Generator().manual_seed(1)) > 0.3
        mask[..., 4, :] = False  # a row that sees no key: 0 and lse -inf
    elif spec["mask"] == "float":
        mask = torch.randn(1, spec["heads"], spec["rows"], spec["keys"])
        mask[..., 6, :] = -math.inf
    device = [t.to("rbln") for t in (q, k, v)]
    device_mask = mask.to("rbln") if mask is not None else None
    block = (32, 32)
    one = _launch(*device, device_mask, causal=spec["causal"], one_block=True, block=block)
    loop = _launch(*device, device_mask, causal=spec["causal"], one_block=False, block=block)
    for got, expected in zip(one, loop, strict=True):
        assert torch.equal(got.isnan(), expected.isnan())
        torch.testing.assert_close(got, expected, atol=0, rtol=0, equal_nan=True)
    if not spec["special"]:
        reference = torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(spec["heads"] // spec["kv_heads"], 1),
            v.repeat_interleave(spec["heads"] // spec["kv_heads"], 1), attn_mask=mask,
            is_causal=spec["causal"], scale=0.3)
        seen = ~one[1].isinf()[..., None].expand_as(reference)  # rows that saw no key: SDPA gives NaN
        torch.testing.assert_close(one[0][seen], reference[seen], atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize(("rows", "keys", "one_block"), [
    (128, 128, True), (128, 100, True), (16, 16, True), (40, 27, True), (512, 512, False),
    (100, 1000, False)])
def test_the_forward_tile_says_whether_it_holds_every_key(rows, keys, one_block):
    (config,) = _prune_forward_tiles(_configs(), {"M": rows, "N": keys, "D": 64, "BLOCK_D": 64})
    assert config.kwargs["ONE_BLOCK"] is one_block
    assert (keys <= config.kwargs["BLOCK_N"]) is one_block
