"""Fixtures of the registry tests."""

from __future__ import annotations

import pytest
from torch_rbln.registry import _launch


@pytest.fixture
def launches_forbidden(monkeypatch):
    """Make every checked launch fail: a call that still runs on the device took its plan's kept launch
    (the dispatcher would turn the failure into a CPU fallback with a 'kernel error' reason). Returns
    the switch: call it once the plans are kept."""

    def forbidden(*args, **kwargs):
        raise AssertionError("checked launch")

    return lambda: monkeypatch.setattr(_launch, "launch", forbidden)
