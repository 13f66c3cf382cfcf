"""The plans of the elementwise overloads beyond the plain functional ones (registry/elementwise.py: out=
forms, in-place comparisons, rounding divisions, backward ops, powers, tensor clamps, masked_fill with a
value tensor, fills): the general path's results and accounting, and every call that is not plain left
to the general path."""

from __future__ import annotations

import pytest
import torch
from torch_rbln.registry import _launch, elementwise

import torch_rbln  # noqa: F401
from torch_rbln import registry

from .planned import general_path, planned

A = torch.ops.aten
SHAPE = (7, 5)  # the shape of tests/registry/test_fastpath.py: the same kernel specialisations
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 1e-3)}


def _row(name: str) -> dict:
    return registry.fallback_report().get(name, {"device": 0, "cpu": 0, "reasons": {}})


def _entry(name: str) -> registry.Op:
    return registry.TABLE[[op.name for op in registry.TABLE].index(name)]


def _general(*args, **kwargs):
    raise AssertionError("general path reached")  # the dispatcher turns it into a counted CPU call


@pytest.fixture
def general_path_forbidden(monkeypatch):
    """`forbid()` replaces the checked implementations the elementwise entries call with `_general`:
    a call that reaches them did not take a fast path, and runs on the CPU, counted."""
    return lambda: [monkeypatch.setattr(elementwise, name, _general)
                    for name in ("binary", "unary", "where", "masked_fill", "fill")]


def _out(like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    return torch.empty(like.shape, dtype=dtype or like.dtype, device=like.device)


MASK = torch.rand(SHAPE) > 0.5
# (aten op as the fallback report names it, call on (a, b, c): a any sign, b and c positive). Calls of an
# in-place overload act on a clone; an out= call makes its own out tensor.
CASES = [
    ("aten::add", lambda a, b, c: torch.add(a, b, alpha=2, out=_out(a))),
    ("aten::div", lambda a, b, c: torch.div(a, b, out=_out(a))),
    ("aten::lt", lambda a, b, c: torch.lt(a, b, out=_out(a, torch.bool))),
    ("aten::ge_", lambda a, b, c: a.clone().ge_(b)),
    ("aten::le_", lambda a, b, c: a.clone().le_(0.25)),
    ("aten::sqrt", lambda a, b, c: torch.sqrt(b, out=_out(b))),
    ("aten::gelu", lambda a, b, c: A.gelu.out(a, approximate="tanh", out=_out(a))),
    ("aten::gelu_", lambda a, b, c: A.gelu_(a.clone())),
    ("aten::pow", lambda a, b, c: torch.pow(b, a)),
    ("aten::pow", lambda a, b, c: torch.pow(b, c, out=_out(b))),
    ("aten::pow", lambda a, b, c: a.pow(3)),
    ("aten::pow", lambda a, b, c: b.pow(-0.5)),
    ("aten::pow", lambda a, b, c: b.pow(2.5)),
    ("aten::pow", lambda a, b, c: torch.pow(b, 0.5, out=_out(b))),
    ("aten::pow", lambda a, b, c: torch.pow(a, 2, out=_out(a))),
    ("aten::div", lambda a, b, c: torch.div(a * 4, b, rounding_mode="trunc")),
    ("aten::div", lambda a, b, c: torch.div(a * 4, 0.3, rounding_mode="trunc")),
    ("aten::div", lambda a, b, c: torch.div(a * 4, b, rounding_mode="floor", out=_out(a))),
    ("aten::div_", lambda a, b, c: (a * 4).div_(-0.7, rounding_mode="floor")),
    ("aten::floor_divide", lambda a, b, c: torch.floor_divide(a * 4, b)),
    ("aten::gelu_backward", lambda a, b, c: A.gelu_backward(b, a, approximate="tanh")),
    ("aten::threshold_backward", lambda a, b, c: A.threshold_backward(b, a, 0.1)),
    ("aten::sigmoid_backward", lambda a, b, c: A.sigmoid_backward(a, b)),
    ("aten::silu_backward", lambda a, b, c: A.silu_backward(a, b)),
    ("aten::clamp_min", lambda a, b, c: torch.clamp_min(a, -0.2)),
    ("aten::clamp_max_", lambda a, b, c: a.clone().clamp_max_(0.3)),
    ("aten::clamp", lambda a, b, c: torch.clamp(a, -0.5, 0.5, out=_out(a))),
    ("aten::clamp", lambda a, b, c: torch.clamp(a, -b, c)),
    ("aten::clamp", lambda a, b, c: torch.clamp(a, -b[:1], c[:1])),  # bounds repeated over rows
    ("aten::clamp", lambda a, b, c: torch.clamp(a, -b[:, :1].contiguous(), c[:, :1].contiguous())),  # per row
    ("aten::clamp", lambda a, b, c: torch.clamp(a, max=c)),
    ("aten::clamp_", lambda a, b, c: a.clone().clamp_(min=-b)),
    ("aten::clamp", lambda a, b, c: torch.clamp(a, -b, c, out=_out(a))),
    ("aten::clamp_", lambda a, b, c: a.clone().clamp_(-b, c)),
    ("aten::where", lambda a, b, c: torch.where(MASK.to(a.device), a, b, out=_out(a))),
    ("aten::masked_fill", lambda a, b, c: a.masked_fill(MASK.to(a.device), torch.tensor(0.75))),
    ("aten::masked_fill_", lambda a, b, c: a.clone().masked_fill_(MASK[0].to(a.device), torch.tensor(-0.5))),
    ("aten::masked_fill_", lambda a, b, c: a.clone().masked_fill_(MASK.to(a.device),
                                                                   torch.tensor(-2.0).to(a.device))),
    ("aten::fill_", lambda a, b, c: a.clone().fill_(1.25)),
]
PARAMS = [(name, fn, torch.float32) for name, fn in CASES] + [(*CASES[0], torch.float16)]


IDS = [f"{name}-{i}" for i, (name, _, _) in enumerate(PARAMS)]


@pytest.mark.parametrize(("name", "fn", "dtype"), PARAMS, ids=IDS)
def test_plain_calls_take_the_plan_with_the_general_results(name, fn, dtype, general_path_forbidden):
    a = torch.randn(SHAPE, dtype=dtype)
    b, c = torch.rand(SHAPE, dtype=dtype) + 0.5, torch.rand(SHAPE, dtype=dtype) + 0.5
    da, db, dc = a.to("rbln"), b.to("rbln"), c.to("rbln")
    da + db  # the elementwise kernels are loaded (fill_ stays on the host before)
    with general_path():
        first = fn(da, db, dc)  # the reference: the checked implementation
    general_path_forbidden()
    registry.reset_fallback_report()
    fast = fn(da, db, dc)
    assert fast.shape == first.shape and fast.dtype == first.dtype
    torch.testing.assert_close(fast.cpu(), first.cpu(), atol=0, rtol=0, equal_nan=True)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(fast.cpu(), fn(a, b, c), atol=atol, rtol=rtol, equal_nan=True)
    assert _row(name)["device"] >= 1 and _row(name)["cpu"] == 0


def test_zero_fills_a_tensor_holding_nan_without_scanning_it(general_path_forbidden):
    x = torch.tensor([float("nan"), 1.0, float("inf"), 2.0]).to("rbln")
    x + x  # kernels loaded (the NaN add runs on the CPU)
    x.clone().zero_()
    general_path_forbidden()
    registry.reset_fallback_report()
    for _ in range(2):  # the first fill of a size keeps its launch, the second runs it
        torch.testing.assert_close(x.clone().zero_().cpu(), torch.zeros(4), atol=0, rtol=0)
    assert _row("aten::zero_") == {"device": 2, "cpu": 0, "reasons": {}}


def test_fills_stay_on_the_host_until_the_kernels_are_loaded(monkeypatch):
    x = torch.randn(6).to("rbln")
    x.fill_(1.0)
    loaded = dict(_launch._modules)
    for name in loaded:
        monkeypatch.delitem(_launch._modules, name)  # (restored after the test)
    assert planned("fill_.Scalar")((x, 2.0), {}) is None
    registry.reset_fallback_report()
    torch.testing.assert_close(x.fill_(2.0).cpu(), torch.full((6,), 2.0))
    assert _row("aten::fill_")["reasons"] == {"DSL not loaded yet": 1}


def test_fills_run_on_the_device_once_any_kernel_module_is_loaded(monkeypatch):
    """A program of gathers and scatters loads no elementwise kernel of its own: its fills
    (`zeros_like(x).scatter_add_(...)`) must not wait for one on the host."""
    x = torch.randn(6).to("rbln")
    x.fill_(1.0)
    loaded = dict(_launch._modules)
    for name in loaded:
        if name != "cnn":
            monkeypatch.delitem(_launch._modules, name)
    _launch.kernel_module("cnn")
    registry.reset_fallback_report()
    for _ in range(2):  # the first call builds the plan, the second runs it
        torch.testing.assert_close(x.fill_(2.0).cpu(), torch.full((6,), 2.0))
        torch.testing.assert_close(x.zero_().cpu(), torch.zeros(6))
    assert _row("aten::fill_") == {"device": 2, "cpu": 0, "reasons": {}}
    assert _row("aten::zero_") == {"device": 2, "cpu": 0, "reasons": {}}


def test_fill_plans_take_tensor_parallel_grids_through_the_checked_launch(monkeypatch):
    x = torch.empty(5000).to("rbln")  # two programs
    monkeypatch.setattr(elementwise, "device_tp", lambda index: 2)
    launched = []
    monkeypatch.setattr(elementwise.Plan, "launch_checked", lambda plan, args: launched.append(args))
    fill = planned("fill_.Scalar")
    assert fill((x, 1.0), {}) is x and len(launched) == 1  # kernel[grid] splits it over the group
    assert fill((x, 1j), {}) is None
    assert fill((x.view(50, 100).t(), 1.0), {}) is None
    ids = x.long()
    assert fill((ids, 1.0), {}) is ids  # the integer kernel's fill plan, as tensor-parallel aware
    assert fill((ids, 2.5), {}) is None  # a fraction: the implementation decides


OUT_DECLINES = [
    ("non-contiguous", lambda d: torch.empty(5, 7).to(d.device).t()),
    ("needs a resize", lambda d: torch.empty(0).to(d.device)),
    ("another dtype", lambda d: torch.empty(SHAPE, dtype=torch.float16).to(d.device)),
    ("on the CPU", lambda d: torch.empty(SHAPE)),
]


@pytest.mark.parametrize(("what", "make_out"), OUT_DECLINES, ids=[w for w, _ in OUT_DECLINES])
def test_an_out_no_plan_writes_takes_the_general_path(what, make_out):
    a, b = torch.randn(SHAPE), torch.rand(SHAPE) + 0.5
    da, db = a.to("rbln"), b.to("rbln")
    torch.add(da, db, out=_out(da))
    torch.exp(da, out=_out(da))
    out = make_out(da)
    assert planned("add.out")((da, db), {"out": out}) is None
    assert planned("exp.out")((da,), {"out": out}) is None
    assert planned("where.self_out")((MASK.to("rbln"), da, db), {"out": out}) is None
    if what == "on the CPU":
        with pytest.raises(RuntimeError, match="device"):
            torch.add(da, db, out=out)  # torch's error, from the general path
        return
    result = torch.add(da, db, out=out)
    expected = torch.add(a, b, out=make_out(a))
    assert result.shape == expected.shape and result.dtype == expected.dtype
    torch.testing.assert_close(result.cpu(), expected, atol=1e-3, rtol=1e-3)


def test_out_aliasing_an_input_exactly_is_fast_and_partial_overlap_is_not():
    base = torch.randn(12)
    d = base.to("rbln")
    a, b = d[:4], d[8:]
    torch.mul(a, b, out=_out(a))
    mul = planned("mul.out")
    assert mul((a, b), {"out": d[4:8]}) is not None  # one storage, disjoint memory
    assert mul((a, b), {"out": d[2:6]}) is None  # partial overlap
    exact = a.clone()
    expected = exact.cpu() * b.cpu()
    assert mul((exact, b), {"out": exact}) is exact  # the very same tensor: elementwise, read first
    torch.testing.assert_close(exact.cpu(), expected, atol=0, rtol=0)
    sq = planned("sqrt.out")
    y = d[:6].abs()
    torch.sqrt(y, out=_out(y))
    assert sq((y,), {"out": y}) is y


def test_argument_forms_no_plan_takes():
    a, b = torch.randn(SHAPE).to("rbln"), (torch.rand(SHAPE) + 0.5).to("rbln")
    torch.div(a, b, rounding_mode="floor")
    a.clone().lt_(b)
    torch.clamp(a, -b, b)
    div = planned("div.Tensor_mode")
    assert div((a, b), {"rounding_mode": "floor"}) is not None
    assert div((a, b), {"rounding_mode": "round"}) is None  # the general path gives torch's error
    with pytest.raises(RuntimeError, match="rounding_mode"):
        torch.div(a, b, rounding_mode="round")
    assert planned("lt_.Tensor")((a[0], b), {}) is None  # self would need broadcasting
    assert planned("gelu_backward.default")((a, b), {"approximate": "cubic"}) is None
    assert planned("threshold_backward.default")((a, b, torch.tensor(0.1)), {}) is None
    assert planned("pow.Tensor_Scalar")((a, 1j), {}) is None
    assert planned("pow.Tensor_Scalar")((a, True), {}) is None
    clamp = planned("clamp.Tensor")
    assert clamp((a, None, None), {}) is None
    assert clamp((a, -b.half(), b), {}) is None  # promotion
    assert planned("clamp_min.default")((a, None), {}) is None
    assert planned("add.out")((a, b), {}) is None  # no out: not this overload's call


def test_a_nan_input_of_an_out_form_goes_to_the_logged_cpu_fallback():
    a = torch.randn(SHAPE)
    da = a.to("rbln")
    torch.exp(da, out=_out(da))
    a[1, 2] = float("nan")
    registry.reset_fallback_report()
    out = _out(da)
    torch.exp(a.to("rbln"), out=out)
    torch.testing.assert_close(out.cpu(), torch.exp(a), equal_nan=True)
    assert _row("aten::exp") == {"device": 0, "cpu": 1, "reasons": {"nan_inf": 1}}


def test_masked_fill_value_tensors_the_fast_path_leaves_to_the_general_path():
    x = torch.randn(SHAPE)
    dx, mask = x.to("rbln"), MASK.to("rbln")
    dx.masked_fill(mask, 0.5)
    fast = planned("masked_fill.Tensor")
    assert fast((dx, mask, torch.tensor(0.5)), {}) is not None
    assert fast((dx, mask, torch.tensor(0.5, dtype=torch.float64)), {}) is None  # no float64 kernels
    assert fast((dx, mask, torch.tensor([0.5])), {}) is None  # not 0-d
    # masked_fill is exact: NaN and infinite values are plain values to select
    torch.testing.assert_close(fast((dx, mask, torch.tensor(float("nan"))), {}).cpu(),
                               x.masked_fill(MASK, float("nan")), equal_nan=True, atol=0, rtol=0)
    torch.testing.assert_close(fast((dx, mask, torch.tensor(float("inf")).to("rbln")), {}).cpu(),
                               x.masked_fill(MASK, float("inf")), atol=0, rtol=0)
    element = torch.tensor([1.0, 2.5]).to("rbln")[1]  # a 0-d rbln view at an offset into its storage
    half = torch.tensor(-1.5, dtype=torch.float16).to("rbln")
    cpu_element = torch.tensor([1.0, -0.25])[1]  # a 0-d CPU float32 view at an offset, read from memory
    for value, number in ((element, 2.5), (cpu_element, -0.25), (half, -1.5), (torch.tensor(3), 3.0)):
        expected = x.masked_fill(MASK, number)
        torch.testing.assert_close(fast((dx, mask, value), {}).cpu(), expected, atol=0, rtol=0)
    registry.reset_fallback_report()
    result = dx.masked_fill(mask, torch.tensor(float("nan")))
    torch.testing.assert_close(result.cpu(), x.masked_fill(MASK, float("nan")), equal_nan=True)
    assert _row("aten::masked_fill") == {"device": 1, "cpu": 0, "reasons": {}}


def test_tensor_clamp_whose_upper_bound_is_not_plain_gives_the_general_result():
    x, low, high = torch.randn(SHAPE), -torch.rand(SHAPE), torch.rand(SHAPE)
    dx, dlow, dhigh = x.to("rbln"), low.to("rbln"), high.to("rbln")
    torch.clamp(dx, dlow, dhigh)
    high[0, 0] = float("nan")  # the second launch is declined after the first ran
    dhigh = high.to("rbln")
    registry.reset_fallback_report()
    torch.testing.assert_close(torch.clamp(dx, dlow, dhigh).cpu(), torch.clamp(x, low, high), equal_nan=True)
    inplace = dx.clone()
    inplace.clamp_(dlow, dhigh)
    torch.testing.assert_close(inplace.cpu(), torch.clamp(x, low, high), equal_nan=True)
    torch.testing.assert_close(dx.cpu(), x, atol=0, rtol=0)
    assert _row("aten::clamp")["reasons"] == {"nan_inf": 1}


def test_deploy_mode_tensor_clamp_propagates_nan_of_x_and_either_bound_as_torch(monkeypatch,
                                                                                general_path_forbidden):
    """With the NaN/Inf scan off, NaN reaches both launches of the tensor clamp's fast path: a NaN in x,
    min or max gives NaN there, as torch's clamp (and the general path's maximum/minimum) does."""
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([nan, 0.5, 0.5, -2.0, 3.0, inf, 0.5, nan])
    low = torch.tensor([0.0, nan, 0.0, -1.0, nan, 0.0, 1.0, nan])
    high = torch.tensor([1.0, 1.0, nan, 1.0, 2.0, 1.0, 0.0, nan])  # 6: min > max gives max
    dx, dlow, dhigh = x.to("rbln"), low.to("rbln"), high.to("rbln")
    monkeypatch.setenv("TORCH_RBLN_DEPLOY", "ON")
    first = torch.clamp(dx, dlow, dhigh)
    general_path_forbidden()
    registry.reset_fallback_report()
    fast = torch.clamp(dx, dlow, dhigh)
    inplace = dx.clone().clamp_(dlow, dhigh)
    expected = torch.clamp(x, low, high)
    for result in (first, fast, inplace):
        torch.testing.assert_close(result.cpu(), expected, atol=0, rtol=0, equal_nan=True)
    assert _row("aten::clamp") == {"device": 1, "cpu": 0, "reasons": {}}
    assert _row("aten::clamp_")["cpu"] == 0


def test_tensor_clamp_fast_path_declines_bounds_overlapping_the_result():
    x = torch.randn(8)
    dx = x.to("rbln")
    low, high = -torch.rand(8).to("rbln"), torch.rand(8).to("rbln")
    torch.clamp(dx, low, high)
    dx.clone().clamp_(low, high)
    clamp_ = planned("clamp_.Tensor")
    assert clamp_((dx.clone(), low, high), {}) is not None
    base = dx.clone()
    assert clamp_((base, low, base), {}) is None  # max is the tensor written in place
    out = torch.empty(8, device="rbln")
    clamp_out = planned("clamp.Tensor_out")
    torch.clamp(dx, low, high, out=out)
    assert clamp_out((dx, low, high), {"out": out}) is not None
    assert clamp_out((dx, low, high), {"out": high}) is None  # out= is the upper bound


def test_relu_like_plans_key_only_their_overloads_form():
    """A functional overload's signature keys no out= call (that is the .out overload's)."""
    a = torch.randn(SHAPE).to("rbln")
    assert planned("relu.default")((a,), {}) is not None
    assert planned("relu.default")((a,), {"out": a}) is None


@pytest.mark.parametrize("rows", [96, 12], ids=["large", "small"])
@pytest.mark.parametrize("case", ["dense", "row mask", "column value", "transposed", "in place"])
def test_where_and_masked_fill_run_the_tiled_kernel_and_match_cpu(case, rows):
    """where / masked_fill run `where_tiled_kernel` (affine tiles, no division per lane) at every size,
    with broadcast and strided operands, in place too: CPU's values exactly."""
    from torch_rbln.kernels import elementwise

    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(rows, 80, generator=g), torch.randn(rows, 80, generator=g)
    mask = torch.rand(rows, 80, generator=g) > 0.5
    if case == "row mask":
        mask = mask[:1]
    if case == "column value":
        y = y[:, :1]
    if case == "transposed":
        x = torch.randn(80, rows, generator=g).t()
    launched = []
    original = type(elementwise.where_tiled_kernel).__getitem__

    def spy(kernel, grid):
        launched.append(kernel.fn.__name__)
        return original(kernel, grid)

    with pytest.MonkeyPatch.context() as patch:
        from torch_rbln.registry import _launch

        patch.setattr(_launch, "_plans", {})  # no kept launch: every launch goes through the kernel
        patch.setattr(type(elementwise.where_tiled_kernel), "__getitem__", spy)
        if case == "in place":
            expected = x.clone().masked_fill_(mask, -2.5)
            actual = x.to("rbln").masked_fill_(mask.to("rbln"), -2.5)
        else:
            expected = torch.where(mask, x, y)
            actual = torch.where(mask.to("rbln"), x.to("rbln"), y.to("rbln"))
    assert torch.equal(actual.cpu(), expected)
    assert launched and set(launched) == {"where_tiled_kernel"}, launched


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32])
def test_a_number_minus_a_tensor_takes_its_plan_with_the_general_results(dtype):
    """`1 - t` / `1.0 - mask` (`rsub`: `sub` with the number first, every generation step and attention
    mask) take a plan keyed by the tensor, the number read per call: the general path's launch, bit for
    bit, NaN/Inf included (sub is exact); a float number with an integer tensor promotes (the
    implementation), as does an alpha (the implementation scans for it)."""
    x = (torch.randn(3, 5, generator=torch.Generator().manual_seed(2)) * 100).to(dtype)
    if dtype.is_floating_point:
        x[0, 0], x[0, 1] = float("nan"), float("-inf")
    numbers = [1, 0, -3] + ([1.0, 1e-3, 70000.0] if dtype.is_floating_point else [2**40])
    dx = x.to("rbln")
    registry.reset_fallback_report()
    for number in numbers:
        with general_path():
            general = number - dx
        got = number - dx
        assert got.dtype == x.dtype and torch.equal(got.cpu().nan_to_num(7), general.cpu().nan_to_num(7))
        assert torch.equal(got.cpu().nan_to_num(7), (number - x).nan_to_num(7)), number
        assert torch.equal(torch.rsub(dx, number).cpu().nan_to_num(7), torch.rsub(x, number).nan_to_num(7))
    plans = registry._kernels["sub.Tensor"].plans()
    assert plans[("first", "sub", dtype, x.shape, 0, None, None)].run is not None
    assert planned("sub.Tensor")((1.5 if not dtype.is_floating_point else 1.5j, dx), {}) is None
    assert registry.fallback_report()["aten::sub"]["cpu"] == 0


TILED_CALLS = [
    # (op, a's shape, b's shape, dtype): broadcasts the dense kernel's modes do not read
    ("mul", (2, 4, 3, 16), (2, 1, 3, 16), torch.float32),  # Llama's RoPE q * cos: cos over the heads
    ("add", (2, 4, 3, 5), (2, 1, 1, 5), torch.bfloat16),  # an attention mask over heads and queries
    ("sub", (3, 1, 6), (1, 4, 1), torch.float32),  # both sides broadcast
    ("lt", (2, 4, 3, 5), (2, 1, 3, 1), torch.float32),  # a comparison: a bool result
]


@pytest.mark.parametrize(("op", "a_shape", "b_shape", "dtype"), TILED_CALLS)
def test_broadcasts_the_dense_kernel_does_not_read_take_a_tiled_plan(op, a_shape, b_shape, dtype):
    """Contiguous operands that broadcast other than as a row or a column take a plan of the tiled
    kernel (its sizes and strides fixed by the key's shapes): the general path's launch and result bit
    for bit, NaN/Inf included, from the first call on, counted as a device call."""
    generator = torch.Generator().manual_seed(len(a_shape) + len(op))
    a = torch.randn(a_shape, generator=generator).to(dtype)
    b = torch.randn(b_shape, generator=generator).to(dtype)
    a.view(-1)[0], b.view(-1)[-1] = float("nan"), float("-inf")
    da, db = a.to("rbln"), b.to("rbln")
    fn = getattr(torch, op)
    with general_path():
        general = fn(da, db)
    registry.reset_fallback_report()
    for _ in range(2):
        got = planned(f"{op}.Tensor")((da, db), {})
        assert got is not None and got.dtype == general.dtype
        assert torch.equal(got.cpu().nan_to_num(7), general.cpu().nan_to_num(7))
    assert torch.equal(fn(da, db).cpu().nan_to_num(7), fn(a, b).nan_to_num(7))
    plans = registry._kernels[f"{op}.Tensor"].plans()
    assert any(plan.kernel is not None and plan.kernel.__name__ == "binary_tiled_kernel"
               for plan in plans.values())
