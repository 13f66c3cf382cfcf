"""The autotuner in one process: keys, bucketing, reuse of stored trials, invalidation, failures."""

import json
import sys

import pytest
import torch
import torch_rbln.dsl as tl
from atutil import FAST, acc_kernel, add_kernel, configs, grid, launch_add, make_add
from torch_rbln.autotune import (
    AutotuneError,
    Autotuner,
    Config,
    autotune,
    clear_caches,
    counters,
    get_store,
    heuristics,
    launch_tp_size,
    reset_counters,
)

from torch_rbln import dsl as triton


def test_import_is_light():
    # the package may already be imported by other tests: check in a fresh interpreter
    import subprocess

    code = ("import sys, torch_rbln.autotune; "
            "print(sorted(m for m in ('sqlite_utils', 'jinja2', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_tunes_once_then_memo_and_store(autotune_env):
    k = make_add()
    best = launch_add(k, 1000)
    assert best in configs()
    assert counters["benchmarks"] == 3 and counters["tunings"] == 1
    launch_add(k, 1000)  # memo
    assert counters["benchmarks"] == 3 and counters["store_lookups"] == 1
    # a new tuner (as in a new process) finds the decision in the store
    clear_caches()
    reset_counters()
    k2 = make_add()
    assert launch_add(k2, 1000) == best
    assert counters["benchmarks"] == 0 and counters["store_hits"] == 1
    rows = get_store().decisions()
    assert len(rows) == 1
    d = rows[0]
    assert json.loads(d["key"]) == {"args": {"n_elements": 1000},
                                    "dtypes": {"out_ptr": "float32", "x_ptr": "float32", "y_ptr": "float32"},
                                    "tp": 1}
    assert d["backend"] == "interpret" and d["device_kind"].startswith("cpu:") and d["tp"] == 1
    assert d["source_hash"] == add_kernel.cache_key and d["host"] and d["compiler"].endswith("/interpret")
    trials = get_store().trials("atutil:add")
    assert len(trials) == 3 and all(t["status"] == "ok" and t["samples"] >= 5 for t in trials)
    assert all(t["p25_us"] <= t["median_us"] <= t["p75_us"] and t["iqr_us"] >= 0 and t["mad_us"] >= 0
               for t in trials)


def test_dtype_and_tp_are_part_of_the_key():
    k = make_add()
    launch_add(k, 512)
    launch_add(k, 512, dtype=torch.float16)
    launch_add(k, 512, tp=2)  # explicit tp launch option, stripped before the kernel (it takes no tp)
    keys = [json.loads(d["key"]) for d in get_store().decisions()]
    assert len(keys) == 3
    assert {(tuple(sorted(set(k["dtypes"].values()))), k["tp"]) for k in keys} == {
        (("float32",), 1), (("float16",), 1), (("float32",), 2)}
    assert counters["tunings"] == 3


def test_launch_tp_size_rule_and_rbln_keys(monkeypatch):
    x = torch.zeros(2)
    assert launch_tp_size((x,), {}) == 1
    assert launch_tp_size((x,), {"tp": 4}) == 4
    with pytest.raises(ValueError, match="positive"):
        launch_tp_size((x,), {"tp": 0})
    from torch_rbln import config, topology

    monkeypatch.setenv("RBLN_NPUS_PER_DEVICE", "2")
    monkeypatch.setenv("TORCH_RBLN_USE_DEVICE_TP", "ON")
    config.reset_for_tests()
    topology.reset_for_tests()
    try:
        d = torch.zeros(8, device="rbln:0")
        assert launch_tp_size((d,), {}) == 2
        assert launch_tp_size((d,), {"tp": 1}) == 1  # an explicit option wins
        k = make_add()
        mk = k._keyspec.memo_key((d, d, d, 8), {})
        assert mk[-2] == 2 and mk != k._keyspec.memo_key((x, x, x, 8), {})
        ctx = k._context((d, d, d, 8), {}, 2)
        assert json.loads(ctx["key"])["tp"] == 2 and ctx["device_kind"] == "rbln:simulated"
        monkeypatch.setenv("TORCH_RBLN_USE_DEVICE_TP", "OFF")
        config.reset_for_tests()
        assert launch_tp_size((d,), {}) == 1
    finally:
        monkeypatch.undo()
        config.reset_for_tests()
        topology.reset_for_tests()


def test_pow2_bucket_shares_a_decision_but_keeps_exact_sizes():
    k = make_add(bucket="pow2")
    launch_add(k, 1000)
    launch_add(k, 1023)  # same bucket (1024): no tuning, exact n still drives the grid and masks
    assert counters["tunings"] == 1
    launch_add(k, 1025)  # bucket 2048
    assert counters["tunings"] == 2
    decisions = get_store().decisions()
    assert sorted(json.loads(d["key"])["args"]["n_elements"] for d in decisions) == [1024, 2048]
    assert {d["bucket"] for d in decisions} == {json.dumps({"n_elements": "pow2"})}
    assert sorted(json.loads(d["launch"])["n_elements"] for d in decisions) == [1000, 1025]


def test_callable_bucket():
    k = make_add(bucket={"n_elements": lambda n: n // 500 * 500})
    launch_add(k, 510)
    launch_add(k, 990)
    assert counters["tunings"] == 1
    (d,) = get_store().decisions()
    assert json.loads(d["key"])["args"]["n_elements"] == 500
    assert json.loads(d["bucket"])["n_elements"].startswith("callable:")


def test_adding_a_config_measures_only_it():
    launch_add(make_add(blocks=(64, 256)), 700)
    assert counters["benchmarks"] == 2
    reset_counters()
    launch_add(make_add(blocks=(64, 256, 1024)), 700)
    assert counters["benchmarks"] == 1 and counters["retimes"] == 0
    trials = get_store().trials("atutil:add")
    assert sorted(json.loads(t["config"])["kwargs"]["BLOCK_SIZE"] for t in trials) == [64, 256, 1024]
    (d,) = get_store().decisions()
    assert d["candidates"] == 3
    # going back to the old config set: every trial is known, nothing is measured
    reset_counters()
    launch_add(make_add(blocks=(64, 256)), 700)
    assert counters["benchmarks"] == 0


def test_decision_is_deterministic_for_equal_timings():
    calls = []

    def fake_bench(fn):
        calls.append(1)
        return 1.0  # every config takes 1 ms: ties go to the earliest config

    k = make_add(blocks=(1024, 64, 256), do_bench=fake_bench)
    assert launch_add(k, 300) == Config({"BLOCK_SIZE": 1024})
    assert len(calls) == 3


def test_source_edit_invalidates_only_that_kernel(tmp_path, monkeypatch):
    src = '''
import torch_rbln.dsl as tl
from torch_rbln import dsl as triton
from torch_rbln.autotune import Config, autotune

@autotune(configs=[Config({"BLOCK_SIZE": 64}), Config({"BLOCK_SIZE": 256})], key=["n"], warmup=0.5, rep=2,
          name="edited:kernel")
@triton.jit
def kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * SCALE, mask=m)
'''
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    def load(version, scale):
        mod = f"edited_v{version}"
        (tmp_path / f"{mod}.py").write_text(src.replace("SCALE", scale))
        return importlib.import_module(mod).kernel

    def launch(k):
        x = torch.randn(300)
        out = torch.empty_like(x)
        k[lambda m: (triton.cdiv(300, m["BLOCK_SIZE"]),)](x, out, 300)
        return x, out

    other = make_add()
    launch_add(other, 300)
    k1 = load(1, "2.0")
    x, out = launch(k1)
    assert torch.equal(out, x * 2)
    reset_counters()
    k2 = load(2, "3.0")  # edited source: same name, new hash
    assert k2.cache_key != k1.cache_key
    x, out = launch(k2)
    assert torch.equal(out, x * 3)
    assert counters["benchmarks"] == 2
    # the other kernel's decision is untouched
    reset_counters()
    launch_add(make_add(), 300)
    assert counters["benchmarks"] == 0
    # the old version's entries are still valid for the old source
    launch(load(3, "2.0"))
    assert counters["benchmarks"] == 0
    hashes = {r["source_hash"] for r in get_store().kernels() if r["name"] == "edited:kernel"}
    assert hashes == {k1.cache_key, k2.cache_key}


@triton.jit
def picky_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr, MODE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if MODE == 1:
        x = x + undefined_name  # noqa: F821  (compile error for MODE=1)
    if MODE == 2:
        offs = offs + 100000  # out-of-bounds store: runtime error for MODE=2
    tl.store(out_ptr + offs, x, mask=offs < n + 100000 if MODE == 2 else m)


def _picky(modes=(0, 1, 2)):
    cfgs = [Config({"BLOCK_SIZE": 64, "MODE": m}) for m in modes]
    return autotune(configs=cfgs, key=["n"], name="test:picky", **FAST)(picky_kernel)


def test_failing_configs_are_recorded_and_skipped():
    x = torch.randn(200)
    out = torch.empty_like(x)
    k = _picky()
    k[lambda m: (triton.cdiv(200, m["BLOCK_SIZE"]),)](x, out, 200)
    assert k.best_config.kwargs["MODE"] == 0 and torch.equal(out, x)
    assert counters["failures"] == 2
    rows = {json.loads(t["config"])["kwargs"]["MODE"]: t for t in get_store().trials("test:picky")}
    assert rows[0]["status"] == "ok"
    assert rows[1]["status"] == "compile_error" and "undefined_name" in rows[1]["error"]
    assert rows[2]["status"] == "runtime_error" and rows[2]["error"]
    assert rows[1]["median_us"] is None
    # a new config set: the failures are not retried
    clear_caches()
    reset_counters()
    k2 = autotune(configs=[Config({"BLOCK_SIZE": b, "MODE": m}) for b, m in ((64, 0), (64, 1), (64, 2),
                                                                             (128, 0))],
                  key=["n"], name="test:picky", **FAST)(picky_kernel)
    k2[lambda m: (triton.cdiv(200, m["BLOCK_SIZE"]),)](x, out, 200)
    assert counters["benchmarks"] == 1 and counters["failures"] == 0


def test_all_configs_failing_raises_with_the_errors():
    k = _picky(modes=(1, 2))
    x = torch.randn(100)
    with pytest.raises(AutotuneError, match="(?s)no config ran.*undefined_name.*out-of-bounds"):
        k[(2,)](x, torch.empty_like(x), 100)
    # a launch where nothing runs is not negative-cached (the launch, not every config, is likely wrong)
    assert get_store().trials("test:picky") == []
    reset_counters()
    with pytest.raises(AutotuneError):
        k[(2,)](x, torch.empty_like(x), 100)
    assert counters["benchmarks"] == 2


def test_negative_cache_is_retried_when_no_config_is_left():
    x = torch.randn(200)
    out = torch.empty_like(x)
    _picky(modes=(0, 1, 2))[lambda m: (triton.cdiv(200, m["BLOCK_SIZE"]),)](x, out, 200)
    clear_caches()
    reset_counters()
    with pytest.raises(AutotuneError):  # only recorded failures are left: they are measured again
        _picky(modes=(1, 2))[(4,)](x, out, 200)
    assert counters["benchmarks"] == 2


def test_reset_to_zero_and_restore_value():
    x = torch.ones(300)
    out = torch.zeros(300)
    k = autotune(configs=configs(), key=["n_elements"], reset_to_zero=["out_ptr"], name="test:acc",
                 **FAST)(acc_kernel)
    k[grid(300)](x, out, 300)
    assert torch.equal(out, x)  # benchmark runs did not accumulate
    out2 = torch.full((300,), 5.0)
    k2 = autotune(configs=configs(), key=["n_elements"], restore_value=["out_ptr"], name="test:acc2",
                  **FAST)(acc_kernel)
    k2[grid(300)](x, out2, 300)
    assert torch.equal(out2, torch.full((300,), 6.0))


def test_hooks_and_config_pre_hook():
    seen = {"pre": 0, "post": 0, "cfg": 0}

    def cfg_hook(nargs):
        assert "x_ptr" in nargs and nargs["BLOCK_SIZE"] == 64
        seen["cfg"] += 1

    cfgs = [Config({"BLOCK_SIZE": 64}, num_warps=4, num_stages=2, pre_hook=cfg_hook),
            Config({"BLOCK_SIZE": 128})]
    k = autotune(configs=cfgs, key=["n_elements"], name="test:hooks",
                 pre_hook=lambda nargs: seen.__setitem__("pre", seen["pre"] + 1),
                 post_hook=lambda nargs, exc: seen.__setitem__("post", seen["post"] + 1), **FAST)(add_kernel)
    launch_add(k, 200)
    assert seen["pre"] == seen["post"] > 0 and seen["cfg"] > 0
    row = [t for t in get_store().trials("test:hooks") if t["num_warps"] == 4][0]
    assert row["num_stages"] == 2 and json.loads(row["config"])["num_warps"] == 4


def test_grid_receives_config_kwargs_merged_with_meta():
    seen = []

    def g(meta):
        seen.append((meta["BLOCK_SIZE"], meta["n_elements"]))
        return (triton.cdiv(meta["n_elements"], meta["BLOCK_SIZE"]),)

    k = make_add()
    x = torch.randn(333)
    out = torch.empty_like(x)
    k[g](x, x, out, 333)
    assert {b for b, _ in seen} == {64, 256, 1024} and all(n == 333 for _, n in seen)
    assert torch.equal(out, x + x)


def test_conflicting_meta_parameter_is_an_error():
    k = make_add()
    x = torch.randn(10)
    with pytest.raises(ValueError, match="conflicting meta-parameters"):
        k[(1,)](x, x, torch.empty_like(x), 10, BLOCK_SIZE=64)


def test_heuristics_compose_in_either_order():
    @triton.jit
    def kern(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr, EVEN: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        if EVEN:
            tl.store(out_ptr + offs, tl.load(x_ptr + offs) + 1.0)
        else:
            m = offs < n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)

    even = {"EVEN": lambda a: a["n"] % a["BLOCK_SIZE"] == 0}
    inner = autotune(configs=configs((64, 128)), key=["n"], name="test:h1", **FAST)(heuristics(even)(kern))
    for n in (256, 250):
        x = torch.randn(n)
        out = torch.empty_like(x)
        inner[lambda m, n=n: (triton.cdiv(n, m["BLOCK_SIZE"]),)](x, out, n)
        assert torch.equal(out, x + 1)
    assert inner.cache_key == kern.cache_key

    outer = heuristics({"EVEN": lambda a: a["n"] % 64 == 0})(
        autotune(configs=configs((64,)), key=["n"], name="test:h2", **FAST)(kern))
    x = torch.randn(192)
    out = torch.empty_like(x)
    outer[lambda m: (triton.cdiv(192, m["BLOCK_SIZE"]),)](x, out, 192)
    assert torch.equal(out, x + 1)


def test_prune_configs_by():
    def early(cfgs, nargs, **kw):
        return [c for c in cfgs if c.kwargs["BLOCK_SIZE"] <= nargs["n_elements"]]

    k = make_add(prune_configs_by={"early_config_prune": early, "perf_model": lambda **a: -a["BLOCK_SIZE"],
                                   "top_k": 1})
    launch_add(k, 300)
    assert k.best_config.kwargs["BLOCK_SIZE"] == 256 and counters["benchmarks"] == 0


def test_budgeted_search_respects_the_trial_budget():
    cfgs = [Config({"BLOCK_SIZE": b}, num_warps=w) for b in (32, 64, 128, 256, 512) for w in (1, 2, 4, 8)]
    k = autotune(configs=cfgs, key=["n_elements"], name="test:budget", max_trials=6, **FAST)(add_kernel)
    launch_add(k, 400)
    assert counters["benchmarks"] == 6
    assert len(get_store().trials("test:budget")) == 6


def test_budgeted_search_is_seeded_and_refines_locally():
    from torch_rbln.autotune.search import Budget, budgeted

    cfgs = [Config({"BLOCK_SIZE": b}, num_warps=w) for b in (32, 64, 128, 256, 512) for w in (1, 2, 4, 8)]
    cost = {c.id: abs(c.kwargs["BLOCK_SIZE"] - 128) + abs(c.num_warps - 4) for c in cfgs}

    def explore(seed):
        order, known = [], {}

        def measure(i):
            order.append(i)
            return float(cost[cfgs[i].id])

        budgeted(cfgs, known, measure, Budget(max_trials=10), seed=seed)
        return order, known

    a, known = explore(7)
    assert explore(7)[0] == a and len(a) == 10 and len(set(a)) == 10
    assert explore(8)[0] != a
    best = min(known, key=known.get)
    assert cfgs[best].kwargs["BLOCK_SIZE"] == 128 and cfgs[best].num_warps == 4  # local refinement found it
    # stored trials are reused and not re-measured
    order, _ = [], None
    known2 = {i: float(cost[cfgs[i].id]) for i in range(5)}
    budgeted(cfgs, known2, lambda i: order.append(i) or 1.0, Budget(max_trials=3), seed=7)
    assert len(order) == 3 and not set(order) & set(range(5))


def test_budgeted_search_time_budget():
    import time

    cfgs = [Config({"BLOCK_SIZE": b}, num_warps=w) for b in (32, 64, 128, 256, 512) for w in (1, 2, 4, 8)]
    k = autotune(configs=cfgs, key=["n_elements"], name="test:tbudget", time_budget=0.0, **FAST)(add_kernel)
    launch_add(k, 400)  # a spent budget still measures one config, so the launch works
    assert counters["benchmarks"] == 1
    reset_counters()

    def slow_bench(fn):
        fn()
        time.sleep(0.05)
        return 1.0

    k = autotune(configs=cfgs, key=["n_elements"], name="test:tbudget2", time_budget=0.3, do_bench=slow_bench,
                 **FAST)(add_kernel)
    launch_add(k, 400)
    assert 1 <= counters["benchmarks"] <= 8  # ~6 at 50 ms each; fewer on a loaded machine


def test_lookup_and_warmup():
    k = make_add()
    x = torch.randn(100)
    assert k.lookup(x, x, x, 100) is None  # not tuned yet; lookup never tunes
    assert counters["benchmarks"] == 0
    launch_add(k, 100)
    assert k.lookup(x, x, x, 100) == k.best_config
    compiled = make_add().warmup(x, x, x, 100, grid=(1,))
    assert len(compiled) == 3


def test_unknown_key_and_bad_options():
    with pytest.raises(ValueError, match="unknown arguments"):
        autotune(configs=configs(), key=["nope"])(add_kernel)
    with pytest.raises(ValueError, match="bucket policy"):
        autotune(configs=configs(), key=["n_elements"], bucket="cube")(add_kernel)
    with pytest.raises(ValueError, match="search"):
        autotune(configs=configs(), key=["n_elements"], search="annealing")(add_kernel)
    assert isinstance(make_add(), Autotuner)
