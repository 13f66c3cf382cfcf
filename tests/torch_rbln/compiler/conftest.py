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
