import pytest
from torch_rbln.autotune import clear_caches, reset_counters

from torch_rbln import config


@pytest.fixture(autouse=True)
def autotune_env(tmp_path, monkeypatch):
    """Every test: its own database under tmp_path, the interpreter backend, fresh counters."""
    db = tmp_path / "autotune.db"
    monkeypatch.setenv("TORCH_RBLN_AUTOTUNE_DB", str(db))
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", "interpret")
    config.reset_for_tests()
    clear_caches()
    reset_counters()
    yield db
    clear_caches()
    config.reset_for_tests()
