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
import sys, time, torch
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


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="POSIX signals")
def test_ctrl_c_interrupts_a_long_launch_quickly(tmp_path):
    script = tmp_path / "long_kernel.py"
    script.write_text(LONG_KERNEL)
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "started"
        time.sleep(1.0)
        sent = time.perf_counter()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
        waited = time.perf_counter() - sent
    finally:
        child.kill()
    assert "finished" not in out
    assert "KeyboardInterrupt" in err
    assert waited < 10, f"the launch took {waited:.1f} s to stop after Ctrl-C"
