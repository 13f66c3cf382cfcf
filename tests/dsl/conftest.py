import pytest
import torch

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (atol, rtol) per dtype for kernels that compute in the input dtype and round at the end
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def assert_close(actual, expected, dtype, scale=1.0):
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(actual.float(), expected.float(), atol=atol * scale, rtol=rtol * scale)


@pytest.fixture(autouse=True, params=["numba", "interpret"])
def dsl_backend(request, monkeypatch):
    """Differential testing: every DSL test runs on the compiled backend and on the interpreter
    (tests that pass `backend=` explicitly keep their choice)."""
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", request.param)
    return request.param
