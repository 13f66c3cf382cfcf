"""all_reduce / all_gather / broadcast on rbln tensors (rbln-ccl) vs the same calls on CPU tensors (gloo).

Run: python benchmarks/collectives.py [--ranks 2] [--max-mib 16] [--repeats 5]   (--max-mib 256: full;
     --max-kib 64: the small messages whose per-call overhead the goal bounds; --ranks 1 --clock thread:
     that overhead alone, as the calling thread's CPU time, which a busy machine disturbs least)

rbln tensors go to the default `rbln-ccl` group; CPU tensors to a plain `gloo` group over the same ranks
(`new_group(backend="gloo")`), so the reference is gloo with none of rbln-ccl's code on its path. Goals:
>= 0.9x CPU gloo's bandwidth, and small-message time within 1.2x CPU gloo's (bandwidth ratio >= 0.83).
Message sizes from 1 KiB by powers of 4; each (op, size) is timed in `--repeats` rounds that alternate
rbln and CPU, a round being the mean of enough back-to-back calls to last ~50 ms; figures are medians
over rounds, the ratio is the median of per-round ratios (rbln bandwidth / CPU bandwidth), "extra us"
the median of per-round differences (rbln time - CPU time). Bandwidth is algorithmic: the message bytes
(all_reduce, broadcast: the tensor; all_gather: one rank's input) per second.
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
_CPU_GROUP = None  # the plain gloo group CPU tensors use (set in each rank)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _calls_for(nbytes: int) -> int:
    return max(3, min(200, (64 * 1024 * 1024) // max(nbytes, 1) // 8))


_clock = time.perf_counter


def _time(fn, calls: int) -> float:
    dist.barrier(group=_CPU_GROUP)
    start = _clock()
    for _ in range(calls):
        fn()
    return (_clock() - start) / calls


def _case(op: str, nbytes: int, world: int, repeats: int,
          device: torch.device) -> tuple[float, float, float, float]:
    numel = nbytes // 4
    tensors = {}
    for where in ("cpu", "rbln"):
        target = torch.device("cpu") if where == "cpu" else device
        group = _CPU_GROUP if where == "cpu" else None
        x = torch.ones(numel, device=target)
        out = torch.empty(numel * world, device=target)
        if op == "all_reduce":
            tensors[where] = lambda x=x, g=group: dist.all_reduce(x, group=g)
        elif op == "broadcast":
            tensors[where] = lambda x=x, g=group: dist.broadcast(x, 0, group=g)
        else:
            tensors[where] = lambda x=x, out=out, g=group: dist.all_gather_into_tensor(out, x, group=g)
    calls = _calls_for(nbytes)
    for fn in tensors.values():
        fn()  # warm-up: connections, first-use costs
    cpu, rbln, ratios, extra = [], [], [], []
    for _ in range(repeats):
        r = _time(tensors["rbln"], calls)
        c = _time(tensors["cpu"], calls)
        rbln.append(r)
        cpu.append(c)
        ratios.append(c / r)  # bandwidth ratio = inverse time ratio
        extra.append(r - c)
    median = statistics.median
    return median(cpu), median(rbln), median(ratios), median(extra)


def _rank(rank: int, world: int, port: int, sizes: list[int], repeats: int, clock: str) -> None:
    import warnings

    global _clock
    _clock = time.thread_time if clock == "thread" else time.perf_counter

    import torch_rbln  # noqa: F401

    warnings.filterwarnings("ignore", category=FutureWarning)
    global _CPU_GROUP
    torch.rbln.set_device(rank % torch.rbln.device_count())
    dist.init_process_group("rbln-ccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    _CPU_GROUP = dist.new_group(backend="gloo")
    device = torch.device("rbln", torch.rbln.current_device())
    rows = []
    for op in ("all_reduce", "all_gather", "broadcast"):
        for nbytes in sizes:
            rows.append((op, nbytes, *_case(op, nbytes, world, repeats, device)))
    if rank == 0:
        what = "calling thread's CPU time" if clock == "thread" else "wall time"
        print(f"{world} rank(s), gloo over localhost, {repeats} rounds, {what}; "
              "bandwidth in MB/s (algorithmic)")
        print(f"{'op':<11} {'size':>9} {'cpu us':>10} {'rbln us':>10} {'extra us':>9} {'cpu MB/s':>10} "
              f"{'rbln MB/s':>10} {'rbln/cpu bw':>11}")
        for op, nbytes, cpu, rbln, ratio, extra in rows:
            size = f"{nbytes // KIB} KiB" if nbytes < KIB * KIB else f"{nbytes // (KIB * KIB)} MiB"
            print(f"{op:<11} {size:>9} {cpu * 1e6:10.1f} {rbln * 1e6:10.1f} {extra * 1e6:9.1f} "
                  f"{nbytes / cpu / 1e6:10.1f} {nbytes / rbln / 1e6:10.1f} {ratio:10.2f}x")
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--max-mib", type=int, default=16, help="largest message (256 for the full sweep)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clock", choices=("wall", "thread"), default="wall",
                        help="thread: the calling thread's CPU time (per-call overhead on a busy machine)")
    parser.add_argument("--max-kib", type=int, default=None, help="largest message, KiB (replaces --max-mib)")
    args = parser.parse_args()
    largest = args.max_kib * KIB if args.max_kib is not None else args.max_mib * KIB * KIB
    sizes, nbytes = [], KIB
    while nbytes <= largest:
        sizes.append(nbytes)
        nbytes *= 4
    os.environ.setdefault("TORCH_RBLN_SIM_NPUS", str(max(8, args.ranks)))
    mp.spawn(_rank, args=(args.ranks, _port(), sizes, args.repeats, args.clock), nprocs=args.ranks, join=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
