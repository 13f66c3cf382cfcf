"""``rbln-autotune``: warm, inspect, prune, export and merge the autotune database.

Usage (``--db PATH`` anywhere selects the database; default ``TORCH_RBLN_AUTOTUNE_DB``)::

    rbln-autotune warm MANIFEST.json [--jobs N] [--time-budget SECONDS] [--force] [--kernel NAME]
    rbln-autotune list [--kernel NAME] [--json]
    rbln-autotune show KERNEL [--json]
    rbln-autotune stats [--json]
    rbln-autotune prune [--older-than 30d] [--keep-best-only] [--failed] [--keep-stale] [--dry-run]
    rbln-autotune export [-o FILE] [--kernel NAME]
    rbln-autotune import FILE
    rbln-autotune clear [--kernel NAME]
    rbln-autotune precompile [--dtypes float32,float16,bfloat16] [--ops NAME,...] [--manifest FILE] [--jobs N]

`warm` tunes every launch of a manifest (format: `torch_rbln.autotune.manifest`), in ``--jobs`` worker
processes, with a progress bar and a summary table (under torchrun, each rank tunes every WORLD_SIZE-th
launch on rbln:LOCAL_RANK and rank 0 merges all ranks' results into the database and reports);
`--time-budget` bounds each key's search.  `prune` removes stale source hashes (every hash of a kernel but
the most recently tuned one) unless ``--keep-stale``, plus what its options select.  `import` merges an
export: for the same trial or decision on the same device kind the faster measurement is kept, and decisions
that disagree are listed as conflicts.  Exit status: 0 success, 1 errors while working (failed launches,
unknown kernel, database not writable), 2 bad arguments or a malformed manifest / import file.
`precompile` compiles the op library's kernels for the given dtypes and every config of a manifest's
launches on all cores into the kernel cache (`torch_rbln.autotune.precompile`), so that first runs, test
suites and tuning do not wait for numba.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

__all__ = ["main", "build_parser"]


class CLIError(Exception):
    """A user-facing failure: printed as one line, exit status `code` (2: bad input file or argument)."""

    def __init__(self, msg: str, code: int = 1):
        super().__init__(msg)
        self.code = code


# ----------------------------------------------------------------------------------------- formatting
def _console():
    from rich.console import Console

    width = None if sys.stdout.isatty() else 200
    return Console(width=width, highlight=False, soft_wrap=False)


def fmt_config(text: str | None) -> str:
    if not text:
        return "-"
    try:
        d = json.loads(text)
    except ValueError:
        return text
    parts = [f"{k}={v}" for k, v in d.get("kwargs", {}).items()]
    parts += [f"{k}={v}" for k, v in d.items() if k != "kwargs"]
    return ", ".join(parts) or "(default)"


def fmt_key(text: str) -> str:
    try:
        d = json.loads(text)
    except ValueError:
        return text
    args = ", ".join(f"{k}={v}" for k, v in d.get("args", {}).items())
    dtypes = ",".join(sorted(set(d.get("dtypes", {}).values()))) or "-"
    return f"{args or '-'} | {dtypes} | tp={d.get('tp', 1)}"


def fmt_us(v) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}" if v < 1e5 else f"{v / 1e3:,.1f}k"


def fmt_age(t) -> str:
    if not t:
        return "-"
    s = max(0.0, time.time() - t)
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= n:
            return f"{s / n:.0f}{unit} ago"
    return f"{s:.0f}s ago"


def _table(title, columns):
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold", justify="right" if c in _NUMERIC else "left")
    return t


_NUMERIC = {"median us", "iqr us", "mad us", "p10 us", "p90 us", "samples", "trials", "benchmarks", "seconds",
            "#", "rows"}


def parse_duration(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text or "")
    if not m:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: expected a number with an optional "
                                         "unit s, m, h, d or w (e.g. 30d, 12h, 90m)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return v


# ----------------------------------------------------------------------------------------- store access
def _store(args, *, write: bool = False):
    """The store named by --db / TORCH_RBLN_AUTOTUNE_DB; read-only unless the command writes, so that
    list/show/stats/export never create, repair or rename anything."""
    from .store import Store, StoreError, describe_foreign, inspect_file

    path = args.db
    if path is None:
        from torch_rbln import config

        path = config.get("TORCH_RBLN_AUTOTUNE_DB")
    s = Store(path, read_only=not write)
    if write:
        kind = inspect_file(path) if path != ":memory:" and not os.path.isdir(path) else "ours"
        if kind in ("foreign", "sqlite"):
            raise CLIError(describe_foreign(path, kind), 2)
        try:
            s._run(lambda conn: None, write=True)
        except Exception as e:
            raise CLIError(f"cannot open {path} for writing: {e}") from None
        if s.degraded:
            raise CLIError(f"cannot write {path}: {s.degraded}")
    else:
        try:
            s._open()
        except StoreError as e:
            raise CLIError(str(e), 2) from None
    return s


def _match_kernel(store, name: str) -> str:
    names = sorted({r["name"] for r in store.kernels()} | {r["kernel"] for r in store.decisions()})
    if name in names:
        return name
    hits = [n for n in names if n.endswith(":" + name) or n.endswith("." + name) or n.split(":")[-1] == name]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise CLIError(f"kernel name {name!r} is ambiguous: {', '.join(hits)}")
    known = ", ".join(names) if names else "none"
    raise CLIError(f"no kernel {name!r} in {store.path} (known kernels: {known})")


# ----------------------------------------------------------------------------------------- commands
def _decision_id(row: dict) -> tuple:
    return (row["kernel"], row["source_hash"], row["key"], row["backend"], row["device_kind"])


def _decoded(value):
    """A JSON text column as the value it encodes (the key, config, bucket and launch columns)."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _close_calls(store, decisions: list[dict]) -> dict[tuple, str]:
    """Decisions whose winner is within the measured noise of the runner-up: decision id -> runner-up
    config. Noise is the larger interquartile range of the two; such a decision could flip on a rerun
    (or differ between machines), which matters when ranks must agree."""
    trials: dict[tuple, list[dict]] = {}
    for t in store.query("SELECT kernel, source_hash, key, backend, device_kind, config, median_us, iqr_us "
                         "FROM trials WHERE status='ok' AND median_us IS NOT NULL"):
        trials.setdefault(_decision_id(t), []).append(t)
    close = {}
    for d in decisions:
        ranked = sorted(trials.get(_decision_id(d), []), key=lambda t: t["median_us"])
        best = next((t for t in ranked if t["config"] == d["config"]), None)
        others = [t for t in ranked if t["config"] != d["config"]]
        if best is None or not others:
            continue
        runner_up = others[0]
        noise = max(best["iqr_us"] or 0.0, runner_up["iqr_us"] or 0.0)
        if runner_up["median_us"] - best["median_us"] <= noise:
            close[_decision_id(d)] = runner_up["config"]
    return close


def cmd_list(args) -> int:
    store = _store(args)
    kernel = _match_kernel(store, args.kernel) if args.kernel else None
    rows = store.decisions(kernel)
    current = store.current_hashes()
    counts = {}
    for t in store.query("SELECT kernel, source_hash, key, backend, device_kind, COUNT(*) AS n FROM trials "
                         "GROUP BY kernel, source_hash, key, backend, device_kind"):
        counts[(t["kernel"], t["source_hash"], t["key"], t["backend"], t["device_kind"])] = t["n"]
    close = _close_calls(store, rows)
    if args.json:
        for r in rows:
            r["stale"] = current.get(r["kernel"]) != r["source_hash"]
            runner_up = close.get(_decision_id(r))
            r["within_noise_of"] = runner_up
            for field in ("key", "config", "bucket", "launch"):
                r[field] = _decoded(r.get(field))
        print(json.dumps(rows, indent=2))
        return 0
    con = _console()
    if not rows:
        con.print(f"no tuned keys in {store.path}")
        return 0
    t = _table(f"{len(rows)} tuned keys in {store.path}",
               ["kernel", "key (args | dtypes | tp)", "best config", "median us", "iqr us", "trials",
                "backend", "device", "tuned"])
    for r in rows:
        stale = " (stale)" if current.get(r["kernel"]) != r["source_hash"] else ""
        n = counts.get((r["kernel"], r["source_hash"], r["key"], r["backend"], r["device_kind"]), 0)
        runner_up = close.get(_decision_id(r))
        best = fmt_config(r["config"]) + (f" (within noise of {fmt_config(runner_up)})" if runner_up else "")
        t.add_row(r["kernel"] + stale, fmt_key(r["key"]), best, fmt_us(r["median_us"]),
                  fmt_us(r["iqr_us"]), str(n), r["backend"], r["device_kind"],
                  f"{fmt_age(r['created_at'])} on {r['host']}")
    con.print(t)
    return 0


def cmd_show(args) -> int:
    store = _store(args)
    kernel = _match_kernel(store, args.kernel)
    trials = store.trials(kernel)
    decisions = {(d["source_hash"], d["key"], d["backend"], d["device_kind"]): d
                 for d in store.decisions(kernel)}
    current = store.current_hashes().get(kernel)
    groups: dict[tuple, list] = {}
    for t in trials:
        groups.setdefault((t["source_hash"], t["key"], t["backend"], t["device_kind"]), []).append(t)
    for g in groups.values():
        g.sort(key=lambda t: (t["status"] != "ok", t["median_us"] if t["median_us"] is not None else 0.0))
    if args.json:
        out = []
        for (h, key, backend, dev), g in groups.items():
            d = decisions.get((h, key, backend, dev))
            for t in g:
                t.pop("samples_json", None)
            out.append({"kernel": kernel, "source_hash": h, "stale": h != current, "key": json.loads(key),
                        "backend": backend, "device_kind": dev, "best": d["config"] if d else None,
                        "trials": g})
        print(json.dumps(out, indent=2))
        return 0
    con = _console()
    if not groups:
        con.print(f"{kernel}: no trials")
        return 0
    for (h, key, backend, dev), g in groups.items():
        d = decisions.get((h, key, backend, dev))
        title = (f"{kernel}  key {fmt_key(key)}  [{backend} on {dev}]  source {h[:12]}"
                 f"{' (stale)' if h != current else ''}")
        t = _table(title, ["#", "config", "status", "median us", "iqr us", "mad us", "p10 us", "p90 us",
                           "samples", "error"])
        for i, r in enumerate(g, 1):
            best = d is not None and d["config"] == r["config"]
            err = (r["error"] or "").strip().splitlines()
            t.add_row(f"{'*' if best else ''}{i}", fmt_config(r["config"]), r["status"],
                      fmt_us(r["median_us"]), fmt_us(r["iqr_us"]), fmt_us(r["mad_us"]), fmt_us(r["p10_us"]),
                      fmt_us(r["p90_us"]),
                      str(r["samples"] or 0), err[-1][:80] if err else "")
        con.print(t)
    con.print("* = decision (best config)")
    return 0


def cmd_stats(args) -> int:
    store = _store(args)
    s = store.stats()
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    con = _console()
    t = _table(f"autotune database {s['path']}", ["what", "value"])
    for k, v in s.items():
        if k == "path":
            continue
        t.add_row(k.replace("_", " "), ", ".join(v) if isinstance(v, list) else str(v))
    con.print(t)
    return 0


def cmd_prune(args) -> int:
    store = _store(args, write=True)
    counts = store.prune(stale=not args.keep_stale, older_than=args.older_than,
                         keep_best_only=args.keep_best_only, failed=args.failed, dry_run=args.dry_run)
    if args.json:
        print(json.dumps({"dry_run": args.dry_run, **counts}, indent=2))
        return 0
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb}: {counts['decisions']} decisions, {counts['trials']} trials, "
          f"{counts['kernels']} kernel source hashes")
    return 0


def cmd_clear(args) -> int:
    store = _store(args, write=True)
    kernel = _match_kernel(store, args.kernel) if args.kernel else None
    if not args.yes:
        what = f"every entry of kernel {kernel}" if kernel else "every tuning result"
        if not sys.stdin.isatty():
            raise CLIError(f"refusing to remove {what} from {store.path} without confirmation: pass --yes", 2)
        answer = input(f"remove {what} from {store.path}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return 1
    counts = store.clear(kernel)
    if args.json:
        print(json.dumps({"kernel": kernel, **counts}, indent=2))
        return 0
    print(f"removed: {counts['decisions']} decisions, {counts['trials']} trials, {counts['kernels']} kernel "
          f"source hashes{' of ' + kernel if kernel else ''}")
    return 0


def cmd_export(args) -> int:
    store = _store(args)
    kernel = _match_kernel(store, args.kernel) if args.kernel else None
    data = store.export(kernel)
    text = json.dumps(data, indent=1, sort_keys=True)
    if args.output and args.output != "-":
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        except OSError as e:
            raise CLIError(f"cannot write {args.output}: {e.strerror or e}") from None
        print(f"exported {len(data['decisions'])} decisions and {len(data['trials'])} trials to "
              f"{args.output}", file=sys.stderr)
    else:
        print(text)
    return 0


def cmd_import(args) -> int:
    try:
        with open(args.file, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise CLIError(f"cannot read {args.file}: {e.strerror or e}", 2) from None
    except UnicodeDecodeError as e:
        raise CLIError(f"{args.file}: not UTF-8 text (invalid byte at offset {e.start}); an export is "
                       "the JSON that `rbln-autotune export` writes", 2) from None
    except json.JSONDecodeError as e:
        raise CLIError(f"{args.file}:{e.lineno}: invalid JSON (column {e.colno}): {e.msg}", 2) from None
    except RecursionError:
        raise CLIError(f"{args.file}: JSON nested too deeply to be an autotune export", 2) from None
    from .store import validate_export

    try:
        validate_export(data)
    except ValueError as e:
        raise CLIError(f"{args.file}: {e}", 2) from None
    store = _store(args, write=True)
    r = store.import_(data)
    if args.json:
        print(json.dumps({"file": args.file, **r}, indent=2, default=str))
        return 0
    print(f"imported {args.file}: decisions {r['decisions_added']} added, {r['decisions_updated']} replaced "
          f"by faster, {r['decisions_kept']} kept; trials {r['trials_added']} added, {r['trials_updated']} "
          f"replaced by faster, {r['trials_kept']} kept; {len(r['conflicts'])} conflicts")
    if r["conflicts"]:
        con = _console()
        t = _table("conflicts (same key, different best config)",
                   ["kernel", "key", "device", "local", "imported", "kept"])
        for c in r["conflicts"]:
            t.add_row(c["kernel"], fmt_key(c["key"]), c["device_kind"],
                      f"{fmt_config(c['local']['config'])} ({fmt_us(c['local']['median_us'])} us)",
                      f"{fmt_config(c['imported']['config'])} ({fmt_us(c['imported']['median_us'])} us)",
                      c["kept"])
        con.print(t)
    return 0


# ----------------------------------------------------------------------------------------- warm
_worker_manifests: dict = {}


def _worker_init(sys_path):
    for p in reversed(sys_path):
        if p not in sys.path:
            sys.path.insert(0, p)


def warm_one(manifest_path: str, launch_id: tuple, db: str, time_budget, retune: bool) -> dict:
    """Tune one launch of a manifest (runs in a worker process or in-process)."""
    from .bench import counters
    from .manifest import load_manifest, resolve_kernel
    from .tuner import Autotuner, tuning_options

    m = _worker_manifests.get(manifest_path)
    if m is None:
        m = _worker_manifests[manifest_path] = load_manifest(manifest_path)
    launch = next(x for x in m.launches if x.id == tuple(launch_id))
    result = {"kernel": launch.kernel_ref, "launch": launch.label, "status": "error", "config": None,
              "median_us": None, "iqr_us": None, "benchmarks": 0, "seconds": 0.0, "error": None}
    before = dict(counters)
    t0 = time.perf_counter()
    try:
        kernel = resolve_kernel(launch.kernel_ref)
        tuner = kernel
        while not isinstance(tuner, Autotuner):
            tuner = tuner.fn
        args, kwargs, grid = launch.build()
        with tuning_options(time_budget=time_budget, retune=retune, store=db):
            tuner.reset()
            kernel[grid](*args, **kwargs)
        result["status"] = "tuned" if counters["tunings"] > before["tunings"] else "cached"
        result["config"] = tuner.best_config.id if tuner.best_config is not None else None
        d = tuner.last_decision or {}
        if d.get("config") == result["config"]:
            result["median_us"], result["iqr_us"] = d.get("median_us"), d.get("iqr_us")
    except Exception as e:
        msg = str(e).strip().splitlines()
        result["error"] = f"{type(e).__name__}: {msg[-1] if msg else ''}"
    result["benchmarks"] = counters["benchmarks"] - before["benchmarks"]
    result["seconds"] = time.perf_counter() - t0
    return result


def _torchrun_ranks() -> tuple[int, int] | None:
    """(rank, world size) when started by torchrun (or anything setting RANK and WORLD_SIZE) with more
    than one rank; None for a plain run."""
    from torch_rbln import config

    ranks = config.launcher_ranks()
    return (ranks.rank, ranks.world_size) if ranks.world_size > 1 else None


def _share_of(launches: list, db: str, rank: int, world: int) -> tuple[list, str]:
    """This rank's launches (every world-th, from its rank) and its own database file, which rank 0
    merges into `db` afterwards (ranks may run on other hosts, and apart they never wait on one
    file's write lock). The rank's logical device is rbln:LOCAL_RANK, as in any rbln-ccl job."""
    import torch.distributed as dist

    from torch_rbln.distributed import bind_local_device

    bind_local_device()
    # gloo, not rbln-ccl: only results travel, and ranks tune different keys, so they must not wait
    # for each other's decisions as rbln-ccl's autotune agreement would have them.
    dist.init_process_group("gloo")
    own = f"{db}.rank{rank}"
    for suffix in ("", "-wal", "-shm", "-journal"):  # left by a run that died
        if os.path.exists(own + suffix):
            os.remove(own + suffix)
    return launches[rank::world], own


def _gather_ranks(results: list, own_db: str, args) -> tuple[list | None, str]:
    """Rank 0: every rank's results, and their trials and decisions merged into the database (imported
    like an export); (results, database). Other ranks: (None, ...) once they have sent theirs."""
    import torch.distributed as dist

    from .store import Store

    store = Store(own_db)
    try:
        mine = (results, store.export())
    finally:
        store.close()
    gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(mine, gathered, dst=0)
    dist.destroy_process_group()
    for suffix in ("", "-wal", "-shm", "-journal"):  # SQLite's side files too
        if os.path.exists(own_db + suffix):
            os.remove(own_db + suffix)
    if gathered is None:
        return None, own_db
    target = _store(args, write=True)
    try:
        for _, data in gathered:
            target.import_(data)
        db = target.path
    finally:
        target.close()
    return [r for rank_results, _ in gathered for r in rank_results], db


def cmd_warm(args) -> int:
    from .manifest import ManifestError, load_manifest

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        manifest = load_manifest(args.manifest)
    except ManifestError as e:
        raise CLIError(f"malformed manifest: {e}", 2) from None
    launches = manifest.launches
    if args.kernel:
        launches = [x for x in launches
                    if x.kernel_ref == args.kernel or x.kernel_ref.endswith(":" + args.kernel)]
        if not launches:
            raise CLIError(f"no launch of kernel {args.kernel!r} in {args.manifest}")
    on_cpu = sum(1 for launch in launches if launch.device == "cpu")
    if on_cpu:
        print(f"rbln-autotune warm: warning: {on_cpu} of {len(launches)} launches run on the CPU (their "
              "\"device\" is \"cpu\" or not given); decisions are per device kind, so add \"device\": "
              "\"rbln\" to a launch to tune it for the NPU", file=sys.stderr)
    store = _store(args, write=True)
    db = store.path
    store.close()
    ranks = _torchrun_ranks()
    every_launch = launches
    if ranks is not None:
        launches, db = _share_of(launches, db, *ranks)
    results = []
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err_console = Console(stderr=True)
    columns = [TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn()]
    with Progress(*columns, console=err_console, transient=False, disable=args.quiet) as progress:
        task = progress.add_task(f"tuning {len(launches)} launches", total=len(launches))
        if args.jobs == 1:
            for launch in launches:
                progress.update(task, description=f"{launch.kernel_ref} [{launch.label}]")
                results.append(warm_one(args.manifest, launch.id, db, args.time_budget, args.force))
                progress.advance(task)
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=args.jobs, mp_context=ctx, initializer=_worker_init,
                                     initargs=(list(sys.path),)) as pool:
                futures = {pool.submit(warm_one, os.path.abspath(args.manifest), launch.id, db,
                                       args.time_budget, args.force): launch for launch in launches}
                for fut in as_completed(futures):
                    launch = futures[fut]
                    try:
                        results.append(fut.result())
                    except Exception as e:  # a worker died
                        results.append({"kernel": launch.kernel_ref, "launch": launch.label,
                                        "status": "error", "config": None, "median_us": None,
                                        "iqr_us": None, "benchmarks": 0, "seconds": 0.0,
                                        "error": f"{type(e).__name__}: {e}"})
                    progress.advance(task)
        progress.update(task, description=f"tuned {len(launches)} launches")
    if ranks is not None:
        results, db = _gather_ranks(results, db, args)
        if results is None:
            return 0  # not rank 0: rank 0 reports for every rank
        launches = every_launch
    order = {(x.kernel_ref, x.label): i for i, x in enumerate(launches)}
    results.sort(key=lambda r: order.get((r["kernel"], r["launch"]), 0))
    if args.json_summary:
        with open(args.json_summary, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    n_err = sum(r["status"] == "error" for r in results)
    if args.json:
        print(json.dumps(results, indent=2))
        return 1 if n_err else 0
    con = _console()
    t = _table(f"warm {args.manifest} -> {db}", ["kernel", "launch", "status", "best config", "median us",
                                                 "iqr us", "benchmarks", "seconds"])
    for r in results:
        t.add_row(r["kernel"], r["launch"], r["status"] if r["status"] != "error" else f"error: {r['error']}",
                  fmt_config(r["config"]), fmt_us(r["median_us"]), fmt_us(r["iqr_us"]), str(r["benchmarks"]),
                  f"{r['seconds']:.2f}")
    con.print(t)
    n_tuned = sum(r["status"] == "tuned" for r in results)
    con.print(f"{len(results)} launches: {n_tuned} tuned, {len(results) - n_tuned - n_err} already tuned, "
              f"{n_err} errors; {sum(r['benchmarks'] for r in results)} configs benchmarked")
    return 1 if n_err else 0


# ----------------------------------------------------------------------------------------- precompile
_PRECOMPILE_ENV = {"TORCH_RBLN_COMPILE": "sync",  # a worker compiles; it never hands kernels on
                   "TORCH_RBLN_DSL_BACKEND": "numba"}  # what there is to compile ahead of time


def _precompile_worker_init(sys_path):
    _worker_init(sys_path)
    os.environ.update(_PRECOMPILE_ENV)
    from torch_rbln.dsl.backends.numba_backend import executable

    executable._announced[0] = True  # the progress bar says what is compiling


def cmd_precompile(args) -> int:
    from . import precompile

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()] if args.dtypes else []
    unknown = [d for d in dtypes if d not in precompile.DTYPES]
    if unknown:
        raise CLIError(f"unknown dtype {unknown[0]!r} in --dtypes (expected a comma-separated list of: "
                       f"{', '.join(precompile.DTYPES)})", 2)
    items = precompile.op_items(dtypes) if not args.no_ops else []
    if args.ops:
        wanted = {name.strip() for name in args.ops.split(",") if name.strip()}
        known = {item[1] for item in items}
        missing = sorted(wanted - known)
        if missing:
            raise CLIError(f"no op-library entry {missing[0]!r} with OpInfo samples (see "
                           "torch_rbln.registry.table.TABLE)", 2)
        items = [item for item in items if item[1] in wanted]
    for path in args.manifest or []:
        from .manifest import ManifestError

        try:
            items += precompile.manifest_items(os.path.abspath(path))
        except ManifestError as e:
            raise CLIError(f"malformed manifest: {e}", 2) from None
    if not items:
        raise CLIError("nothing to compile: give --dtypes and/or --manifest", 2)
    jobs = args.jobs or os.cpu_count() or 1
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from torch_rbln.dsl.backends.numba_backend.executable import _cache_root

    results = []
    began = time.perf_counter()
    columns = [TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn()]
    with Progress(*columns, console=Console(stderr=True), disable=args.quiet) as progress:
        task = progress.add_task(f"compiling {len(items)} items on {jobs} processes", total=len(items))
        if jobs == 1:
            saved = {name: os.environ.get(name) for name in _PRECOMPILE_ENV}
            try:
                _precompile_worker_init(list(sys.path))
                for item in items:
                    progress.update(task, description=precompile.describe(item))
                    results.append(precompile.precompile_one(item))
                    progress.advance(task)
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_precompile_worker_init,
                                     initargs=(list(sys.path),)) as pool:
                futures = {pool.submit(precompile.precompile_one, item): item for item in items}
                for future in as_completed(futures):
                    try:
                        results.append(future.result())
                    except Exception as e:  # a worker died
                        results.append({"item": precompile.describe(futures[future]), "seconds": 0.0,
                                        "compiles": 0, "error": f"{type(e).__name__}: {e}"})
                    progress.update(task, description=results[-1]["item"])
                    progress.advance(task)
        progress.update(task, description=f"compiled {len(items)} items")
    wall = time.perf_counter() - began
    errors = [r for r in results if r["error"]]
    summary = {"items": len(results), "compiles": sum(r["compiles"] for r in results), "errors": len(errors),
               "seconds": wall, "jobs": jobs, "cache": _cache_root()}
    if args.json:
        print(json.dumps({"summary": summary, "results": results}, indent=2))
        return 1 if errors else 0
    con = _console()
    for r in errors:
        con.print(f"error: {r['item']}: {r['error']}")
    con.print(f"{summary['items']} items, {summary['compiles']} kernels compiled ({len(errors)} errors) in "
              f"{wall:.1f} s on {jobs} processes; cached in {summary['cache']}")
    return 1 if errors else 0


# ----------------------------------------------------------------------------------------- parser
def _version() -> str:
    from torch_rbln import __version__

    return __version__


def _manifest_format(module) -> str:
    """The manifest format section of the manifest module's docstring, for `warm --help`."""
    doc = module.__doc__ or ""
    start = doc.find("A manifest is a JSON file")
    return "\n\n" + doc[start:].strip() if start >= 0 else ""


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS, metavar="PATH",
                        help="autotune database (default: $TORCH_RBLN_AUTOTUNE_DB)")
    p = argparse.ArgumentParser(prog="rbln-autotune", description="Warm, inspect and merge the torch-rbln "
                                "autotune database.", parents=[common])
    p.add_argument("--version", action="version", version=f"%(prog)s (torch-rbln {_version()})")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    from . import manifest as manifest_module

    w = sub.add_parser("warm", parents=[common], help="tune every launch of a manifest",
                       description="Tune every launch of a manifest." + _manifest_format(manifest_module),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    w.add_argument("manifest", help="JSON manifest (see torch_rbln.autotune.manifest)")
    w.add_argument("--jobs", "-j", type=_positive_int, default=1, help="worker processes (default 1)")
    w.add_argument("--time-budget", type=_positive_float, default=None, metavar="SECONDS",
                   help="search budget per tuned key")
    w.add_argument("--force", action="store_true", help="re-measure keys that are already tuned")
    w.add_argument("--kernel", help="only the launches of this kernel (module:attribute or attribute)")
    w.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    w.add_argument("--json-summary", metavar="FILE", help="also write the summary rows to FILE")
    w.add_argument("--json", action="store_true", help="print the result as JSON")
    w.set_defaults(func=cmd_warm)

    pc = sub.add_parser("precompile", parents=[common],
                        help="compile the op library's (and manifests') kernels ahead of time, on all cores",
                        description="Compile the op library's kernels for the given dtypes (as its OpInfo "
                        "samples launch them) and every config of every launch of the given manifests, in "
                        "parallel worker processes, into numba's cache under TORCH_RBLN_CACHE_DIR (copy "
                        "its kernels/ directory to identical hosts to ship it).")
    pc.add_argument("--dtypes", default="float32",
                    help="comma-separated op-library dtypes: float32, float16, bfloat16 (default float32)")
    pc.add_argument("--manifest", action="append", metavar="FILE",
                    help="also compile every config of this autotune manifest's launches (repeatable)")
    pc.add_argument("--ops", metavar="NAME,...", help="only these op-library entries (e.g. add.Tensor)")
    pc.add_argument("--no-ops", action="store_true", help="only the manifests' kernels")
    pc.add_argument("--jobs", "-j", type=_positive_int, default=None,
                    help="worker processes (default: one per core)")
    pc.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    pc.add_argument("--json", action="store_true", help="print the result as JSON")
    pc.set_defaults(func=cmd_precompile)

    ls = sub.add_parser("list", parents=[common], help="tuned keys and their best configs")
    ls.add_argument("--kernel")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_list)

    sh = sub.add_parser("show", parents=[common], help="every trial of a kernel, fastest first, with spread")
    sh.add_argument("kernel", help="kernel name (module:qualname, or an unambiguous suffix)")
    sh.add_argument("--json", action="store_true")
    sh.set_defaults(func=cmd_show)

    st = sub.add_parser("stats", parents=[common], help="database summary")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_stats)

    pr = sub.add_parser("prune", parents=[common], help="remove stale, old or non-best entries")
    pr.add_argument("--older-than", type=parse_duration, metavar="DURATION",
                    help="remove trials and decisions older than this (e.g. 30d, 12h)")
    pr.add_argument("--keep-best-only", action="store_true", help="remove trials that are not a decision")
    pr.add_argument("--failed", action="store_true", help="remove failed trials (they will be retried)")
    pr.add_argument("--keep-stale", action="store_true", help="keep entries of older kernel sources")
    pr.add_argument("--dry-run", action="store_true", help="only count what would be removed")
    pr.add_argument("--json", action="store_true", help="print the result as JSON")
    pr.set_defaults(func=cmd_prune)

    ex = sub.add_parser("export", parents=[common], help="write the database as JSON")
    ex.add_argument("-o", "--output", help="file (default: stdout)")
    ex.add_argument("--kernel")
    ex.set_defaults(func=cmd_export)

    im = sub.add_parser("import", parents=[common], help="merge a JSON export into the database")
    im.add_argument("file")
    im.add_argument("--json", action="store_true", help="print the result as JSON")
    im.set_defaults(func=cmd_import)

    cl = sub.add_parser("clear", parents=[common], help="remove everything (or one kernel)")
    cl.add_argument("--kernel")
    cl.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    cl.add_argument("--json", action="store_true", help="print the result as JSON")
    cl.set_defaults(func=cmd_clear)
    return p


def main(argv: list[str] | None = None) -> int:
    from .store import StoreError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "db"):
        args.db = None
    try:
        return args.func(args)
    except CLIError as e:
        print(f"rbln-autotune {args.command}: error: {e}", file=sys.stderr)
        return e.code
    except StoreError as e:
        print(f"rbln-autotune {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`rbln-autotune list | head`): stop quietly, as Unix tools do
        try:  # Python flushes stdout at exit: point it at /dev/null so that flush cannot fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 141


if __name__ == "__main__":
    sys.exit(main())
