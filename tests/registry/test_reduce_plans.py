"""The reduction family's plans (registry/reduce.py): the checked implementation's results bitwise
(`planned.general_path`), close to the CPU's, counted as device calls, from the first call on; every
call they do not key left to the implementation."""

from __future__ import annotations

import pytest
import torch
from torch_rbln.registry import _launch, reduce

import torch_rbln  # noqa: F401
from torch_rbln import registry

from .planned import general_path, planned, to_cpu

A = torch.ops.aten
# sums of n float32 terms accumulate in float32 on the device, in another order than on the CPU
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}


def _row(name: str) -> dict:
    return registry.fallback_report().get(name, {"device": 0, "cpu": 0, "reasons": {}})


@pytest.fixture
def reduce_forbidden(monkeypatch):
    """Make the checked reduction fail loudly: a call that reaches it did not take a plan."""

    def forbid() -> None:
        def general(*args, **kwargs):
            raise AssertionError("general reduction reached")

        monkeypatch.setattr(reduce, "reduce", general)

    return forbid


# (aten op name, call): the row kernel (last dim, all elements) and the middle kernel (leading or middle
# dims), values, indices or both
CALLS = [
    ("aten::sum", lambda t: t.sum(-1)),
    ("aten::sum", lambda t: t.sum(1, keepdim=True)),
    ("aten::sum", lambda t: torch.sum(t, (), keepdim=True)),
    ("aten::sum", lambda t: t.sum()),
    ("aten::sum", lambda t: t.sum(0)),  # a bias gradient: the middle kernel
    ("aten::mean", lambda t: t.mean()),
    ("aten::mean", lambda t: t.mean(-1, keepdim=False)),
    ("aten::amax", lambda t: t.amax(-1)),
    ("aten::amin", lambda t: t.amin()),
    ("aten::amax", lambda t: t.amax(0, keepdim=True)),  # the middle kernel with a scratch index buffer
    ("aten::max", lambda t: torch.max(t, 1, keepdim=True)),
    ("aten::min", lambda t: torch.min(t, -1)),
    ("aten::max", lambda t: torch.max(t, 0)),  # the middle kernel storing indices
    ("aten::argmax", lambda t: torch.argmax(t)),  # flattened
    ("aten::argmin", lambda t: torch.argmin(t, 1)),
    ("aten::var", lambda t: torch.var(t, 1, correction=0, keepdim=True)),
    ("aten::var", lambda t: torch.var(t)),
    ("aten::std", lambda t: torch.std(t)),
    ("aten::std", lambda t: torch.std(t, -1, keepdim=True)),
]
# float32 for every case, then one float16 and one bfloat16 case, rows longer than the smallest row
# block, and three-dim tensors (each is a kernel specialisation to compile)
PARAMS = [(*call, torch.float32, (3, 5)) for call in CALLS] + [
    (*CALLS[8], torch.float16, (3, 5)),
    (*CALLS[0], torch.bfloat16, (3, 5)),
    (*CALLS[0], torch.float32, (2, 300)),
    ("aten::amax", lambda t: t.amax(1, keepdim=True), torch.float32, (2, 3, 4)),  # middle dim
    ("aten::mean", lambda t: t.mean((-1, 1)), torch.float32, (2, 3, 4)),  # trailing dims
    ("aten::sum", lambda t: t.sum((0, 1)), torch.float32, (2, 3, 4)),  # leading dims
]
IDS = [f"{name}-{i}-{str(dtype)[6:]}" for i, (name, _, dtype, _) in enumerate(PARAMS)]


@pytest.mark.parametrize(("name", "fn", "dtype", "shape"), PARAMS, ids=IDS)
def test_plain_reduce_calls_take_the_plan_with_the_general_results(name, fn, dtype, shape, reduce_forbidden,
                                                                  launches_forbidden):
    x = torch.randn(*shape, dtype=dtype)
    dx = x.to("rbln")
    with general_path():
        general = fn(dx)  # the reference: the checked implementation
    reduce_forbidden()
    for memo in (registry._kernels[n].plans() for n in registry._kernels):
        memo.clear()
    registry.reset_fallback_report()
    first = fn(dx)  # a new plan: its first run takes the checked launch
    launches_forbidden()
    again = fn(dx)  # the kept launch
    for result in (first, again):
        torch.testing.assert_close(to_cpu(result), to_cpu(general), atol=0, rtol=0)  # also dtype and shape
        expected = fn(x)
        atol, rtol = TOL[dtype]
        torch.testing.assert_close(to_cpu(result), to_cpu(tuple(expected) if isinstance(expected, tuple)
                                                      else expected), atol=atol, rtol=rtol)
    assert _row(name) == {"device": 2, "cpu": 0, "reasons": {}}


def test_reduce_calls_no_plan_takes_go_to_the_implementation():
    base = torch.randn(4, 6)
    d = base.to("rbln")
    fast = planned("sum.dim_IntList")
    assert fast((d, [-1]), {}) is not None
    assert fast((d, [1], True), {}).shape == (4, 1)  # keepdim either way
    assert fast((d, [-1], False), {}).shape == (4,)
    assert fast((d, [-1]), {"dtype": None}) is not None
    torch.testing.assert_close(fast((d, [0]), {}).cpu(), base.sum(0), atol=1e-5, rtol=1e-5)  # a leading dim
    torch.testing.assert_close(fast((d, [0, 1]), {}).cpu(), base.sum(), atol=1e-5, rtol=1e-5)  # all dims
    assert fast((d, [2]), {}) == "decline: dim 2 out of range"  # torch's error from the CPU kernel
    assert fast((d, [-3]), {}) == "decline: dim -3 out of range"
    assert fast((d.t(), [-1]), {}) is None  # not contiguous
    assert fast((d, [-1]), {"dtype": torch.float32}) is None  # dtype= given
    assert fast((d, [-1]), {"dtype": torch.float64}) is None
    assert fast((d.long(), [-1]), {}) is not None  # integer input: the int64 row kernel's plan
    assert fast((d.long(), [0]), {}) is None  # over a leading dim: the implementation's moving copy
    assert fast((d.double(), [-1]), {}) is None  # a dtype without kernels
    assert fast((d, [-1], 1), {}) is None  # keepdim not a bool
    assert fast((d, [-1.0]), {}) is None  # a dim not an int
    zero_d = torch.randn(())
    torch.testing.assert_close(fast((zero_d.to("rbln"), []), {}).cpu(), zero_d)  # 0-d
    assert fast((torch.empty(0, 3).to("rbln"), [-1]), {}) is None  # empty
    assert fast((base, [-1]), {}) is None  # a CPU tensor
    assert planned("mean.default")((d, None), {}) is None  # more arguments than the overload takes
    cube = torch.randn(2, 3, 4).to("rbln")
    assert fast((cube, [0, 2]), {}) is None  # scattered dims: a transposing copy first
    indexed = planned("max.dim")
    assert indexed((d, 1), {}) is not None
    assert indexed((d.t(), 1), {}) is None  # not contiguous
    assert indexed((d, 1), {"keepdim": True}) is None  # a keyword the overload's schema does not make
    values, indices = indexed((d, 0), {})  # the middle-reduce kernel
    assert torch.equal(indices.cpu(), base.max(0).indices)
    values, indices = indexed((d.half(), 1), {})  # a new specialisation: planned on its first call
    assert torch.equal(indices.cpu(), base.half().max(1).indices)
    var = planned("var.correction")
    torch.testing.assert_close(var((d, [1]), {"correction": 2}).cpu(), base.var(1, correction=2), atol=1e-5,
                               rtol=1e-5)
    torch.testing.assert_close(var((d, [0, 1]), {}).cpu(), base.var(), atol=1e-5, rtol=1e-5)
    assert var((d, [1]), {"correction": torch.tensor(1.0)}) is None
    with pytest.raises(IndexError):
        d.sum(2)
    torch.testing.assert_close(d.sum(0).cpu(), base.sum(0), atol=1e-5, rtol=1e-5)


def test_scattered_dims_take_the_implementation_on_the_device():
    x = torch.randn(2, 3, 4)
    memo = registry._kernels["sum.dim_IntList"].plans()
    memo.clear()
    registry.reset_fallback_report()
    torch.testing.assert_close(x.to("rbln").sum([0, 2]).cpu(), x.sum([0, 2]), atol=1e-5, rtol=1e-5)
    assert list(memo.values()) == [reduce.NO_PLAN]
    assert _row("aten::sum") == {"device": 1, "cpu": 0, "reasons": {}}


def test_reduce_plans_leave_tensor_parallel_grids_to_the_checked_launch(monkeypatch):
    d = torch.randn(3, 4).to("rbln")
    d.mean(-1)
    d.mean()
    d.max(1)
    checked = []
    real = _launch.launch
    monkeypatch.setattr(_launch, "launch",
                        lambda kernel, *a, **k: (checked.append(kernel), real(kernel, *a, **k)))
    monkeypatch.setattr(reduce, "device_tp", lambda index: 2)
    registry.reset_fallback_report()
    d.mean()  # one row: one NPU, the kept launch
    assert checked == []
    d.mean(-1)  # three rows could be split over a group of NPUs
    d.max(1)
    assert len(checked) == 2
    assert _row("aten::mean") == {"device": 2, "cpu": 0, "reasons": {}}


def test_a_nan_input_leaves_the_reduce_plan_for_the_logged_cpu_fallback():
    x = torch.randn(2, 3)
    x.to("rbln").sum(-1)
    x.to("rbln").sum(-1)
    x[1, 2] = float("nan")
    registry.reset_fallback_report()
    result = x.to("rbln").sum(-1)
    torch.testing.assert_close(result.cpu(), x.sum(-1), equal_nan=True)
    assert _row("aten::sum") == {"device": 0, "cpu": 1, "reasons": {"nan_inf": 1}}


def test_deploy_mode_runs_a_nan_input_on_the_reduce_plan(monkeypatch, reduce_forbidden):
    x = torch.tensor([[1.0, float("nan"), -2.0], [3.0, 0.5, float("inf")]])
    dx = x.to("rbln")
    monkeypatch.setenv("TORCH_RBLN_DEPLOY", "ON")
    with general_path():
        general = dx.amax(-1)
    reduce_forbidden()
    registry.reset_fallback_report()
    fast = dx.amax(-1)
    torch.testing.assert_close(fast.cpu(), general.cpu(), atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(fast.cpu(), x.amax(-1), equal_nan=True)
    assert torch.equal(A.argmax.default(dx, 1).cpu(), A.argmax.default(x, 1))
    assert _row("aten::amax") == {"device": 1, "cpu": 0, "reasons": {}}
    assert _row("aten::argmax") == {"device": 1, "cpu": 0, "reasons": {}}


NONFINITE_ROWS = [
    [1.0, float("nan"), 3.0, float("nan"), 3.0],  # the first NaN wins, values NaN
    [float("-inf")] * 5,  # every element the extreme: index 0
    [float("inf"), 2.0, float("inf"), -1.0, float("-inf")],  # ties at +inf: the first
    [-2.0, float("-inf"), 7.0, 7.0, float("-inf")],  # ties at a finite maximum: the first
    [float("inf")] * 5,
    [0.5, -0.5, float("-inf"), float("nan"), float("inf")],
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["max", "min", "argmax", "argmin", "amax", "amin"])
def test_extremes_of_nan_and_inf_stay_on_the_device_with_torchs_values_and_indices(name, dtype):
    """max/min (values and indices), argmax/argmin and amax/amin select an element: the kernels give
    torch's NaN (its first index), infinities and first-of-ties on every path (the plan over the last
    dim, the middle-dim kernel, all elements, the checked implementation of a strided input), so these
    ops scan no input and a NaN/Inf (greedy decoding's -inf logits) stays on the device."""
    rows = torch.tensor(NONFINITE_ROWS, dtype=dtype)
    cube = torch.stack([rows, rows.flip(0), rows.roll(2, 1)])  # (3, 6, 5)
    fn = getattr(torch, name)
    calls = [(cube, {"dim": -1}), (cube, {"dim": -1}), (cube, {"dim": 1}), (cube.transpose(1, 2), {"dim": 1})]
    calls.append((cube, {"dim": 0}) if name not in ("amax", "amin") else (cube, {"dim": (0, 2)}))
    calls.append((cube, {}) if name not in ("max", "min") else (cube[1], {"dim": 0}))
    registry.reset_fallback_report()
    for x, kwargs in calls:
        got, want = fn(x.to("rbln"), **kwargs), fn(x, **kwargs)
        got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape, (name, kwargs)
            torch.testing.assert_close(g.cpu(), w, atol=0, rtol=0, equal_nan=True, msg=f"{name} {kwargs}")
    row = registry.fallback_report()[f"aten::{name}"]
    assert row["cpu"] == 0 and row["device"] == len(calls), row


def _isin_cases(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids (37, 2), test elements) of `dtype`: floats hold NaN (equal to nothing) and -0.0 (equal to
    0.0)."""
    x = torch.tensor([0, 1, 2, 3, 1, 5, 7, 1] * 5)[:37].to(dtype)
    t = torch.tensor([1, 7]).to(dtype)
    if dtype.is_floating_point:
        x[3], x[4] = float("nan"), -0.0
        t = torch.tensor([float("nan"), 0.0, 7.0]).to(dtype)
    return torch.stack([x, x.flip(0)], 1), t


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("invert", [False, True])
def test_isin_plan_and_implementation_match_the_cpu(dtype, invert):
    """`torch.isin` of one dtype runs `isin_kernel` (plan and implementation alike) over contiguous
    elements, a column (`ids[:, -1]`, as generate asks every step) and a (37, 1) column, bit for bit
    with the CPU; a whole strided matrix is copied first by the implementation."""
    ids, t = _isin_cases(dtype)
    dids, dt = ids.to("rbln"), t.to("rbln")
    pick = [lambda a: a[:, 0].contiguous(), lambda a: a[:, -1], lambda a: a[:, 1:], lambda a: a.t()]
    plan_of = planned("isin.Tensor_Tensor")
    registry.reset_fallback_report()
    for view in pick:
        want = torch.isin(view(ids), t, invert=invert)
        with general_path():
            general = torch.isin(view(dids), dt, invert=invert)
        assert torch.equal(general.cpu(), want)
        via_plan = plan_of((view(dids), dt), {"invert": invert})
        if view(dids).dim() == 1 or view(dids).shape[1] == 1:
            assert via_plan is not None and torch.equal(via_plan.cpu(), want)
        for _ in range(2):
            assert torch.equal(torch.isin(view(dids), dt, invert=invert).cpu(), want)
    assert _row("aten::isin")["cpu"] == 0


def test_isin_of_bools_raises_torchs_error_from_the_cpu():
    flags = torch.tensor([True, False]).to("rbln")
    with pytest.raises(RuntimeError, match="Unsupported input type encountered for isin"):
        torch.isin(flags, flags)


INTEGER_CALLS = [
    ("aten::sum", lambda t: t.sum(-1)), ("aten::sum", lambda t: t.sum()),
    ("aten::sum", lambda t: t.sum((1, 2), keepdim=True)),
    ("aten::max", lambda t: t.max()), ("aten::amax", lambda t: t.amax(-1)),
    ("aten::max", lambda t: torch.max(t, -1)), ("aten::min", lambda t: torch.min(t, 2, keepdim=True)),
    ("aten::argmax", lambda t: t.argmax()), ("aten::argmin", lambda t: t.argmin(-1)),
    ("aten::amin", lambda t: t.amin((1, 2))),
]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_reductions_over_trailing_dims_take_their_plan(dtype, reduce_forbidden):
    """bool/int reductions over the trailing dims (`unfinished_sequences.max()`, `mask.sum(-1)`: every
    generation step) take a plan of the exact int64 row kernel: torch's values, dtypes (sum into int64)
    and first indices, with the checked implementation forbidden after each signature's first call."""
    x = torch.randint(-5, 5, (3, 4, 7), generator=torch.Generator().manual_seed(4)).to(dtype)
    x[1, 2, 3] = x[1, 2, 5] = x[1, 2].max()  # ties: the first index
    calls = INTEGER_CALLS[:3] if dtype is torch.bool else INTEGER_CALLS  # (torch has no bool max)
    dx = x.to("rbln")
    for _, fn in calls:
        fn(dx)
    reduce_forbidden()
    registry.reset_fallback_report()
    for name, fn in calls:
        got, want = fn(dx), fn(x)
        got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g.cpu(), w), name
        assert _row(name)["cpu"] == 0


def test_isin_with_many_test_elements_takes_the_broadcast_compare():
    """Past ISIN_KERNEL_TESTS test elements (a long banned-id list against a few last tokens) the kernel
    would compare every lane of a block with each: the plan leaves it to the broadcast compare and `any`,
    with torch's result."""
    x, t = torch.tensor([5, 7, -1]), torch.arange(reduce.ISIN_KERNEL_TESTS + 1)
    assert planned("isin.Tensor_Tensor")((x.to("rbln"), t.to("rbln")), {}) is None
    assert torch.equal(torch.isin(x.to("rbln"), t.to("rbln")).cpu(), torch.isin(x, t))


def test_isin_of_a_growing_columns_ids_keeps_one_plan_and_launches_it_directly(monkeypatch):
    """`isin(ids[:, -1], eos)` every decoding step: the column's stride grows with the ids, and is a
    runtime value of one plan (not a key per stride), launched by the kept launch over the column's span
    (`strided`) instead of the checked launch; each result is the CPU's."""
    from torch_rbln.registry.plan import Plan

    memo = registry._kernels["isin.Tensor_Tensor"].plans()
    memo.clear()
    eos = torch.tensor([1, 7])
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 9, (3, 4), generator=generator)
    device_ids, device_eos = ids.to("rbln"), eos.to("rbln")
    torch.isin(device_ids[:, -1], device_eos)  # the first launch of each specialisation (checked)
    torch.isin(device_ids[:, 1], device_eos, invert=True)
    checked = []
    real = Plan.launch_checked
    isin_kernel = reduce._k("reduce").isin_kernel

    def spied(self, args):
        if self.kernel is isin_kernel:
            checked.append(args)
        return real(self, args)

    monkeypatch.setattr(Plan, "launch_checked", spied)
    for _ in range(12):
        step = torch.randint(0, 9, (3, 1), generator=generator)
        ids, device_ids = torch.cat([ids, step], -1), torch.cat([device_ids, step.to("rbln")], -1)
        assert torch.equal(torch.isin(device_ids[:, -1], device_eos).cpu(), torch.isin(ids[:, -1], eos))
        assert torch.equal(torch.isin(device_ids[:, 1], device_eos, invert=True).cpu(),
                           torch.isin(ids[:, 1], eos, invert=True))
    assert not checked
    assert len(memo) == 2  # one plan per (column, invert), whatever the stride
