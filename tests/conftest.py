"""Test-session set-up: no test may depend on the developer's own torch-rbln environment."""

from __future__ import annotations

import os

import pytest

for _name in list(os.environ):
    # RBLN_TEST_* configure the test suite itself (e.g. where external kernels are), so they stay
    if _name.startswith(("TORCH_RBLN_", "RBLN_")) and not _name.startswith("RBLN_TEST_"):
        del os.environ[_name]
# Keep kernel caches and autotune databases of test runs out of the user's home.
os.environ.setdefault("TORCH_RBLN_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache",
                                                           "torch_rbln"))


# ---------------------------------------------------------------- numba compile accounting
# A cold suite spends most of its time in numba; the end of the run says how many kernels this run
# compiled (in the test processes: child interpreters are not counted), their seconds, and the tests
# that compiled the most, so a test that adds slow or duplicate specialisations shows. With
# RBLN_TEST_COMPILE_LOG=FILE each test process also appends one JSON line per test:
# {"test", "worker", "start", "end" (time.time()), "compiles", "seconds", "kernels": [[kernel name,
# specialisation key, seconds], ...]}: the same key compiled twice in one run (two workers at once, or
# a cache miss) and the idle tail of a worker both show in it; `python tests/compile_log_report.py FILE`
# summarises it.

_EXECUTABLE = "torch_rbln.dsl.backends.numba_backend.executable"
_compiled_by_test: list[tuple[float, int, str]] = []  # (seconds, compiles, test id) of this process
_TOP = 12


def _compile_count() -> tuple[int, float]:
    import sys

    module = sys.modules.get(_EXECUTABLE)  # never imported: nothing compiled yet
    return (0, 0.0) if module is None else module.compile_count()


def _compile_records() -> list:
    import sys

    module = sys.modules.get(_EXECUTABLE)
    return [] if module is None else module.compile_records()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import time

    before, records, start = _compile_count(), len(_compile_records()), time.time()
    yield
    count, seconds = (now - then for now, then in zip(_compile_count(), before, strict=True))
    if count:
        _compiled_by_test.append((seconds, count, item.nodeid))
    path = os.environ.get("RBLN_TEST_COMPILE_LOG")
    if path:
        import json

        kernels = [[name, key, round(took, 3)] for name, key, took in _compile_records()[records:]]
        line = json.dumps({"test": item.nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                           "start": round(start, 3), "end": round(time.time(), 3), "compiles": count,
                           "seconds": round(seconds, 3), "kernels": kernels})
        with open(path, "a") as stream:
            stream.write(line + "\n")


def _totals() -> dict:
    return {"compiles": sum(c for _, c, _ in _compiled_by_test),
            "seconds": sum(s for s, _, _ in _compiled_by_test),
            "top": sorted(_compiled_by_test, reverse=True)[:_TOP],
            "keys": [[key, round(seconds, 3)] for _, key, seconds in _compile_records()]}


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: its totals go to the controller
        workeroutput["rbln_compiles"] = _totals()


_worker_totals: list[dict] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    totals = getattr(node, "workeroutput", {}).get("rbln_compiles")
    if totals is not None:
        _worker_totals.append(totals)


def pytest_terminal_summary(terminalreporter):
    runs = _worker_totals or [_totals()]
    compiles = sum(run["compiles"] for run in runs)
    if not compiles:
        return
    seconds = sum(run["seconds"] for run in runs)
    top = sorted((tuple(entry) for run in runs for entry in run["top"]), reverse=True)[:_TOP]
    where = os.environ["TORCH_RBLN_CACHE_DIR"]
    title = f"numba compiled {compiles} kernels, {seconds:.0f} s of wall time (cached under {where})"
    terminalreporter.write_sep("-", title)
    for test_seconds, count, nodeid in top:
        terminalreporter.write_line(f"{test_seconds:7.1f} s {count:4d} compiles  {nodeid}")
    # a specialisation compiled more than once in one run: two processes missed each other's cache
    # entry, or a test cleared the cache on purpose (tests/dsl/backends/test_background_compile.py)
    seen: dict[str, list[float]] = {}
    for run in runs:
        for key, key_seconds in run.get("keys", []):
            seen.setdefault(key, []).append(key_seconds)
    again = {key: times for key, times in seen.items() if len(times) > 1}
    if again:
        count = sum(len(times) - 1 for times in again.values())
        extra = sum(sum(times[1:]) for times in again.values())
        terminalreporter.write_line(f"{len(again)} specialisations compiled more than once ({count} extra "
                                    f"compiles, {extra:.0f} s), e.g. {min(again)[:100]}")


# ---------------------------------------------------------------- torch's OpInfo sample tracking
# Iterating `OpInfo.sample_inputs` calls torch.testing's `extract_test_fn`, which looks for a running
# `unittest.TestCase` method with `inspect.stack()`: that reads the source lines of every frame on the
# stack (about 0.1 s per call in a deep pytest stack, a third of an OpInfo sweep's time). Our tests are
# plain pytest functions, so the search finds nothing; this one walks the same frames for the same
# `self` without reading any source, and gives the same answer.


def _test_fn_on_stack():
    import sys
    import unittest

    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, unittest.TestCase):
            *_, class_name, test_name = owner.id().rsplit(".", 2)
            if class_name == type(owner).__name__ and test_name.startswith("test"):
                return getattr(owner, test_name).__func__
        frame = frame.f_back
    return None


def pytest_runtest_setup(item):
    import sys

    for name in ("torch.testing._internal.common_utils", "torch.testing._internal.opinfo.core"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "extract_test_fn", None) is not _test_fn_on_stack:
            module.extract_test_fn = _test_fn_on_stack
