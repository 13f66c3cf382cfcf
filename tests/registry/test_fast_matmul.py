"""The matmul family's plans (registry/matmul.py) and the product-path tiles of kernels/matmul.py: the
general path's results and accounting, F.linear's transposed weight included, and every call that is
not plain left to the general path (which gives torch's result or torch's error).

Shapes are few and small: every problem up to 8 per side shares one specialisation per (dtype, bias)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_rbln.kernels import matmul
from torch_rbln.registry import matmul as family
from torch_rbln.registry.plan import Plan
from torch_rbln.registry.table import MATMUL

import torch_rbln  # noqa: F401
from torch_rbln import registry

from .planned import general_path, planned


def _row(name: str) -> dict:
    return registry.fallback_report().get(name, {"device": 0, "cpu": 0, "reasons": {}})


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    atol, rtol = MATMUL[str(expected.dtype).removeprefix("torch.")]
    assert actual.device.type == "rbln" and actual.dtype == expected.dtype
    torch.testing.assert_close(actual.cpu(), expected, atol=atol, rtol=rtol)


@pytest.fixture
def general_path_forbidden(monkeypatch):
    """Make the general matmul implementations fail loudly: a call that reaches them took no plan."""

    def forbidden(*args, **kwargs):
        raise AssertionError("general path reached")

    def forbid() -> None:
        for name in ("mm", "addmm", "bmm"):
            monkeypatch.setattr(family, name, forbidden)

    return forbid


def _out(*shape: int) -> torch.Tensor:
    return torch.empty(*shape).to("rbln")


# (reported op, the call on (x, y, z) operands; x, y, z as `_operands` makes them)
CASES = [
    ("aten::mm", lambda x, y, z: torch.mm(x, y)),
    ("aten::mm", lambda x, y, z: torch.mm(x, y, out=torch.empty(3, 4, device=x.device))),
    ("aten::mm", lambda x, y, z: torch.mm(y.t(), x.t())),  # both transposed: dense permutations
    ("aten::addmm", lambda x, y, z: torch.addmm(z, x, y)),  # a bias row
    ("aten::addmm", lambda x, y, z: torch.addmm(z[:3].reshape(3, 1), x, y, beta=0.5, alpha=2)),  # a column
    ("aten::addmm", lambda x, y, z: torch.addmm(z, x, y, out=torch.empty(3, 4, device=x.device))),
    ("aten::addmm", lambda x, y, z: F.linear(x, y.t().contiguous(), z)),  # addmm(z, x, w.t())
    ("aten::mm", lambda x, y, z: F.linear(x, y.t().contiguous())),  # mm(x, w.t())
    ("aten::bmm", lambda x, y, z: torch.bmm(x.expand(2, 3, 5).contiguous(), y.expand(2, 5, 4).contiguous())),
    ("aten::bmm", lambda x, y, z: torch.bmm(x[None], y[None], out=torch.empty(1, 3, 4, device=x.device))),
]
IDS = ["mm", "mm.out", "mm-transposed", "addmm-row", "addmm-column-beta-alpha", "addmm.out", "linear",
       "linear-no-bias", "bmm", "bmm.out"]


def _operands(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.randn(3, 5, dtype=dtype), torch.randn(5, 4, dtype=dtype), torch.randn(4, dtype=dtype)


@pytest.mark.parametrize(("name", "fn"), CASES, ids=IDS)
def test_plain_calls_take_their_plan_with_the_general_results(name, fn, general_path_forbidden):
    cpu = _operands(torch.float32)
    dev = [t.to("rbln") for t in cpu]
    first = fn(*dev)  # the general path launches (and tunes) the shape once
    general_path_forbidden()
    registry.reset_fallback_report()
    fast = fn(*dev)  # the plan launches as the general path's next call would, keeping the direct launch
    again = fn(*dev)  # the kept direct launch
    for result in (fast, again):
        torch.testing.assert_close(result.cpu(), first.cpu(), atol=0, rtol=0)
    _close(again, fn(*cpu))
    assert _row(name) == {"device": 2, "cpu": 0, "reasons": {}}


@pytest.mark.parametrize(("dtype", "bias"), [(torch.float16, False), (torch.bfloat16, True)],
                         ids=["float16-mm", "bfloat16-addmm"])
def test_half_precision_takes_its_plan(dtype, bias, general_path_forbidden):
    x, y, z = _operands(dtype)
    fn = (lambda *t: F.linear(t[0], t[1].t().contiguous(), t[2])) if bias else (lambda *t: t[0] @ t[1])
    dev = [t.to("rbln") for t in (x, y, z)]
    first = fn(*dev)
    general_path_forbidden()
    fast = fn(*dev)
    torch.testing.assert_close(fast.cpu(), first.cpu(), atol=0, rtol=0)
    _close(fast, fn(*(t.float() for t in (x, y, z))).to(dtype))


@pytest.mark.parametrize("shape", [(12, 10, 16), (20, 24, 18)], ids=["product-16", "dot-32"])
def test_the_16_product_tile_and_a_dot_tile_take_their_plans_too(shape, general_path_forbidden):
    m, k, n = shape
    a, b = torch.randn(m, k), torch.randn(k, n)
    da, db = a.to("rbln"), b.to("rbln")
    first = da @ db
    general_path_forbidden()
    for _ in range(2):
        torch.testing.assert_close((da @ db).cpu(), first.cpu(), atol=0, rtol=0)
    _close(first, a @ b)


def test_product_tiles_are_chosen_alone_for_problems_that_fit_them():
    configs = matmul.matmul_kernel.configs
    tiles = lambda m, n, k, **kw: [c.kwargs["BLOCK_K"] for c in matmul._prune_tiles(  # noqa: E731
        configs, {"M": m, "N": n, "K": k}, **kw)]
    assert tiles(2, 2, 2) == [8] and tiles(8, 1, 8) == [8]
    assert tiles(9, 2, 2) == [16] and tiles(12, 12, 12) == [16]
    assert tiles(16, 16, 16) == [32]  # a full 16 tile: BLAS is faster than its products
    assert tiles(2, 2, 2, tp=8) == [8]  # one program whatever the group: no dot tile instead
    assert tiles(17, 2, 2) == [32]  # past the product tiles: the smallest dot tile, as before
    assert 8 not in tiles(1024, 1024, 1024) and 16 not in tiles(1024, 1024, 1024)


def test_a_nan_input_stays_on_the_plan_with_the_cpus_nans():
    # mm is exact (tests/registry/test_exact_ops.py): its operands are not scanned
    a, b = torch.randn(2, 3), torch.randn(3, 2)
    da = a.to("rbln")
    for _ in range(2):
        da @ b.to("rbln")
    b[1, 1] = float("nan")
    registry.reset_fallback_report()
    result = da @ b.to("rbln")
    torch.testing.assert_close(result.cpu(), a @ b, equal_nan=True)
    assert _row("aten::mm") == {"device": 1, "cpu": 0, "reasons": {}}


def test_deploy_mode_runs_a_nan_input_on_the_plan(monkeypatch, general_path_forbidden):
    bias = torch.tensor([1.0, float("nan")])
    a, b = torch.randn(2, 3), torch.randn(3, 2)
    dev = [t.to("rbln") for t in (bias, a, b)]
    monkeypatch.setenv("TORCH_RBLN_DEPLOY", "ON")
    torch.addmm(*dev)
    general_path_forbidden()
    registry.reset_fallback_report()
    torch.testing.assert_close(torch.addmm(*dev).cpu(), torch.addmm(bias, a, b), equal_nan=True)
    assert _row("aten::addmm") == {"device": 1, "cpu": 0, "reasons": {}}


def _calls():
    """mm, addmm and bmm as `(args, kwargs) -> result or None`, each call through a fresh plan."""
    return planned("mm.default"), planned("addmm.default"), planned("bmm.default")


def test_non_plain_calls_are_left_to_the_general_path():
    a, b, bias = torch.randn(3, 4), torch.randn(4, 2), torch.randn(2)
    da, db, dbias = a.to("rbln"), b.to("rbln"), bias.to("rbln")
    mm, addmm, bmm = _calls()
    assert mm((da, db), {}) is None  # before the general path's first launch of the shape
    da @ db
    torch.addmm(dbias, da, db)
    assert mm((da, db), {}) is not None and addmm((dbias, da, db), {"beta": 2}) is not None
    assert mm((da, db), {"out": _out(3, 2).t().contiguous().t()}) is None  # a strided out=
    assert mm((da, db), {"out": _out(2, 3)}) is None  # an out= to resize
    assert mm((da, db), {"out": torch.empty(3, 2, dtype=torch.float64).to("rbln")}) is None  # another dtype
    assert mm((da, db), {"out": torch.empty(3, 2)}) is None  # a CPU out=
    assert mm((da, db), {"out": da}) is None  # an out= that is an operand
    assert mm((da, b.half().to("rbln")), {}) is None  # mixed dtypes
    assert mm((da, b), {}) is None  # a CPU operand: the general path raises torch's error
    assert mm((a.long().to("rbln"), b.long().to("rbln")), {}) is None  # integers
    assert mm((da, da), {}) is None  # shapes that do not match
    assert mm((torch.randn(3, 8).to("rbln")[:, ::2], db), {}) is None  # not dense
    assert addmm((dbias.expand(3, 2), da, db), {}) is None  # a broadcast (stride-0) bias
    assert addmm((dbias, da, db), {"alpha": torch.tensor(2.0)}) is None  # a tensor alpha
    assert addmm((dbias, da, db), {"gamma": 1}) is None  # an unknown keyword
    assert bmm((da, db), {}) is None  # 2-D operands of bmm
    # the general path then gives torch's result (with its resize warning) or torch's error
    out = _out(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.mm(da, db, out=out)
    _close(out, a @ b)
    with pytest.raises(RuntimeError):
        torch.mm(da, da)


def test_a_grid_split_over_a_tensor_parallel_group_is_left_to_the_general_path(monkeypatch):
    a, b = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    da, db = a.to("rbln"), b.to("rbln")
    x, y = da[0], db[0]
    mm, _, bmm = _calls()
    for _ in range(2):
        torch.bmm(da, db), x @ y
    assert bmm((da, db), {}) is not None and mm((x, y), {}) is not None  # launches kept
    monkeypatch.setattr(family, "device_tp", lambda index: 2)
    with general_path():  # the general path keeps its tiles under the tp=2 launch shapes first
        torch.bmm(da, db), x @ y
    assert bmm((da, db), {}) is None  # two programs (one per batch): the general launch splits them
    assert mm((x, y), {}) is not None  # one program of a product tile runs on one NPU whatever tp is


def _mm_plans() -> list[Plan]:
    """The dispatcher's plans of mm on 2 x 2 operands (other tests leave plans of other shapes)."""
    return [plan for plan in registry._kernels["mm.default"].plans().values()
            if isinstance(plan, family.MatmulPlan) and plan.shape == (2, 2)]


def test_clear_cache_drops_the_kept_launch():
    """After `clear_cache()` the kept direct launch runs forgotten code: the next call launches through
    the checked launch (compiling again), as the general path would, and keeps the new direct launch."""
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    da, db = a.to("rbln"), b.to("rbln")
    for _ in range(2):
        da @ db
    kept = [plan.launcher for plan in _mm_plans()]
    assert kept and all(launcher is not None for launcher in kept)
    matmul.matmul_kernel.fn.clear_cache()
    assert all(plan.launcher is None for plan in _mm_plans())
    for _ in range(2):
        _close(da @ db, a @ b)
    assert any(plan.launcher is not None and plan.launcher not in kept for plan in _mm_plans())


def test_direct_describes_the_kept_launch_for_a_compiled_graph():
    """`MatmulPlan.direct` (what a compiled graph launches by address) gives the general path's result."""
    a, b, bias = torch.randn(3, 5), torch.randn(4, 5), torch.randn(4)
    da, dw, dbias = a.to("rbln"), b.to("rbln"), bias.to("rbln")
    for _ in range(2):
        expected = F.linear(da, dw, dbias)  # addmm(bias, a, w.t())
    plans = [plan for plan in registry._kernels["addmm.default"].plans().values()
             if isinstance(plan, family.MatmulPlan) and plan.shape == (3, 4) and plan.launcher is not None
             # this call's plan (float32; a row-major, w.t() column-major: M, N, K, then batch/row/col
             # strides): other tests in the same worker leave (3, 4) plans of other dtypes and layouts
             and plan.shape_key[0] == torch.float32 and plan.tail[:9] == (3, 4, 5, 0, 5, 1, 0, 1, 5)]
    assert plans
    operands = (da, dw.t(), dbias, None, 1.0, 1.0)
    direct = plans[0].direct(operands)
    assert direct is not None and direct.args[2] == ("out", None) and direct.args[-2:] == (("value", 1.0),
                                                                                           ("value", 1.0))
    out = torch.empty(3, 4).to("rbln")
    addressed = []
    for kind, value in direct.args:
        if kind == "tensor":
            addressed += [operands[value].data_ptr(), operands[value].numel()]
        elif kind == "out":
            addressed += [out.data_ptr(), out.numel()]
    values = [value for kind, value in direct.args if kind == "value"]
    assert direct.launcher(*direct.grid, *addressed, *values)
    torch.testing.assert_close(out.cpu(), expected.cpu(), atol=0, rtol=0)
