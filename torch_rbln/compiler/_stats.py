"""Counters of what the compiler did (``torch_rbln.compiler.stats()``), so tests and users can see it."""

from __future__ import annotations

import threading
from collections import Counter

__all__ = ["count", "count_kernel", "snapshot", "reset"]

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_kernels: Counter[str] = Counter()


def count(name: str, amount: int = 1) -> None:
    with _lock:
        _counts[name] += amount


def count_kernel(name: str) -> None:
    with _lock:
        _kernels[name] += 1


def count_launches(launches: int, kernels: tuple) -> None:
    """One compiled program's call: its fused launches (on one NPU) and launches per fused kernel."""
    with _lock:
        _counts["fused_launches"] += launches
        _counts["fused_launches_tp1"] += launches
        for name, count in kernels:
            _kernels[name] += count


def snapshot() -> dict:
    """Counters (graphs_compiled, memory_hits, disk_hits, kernels_generated, fused_launches, eager_graphs,
    eager_group_calls, compile_errors, tp_failovers, cache_rebuilds: graph cache entries that did not fit
    their graph or did not load, regenerated; trace_hits, traces_stored, traces_uncached: Dynamo graphs
    whose AOTAutograd trace came from, went to, or was left out of the traced-graph cache) and launches
    per fused kernel (``kernels``)."""
    from torch_rbln.registry._checks import fold_deferred_counts

    fold_deferred_counts()  # the compiled programs' launches since the last read
    with _lock:
        names = ("graphs_compiled", "memory_hits", "disk_hits", "kernels_generated", "fused_launches",
                 "eager_graphs", "eager_group_calls", "compile_errors", "tp_failovers", "cache_rebuilds",
                 "trace_hits", "traces_stored", "traces_uncached")
        out: dict = {name: _counts.get(name, 0) for name in names}
        out.update({k: v for k, v in _counts.items() if k not in out})
        out["kernels"] = dict(_kernels)
        return out


def reset() -> None:
    from torch_rbln.registry._checks import fold_deferred_counts

    fold_deferred_counts()  # launches counted before the reset stay out of the counts after it
    with _lock:
        _counts.clear()
        _kernels.clear()
