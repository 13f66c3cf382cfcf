"""The gather family's plans (registry/gather.py): index_select, embedding backward, cat and arange give
the checked implementation's results bitwise (`planned.general_path`) from the first call on, counted
as device calls, and every call they do not key is left to the implementation."""

from __future__ import annotations

import pytest
import torch
from torch_rbln.registry import _finite_scan, _launch, gather

import torch_rbln  # noqa: F401
from torch_rbln import registry

from .planned import general_path, planned, to_cpu, to_rbln

A = torch.ops.aten


def _row(name: str) -> dict:
    return registry.fallback_report().get(name, {"device": 0, "cpu": 0, "reasons": {}})


def _x(*shape):
    return torch.randn(*shape)


CASES = {
    "index_select_1d": ("index_select.default", lambda: ((_x(4), 0, torch.tensor([3, 0, 1, 2])), {})),
    "index_select_rows": ("index_select.default", lambda: ((_x(5, 3), 0, torch.tensor([4, 0, 4])), {})),
    "index_select_middle": ("index_select.default",
                            lambda: ((_x(2, 3, 4), 1, torch.tensor([2, 0], dtype=torch.int32)), {})),
    "embedding_backward": ("embedding_dense_backward.default",
                           lambda: ((_x(4, 3), torch.tensor([1, 0, 1, 3]), 5, 1, False), {})),
    "cat": ("cat.default", lambda: (([_x(2, 3), _x(1, 3)],), {})),
    "cat_dim1": ("cat.default", lambda: (([_x(2, 3), _x(2, 2)], 1), {})),
    "cat_three": ("cat.default", lambda: (([_x(2, 3), _x(1, 3), _x(1, 3)],), {})),
    "cat_large": ("cat.default", lambda: (([_x(40, 64), _x(30, 64)],), {})),  # tiled copies
}


@pytest.mark.parametrize("case", list(CASES))
def test_plain_calls_take_the_plan_with_the_general_results(case, launches_forbidden):
    name, make = CASES[case]
    overload = registry._overload(name)
    torch.manual_seed(0)
    args, kwargs = make()
    dargs = tuple(to_rbln(a) for a in args)
    with general_path():
        general = overload(*dargs, **kwargs)  # the reference: the checked implementation
    memo = registry._kernels[name].plans()
    memo.clear()
    registry.reset_fallback_report()
    first = overload(*dargs, **kwargs)  # a new plan: the checked launch
    if case != "cat_large":  # (tiled copies of a slice: the copy kernels' checked launch each time)
        launches_forbidden()
    again = overload(*dargs, **kwargs)  # the kept launch
    assert len(memo) == 1 and next(iter(memo.values())).run is not None
    row = _row(f"aten::{name.split('.')[0]}")
    assert row["device"] == 2 and row["cpu"] == 0, row
    expected = overload(*args, **kwargs)
    for fast in (first, again):
        got = to_cpu(fast)
        torch.testing.assert_close(got, to_cpu(general), atol=0, rtol=0)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_arange_out_takes_the_plan(dtype, launches_forbidden):
    out = torch.empty(6, dtype=dtype).to("rbln")
    with general_path():
        general = A.arange.start_out(1, 13, 2, out=torch.empty(6, dtype=dtype).to("rbln")).cpu()
    registry._kernels["arange.start_out"].plans().clear()
    registry.reset_fallback_report()
    A.arange.start_out(1, 13, 2, out=out)  # a new plan: the checked launch
    assert torch.equal(out.cpu(), general)
    out.zero_()
    launches_forbidden()
    A.arange.start_out(1, 13, 2, out=out)
    assert torch.equal(out.cpu(), general) and torch.equal(general, torch.arange(1, 13, 2, dtype=dtype))
    assert _row("aten::arange") == {"device": 2, "cpu": 0, "reasons": {}}


def test_index_select_of_a_vector_runs_on_the_device():
    """index_select(x[4], 0, int64 index) took the CPU fallback ("other than rows of a matrix")."""
    x, index = _x(4), torch.tensor([3, 0, 1, 2])
    registry.reset_fallback_report()
    result = torch.index_select(x.to("rbln"), 0, index.to("rbln"))
    assert torch.equal(result.cpu(), torch.index_select(x, 0, index))
    assert _row("aten::index_select") == {"device": 1, "cpu": 0, "reasons": {}}


@pytest.mark.parametrize("case", ["index_select", "nll_loss"])
def test_an_out_of_range_index_takes_the_logged_fallback_with_torchs_error(case):
    x = _x(4, 3)
    index = torch.tensor([0, 4]).to("rbln")
    for _ in range(2):  # the second call meets a kept plan: it must still decline
        registry.reset_fallback_report()
        with pytest.raises(IndexError):
            if case == "index_select":
                torch.index_select(x.to("rbln"), 0, index)
            else:
                A.nll_loss_forward.default(x.to("rbln"), torch.tensor([0, 3, 1, 1]).to("rbln"), None, 1, -100)
        reason = "index out of range" if case == "index_select" else "target out of bounds"
        assert _row(f"aten::{case}" if case == "index_select" else "aten::nll_loss_forward")["reasons"] == \
            {reason: 1}
        if case == "index_select":  # compile the kept launch for the second round
            torch.index_select(x.to("rbln"), 0, torch.tensor([0, 3]).to("rbln"))
        else:
            A.nll_loss_forward.default(x.to("rbln"), torch.tensor([0, 2, 1, 1]).to("rbln"), None, 1, -100)


def test_calls_no_plan_takes_go_to_the_implementation():
    x = _x(3, 5).to("rbln")
    cat, gather = planned("cat.default"), planned("index_select.default")
    assert cat(([x, x],), {}) is not None
    assert cat(([x, x.half()],), {}) is None  # mixed dtypes
    assert cat(([x, x[:, :2]],), {}) is None  # shapes that do not line up
    assert cat(([x, x.t().contiguous().t()],), {}) is None  # a non-contiguous input
    index = torch.tensor([2, 0]).to("rbln")
    assert gather((x, 0, index), {}) is not None
    assert gather((x, 0, index.cpu()), {}) is None  # a CPU index
    assert gather((x, 0, index.float()), {}) is None  # a float index
    assert gather((x, 0, torch.tensor([5, 0]).to("rbln")), {}) is None  # out of range
    assert gather((x, 2, index), {}) is None  # a dim out of range: the implementation declines it
    assert gather((x, 0, index.view(2, 1)), {}) is None  # an index of two dims
    nan = torch.full((3, 5), float("nan")).to("rbln")
    gathered = gather((nan, 0, index), {})  # gathers are exact: NaN is copied, no table is scanned
    assert gathered is not None and gathered.cpu().isnan().all()
    with_nan = cat(([x, nan],), {})  # cat is exact: NaN is copied as it is, on the device
    assert torch.equal(with_nan.cpu().isnan(), torch.cat([x.cpu(), nan.cpu()]).isnan())
    arange = planned("arange.start_out")
    out = torch.empty(3).to("rbln")
    assert arange((0, 4), {"out": out}) is None  # out= needs a resize
    assert arange((0, 3), {"out": out}) is not None
    assert arange((0, 3 * 2 ** 24, 2 ** 24), {"out": out}) is None  # beyond exact float range
    assert arange((0, 3), {"out": out.t()[:2]}) is None  # not the result's length
    backward = planned("embedding_dense_backward.default")
    indices = torch.tensor([1, 0, 1]).to("rbln")
    assert backward((x, indices, 4, -1, False), {}) is not None
    assert backward((x, indices, 4, -1, True), {}) is None  # scale_grad_by_freq: declined there
    assert backward((x, indices.cpu(), 4, -1, False), {}) is None  # CPU indices
    assert backward((x, indices[:2], 4, -1, False), {}) is None  # grad and indices do not line up


def test_cat_of_two_contiguous_tensors_is_one_launch_of_the_pair_kernel(monkeypatch):
    """The implementation (`gather.cat`, called directly: a plan may hold this launch already)
    launches the pair kernel once, the kernel the plan keeps; a non-contiguous input still takes one
    copy per input (`_copy.copy_into`: rows of a as one flat run, the transposed view in tiles); both
    give torch's result exactly."""
    from torch_rbln.kernels import rows
    from torch_rbln.registry import _copy

    launched = []
    real = _launch.launch
    monkeypatch.setattr(_launch, "launch",
                        lambda kernel, *a, **k: (launched.append(kernel), real(kernel, *a, **k)))
    copy = _copy._run
    monkeypatch.setattr(_copy, "_run", lambda launch, *a: (launched.append(launch.kernel), copy(launch, *a)))
    a, b = _x(2, 3), _x(2, 2)
    got = gather.cat([a.to("rbln"), b.to("rbln")], 1)
    assert launched == [rows.cat_pair_kernel]
    assert torch.equal(got.cpu(), torch.cat([a, b], 1))
    launched.clear()
    t = _x(3, 2)
    got = gather.cat([a.to("rbln"), t.to("rbln").t()], 0)  # the transposed view: tiled copies
    # (each copy's `_run`, and a first launch of its specialisation through the general launch)
    assert [k for k in launched if type(k) is str] == ["tiled_copy_kernel", "tiled_copy_kernel"]
    assert rows.cat_pair_kernel not in launched
    assert torch.equal(got.cpu(), torch.cat([a, t.t()], 0))


def test_arange_plan_keeps_the_bounds_exactly():
    """The plan's split of the bounds into float32 parts (memoised per value) is exact, and a zero keeps
    its sign: -0.0 and 0.0 are the same memo key but not the same first value."""
    for start, end, step in ((0.1, 1.2, 0.3), (-0.0, 2.0, 0.5), (0.0, 2.0, 0.5), (-0.0, 2.0, 0.5)):
        out = torch.empty(len(torch.arange(start, end, step))).to("rbln")
        A.arange.start_out(start, end, step, out=out)
        A.arange.start_out(start, end, step, out=out)
        expected = torch.arange(start, end, step)
        assert torch.equal(out.cpu(), expected)
        assert torch.equal(torch.signbit(out.cpu()), torch.signbit(expected)), (start, end, step)


ARANGE_CALLS = [((128,), {}), ((1,), {"dtype": torch.int64}), ((3, 17), {}), ((3, 17, 4), {}),
                ((10, 0, -3), {}), ((5, 5), {}), ((0.5, 7.3, 0.7), {}),
                ((0, 10, 3), {"dtype": torch.float32}), ((2.0,), {}), ((True,), {}),
                ((-3.0, 3), {"dtype": torch.int32}), ((0, 5), {"dtype": torch.bfloat16})]


def test_arange_factories_allocate_the_result_once_and_take_the_plan():
    """`torch.arange(..., device="rbln")` (generate's cache positions, every step): the factory infers
    torch's dtype and length and allocates the result once, so its `arange.start_out` call is keyed by
    the out= plan (which takes only a result of the right length; the composite kernel's empty result
    went to the implementation to be resized); the values and dtypes are the CPU's."""
    torch.ones(2, device="rbln").add(1)
    plans = registry._kernels["arange.start_out"].plans()
    registry.reset_fallback_report()
    for args, kwargs in ARANGE_CALLS:
        got, want = torch.arange(*args, device="rbln", **kwargs), torch.arange(*args, **kwargs)
        assert got.device.type == "rbln" and got.dtype == want.dtype and torch.equal(got.cpu(), want), args
        if want.numel():
            plan = plans.get((want.dtype, want.numel(), 0))
            assert plan is not None and plan.run is not None, args
    assert _row("aten::arange")["cpu"] == 0


@pytest.mark.parametrize("args", [(0, 10, 0), (0, float("inf")), (float("nan"),), (5, 2), (0, -3, 1)])
def test_invalid_aranges_raise_torchs_errors(args):
    """A zero step, a bound that is not finite, bounds on the wrong side of the step: torch's error from
    the CPU (an infinite bound raised Python's OverflowError from the plan's length; an inconsistent
    range gave an empty tensor)."""
    with pytest.raises(RuntimeError) as cpu:
        torch.arange(*args)
    with pytest.raises(RuntimeError) as rbln:
        torch.arange(*args, device="rbln")
    assert str(rbln.value) == str(cpu.value)
    out = torch.empty(0, dtype=torch.int64, device="rbln")
    with pytest.raises(RuntimeError):
        torch.arange(*args, out=out)


def _rope_halves(t: torch.Tensor) -> tuple:
    half = t.shape[-1] // 2
    return (-t[..., half:] if t.dtype.is_floating_point else t[..., half:]), t[..., :half]


STRIDED_PAIRS = {
    # name: (view of a (2, 3, 64) projection, the two parts, dim)
    "decode_rope_rotate_half": (lambda p: p[:, :1].contiguous().view(2, 1, 4, 16).transpose(1, 2),
                                _rope_halves, -1),
    "rope_rotate_half": (lambda p: p.view(2, 3, 4, 16), _rope_halves, -1),
    "uneven_slices": (lambda p: p.view(2, 3, 4, 16), lambda t: (t[..., :5], t[..., 5:]), -1),
    "middle_dim": (lambda p: p.view(2, 3, 4, 16), lambda t: (t[:, :, :2], t[:, :, 1:]), 2),
}


def test_rows_not_equally_spaced_have_no_row_stride():
    """Views whose rows are not one stride apart (heads first over several positions, an expanded
    dim between others) are left to a copy per part."""
    heads_first = torch.empty(2, 3, 4, 16).transpose(1, 2)[..., :8]
    expanded = torch.empty(2, 3, 4, 16)[:, :1].expand(2, 3, 4, 16)[..., :3]
    assert gather.row_stride(tuple(heads_first.shape), heads_first.stride(), 3) is None
    assert gather.row_stride(tuple(expanded.shape), expanded.stride(), 3) is None
    column = torch.empty(2, 3, 4, 16)[..., :8]
    assert gather.row_stride(tuple(column.shape), column.stride(), 3) == 16


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("name", sorted(STRIDED_PAIRS))
def test_cat_of_two_strided_parts_takes_the_pair_kernel(name, dtype, monkeypatch):
    """A cat of two views whose rows are contiguous and equally spaced (RoPE's `cat((-x2, x1), -1)` of
    the halves of a projection, every layer and step) runs the pair kernel with row strides, plan and
    implementation alike (one launch, no copy per part), bit for bit with the CPU; its kept plan is keyed
    by the strides."""
    view, parts, dim = STRIDED_PAIRS[name]
    projection = (torch.randn(2, 3, 64, generator=torch.Generator().manual_seed(3)) * 10).to(dtype)
    expected = torch.cat(parts(view(projection)), dim)
    device = view(projection.to("rbln"))
    with general_path():
        assert torch.equal(torch.cat(parts(device), dim).cpu(), expected)
    launched = []
    launch = _launch.launch
    def spy(kernel, *args, **kwargs):
        launched.append(kernel)
        return launch(kernel, *args, **kwargs)

    monkeypatch.setattr(_launch, "launch", spy)
    for _ in range(2):
        assert torch.equal(torch.cat(parts(device), dim).cpu(), expected)
    assert any(kernel.__name__ == "cat_pair_kernel" for kernel in launched)
    assert not any(kernel.__name__ == "tiled_copy_kernel" for kernel in launched)
    assert any(key[4] is not None for key in registry._kernels["cat.default"].plans())


def test_a_growing_key_value_cache_is_one_pair_launch_of_one_specialisation_at_every_length():
    """A decoding loop's `cat([cache, new], dim=-2)`: every length up to CAT_PAIR_MAX elements (past
    TILED_MIN too) is one launch of the pair kernel in one of four tiles, so the loop compiles one
    specialisation however long the cache grows, and each result is torch's exactly."""
    from torch_rbln.kernels import rows
    from torch_rbln.registry.geometry import TILED_MIN

    new = _x(2, 4, 1, 16)
    cache = _x(2, 4, 1, 16)
    device_cache, device_new = cache.to("rbln"), new.to("rbln")
    def float32_specialisations() -> set:
        return {key for key, ck in rows.cat_pair_kernel.cache.items() if ck.spec.params[0][2] == "fp32"}

    specialisations = float32_specialisations()
    registry._kernels["cat.default"].plans().clear()
    lengths = []
    while (cache.shape[2] + 1) * 2 * 4 * 16 < gather.CAT_PAIR_MAX:
        cache, device_cache = torch.cat([cache, new], -2), torch.cat([device_cache, device_new], -2)
        lengths.append(cache.shape[2])
    assert lengths[-1] * 2 * 4 * 16 > TILED_MIN  # past where the pair kernel used to stop
    assert torch.equal(device_cache.cpu(), cache)
    assert len(float32_specialisations() - specialisations) <= 1
    plans = registry._kernels["cat.default"].plans()
    grown_plans = [plan for key, plan in plans.items() if key[0] is torch.float32 and key[2] == -2]
    assert len(grown_plans) >= len(lengths)
    assert all(plan.kernel is rows.cat_pair_kernel for plan in grown_plans)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int32, torch.int8,
                                   torch.uint8, torch.bool])
def test_index_select_moves_every_dtype_and_scans_no_table(dtype, monkeypatch):
    """Gathers copy values: NaN and Inf come out as the CPU's, integers and bools are moved too, and the
    table is never scanned for NaN/Inf (an embedding lookup scanned all of GPT-2's 50,257 x 768 rows on
    every call: 6.6 ms a token, now ~12 us)."""
    def no_scan(*args, **kwargs):
        raise AssertionError("the table was scanned")

    monkeypatch.setattr(_finite_scan, "all_finite", no_scan)
    monkeypatch.setattr(gather, "all_finite", no_scan)
    generator = torch.Generator().manual_seed(3)
    table = (torch.randn(7, 6, generator=generator) * 50).to(dtype)
    if dtype.is_floating_point:
        table[0, 0], table[2, 3] = float("nan"), float("-inf")
    index = torch.tensor([2, 0, 6, 2])
    registry.reset_fallback_report()
    for dim in (0, 1):
        rows = index.clamp(max=table.shape[dim] - 1)
        got = table.to("rbln").index_select(dim, rows.to("rbln")).cpu()
        expected = table.index_select(dim, rows)
        assert got.dtype == dtype
        assert torch.equal(got.nan_to_num(7.0), expected.nan_to_num(7.0)) if dtype.is_floating_point else \
            torch.equal(got, expected)
    assert registry.fallback_report()["aten::index_select"]["cpu"] == 0
