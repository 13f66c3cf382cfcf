"""torch.compile(backend="rbln") vs eager rbln, CPU eager and TorchInductor on the CPU, in one process.

Run: python benchmarks/compile.py [--repeats 7] [--threads 1,2] [--no-inductor] [--json FILE]

(1) Forward of the GPT-2 demo model (torch_rbln.demo: random config, 2 layers, width 64, batch 2 x 16
    tokens): eager on rbln:0 (registry kernels op by op), compiled with backend="rbln" (fused DSL kernels
    plus registry matmuls), eager on the CPU and compiled with inductor on the CPU. Target: compiled rbln
    at least 1.5x faster than eager rbln.
(2) A pointwise chain of 4 ops (mul, add, sigmoid, mul) on 2^24 float32 elements at equal threads:
    torch eager on the CPU with torch.set_num_threads(n) vs the compiled graph on rbln with
    options={"tensor_parallel_size": n} (the fused kernel's grid split over n simulated NPUs, one thread
    each). Target: >= 2x faster than torch eager.

All figures are medians of wall-clock timings after warm-up calls (compilation happens there), measured
in this process against PyTorch (the host is shared, so ratios are what to read). Every rbln case is
checked against the CPU result first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import torch

import torch_rbln  # noqa: F401
import torch_rbln.compiler as rbln_compiler
from torch_rbln import demo


def median_ms(fn: Callable[[], object], repeats: int, number: int = 1) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples) * 1e3


def demo_forward(repeats: int, inductor: bool) -> dict:
    """At one thread: torch on the CPU, and the single simulated NPU of rbln:0 (tp=1)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _demo_forward(repeats, inductor)
    finally:
        torch.set_num_threads(previous)


def _demo_forward(repeats: int, inductor: bool) -> dict:
    make, description = demo._build(128, 64, 2, 4, 64)
    torch.manual_seed(0)
    cpu = make().eval()
    device = make().eval()
    device.load_state_dict(cpu.state_dict())
    device.to("rbln")
    device.tie_weights()
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    ids_rbln = ids.to("rbln")
    compiled = torch.compile(device, backend="rbln")
    results: dict = {"model": description}
    with torch.no_grad():
        reference = cpu(ids).logits
        error = (compiled(ids_rbln).logits.cpu() - reference).abs().max().item()
        if error > 1e-4:
            raise SystemExit(f"compiled rbln forward differs from the CPU by {error}")
        results["max_abs_error_vs_cpu"] = error
        results["eager_rbln_ms"] = median_ms(lambda: device(ids_rbln), repeats, 3)
        results["compiled_rbln_ms"] = median_ms(lambda: compiled(ids_rbln), repeats, 3)
        results["eager_cpu_ms"] = median_ms(lambda: cpu(ids), repeats, 3)
        if inductor:
            cpu_compiled = torch.compile(cpu)
            cpu_compiled(ids)
            results["inductor_cpu_ms"] = median_ms(lambda: cpu_compiled(ids), repeats, 3)
    results["fused_launches_per_forward"] = _fused_launches_per_call(lambda: compiled(ids_rbln))
    return results


def _fused_launches_per_call(fn: Callable[[], object]) -> int:
    rbln_compiler.reset_stats()
    with torch.no_grad():
        fn()
    return rbln_compiler.stats()["fused_launches"]


def chain(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x * 1.5 + 0.5) * x


def pointwise_chain(threads: list[int], repeats: int) -> list[dict]:
    x = torch.randn(2**24, generator=torch.Generator().manual_seed(0))
    x_rbln = x.to("rbln")
    rows = []
    previous = torch.get_num_threads()
    for n in threads:
        torch.set_num_threads(n)
        torch._dynamo.reset()
        compiled = torch.compile(chain, backend="rbln", options={"tensor_parallel_size": n})
        error = (compiled(x_rbln).cpu() - chain(x)).abs().max().item()
        if error > 1e-5:
            raise SystemExit(f"fused chain differs from torch by {error}")
        rbln_compiler.reset_stats()
        compiled(x_rbln)
        stats = rbln_compiler.stats()
        if stats["fused_launches"] != 1 or stats.get(f"fused_launches_tp{n}") != 1:
            raise SystemExit(f"expected one fused launch with tp={n}, got {stats}")
        torch_ms = median_ms(lambda: chain(x), repeats)
        rbln_ms = median_ms(lambda fn=compiled: fn(x_rbln), repeats)
        rows.append({"threads": n, "torch_cpu_ms": torch_ms, "compiled_rbln_ms": rbln_ms,
                     "speedup": torch_ms / rbln_ms})
    torch.set_num_threads(previous)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--no-inductor", action="store_true", help="skip torch.compile(inductor) on the CPU")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",") if t]

    forward = demo_forward(args.repeats, not args.no_inductor)
    print(f"(1) demo forward: {forward['model']}, batch 2 x 16 tokens, 1 thread (median ms)")
    print(f"{'eager rbln':>14} {'compiled rbln':>14} {'eager CPU':>10} {'inductor CPU':>13} "
          f"{'compiled vs eager':>18} {'compiled vs inductor':>21}")
    inductor_ms = forward.get("inductor_cpu_ms")
    print(f"{forward['eager_rbln_ms']:14.2f} {forward['compiled_rbln_ms']:14.2f} "
          f"{forward['eager_cpu_ms']:10.2f} "
          f"{inductor_ms if inductor_ms is not None else float('nan'):13.2f} "
          f"{forward['eager_rbln_ms'] / forward['compiled_rbln_ms']:17.2f}x "
          f"{(inductor_ms or float('nan')) / forward['compiled_rbln_ms']:20.2f}x")
    print(f"    fused kernel launches per compiled forward: {forward['fused_launches_per_forward']}; "
          f"max |compiled - CPU| = {forward['max_abs_error_vs_cpu']:.1e}")

    chain_rows = pointwise_chain(threads, args.repeats)
    print("\n(2) 4-op pointwise chain sigmoid(x * 1.5 + 0.5) * x on 2^24 float32 (median ms)")
    print(f"{'threads/tp':>10} {'torch CPU':>10} {'compiled rbln':>14} {'speedup':>8}")
    for row in chain_rows:
        print(f"{row['threads']:10d} {row['torch_cpu_ms']:10.1f} {row['compiled_rbln_ms']:14.1f} "
              f"{row['speedup']:7.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"demo_forward": forward, "pointwise_chain": chain_rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
