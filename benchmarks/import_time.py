"""What `import torch` costs with torch_rbln autoloaded, against plain `import torch`.

The `torch.backends` entry point imports torch_rbln on every `import torch`, so its cost is paid by
every PyTorch program on a machine where torch-rbln is installed. Budget (DESIGN.md): 150 ms over plain
`import torch`. Runs alternate (plain, autoload, plain, ...) in fresh interpreters so machine noise
hits both alike; the figure is the median of the paired differences. Both arms run with the garbage
collector off (see PROBE). `-X importtime` of one autoload
run is summarised to show where the time goes.

    python benchmarks/import_time.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

BUDGET_MS = 150.0
# Both arms run with the garbage collector off. `import torch` leaves a full collection due (~95 ms
# on torch's heap of ~166,000 objects; torch_rbln adds ~10,000): with torch_rbln autoloaded, its
# allocations trigger it inside the import; without, the user's first allocations do. Counting it in
# one arm only charges torch's collection to torch_rbln; counting a final collection in both charged the
# autoload arm twice (it has already collected). With the collector off both arms time the import work.
PROBE = ("import gc; gc.disable(); import time; t = time.perf_counter(); import torch; "
         "print((time.perf_counter() - t) * 1000)")


def _run(autoload: bool) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_RBLN_", "RBLN_"))}
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1" if autoload else "0"
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _top_modules(limit: int = 12) -> list[tuple[int, str]]:
    """torch_rbln's own import-time entries (cumulative us), largest first."""
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", "import torch"], env=env,
                         capture_output=True, text=True, check=True).stderr
    rows = []
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and "torch_rbln" in parts[2]:
            try:
                rows.append((int(parts[1]), parts[2].strip()))
            except ValueError:
                continue
    return sorted(rows, reverse=True)[:limit]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    _run(True), _run(False)  # warm the OS file cache
    plain, loaded = [], []
    for _ in range(args.runs):
        plain.append(_run(False))
        loaded.append(_run(True))
    deltas = [b - a for a, b in zip(plain, loaded, strict=True)]
    median = statistics.median(deltas)
    print(f"import torch (plain)          median {statistics.median(plain):7.1f} ms")
    print(f"import torch (+ torch_rbln)   median {statistics.median(loaded):7.1f} ms")
    print(f"torch_rbln's cost             median {median:7.1f} ms of paired runs "
          f"(budget {BUDGET_MS:.0f} ms): {'OK' if median <= BUDGET_MS else 'OVER BUDGET'}")
    print("\nlargest torch_rbln modules (cumulative import time, one run):")
    for us, name in _top_modules():
        print(f"  {us / 1000:7.1f} ms  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
