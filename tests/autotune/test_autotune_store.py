"""The SQLite store: schema and migrations, corrupt / read-only / unwritable files, busy retries,
several processes, crashes mid-tuning."""

import glob
import json
import os
import sqlite3
import threading
import time

import pytest
from atutil import launch_add, make_add, run_python
from torch_rbln.autotune import clear_caches, counters, get_store, reset_counters
from torch_rbln.autotune import store as store_mod


def _tables(path):
    with sqlite3.connect(path) as c:
        return {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")}


def test_schema_wal_and_version(autotune_env):
    launch_add(make_add(), 100)
    with sqlite3.connect(autotune_env) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == store_mod.SCHEMA_VERSION
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert {"kernels", "trials", "decisions", "trials_by_kernel_time"} <= _tables(autotune_env)


def test_migrates_an_old_schema(autotune_env):
    import sqlite_utils

    db = sqlite_utils.Database(str(autotune_env))
    store_mod.MIGRATIONS[1](db)
    db.execute("PRAGMA user_version=1")
    db.close()
    assert "trials_by_kernel_time" not in _tables(autotune_env)
    launch_add(make_add(), 100)
    assert "trials_by_kernel_time" in _tables(autotune_env)
    assert get_store().schema_version == store_mod.SCHEMA_VERSION


def test_newer_schema_is_left_alone(autotune_env, capfd):
    with sqlite3.connect(autotune_env) as c:  # what a newer torch-rbln writes
        c.execute("PRAGMA user_version=99")
        c.execute(f"PRAGMA application_id={store_mod.APPLICATION_ID}")
    launch_add(make_add(), 100)
    err = capfd.readouterr().err
    assert "[TORCH-RBLN][WARNING]" in err and "newer than this torch-rbln supports" in err
    with sqlite3.connect(autotune_env) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == 99
        assert c.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0


def _corrupt_pages(path):
    """Damage the b-tree of our database while keeping its 100-byte header (so it is still ours)."""
    for suffix in ("-wal", "-shm"):
        if os.path.exists(str(path) + suffix):
            os.remove(str(path) + suffix)
    data = bytearray(path.read_bytes())
    data[4096:] = b"\xa5" * (len(data) - 4096)  # page 1 (header and schema) stays intact
    path.write_bytes(bytes(data))


def test_foreign_file_is_left_untouched(autotune_env, capfd):
    """A file that is not ours (a checkpoint at the DB path) is never renamed: tuning goes to memory."""
    garbage = b"this is not a database" * 100
    autotune_env.write_bytes(garbage)
    launch_add(make_add(), 100)
    err = capfd.readouterr().err
    assert "[TORCH-RBLN][WARNING]" in err and "is not an SQLite database" in err
    assert str(autotune_env) in err and "TORCH_RBLN_AUTOTUNE_DB" in err
    assert autotune_env.read_bytes() == garbage
    assert not glob.glob(str(autotune_env) + ".corrupt-*")
    assert len(get_store().decisions()) == 1  # in memory


def test_foreign_sqlite_database_is_left_untouched(autotune_env, capfd):
    with sqlite3.connect(autotune_env) as c:
        c.execute("CREATE TABLE photos(id INTEGER)")
        c.execute("INSERT INTO photos VALUES (1)")
    before = autotune_env.read_bytes()
    launch_add(make_add(), 100)
    assert "another application" in capfd.readouterr().err
    assert autotune_env.read_bytes() == before


def test_our_corrupt_database_is_moved_aside(autotune_env, capfd):
    launch_add(make_add(), 100)
    c = sqlite3.connect(autotune_env)
    assert c.execute("PRAGMA application_id").fetchone()[0] == store_mod.APPLICATION_ID
    c.close()
    clear_caches()
    store_mod.reset_stores()
    _corrupt_pages(autotune_env)
    damaged = autotune_env.read_bytes()
    reset_counters()
    launch_add(make_add(), 100)
    err = capfd.readouterr().err
    assert "[TORCH-RBLN][WARNING]" in err and "corrupt" in err
    (aside,) = glob.glob(str(autotune_env) + ".corrupt-*")
    assert open(aside, "rb").read() == damaged
    assert counters["benchmarks"] == 3
    assert len(get_store().decisions()) == 1
    clear_caches()
    reset_counters()
    launch_add(make_add(), 100)
    assert counters["benchmarks"] == 0


def test_corruption_found_later_is_recovered(autotune_env, capfd):
    launch_add(make_add(), 100)
    clear_caches()
    _corrupt_pages(autotune_env)
    reset_counters()
    launch_add(make_add(), 100)
    assert counters["benchmarks"] == 3
    assert "corrupt" in capfd.readouterr().err
    assert glob.glob(str(autotune_env) + ".corrupt-*")


def test_inspect_file(tmp_path):
    assert store_mod.inspect_file(str(tmp_path / "missing")) == "absent"
    (tmp_path / "empty").write_bytes(b"")
    assert store_mod.inspect_file(str(tmp_path / "empty")) == "empty"
    (tmp_path / "short").write_bytes(b"SQLite format 3\x00")
    assert store_mod.inspect_file(str(tmp_path / "short")) == "foreign"
    legacy = tmp_path / "legacy.db"
    with sqlite3.connect(legacy) as c:
        c.execute("CREATE TABLE decisions(x)")
        c.execute("PRAGMA user_version=2")
    assert store_mod.inspect_file(str(legacy)) == "ours"  # written before application_id existed


def _pretend_read_only(monkeypatch, path):
    """chmod the file; as root (who may write anyway) also make os.access report it read-only."""
    os.chmod(path, 0o444)
    if os.geteuid() == 0:
        real = os.access

        def access(p, mode, *a, **k):
            if os.path.abspath(p) == os.path.abspath(path) and mode & os.W_OK:
                return False
            return real(p, mode, *a, **k)

        monkeypatch.setattr(os, "access", access)


def test_read_only_file_serves_lookups_and_tunes_in_memory(autotune_env, monkeypatch, capfd):
    launch_add(make_add(), 100)
    clear_caches()
    with sqlite3.connect(autotune_env) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = autotune_env.read_bytes()
    _pretend_read_only(monkeypatch, autotune_env)
    reset_counters()
    k = make_add()
    launch_add(k, 100)  # decision read from the read-only file
    assert counters["benchmarks"] == 0
    launch_add(k, 200)  # new key: tuned in memory
    assert counters["benchmarks"] == 3
    err = capfd.readouterr().err
    assert "[TORCH-RBLN][WARNING]" in err and "in memory only" in err and "read-only" in err
    assert autotune_env.read_bytes() == before
    assert get_store().degraded


def test_unwritable_location_degrades_to_memory(tmp_path, monkeypatch, capfd):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    monkeypatch.setenv("TORCH_RBLN_AUTOTUNE_DB", str(blocker / "sub" / "autotune.db"))
    k = make_add()
    launch_add(k, 100)
    launch_add(k, 100)
    assert counters["benchmarks"] == 3
    err = capfd.readouterr().err
    assert "[TORCH-RBLN][WARNING]" in err and "cannot be written" in err
    assert len(get_store().decisions()) == 1


def test_busy_database_is_retried(autotune_env, monkeypatch):
    monkeypatch.setattr(store_mod, "BUSY_TIMEOUT_S", 0.02)  # force the retry-with-backoff path
    launch_add(make_add(), 100)
    clear_caches()
    holder = sqlite3.connect(autotune_env, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.4, lambda: holder.execute("COMMIT"))
    release.start()
    t0 = time.perf_counter()
    try:
        get_store().record_kernel("busy:kernel", "abc")
    finally:
        release.join()
        holder.close()
    assert time.perf_counter() - t0 >= 0.3
    assert [r for r in get_store().kernels() if r["name"] == "busy:kernel"]


def test_store_failure_never_breaks_a_launch(monkeypatch, capfd):
    def boom(*a, **k):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store_mod.Store, "record_trial", boom)
    k = make_add()
    launch_add(k, 100)
    assert "[TORCH-RBLN][WARNING]" in capfd.readouterr().err


_TUNE = """
import os, sys, torch
from atutil import make_add, launch_add
from torch_rbln.autotune import counters, Config
from torch_rbln import autotune
{extra}
for n in {sizes}:
    launch_add(make_add({args}), n)
print("COUNTERS", __import__("json").dumps(counters))
"""


def _counters(proc):
    assert proc.returncode == 0, proc.stderr
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("COUNTERS")][-1]
    return json.loads(line.split(" ", 1)[1])


def test_crash_mid_tuning_keeps_finished_trials_and_second_process_runs_no_benchmark(autotune_env):
    env = {"TORCH_RBLN_AUTOTUNE_DB": str(autotune_env), "TORCH_RBLN_DSL_BACKEND": "interpret"}
    crash = """
import atutil
def die(nargs):
    os._exit(17)
atutil.configs = lambda blocks=atutil.BLOCKS, **e: [
    Config({"BLOCK_SIZE": b}, pre_hook=die if b == 1024 else None) for b in blocks]
"""
    p = run_python(_TUNE.format(extra=crash, sizes=[500], args=""), dict(env))
    assert p.returncode == 17, p.stderr
    store = store_mod.Store(str(autotune_env))
    assert len(store.trials()) == 2 and not store.decisions()  # the two finished trials survived
    store.close()
    c = _counters(run_python(_TUNE.format(extra="", sizes=[500], args=""), dict(env)))
    assert c["benchmarks"] == 1  # only the config in flight at the crash
    c = _counters(run_python(_TUNE.format(extra="", sizes=[500], args=""), dict(env)))
    assert c["benchmarks"] == 0 and c["store_hits"] == 1  # warm database: nothing measured


def test_two_processes_tuning_concurrently(autotune_env):
    env = {"TORCH_RBLN_AUTOTUNE_DB": str(autotune_env), "TORCH_RBLN_DSL_BACKEND": "interpret"}
    import subprocess
    import sys
    import textwrap

    sizes = [100, 200, 300, 400, 500, 600]
    # both processes start tuning at the same moment (after their slow imports)
    barrier = f"""
import time, pathlib
d = pathlib.Path({str(autotune_env.parent)!r})
(d / f"ready-{{os.getpid()}}").touch()
deadline = time.time() + 60
while len(list(d.glob("ready-*"))) < 2 and time.time() < deadline:
    time.sleep(0.01)
"""
    code = textwrap.dedent(_TUNE.format(extra=barrier, sizes=sizes, args=""))
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_RBLN_", "RBLN_"))}
    full.update(env, PYTHONPATH=os.path.dirname(__file__))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=full, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert "locked" not in err and "WARNING" not in err, err
    with sqlite3.connect(autotune_env) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert c.execute("SELECT COUNT(*) FROM decisions").fetchone()[0] == len(sizes)
        assert c.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 3 * len(sizes)
    reset_counters()
    for n in sizes:
        launch_add(make_add(), n)
    assert counters["benchmarks"] == 0


def test_unknown_store_path_types():
    with pytest.raises(TypeError):
        store_mod.Store(12)
