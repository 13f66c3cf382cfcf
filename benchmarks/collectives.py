"""all_reduce / all_gather on rbln tensors (rbln-ccl) vs the same calls on CPU tensors (gloo).

Run: python benchmarks/collectives.py [--ranks 2] [--max-mib 16] [--repeats 5]   (--max-mib 256: full)

Both sides run in one `rbln-ccl` group, whose CPU tensors go to its gloo backend directly and whose rbln
tensors go through rbln-ccl's kernels (zero-copy host views) to the same backend; so the ratio is the
cost of rbln-ccl itself (goal: >= 0.9x CPU gloo's bandwidth, small-message time within 1.2x). Message
sizes from 1 KiB by powers of 4; each (op, size) is timed in `--repeats` rounds that alternate rbln
and CPU, a round being the mean of enough back-to-back calls to last ~50 ms; figures are medians over
rounds, the ratio is the median of per-round ratios (rbln bandwidth / CPU bandwidth). Bandwidth is
algorithmic: the message bytes (all_reduce: the tensor; all_gather: one rank's input) per second.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

KIB = 1024


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _calls_for(nbytes: int) -> int:
    return max(3, min(200, (64 * 1024 * 1024) // max(nbytes, 1) // 8))


def _time(fn, calls: int) -> float:
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def _case(op: str, nbytes: int, world: int, repeats: int, device: torch.device) -> tuple[float, float, float]:
    numel = nbytes // 4
    tensors = {}
    for where in ("cpu", "rbln"):
        target = torch.device("cpu") if where == "cpu" else device
        x = torch.ones(numel, device=target)
        out = torch.empty(numel * world, device=target)
        if op == "all_reduce":
            tensors[where] = lambda x=x: dist.all_reduce(x)
        else:
            tensors[where] = lambda x=x, out=out: dist.all_gather_into_tensor(out, x)
    calls = _calls_for(nbytes)
    for fn in tensors.values():
        fn()  # warm-up: connections, first-use costs
    cpu, rbln, ratios = [], [], []
    for _ in range(repeats):
        r = _time(tensors["rbln"], calls)
        c = _time(tensors["cpu"], calls)
        rbln.append(r)
        cpu.append(c)
        ratios.append(c / r)  # bandwidth ratio = inverse time ratio
    return statistics.median(cpu), statistics.median(rbln), statistics.median(ratios)


def _rank(rank: int, world: int, port: int, sizes: list[int], repeats: int) -> None:
    import warnings

    import torch_rbln  # noqa: F401

    warnings.filterwarnings("ignore", category=FutureWarning)
    dist.init_process_group("rbln-ccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    device = torch.device("rbln", rank % torch.rbln.device_count())
    rows = []
    for op in ("all_reduce", "all_gather"):
        for nbytes in sizes:
            cpu, rbln, ratio = _case(op, nbytes, world, repeats, device)
            rows.append((op, nbytes, cpu, rbln, ratio))
    if rank == 0:
        print(f"{world} ranks, gloo over localhost, {repeats} rounds; bandwidth in MB/s (algorithmic)")
        print(f"{'op':<11} {'size':>9} {'cpu us':>10} {'rbln us':>10} {'cpu MB/s':>10} {'rbln MB/s':>10} "
              f"{'rbln/cpu bw':>11}")
        for op, nbytes, cpu, rbln, ratio in rows:
            size = f"{nbytes // KIB} KiB" if nbytes < KIB * KIB else f"{nbytes // (KIB * KIB)} MiB"
            print(f"{op:<11} {size:>9} {cpu * 1e6:10.1f} {rbln * 1e6:10.1f} {nbytes / cpu / 1e6:10.1f} "
                  f"{nbytes / rbln / 1e6:10.1f} {ratio:10.2f}x")
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--max-mib", type=int, default=16, help="largest message (256 for the full sweep)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sizes, nbytes = [], KIB
    while nbytes <= args.max_mib * KIB * KIB:
        sizes.append(nbytes)
        nbytes *= 4
    os.environ.setdefault("TORCH_RBLN_SIM_NPUS", str(max(8, args.ranks)))
    mp.spawn(_rank, args=(args.ranks, _port(), sizes, args.repeats), nprocs=args.ranks, join=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
