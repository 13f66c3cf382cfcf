"""The elementwise plans (registry/elementwise.py) and the plans' reset by `kernel.clear_cache()`:
same results and accounting as the general path (the checked implementation, `planned.general_path`),
and every call they do not key left to it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch_rbln.registry import _ops, elementwise
from torch_rbln.registry import plan as _plan

import torch_rbln  # noqa: F401
from torch_rbln import registry

from .planned import general_path, planned

TOL = {torch.float32: (1e-6, 1e-6), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}


def _row(name: str) -> dict:
    return registry.fallback_report().get(name, {"device": 0, "cpu": 0, "reasons": {}})


@pytest.fixture
def general_path_forbidden(monkeypatch):
    """Make the general implementations fail loudly: a call that reaches them did not take a fast path."""

    def forbidden(*args, **kwargs):
        raise AssertionError("general path reached")

    def forbid() -> None:
        monkeypatch.setattr(elementwise, "binary", forbidden)
        monkeypatch.setattr(elementwise, "unary", forbidden)

    return forbid


CASES = [
    ("aten::add", lambda a, b: a + b),
    ("aten::sub", lambda a, b: torch.sub(a, b, alpha=0.5)),
    ("aten::mul", lambda a, b: a * b),
    ("aten::div", lambda a, b: a / b),
    ("aten::lt", lambda a, b: a < b),
    ("aten::exp", lambda a, b: torch.exp(a)),
    ("aten::relu", lambda a, b: F.relu(a)),
    ("aten::gelu", lambda a, b: F.gelu(a)),
    ("aten::gelu", lambda a, b: F.gelu(a, approximate="tanh")),
    ("aten::maximum", lambda a, b: torch.maximum(a, b)),
    ("aten::minimum", lambda a, b: torch.minimum(a, b)),
    ("aten::pow", lambda a, b: a.pow(2)),
    ("aten::add_", lambda a, b: a.clone().add_(b, alpha=2)),
    ("aten::sigmoid_", lambda a, b: a.clone().sigmoid_()),
]


# float32 for every op; one half-precision case (each dtype is a kernel specialisation to compile)
PARAMS = [(name, fn, torch.float32) for name, fn in CASES] + [(*CASES[0], torch.float16)]


IDS = [f"{name}-{i}" for i, (name, _, _) in enumerate(PARAMS)]


@pytest.mark.parametrize(("name", "fn", "dtype"), PARAMS, ids=IDS)
def test_plain_calls_take_the_plan_with_the_general_results(name, fn, dtype, general_path_forbidden):
    a, b = torch.randn(7, 5, dtype=dtype), torch.rand(7, 5, dtype=dtype) + 0.5
    da, db = a.to("rbln"), b.to("rbln")
    with general_path():
        first = fn(da, db)  # the reference: the checked implementation
    general_path_forbidden()
    registry.reset_fallback_report()
    fast = fn(da, db)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(fast.cpu(), first.cpu(), atol=0, rtol=0)
    torch.testing.assert_close(fast.cpu(), fn(a, b), atol=atol, rtol=rtol)
    assert _row(name)["device"] >= 1 and _row(name)["cpu"] == 0


def test_a_nan_input_leaves_the_fast_path_for_the_logged_cpu_fallback():
    a = torch.randn(6)
    da = a.to("rbln")
    torch.exp(da)
    a[2] = float("nan")
    registry.reset_fallback_report()
    result = torch.exp(a.to("rbln"))
    torch.testing.assert_close(result.cpu(), torch.exp(a), equal_nan=True)
    assert _row("aten::exp") == {"device": 0, "cpu": 1, "reasons": {"nan_inf": 1}}


def test_deploy_mode_runs_a_nan_input_on_the_fast_path(monkeypatch, general_path_forbidden):
    a = torch.tensor([1.0, float("nan"), -2.0, float("inf")])
    da = a.to("rbln")
    monkeypatch.setenv("TORCH_RBLN_DEPLOY", "ON")
    torch.exp(da)
    general_path_forbidden()
    registry.reset_fallback_report()
    torch.testing.assert_close(torch.exp(da).cpu(), torch.exp(a), equal_nan=True)
    assert _row("aten::exp") == {"device": 1, "cpu": 0, "reasons": {}}


def test_non_plain_calls_are_left_to_the_general_path():
    base = torch.randn(4, 6)
    d = base.to("rbln")
    fast = planned("add.Tensor")
    assert fast((d, d), {}) is not None
    assert fast((d.t(), d.t()), {}) is None  # not contiguous
    # a broadcast the dense kernel's modes do not read (b over both dims around its own): the tiled plan,
    # with the general path's result bit for bit
    a3, b2 = d.view(2, 2, 6), d[0, :2].reshape(2, 1)
    with general_path():
        general = a3 + b2
    assert torch.equal(fast((a3, b2), {}).cpu(), general.cpu())
    assert fast((d[0], d), {}) is not None  # a broadcast the dense kernel reads (a repeated over rows),
    # planned on its first call: no earlier launch is needed
    assert fast((d, d.half()), {}) is None  # promotion
    assert fast((d, base), {}) is None  # a CPU operand: the general path raises torch's error
    assert fast((d, True), {}) is None  # a bool scalar (promotion rules of its own)
    assert fast((2.0, d), {}) is None  # a scalar first operand
    assert fast((d, d), {"alpha": torch.tensor(2.0)}) is None
    # integers: the plan of the exact integer kernel (tests/registry/test_integer_plans.py)
    assert torch.equal(fast((d.long(), d.long()), {}).cpu(), d.long().cpu() * 2)


BROADCASTS = [
    ("aten::add", (3, 4), (4,), lambda a, b: a + b),  # a bias row repeated over rows
    ("aten::mul", (3, 4), (3, 1), lambda a, b: a * b),  # one value per row (RMSNorm's scale)
    ("aten::sub", (4,), (3, 4), lambda a, b: torch.sub(a, b, alpha=2)),  # a is the repeated row
    ("aten::div", (2, 3, 4), (1,), lambda a, b: a / b),  # a one-element tensor
    ("aten::lt", (3, 4), (4,), lambda a, b: a < b),
    ("aten::maximum", (2, 3, 4), (3, 4), lambda a, b: torch.maximum(a, b)),
    ("aten::add_", (3, 4), (4,), lambda a, b: a.clone().add_(b)),
    ("aten::mul_", (3, 4), (3, 1), lambda a, b: a.clone().mul_(b)),
]


@pytest.mark.parametrize(("name", "a_shape", "b_shape", "fn"), BROADCASTS,
                         ids=[f"{n}-{a}-{b}" for n, a, b, _ in BROADCASTS])
def test_broadcasts_the_dense_kernel_reads_take_the_plan(name, a_shape, b_shape, fn, general_path_forbidden):
    a, b = torch.randn(a_shape), torch.rand(b_shape) + 0.5
    da, db = a.to("rbln"), b.to("rbln")
    with general_path():
        first = fn(da, db)  # the general path: the dense kernel with the layout it chooses
    general_path_forbidden()
    registry.reset_fallback_report()
    fast = fn(da, db)
    assert fast.shape == first.shape and fast.dtype == first.dtype
    torch.testing.assert_close(fast.cpu(), first.cpu(), atol=0, rtol=0)
    torch.testing.assert_close(fast.cpu(), fn(a, b), atol=1e-6, rtol=1e-6)
    assert _row(name) == {"device": 1, "cpu": 0, "reasons": {}}


def test_broadcasts_the_fast_path_leaves_to_the_general_path():
    d = torch.randn(2, 3, 4).to("rbln")
    d + d
    fast = planned("add.Tensor")
    inplace = planned("add_.Tensor")
    column = torch.randn(3, 1).to("rbln")
    with general_path():
        general = d + column  # broadcast on both sides of b: the tiled kernel
    assert torch.equal(fast((d, column), {}).cpu(), general.cpu())  # its plan, bit for bit
    assert fast((d, torch.randn(5).to("rbln")), {}) == "decline: shapes do not broadcast"
    assert inplace((d[0, 0], d), {}) is None  # an in-place result would need self broadcast
    with pytest.raises(RuntimeError, match="single memory location"):
        d[0, 0].add_(d)  # the CPU's error for this call (self is a view of the other operand)
    with pytest.raises(RuntimeError, match="must match the size"):
        d + torch.randn(5).to("rbln")
    nan = torch.tensor([1.0, float("nan"), 2.0, 3.0])
    registry.reset_fallback_report()
    # add is exact for alpha 1; with another alpha, alpha * b may overflow where torch's fma does not,
    # so the plan scans, b's values too
    torch.testing.assert_close(d.add(nan.to("rbln"), alpha=2).cpu(), d.cpu().add(nan, alpha=2),
                               equal_nan=True)
    assert _row("aten::add")["reasons"] == {"nan_inf": 1}


def test_in_place_on_overlapping_views_behaves_as_on_the_cpu():
    base = torch.arange(10, dtype=torch.float32)
    d = base.to("rbln")
    d[2:].add_(d[2:])  # warm the in-place fast path; exact aliasing is fine
    expected = base.clone()
    expected[2:].add_(expected[2:])
    d[0:5].add_(d[5:10])  # one storage, disjoint memory: correct (via the general path)
    expected[0:5].add_(expected[5:10])
    torch.testing.assert_close(d.cpu(), expected)
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        expected[1:6].add_(expected[0:5])
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        d[1:6].add_(d[0:5])  # partial overlap: torch's error, as on the CPU
    torch.testing.assert_close(d.cpu(), expected)


def test_a_user_override_wins_over_the_fast_path():
    x = torch.randn(5)
    dx = x.to("rbln")
    torch.neg(dx)
    torch.neg(dx)
    calls = []

    @registry.register_kernel("aten::neg")
    def my_neg(t):
        calls.append(1)
        return torch.mul(t, -1.0)

    try:
        torch.testing.assert_close(torch.neg(dx).cpu(), -x)
        assert calls == [1]
    finally:
        registry._user.pop("neg.default", None)


def test_plan_signatures_reject_unknown_keywords():
    gelu = elementwise.unary_family("gelu", keyword="approximate", ops={"none": "gelu"})
    d = torch.randn(3).to("rbln")
    assert gelu.signature((d,), {"approximate": "cubic"}) is None
    assert gelu.signature((d,), {"other": 1}) is None
    assert gelu.signature((d,), {"approximate": "none"}) is not None


def test_clear_cache_makes_the_plan_launch_freshly_compiled_code(monkeypatch, general_path_forbidden):
    """`kernel.clear_cache()` drops the registry's kept launches (`_launch._plans`, the fast paths'
    plans): the next call compiles the kernel again and keeps its new launch, instead of running the
    code compiled before the clear."""
    from torch_rbln.dsl.jit import JITFunction
    from torch_rbln.registry import _launch

    a, b = torch.randn(4), torch.randn(4)
    da, db = a.to("rbln"), b.to("rbln")
    da + db  # the plan's first run launches through the checked launch, which keeps the direct launch
    da + db  # the plan fetches it
    kernel = _ops._k("elementwise").binary_dense_kernel
    kept = {full: plan for full, plan in _launch._plans.items() if full[0] is kernel}
    assert kept
    calls = {"compile": 0, "launcher": 0}

    def counted(name):
        original = getattr(JITFunction, name)

        def wrapper(self, *args, **kwargs):
            if self is kernel:
                calls[name] += 1
            return original(self, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(JITFunction, "compile", counted("compile"))
    monkeypatch.setattr(JITFunction, "launcher", counted("launcher"))
    kernel.clear_cache()
    assert not any(full[0] is kernel for full in _launch._plans)
    assert all(plan.launcher is None for plan in _plan._PLANS if plan.kernel is kernel)
    registry.reset_fallback_report()
    torch.testing.assert_close((da + db).cpu(), a + b, atol=0, rtol=0)  # checked launch: compiles afresh
    assert calls == {"compile": 1, "launcher": 1}
    renewed = {full: plan for full, plan in _launch._plans.items() if full[0] is kernel}
    assert renewed and all(renewed[full] is not kept[full] for full in renewed.keys() & kept.keys())
    general_path_forbidden()
    torch.testing.assert_close((da + db).cpu(), a + b, atol=0, rtol=0)  # the plan, new launch
    assert calls == {"compile": 1, "launcher": 1}
    assert _row("aten::add") == {"device": 2, "cpu": 0, "reasons": {}}


WHERES = [
    ((3, 4), (3, 4), (3, 4)),
    ((1, 1, 3, 3), (2, 2, 3, 3), ()),  # an attention mask, scores and a 0-d fill value
    ((4,), (3, 4), (3, 1)),
]


@pytest.mark.parametrize(("c_shape", "a_shape", "b_shape"), WHERES, ids=[str(w) for w in WHERES])
def test_where_takes_the_plan_with_the_general_results(c_shape, a_shape, b_shape, monkeypatch):
    condition, a, b = torch.rand(c_shape) > 0.5, torch.randn(a_shape), torch.randn(b_shape)
    dc, da, db = condition.to("rbln"), a.to("rbln"), b.to("rbln")
    with general_path():
        first = torch.where(dc, da, db)  # the reference: the checked implementation
    monkeypatch.setattr(elementwise, "where",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("general")))
    registry.reset_fallback_report()
    fast = torch.where(dc, da, db)
    assert fast.shape == first.shape and fast.dtype == first.dtype
    torch.testing.assert_close(fast.cpu(), first.cpu(), atol=0, rtol=0)
    torch.testing.assert_close(fast.cpu(), torch.where(condition, a, b), atol=0, rtol=0)
    assert _row("aten::where") == {"device": 1, "cpu": 0, "reasons": {}}


def test_where_calls_no_plan_takes_go_to_the_general_path():
    d = torch.randn(3, 4).to("rbln")
    mask = d > 0
    torch.where(mask, d, d)
    fast = planned("where.self")
    assert fast((mask, d, d), {}) is not None
    assert fast((mask, d, d.half()), {}) is None  # promotion
    assert fast((d > 0.5, d.t(), d.t()), {}) is None  # not contiguous
    assert fast((mask.cpu(), d, d), {}) is None  # a CPU condition
    assert fast((mask.float(), d, d), {}) is None  # a non-bool condition
    assert fast((mask, d, torch.randn(5).to("rbln")), {}) == "decline: shapes do not broadcast"
    nan = torch.full((3, 4), float("nan")).to("rbln")
    selected = fast((mask, d, nan), {})  # where is exact: NaN in b is a value like any other
    expected = torch.where(mask.cpu(), d.cpu(), nan.cpu())
    torch.testing.assert_close(selected.cpu(), expected, equal_nan=True, atol=0, rtol=0)


FILLS_AND_CLAMPS = [
    ("aten::masked_fill", (2, 2, 3, 3), (1, 1, 3, 3), lambda x, m: x.masked_fill(m, -1e9)),
    ("aten::masked_fill", (3, 4), (3, 4), lambda x, m: x.masked_fill(m, 2)),
    ("aten::masked_fill_", (2, 3, 4), (3, 1), lambda x, m: x.clone().masked_fill_(m, 0.5)),
    ("aten::clamp", (3, 4), None, lambda x, m: torch.clamp(x, -0.5, 0.5)),
    ("aten::clamp", (3, 4), None, lambda x, m: torch.clamp(x, min=-0.25)),
    ("aten::clamp", (3, 4), None, lambda x, m: torch.clamp(x, max=0.25)),
    ("aten::clamp_", (3, 4), None, lambda x, m: x.clone().clamp_(-1, 1)),
]


@pytest.mark.parametrize(("name", "x_shape", "mask_shape", "fn"), FILLS_AND_CLAMPS,
                         ids=[f"{n}-{i}" for i, (n, *_) in enumerate(FILLS_AND_CLAMPS)])
def test_masked_fill_and_clamp_take_the_plan_with_the_general_results(name, x_shape, mask_shape, fn,
                                                                           monkeypatch):
    x = torch.randn(x_shape)
    mask = torch.rand(mask_shape) > 0.5 if mask_shape is not None else None
    dx, dmask = x.to("rbln"), (mask.to("rbln") if mask is not None else None)
    with general_path():
        first = fn(dx, dmask)  # the reference: the checked implementation
    fail = lambda *a, **k: (_ for _ in ()).throw(AssertionError("general path reached"))  # noqa: E731
    monkeypatch.setattr(elementwise, "masked_fill", fail)
    monkeypatch.setattr(elementwise, "binary", fail)
    registry.reset_fallback_report()
    fast = fn(dx, dmask)
    torch.testing.assert_close(fast.cpu(), first.cpu(), atol=0, rtol=0)
    torch.testing.assert_close(fast.cpu(), fn(x, mask), atol=0, rtol=0)
    assert _row(name) == {"device": 1, "cpu": 0, "reasons": {}}


def test_masked_fill_and_clamp_calls_no_plan_takes_go_to_the_general_path():
    d = torch.randn(3, 4).to("rbln")
    mask = d > 0
    fill = planned("masked_fill.Scalar")
    fill_ = planned("masked_fill_.Scalar")
    clamp = planned("clamp.default")
    assert fill((d, mask, 1.0), {}) is not None
    assert fill((d, mask.float(), 1.0), {}) is None  # a non-bool mask: the general path decides
    assert fill((d, mask, True), {}) is None  # a bool value
    assert fill((d, mask.cpu(), 1.0), {}) is None  # a CPU mask
    assert fill_((d[0], mask, 1.0), {}) is None  # self would need broadcasting
    assert clamp((d, None, None), {}) is None  # no bounds: torch's error from the CPU path
    assert clamp((d, True, None), {}) is None  # a bool bound
    assert clamp((d, torch.tensor(0.5)), {}) is None  # a tensor bound (clamp.Tensor's business)
