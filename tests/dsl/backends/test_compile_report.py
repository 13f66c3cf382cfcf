"""A launch that waits for numba says so: the first slow compile of a process at WARNING (with where
the result is cached), later ones at INFO; a launch served by the disk cache says nothing."""

from __future__ import annotations

import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend import executable

from torch_rbln import cachedir, config
from torch_rbln import dsl as triton


@triton.jit
def reported_kernel(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets) + 1.0)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_CACHE_DIR", str(tmp_path / "cache"))
    config.reset_for_tests()
    cachedir.reset_for_tests()
    monkeypatch.setattr(executable, "SLOW_COMPILE_SECONDS", 0.0)
    monkeypatch.setattr(executable, "_slow_compiles", [0, 0.0])
    monkeypatch.setattr(executable, "_modules", {})
    reported_kernel.clear_cache()
    yield
    reported_kernel.clear_cache()
    config.reset_for_tests()
    cachedir.reset_for_tests()


def test_first_slow_compile_warns_once_with_the_cache_location(fresh_cache, tmp_path, capfd):
    x = torch.zeros(4)
    reported_kernel[(1,)](x, BLOCK=4, backend="numba")
    err = capfd.readouterr().err
    assert "[TORCH-RBLN][WARNING] compiling DSL kernels with numba" in err
    assert "'reported_kernel'" in err and str(tmp_path / "cache") in err
    reported_kernel[(1,)](x, BLOCK=4, backend="numba")  # compiled: nothing to report
    x8 = torch.zeros(8)
    reported_kernel[(1,)](x8, BLOCK=8, backend="numba")  # another specialisation: INFO, not WARNING
    assert "WARNING" not in capfd.readouterr().err
    assert x.tolist() == [2.0] * 4 and x8.tolist() == [1.0] * 8
