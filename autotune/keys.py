"""Tuning keys: the `key=` arguments (bucketed), every tensor argument's dtype, and the launch's TP size.

Bucketing policies (per key argument, `bucket=` of `@autotune`):

* ``"exact"`` (default): the value itself;
* ``"pow2"``: the next power of two (``1000 -> 1024``), ints only (tensor shapes: per dimension);
* any callable ``value -> bucket`` (its result must be JSON-able: int, float, str, or a list of them).

Only the cache lookup is bucketed: the launch keeps its exact sizes for the grid and masks.  A key
argument that is a tensor contributes its shape.
"""

from __future__ import annotations

import functools
import json
import platform

from torch_rbln import config

__all__ = ["launch_tp_size", "bucket_policy", "device_kind", "KeySpec"]


def _next_pow2(v):
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, tuple):
            return tuple(_next_pow2(x) for x in v)
        raise TypeError(f"the 'pow2' bucket needs an int, got {type(v).__name__} {v!r}")
    return 1 if v <= 1 else 1 << (v - 1).bit_length()


def bucket_policy(spec):
    """`(name, function)` for a bucket policy spec: "exact", "pow2" or a callable."""
    if spec is None or spec == "exact":
        return "exact", None
    if spec in ("pow2", "next_power_of_2", "power_of_two"):
        return "pow2", _next_pow2
    if callable(spec):
        name = getattr(spec, "__qualname__", None) or type(spec).__name__
        return f"callable:{getattr(spec, '__module__', '?')}.{name}", spec
    raise ValueError(f"unknown bucket policy {spec!r}; expected 'exact', 'pow2' or a callable")


def _tensor_type():
    import torch

    return torch.Tensor


def launch_tp_size(args, kwargs) -> int:
    """TP size of a launch: an explicit ``tp=`` launch option, else for tensors on an ``rbln:i`` device
    ``torch_rbln.tp.tp_size_for(i)``, else 1 — the rule the DSL's launcher applies (`launch_tp`).
    Does not modify `kwargs`."""
    from torch_rbln.dsl.jit import launch_tp

    from torch_rbln.tp import check_tp

    tp = kwargs.get("tp")
    if tp is not None:
        check_tp(tp)
    return launch_tp((*args, *kwargs.values()), tp)[0]


@functools.cache
def _cpu_kind() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"cpu:{model or platform.processor() or platform.machine() or 'unknown'}"


@functools.cache
def _rbln_kind(index: int) -> str:
    try:
        import torch

        name = torch.rbln.get_device_name(index)
    except Exception:  # pragma: no cover - device module unavailable
        return "rbln"
    return "rbln:simulated" if "simulated" in name else f"rbln:{name}"


def device_kind(args, kwargs) -> str:
    """What the timings were measured on: ``cpu:<model>`` or ``rbln:<kind>`` (first tensor argument)."""
    T = _tensor_type()
    for a in (*args, *kwargs.values()):
        if isinstance(a, T):
            dev = a.device
            if dev.type == "rbln":
                return _rbln_kind(dev.index or 0)
            if dev.type == "cpu":
                return _cpu_kind()
            return dev.type
    return _cpu_kind()


def hostname() -> str:
    return platform.node() or config.external("HOSTNAME") or "unknown"


class KeySpec:
    """Computes the tuning key of a launch.

    `memo_key(args, kwargs)` is the hot-path tuple (bucketed key values, dtypes, tp, backend option);
    `describe(...)` the JSON text stored in the database plus the bucket record.
    """

    def __init__(self, arg_names, defaults: dict, key, bucket):
        self.arg_names = list(arg_names)
        key = list(key or [])
        unknown = [k for k in key if k not in self.arg_names]
        if unknown:
            raise ValueError(f"autotune key names unknown arguments {unknown}; the kernel takes "
                             f"{self.arg_names}")
        self.key = key
        if isinstance(bucket, dict):
            bad = [k for k in bucket if k not in key]
            if bad:
                raise ValueError(f"bucket= names {bad}, which are not in key={key}")
            specs = {k: bucket.get(k) for k in key}
        else:
            specs = {k: bucket for k in key}
        self.policies = {k: bucket_policy(s) for k, s in specs.items()}
        self._getters = []
        for k in key:
            self._getters.append((self.arg_names.index(k), k, defaults.get(k), self.policies[k][1]))
        self._T = None

    def _value(self, args, kwargs, idx, name, default):
        v = args[idx] if idx < len(args) else kwargs.get(name, default)
        if type(v) is int:
            return v
        if isinstance(v, self._T):
            return tuple(v.shape)
        if hasattr(v, "value") and not isinstance(v, (int, float, str)):  # tl.constexpr
            v = v.value
        return v

    def memo_key(self, args, kwargs):
        """Hot path: ``(*tensor dtypes, *bucketed key values, [device unless CPU], tp, backend option)``;
        ``key[-2]`` is the launch's TP size (`launch_tp_size`)."""
        T = self._T
        if T is None:
            T = self._T = _tensor_type()
        out = []
        first = None
        for a in args:
            if isinstance(a, T):
                out.append(a.dtype)
                if first is None:
                    first = a
        n = len(args)
        if kwargs:
            for a in kwargs.values():
                if isinstance(a, T):
                    out.append(a.dtype)
                    if first is None:
                        first = a
            tp = kwargs.get("tp")
        else:
            tp = None
        for idx, name, default, fn in self._getters:
            v = args[idx] if idx < n else kwargs.get(name, default)
            if type(v) is not int:
                v = self._value(args, kwargs, idx, name, default)
            out.append(v if fn is None else fn(v))
        if first is None or first.is_cpu:
            dev = None
        else:
            dev = first.device
            out.append(dev)
        if tp is None:
            tp = 1 if dev is None else launch_tp_size((first,), {})
        else:
            from torch_rbln.tp import check_tp

            check_tp(tp)
        out.append(tp)
        out.append(kwargs.get("backend") if kwargs else None)
        return tuple(out)

    def describe(self, args, kwargs, tp) -> tuple[str, dict, dict]:
        """`(key_text, bucket_record, exact_values)` for the store."""
        if self._T is None:
            self._T = _tensor_type()
        T = self._T
        values, exact, buckets = {}, {}, {}
        for idx, name, default, fn in self._getters:
            v = self._value(args, kwargs, idx, name, default)
            b = v if fn is None else fn(v)
            values[name] = _plain(b)
            exact[name] = _plain(v)
            buckets[name] = self.policies[name][0]
        dtypes = {}
        for name, a in zip(self.arg_names, args, strict=False):
            if isinstance(a, T):
                dtypes[name] = str(a.dtype).replace("torch.", "")
        for name, a in kwargs.items():
            if isinstance(a, T):
                dtypes[name] = str(a.dtype).replace("torch.", "")
        key = {"args": values, "dtypes": dtypes, "tp": tp}
        text = json.dumps(key, sort_keys=True, separators=(",", ":"))
        return text, buckets, exact


def _plain(v):
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return repr(v)
