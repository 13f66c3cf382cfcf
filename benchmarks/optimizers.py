"""An optimizer step on rbln vs the same step on the CPU, in one process, one thread.

Run: python benchmarks/optimizers.py [--repeats 30] [--layers 8] [--width 256] [--json F]

The model is `--layers` linears of `--width` x `--width` (weights and biases, given random gradients);
each optimizer (Adam, AdamW, AdamW with amsgrad, SGD with Nesterov momentum, RMSprop, Adagrad) steps its
parameters, per tensor (`foreach=False`) and `foreach` (torch's default for the rbln device), after
`clip_grad_norm_`. rbln and CPU steps alternate and each row is the median step time of both sides and
the median of the per-pair ratios (the host is shared: a busy phase lands on both sides of a pair). Each
case first runs once with the fallback report reset: a row that ran anything on the CPU fallback is
marked, since it would not be timing device kernels. Then `addcmul_`, `addcdiv_` and `lerp_` alone at a
million elements (the optimizers' update ops; in place, the same-memory variant's case).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

OPTIMIZERS: dict[str, Callable] = {
    "Adam": lambda p, f: torch.optim.Adam(p, lr=1e-3, foreach=f),
    "AdamW": lambda p, f: torch.optim.AdamW(p, lr=1e-3, foreach=f),
    "AdamW amsgrad": lambda p, f: torch.optim.AdamW(p, lr=1e-3, amsgrad=True, foreach=f),
    "SGD nesterov": lambda p, f: torch.optim.SGD(p, lr=1e-3, momentum=0.9, nesterov=True, foreach=f),
    "RMSprop": lambda p, f: torch.optim.RMSprop(p, lr=1e-3, foreach=f),
    "Adagrad": lambda p, f: torch.optim.Adagrad(p, lr=1e-3, foreach=f),
}


def paired(cpu: Callable[[], object], rbln: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    """(CPU ms, rbln ms, rbln/CPU ratio): medians over `repeats` alternating pairs."""
    cpu_times, rbln_times, ratios = [], [], []
    for _ in range(repeats):
        began = time.perf_counter()
        rbln()
        device = time.perf_counter() - began
        began = time.perf_counter()
        cpu()
        host = time.perf_counter() - began
        rbln_times.append(device)
        cpu_times.append(host)
        ratios.append(device / host)
    return statistics.median(cpu_times) * 1e3, statistics.median(rbln_times) * 1e3, statistics.median(ratios)


def _models(layers: int, width: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    device = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    device.load_state_dict(cpu.state_dict())
    device = device.to("rbln")
    for host, dev in zip(cpu.parameters(), device.parameters(), strict=True):
        host.grad = torch.randn_like(host)
        dev.grad = host.grad.to("rbln")
    return cpu, device


def _stepper(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Callable[[], None]:
    def step() -> None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e3)
        optimizer.step()

    return step


def steps(repeats: int, layers: int, width: int) -> list[dict]:
    rows = []
    for name, make in OPTIMIZERS.items():
        for foreach in (False, True):
            cpu, device = _models(layers, width)
            host_step = _stepper(cpu, make(cpu.parameters(), foreach))
            device_step = _stepper(device, make(device.parameters(), foreach))
            registry.reset_fallback_report()
            device_step()
            host_step()
            fallbacks = sum(row["cpu"] for row in registry.fallback_report().values())
            host, dev, ratio = paired(host_step, device_step, repeats)
            rows.append({"optimizer": name, "foreach": foreach, "cpu_ms": host, "rbln_ms": dev,
                         "speed_vs_cpu": 1 / ratio, "cpu_fallback_calls": fallbacks})
    return rows


def update_ops(repeats: int, n: int = 1 << 20) -> list[dict]:
    generator = torch.Generator().manual_seed(1)
    a, b, c = (torch.rand(n, generator=generator) + 0.5 for _ in range(3))
    device = [t.to("rbln") for t in (a, b, c)]
    cases = {"addcmul_": lambda x, y, z: x.addcmul_(y, z, value=1e-3),
             "addcdiv_": lambda x, y, z: x.addcdiv_(y, z, value=1e-3),
             "lerp_": lambda x, y, z: x.lerp_(y, 0.1)}
    rows = []
    for name, op in cases.items():
        op(*device)
        host, dev, ratio = paired(lambda op=op: op(a, b, c), lambda op=op: op(*device), repeats)
        rows.append({"op": f"{name} ({n} elements)", "cpu_ms": host, "rbln_ms": dev,
                     "speed_vs_cpu": 1 / ratio})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    step_rows = steps(args.repeats, args.layers, args.width)
    print(f"optimizer step, {args.layers} linears {args.width}x{args.width}, 1 thread (median ms)")
    print(f"{'optimizer':>16} {'foreach':>8} {'CPU':>8} {'rbln':>8} {'vs CPU':>8}  CPU fallback calls")
    for row in step_rows:
        print(f"{row['optimizer']:>16} {row['foreach']!s:>8} {row['cpu_ms']:8.2f} {row['rbln_ms']:8.2f} "
              f"{row['speed_vs_cpu']:7.2f}x  {row['cpu_fallback_calls']}")
    op_rows = update_ops(args.repeats)
    print("\nupdate ops in place (median ms)")
    for row in op_rows:
        print(f"{row['op']:>28} CPU {row['cpu_ms']:7.3f} rbln {row['rbln_ms']:7.3f} "
              f"{row['speed_vs_cpu']:6.2f}x")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"steps": step_rows, "ops": op_rows}, handle, indent=1)


if __name__ == "__main__":
    main()
