"""Search strategies over a list of candidate configs.

A strategy calls `measure(i)` (benchmark candidate `i`, returning its median in microseconds or None when
it failed) for the candidates it chooses; `known` holds medians already in the store (reused, never
re-measured; failed ones are None and skipped).  Strategies:

* `exhaustive`: every candidate not yet known, in config order;
* `budgeted`: for large spaces: a seeded random sample (half the budget), then local refinement: the
  untried neighbours of the current best (configs that differ least from it, numeric parameters compared
  on a log2 scale); at a local optimum (no untried neighbour within distance 1) a random untried config,
  until the trial or time budget is spent or every config is measured.

The seed comes from the kernel and key, so the same inputs explore the same configs.
"""

from __future__ import annotations

import math
import random
import time

__all__ = ["Budget", "exhaustive", "budgeted", "config_distance"]


class Budget:
    """Trial and/or wall-time budget for one tuning; None means unlimited."""

    def __init__(self, max_trials: int | None = None, time_budget: float | None = None):
        self.max_trials = max_trials
        self.deadline = None if time_budget is None else time.monotonic() + float(time_budget)
        self.trials = 0

    def spend(self) -> None:
        self.trials += 1

    def exhausted(self) -> bool:
        if self.max_trials is not None and self.trials >= self.max_trials:
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline

    @property
    def limited(self) -> bool:
        return self.max_trials is not None or self.deadline is not None


def _params(cfg) -> dict:
    d = dict(cfg.kwargs)
    for f in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        v = getattr(cfg, f)
        if v is not None:
            d[f] = v
    return d


def config_distance(a, b) -> float:
    pa, pb = _params(a), _params(b)
    dist = 0.0
    for k in set(pa) | set(pb):
        x, y = pa.get(k), pb.get(k)
        if x == y:
            continue
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and x > 0 and y > 0:
            dist += abs(math.log2(x) - math.log2(y))
        else:
            dist += 1.0
    return dist


def exhaustive(candidates, known: dict, measure, budget: Budget) -> None:
    for i in range(len(candidates)):
        if i in known:
            continue
        if budget.exhausted():
            return
        budget.spend()
        known[i] = measure(i)


def _best(known: dict):
    ok = [(m, i) for i, m in known.items() if m is not None]
    return min(ok)[1] if ok else None


def budgeted(candidates, known: dict, measure, budget: Budget, seed: int = 0) -> None:
    n = len(candidates)
    untried = [i for i in range(n) if i not in known]
    if not untried:
        return
    rng = random.Random(seed)
    if budget.max_trials is not None:
        n_random = max(1, budget.max_trials // 2)
    else:
        n_random = max(2, int(math.sqrt(n)))
    sample = sorted(rng.sample(untried, min(n_random, len(untried))))
    for i in sample:
        if budget.exhausted():
            return
        budget.spend()
        known[i] = measure(i)
    # local refinement around the best so far
    while not budget.exhausted():
        best = _best(known)
        rest = [i for i in range(n) if i not in known]
        if not rest:
            return
        if best is None:  # nothing worked yet: keep sampling
            i = rest[rng.randrange(len(rest))]
        else:
            dists = [(config_distance(candidates[best], candidates[i]), i) for i in rest]
            d, i = min(dists)
            if d > 1.0 + 1e-9:  # a local optimum: every close neighbour is measured; explore elsewhere
                i = rest[rng.randrange(len(rest))]
        budget.spend()
        known[i] = measure(i)

