"""A launch that waits for numba says so: the first slow compile of a process at WARNING while it runs
("compiling N kernels ..., cached afterwards in <dir>"), each slow compile at INFO once done; a launch
served by the disk cache says nothing."""

from __future__ import annotations

import time

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
    monkeypatch.setattr(executable, "_announced", [False])
    monkeypatch.setattr(executable, "_in_flight", [0])
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
    assert "[TORCH-RBLN][WARNING] compiling 1 kernel with numba (first: 'reported_kernel'), cached " \
           f"afterwards in {tmp_path / 'cache'}" in err
    assert "TORCH_RBLN_COMPILE=background" in err
    reported_kernel[(1,)](x, BLOCK=4, backend="numba")  # compiled: nothing to report
    x8 = torch.zeros(8)
    reported_kernel[(1,)](x8, BLOCK=8, backend="numba")  # another specialisation: INFO, not WARNING
    assert "WARNING" not in capfd.readouterr().err
    assert x.tolist() == [2.0] * 4 and x8.tolist() == [1.0] * 8


def test_the_warning_appears_while_the_compile_runs(fresh_cache, monkeypatch, capfd):
    """The notice comes from a timer while the launch is still waiting, not after the compile."""
    seen = []
    original = executable.Executable._first_call

    def slow_first_call(self, call):
        deadline = time.monotonic() + 5.0
        while not executable._announced[0] and time.monotonic() < deadline:
            time.sleep(0.01)  # the compile "runs" until the timer has announced it
        seen.append(executable._announced[0])
        original(self, call)

    monkeypatch.setattr(executable.Executable, "_first_call", slow_first_call)
    monkeypatch.setattr(executable, "SLOW_COMPILE_SECONDS", 0.05)
    reported_kernel[(1,)](torch.zeros(4), BLOCK=4, backend="numba")
    assert seen == [True]
    assert "compiling 1 kernel with numba (first: 'reported_kernel')" in capfd.readouterr().err


def test_the_cache_check_stats_numbas_index_file_and_agrees_with_the_listing(fresh_cache, monkeypatch):
    """`_cached_on_disk` (asked at every kernel's first launch in a process) reads one index path numba's
    cache computed, with the listing's answer: True once the kernel is compiled, False once its files are
    gone; an object without numba's cache attributes (another numba) falls back to the listing."""
    import os

    listings = []
    real_listing = executable._numba_cache_files
    monkeypatch.setattr(executable, "_numba_cache_files", lambda f: (listings.append(f), real_listing(f))[1])
    x = torch.zeros(4)
    compiled = reported_kernel.warmup(x, BLOCK=4, grid=(1,), backend="numba").executable("numba")
    module_file = compiled.module.__file__
    files = real_listing(module_file)
    assert files and executable._cached_on_disk(compiled.kernel, module_file)
    for path in files:
        os.remove(path)
    assert not executable._cached_on_disk(compiled.kernel, module_file) and not real_listing(module_file)
    assert not listings  # one stat each time, no directory listing
    assert not executable._cached_on_disk(object(), module_file)  # no numba cache object: the listing
    assert listings == [module_file]
