"""Microseconds per op on 4-element tensors: CPU torch vs the rbln device (CPU fallback path).

Run: python benchmarks/dispatch_overhead.py [--repeats 7] [--number 5000] [--json out.json]
Medians of repeated timings of this thread's CPU time (time.thread_time: time other processes
take from a shared machine is not counted), one torch thread, in one process; the ratio column is
what matters on a noisy machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

import torch_rbln  # noqa: F401


def _median_us(fn: Callable[[], object], repeats: int, number: int) -> float:
    for _ in range(min(number, 500)):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(number):
            fn()
        samples.append((time.thread_time() - start) / number * 1e6)
    return statistics.median(samples)


def measure(repeats: int, number: int) -> list[dict[str, float | str]]:
    torch.set_num_threads(1)
    a, b = torch.randn(4), torch.randn(4)
    m = torch.randn(2, 2)
    da, db, dm = a.to("rbln:0"), b.to("rbln:0"), m.to("rbln:0")
    cases: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        ("add", lambda: a + b, lambda: da + db),
        ("mm", lambda: m @ m, lambda: dm @ dm),
        ("cumsum", lambda: a.cumsum(0), lambda: da.cumsum(0)),
        ('.to("rbln") vs .clone()', lambda: a.clone(), lambda: a.to("rbln:0")),
        (".cpu() vs .clone()", lambda: a.clone(), lambda: da.cpu()),
    ]
    rows = []
    for name, cpu_fn, device_fn in cases:
        cpu_us = _median_us(cpu_fn, repeats, number)
        device_us = _median_us(device_fn, repeats, number)
        rows.append({"op": name, "cpu_us": cpu_us, "rbln_us": device_us, "ratio": device_us / cpu_us})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--number", type=int, default=5000)
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args()
    rows = measure(args.repeats, args.number)
    print(f"{'op':<26}{'cpu us':>10}{'rbln us':>10}{'ratio':>8}")
    for row in rows:
        print(f"{row['op']:<26}{row['cpu_us']:>10.2f}{row['rbln_us']:>10.2f}{row['ratio']:>8.1f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)


if __name__ == "__main__":
    main()
