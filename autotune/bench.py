"""Benchmarking: warm-up, repeated timed runs, robust statistics, and the benchmark counters.

`measure(run, ...)` times `run()` (the launch only: `before()`/`after()` hooks are not timed) and returns
the samples in microseconds; `Timing.from_samples` turns samples into median, mean, min/max, quantiles
(p10/p25/p75/p90), IQR and MAD.  `counters` counts every benchmarked config (``benchmarks``), re-timings
(``retimes``), tunings, store lookups and memo misses, so tests can assert that a warm cache runs none.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

__all__ = ["Timing", "measure", "counters", "reset_counters"]

counters: dict[str, int] = {
    "benchmarks": 0,  # configs benchmarked (first measurement of a config for a key)
    "retimes": 0,  # extra timing rounds of the top candidates
    "tunings": 0,  # keys tuned (at least one config benchmarked or failed)
    "store_lookups": 0,  # decisions looked up in the SQLite store
    "store_hits": 0,  # ... that found a valid decision
    "failures": 0,  # configs that failed to compile or run
}


def reset_counters() -> None:
    for k in counters:
        counters[k] = 0


def _quantile(sorted_xs: list[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted data."""
    if not sorted_xs:
        return float("nan")
    pos = (len(sorted_xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Timing:
    """Statistics of one config's samples, in microseconds."""

    median: float
    mean: float
    min: float
    max: float
    p10: float
    p25: float
    p75: float
    p90: float
    iqr: float
    mad: float
    n: int

    @classmethod
    def from_samples(cls, samples: list[float]) -> Timing:
        xs = sorted(samples)
        med = _quantile(xs, 0.5)
        p25, p75 = _quantile(xs, 0.25), _quantile(xs, 0.75)
        mad = statistics.median(abs(x - med) for x in xs) if xs else float("nan")
        return cls(med, statistics.fmean(xs), xs[0], xs[-1], _quantile(xs, 0.1), p25, p75,
                   _quantile(xs, 0.9), p75 - p25, mad, len(xs))

    def as_dict(self) -> dict:
        return asdict(self)


def measure(run, *, warmup_ms: float = 5.0, rep_ms: float = 20.0, min_reps: int = 5, max_reps: int = 200,
            before=None, after=None) -> list[float]:
    """Warm up for ~`warmup_ms`, then time `run()` ~`rep_ms` worth of times (at least `min_reps`, at most
    `max_reps`).  `before()`/`after(exception)` wrap every run, untimed.  Returns samples in microseconds.
    Exceptions from `run` propagate (after `after(exc)`)."""
    clock = time.perf_counter

    def once() -> float:
        if before is not None:
            before()
        t0 = clock()
        try:
            run()
        except Exception as e:
            if after is not None:
                after(e)
            raise
        dt = clock() - t0
        if after is not None:
            after(None)
        return dt

    first = once()  # also the first warm-up run
    est = max(first, 1e-7)
    n_warm = min(max(int(warmup_ms * 1e-3 / est), 0), max_reps)
    for _ in range(n_warm):
        est = min(est, once())
    n_rep = int(min(max(rep_ms * 1e-3 / est, min_reps), max_reps))
    return [once() * 1e6 for _ in range(n_rep)]
