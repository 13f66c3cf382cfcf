"""A memo dict with a size bound, for the registry's caches keyed by what calls bring (scalar values,
dtypes and sizes, launch keys): they are few in practice, but a pathological caller must not grow
one without end."""

from __future__ import annotations


class BoundedMemo(dict):
    """A dict that forgets everything when an insertion would take it past `limit` entries."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __setitem__(self, key, value) -> None:
        if len(self) >= self.limit and key not in self:
            self.clear()
        super().__setitem__(key, value)


class PlanMemo(BoundedMemo):
    """A BoundedMemo that builds a missing entry with `build(key)` on lookup (`memo[key]`): a hit is one
    C-level dict lookup, a miss stores whatever `build` returns (None included, so a key that has no
    plan is not examined again)."""

    def __init__(self, limit: int, build) -> None:
        super().__init__(limit)
        self.build = build

    def __missing__(self, key):
        value = self[key] = self.build(key)
        return value
