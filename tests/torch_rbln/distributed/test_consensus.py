"""Autotune decisions ranks agree on: rank 0 decides each key, the others use its choice untuned."""

from __future__ import annotations

import sqlite3
import sys

import pytest
import torch
import torch.distributed as dist
import torch_rbln.dsl as tl
from distutil import spawn

from torch_rbln import dsl as triton

BLOCKS = (64, 128)


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)


def _tuned_block(rank: int, name: str) -> int:
    """Tune a fresh autotuner whose timings favour config `rank` on rank `rank`: without agreement
    every rank would pick a different config."""
    from torch_rbln.autotune import Config, autotune

    current = {}

    def mark(block):
        return lambda nargs: current.update(block=block)

    def fake_bench(run):
        run()
        return 1.0 if current["block"] == BLOCKS[rank] else 5.0

    configs = [Config({"BLOCK": b}, pre_hook=mark(b)) for b in BLOCKS]
    kernel = autotune(configs=configs, key=["n"], name=name, do_bench=fake_bench)(_scale_kernel)
    x = torch.arange(300, dtype=torch.float32)
    out = torch.empty_like(x)
    kernel[lambda meta: (triton.cdiv(300, meta["BLOCK"]),)](x, out, 300)
    assert torch.equal(out, x * 2)
    return kernel.best_config.kwargs["BLOCK"]


def _check_consensus(rank: int, world: int) -> None:
    from torch_rbln.autotune import counters

    agreed = _tuned_block(rank, "consensus:agreed")
    tunings = counters["tunings"]
    choices = [None] * world
    dist.all_gather_object(choices, agreed)
    assert choices == [BLOCKS[0]] * world, choices
    assert tunings == (1 if rank == 0 else 0), "only rank 0 tunes"
    # The premise: with the agreement module out of sight, each rank picks its own favourite.
    module = sys.modules.pop("torch_rbln.distributed._consensus")
    try:
        alone = _tuned_block(rank, f"consensus:alone-{rank}")  # own key: the shared store cannot agree
    finally:
        sys.modules["torch_rbln.distributed._consensus"] = module
    dist.all_gather_object(choices, alone)
    assert choices == list(BLOCKS[:world]), choices


@pytest.mark.slow
def test_ranks_use_rank_zeros_config(tmp_path, monkeypatch):
    db = tmp_path / "autotune.db"
    monkeypatch.setenv("TORCH_RBLN_AUTOTUNE_DB", str(db))
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", "interpret")
    spawn(_check_consensus, 2, env=True)
    with sqlite3.connect(db) as con:
        tables = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
        table = next(t for t in tables if "decision" in t)
        rows = con.execute(f"select kernel, config from {table} where kernel = 'consensus:agreed'").fetchall()
    assert len(rows) == 1, rows  # recorded once, by rank 0
