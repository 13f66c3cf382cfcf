"""torch.compile(backend="rbln") vs eager rbln, CPU eager and TorchInductor on the CPU, in one process.

Run: python benchmarks/compile.py [--repeats 7] [--threads 1,2] [--no-inductor] [--json FILE]

(1) Forward of the GPT-2 demo model (torch_rbln.demo: random config, 2 layers, width 64, batch 2 x 16
    tokens): eager on rbln:0 (registry kernels op by op), compiled with backend="rbln" run node by node
    on its fused graph ("node by node": fused DSL kernels, every other node through the registry, as
    before generated programs) and as its generated program (compiler/program.py, from the third call),
    eager on the CPU and compiled with inductor on the CPU. Target (issue 22): compiled rbln at least 3x
    faster than eager rbln and as fast as inductor. Compiled rbln and inductor are timed alternately
    (`paired_ms`), and "vs inductor" is the median of the per-pair ratios: the host's phases slowed
    one side's whole block before (the same Llama read 0.91x and 1.19x within minutes).
(3) The same four ways on an MLP (batch 64, 1024 -> 1024 -> GELU -> 1024) and, with --llama, a mid-size
    Llama forward (random config: width 512, 4 layers, 8 heads, batch 1 x 128 tokens), 1 thread; with the
    first compiled call's time (Dynamo + backend compile; then the second call's, which generates the
    program; run the script twice to see them with a warm
    kernel cache) for backend="rbln" and for inductor.
(4) With --fresh N: the first compiled call of the Llama model in N fresh processes per backend (after one
    unmeasured process each, so that the kernel, graph and inductor caches are warm), as issue 22 asks:
    rbln vs inductor, split into Dynamo (the rest), the backend call (AOTAutograd's trace or, when
    cached, its entry; then our compile_graph),
    our compile_graph alone, the graph's first run (rbln: first launches, fused kernels loaded from the
    numba cache) and, for rbln, the second call that generates the program.
(5) With --zoo ROUNDS: each model of the test zoo (tests/torch_rbln/models/zoo.py), forward (--train:
    forward + backward of the output's sum, eval mode): the first
    compiled call after torch._dynamo.reset() with warm caches (kernels, graphs, traces; inductor's FX
    graph and AOTAutograd caches), rbln vs inductor, and the second call; issue 22's compile-time goal.
(2) A pointwise chain of 4 ops (mul, add, sigmoid, mul) on 2^24 float32 elements at equal threads:
    torch eager on the CPU with torch.set_num_threads(n) vs the compiled graph on rbln with
    options={"tensor_parallel_size": n} (the fused kernel's grid split over n simulated NPUs, one thread
    each). Target: >= 2x faster than torch eager.

All figures are medians of CPU-time timings (`--clock wall`: wall-clock) after warm-up calls
(compilation happens there), measured in this process against PyTorch (the host is shared, so ratios
are what to read). Every rbln case is
checked against the CPU result first.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

import torch_rbln  # noqa: F401
import torch_rbln.compiler as rbln_compiler
from torch_rbln import demo
from torch_rbln.compiler import backend as rbln_backend

# The clock of every figure: CPU seconds of this process (`--clock cpu`, the default: on a shared host
# the wall clock counts other processes' time; every case runs on one thread, so CPU time is its work)
# or wall-clock seconds (`--clock wall`).
CLOCK: Callable[[], float] = time.process_time


def median_ms(fn: Callable[[], object], repeats: int, number: int = 1) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = CLOCK()
        for _ in range(number):
            fn()
        samples.append((CLOCK() - start) / number)
    return statistics.median(samples) * 1e3


def paired_ms(first: Callable[[], object], second: Callable[[], object], repeats: int,
              number: int = 1) -> tuple[float, float, float]:
    """(median ms of `first`, of `second`, median of the per-pair ratios second / first): the two are
    timed alternately, a block of `number` calls each, so a phase of the host (this one varies by 20%
    within minutes) slows both sides of a pair alike instead of one side's whole measurement."""
    first(), second()
    a_samples, b_samples = [], []
    for _ in range(repeats):
        for fn, samples in ((first, a_samples), (second, b_samples)):
            start = CLOCK()
            for _ in range(number):
                fn()
            samples.append((CLOCK() - start) / number)
    ratios = [b / a for a, b in zip(a_samples, b_samples, strict=True)]
    return statistics.median(a_samples) * 1e3, statistics.median(b_samples) * 1e3, statistics.median(ratios)


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
    results: dict = {"model": description}
    with torch.no_grad():
        reference = cpu(ids).logits
        results["compiled_nodes_ms"] = _node_by_node_ms(lambda: torch.compile(device, backend="rbln"),
                                                        lambda fn: fn(ids_rbln), repeats, 3)
        torch._dynamo.reset()
        compiled = torch.compile(device, backend="rbln")
        for _ in range(3):  # the third call runs the generated program
            error = (compiled(ids_rbln).logits.cpu() - reference).abs().max().item()
            if error > 1e-4:
                raise SystemExit(f"compiled rbln forward differs from the CPU by {error}")
        results["max_abs_error_vs_cpu"] = error
        results["eager_rbln_ms"] = median_ms(lambda: device(ids_rbln), repeats, 3)
        results["eager_cpu_ms"] = median_ms(lambda: cpu(ids), repeats, 3)
        if inductor:  # (compiled rbln timed alternately with inductor, see `paired_ms`)
            cpu_compiled = torch.compile(cpu)
            cpu_compiled(ids)
            results["compiled_rbln_ms"], results["inductor_cpu_ms"], results["paired_vs_inductor"] = \
                paired_ms(lambda: compiled(ids_rbln), lambda: cpu_compiled(ids), 3 * repeats, 3)
        else:
            results["compiled_rbln_ms"] = median_ms(lambda: compiled(ids_rbln), repeats, 3)
    results["fused_launches_per_forward"] = _fused_launches_per_call(lambda: compiled(ids_rbln))
    return results


def _node_by_node_ms(make: Callable[[], Callable], call: Callable[[Callable], object], repeats: int,
                     number: int = 1) -> float:
    """The compiled model run node by node on its fused graph (`backend.PROGRAMS` off): the figure
    before compiled graphs ran as generated programs."""
    torch._dynamo.reset()
    rbln_backend.PROGRAMS = False
    try:
        compiled = make()
        call(compiled)
        return median_ms(lambda: call(compiled), repeats, number)
    finally:
        rbln_backend.PROGRAMS = True
        torch._dynamo.reset()


def _fused_launches_per_call(fn: Callable[[], object]) -> int:
    rbln_compiler.reset_stats()
    with torch.no_grad():
        fn()
    return rbln_compiler.stats()["fused_launches"]


def _first_call_s(fn: Callable[[], object]) -> float:
    start = CLOCK()
    fn()
    return CLOCK() - start


def four_ways(name: str, make: Callable[[], torch.nn.Module], inputs: dict, repeats: int,
              inductor: bool, tolerance: float = 1e-4) -> dict:
    """Eager rbln, compiled rbln, eager CPU and inductor CPU on one model at 1 thread (median ms), and
    each compiled variant's first-call time. The compiled rbln result is checked against the CPU first."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch._dynamo.reset()
        cpu = make().eval()
        device = make().eval()
        device.load_state_dict(cpu.state_dict())
        device.to("rbln")
        on_device = {key: value.to("rbln") for key, value in inputs.items()}
        out = _tensor_of
        row: dict = {"model": name}
        with torch.no_grad():
            row["compiled_nodes_ms"] = _node_by_node_ms(lambda: torch.compile(device, backend="rbln"),
                                                        lambda fn: fn(**on_device), repeats)
            compiled = torch.compile(device, backend="rbln")
            row["compile_rbln_s"] = _first_call_s(lambda: compiled(**on_device))
            # the second call records the fused graph's values and generates the program
            row["program_rbln_s"] = _first_call_s(lambda: compiled(**on_device))
            error = (out(compiled(**on_device)).cpu() - out(cpu(**inputs))).abs().max().item()
            if error > tolerance:
                raise SystemExit(f"{name}: compiled rbln differs from the CPU by {error}")
            row["max_abs_error_vs_cpu"] = error
            row["eager_rbln_ms"] = median_ms(lambda: device(**on_device), repeats)
            row["eager_cpu_ms"] = median_ms(lambda: cpu(**inputs), repeats)
            if inductor:  # (compiled rbln timed alternately with inductor, see `paired_ms`)
                cpu_compiled = torch.compile(cpu)
                row["compile_inductor_s"] = _first_call_s(lambda: cpu_compiled(**inputs))
                row["compiled_rbln_ms"], row["inductor_cpu_ms"], row["paired_vs_inductor"] = paired_ms(
                    lambda: compiled(**on_device), lambda: cpu_compiled(**inputs), 3 * repeats)
            else:
                row["compiled_rbln_ms"] = median_ms(lambda: compiled(**on_device), repeats)
        return row
    finally:
        torch.set_num_threads(previous)


def _tensor_of(output: object) -> torch.Tensor:
    return output if isinstance(output, torch.Tensor) else output.logits


class MLP(torch.nn.Module):
    def __init__(self, width: int = 1024) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, width)
        self.down = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return MLP()


def _llama() -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=1024, hidden_size=512, intermediate_size=1376,
                                      num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8,
                                      max_position_embeddings=256)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


def models(repeats: int, inductor: bool, llama: bool) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    rows = [four_ways("MLP 64x1024", _mlp, {"x": torch.randn(64, 1024, generator=generator)}, repeats,
                      inductor)]
    if llama:
        ids = torch.randint(0, 1024, (1, 128), generator=generator)
        rows.append(four_ways("Llama 512x4, 128 tokens", _llama, {"input_ids": ids}, repeats, inductor,
                              tolerance=1e-3))
    return rows


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


def _timed(owner: object, name: str, totals: dict[str, float], label: str) -> None:
    """Add the CPU seconds spent in `owner.name` (a function or method) to `totals[label]`."""
    function = getattr(owner, name)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        start = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            totals[label] = totals.get(label, 0.0) + time.process_time() - start

    setattr(owner, name, wrapper)


def first_call_child(backend: str) -> dict:
    """In this (fresh) process: the Llama model's first compiled call, split as `fresh_first_calls` lists
    (CPU seconds)."""
    torch.set_num_threads(1)
    start = time.process_time()
    model = _llama().eval()
    ids = torch.randint(0, 1024, (1, 128), generator=torch.Generator().manual_seed(0))
    totals: dict[str, float] = {}
    if backend == "rbln":
        from torch_rbln.compiler import fused, program

        model.to("rbln")
        ids = ids.to("rbln")
        _timed(rbln_compiler, "rbln_backend", totals, "backend")
        _timed(rbln_backend, "compile_graph", totals, "ours")
        _timed(rbln_backend.CompiledGraph, "__call__", totals, "run")
        _timed(fused.FusedKernel, "_compile", totals, "fused_loads")
        _timed(program.Program, "_generate", totals, "program")
        compiled = torch.compile(model, backend="rbln")
    else:
        import torch._inductor.compile_fx as compile_fx

        _timed(compile_fx, "compile_fx", totals, "backend")
        compiled = torch.compile(model)
    setup = time.process_time() - start
    with torch.no_grad():
        start = time.process_time()
        compiled(input_ids=ids)
        first = time.process_time() - start
        row = {"setup": setup, "first": first, **totals}
        start = time.process_time()
        compiled(input_ids=ids)
        row["second"] = time.process_time() - start
        if backend == "rbln":  # (the second call generates the program; `run` is the first call's)
            row["program"] = totals.get("program", 0.0)
    row["dynamo"] = first - row.get("backend", 0.0) - row.get("run", 0.0)
    return row


def fresh_first_calls(processes: int) -> dict[str, list[dict]]:
    """`first_call_child` for rbln and inductor in alternating fresh processes (after a warm-up each)."""
    rows: dict[str, list[dict]] = {"rbln": [], "inductor": []}
    for run in range(processes + 1):
        for backend in rows:
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "--first-call-child", backend],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"first-call process ({backend}) failed:\n{done.stderr[-4000:]}")
            if run:  # the first process of each warms the caches
                rows[backend].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return rows


def _print_fresh(rows: dict[str, list[dict]]) -> None:
    columns = ("first", "dynamo", "backend", "ours", "run", "fused_loads", "second", "program")
    print(f"\n(4) Llama first compiled call in {len(rows['rbln'])} fresh processes per backend, warm caches "
          f"(median CPU s; dynamo = first - backend - run)")
    print(f"{'backend':>9} " + " ".join(f"{c:>11}" for c in columns))
    for backend, samples in rows.items():
        cells = []
        for column in columns:
            values = [row[column] for row in samples if column in row]
            cells.append(f"{statistics.median(values):11.2f}" if values else f"{'-':>11}")
        print(f"{backend:>9} " + " ".join(cells))
    ratio = [r["first"] for r in rows["rbln"]], [r["first"] for r in rows["inductor"]]
    print(f"    rbln first calls {', '.join(f'{v:.2f}' for v in ratio[0])} s; "
          f"inductor {', '.join(f'{v:.2f}' for v in ratio[1])} s")


def _zoo() -> dict:
    """The model zoo of tests/torch_rbln/models (tiny random configurations, nothing downloaded)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
    from tests.torch_rbln.models.zoo import ZOO

    return ZOO


def _first_two_calls(fn: Callable[[], object]) -> tuple[float, float]:
    """A fresh compile's first call (Dynamo + backend + first run) and second call, in CPU seconds."""
    torch._dynamo.reset()
    first = _first_call_s(fn)
    return first, _first_call_s(fn)


def _step(model: torch.nn.Module, inputs: dict, output: Callable, train: bool) -> torch.Tensor:
    """One forward (inference), or forward + backward of the output's sum (`train`); the output."""
    result = output(model(**inputs))
    if train:
        result.float().sum().backward()
    return result.detach()


def zoo_compile_times(rounds: int, names: list[str] | None = None, train: bool = False) -> list[dict]:
    """(5) Each zoo model's forward (`train`: forward + backward, eval mode so no dropout): the first
    compiled call (and the second, which for rbln generates the program) after `torch._dynamo.reset()`,
    backend="rbln" on rbln vs inductor on the CPU, warm caches (one unmeasured compile of each first),
    `rounds` alternating rounds, medians; results checked."""
    zoo = _zoo()
    rows = []
    for name in names or list(zoo):
        entry = zoo[name]
        cpu, device = entry.build().eval(), entry.build().eval()
        device.load_state_dict(cpu.state_dict())
        device.to("rbln")
        inputs = entry.inputs()
        on_device = {key: value.to("rbln") for key, value in inputs.items()}
        samples: dict[str, list[tuple[float, float]]] = {"rbln": [], "inductor": []}
        with torch.set_grad_enabled(train):
            want = _step(cpu, inputs, entry.output, train)
            for round_ in range(rounds + 1):
                rbln = torch.compile(device, backend="rbln")
                times = _first_two_calls(lambda: _step(rbln, on_device, entry.output, train))  # noqa: B023
                got = _step(rbln, on_device, entry.output, train).cpu()
                torch.testing.assert_close(got, want, atol=entry.atol, rtol=entry.rtol)
                inductor = torch.compile(cpu)
                inductor_times = _first_two_calls(lambda: _step(inductor, inputs, entry.output, train))  # noqa: B023
                if round_:  # the first round warms every cache
                    samples["rbln"].append(times)
                    samples["inductor"].append(inductor_times)
        row = {"model": name}
        for backend, values in samples.items():
            row[f"{backend}_first_s"] = statistics.median(v[0] for v in values)
            row[f"{backend}_second_s"] = statistics.median(v[1] for v in values)
        rows.append(row)
        torch._dynamo.reset()
    return rows


def _print_zoo(rows: list[dict], train: bool) -> None:
    print(f"\n(5) zoo {'forward + backward' if train else 'forward'}: first compiled call after "
          "torch._dynamo.reset(), warm caches (median CPU s; second: the next call, rbln's generates the "
          "program)")
    print(f"{'model':>9} {'rbln first':>11} {'second':>7} {'inductor first':>15} {'second':>7} "
          f"{'first+second rbln / inductor':>29}")
    for row in rows:
        ratio = (row["rbln_first_s"] + row["rbln_second_s"]) / (row["inductor_first_s"] +
                                                               row["inductor_second_s"])
        print(f"{row['model']:>9} {row['rbln_first_s']:11.2f} {row['rbln_second_s']:7.2f} "
              f"{row['inductor_first_s']:15.2f} {row['inductor_second_s']:7.2f} {ratio:28.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--no-inductor", action="store_true", help="skip torch.compile(inductor) on the CPU")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--llama", action="store_true", help="also the mid-size Llama forward (slow)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="CPU seconds of this process (default) or wall-clock seconds")
    parser.add_argument("--fresh", type=int, default=0, metavar="N",
                        help="only (4): the Llama first compiled call in N fresh processes per backend")
    parser.add_argument("--zoo", type=int, default=0, metavar="ROUNDS",
                        help="only (5): each zoo model's first compiled call vs inductor, ROUNDS rounds")
    parser.add_argument("--models", help="with --zoo: these zoo models only (comma-separated)")
    parser.add_argument("--train", action="store_true", help="with --zoo: forward + backward")
    parser.add_argument("--first-call-child", choices=("rbln", "inductor"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.zoo:
        torch.set_num_threads(1)
        rows = zoo_compile_times(args.zoo, args.models.split(",") if args.models else None, args.train)
        _print_zoo(rows, args.train)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"zoo_compile_times": rows}, f, indent=1)
        return 0
    if args.first_call_child:
        print(json.dumps(first_call_child(args.first_call_child)))
        return 0
    if args.fresh:
        rows = fresh_first_calls(args.fresh)
        _print_fresh(rows)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"fresh_first_calls": rows}, f, indent=1)
        return 0
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    threads = [int(t) for t in args.threads.split(",") if t]

    forward = demo_forward(args.repeats, not args.no_inductor)
    print(f"(1) demo forward: {forward['model']}, batch 2 x 16 tokens, 1 thread (median ms)")
    print(f"{'eager rbln':>14} {'node by node':>13} {'compiled rbln':>14} {'eager CPU':>10} "
          f"{'inductor CPU':>13} "
          f"{'compiled vs eager':>18} {'compiled vs inductor':>21}")
    inductor_ms = forward.get("inductor_cpu_ms")
    print(f"{forward['eager_rbln_ms']:14.2f} {forward['compiled_nodes_ms']:13.2f} "
          f"{forward['compiled_rbln_ms']:14.2f} "
          f"{forward['eager_cpu_ms']:10.2f} "
          f"{inductor_ms if inductor_ms is not None else float('nan'):13.2f} "
          f"{forward['eager_rbln_ms'] / forward['compiled_rbln_ms']:17.2f}x "
          f"{forward.get('paired_vs_inductor', float('nan')):20.2f}x")
    print(f"    fused kernel launches per compiled forward: {forward['fused_launches_per_forward']}; "
          f"max |compiled - CPU| = {forward['max_abs_error_vs_cpu']:.1e}")

    model_rows = models(args.repeats, not args.no_inductor, args.llama)
    print(f"\n(3) models, 1 thread (median ms; first compiled call in s, then the second call that generates "
          f"the program; {args.clock} clock)")
    print(f"{'model':>24} {'eager rbln':>11} {'nodes':>7} {'compiled':>9} {'eager CPU':>10} "
          f"{'inductor':>9} "
          f"{'vs eager':>9} {'vs inductor':>12} {'compile rbln':>13} {'program':>8} {'compile ind.':>13}")
    nan = float("nan")
    for row in model_rows:
        ind = row.get("inductor_cpu_ms", nan)
        compiled_ms = row["compiled_rbln_ms"]
        print(f"{row['model']:>24} {row['eager_rbln_ms']:11.2f} {row['compiled_nodes_ms']:7.2f} "
              f"{compiled_ms:9.2f} "
              f"{row['eager_cpu_ms']:10.2f} {ind:9.2f} {row['eager_rbln_ms'] / compiled_ms:8.2f}x "
              f"{row.get('paired_vs_inductor', ind / compiled_ms):11.2f}x {row['compile_rbln_s']:13.2f} "
              f"{row['program_rbln_s']:8.2f} "
              f"{row.get('compile_inductor_s', nan):13.2f}")

    chain_rows = pointwise_chain(threads, args.repeats)
    print("\n(2) 4-op pointwise chain sigmoid(x * 1.5 + 0.5) * x on 2^24 float32 (median ms)")
    print(f"{'threads/tp':>10} {'torch CPU':>10} {'compiled rbln':>14} {'speedup':>8}")
    for row in chain_rows:
        print(f"{row['threads']:10d} {row['torch_cpu_ms']:10.1f} {row['compiled_rbln_ms']:14.1f} "
              f"{row['speedup']:7.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"demo_forward": forward, "models": model_rows, "pointwise_chain": chain_rows}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
