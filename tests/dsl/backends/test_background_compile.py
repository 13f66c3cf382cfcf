"""TORCH_RBLN_COMPILE=background: a kernel's launches run on the interpreter while a worker process
compiles it, then on numba; `executable.tier_report()` says how many ran on the interpreter tier."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend import background, executable

from torch_rbln import cachedir, config, fallback
from torch_rbln import dsl as triton


@triton.jit
def tiered_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3.0 + 1.0, mask=mask)


@pytest.fixture
def background_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_RBLN_COMPILE", "background")
    config.reset_for_tests()
    cachedir.reset_for_tests()
    monkeypatch.setattr(executable, "_modules", {})
    monkeypatch.setattr(executable, "_announced", [False])
    monkeypatch.setattr(executable, "_in_flight", [0])
    executable.reset_tier_report()
    tiered_kernel.clear_cache()
    yield
    tiered_kernel.clear_cache()
    executable.reset_tier_report()
    config.reset_for_tests()
    cachedir.reset_for_tests()


def _launch(x: torch.Tensor, out: torch.Tensor):
    return tiered_kernel[(triton.cdiv(x.numel(), 16),)](x, out, x.numel(), BLOCK=16, backend="numba")


def _report() -> dict:
    return executable.tier_report()["tiered_kernel"]


@pytest.mark.slow  # starts a real worker process (imports torch): 8-20 s on a loaded 2-core machine
def test_launches_run_on_the_interpreter_until_the_worker_has_compiled(background_mode, capfd):
    x = torch.arange(40, dtype=torch.float32)
    out = torch.zeros(40)
    exe = _launch(x, out).executable("numba")
    assert torch.equal(out, x * 3 + 1)  # the interpreter tier's result
    assert _report()["interpret_launches"] == 1 and not exe._compiled
    assert "compiling 1 kernel with numba (first: 'tiered_kernel')" in capfd.readouterr().err
    assert exe._background.result(timeout=300) > 0  # the worker's compile
    out.zero_()
    _launch(x, out)  # loads the worker's machine code from numba's cache
    assert exe._compiled and torch.equal(out, x * 3 + 1)
    assert _report() == {"interpret_launches": 1, "worker_compiles": 1,
                         "worker_seconds": pytest.approx(_report()["worker_seconds"]), "worker_failures": 0}
    assert sum(exe.kernel._cache_misses.values()) == 0  # nothing was compiled in this process

    # a new process (here: a new executable) finds the kernel in the cache and never interprets it
    tiered_kernel.clear_cache()
    executable._modules.clear()
    _launch(x, out)
    assert _report()["interpret_launches"] == 1


class _FailingPool:
    def __init__(self):
        self.submitted = []

    def submit(self, path, module_name, function, arguments) -> Future:
        self.submitted.append(function)
        future: Future = Future()
        future.set_exception(background.WorkerError("RuntimeError: the worker broke"))
        return future


def test_a_failed_worker_compile_is_compiled_in_process_with_a_warning(background_mode, monkeypatch, capfd):
    pool = _FailingPool()
    monkeypatch.setattr(background, "pool", lambda: pool)
    x = torch.arange(20, dtype=torch.float32)
    out = torch.zeros(20)
    exe = _launch(x, out).executable("numba")
    assert pool.submitted == ["tiered_kernel"]
    assert exe._compiled and torch.equal(out, x * 3 + 1)  # the future had failed: compiled here
    assert "background compile of kernel 'tiered_kernel' failed (RuntimeError: the worker broke)" in \
        capfd.readouterr().err
    assert _report() == {"interpret_launches": 0, "worker_compiles": 0, "worker_seconds": 0.0,
                         "worker_failures": 1}
    assert fallback.compile_tier_report() == executable.tier_report()
    assert fallback.format_compile_tiers(fallback.compile_tier_report()) == (
        "  tiered_kernel: 0 launch(es) on the interpreter tier, 0 specialisation(s) compiled by workers in "
        "0.0 s, 1 failed (compiled in-process)")


class _PendingPool:
    """A compile that never finishes on its own: `finish()` completes it as the worker would."""

    def __init__(self):
        self.futures: list[Future] = []

    def submit(self, path, module_name, function, arguments) -> Future:
        future: Future = Future()
        self.futures.append(future)
        return future


def test_large_launches_wait_for_the_compile(background_mode, monkeypatch):
    pool = _PendingPool()
    monkeypatch.setattr(background, "pool", lambda: pool)
    monkeypatch.setattr(executable, "INTERPRET_MAX_PROGRAMS", 2)
    x = torch.arange(64, dtype=torch.float32)
    out = torch.zeros(64)
    small = torch.arange(32, dtype=torch.float32)
    _launch(small, out[:32])  # 2 programs: interpreted while the compile is pending
    assert _report()["interpret_launches"] == 1 and torch.equal(out[:32], small * 3 + 1)
    pool.futures[0].set_result(0.5)  # the "worker" is done (this process compiles on the next launch)
    exe = _launch(x, out).executable("numba")  # 4 programs
    assert exe._compiled and torch.equal(out, x * 3 + 1)
    assert _report()["interpret_launches"] == 1 and _report()["worker_compiles"] == 1
    assert "tiered_kernel: 1 launch(es) on the interpreter tier, 1 specialisation(s) compiled by workers " \
           "in 0.5 s" in fallback.format_compile_tiers(fallback.compile_tier_report())


def test_sync_mode_never_uses_the_interpreter_tier(background_mode, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_COMPILE", "sync")
    monkeypatch.setattr(background, "pool", lambda: pytest.fail("sync mode started a compile worker"))
    x = torch.arange(20, dtype=torch.float32)
    out = torch.zeros(20)
    exe = _launch(x, out).executable("numba")
    assert exe._compiled and torch.equal(out, x * 3 + 1)
    assert executable.tier_report() == {}


def test_the_autotuner_times_compiled_kernels_not_the_interpreter(background_mode, monkeypatch):
    from torch_rbln.autotune import Config, autotune

    pool = _PendingPool()
    monkeypatch.setattr(background, "pool", lambda: pool)
    tuned = autotune(configs=[Config({"BLOCK": 16}), Config({"BLOCK": 32})], key=["n"], warmup=0.5,
                     rep=2.0)(tiered_kernel)
    x = torch.arange(40, dtype=torch.float32)
    out = torch.zeros(40)
    tiered_kernel[(3,)](x, out, 40, BLOCK=16)  # this config's compile is pending: interpreted
    assert len(pool.futures) == 1 and _report()["interpret_launches"] == 1
    out.zero_()
    tuned[lambda meta: (triton.cdiv(40, meta["BLOCK"]),)](x, out, 40)
    assert torch.equal(out, x * 3 + 1)
    # each config was compiled before it was timed, the pending one too: no timed launch interpreted
    assert len(pool.futures) == 1 and _report()["interpret_launches"] == 1
