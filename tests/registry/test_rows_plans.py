"""The rows family's plans (registry/rows.py): softmax / log_softmax and their backward, layer norm and
its backward. The checked implementation's results bitwise (`planned.general_path`), from the first
call on (a new plan's first run takes the checked launch, later runs the kept one or the launch by
address), counted as device calls; NaN/Inf inputs found by the scan or by the layer-norm kernels' own
check; every call they do not key left to the implementation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch_rbln.registry import _launch, rows
from torch_rbln.registry import plan as _plan

import torch_rbln  # noqa: F401
from torch_rbln import registry

from .planned import entry, general_path, planned, to_cpu, to_rbln

A = torch.ops.aten
TOL = {torch.float32: (1e-6, 1e-6), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}


def _row(name: str) -> dict:
    return registry.fallback_report().get(name, {"device": 0, "cpu": 0, "reasons": {}})


def _x(*shape):
    return torch.randn(*shape)


def _failing(what: str):
    return lambda *a, **k: (_ for _ in ()).throw(AssertionError(what))


def _forget_plans() -> None:
    for name in registry._kernels:
        registry._kernels[name].plans().clear()


def _kept_plans(*kernels) -> list:
    """The live plans of `kernels` that hold a kept launch."""
    return [plan for plan in list(_plan._PLANS) if plan.kernel in kernels and plan.kept() is not None]


def _memo_run(name: str):
    """`(args, kwargs) -> result` through the plan the dispatcher of `name` keeps for that signature."""
    family, memo = entry(name).planner, registry._kernels[name].plans()

    def call(args: tuple, kwargs: dict):
        key, operands = family.signature(args, kwargs)
        return memo[key].run(operands)

    return call


# ---------------------------------------------------------------- softmax

@pytest.mark.parametrize("log", [False, True])
def test_softmax_over_short_rows_takes_the_plan(log, monkeypatch, launches_forbidden):
    x = torch.randn(6, 33) * 4
    dx = x.to("rbln")
    fn = torch.log_softmax if log else torch.softmax
    with general_path():
        general = fn(dx, -1)  # the reference: the checked implementation
    monkeypatch.setattr(rows, "softmax", _failing("general"))
    _forget_plans()
    registry.reset_fallback_report()
    first = fn(dx, dim=1)  # a new plan: the checked launch
    launches_forbidden()
    again = fn(dx, dim=1)  # the kept launch
    for fast in (first, again):
        torch.testing.assert_close(fast.cpu(), general.cpu(), atol=0, rtol=0)
        torch.testing.assert_close(fast.cpu(), fn(x, -1), atol=1e-6, rtol=1e-6)
    name = "aten::_log_softmax" if log else "aten::_softmax"
    assert _row(name) == {"device": 2, "cpu": 0, "reasons": {}}


def test_softmax_plans_leave_other_calls_to_the_implementation():
    d = torch.randn(4, 5).to("rbln")
    fast = planned("_softmax.default")
    assert fast((d, -1, False), {}) is not None
    assert fast((d, 0, False), {}) is None  # not the last dim
    assert fast((d.t(), -1, False), {}) is None  # not contiguous
    assert fast((d.half(), -1, True), {}) is None  # half_to_float
    assert fast((torch.randn(2, 5000).to("rbln"), -1, False), {}) is None  # rows longer than a block
    backward = planned("_softmax_backward_data.default")
    assert backward((d, d, 1, torch.float32), {}) is not None
    assert backward((d, d, 1, torch.float16), {}) is None  # mixed input dtype: declined there
    assert backward((d, d.cpu(), 1, torch.float32), {}) is None  # a CPU operand
    assert backward((d[:2], d, 1, torch.float32), {}) is None  # shapes differ
    nan = torch.full((4, 5), float("nan")).to("rbln")
    assert fast((nan, -1, False), {}).isnan().all()  # softmax is exact on NaN: its plan runs it
    assert backward((d, nan, 1, torch.float32), {}) is None  # the backward is scanned: a NaN declines


def _special_rows(dtype: torch.dtype, n: int) -> torch.Tensor:
    """Rows of n: finite; some -inf (masked scores); all -inf; one +inf; one NaN; -inf and +inf."""
    rows = torch.randn(6, n, generator=torch.Generator().manual_seed(n)) * 3
    rows[1, ::2] = -math.inf
    rows[2] = -math.inf
    rows[3, n // 2] = math.inf
    rows[4, 1] = math.nan
    rows[5, 0], rows[5, -1] = -math.inf, math.inf
    return rows.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_of_nan_and_infinities_matches_the_cpu_on_device(log, dtype):
    """softmax / log_softmax are registered exact: rows holding -inf (a top-k sampler's masked scores),
    only -inf, +inf or NaN run on the device, on the plan (twice: built, then kept), and give what the
    CPU gives: zeros / -inf where masked, NaN rows where the CPU has them."""
    fn = torch.log_softmax if log else torch.softmax
    x = _special_rows(dtype, 33)
    expected = fn(x.float(), -1).to(dtype)
    registry.reset_fallback_report()
    for _ in range(2):
        got = fn(x.to("rbln"), -1).cpu()
        torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3, equal_nan=True)
        assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.isinf(), expected.isinf())
    name = "aten::_log_softmax" if log else "aten::_softmax"
    assert _row(name) == {"device": 2, "cpu": 0, "reasons": {}}


@pytest.mark.parametrize("log", [False, True])
def test_softmax_of_long_rows_and_leading_dims_with_infinities_on_device(log, monkeypatch):
    """The chunked (autotuned) kernel of rows longer than a block, and a dim moved last, on the same rows."""
    monkeypatch.setattr(rows, "ONE_BLOCK", 16)  # rows of 33 take the chunked kernel
    fn = torch.log_softmax if log else torch.softmax
    x = _special_rows(torch.float32, 33)
    registry.reset_fallback_report()
    for got, expected in ((fn(x.to("rbln"), -1), fn(x, -1)), (fn(x.t().to("rbln"), 0), fn(x.t(), 0))):
        torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-5, equal_nan=True)
        assert torch.equal(got.cpu().isinf(), expected.isinf())
    name = "aten::_log_softmax" if log else "aten::_softmax"
    assert _row(name)["cpu"] == 0


@pytest.mark.parametrize("log", [False, True])
def test_softmax_over_a_middle_dim_takes_the_column_kernel_with_torchs_nan_and_infinities(log, monkeypatch):
    """(outer, r, inner) columns, one lane each: the kernel is launched (no copy to the last place),
    columns past one block of lanes, and a column with -inf, one with only -inf, one with +inf and
    one with NaN give the CPU's values (NaN where the CPU has NaN)."""
    from torch_rbln.registry import rows as registry_rows

    launched = []
    real = registry_rows._launch.launch_grid

    def recording(kernel, grid, args, **constexprs):
        launched.append((kernel.__name__, grid, constexprs["BLOCK"]))
        return real(kernel, grid, args, **constexprs)

    monkeypatch.setattr(registry_rows._launch, "launch_grid", recording)
    x = torch.randn(3, 9, 4100, generator=torch.Generator().manual_seed(5))  # two blocks of 4,096 lanes
    x[0, 2, 0] = float("-inf")
    x[1, :, 1] = float("-inf")
    x[2, 4, 2] = float("inf")
    x[0, 7, 3] = float("nan")
    function = torch.log_softmax if log else torch.softmax
    registry.reset_fallback_report()
    actual = function(x.to("rbln"), 1).cpu()
    torch.testing.assert_close(actual, function(x, 1), atol=1e-6, rtol=1e-5, equal_nan=True)
    assert launched == [("softmax_middle_kernel", (3, 2), 4096)]
    assert registry.fallback_report()["aten::_log_softmax" if log else "aten::_softmax"]["cpu"] == 0


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dim", [0, 1])
def test_softmax_over_a_leading_dim_runs_on_device(dim, log):
    """softmax / log_softmax over a dim other than the last run the middle-dim kernel on the columns
    (their backward the row kernel on a copy with that dim moved last, moved back): same values as the
    CPU, no fallback."""
    x = torch.randn(6, 5, 7, generator=torch.Generator().manual_seed(dim))
    function = torch.log_softmax if log else torch.softmax
    expected_x = x.clone().requires_grad_()
    expected = function(expected_x, dim)
    grad = torch.randn(expected.shape, generator=torch.Generator().manual_seed(9))
    expected.backward(grad)
    device_x = x.to("rbln").requires_grad_()
    registry.reset_fallback_report()
    actual = function(device_x, dim)
    actual.backward(grad.to("rbln"))
    assert actual.is_contiguous()
    torch.testing.assert_close(actual.cpu(), expected.detach(), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(device_x.grad.cpu(), expected_x.grad, atol=1e-6, rtol=1e-5)
    report = registry.fallback_report()
    assert not any(entry.get("cpu") for entry in report.values()), registry.format_report()


# ---------------------------------------------------------------- backward calls

def _layer_norm_case(mask, n_rows=3):
    x, w, b = _x(n_rows, 5), _x(5), _x(5)
    _, mean, rstd = A.native_layer_norm.default(x, [5], w, b, 1e-5)
    return (_x(n_rows, 5), x, [5], mean, rstd, w, b, mask), {}


CASES = {
    "softmax_backward": ("_softmax_backward_data.default", lambda: ((_x(3, 5), torch.softmax(_x(3, 5), 1), 1,
                                                                      torch.float32), {})),
    "log_softmax_backward": ("_log_softmax_backward_data.default",
                             lambda: ((_x(3, 5), torch.log_softmax(_x(3, 5), 1), -1, torch.float32), {})),
    "layer_norm_backward": ("native_layer_norm_backward.default",
                            lambda: _layer_norm_case([True, True, True])),
    "layer_norm_backward_dx": ("native_layer_norm_backward.default",
                               lambda: _layer_norm_case([True, False, False])),
    # more rows than the one-program kernel takes: the dx row kernel and the dw/db column kernel
    "layer_norm_backward_many_rows": ("native_layer_norm_backward.default",
                                      lambda: _layer_norm_case([True, True, True], n_rows=20)),
    "layer_norm_backward_many_rows_dx": ("native_layer_norm_backward.default",
                                         lambda: _layer_norm_case([True, False, False], n_rows=20)),
    "layer_norm_backward_many_rows_dw": ("native_layer_norm_backward.default",
                                         lambda: _layer_norm_case([False, True, False], n_rows=20)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_plain_backward_calls_take_the_plan_with_the_general_results(case, launches_forbidden):
    name, make = CASES[case]
    overload = registry._overload(name)
    torch.manual_seed(0)
    args, kwargs = make()
    dargs = tuple(to_rbln(a) for a in args)
    with general_path():
        general = overload(*dargs, **kwargs)  # the reference: the checked implementation
    _forget_plans()
    registry.reset_fallback_report()
    first = overload(*dargs, **kwargs)  # a new plan: the checked launches
    launches_forbidden()
    again = overload(*dargs, **kwargs)  # the kept launches (or the launch by address)
    row = _row(f"aten::{name.split('.')[0]}")
    assert row["device"] == 2 and row["cpu"] == 0, row
    expected = overload(*args, **kwargs)
    expected = list(expected) if isinstance(expected, tuple) else expected
    for fast in (first, again):
        got = to_cpu(fast)
        torch.testing.assert_close(got, to_cpu(general), atol=0, rtol=0)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_a_half_precision_layer_norm_backward_takes_the_plan(launches_forbidden):
    """The launch keys hold every operand's dtype: a float16 call keeps and finds its own launch."""
    x, w, b, grad = (t.half() for t in (_x(3, 8), _x(8), _x(8), _x(3, 8)))
    d = [t.to("rbln") for t in (grad, x)]
    _, mean, rstd = A.native_layer_norm.default(d[1], [8], w.to("rbln"), b.to("rbln"), 1e-5)
    args = (*d, [8], mean, rstd, w.to("rbln"), b.to("rbln"), [True, True, True])
    with general_path():
        general = A.native_layer_norm_backward.default(*args)
    A.native_layer_norm_backward.default(*args)
    launches_forbidden()
    registry.reset_fallback_report()
    fast = A.native_layer_norm_backward.default(*args)
    torch.testing.assert_close(to_cpu(fast), to_cpu(general), atol=0, rtol=0)
    stats = (mean.cpu().float(), rstd.cpu().float())
    expected = A.native_layer_norm_backward.default(grad.float(), x.float(), [8], *stats, w.float(),
                                                    b.float(), [True, True, True])
    torch.testing.assert_close([t.float() for t in to_cpu(fast)], list(expected), atol=2e-2, rtol=2e-2)
    assert _row("aten::native_layer_norm_backward") == {"device": 1, "cpu": 0, "reasons": {}}


@pytest.mark.parametrize("n_rows", [3, 20], ids=["one-program kernel", "two kernels"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_layer_norm_backward_declines_a_nan_or_inf_in_any_of_its_six_inputs(dtype, n_rows, monkeypatch):
    """A NaN/Inf in grad, x, mean, rstd, weight or bias (32- and 16-bit words) leaves the plan, and the
    implementation's logged CPU fallback gives CPU's results. The one-program kernel launched by
    address finds it itself (its CHECK: no scan runs); the two-kernel launch scans first."""
    case, _ = _layer_norm_case([True, True, True], n_rows)
    args = [to_rbln(a.to(dtype)) if isinstance(a, torch.Tensor) else a for a in case]
    A.native_layer_norm_backward.default(*args)
    A.native_layer_norm_backward.default(*args)  # the plan's kept launch fetched
    backward = _memo_run("native_layer_norm_backward.default")
    assert backward(tuple(args), {}) is not None
    if n_rows == 3:
        for plan in _kept_plans(_launch.kernel_module("rows").norm_backward_small_kernel):
            monkeypatch.setattr(plan, "scan_all", _failing("scanned"))
        assert backward(tuple(args), {}) is not None
    for position in (0, 1, 3, 4, 5, 6):
        for bad in (float("nan"), float("-inf")):
            spoiled = list(args)
            host = args[position].cpu().clone()
            host.view(-1)[-1] = bad
            spoiled[position] = host.to("rbln")
            assert backward(tuple(spoiled), {}) is None, (position, bad)
    monkeypatch.undo()
    registry.reset_fallback_report()
    got = A.native_layer_norm_backward.default(*spoiled)  # a -Inf bias, which the backward does not read
    assert _row("aten::native_layer_norm_backward") == {"device": 0, "cpu": 1, "reasons": {"nan_inf": 1}}
    want = A.native_layer_norm_backward.default(*[a.cpu() if isinstance(a, torch.Tensor) else a
                                                  for a in spoiled])
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), w, atol=0, rtol=0)


def _small_backward_plans(monkeypatch) -> list:
    """The kept plans of the one-program layer-norm backward, their launch by tensors made to fail (a
    call must launch by address, from the addresses its input scan read)."""
    plans = _kept_plans(_launch.kernel_module("rows").norm_backward_small_kernel)
    assert plans and all(plan.by_address for plan in plans)
    for plan in plans:
        monkeypatch.setattr(plan, "launcher", _failing("by tensors"))
    return plans


@pytest.mark.parametrize("mask", [[True, True, True], [True, False, False]])
def test_small_layer_norm_backward_launches_by_address(mask, monkeypatch, launches_forbidden):
    case, _ = _layer_norm_case(mask)
    args = [to_rbln(a) for a in case]
    with general_path():
        general = A.native_layer_norm_backward.default(*args)
    A.native_layer_norm_backward.default(*args)
    _small_backward_plans(monkeypatch)
    launches_forbidden()
    registry.reset_fallback_report()
    fast = A.native_layer_norm_backward.default(*args)
    for got, want in zip(fast, general, strict=True):
        assert (got is None) == (want is None)
        if got is not None:
            torch.testing.assert_close(got.cpu(), want.cpu(), atol=0, rtol=0)
    assert _row("aten::native_layer_norm_backward") == {"device": 1, "cpu": 0, "reasons": {}}


def test_a_fault_in_the_layer_norm_backward_launch_by_address_takes_the_implementation(monkeypatch):
    case, _ = _layer_norm_case([True, True, True])
    args = [to_rbln(a) for a in case]
    first = A.native_layer_norm_backward.default(*args)
    faulted = []
    for plan in _small_backward_plans(monkeypatch):  # a kernel that reports a fault returns False
        monkeypatch.setattr(plan, "by_address", lambda *a: faulted.append(a) or False)
    registry.reset_fallback_report()
    again = A.native_layer_norm_backward.default(*args)
    assert faulted
    for got, want in zip(again, first, strict=True):
        torch.testing.assert_close(got.cpu(), want.cpu(), atol=0, rtol=0)
    assert _row("aten::native_layer_norm_backward") == {"device": 1, "cpu": 0, "reasons": {}}


# ---------------------------------------------------------------- layer norm

LAYER_NORMS = [
    ((3, 8), (8,), True, True, torch.float32),
    ((2, 3, 4), (3, 4), True, False, torch.float32),
    ((5, 16), (16,), False, False, torch.float32),
    ((4, 8), (8,), True, True, torch.bfloat16),
]


def _forward_plans() -> list:
    """The layer-norm forward plans with a kept launch (not rms_norm's, which launch the same kernels)."""
    R = _launch.kernel_module("rows")
    kept = _kept_plans(R.norm_row_kernel, R.norm_kernel)
    return [plan for plan in kept if isinstance(plan, rows.NormPlan)]


def _forbid_launch_by_tensors(monkeypatch) -> list:
    """Make the layer-norm plans' launch by tensors fail: a call must launch by address (from the
    addresses its input scan read). Returns those plans."""
    plans = _forward_plans()
    assert plans and all(plan.by_address for plan in plans)
    for plan in plans:
        monkeypatch.setattr(plan, "launcher", _failing("by tensors"))
    return plans


@pytest.mark.parametrize(("shape", "normalized", "has_w", "has_b", "dtype"), LAYER_NORMS,
                         ids=[f"{s}-{n}-{w}-{b}-{d}" for s, n, w, b, d in LAYER_NORMS])
def test_layer_norm_takes_the_plan_with_the_general_results(shape, normalized, has_w, has_b, dtype,
                                                            monkeypatch):
    x = torch.randn(shape, dtype=dtype)
    w = torch.randn(normalized, dtype=dtype) if has_w else None
    b = torch.randn(normalized, dtype=dtype) if has_b else None
    dx = x.to("rbln")
    dw, db = (t.to("rbln") if t is not None else None for t in (w, b))
    call = torch.ops.aten.native_layer_norm.default
    with general_path():
        general = call(dx, list(normalized), dw, db, 1e-5)  # the reference: the checked implementation
    monkeypatch.setattr(rows, "layer_norm", _failing("general"))
    _forget_plans()
    registry.reset_fallback_report()
    first = call(dx, list(normalized), dw, db, 1e-5)  # a new plan: the checked launch
    _forbid_launch_by_tensors(monkeypatch)
    again = call(dx, list(normalized), dw, db, 1e-5)  # the launch by address
    for fast in (first, again):
        for got, want in zip(fast, general, strict=True):
            assert got.shape == want.shape and got.dtype == want.dtype
            torch.testing.assert_close(got.cpu(), want.cpu(), atol=0, rtol=0)
        atol, rtol = TOL[dtype]
        expected = F.layer_norm(x.float(), normalized, None if w is None else w.float(),
                                None if b is None else b.float(), 1e-5).to(dtype)
        torch.testing.assert_close(fast[0].cpu(), expected, atol=max(atol, 1e-5), rtol=max(rtol, 1e-5))
    assert _row("aten::native_layer_norm") == {"device": 2, "cpu": 0, "reasons": {}}


def test_a_fault_in_the_layer_norm_launch_by_address_leaves_the_call_to_the_implementation(monkeypatch):
    x = torch.randn(3, 8)
    w, b = torch.randn(8), torch.randn(8)
    args = (x.to("rbln"), [8], w.to("rbln"), b.to("rbln"), 1e-5)
    call = torch.ops.aten.native_layer_norm.default
    first = call(*args)
    faulted = []
    for plan in _forbid_launch_by_tensors(monkeypatch):  # a kernel that reports a fault returns False
        monkeypatch.setattr(plan, "by_address", lambda *a: faulted.append(a) or False)
    registry.reset_fallback_report()
    again = call(*args)  # the implementation re-runs it: the same results, on the device
    assert faulted
    for got, want in zip(again, first, strict=True):
        torch.testing.assert_close(got.cpu(), want.cpu(), atol=0, rtol=0)
    assert _row("aten::native_layer_norm") == {"device": 1, "cpu": 0, "reasons": {}}


NON_FINITE_NORMS = [  # (rows, n, dtype, where the NaN/Inf goes)
    (3, 8, torch.float32, "x"),
    (3, 8, torch.float32, "weight"),
    (2, 8, torch.bfloat16, "bias"),
    (2, 5000, torch.float32, "x"),  # rows longer than one block: the chunked kernel checks too
    (2, 5000, torch.float16, "bias"),
]


@pytest.mark.parametrize(("n_rows", "n", "dtype", "where"), NON_FINITE_NORMS,
                         ids=[f"{r}x{n}-{d}-{w}" for r, n, d, w in NON_FINITE_NORMS])
def test_the_layer_norm_kernel_checks_its_inputs_instead_of_a_scan(n_rows, n, dtype, where, monkeypatch):
    """Outside deploy mode the plan's launch by address scans nothing: the kernel's own check faults
    on a NaN/Inf, and the implementation then scans and takes the logged CPU fallback."""
    tensors = {"x": torch.randn(n_rows, n, dtype=dtype), "weight": torch.randn(n, dtype=dtype),
               "bias": torch.randn(n, dtype=dtype)}
    call = torch.ops.aten.native_layer_norm.default
    device = {name: t.to("rbln") for name, t in tensors.items()}
    call(device["x"], [n], device["weight"], device["bias"], 1e-5)  # the plan's checked launch keeps it
    for plan in _forbid_launch_by_tensors(monkeypatch):
        monkeypatch.setattr(plan, "scan_all", _failing("scanned"))
    monkeypatch.setattr(rows, "all_finite", _failing("scanned"))
    registry.reset_fallback_report()
    clean = call(device["x"], [n], device["weight"], device["bias"], 1e-5)
    assert _row("aten::native_layer_norm") == {"device": 1, "cpu": 0, "reasons": {}}
    x, w, b = (tensors[name].float() for name in ("x", "weight", "bias"))
    atol = 2e-2 if dtype != torch.float32 else 1e-5
    expected = F.layer_norm(x, (n,), w, b, 1e-5).to(dtype)
    torch.testing.assert_close(clean[0].cpu(), expected, atol=atol, rtol=1e-2)
    tensors[where].view(-1)[n // 2] = float("nan") if where != "weight" else float("-inf")
    device[where] = tensors[where].to("rbln")
    registry.reset_fallback_report()
    got = call(device["x"], [n], device["weight"], device["bias"], 1e-5)
    assert _row("aten::native_layer_norm") == {"device": 0, "cpu": 1, "reasons": {"nan_inf": 1}}
    want = call(tensors["x"], [n], tensors["weight"], tensors["bias"], 1e-5)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), w, equal_nan=True, atol=0, rtol=0)


def test_deploy_mode_runs_a_nan_layer_norm_on_the_plan_without_the_kernel_check(monkeypatch):
    x = torch.tensor([[1.0, float("nan"), 2.0, 3.0], [0.5, 1.5, -1.0, 2.0]])
    w, b = torch.randn(4), torch.randn(4)
    monkeypatch.setenv("TORCH_RBLN_DEPLOY", "ON")
    call = torch.ops.aten.native_layer_norm.default
    args = (x.to("rbln"), [4], w.to("rbln"), b.to("rbln"), 1e-5)
    monkeypatch.setattr(rows, "layer_norm", _failing("general"))
    registry.reset_fallback_report()
    for _ in range(2):  # the plan's checked launch, then its kept launch
        out, mean, rstd = call(*args)
        assert out[0].isnan().all() and not out[1].isnan().any()  # the NaN row propagates, the other exact
        torch.testing.assert_close(out[1].cpu(), F.layer_norm(x[1:], (4,), w, b, 1e-5)[0], atol=1e-5,
                                   rtol=1e-5)
    assert _row("aten::native_layer_norm") == {"device": 2, "cpu": 0, "reasons": {}}


def test_layer_norm_calls_no_plan_takes_go_to_the_implementation():
    x = torch.randn(3, 8).to("rbln")
    w = torch.randn(8).to("rbln")
    torch.ops.aten.native_layer_norm.default(x, [8], w, w, 1e-5)
    fast = planned("native_layer_norm.default")
    assert fast((x, [8], w, w, 1e-5), {}) is not None
    assert fast((x.t(), [3], None, None, 1e-5), {}) is None  # not contiguous
    assert fast((x, [8], w.half(), w, 1e-5), {}) is None  # a weight of another dtype
    assert fast((x, [8], w.cpu(), w, 1e-5), {}) is None  # a weight on the CPU
    assert fast((x, [4], None, None, 1e-5), {}) is None  # not x's trailing dims
    assert fast((x, [8], torch.randn(4).to("rbln"), None, 1e-5), {}) is None  # a weight of another size
    nan = torch.full((8,), float("nan")).to("rbln")
    assert fast((x, [8], nan, w, 1e-5), {}) is None  # a NaN weight: the implementation reports it
    assert fast((x, [8], w, nan, 1e-5), {}) is None  # a NaN bias
    assert fast((torch.full((3, 8), float("inf")).to("rbln"), [8], w, w, 1e-5), {}) is None  # an Inf input
    assert fast((x, [8], w, w, None), {}) is None  # an eps that is not a number
