"""Scaled dot-product attention on rbln (the flash kernels) vs torch CPU SDPA at equal threads, one process.

Run: python benchmarks/attention.py [--threads 1] [--repeats 5] [--lengths 512 1024] [--quick] [--small]

For each (B, H, L, D) shape, float32, causal and not: the forward alone and forward + backward
(`out.backward(grad)` with q, k, v requiring grad), timed as the median wall time of `--repeats` runs
(CPU and rbln alternating) after one warm-up call (kernel compilation and autotuning of the tile
sizes happen there; reported separately). ratio = rbln time / CPU time (below 1: rbln is faster).
torch runs on `--threads` threads; rbln kernels on one simulated NPU (one thread), or on `--threads`
NPUs of one logical device (`TORCH_RBLN_USE_DEVICE_TP=ON`, `RBLN_NPUS_PER_DEVICE`) when `--threads`
> 1. Every rbln measurement is checked to have run on the device kernels (no CPU fallback).

`--small`: instead, per-call latency of inference calls (no autograd) on tiny pre-built (B, H, L, D)
operands (`--small-shapes`), where dispatch, checks and the launch dominate: the median us per call
of each of `--rounds` rounds of `--calls` calls, rbln and CPU alternating by round; the table shows
the median over rounds and the quietest round (the shared VM has slow phases).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024])
    parser.add_argument("--quick", action="store_true", help="one length (256), 3 repeats")
    parser.add_argument("--small", action="store_true", help="per-call latency of tiny inference calls")
    parser.add_argument("--small-shapes", nargs="+", default=["1,1,2,2", "1,2,8,8", "2,4,16,16"],
                        help="B,H,L,D shapes of --small")
    parser.add_argument("--calls", type=int, default=2000, help="calls per round of --small")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of --small")
    return parser.parse_args(argv)


def _per_call_us(fn: Callable[[], object], calls: int) -> float:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def small(args: argparse.Namespace) -> int:
    """Per-call latency of tiny inference SDPA calls, rbln vs CPU (see the module docstring)."""
    import torch
    import torch.nn.functional as F
    from torch_rbln.registry.attention import FORWARD

    import torch_rbln  # noqa: F401
    from torch_rbln import registry

    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}: inference SDPA, float32, us per call: median of {args.rounds} rounds "
          f"(quietest round) of {args.calls} calls")
    header = f"{'B,H,L,D':<12} {'causal':<6} {'cpu us':>14} {'rbln us':>14} {'ratio':>6}"
    print(header)
    print("-" * len(header))
    for text in args.small_shapes:
        shape = tuple(int(x) for x in text.split(","))
        generator = torch.Generator().manual_seed(0)
        cpu = [torch.randn(*shape, generator=generator) for _ in range(3)]
        dev = [t.to("rbln") for t in cpu]
        for causal in (False, True):
            with torch.no_grad():
                registry.reset_fallback_report()
                before = registry.device_counts().get(FORWARD, 0)
                for _ in range(3):  # accepted, tuned, the kept launch taken
                    F.scaled_dot_product_attention(*dev, is_causal=causal)
                if any(row["cpu"] for row in registry.fallback_report().values()) or \
                        registry.device_counts().get(FORWARD, 0) != before + 3:
                    print(f"  note: not all on device kernels:\n{registry.format_report()}")
                rounds: tuple[list[float], list[float]] = ([], [])
                for _ in range(args.rounds):
                    for inputs, times in zip((cpu, dev), rounds, strict=True):
                        times.append(_per_call_us(
                            lambda i=inputs, c=causal: F.scaled_dot_product_attention(*i, is_causal=c),
                            args.calls))
            c, d = (statistics.median(times) for times in rounds)
            quiet_c, quiet_d = min(rounds[0]), min(rounds[1])
            print(f"{text:<12} {str(causal):<6} {c:7.1f} ({quiet_c:5.1f}) {d:7.1f} ({quiet_d:5.1f}) "
                  f"{d / c:5.2f}x")
    return 0


def _medians_s(first: Callable[[], object], second: Callable[[], object],
               repeats: int) -> tuple[float, float]:
    """Median wall times of `first` and `second`, run alternately (a shared machine's load drifts)."""
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for fn, times in zip((first, second), samples, strict=True):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(samples[0]), statistics.median(samples[1])


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.small:
        return small(args)
    if args.quick:
        args.lengths, args.repeats = [256], 3
    if args.threads > 1:  # before torch_rbln is imported (it is loaded by `import torch`)
        os.environ.setdefault("TORCH_RBLN_USE_DEVICE_TP", "ON")
        os.environ.setdefault("RBLN_NPUS_PER_DEVICE", str(args.threads))
    import torch
    import torch.nn.functional as F
    from torch_rbln.registry.attention import BACKWARD, FORWARD

    import torch_rbln  # noqa: F401
    from torch_rbln import registry

    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}: {args.threads} thread(s) for torch, rbln kernels on {args.threads} "
          f"simulated NPU(s); float32, medians of {args.repeats} runs")
    header = (f"{'B,H,L,D':<16} {'causal':<6} {'pass':<9} {'cpu ms':>9} {'rbln ms':>9} {'ratio':>7} "
              f"{'cpu GF/s':>9} {'rbln GF/s':>9} {'warm-up s':>9}")
    print(header)
    print("-" * len(header))
    B, H, D = args.batch, args.heads, args.head_dim
    for L in args.lengths:
        generator = torch.Generator().manual_seed(L)
        q, k, v, grad = (torch.randn(B, H, L, D, generator=generator) for _ in range(4))
        for causal in (False, True):
            flops = 4 * B * H * L * L * D * (0.5 if causal else 1.0)
            for backward in (False, True):
                cpu_inputs = [t.clone().requires_grad_(backward) for t in (q, k, v)]
                dev_inputs = [t.to("rbln").requires_grad_(backward) for t in (q, k, v)]
                dev_grad = grad.to("rbln")

                def step(inputs, g, backward=backward, causal=causal):
                    out = F.scaled_dot_product_attention(*inputs, is_causal=causal)
                    if backward:
                        for t in inputs:
                            t.grad = None
                        out.backward(g)
                    return out

                registry.reset_fallback_report()
                start = time.perf_counter()
                step(dev_inputs, dev_grad)
                warm_up = time.perf_counter() - start
                report = registry.fallback_report()
                counts = registry.device_counts()
                if any(row["cpu"] for row in report.values()) or not counts.get(FORWARD) or (
                        backward and not counts.get(BACKWARD)):
                    print(f"  note: not all on device kernels:\n{registry.format_report(report)}")
                step(cpu_inputs, grad)
                cpu, dev = _medians_s(lambda c=cpu_inputs, g=grad: step(c, g),
                                      lambda d=dev_inputs, g=dev_grad: step(d, g), args.repeats)
                work = flops * (3.5 if backward else 1.0)  # backward: 5 matmuls to the forward's 2
                print(f"{f'{B},{H},{L},{D}':<16} {str(causal):<6} {'fwd+bwd' if backward else 'fwd':<9} "
                      f"{cpu * 1e3:9.2f} {dev * 1e3:9.2f} {dev / cpu:6.2f}x {work / cpu / 1e9:9.2f} "
                      f"{work / dev / 1e9:9.2f} {warm_up:9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
