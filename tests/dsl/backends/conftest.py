import pytest
from torch_rbln.dsl.backends.numba_backend import executable

from torch_rbln import cachedir, config


@pytest.fixture(autouse=True)
def dsl_backend():
    """Backend tests choose their backend explicitly: no differential parametrisation here."""
    return None


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty kernel cache (its path), so that every launch compiles with numba."""
    monkeypatch.setenv("TORCH_RBLN_CACHE_DIR", str(tmp_path / "cache"))
    config.reset_for_tests()
    cachedir.reset_for_tests()
    monkeypatch.setattr(executable, "_modules", {})
    yield tmp_path / "cache"
    config.reset_for_tests()
    cachedir.reset_for_tests()
