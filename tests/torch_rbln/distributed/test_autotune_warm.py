"""`rbln-autotune warm` under torchrun: ranks split the manifest, rank 0 merges every rank's results."""

from __future__ import annotations

import json
import os
import pathlib
import sqlite3
import subprocess
import sys

import pytest

AUTOTUNE_TESTS = pathlib.Path(__file__).resolve().parents[2] / "autotune"


@pytest.mark.slow
def test_warm_splits_a_manifest_across_torchrun_ranks(tmp_path):
    launch = {"sizes": {"n": [100, 1000, 5000]},
              "args": [{"shape": ["$n"], "dtype": "float32"}, {"shape": ["$n"], "dtype": "float32"},
                       {"shape": ["$n"], "dtype": "float32", "init": "zeros"}, "$n"],
              "grid": ["cdiv(n_elements, BLOCK_SIZE)"]}
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"kernels": [{"kernel": "atutil:add_tuned", "launches": [launch]}]}))
    db = tmp_path / "tuned.db"
    summary = tmp_path / "summary.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RBLN_")}
    env.update(TORCH_RBLN_DSL_BACKEND="interpret", PYTHONPATH=f"{AUTOTUNE_TESTS}{os.pathsep}"
               f"{env.get('PYTHONPATH', '')}")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "-m",
               "torch_rbln.autotune", "warm", str(manifest), "--db", str(db), "--json-summary", str(summary),
               "-q"]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(summary.read_text())
    assert len(rows) == 3 and len({r["launch"] for r in rows}) == 3, rows  # each launch tuned once
    assert all(r["status"] == "tuned" for r in rows), rows
    with sqlite3.connect(db) as con:
        tables = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
        table = next(t for t in tables if "decision" in t)
        assert con.execute(f"select count(*) from {table}").fetchone()[0] == 3
    assert not list(tmp_path.glob("tuned.db.rank*")), "per-rank databases are removed"
