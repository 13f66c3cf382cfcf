"""DSL kernels (numba backend) against PyTorch CPU at equal thread counts, in one process.

    python benchmarks/run.py [--quick] [--json results.json] [--png results.png]

tp=1 is compared with torch on 1 thread, tp=2 with torch on 2 threads. Each figure is the median of
repeated runs (wall time). The table gives both times, the ratio (ours / torch: below 1 is faster),
the throughput (GB/s or GFLOP/s) and the share of the machine's measured copy bandwidth. It also
measures the launch overhead of a tiny cached kernel and how much faster a second process loads a
compiled kernel from the disk cache than a first one compiles it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsl_kernels as K  # noqa: E402

from torch_rbln import dsl as triton  # noqa: E402


@dataclass
class Row:
    op: str
    shape: str
    dtype: str
    tp: int
    ours_ms: float
    torch_ms: float
    ratio: float
    throughput: float
    unit: str
    bandwidth_share: float | None


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def copy_bandwidth(repeats: int) -> float:
    """GB/s of a large memcpy (read + write) with torch on all threads: the machine's ceiling."""
    source = torch.empty(1 << 25)
    target = torch.empty_like(source)
    ms = median_ms(lambda: target.copy_(source), repeats)
    return 2 * source.nbytes / ms / 1e6


def bench(repeats: int, quick: bool) -> tuple[list[Row], dict]:
    rows: list[Row] = []
    bandwidth = copy_bandwidth(repeats)
    n = 1 << (22 if quick else 24)
    rows_n = 1024 if quick else 4096
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    a = torch.randn(rows_n, 4096)
    softmax_out = torch.empty_like(a)
    weight, bias = torch.randn(4096), torch.randn(4096)
    m = 512 if quick else 1024
    left, right, product = torch.randn(m, m), torch.randn(m, m), torch.empty(m, m)
    for tp in (1, 2):
        torch.set_num_threads(tp)

        def add(tp=tp):
            K.vector_add[(triton.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096, tp=tp)

        def softmax(tp=tp):
            K.row_softmax[(rows_n,)](softmax_out, a, 4096, 4096, 4096, BLOCK=4096, tp=tp)

        def layer_norm(tp=tp):
            K.layer_norm[(rows_n,)](a, weight, bias, softmax_out, 4096, 4096, 1e-5, BLOCK=4096, tp=tp)

        def matmul(tp=tp):
            K.matmul[(m // 128, m // 128)](
                left, right, product, m, m, m, m, 1, m, 1, m, 1, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, tp=tp
            )

        cases = [
            (
                "vector add",
                f"2^{n.bit_length() - 1}",
                add,
                lambda: torch.add(x, y, out=out),
                3 * x.nbytes,
                "GB/s",
            ),
            ("row softmax", f"{rows_n}x4096", softmax, lambda: torch.softmax(a, -1), 2 * a.nbytes, "GB/s"),
            (
                "layer norm",
                f"{rows_n}x4096",
                layer_norm,
                lambda: torch.nn.functional.layer_norm(a, (4096,), weight, bias),
                2 * a.nbytes,
                "GB/s",
            ),
            (
                "matmul tl.dot",
                f"{m}^3",
                matmul,
                lambda: torch.mm(left, right, out=product),
                2 * m**3,
                "GFLOP/s",
            ),
        ]
        for name, shape, ours_fn, torch_fn, work, unit in cases:
            ours = median_ms(ours_fn, repeats)
            theirs = median_ms(torch_fn, repeats)
            throughput = work / ours / 1e6
            share = throughput / bandwidth if unit == "GB/s" else None
            rows.append(Row(name, shape, "float32", tp, ours, theirs, ours / theirs, throughput, unit, share))
    torch.set_num_threads(1)
    extras = {"copy_bandwidth_gbs": bandwidth, "launch_overhead_us": launch_overhead(repeats)}
    extras.update(disk_cache_speedup())
    return rows, extras


def launch_overhead(repeats: int) -> float:
    """Median microseconds of a cached launch of a 4-element kernel (compile excluded)."""
    x = torch.ones(4)
    K.scale[(1,)](x, 4, 1.0, BLOCK=4)
    per_launch = []
    for _ in range(max(repeats, 5)):
        start = time.perf_counter()
        for _ in range(2000):
            K.scale[(1,)](x, 4, 1.0, BLOCK=4)
        per_launch.append((time.perf_counter() - start) / 2000 * 1e6)
    return statistics.median(per_launch)


_CHILD = """
import sys, time
sys.path.insert(0, {here!r})
start = time.perf_counter()
import torch, dsl_kernels as K
x = torch.ones(4)
K.scale.warmup(x, 4, 1.0, BLOCK=4, grid=(1,))  # numba's own once-per-process start-up, not measured
ready = time.perf_counter()
K.layer_norm.warmup(x, x, x, x, 4, 4, 1e-5, BLOCK=4, grid=(1,))
print(time.perf_counter() - ready)
"""


def disk_cache_speedup() -> dict:
    """Seconds to get a compiled kernel in a fresh process (numba already started): compiling it vs
    loading it from the disk cache."""
    with tempfile.TemporaryDirectory() as cache:
        environment = dict(os.environ, TORCH_RBLN_CACHE_DIR=cache)
        code = _CHILD.format(here=os.path.dirname(os.path.abspath(__file__)))
        timings = []
        for _ in range(2):
            done = subprocess.run(
                [sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True
            )
            timings.append(float(done.stdout.strip().splitlines()[-1]))
    return {"compile_s": timings[0], "disk_load_s": timings[1], "disk_cache_speedup": timings[0] / timings[1]}


def print_table(rows: list[Row], extras: dict) -> None:
    header = (
        f"{'op':<14}{'shape':<11}{'dtype':<9}{'tp':>3}{'ours ms':>10}{'torch ms':>10}{'ratio':>7}"
        f"{'throughput':>16}{'% copy bw':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        share = f"{100 * r.bandwidth_share:.0f}%" if r.bandwidth_share is not None else "-"
        print(
            f"{r.op:<14}{r.shape:<11}{r.dtype:<9}{r.tp:>3}{r.ours_ms:>10.2f}{r.torch_ms:>10.2f}"
            f"{r.ratio:>7.2f}{r.throughput:>10.1f} {r.unit:<5}{share:>10}"
        )
    print()
    print(f"machine copy bandwidth:             {extras['copy_bandwidth_gbs']:.1f} GB/s")
    print(f"launch overhead, cached tiny kernel: {extras['launch_overhead_us']:.1f} us (median)")
    print(
        f"kernel ready in a fresh process:     compile {extras['compile_s'] * 1e3:.0f} ms, "
        f"from disk cache {extras['disk_load_s'] * 1e3:.0f} ms ({extras['disk_cache_speedup']:.1f}x faster)"
    )
    for op in ("vector add", "row softmax"):
        tp1 = next(r for r in rows if r.op == op and r.tp == 1)
        tp2 = next(r for r in rows if r.op == op and r.tp == 2)
        print(f"TP scaling {op}: tp=2 is {tp1.ours_ms / tp2.ours_ms:.2f}x faster than tp=1")


def plot(rows: list[Row], path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(no PNG: matplotlib is not installed; pip install -e '.[bench]' to get {path})")
        return False
    labels = [f"{r.op}\n{r.shape} tp={r.tp}" for r in rows]
    figure, axis = plt.subplots(figsize=(10, 4))
    axis.bar(
        range(len(rows)),
        [r.ratio for r in rows],
        color=["tab:blue" if r.tp == 1 else "tab:orange" for r in rows],
    )
    axis.axhline(1.0, color="black", linewidth=0.8)
    axis.set_xticks(range(len(rows)), labels, fontsize=7)
    axis.set_ylabel("time ratio ours / torch (lower is better)")
    axis.set_title("torch_rbln DSL (numba backend) vs PyTorch CPU, equal threads")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller shapes, fewer repeats")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", default="benchmark_results.json")
    parser.add_argument("--png", default="benchmark_results.png")
    args = parser.parse_args()
    repeats = args.repeats or (3 if args.quick else 7)
    rows, extras = bench(repeats, args.quick)
    print_table(rows, extras)
    with open(args.json, "w") as handle:
        json.dump({"rows": [asdict(r) for r in rows], **extras}, handle, indent=2)
    plot(rows, args.png)


if __name__ == "__main__":
    main()
