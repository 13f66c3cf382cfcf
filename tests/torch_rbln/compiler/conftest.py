"""Fixtures for the torch.compile backend tests: a clean Dynamo state and compiler counters per test."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401  (registers the device)


def _reset_runtime() -> None:
    from torch_rbln import config, log, topology

    topology.reset_for_tests()
    log.reset_for_tests()
    config.reset_for_tests()


@pytest.fixture(autouse=True)
def fresh_compiler():
    import torch_rbln.compiler as compiler
    from torch_rbln import registry

    torch._dynamo.reset()
    compiler.reset_stats()
    registry.reset_fallback_report()
    yield compiler
    torch._dynamo.reset()


@pytest.fixture
def rbln_env(monkeypatch):
    """Set torch-rbln variables for one test (the device mapping and config are rebuilt)."""

    def set_(**variables: str) -> None:
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        _reset_runtime()

    yield set_
    monkeypatch.undo()
    _reset_runtime()


@pytest.fixture
def traces(monkeypatch, tmp_path):
    """A private directory of traces (the kernels stay in the suite's cache: compiled once) and the
    trace keys stored (in order)."""
    from torch_rbln.compiler import cache, trace_cache

    monkeypatch.setattr(trace_cache, "trace_dir", lambda: tmp_path / "traces")
    cache.clear_memory()
    keys: list[str] = []
    store = trace_cache.write_signed

    def recorded(path, key, *rest, **named):
        keys.append(key)
        store(path, key, *rest, **named)

    monkeypatch.setattr(trace_cache, "write_signed", recorded)
    yield tmp_path / "traces", keys
    cache.clear_memory()
