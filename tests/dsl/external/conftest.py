import pytest


@pytest.fixture(autouse=True)
def dsl_backend(monkeypatch):
    """External programs run at their own (large) sizes: the compiled backend only, not the interpreter
    (which the differential fixture of tests/dsl would add)."""
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", "numba")
    return "numba"
