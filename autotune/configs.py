"""`Config`: one point of a kernel's tuning space (Triton's `triton.Config`)."""

from __future__ import annotations

import hashlib
import json

__all__ = ["Config", "config_id", "configs_hash"]

_EXTRA_FIELDS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


class Config:
    """Meta-parameters for one launch of an autotuned kernel.

    `kwargs` are passed to the kernel (typically `tl.constexpr` block sizes).  `num_warps`,
    `num_stages`, `num_ctas` and `maxnreg` are accepted for source compatibility with Triton and recorded
    in the store; the rbln backends ignore them.  `pre_hook(nargs)` runs before every launch with this
    config (benchmark runs included) with the kernel's arguments by name.
    """

    __slots__ = ("kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg", "pre_hook", "_id")

    def __init__(self, kwargs=None, num_warps=None, num_stages=None, num_ctas=None, maxnreg=None,
                 pre_hook=None):
        self.kwargs = dict(kwargs or {})
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_ctas = num_ctas
        self.maxnreg = maxnreg
        self.pre_hook = pre_hook
        self._id = None

    def all_kwargs(self) -> dict:
        """The kernel keyword arguments: `kwargs` plus the Triton launch options that are set."""
        out = dict(self.kwargs)
        for f in _EXTRA_FIELDS:
            v = getattr(self, f)
            if v is not None:
                out[f] = v
        return out

    def to_dict(self) -> dict:
        """JSON form (without `pre_hook`): ``{"kwargs": {...}, "num_warps": 4, ...}``."""
        d = {"kwargs": {k: _jsonable(v) for k, v in self.kwargs.items()}}
        for f in _EXTRA_FIELDS:
            v = getattr(self, f)
            if v is not None:
                d[f] = v
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Config:
        return cls(d.get("kwargs", {}), **{f: d.get(f) for f in _EXTRA_FIELDS})

    @property
    def id(self) -> str:
        """Canonical JSON text of `to_dict()`: the config's identity in the store."""
        if self._id is None:
            self._id = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return self._id

    def __eq__(self, other):
        return isinstance(other, Config) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        parts = [f"{k}: {v!r}" for k, v in self.kwargs.items()]
        parts += [f"{f}: {getattr(self, f)}" for f in _EXTRA_FIELDS if getattr(self, f) is not None]
        return "Config(" + ", ".join(parts) + ")"

    __str__ = __repr__


def _jsonable(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "value"):  # tl.constexpr
        return _jsonable(v.value)
    return repr(v)


def config_id(cfg: Config) -> str:
    return cfg.id


def configs_hash(configs) -> str:
    """Order-independent hash of a set of configs (what the decision was made among)."""
    h = hashlib.sha256()
    for cid in sorted(c.id for c in configs):
        h.update(cid.encode())
        h.update(b"\n")
    return h.hexdigest()[:16]
