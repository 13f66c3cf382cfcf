"""The persistent graph cache (`torch_rbln.compiler.cache`): what its key covers, and entries that must
not be trusted (corrupt, not fitting their graph, kernel sources that no longer load) being rebuilt with
a WARNING instead of failing the compile or sending the graph to the eager fallback.

Each test has its own TORCH_RBLN_CACHE_DIR and compares the compiled result with PyTorch on the CPU.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F

from torch_rbln.compiler import cache

ATOL = 1e-5
RTOL = 1e-5
SHAPE = (8, 96)


def add_gelu_mul(x, y):
    return F.gelu(x + y) * y


@pytest.fixture
def graph_cache(monkeypatch, tmp_path):
    """A private cache dir, an empty in-memory cache, and the keys stored (in order)."""
    monkeypatch.setenv("TORCH_RBLN_CACHE_DIR", str(tmp_path))
    cache.clear_memory()
    keys: list[str] = []
    store = cache.store
    monkeypatch.setattr(cache, "store", lambda key, specs: (keys.append(key), store(key, specs)))
    yield tmp_path, keys
    cache.clear_memory()


def _inputs(seed: int):
    generator = torch.Generator().manual_seed(seed)
    x, y = (torch.randn(SHAPE, generator=generator) for _ in range(2))
    return (x, y), (x.to("rbln"), y.to("rbln"))


def _compile_fresh(xr, yr):
    """Compile in a 'new process': Dynamo reset and the in-memory graph cache emptied."""
    torch._dynamo.reset()
    cache.clear_memory()
    return torch.compile(add_gelu_mul, backend="rbln", dynamic=False)(xr, yr)


def _rewrite(path, edit) -> None:
    """Apply `edit` to an entry's kernels and re-sign it, so only `edit` is wrong with it."""
    data = json.loads(path.read_text())
    edit(data["kernels"])
    payload = json.dumps(data["kernels"], sort_keys=True)
    data["digest"] = hashlib.sha256(payload.encode()).hexdigest()
    path.write_text(json.dumps(data))


def _first_entry(root, keys):
    assert keys, "the first compile stored no graph cache entry"
    path = root / "graphs" / f"{keys[0]}.json"
    assert path.exists()
    return path


def test_a_cached_kernel_source_that_no_longer_loads_is_regenerated(fresh_compiler, graph_cache, capsys):
    """An entry with a valid checksum whose kernel source fails to import (one written by another build
    of the DSL or compiler) is rebuilt with a WARNING; the graph does not fall back to eager."""
    root, keys = graph_cache
    (x, y), (xr, yr) = _inputs(31)
    torch.testing.assert_close(_compile_fresh(xr, yr).cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    path = _first_entry(root, keys)
    generated = fresh_compiler.stats()["kernels_generated"]
    assert generated >= 1

    def stale(kernels):
        kernels[0]["name"] = "fused_stale_entry_of_test_graph_cache"
        kernels[0]["source"] = "raise ImportError('a kernel written by another DSL build')\n"

    _rewrite(path, stale)
    capsys.readouterr()
    out = _compile_fresh(xr, yr)
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    err = capsys.readouterr().err
    assert f"[TORCH-RBLN][WARNING] graph cache entry {keys[0][:16]} could not be loaded (ImportError" in err
    stats = fresh_compiler.stats()
    assert stats["cache_rebuilds"] == 1 and stats["eager_graphs"] == 0
    assert stats["disk_hits"] == 1 and stats["kernels_generated"] == 2 * generated
    # the rewritten entry is the regenerated one: the next 'process' hits it and loads it
    assert "fused_stale_entry_of_test_graph_cache" not in path.read_text()
    out = _compile_fresh(xr, yr)
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    stats = fresh_compiler.stats()
    assert stats["disk_hits"] == 2 and stats["cache_rebuilds"] == 1
    assert stats["kernels_generated"] == 2 * generated


def test_a_cached_entry_that_does_not_fit_its_graph_is_regenerated(fresh_compiler, graph_cache, capsys):
    root, keys = graph_cache
    (x, y), (xr, yr) = _inputs(32)
    _compile_fresh(xr, yr)
    path = _first_entry(root, keys)

    def foreign(kernels):
        kernels[0]["outputs"] = ["a_node_of_another_graph"]

    _rewrite(path, foreign)
    capsys.readouterr()
    out = _compile_fresh(xr, yr)
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    err = capsys.readouterr().err
    assert f"[TORCH-RBLN][WARNING] graph cache entry {keys[0][:16]} does not fit its graph" in err
    stats = fresh_compiler.stats()
    assert stats["cache_rebuilds"] == 1 and stats["disk_hits"] == 0 and stats["eager_graphs"] == 0
    assert "a_node_of_another_graph" not in path.read_text()


@pytest.mark.parametrize("damage", ["format", "key", "checksum", "not json", "no kernels"])
def test_a_corrupt_entry_is_reported_and_regenerated(fresh_compiler, graph_cache, capsys, damage):
    root, keys = graph_cache
    (x, y), (xr, yr) = _inputs(33)
    _compile_fresh(xr, yr)
    path = _first_entry(root, keys)
    data = json.loads(path.read_text())
    if damage == "format":
        data["format"] = cache.FORMAT - 1
    elif damage == "key":
        data["key"] = "0" * 64
    elif damage == "checksum":
        data["kernels"][0]["grid"] = data["kernels"][0]["grid"] + 1  # a changed launch, unsigned
    elif damage == "no kernels":
        del data["kernels"]
    path.write_text("{not json" if damage == "not json" else json.dumps(data))
    capsys.readouterr()
    out = _compile_fresh(xr, yr)
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    assert f"[TORCH-RBLN][WARNING] graph cache entry {path} is corrupt" in capsys.readouterr().err
    assert fresh_compiler.stats()["disk_hits"] == 0
    assert json.loads(path.read_text())["key"] == keys[0]


def _graph() -> tuple[fx.GraphModule, list[torch.Tensor]]:
    gm = fx.symbolic_trace(add_gelu_mul)
    return gm, [torch.empty(SHAPE), torch.empty(SHAPE)]


def test_the_key_covers_inputs_tp_versions_and_the_graph(monkeypatch):
    gm, example = _graph()
    key = cache.graph_key(gm, example, 1)
    assert key == cache.graph_key(gm, [torch.empty(SHAPE), torch.empty(SHAPE)], 1)  # values do not count
    others = {
        "tp": cache.graph_key(gm, example, 2),
        "shape": cache.graph_key(gm, [torch.empty(8, 97), torch.empty(8, 97)], 1),
        "dtype": cache.graph_key(gm, [t.double() for t in example], 1),
        "strides": cache.graph_key(gm, [torch.empty(SHAPE[::-1]).t(), example[1]], 1),
        "device": cache.graph_key(gm, [t.to("rbln") for t in example], 1),
        "graph": cache.graph_key(fx.symbolic_trace(lambda x, y: F.gelu(x - y) * y), example, 1),
    }
    monkeypatch.setattr(torch, "__version__", torch.__version__ + "+other")
    others["torch"] = cache.graph_key(gm, example, 1)
    monkeypatch.undo()
    monkeypatch.setattr("torch_rbln.__version__", "0.0.0-other")
    others["torch_rbln"] = cache.graph_key(gm, example, 1)
    monkeypatch.undo()
    monkeypatch.setattr(cache, "FORMAT", cache.FORMAT + 1)
    others["format"] = cache.graph_key(gm, example, 1)
    assert key not in others.values() and len(set(others.values())) == len(others), others


def test_an_identity_stands_for_the_graphs_code_and_inputs(monkeypatch):
    """A cached trace's graph is keyed by the trace's key and phase (which determine the graph and its
    inputs), so its Python code is never generated just to be hashed; tp, versions and the compiler's
    sources still count."""
    gm, example = _graph()
    other = fx.symbolic_trace(lambda x, y: F.gelu(x - y) * y)
    key = cache.graph_key(gm, example, 1, "trace/forward")
    assert key == cache.graph_key(other, [torch.empty(8, 97)], 1, "trace/forward")
    others = {
        "phase": cache.graph_key(gm, example, 1, "trace/backward"),
        "tp": cache.graph_key(gm, example, 2, "trace/forward"),
        "no identity": cache.graph_key(gm, example, 1),
    }
    monkeypatch.setattr(cache, "_compiler_digest", lambda: "another compiler")
    others["compiler"] = cache.graph_key(gm, example, 1, "trace/forward")
    assert key not in others.values() and len(set(others.values())) == len(others), others


def test_the_key_covers_the_compilers_sources(monkeypatch):
    gm, example = _graph()
    key = cache.graph_key(gm, example, 1)
    monkeypatch.setattr(cache, "_compiler_digest", lambda: "another compiler")
    assert cache.graph_key(gm, example, 1) != key


def test_a_compile_with_an_unreadable_entry_still_compiles(fresh_compiler, graph_cache, capsys):
    """A cached entry that is a directory (unreadable as a file) is a miss, not an error."""
    root, keys = graph_cache
    (x, y), (xr, yr) = _inputs(34)
    _compile_fresh(xr, yr)
    path = _first_entry(root, keys)
    path.unlink()
    path.mkdir()
    out = _compile_fresh(xr, yr)
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    stats = fresh_compiler.stats()
    assert stats["disk_hits"] == 0 and stats["eager_graphs"] == 0
    assert "could not write graph cache entry" in capsys.readouterr().err  # ... and stays in memory
