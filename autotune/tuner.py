"""`@autotune` and the `Autotuner` launcher.

A launch ``kernel[grid](*args, **meta)`` computes the tuning key (the `key=` arguments bucketed, every
tensor argument's dtype, the launch's TP size, an explicit ``backend=``), looks it up in the in-process
memo (the hot path: no SQLite), then in the store, and tunes only when neither has a decision for the
current kernel source and config set.  Tuning reuses the trials already in the store for that key
(adding a config measures only the new one; configs that failed before are skipped), commits every
trial as soon as it is measured, re-times the top few fresh candidates, and picks the lowest median
(ties: the earlier config).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import sys
import threading
import time

from torch_rbln.dsl import backends as _backends

from . import bench
from .bench import Timing, counters, measure
from .configs import Config, configs_hash
from .keys import KeySpec, device_kind, hostname
from .search import Budget, budgeted, exhaustive

__all__ = ["Autotuner", "autotune", "AutotuneError", "tuning_options", "base_jit_function"]


class AutotuneError(RuntimeError):
    """No config of an autotuned kernel could run for a key."""


_overrides = threading.local()


@contextlib.contextmanager
def tuning_options(*, time_budget: float | None = None, max_trials: int | None = None,
                   retune: bool = False, warmup: float | None = None, rep: float | None = None,
                   store=None):
    """Override search budgets for tunings started in this thread (used by ``rbln-autotune warm``).
    `retune=True` ignores stored decisions and trials (measures again); `store` (a path or `Store`)
    replaces every kernel's store."""
    old = getattr(_overrides, "value", None)
    _overrides.value = {"time_budget": time_budget, "max_trials": max_trials, "retune": retune,
                        "warmup": warmup, "rep": rep, "store": store}
    try:
        yield
    finally:
        _overrides.value = old


def _override(name):
    v = getattr(_overrides, "value", None)
    return None if v is None else v.get(name)


def _consensus():
    """The cross-rank agreement of `torch_rbln.distributed` while a multi-rank rbln-ccl job runs, else
    None. Looked up in sys.modules (the rbln-ccl backend loads it), so the tuner imports nothing."""
    module = sys.modules.get("torch_rbln.distributed._consensus")
    return None if module is None else module.active()


def base_jit_function(fn):
    """The `@jit` function under any `@heuristics` / `@autotune` wrappers."""
    seen = 0
    while not hasattr(fn, "cache_key") and hasattr(fn, "fn") and seen < 16:
        fn = fn.fn
        seen += 1
    return fn


def _compiler_version(backend: str) -> str:
    import torch_rbln

    return f"torch_rbln-{torch_rbln.__version__}/{backend}"


class Autotuner:
    """An autotuned kernel.  Launch like the kernel: ``kernel[grid](*args, **meta)``."""

    def __init__(self, fn, configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None,
                 pre_hook=None, post_hook=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None,
                 *, bucket=None, search: str = "auto", max_trials: int | None = None,
                 time_budget: float | None = None, exhaustive_limit: int = 32, retime_top: int = 3,
                 name: str | None = None, store=None):
        if not configs:
            configs = [Config({})]
        self.fn = fn
        self.base_fn = base_jit_function(fn)
        self.arg_names = list(fn.arg_names)
        self.configs = [c if isinstance(c, Config) else Config(c) for c in configs]
        self._config_names = frozenset(n for c in self.configs for n in c.kwargs)
        self.keys = list(key or [])
        sig = getattr(self.base_fn, "signature", None)
        defaults = {}
        if sig is not None:
            defaults = {n: p.default for n, p in sig.parameters.items() if p.default is not inspect._empty}
        self._keyspec = KeySpec(self.arg_names, defaults, self.keys, bucket)
        self._takes_tp = "tp" in self.arg_names
        self.reset_to_zero = list(reset_to_zero or [])
        self.restore_value = list(restore_value or [])
        for n in self.reset_to_zero + self.restore_value:
            if n not in self.arg_names:
                raise ValueError(f"autotune: '{n}' in reset_to_zero/restore_value is not an argument of "
                                 f"{self.arg_names}")
        self.user_pre_hook = pre_hook
        self.user_post_hook = post_hook
        self.prune_configs_by = prune_configs_by or {}
        self.perf_model = self.prune_configs_by.get("perf_model")
        self.configs_top_k = self.prune_configs_by.get("top_k", 1.0)
        self.early_config_prune = self.prune_configs_by.get("early_config_prune")
        self.warmup_ms = 10.0 if warmup is None else float(warmup)
        self.rep_ms = 50.0 if rep is None else float(rep)
        self.use_cuda_graph = use_cuda_graph  # accepted for compatibility; no effect
        self.do_bench = do_bench
        if search not in ("auto", "exhaustive", "budgeted"):
            raise ValueError(f"search must be 'auto', 'exhaustive' or 'budgeted', got {search!r}")
        self.search = search
        self.max_trials = max_trials
        self.time_budget = time_budget
        self.exhaustive_limit = exhaustive_limit
        self.retime_top = retime_top
        self.name = name or f"{self.base_fn.__module__}:{getattr(self.base_fn, '__qualname__', '?')}"
        self._store = store
        self.cache: dict[tuple, Config] = {}
        self.best_config: Config | None = None
        self.last_decision: dict | None = None  # the decision row behind the latest tuning / store hit
        self.configs_timings: dict[Config, float | None] | None = None
        self.bench_time = 0.0
        self._tune_lock = threading.RLock()
        self._store_warned = False
        self.__name__ = getattr(self.base_fn, "__name__", self.name)
        self.__doc__ = getattr(self.base_fn, "__doc__", None)

    def __repr__(self):
        return f"Autotuner({self.name}, {len(self.configs)} configs, key={self.keys})"

    # ------------------------------------------------------------------ properties
    @property
    def cache_key(self) -> str:
        """Source hash of the kernel (its `@jit` cache key: includes called `@jit` functions)."""
        return self.base_fn.cache_key

    @property
    def src(self):
        return getattr(self.base_fn, "src", None)

    def store(self):
        from .store import Store, get_store

        s = _override("store") or self._store
        if s is None:
            return get_store()
        if isinstance(s, Store):
            return s
        return get_store(s)

    def reset(self) -> None:
        """Forget the in-process memo (the store is kept)."""
        self.cache.clear()
        self.best_config = None

    # ------------------------------------------------------------------ launch
    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def run(self, *args, grid, warmup=False, **kwargs):
        if warmup:
            return self.warmup(*args, grid=grid, **kwargs)
        if kwargs and not self._config_names.isdisjoint(kwargs):
            clash = sorted(self._config_names & set(kwargs))
            raise ValueError(f"{self.name}: conflicting meta-parameters {clash}: they are set by the "
                             f"autotune configs, do not pass them at launch")
        mk = self._keyspec.memo_key(args, kwargs)
        tp = mk[-2]
        if kwargs and "tp" in kwargs and not self._takes_tp:
            del kwargs["tp"]
        cfg = self.cache.get(mk)
        tuned = False
        if cfg is None:
            cfg, tuned = self._resolve(mk, args, kwargs, tp, grid)
        self.best_config = cfg
        full = {**kwargs, **cfg.all_kwargs()}
        if tuned and self.reset_to_zero:
            self._zero(self._nargs(args, full))
        if cfg.pre_hook is not None:
            cfg.pre_hook(self._nargs(args, full))
        return self.fn.run(*args, grid=grid, **full)

    def lookup(self, *args, **kwargs) -> Config | None:
        """The config a launch with these arguments would use, without tuning: memo, then store.
        None when the key has not been tuned (for this source and config set)."""
        mk = self._keyspec.memo_key(args, kwargs)
        cfg = self.cache.get(mk)
        if cfg is not None:
            return cfg
        kwargs.pop("grid", None)
        tp = mk[-2]
        if "tp" in kwargs and not self._takes_tp:
            del kwargs["tp"]
        candidates = self._prune(args, kwargs)
        if len(candidates) == 1:
            return candidates[0]
        ctx = self._context(args, kwargs, tp)
        cfg = self._from_store(ctx, candidates)
        if cfg is not None:
            self.cache[mk] = cfg
        return cfg

    def warmup(self, *args, grid=None, **kwargs):
        """Compile every (pruned) config for these arguments without running; returns the compiled
        kernels."""
        if not self._takes_tp:
            kwargs.pop("tp", None)
        out = []
        for cfg in self._prune(args, kwargs):
            out.append(self.fn.run(*args, grid=grid or (1,), warmup=True, **{**kwargs, **cfg.all_kwargs()}))
        return out

    # ------------------------------------------------------------------ resolution
    def _nargs(self, args, kwargs) -> dict:
        d = dict(zip(self.arg_names, args, strict=False))
        d.update(kwargs)
        return d

    def _context(self, args, kwargs, tp) -> dict:
        backend = _backends.resolve(kwargs.get("backend") or getattr(self.base_fn, "backend", None))
        key_text, buckets, exact = self._keyspec.describe(args, kwargs, tp)
        return {"kernel": self.name, "source_hash": self.cache_key, "key": key_text, "backend": backend,
                "device_kind": device_kind(args, kwargs), "tp": tp, "bucket": buckets, "launch": exact}

    def _ids(self, ctx):
        return (ctx["kernel"], ctx["source_hash"], ctx["key"], ctx["backend"], ctx["device_kind"])

    def _store_call(self, what: str, fn, default=None):
        from torch_rbln.log import get_logger

        try:
            return fn()
        except Exception as e:  # the store must never break a launch
            if not self._store_warned:
                self._store_warned = True
                get_logger("autotune").warning("autotune store %s failed for %s (%s: %s); continuing with "
                                               "in-process results", what, self.name, type(e).__name__, e)
            return default

    def _from_store(self, ctx, candidates) -> Config | None:
        if _override("retune"):
            return None
        counters["store_lookups"] += 1
        store = self.store()
        dec = self._store_call("lookup", lambda: store.lookup(*self._ids(ctx)))
        if dec is None or dec.get("configs_hash") != configs_hash(candidates):
            return None
        for c in candidates:
            if c.id == dec["config"]:
                counters["store_hits"] += 1
                self.last_decision = dec
                return c
        return None

    def _resolve(self, mk, args, kwargs, tp, grid):
        with self._tune_lock:
            cfg = self.cache.get(mk)
            if cfg is not None:
                return cfg, False
            candidates = self._prune(args, kwargs)
            if len(candidates) == 1:
                self.cache[mk] = candidates[0]
                return candidates[0], False
            ctx = self._context(args, kwargs, tp)

            def decide() -> tuple[Config, bool]:
                stored = self._from_store(ctx, candidates)
                if stored is not None:
                    return stored, False
                return self._tune(ctx, candidates, args, kwargs, grid), True

            agree = _consensus()
            cfg, tuned = decide() if agree is None else agree(self._ids(ctx), candidates, decide)
            self.cache[mk] = cfg
            return cfg, tuned

    def _prune(self, args, kwargs) -> list[Config]:
        configs = self.configs
        if self.early_config_prune is not None:
            nargs = self._nargs(args, kwargs)
            configs = list(self.early_config_prune(configs, nargs, **kwargs))
        if self.perf_model is not None and len(configs) > 1:
            top_k = self.configs_top_k
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = max(1, int(len(configs) * top_k))
            top_k = int(top_k)
            if len(configs) > top_k:
                nargs = self._nargs(args, kwargs)
                est = [(self.perf_model(**nargs, **c.all_kwargs()), i) for i, c in enumerate(configs)]
                configs = [configs[i] for _, i in sorted(est)[:top_k]]
        if not configs:
            raise AutotuneError(f"{self.name}: prune_configs_by left no config")
        return list(configs)

    # ------------------------------------------------------------------ tuning
    def _zero(self, nargs):
        for n in self.reset_to_zero:
            t = nargs.get(n)
            if t is not None:
                t.zero_()

    def _seed(self, ctx) -> int:
        return int(hashlib.sha256((ctx["kernel"] + ctx["key"]).encode()).hexdigest()[:8], 16)

    def _tune(self, ctx, candidates, args, kwargs, grid) -> Config:
        from torch_rbln.dsl.errors import LaunchError

        counters["tunings"] += 1
        store = self.store()
        t_start = time.perf_counter()
        self._store_call("write", lambda: store.record_kernel(self.name, ctx["source_hash"],
                                                               getattr(self.base_fn, "filename", None)))
        retune = bool(_override("retune"))
        existing = {} if retune else self._store_call("read", lambda: store.trials_for(*self._ids(ctx)), {})
        known: dict[int, float | None] = {}
        rows: dict[int, dict] = {}
        for i, c in enumerate(candidates):
            row = existing.get(c.id)
            if row is not None:
                rows[i] = row
                known[i] = row["median_us"] if row["status"] == "ok" else None
        existing_idx = set(known)

        if len(known) == len(candidates) and all(m is None for m in known.values()):
            # the negative cache is trusted only while some config works: retry them all
            known.clear()
            existing_idx.clear()
        n_reused = len(known)
        nargs = self._nargs(args, kwargs)
        saved = {n: nargs[n].clone() for n in self.restore_value if nargs.get(n) is not None}
        warmup_ms = _override("warmup") or self.warmup_ms
        rep_ms = _override("rep") or self.rep_ms

        def default_pre():
            for n, t in saved.items():
                nargs[n].copy_(t)
            self._zero(nargs)

        fresh: dict[int, list[float]] = {}

        def bench_config(i: int) -> list[float]:
            cfg = candidates[i]
            kw = {**kwargs, **cfg.all_kwargs()}
            full = {**nargs, **kw}

            def before():
                if self.user_pre_hook is not None:
                    self.user_pre_hook(full)
                else:
                    default_pre()
                if cfg.pre_hook is not None:
                    cfg.pre_hook(full)

            after = None
            if self.user_post_hook is not None:
                def after(exc):
                    self.user_post_hook(full, exc)

            run = lambda: self.fn.run(*args, grid=grid, **kw)  # noqa: E731
            if self.do_bench is not None:
                before()
                ms = self.do_bench(run)
                ms = ms[0] if isinstance(ms, (list, tuple)) else ms
                return [float(ms) * 1e3]
            return measure(run, warmup_ms=warmup_ms, rep_ms=rep_ms, before=before, after=after)

        def measure_one(i: int) -> float | None:
            cfg = candidates[i]
            counters["benchmarks"] += 1
            kw = {**kwargs, **cfg.all_kwargs()}
            status, error, samples = "ok", None, []
            try:
                self.fn.run(*args, grid=grid, warmup=True, **kw)
            except LaunchError:
                raise
            except Exception as e:
                status, error = "compile_error", f"{type(e).__name__}: {e}"
            if status == "ok":
                try:
                    samples = bench_config(i)
                except LaunchError:
                    raise
                except Exception as e:
                    status, error = "runtime_error", f"{type(e).__name__}: {e}"
            if status != "ok":
                counters["failures"] += 1
                from torch_rbln.log import get_logger

                get_logger("autotune").info("%s: config %s failed for key %s (%s); recorded and skipped",
                                            self.name, cfg, ctx["key"], error)
            else:
                fresh[i] = samples
            row = self._trial_row(ctx, cfg, status, error, samples)
            rows[i] = row
            self._store_call("write", lambda: store.record_trial(row))
            return row["median_us"]

        budget = Budget(_override("max_trials") or self.max_trials,
                        _override("time_budget") or self.time_budget)
        use_exhaustive = self.search == "exhaustive" or (
            self.search == "auto" and len(candidates) <= self.exhaustive_limit and not budget.limited)
        try:
            if use_exhaustive:
                exhaustive(candidates, known, measure_one, budget)
            else:
                budgeted(candidates, known, measure_one, budget, seed=self._seed(ctx))
            # a budget spent before anything ran: measure in config order until one config works
            for i in range(len(candidates)):
                if any(m is not None for m in known.values()):
                    break
                if i not in known:
                    known[i] = measure_one(i)
            # re-time the best few of this session's measurements before deciding
            ranked = sorted((known[i], i) for i in fresh if known.get(i) is not None)
            if self.retime_top > 1 and len(ranked) >= 2 and self.do_bench is None:
                for _, i in ranked[: self.retime_top]:
                    counters["retimes"] += 1
                    try:
                        more = bench_config(i)
                    except Exception:  # it ran before: treat a flaky failure as no extra data
                        continue
                    fresh[i] = fresh[i] + more
                    row = self._trial_row(ctx, candidates[i], "ok", None, fresh[i])
                    rows[i] = row
                    known[i] = row["median_us"]
                    self._store_call("write", lambda row=row: store.record_trial(row))
        finally:
            if saved or self.reset_to_zero:
                default_pre()
        self.bench_time = time.perf_counter() - t_start
        self.configs_timings = {candidates[i]: m for i, m in known.items()}
        ok = [(m, i) for i, m in known.items() if m is not None]
        if not ok:
            # nothing ran: more likely a problem of the launch (arguments, device, backend) than of every
            # config, so this session's failures are not kept as a negative cache
            session = [candidates[i].id for i in known if i not in existing_idx]
            self._store_call("write", lambda: store.delete_trials(*self._ids(ctx), session))
            errors = "; ".join(f"{candidates[i]}: {rows[i].get('error')}" for i in sorted(rows))
            raise AutotuneError(f"{self.name}: no config ran for key {ctx['key']}: {errors}")
        best_median, best_i = min(ok)
        best = candidates[best_i]
        decision = {
            "kernel": ctx["kernel"], "source_hash": ctx["source_hash"], "key": ctx["key"],
            "backend": ctx["backend"], "device_kind": ctx["device_kind"], "tp": ctx["tp"], "config": best.id,
            "configs_hash": configs_hash(candidates), "bucket": json.dumps(ctx["bucket"], sort_keys=True),
            "launch": json.dumps(ctx["launch"], sort_keys=True), "median_us": best_median,
            "iqr_us": rows[best_i].get("iqr_us"), "candidates": len(candidates), "measured": len(known),
            "compiler": _compiler_version(ctx["backend"]), "host": hostname(), "created_at": time.time(),
        }
        self._store_call("write", lambda: store.record_decision(decision))
        self.last_decision = decision
        from torch_rbln.log import get_logger

        get_logger("autotune").info(
            "%s: tuned key %s in %.2fs: %s (median %.1f us; %d of %d configs measured now)", self.name,
            ctx["key"], self.bench_time, best, best_median, len(known) - n_reused, len(candidates))
        return best

    def _trial_row(self, ctx, cfg: Config, status, error, samples) -> dict:
        row = {
            "kernel": ctx["kernel"], "source_hash": ctx["source_hash"], "key": ctx["key"],
            "backend": ctx["backend"], "device_kind": ctx["device_kind"], "config": cfg.id, "tp": ctx["tp"],
            "num_warps": cfg.num_warps, "num_stages": cfg.num_stages, "status": status, "error": error,
            "samples": len(samples), "compiler": _compiler_version(ctx["backend"]), "host": hostname(),
            "created_at": time.time(),
        }
        if samples:
            t = Timing.from_samples(samples)
            row.update(median_us=t.median, mean_us=t.mean, min_us=t.min, max_us=t.max, p10_us=t.p10,
                       p25_us=t.p25, p75_us=t.p75, p90_us=t.p90, iqr_us=t.iqr, mad_us=t.mad,
                       samples_json=json.dumps([round(x, 3) for x in samples[:1000]]))
        else:
            row["median_us"] = None
        return row


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, pre_hook=None,
             post_hook=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None, cache_results=False,
             **options):
    """Decorator (Triton's `triton.autotune`) over a `@jit` kernel or a `@heuristics` kernel.

    `configs`: list of `Config`; `key`: argument names whose values (bucketed by `bucket=`) select the
    tuned config, with every tensor argument's dtype and the launch TP size always added.
    `prune_configs_by`: ``{"perf_model": f, "top_k": k, "early_config_prune": g}``.
    `reset_to_zero` / `restore_value`: argument names zeroed / restored around benchmark runs.
    `pre_hook(nargs)` / `post_hook(nargs, exception)`: replace the default reset/restore around runs.
    `warmup` / `rep`: milliseconds of warm-up and of timed repetitions per config (default 10 / 50).
    `cache_results`: Triton's switch for keeping decisions on disk; accepted, and always in effect here
    (every decision is kept in the SQLite store).  `use_cuda_graph`: accepted, no effect.

    rbln extensions (keyword only): `bucket` ("exact", "pow2", a callable, or a dict per key name),
    `search` ("auto", "exhaustive", "budgeted"), `max_trials`, `time_budget` (seconds),
    `exhaustive_limit` (auto search: exhaustive up to this many configs), `retime_top`, `name` (the
    kernel's name in the store; default ``module:qualname``), `store` (a path or `Store`).
    """

    def deco(fn):
        return Autotuner(fn, configs, key, prune_configs_by=prune_configs_by, reset_to_zero=reset_to_zero,
                         restore_value=restore_value, pre_hook=pre_hook, post_hook=post_hook, warmup=warmup,
                         rep=rep, use_cuda_graph=use_cuda_graph, do_bench=do_bench, **options)

    return deco


# re-exported for tests
reset_counters = bench.reset_counters
