"""rbln-autotune: every command, bad arguments, malformed manifests and import files."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest
from atutil import add_launch, launch_add, make_add, manifest
from torch_rbln.autotune import Config, autotune, clear_caches, get_store
from torch_rbln.autotune.cli import main, parse_duration
from torch_rbln.autotune.store import Store


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(autotune_env):
    return str(autotune_env)


def _decisions(db):
    s = Store(db)
    try:
        return s.decisions()
    finally:
        s.close()


def test_warm_then_cached(tmp_path, db, capsys):
    m = manifest(tmp_path / "m.json", [{"kernel": "atutil:add_tuned",
                                        "launches": [add_launch(), add_launch((500,), "float16")]}])
    summary = tmp_path / "s.json"
    code, out, err = run(capsys, "warm", m, "--db", db, "--json-summary", summary)
    assert code == 0, err
    assert "tuned" in out and "3 launches: 3 tuned" in out and "BLOCK_SIZE=" in out
    assert len(_decisions(db)) == 3
    rows = json.loads(summary.read_text())
    assert [r["status"] for r in rows] == ["tuned"] * 3 and all(r["benchmarks"] == 3 for r in rows)
    assert all(r["median_us"] > 0 for r in rows)
    code, out, err = run(capsys, "--db", db, "warm", m, "--json-summary", summary, "--time-budget", "5")
    assert code == 0 and "3 already tuned" in out
    assert [r["benchmarks"] for r in json.loads(summary.read_text())] == [0, 0, 0]
    code, out, err = run(capsys, "warm", m, "--db", db, "--force", "-q")
    assert code == 0 and "3 tuned" in out


def test_warm_parallel_jobs(tmp_path, db, capsys):
    m = manifest(tmp_path / "m.json", [{"kernel": "atutil:add_tuned",
                                        "launches": [add_launch((100, 5000, 9000))]}])
    code, out, err = run(capsys, "warm", m, "--db", db, "--jobs", "2", "-q")
    assert code == 0, out + err
    assert len(_decisions(db)) == 3
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_warm_reports_failed_launches(tmp_path, db, capsys):
    m = manifest(tmp_path / "m.json", [
        {"kernel": "atutil:add_tuned", "launches": [add_launch((100,))]},
        {"kernel": "atutil:broken_tuned", "launches": [{"args": [{"shape": [64], "dtype": "float32"}, 64],
                                                         "grid": [1]}]}])
    code, out, err = run(capsys, "warm", m, "--db", db, "-q")
    assert code == 1
    assert "error: AutotuneError" in out and "1 tuned" in out and "1 errors" in out


@pytest.mark.parametrize("text, line, field, msg", [
    ('{"kernels": [\n  {"kernel": "atutil:add_tuned",\n   "launches": [}\n]}', 3, None, "invalid JSON"),
    ('{"kernels": [\n {"kernel": "atutil:add_tuned", "launches": [{\n  "args": [\n   {"shape": [4], '
     '"dtype": "float32"},\n   {"shape": [4], "dtype": "float33"}\n  ],\n  "grid": [1]}]}]}',
     5, "kernels[0].launches[0].args[1].dtype", "unknown dtype 'float33'"),
    ('{"kernels": [\n {"kernel": "atutil:nope",\n  "launches": []}]}', 2, "kernels[0].kernel",
     "has no attribute 'nope'"),
    ('{"kernels": [\n {"kernel": "no_such_module_xyz:k",\n  "launches": []}]}', 2, "kernels[0].kernel",
     "cannot import module"),
    ('{"kernels": [\n {"kernel": "atutil:add_kernel",\n  "launches": []}]}', 2, "kernels[0].kernel",
     "not an @autotune kernel"),
    ('{"kernels": [\n {"kernel": "atutil:add_tuned",\n  "launches": [\n   {"args": [],\n    "gird": [1]}]}]}',
     5, "kernels[0].launches[0].gird", "unknown field 'gird'"),
    ('{"kernels": [\n {"kernel": "atutil:add_tuned",\n  "launches": [\n   {"args": []}]}]}',
     4, "kernels[0].launches[0]", "missing field 'grid'"),
    ('{"kernels": [\n {"kernel": "atutil:add_tuned",\n  "launches": [\n   {"args": [],\n'
     '    "grid": ["__import__(\'os\')"]}]}]}', 5, "kernels[0].launches[0].grid[0]", "may be called"),
    ('{"kernels": [\n {"kernel": "atutil:add_tuned",\n  "launches": [\n   {"args": [{"shape": ["$m"], '
     '"dtype": "float32"}],\n    "grid": [1]}]}]}', 4, "kernels[0].launches[0].args[0].shape[0]",
     "unknown size variable '$m'"),
    ('{"kernels": [\n {"kernel": "atutil:add_tuned",\n  "launches": [\n   {"args": [],\n    "kwargs": '
     '{"BLOCKSIZE": 4},\n    "grid": [1]}]}]}', 5, "kernels[0].launches[0].kwargs.BLOCKSIZE",
     "no argument 'BLOCKSIZE'"),
    ('{"kernels": [\n {"kernel": "atutil:add_tuned",\n  "launches": [\n   {"args": [],\n    "tp": 0,\n'
     '    "grid": [1]}]}]}', 5, "kernels[0].launches[0].tp", "positive integer"),
    ('["not", "an", "object"]', 1, None, "expected an object"),
])
def test_malformed_manifest_names_line_and_field(tmp_path, db, capsys, text, line, field, msg):
    path = tmp_path / "bad.json"
    path.write_text(text)
    code, out, err = run(capsys, "warm", path, "--db", db)
    assert code == 2
    assert f"{path}:{line}: " in err, err
    if field:
        assert f": {field}: " in err, err
    assert msg in err
    assert not os.path.exists(db) or not _decisions(db)


def test_missing_manifest_file(tmp_path, db, capsys):
    code, out, err = run(capsys, "warm", tmp_path / "nope.json", "--db", db)
    assert code == 2 and "cannot read" in err


def test_bad_arguments(db, capsys):
    for argv in ([], ["frobnicate"], ["warm"], ["warm", "m.json", "--jobs", "0"],
                 ["warm", "m.json", "--time-budget", "-1"], ["prune", "--older-than", "soon"],
                 ["show"], ["list", "--bogus"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2, argv
        err = capsys.readouterr().err
        assert "usage: rbln-autotune" in err
    assert parse_duration("30d") == 30 * 86400 and parse_duration("90m") == 5400 and parse_duration("7") == 7


def _tune_two_keys():
    k = make_add()
    launch_add(k, 100)
    launch_add(k, 200)
    clear_caches()


def test_list_show_stats(db, capsys):
    code, out, err = run(capsys, "list", "--db", db)
    assert code == 0 and "no tuned keys" in out
    _tune_two_keys()
    code, out, err = run(capsys, "list", "--db", db)
    assert code == 0 and "atutil:add" in out and "n_elements=100 | float32 | tp=1" in out
    code, out, err = run(capsys, "list", "--db", db, "--json")
    rows = json.loads(out)
    assert len(rows) == 2 and not any(r["stale"] for r in rows)
    code, out, err = run(capsys, "show", "atutil:add", "--db", db)
    assert code == 0 and out.count("*1") == 2 and "median us" in out and "iqr us" in out
    code, out, err = run(capsys, "show", "add", "--db", db, "--json")  # unambiguous suffix
    groups = json.loads(out)
    assert len(groups) == 2
    for g in groups:
        medians = [t["median_us"] for t in g["trials"]]
        assert medians == sorted(medians) and g["best"] == g["trials"][0]["config"]
        assert all(t["iqr_us"] is not None and t["p90_us"] >= t["p10_us"] for t in g["trials"])
    code, out, err = run(capsys, "show", "nope", "--db", db)
    assert code == 1 and "no kernel 'nope'" in err and "atutil:add" in err
    code, out, err = run(capsys, "stats", "--db", db, "--json")
    s = json.loads(out)
    assert s["decisions"] == 2 and s["trials"] == 6 and s["kernels"] == 1 and s["schema_version"] == 2
    code, out, err = run(capsys, "stats", "--db", db)
    assert code == 0 and "decisions" in out


def test_prune(db, capsys):
    _tune_two_keys()
    # a second source version of the same kernel name makes the first stale
    import torch_rbln.dsl as tl

    from torch_rbln import dsl as triton

    @triton.jit
    def add_v2(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
                 mask=mask)

    time.sleep(0.01)
    k2 = autotune(configs=[Config({"BLOCK_SIZE": b}) for b in (64, 256, 1024)], key=["n_elements"],
                  name="atutil:add", warmup=0.5, rep=2)(add_v2)
    launch_add(k2, 100)
    clear_caches()
    code, out, err = run(capsys, "list", "--db", db)
    assert out.count("(stale)") == 2
    code, out, err = run(capsys, "prune", "--db", db, "--dry-run")
    assert code == 0 and "would remove: 2 decisions, 6 trials, 1 kernel" in out
    assert len(_decisions(db)) == 3
    code, out, err = run(capsys, "prune", "--db", db)
    assert "removed: 2 decisions, 6 trials, 1 kernel" in out
    assert len(_decisions(db)) == 1
    code, out, err = run(capsys, "prune", "--db", db, "--keep-best-only")
    assert "removed: 0 decisions, 2 trials" in out
    with sqlite3.connect(db) as c:
        c.execute("UPDATE decisions SET created_at = created_at - 40 * 86400")
        c.execute("UPDATE trials SET created_at = created_at - 40 * 86400")
    code, out, err = run(capsys, "prune", "--db", db, "--older-than", "30d")
    assert "removed: 1 decisions, 1 trials, 1 kernel" in out
    assert run(capsys, "stats", "--db", db, "--json")[1].count('"decisions": 0') == 1


def test_prune_failed(db, capsys):
    import torch
    from test_autotune_tuner import _picky

    x = torch.randn(64)
    _picky()[(1,)](x, torch.empty_like(x), 64)
    code, out, err = run(capsys, "prune", "--db", db, "--failed")
    assert "removed: 0 decisions, 2 trials, 0 kernel" in out


def _decision(store, config, median, kernel="k:x", key='{"args":{"n":1},"dtypes":{},"tp":1}'):
    store.record_kernel(kernel, "h1")
    base = {"kernel": kernel, "source_hash": "h1", "key": key, "backend": "interpret",
            "device_kind": "cpu:test", "tp": 1, "host": "somewhere", "created_at": time.time()}
    store.record_trial({**base, "config": config, "status": "ok", "median_us": median, "samples": 5})
    store.record_decision({**base, "config": config, "configs_hash": "c", "median_us": median})


def test_export_import_round_trip(tmp_path, db, capsys):
    _tune_two_keys()
    out_file = tmp_path / "export.json"
    code, out, err = run(capsys, "export", "--db", db, "-o", out_file)
    assert code == 0 and "exported 2 decisions and 6 trials" in err
    data = json.loads(out_file.read_text())
    assert data["format"] == "torch-rbln-autotune" and len(data["trials"]) == 6
    other = tmp_path / "other.db"
    code, out, err = run(capsys, "import", out_file, "--db", other)
    assert code == 0 and "decisions 2 added" in out and "trials 6 added" in out and "0 conflicts" in out
    code, out2, err = run(capsys, "export", "--db", other)
    again = json.loads(out2)
    for table in ("kernels", "trials", "decisions"):
        assert again[table] == data[table]
    # importing the same file again changes nothing
    code, out, err = run(capsys, "import", out_file, "--db", other)
    assert "decisions 0 added, 0 replaced by faster, 2 kept" in out
    # a fresh process reading the imported database runs no benchmark
    from torch_rbln.autotune import counters, reset_counters

    reset_counters()
    k = make_add(store=str(other))
    launch_add(k, 100)
    assert counters["benchmarks"] == 0


def test_import_merge_keeps_faster_and_reports_conflicts(tmp_path, capsys):
    a, b = Store(str(tmp_path / "a.db")), Store(str(tmp_path / "b.db"))
    A, B = '{"kwargs":{"BLOCK_SIZE":64}}', '{"kwargs":{"BLOCK_SIZE":128}}'
    _decision(a, A, 10.0, key='{"args":{"n":1},"dtypes":{},"tp":1}')
    _decision(b, B, 8.0, key='{"args":{"n":1},"dtypes":{},"tp":1}')  # faster, different config: conflict
    _decision(a, A, 5.0, key='{"args":{"n":2},"dtypes":{},"tp":1}')
    _decision(b, B, 7.0, key='{"args":{"n":2},"dtypes":{},"tp":1}')  # slower: conflict, local kept
    _decision(a, A, 9.0, key='{"args":{"n":3},"dtypes":{},"tp":1}')
    _decision(b, A, 4.0, key='{"args":{"n":3},"dtypes":{},"tp":1}')  # same config, faster: no conflict
    export = tmp_path / "b.json"
    export.write_text(json.dumps(b.export()))
    a.close()
    b.close()
    code, out, err = run(capsys, "import", export, "--db", tmp_path / "a.db")
    assert code == 0 and "2 conflicts" in out and "conflicts (same key, different best config)" in out
    rows = {json.loads(d["key"])["args"]["n"]: d for d in _decisions(str(tmp_path / "a.db"))}
    assert rows[1]["config"] == B and rows[1]["median_us"] == 8.0
    assert rows[2]["config"] == A and rows[2]["median_us"] == 5.0
    assert rows[3]["config"] == A and rows[3]["median_us"] == 4.0
    s = Store(str(tmp_path / "a.db"))
    trials = {(json.loads(t["key"])["args"]["n"], t["config"]): t["median_us"] for t in s.trials()}
    s.close()
    assert trials[(3, A)] == 4.0 and trials[(1, A)] == 10.0 and trials[(1, B)] == 8.0


def test_import_rejects_malformed_files(tmp_path, db, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "torch-rbln-autotune",\n "schema_version": 2,\n "trials": [}')
    code, out, err = run(capsys, "import", bad, "--db", db)
    assert code == 2 and f"{bad}:3: invalid JSON" in err
    bad.write_text(json.dumps({"format": "something-else"}))
    code, out, err = run(capsys, "import", bad, "--db", db)
    assert code == 2 and "not a torch-rbln autotune export" in err
    bad.write_text(json.dumps({"format": "torch-rbln-autotune", "schema_version": 2,
                               "decisions": [{"kernel": "k"}]}))
    code, out, err = run(capsys, "import", bad, "--db", db)
    assert code == 2 and "decisions[0] lacks source_hash" in err
    code, out, err = run(capsys, "import", tmp_path / "missing.json", "--db", db)
    assert code == 2 and "cannot read" in err


def test_clear(db, capsys):
    _tune_two_keys()
    _decision(get_store(db), '{"kwargs":{}}', 1.0, kernel="other:kernel")
    clear_caches()
    code, out, err = run(capsys, "clear", "--db", db, "--kernel", "other:kernel", "--yes")
    assert code == 0 and "removed: 1 decisions" in out
    code, out, err = run(capsys, "clear", "--db", db)  # stdin is not a terminal: refuses without --yes
    assert code == 2 and "pass --yes" in err
    code, out, err = run(capsys, "clear", "--db", db, "-y")
    assert code == 0 and "removed: 2 decisions, 6 trials" in out
    assert run(capsys, "list", "--db", db)[1].startswith("no tuned keys")


def test_write_commands_fail_on_unwritable_db(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, out, err = run(capsys, "clear", "--db", blocker / "x.db", "--yes")
    assert code == 1 and "cannot write" in err


def test_console_script(db):
    _tune_two_keys()
    # the script installed beside this interpreter (a `rbln-autotune` earlier on PATH, such as a pyenv
    # shim, may belong to another Python)
    beside = os.path.join(os.path.dirname(sys.executable), "rbln-autotune")
    exe = beside if os.path.exists(beside) else shutil.which("rbln-autotune")
    cmd = [exe] if exe else [sys.executable, "-m", "torch_rbln.autotune.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_RBLN_", "RBLN_"))}
    p = subprocess.run(cmd + ["--db", db, "stats", "--json"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["decisions"] == 2


def test_kernel_filters(tmp_path, db, capsys):
    m = manifest(tmp_path / "m.json", [
        {"kernel": "atutil:add_tuned", "launches": [add_launch((100,))]},
        {"kernel": "atutil:broken_tuned", "launches": [{"args": [{"shape": [64], "dtype": "float32"}, 64],
                                                         "grid": [1]}]}])
    code, out, err = run(capsys, "warm", m, "--db", db, "--kernel", "add_tuned", "-q")
    assert code == 0 and "1 launches: 1 tuned" in out
    code, out, err = run(capsys, "warm", m, "--db", db, "--kernel", "nope", "-q")
    assert code == 1 and "no launch of kernel 'nope'" in err
    _decision(get_store(db), '{"kwargs":{}}', 1.0, kernel="other:kernel")
    clear_caches()
    code, out, err = run(capsys, "list", "--db", db, "--kernel", "add_tuned", "--json")
    assert [r["kernel"] for r in json.loads(out)] == ["atutil:add_tuned"]
    code, out, err = run(capsys, "export", "--db", db, "--kernel", "other:kernel")
    data = json.loads(out)
    assert {d["kernel"] for d in data["decisions"]} == {"other:kernel"} and len(data["kernels"]) == 1


@pytest.mark.parametrize("command", ["list", "show", "stats", "export", "prune", "clear"])
@pytest.mark.parametrize(
    "content, message",
    [
        (b"PK\x03\x04" + b"\x00" * 200, "is not an SQLite database"),  # a torch.save checkpoint is a zip
        (b'{"decisions": [], "trials": []}\n', "looks like a JSON file"),
    ],
)
def test_commands_never_touch_a_file_that_is_not_ours(tmp_path, capsys, command, content, message):
    target = tmp_path / "ckpt.pt"
    target.write_bytes(content)
    argv = [command, "--db", target] + (["some_kernel"] if command == "show" else [])
    code, out, err = run(capsys, *argv)
    assert code == 2 and message in err and str(target) in err and "left untouched" in err
    assert target.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


def test_read_only_commands_create_nothing(tmp_path, capsys):
    target = tmp_path / "new.db"
    for command in ("list", "stats", "export"):
        code, out, err = run(capsys, command, "--db", target)
        assert code == 0, err
    assert not any(tmp_path.iterdir())


def test_read_only_commands_report_a_corrupt_database_and_leave_it(db, capsys):
    _tune_two_keys()
    clear_caches()
    from torch_rbln.autotune.store import reset_stores

    reset_stores()
    for suffix in ("-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    data = bytearray(open(db, "rb").read())
    data[4096:] = b"\xa5" * (len(data) - 4096)
    open(db, "wb").write(bytes(data))
    code, out, err = run(capsys, "list", "--db", db)
    assert code == 2 and "corrupt" in err and "left untouched" in err
    assert open(db, "rb").read() == bytes(data)
    assert not [p for p in os.listdir(os.path.dirname(db)) if ".corrupt-" in p]


GRID_BOMBS = ["9**9**9**9", "'a'*10**10", "1 << 10**10", "2**64 * 2**64", "(" * 300 + "1" + ")" * 300]


@pytest.mark.parametrize("grid", GRID_BOMBS)
def test_grid_expressions_are_bounded(tmp_path, db, capsys, grid):
    """Expressions that would run for hours or exhaust memory are refused at once, naming the field."""
    import time as _time

    path = tmp_path / "bomb.json"
    path.write_text(json.dumps({"kernels": [{"kernel": "atutil:add_tuned",
                                             "launches": [{"args": [], "grid": [grid]}]}]}))
    start = _time.perf_counter()
    code, out, err = run(capsys, "warm", path, "--db", db)
    assert _time.perf_counter() - start < 10
    assert code == 2 and "kernels[0].launches[0].grid[0]" in err and "invalid expression" in err


def test_grid_expressions_evaluate_bounded_arithmetic():
    from torch_rbln.autotune.manifest import _evaluate, _parse_grid_expr

    env = {"n": 1000, "BLOCK": 128, "cdiv": lambda a, b: -(-a // b)}
    assert _evaluate(_parse_grid_expr("cdiv(n, BLOCK) * 2 if n > 10 else 1"), env) == 16
    assert _evaluate(_parse_grid_expr("(n // BLOCK, 2**3, 1 << 4)"), env) == (7, 8, 16)
    with pytest.raises(ValueError, match="more than 64 bits"):
        _evaluate(_parse_grid_expr("n ** 100"), env)


def test_deeply_nested_manifest_is_refused(tmp_path, db, capsys):
    path = tmp_path / "deep.json"
    path.write_text('{"kernels": ' + "[" * 100000 + "]" * 100000 + "}")
    code, out, err = run(capsys, "warm", path, "--db", db)
    assert code == 2 and "nested" in err and str(path) in err


def test_manifest_that_is_not_utf8_is_refused(tmp_path, db, capsys):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"kernels": ["\xff\xfe"]}')
    code, out, err = run(capsys, "warm", path, "--db", db)
    assert code == 2 and "not UTF-8" in err and str(path) in err


@pytest.mark.parametrize(
    "content, message",
    [
        (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
        (b'{"format": "torch-rbln-autotune", "schema_version": 2, "decisions": ["\xff"]}', "not UTF-8"),
        (json.dumps({"format": "torch-rbln-autotune", "schema_version": 2, "decisions": [
            {"kernel": 7, "source_hash": "h", "key": "k", "backend": "numba", "device_kind": "cpu",
             "config": "{}"}]}).encode(), "decisions[0].kernel must be a string, got int"),
        (json.dumps({"format": "torch-rbln-autotune", "schema_version": 2, "trials": [
            {"kernel": "k", "source_hash": "h", "key": "k", "backend": "numba", "device_kind": "cpu",
             "config": "{}", "median_us": "fast"}]}).encode(), "trials[0].median_us must be a number"),
    ],
)
def test_import_of_malformed_files_exits_2_naming_the_problem(tmp_path, db, capsys, content, message):
    path = tmp_path / "export.json"
    path.write_bytes(content)
    code, out, err = run(capsys, "import", path, "--db", db)
    assert code == 2 and message in err and str(path) in err
    assert "Traceback" not in err


def test_version_and_manifest_help(capsys):
    from torch_rbln import __version__

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and __version__ in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["warm", "--help"])
    out = capsys.readouterr().out
    assert "A manifest is a JSON file" in out and '"launches"' in out and '"grid"' in out


def test_warm_warns_about_launches_tuned_for_the_cpu(tmp_path, db, capsys):
    launches = [add_launch(sizes=(100,))]
    path = manifest(tmp_path / "m.json", [{"kernel": "atutil:add_tuned", "launches": launches}])
    code, out, err = run(capsys, "warm", path, "--db", db, "-q")
    assert code == 0 and "1 of 1 launches run on the CPU" in err and '"device": "rbln"' in err


def test_closed_pipe_ends_quietly(db, monkeypatch):
    """`rbln-autotune list | head`: the reader goes away; the command stops with 141, no traceback."""
    _tune_two_keys()

    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self):
            raise ValueError("no descriptor")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["list", "--db", db, "--json"]) == 141


def test_every_subcommand_speaks_json_with_decoded_values(tmp_path, db, capsys):
    _tune_two_keys()
    rows = json.loads(run(capsys, "list", "--db", db, "--json")[1])
    assert isinstance(rows[0]["key"], dict) and isinstance(rows[0]["config"], dict)
    assert "within_noise_of" in rows[0]
    code, out, err = run(capsys, "prune", "--db", db, "--dry-run", "--json")
    assert code == 0 and json.loads(out)["dry_run"] is True
    export = tmp_path / "e.json"
    run(capsys, "export", "--db", db, "-o", export)
    code, out, err = run(capsys, "import", str(export), "--db", str(tmp_path / "other.db"), "--json")
    assert code == 0 and json.loads(out)["decisions_added"] == 2
    code, out, err = run(capsys, "clear", "--db", db, "--yes", "--json")
    assert code == 0 and json.loads(out)["decisions"] == 2
    launches = [add_launch(sizes=(100,))]
    path = manifest(tmp_path / "m.json", [{"kernel": "atutil:add_tuned", "launches": launches}])
    code, out, err = run(capsys, "warm", path, "--db", db, "-q", "--json")
    assert code == 0 and json.loads(out)[0]["status"] == "tuned"


def test_list_flags_decisions_within_the_noise_of_the_runner_up(db, capsys):
    store = get_store(db)
    base = {"kernel": "k:x", "source_hash": "h1", "key": '{"args":{"n":1},"dtypes":{},"tp":1}',
            "backend": "interpret", "device_kind": "cpu:test", "tp": 1, "host": "h",
            "created_at": time.time()}
    store.record_kernel("k:x", "h1")
    for config, median, iqr in (('{"kwargs":{"B":1}}', 10.0, 1.5), ('{"kwargs":{"B":2}}', 11.0, 0.5)):
        store.record_trial({**base, "config": config, "status": "ok", "median_us": median, "iqr_us": iqr,
                            "samples": 5})
    store.record_decision({**base, "config": '{"kwargs":{"B":1}}', "configs_hash": "c", "median_us": 10.0})
    clear_caches()
    (row,) = json.loads(run(capsys, "list", "--db", db, "--json")[1])
    assert row["within_noise_of"] == '{"kwargs":{"B":2}}'  # 1.0 us apart, IQR 1.5 us
    assert "within noise of" in run(capsys, "list", "--db", db)[1]
