"""Op-library kernels on rbln vs torch on the CPU, in one process, with equal thread counts.

Run: python benchmarks/ops.py [--threads 2] [--repeats 5] [--quick]
Tables: (1) microseconds per registered op on 4-element tensors (dispatch + checks + launch);
(2) large shapes: 2^24-element add/mul/gelu, 4096x4096 softmax, layer norm and RMS norm (ms and
GB/s), mm/linear 1024^3 (GFLOP/s); (3) end-to-end forward of the demo model. Medians of wall-clock
timings after a warm-up call (compilation and autotuning happen there); ratio = rbln time / CPU time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _median_s(fn: Callable[[], object], repeats: int, number: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


def _row(name: str, cpu: float, dev: float, unit: str, work: float | None = None) -> str:
    extra = ""
    if work is not None:
        extra = f"  {work / cpu / 1e9:9.2f} {work / dev / 1e9:9.2f}"
    scale = 1e6 if unit == "us" else 1e3
    return f"{name:<38} {cpu * scale:10.2f} {dev * scale:10.2f} {dev / cpu:7.2f}x{extra}"


def _header(title: str, unit: str, work_unit: str | None = None) -> str:
    extra = f"  {'cpu ' + work_unit:>9} {'rbln ' + work_unit:>9}" if work_unit else ""
    return f"\n{title}\n{'op':<38} {'cpu ' + unit:>10} {'rbln ' + unit:>10} {'ratio':>8}{extra}"


def _check_on_device(name: str, fn: Callable[[], object]) -> None:
    registry.reset_fallback_report()
    fn()
    cpu = sum(row["cpu"] for row in registry.fallback_report().values())
    if cpu:
        print(f"  note: {name} ran {cpu} op(s) on the CPU fallback: {registry.fallback_report()}")


def small(repeats: int, number: int) -> None:
    a, b = torch.randn(4), torch.randn(4)
    da, db = a.to("rbln"), b.to("rbln")
    cases = [
        ("add", lambda x, y: x + y),
        ("mul", lambda x, y: x * y),
        ("gelu", lambda x, y: F.gelu(x)),
        ("exp", lambda x, y: torch.exp(x)),
        ("softmax", lambda x, y: torch.softmax(x, -1)),
        ("sum", lambda x, y: x.sum(-1)),
    ]
    print(_header("registered op on 4-element tensors (target <= 15 us)", "us"))
    for name, fn in cases:
        _check_on_device(name, lambda fn=fn: fn(da, db))
        cpu = _median_s(lambda fn=fn: fn(a, b), repeats, number)
        dev = _median_s(lambda fn=fn: fn(da, db), repeats, number)
        print(_row(name, cpu, dev, "us"))


def large(repeats: int) -> None:
    n = 1 << 24
    x, y = torch.randn(n), torch.randn(n)
    dx, dy = x.to("rbln"), y.to("rbln")
    print(_header("large shapes (bandwidth: bytes read + written)", "ms", "GB/s"))
    for name, fn, nbytes in [
        ("add 2^24", lambda p, q: p + q, 12 * n),
        ("mul 2^24", lambda p, q: p * q, 12 * n),
        ("gelu 2^24", lambda p, q: F.gelu(p), 8 * n),
    ]:
        _check_on_device(name, lambda fn=fn: fn(dx, dy))
        cpu = _median_s(lambda fn=fn: fn(x, y), repeats, 1)
        dev = _median_s(lambda fn=fn: fn(dx, dy), repeats, 1)
        print(_row(name, cpu, dev, "ms", nbytes))
    m = torch.randn(4096, 4096)
    w, bias = torch.randn(4096), torch.randn(4096)
    dm, dw, dbias = m.to("rbln"), w.to("rbln"), bias.to("rbln")
    for name, fn in [
        ("softmax 4096x4096", lambda t, w, b: torch.softmax(t, -1)),
        ("layer_norm 4096x4096", lambda t, w, b: F.layer_norm(t, (4096,), w, b)),
        ("rms_norm 4096x4096 (aten decomposed)", lambda t, w, b: F.rms_norm(t, (4096,), w, 1e-6)),
        ("rbln::rms_norm 4096x4096 (custom op)", lambda t, w, b: torch.ops.rbln.rms_norm(t, w, 1e-6)),
    ]:
        _check_on_device(name, lambda fn=fn: fn(dm, dw, dbias))
        cpu = _median_s(lambda fn=fn: fn(m, w, bias), repeats, 1)
        dev = _median_s(lambda fn=fn: fn(dm, dw, dbias), repeats, 1)
        print(_row(name, cpu, dev, "ms", 8 * m.numel()))
    print(_header("matmul 1024^3", "ms", "GFLOP/s"))
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    bias = torch.randn(1024)
    da, db, dbias = a.to("rbln"), b.to("rbln"), bias.to("rbln")
    for name, fn in [
        ("mm 1024^3", lambda p, q, r: p @ q),
        ("linear 1024^3 (+bias)", lambda p, q, r: F.linear(p, q, r)),
    ]:
        _check_on_device(name, lambda fn=fn: fn(da, db, dbias))
        cpu = _median_s(lambda fn=fn: fn(a, b, bias), repeats, 1)
        dev = _median_s(lambda fn=fn: fn(da, db, dbias), repeats, 1)
        print(_row(name, cpu, dev, "ms", 2 * 1024**3))


def end_to_end(repeats: int) -> None:
    from torch_rbln import demo

    make, description = demo._build(128, 64, 2, 4, 64)
    torch.manual_seed(0)
    cpu_model = make().eval()
    dev_model = make().eval()
    dev_model.load_state_dict(cpu_model.state_dict())
    dev_model.to("rbln")
    ids = torch.randint(0, 128, (2, 16))
    dids = ids.to("rbln")
    print(_header(f"end-to-end forward: {description}, ids {tuple(ids.shape)}", "ms"))
    with torch.no_grad():
        registry.reset_fallback_report()
        dev_model(dids)
        report = registry.fallback_report()
        cpu = _median_s(lambda: cpu_model(ids), repeats, 3)
        dev = _median_s(lambda: dev_model(dids), repeats, 3)
    print(_row("forward", cpu, dev, "ms"))
    device = sum(r["device"] for r in report.values())
    total = sum(r["device"] + r["cpu"] for r in report.values())
    print(f"  {device} of {total} op calls on device kernels")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="skip the large shapes")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    print(f"torch {torch.__version__}, {args.threads} thread(s) for torch (and numba)")
    small(args.repeats, args.number)
    if not args.quick:
        large(args.repeats)
    end_to_end(args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
