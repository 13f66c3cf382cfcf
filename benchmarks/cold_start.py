"""Cold and warm start: what a new user waits for, each figure against issue 20's target.

    python benchmarks/cold_start.py [--only demo,kernel,autotune,diagnose,import] [--json FILE]
                                    [--fresh-install]

Every case runs in a fresh interpreter with its own empty ``TORCH_RBLN_CACHE_DIR`` (cold), then again
with the cache that run left (warm). CPU seconds are user + system time of the child and everything it
waited for (``resource.getrusage(RUSAGE_CHILDREN)``), so compile workers count too; wall seconds are
printed beside them (the host is shared: read the CPU figures, and the load average printed first).

Cases:
* ``demo``: ``python -m torch_rbln.demo`` (GPT-2 forward + one training step on rbln:0).
  Target: cold <= 30 s CPU, warm <= 4 s CPU.
* ``kernel``: a tutorial-sized user kernel (vector add and a row softmax, float32), its first launch
  timed inside the child. Target: first launch <= 1 s.
* ``autotune``: an autotuned vector add with three configs, first call timed inside the child. Target:
  not much more than one config's compile (reported as the ratio to the single kernel's first launch).
* ``diagnose``: ``python -m torch_rbln.diagnose``. No target of its own (it was 65 s cold).
* ``import``: ``import torch`` with torch_rbln autoloaded over plain ``import torch``
  (``benchmarks/import_time.py``'s paired runs). Target: <= 150 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# The demo's part that is not ours, run without torch_rbln (autoload off): import torch and
# transformers and build the demo's two GPT-2 models (its config, as torch_rbln.demo._build sets it).
# The warm demo minus this is what torch_rbln costs.
DEMO_BASELINE = ("import torch; from transformers import GPT2Config, GPT2LMHeadModel; "
                 "c = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64, "
                 "attn_implementation='sdpa'); GPT2LMHeadModel(c); GPT2LMHeadModel(c)")

# The user-kernel case's child: prints one JSON line with the in-process timings of each first launch.
KERNEL_SCRIPT = r'''
import json, time
t0 = time.perf_counter()
import torch
import torch_rbln.dsl as tl
from torch_rbln import dsl as triton
imported = time.perf_counter() - t0

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)

@triton.jit
def softmax_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)

x = torch.randn(10_000, device="rbln:0")
out = torch.empty_like(x)
timings = {"import_s": imported}

def timed(name, launch):
    began, cpu = time.perf_counter(), time.process_time()
    launch()
    timings[name + "_s"] = time.perf_counter() - began
    timings[name + "_cpu_s"] = time.process_time() - cpu

def add():
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, x, out, x.numel(), BLOCK=1024)

timed("add_first_launch", add)
assert torch.allclose(out.cpu(), 2 * x.cpu())
timed("add_second_launch", add)
a = torch.randn(64, 100, device="rbln:0")
b = torch.empty_like(a)
timed("softmax_first_launch", lambda: softmax_kernel[(64,)](b, a, a.stride(0), 100, BLOCK=128))
assert torch.allclose(b.cpu(), a.cpu().softmax(-1), atol=1e-5)
print("RESULT " + json.dumps(timings))
'''

AUTOTUNE_SCRIPT = r'''
import json, time
import torch
import torch_rbln.dsl as tl
from torch_rbln import dsl as triton
from torch_rbln.autotune import Config, autotune

@autotune(configs=[Config({"BLOCK": 256}), Config({"BLOCK": 512}), Config({"BLOCK": 1024})], key=["n"])
@triton.jit
def tuned_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)

x = torch.randn(5_000, device="rbln:0")
out = torch.empty_like(x)
began, cpu = time.perf_counter(), time.process_time()
tuned_add[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, x, out, x.numel())
first, first_cpu = time.perf_counter() - began, time.process_time() - cpu
assert torch.allclose(out.cpu(), 2 * x.cpu())
print("RESULT " + json.dumps({"autotune_first_call_s": first, "autotune_first_call_cpu_s": first_cpu}))
'''


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _detached_workers(cache: str) -> dict[int, float]:
    """CPU seconds so far of the compile workers (TORCH_RBLN_COMPILE=background) still running for
    `cache`: they outlive the program they compiled for, to finish its queued compiles (Linux /proc)."""
    found = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as stream:
                if b"compile_worker" not in stream.read():
                    continue
            with open(f"/proc/{entry}/environ", "rb") as stream:
                if f"TORCH_RBLN_CACHE_DIR={cache}".encode() not in stream.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as stream:
                fields = stream.read().rsplit(")", 1)[1].split()
            found[int(entry)] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        except OSError:
            continue
    return found


def _wait_for_workers(cache: str) -> tuple[float, float]:
    """Wait until the detached compile workers of `cache` have exited: (their CPU seconds, as last
    sampled every 0.2 s; the seconds waited)."""
    last: dict[int, float] = {}
    began = time.perf_counter()
    while True:
        now = _detached_workers(cache)
        if not now:
            return sum(last.values()), time.perf_counter() - began
        last.update(now)
        time.sleep(0.2)


def run_case(argv: list[str], cache: str, extra_env: dict | None = None) -> dict:
    """Run `argv` in a fresh interpreter with TORCH_RBLN_CACHE_DIR=`cache`: its CPU and wall seconds,
    and the JSON it printed on a `RESULT ` line (if any)."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_RBLN_CACHE_DIR"}
    env["TORCH_RBLN_CACHE_DIR"] = cache
    env.update(extra_env or {})
    # output to files, not pipes: detached compile workers inherit stderr, and a pipe would make this
    # wait for them as if they were the program
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        cpu0, wall0 = _child_cpu(), time.perf_counter()
        returncode = subprocess.run([sys.executable, *argv], env=env, stdout=out, stderr=err).returncode
        row = {"cpu_s": _child_cpu() - cpu0, "wall_s": time.perf_counter() - wall0, "rc": returncode}
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    worker_cpu, waited = _wait_for_workers(cache)
    if worker_cpu or waited > 0.5:
        row["detached_worker_cpu_s"], row["detached_worker_wall_s"] = worker_cpu, waited
    if returncode != 0:
        row["error"] = (stdout + stderr)[-2000:]
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            row.update(json.loads(line[len("RESULT "):]))
    return row


# --fresh-install: numba's own cache of the package's compiled helpers (dsl support functions, the
# allocator, ...) also starts empty. It lives in __pycache__ beside their sources, which survives between
# runs of this script but not a fresh clone: without the flag, "cold" is a new cache directory on a
# checkout that has run before.
FRESH_INSTALL = [False]


def cold_and_warm(argv: list[str], extra_env: dict | None = None,
                  script: str | None = None) -> tuple[dict, dict]:
    """Run `argv` (or `script`, written to a file: kernels need their source file) twice on one new
    cache directory: cold, then warm."""
    cache = tempfile.mkdtemp(prefix="rbln-cold-start-")
    if FRESH_INSTALL[0]:
        extra_env = {**(extra_env or {}), "NUMBA_CACHE_DIR": os.path.join(cache, "numba-helpers")}
    try:
        if script is not None:
            path = os.path.join(cache, "user_kernels.py")
            with open(path, "w") as stream:
                stream.write(script)
            argv = [path]
            cache = os.path.join(cache, "cache")
        return run_case(argv, cache, extra_env), run_case(argv, cache, extra_env)
    finally:
        shutil.rmtree(os.path.dirname(cache) if script is not None else cache, ignore_errors=True)


def import_cost(runs: int) -> dict:
    """Median paired difference of `import torch` with and without torch_rbln autoloaded (ms)."""
    sys.path.insert(0, HERE)
    import import_time

    import_time._run(True)
    deltas = []
    for _ in range(runs):
        plain = import_time._run(False)
        deltas.append(import_time._run(True) - plain)
    return {"import_ms": statistics.median(deltas), "budget_ms": import_time.BUDGET_MS}


def _verdict(value: float, target: float) -> str:
    return "OK" if value <= target else "OVER"


def _outcome(value: float, target: float | None, row: dict) -> str:
    """The end of a figure's line: its target and verdict (FAILED when the child did not finish: its
    figure means nothing), and the child's exit status when it failed."""
    failed = f"  (exit {row['rc']})" if row.get("rc") else ""
    if target is None:
        return failed
    return f" target <= {target:5.1f} s  {'FAILED' if row.get('rc') else _verdict(value, target)}{failed}"


def _line(label: str, row: dict, target: float | None = None, key: str = "cpu_s") -> None:
    figure = row.get(key, float("nan"))
    if key == "cpu_s":  # all of it: the program's and its compile workers', also those that outlived it
        figure += row.get("detached_worker_cpu_s", 0.0)
    print(f"  {label:<34} {figure:7.2f} s  (cpu {row['cpu_s']:6.1f} s, wall {row['wall_s']:6.1f} s)"
          f"{_outcome(figure, target, row)}")
    if "detached_worker_cpu_s" in row:
        print(f"  {'':<34} + {row['detached_worker_cpu_s']:.1f} s CPU of compile workers that finished "
              f"{row['detached_worker_wall_s']:.1f} s after the program exited")


def _launch_line(label: str, row: dict, name: str, target: float | None = None) -> None:
    """A launch timed inside the child: its CPU seconds (what a quiet machine's wall time would be)
    against the target, and its wall seconds on this host."""
    cpu, wall = row.get(name + "_cpu_s", float("nan")), row.get(name + "_s", float("nan"))
    print(f"  {label:<34} {cpu:7.2f} s  [wall {wall:6.2f} s]{_outcome(cpu, target, row)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="demo,kernel,autotune,diagnose,import",
                        help="comma-separated cases to run")
    parser.add_argument("--import-runs", type=int, default=7)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra environment for every child (e.g. TORCH_RBLN_COMPILE=background)")
    parser.add_argument("--fresh-install", action="store_true",
                        help="also start numba's cache of the package's own helpers empty (NUMBA_CACHE_DIR), "
                             "as on a fresh clone")
    args = parser.parse_args(argv)
    FRESH_INSTALL[0] = args.fresh_install
    cases = set(args.only.split(","))
    extra = dict(item.split("=", 1) for item in args.env)
    results: dict = {"load_average": os.getloadavg(), "cpus": os.cpu_count(), "env": extra}
    caches = "TORCH_RBLN_CACHE_DIR and NUMBA_CACHE_DIR" if args.fresh_install else "TORCH_RBLN_CACHE_DIR"
    print(f"cold start (empty {caches} per case); load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs; env {extra or '-'}")
    if "demo" in cases:
        cold, warm = cold_and_warm(["-m", "torch_rbln.demo"], extra)
        results["demo"] = {"cold": cold, "warm": warm}
        print("README demo (python -m torch_rbln.demo), CPU seconds:")
        _line("cold", cold, 30.0)
        _line("warm", warm, 4.0)
        # what the demo pays before torch_rbln does anything: torch, transformers and the model itself
        with tempfile.TemporaryDirectory(prefix="rbln-cold-start-") as unused_cache:
            baseline = run_case(["-c", DEMO_BASELINE], unused_cache,
                                {**extra, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
        results["demo"]["baseline"] = baseline
        _line("of which torch + transformers + model", baseline)
        own = warm["cpu_s"] + warm.get("detached_worker_cpu_s", 0.0) - baseline["cpu_s"]
        results["demo"]["warm_torch_rbln_cpu_s"] = own
        print(f"  {'warm, the rest (torch_rbln)':<34} {own:7.2f} s  (warm minus the line above: what the "
              f"4 s target can hold torch_rbln to)")
    if "kernel" in cases:
        cold, warm = cold_and_warm([], extra, KERNEL_SCRIPT)
        results["kernel"] = {"cold": cold, "warm": warm}
        print("user kernel (vector add, row softmax; first launch timed in the child), CPU seconds of the "
              "launch [its wall seconds]:")
        for phase, row in (("cold", cold), ("warm", warm)):
            _launch_line(f"vector add first launch, {phase}", row, "add_first_launch", 1.0)
            _launch_line(f"softmax first launch, {phase}", row, "softmax_first_launch", 1.0)
    if "autotune" in cases:
        cold, warm = cold_and_warm([], extra, AUTOTUNE_SCRIPT)
        results["autotune"] = {"cold": cold, "warm": warm}
        print("autotuned vector add, 3 configs (first call timed in the child), CPU seconds [wall]:")
        single = results.get("kernel", {}).get("cold", {}).get("add_first_launch_cpu_s")
        _launch_line("first call, cold", cold, "autotune_first_call")
        if single and "autotune_first_call_cpu_s" in cold:
            print(f"  {'':<34} = {cold['autotune_first_call_cpu_s'] / single:.1f}x one config's first launch")
        _launch_line("first call, warm", warm, "autotune_first_call")
    if "diagnose" in cases:
        cold, warm = cold_and_warm(["-m", "torch_rbln.diagnose"], extra)
        results["diagnose"] = {"cold": cold, "warm": warm}
        print("python -m torch_rbln.diagnose, CPU seconds:")
        _line("cold", cold)
        _line("warm", warm)
    if "import" in cases:
        results["import"] = row = import_cost(args.import_runs)
        print(f"import torch + autoload over plain import torch: median {row['import_ms']:.0f} ms "
              f"(target <= {row['budget_ms']:.0f} ms) {_verdict(row['import_ms'], row['budget_ms'])}")
    failures = [name for name, value in results.items() if isinstance(value, dict)
                and any(isinstance(r, dict) and r.get("rc") for r in value.values())]
    for name in failures:
        for phase, row in results[name].items():
            if row.get("rc"):
                print(f"\n{name} ({phase}) failed:\n{row['error']}")
    if args.json:
        with open(args.json, "w") as stream:
            json.dump(results, stream, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
