"""Torch references of the paged attention that RBLN attention kernels compute (ours and vllm-rbln's).

Written from the semantics of vllm-rbln's torch references (`*_impl` in
vllm_rbln/v1/attention/backends/flash_attention.py): the kv cache is (2, blocks, H, 1, P, D); a sequence
with `s` cached tokens keeps token t in block `table[t // P]` at offset `t % P`; the L new tokens are
positions s .. s + L - 1; queries are (batch, H, G, L, D) (G query heads share one kv head).
"""

from __future__ import annotations

import torch


def attend(q, keys, values, keep, scale):
    """softmax(q k^T * scale over `keep`) v for one sequence: q (H, G, L, D), keys/values (H, 1, T, D),
    keep (L, T) bool."""
    scores = torch.matmul(q, keys.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~keep, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), values)


def causal(length, start, total):
    """keep (length, total): query i (position start + i) sees keys at positions <= start + i."""
    return torch.arange(total)[None, :] <= start + torch.arange(length)[:, None]


def paged(q, k, v, cache, tables, cached, part, keep_of, scale):
    """Paged attention: sequence b has cached[b] tokens in blocks tables[b]; the new tokens k[b], v[b]
    are written after them.  Returns (output, updated cache); keep_of(b, total) -> (L, total) bool."""
    cache = cache.clone()
    outs = []
    length = q.shape[3]
    for b in range(q.shape[0]):
        s = int(cached[b])
        for i in range(length):
            t = s + i
            blk = int(tables[b][t // part])
            cache[0, blk, :, :, t % part] = k[b, :, :, i]
            cache[1, blk, :, :, t % part] = v[b, :, :, i]
        total = s + length
        pos = torch.arange(total)
        blocks = torch.tensor([int(tables[b][int(p) // part]) for p in pos])
        keys = cache[0, blocks, :, :, pos % part].permute(1, 2, 0, 3)  # (H, 1, total, D)
        values = cache[1, blocks, :, :, pos % part].permute(1, 2, 0, 3)
        outs.append(attend(q[b], keys, values, keep_of(b, total), scale))
    return torch.stack(outs), cache


def sliding(q, k, v, cache, blocks, start, window, scale):
    """Sliding-window attention: the cache block holds `start[b]` tokens (at most `window`); keys are
    [cached, new]; row i sees the `window` positions ending at start + i; the block then keeps the last
    `window` positions (zero padded at the back)."""
    cache = cache.clone()
    outs = []
    length = q.shape[3]
    for b in range(q.shape[0]):
        blk, s = int(blocks[b]), int(start[b])
        keys = torch.cat([cache[0, blk, :, :, :s], k[b]], dim=2)
        values = torch.cat([cache[1, blk, :, :, :s], v[b]], dim=2)
        total = s + length
        rows = s + torch.arange(length)[:, None]
        cols = torch.arange(total)[None, :]
        keep = (cols <= rows) & (cols > rows - window)
        outs.append(attend(q[b], keys, values, keep, scale))
        lo = max(0, total - window)
        for which, full in ((0, keys), (1, values)):
            kept = full[:, :, lo:total]
            cache[which, blk] = torch.nn.functional.pad(kept, (0, 0, 0, window - kept.shape[2]))
    return torch.stack(outs), cache


def partition_sizes(cached, parts, part, marked=False):
    """vllm-rbln's per-partition cached-token counts: clamp(s - p * part, 0, part), int16 (batch, parts).
    `marked`: min(s - p * part, part) instead, where partitions after the one receiving the new tokens
    are negative (what `rblib.partition_skip` skips)."""
    p = torch.arange(parts)
    low = None if marked else 0
    return torch.stack([(int(s) - p * part).clamp(low, part) for s in cached]).to(torch.int16)
