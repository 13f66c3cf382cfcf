"""Helpers for tests that depend on torch-rbln environment variables.

No test may depend on the developer's own environment: every variable starting with ``TORCH_RBLN_`` or
``RBLN_`` is removed, then only the variables a test lists are set.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

PREFIXES = ("TORCH_RBLN_", "RBLN_")


def clean_env(**variables: str) -> dict[str, str]:
    """A copy of os.environ without torch-rbln variables, with autoload off, plus ``variables``.

    The test session's kernel cache (``TORCH_RBLN_CACHE_DIR``, set by tests/conftest.py) is kept unless
    ``variables`` names another: child interpreters then reuse the kernels the session compiled, and
    nothing is written to the user's ``~/.cache``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIXES)}
    if "TORCH_RBLN_CACHE_DIR" in os.environ:
        env["TORCH_RBLN_CACHE_DIR"] = os.environ["TORCH_RBLN_CACHE_DIR"]
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env.update(variables)
    return env


PACKAGE_DIR = str(pathlib.Path(__file__).resolve().parents[2] / "torch_rbln")

# Makes ``torch_rbln`` a bare package so that config/topology/log/tp load without the package __init__
# (device registration, torch import): these tests then check those modules alone, quickly.
BARE_PACKAGE = (
    "import sys as _s, types as _t\n"
    f"_p = _t.ModuleType('torch_rbln'); _p.__path__ = [{PACKAGE_DIR!r}]; _s.modules['torch_rbln'] = _p\n"
)


def run_python(
    code: str, cwd: str | None = None, *, bare: bool = True, **variables: str
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with ``clean_env(**variables)``.

    With ``bare`` (default) the package ``__init__`` is not run (see BARE_PACKAGE).
    """
    return subprocess.run(
        [sys.executable, "-c", (BARE_PACKAGE if bare else "") + code],
        env=clean_env(**variables),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def reset_all() -> None:
    from torch_rbln import config, log, topology

    topology.reset_for_tests()
    log.reset_for_tests()
    config.reset_for_tests()


def isolate(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    """In-process: drop torch-rbln variables, set ``variables``, and clear every cache."""
    for k in list(os.environ):
        if k.startswith(PREFIXES):
            monkeypatch.delenv(k)
    for k, v in variables.items():
        monkeypatch.setenv(k, v)
    reset_all()
