"""`python -m torch_rbln.diagnose`: what this process sees, and a short self-test.

Prints versions, the kernel backend, the device topology, every torch-rbln environment variable
with its value and source, the cache locations, then allocates, copies and runs ops on every
logical device and prints PASS or FAIL. Exit status 0 on PASS, 1 on FAIL.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import sys
import traceback
from collections.abc import Callable

import torch

import torch_rbln
from torch_rbln import config, topology


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _section(title: str) -> None:
    print(f"\n== {title} ==")


def _print_table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    from ._tables import render_table

    print(render_table(columns, rows, width=140))


def _versions() -> None:
    _section("versions")
    rows = [("python", sys.version.split()[0]), ("torch", torch.__version__),
            ("torch_rbln", torch_rbln.__version__)]
    rows += [(name, _version(name)) for name in
             ("numba", "numpy", "jinja2", "sqlite-utils", "threadpoolctl", "rebel-compiler")]
    _print_table(("package", "version"), rows)


def _backend() -> None:
    _section("kernel backend")
    backend = config.get("TORCH_RBLN_DSL_BACKEND")
    rebel = importlib.util.find_spec("rebel") is not None
    print(f"DSL backend    {backend}")
    print(f"rebel runtime  {'found: NPU count taken from it' if rebel else 'absent: simulated NPUs'}")


def _environment() -> None:
    _section("environment variables")
    rows = []
    for name, value, source, doc in config.describe():
        shown = "-" if value is None else value
        if isinstance(shown, frozenset):
            shown = ",".join(sorted(shown)) or "-"
        elif isinstance(shown, bool):
            shown = "ON" if shown else "OFF"
        rows.append((name, str(shown), source, doc.split(". ")[0].rstrip(".")))
    _print_table(("variable", "value", "source", "meaning"), rows)


def _caches() -> None:
    _section("caches")
    print(f"cache dir      {config.get('TORCH_RBLN_CACHE_DIR')}")
    print(f"autotune db    {config.get('TORCH_RBLN_AUTOTUNE_DB')}")
    print(f"kernel dumps   {config.get('TORCH_RBLN_DUMP_KERNELS') or '- (off)'}")


def _check_device(index: int) -> None:
    device = torch.device("rbln", index)
    before = torch.rbln.memory_allocated(index)
    x = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    on_device = x.to(device)
    assert on_device.device == device, on_device.device
    assert torch.rbln.memory_allocated(index) == before + x.nbytes, "memory accounting"
    result = (on_device @ on_device.T + 1).softmax(-1).sum(0)
    expected = (x @ x.T + 1).softmax(-1).sum(0)
    torch.testing.assert_close(result.cpu(), expected)
    other = (index + 1) % torch.rbln.device_count()
    copied = on_device.to(torch.device("rbln", other))
    assert torch.equal(copied.cpu(), x), "device-to-device copy"


def _self_test() -> bool:
    _section("self-test")
    checks: list[tuple[str, Callable[[], None]]] = [
        (f"rbln:{index} allocate, copy, compute, account", (lambda i=index: _check_device(i)))
        for index in range(torch.rbln.device_count())
    ]
    ok = True
    for name, check in checks:
        try:
            check()
            print(f"  ok    {name}")
        except Exception:  # noqa: BLE001 - every failure is reported, then the verdict
            ok = False
            print(f"  FAIL  {name}")
            traceback.print_exc(limit=3)
    return ok


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__).parse_args(argv)
    _versions()
    _backend()
    _environment()
    _caches()
    try:
        _section("topology")
        topology.device_summary()
        passed = _self_test()
    except Exception as error:  # noqa: BLE001 - an invalid configuration is a FAIL with its message
        print(f"error: {error}")
        passed = False
    print("\nPASS" if passed else "\nFAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
