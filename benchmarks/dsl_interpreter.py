"""Interpreter backend speed vs torch (same process, median of repeats).

    python benchmarks/dsl_interpreter.py [--repeats N]

Targets (issue 4): vector add (2^20 f32, BLOCK 1024) <= 130x torch; row softmax (1024x1024 f32, one row
per program) <= 700x torch.  The interpreter runs consecutive programs of straight-line 1-D elementwise
kernels (vector add) as one wide program; the extra row shows the same launch program by program.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsl_kernels import row_softmax, vector_add  # noqa: E402

from torch_rbln import dsl as triton  # noqa: E402


def median_time(fn, repeats: int, inner: int = 1) -> float:
    """Median over `repeats` of the mean time of `inner` back-to-back calls (after one warm-up call)."""
    fn()  # warm-up (compiles)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def torch_time(fn, inner: int) -> float:
    """Fastest of torch's default thread count and a single thread (the interpreter runs on one thread;
    on a loaded 2-core host, torch's thread pool can stall for milliseconds), so ratios are conservative."""
    nthreads = torch.get_num_threads()
    t_default = median_time(fn, 31, inner)
    torch.set_num_threads(1)
    try:
        t_single = median_time(fn, 31, inner)
    finally:
        torch.set_num_threads(nthreads)
    return min(t_default, t_single)


def main(argv=None) -> list[tuple[str, float, float, float, float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    rows = []

    n = 1 << 20
    x, y = torch.rand(n), torch.rand(n)
    out = torch.empty(n)
    t_dsl = median_time(
        lambda: vector_add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024, backend="interpret"),
        args.repeats,
    )
    assert torch.equal(out, x + y)
    t_torch = torch_time(lambda: torch.add(x, y, out=out), inner=10)
    rows.append(("vector add 2^20 f32, BLOCK 1024", t_dsl, t_torch, t_dsl / t_torch, 130.0))
    from torch_rbln.dsl.backends import interpret

    interpret.GROUP_PROGRAMS = False  # the same launch, one program at a time
    try:
        t_solo = median_time(
            lambda: vector_add[(1024,)](x, y, out, n, BLOCK=1024, backend="interpret"), args.repeats
        )
    finally:
        interpret.GROUP_PROGRAMS = True
    rows.append(("  same, program by program (grouping off)", t_solo, t_torch, t_solo / t_torch, 130.0))

    a = torch.randn(1024, 1024)
    o = torch.empty_like(a)
    t_dsl = median_time(
        lambda: row_softmax[(1024,)](o, a, 1024, 1024, 1024, BLOCK=1024, backend="interpret"), args.repeats
    )
    torch.testing.assert_close(o, torch.softmax(a, -1))
    t_torch = torch_time(lambda: torch.softmax(a, -1), inner=5)
    rows.append(("row softmax 1024x1024 f32", t_dsl, t_torch, t_dsl / t_torch, 700.0))

    w = max(len(r[0]) for r in rows)
    print(f"{'benchmark':<{w}}  {'dsl (ms)':>9}  {'torch (ms)':>10}  {'ratio':>7}  {'target':>7}")
    for name, td, tt, ratio, target in rows:
        print(f"{name:<{w}}  {td * 1e3:9.2f}  {tt * 1e3:10.3f}  {ratio:6.1f}x  {target:6.0f}x")
    return rows


if __name__ == "__main__":
    main()
