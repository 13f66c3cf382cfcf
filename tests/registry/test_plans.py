"""The dispatcher's per-signature plan memo (registry/plan.py, registry/elementwise.py): a signature's
first call builds its plan, later ones reuse it; calls whose decisions cannot be keyed are never
memoised; a declined signature takes the logged CPU fallback; dtype and device errors are unchanged."""

from __future__ import annotations

import pytest
import torch
from torch_rbln.registry import elementwise
from torch_rbln.registry.plan import NO_PLAN, Plan

import torch_rbln  # noqa: F401
from torch_rbln import fallback, log, registry

from .planned import general_path


def _plans(name: str) -> dict:
    """The plan memo of the dispatcher registered for table overload `name`."""
    return registry._kernels[name].plans()


def _row(name: str) -> dict:
    return registry.fallback_report().get(name, {"device": 0, "cpu": 0, "reasons": {}})


def test_a_signature_is_planned_once_and_then_hit(monkeypatch):
    a, b = torch.randn(3, 9), torch.randn(3, 9)
    da, db = a.to("rbln"), b.to("rbln")
    memo = _plans("mul.Tensor")
    builds = []
    build = elementwise.binary_plan

    def counted(*args, **kwargs):
        builds.append(args[0])
        return build(*args, **kwargs)

    monkeypatch.setattr(elementwise, "binary_plan", counted)
    memo.clear()
    registry.reset_fallback_report()
    for _ in range(3):
        torch.testing.assert_close((da * db).cpu(), a * b, atol=0, rtol=0)
    assert len(builds) == 1 and len(memo) == 1  # a miss, then two hits
    (key, plan), = memo.items()
    assert isinstance(plan, Plan) and plan.run is not None and plan.shape == (3, 9)
    assert plan.scanned == () and plan.programs * plan.rows >= 1  # mul is exact: nothing scanned
    (da * 2.0)  # another signature (a scalar operand): a second plan
    assert len(builds) == 2 and len(memo) == 2
    assert _row("aten::mul") == {"device": 4, "cpu": 0, "reasons": {}}


def test_calls_whose_layout_may_change_are_never_memoised():
    base = torch.randn(6, 4).to("rbln")
    memo = _plans("add.Tensor")
    memo.clear()
    for view in (base.t(), base[:, ::2], base.t()[1:]):  # strided views: strides change per call
        torch.testing.assert_close((view + view).cpu(), view.cpu() + view.cpu(), atol=0, rtol=0)
    assert not memo  # the implementation decided each call
    out_memo = _plans("add.out")
    out_memo.clear()
    d = torch.randn(8).to("rbln")
    with pytest.raises(RuntimeError, match="single memory location|overlap"):
        torch.add(d[:4], d[4:], out=d[2:6])  # out= overlapping an input: torch's error, never planned
    assert not out_memo
    strided = torch.zeros(8).to("rbln")[::2]
    torch.testing.assert_close(torch.add(d[:4], d[4:], out=strided).cpu(), (d[:4] + d[4:]).cpu())
    assert not out_memo  # a strided out=: not keyed


def test_an_undecidable_key_is_kept_as_no_plan_and_the_implementation_runs():
    a, b = torch.randn(2, 3, 4), torch.randn(3, 1).half()  # promotion: the implementation converts b
    da, db = a.to("rbln"), b.to("rbln")
    memo = _plans("add.Tensor")
    memo.clear()
    for _ in range(2):
        torch.testing.assert_close((da + db).cpu(), a + b, atol=1e-6, rtol=1e-6)
    assert list(memo.values()) == [NO_PLAN]


def test_a_declined_signature_takes_the_logged_cpu_fallback(monkeypatch):
    d = torch.randn(2, 3).to("rbln")
    other = torch.randn(5).to("rbln")
    memo = _plans("sub.Tensor")
    memo.clear()
    registry.reset_fallback_report()
    logged = []
    monkeypatch.setattr(log, "log_fallback", lambda name, reason: logged.append((name, reason)))
    monkeypatch.setattr(fallback._log, "isEnabledFor", lambda level: True)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="must match the size"):
            d - other  # torch's own error, from the CPU
    (plan,) = memo.values()
    assert plan.run is None and plan.reason == "shapes do not broadcast"
    assert _row("aten::sub") == {"device": 0, "cpu": 2, "reasons": {"shapes do not broadcast": 2}}
    assert logged == [("aten::sub", "shapes do not broadcast")]  # logged once, counted twice


def test_a_planner_that_fails_leaves_its_signature_to_the_checked_path(monkeypatch, capsys):
    """A bug in a family's planner (here: it raises ValueError) is reported once with a WARNING; the
    call, and later calls of that signature, run the checked implementation on the device."""
    a, b = torch.randn(3, 7), torch.randn(3, 7)
    da, db = a.to("rbln"), b.to("rbln")
    memo = _plans("mul.Tensor")
    memo.clear()
    registry.reset_fallback_report()

    def broken(*args, **kwargs):
        raise ValueError("a planner bug")

    monkeypatch.setattr(elementwise, "binary_plan", broken)
    capsys.readouterr()
    for _ in range(2):
        torch.testing.assert_close((da * db).cpu(), a * b, atol=0, rtol=0)
    err = capsys.readouterr().err
    assert err.count("rbln plan for aten::mul failed (ValueError: a planner bug)") == 1
    assert list(memo.values()) == [NO_PLAN]
    assert _row("aten::mul") == {"device": 2, "cpu": 0, "reasons": {}}


def test_a_nan_input_on_a_kept_plan_goes_to_the_logged_cpu_fallback():
    a = torch.randn(5)
    da = a.to("rbln")
    torch.exp(da)  # exp is scanned (not registered exact)
    a[3] = float("inf")
    registry.reset_fallback_report()
    torch.testing.assert_close(torch.exp(a.to("rbln")).cpu(), torch.exp(a))
    assert _row("aten::exp") == {"device": 0, "cpu": 1, "reasons": {"nan_inf": 1}}


@pytest.mark.parametrize("dtype", [torch.float64, torch.int8, torch.complex64])
def test_dtype_reasons_and_device_errors_are_unchanged(dtype):
    x = torch.ones(4, dtype=dtype)
    dx = x.to("rbln")
    registry.reset_fallback_report()
    torch.testing.assert_close((dx * dx).cpu(), x * x)
    assert _row("aten::mul")["reasons"] == {f"dtype {str(dtype).replace('torch.', '')}": 1}
    with pytest.raises(RuntimeError, match="device"):
        torch.ones(4).to("rbln") + torch.ones(4)  # a CPU operand: torch's device error
    with general_path():
        registry.reset_fallback_report()
        (dx * dx)
        reference = _row("aten::mul")["reasons"]
    registry.reset_fallback_report()
    (dx * dx)
    assert _row("aten::mul")["reasons"] == reference


def test_a_plan_never_reaches_the_implementation(monkeypatch):
    a = torch.randn(4, 4).to("rbln")
    torch.sigmoid(a)
    monkeypatch.setattr(elementwise, "unary", lambda *args, **kwargs: (_ for _ in ()).throw(AssertionError))
    registry.reset_fallback_report()
    torch.sigmoid(a)
    assert _row("aten::sigmoid") == {"device": 1, "cpu": 0, "reasons": {}}


def test_forget_plans_empties_every_signature_memo_and_calls_build_them_again():
    x = torch.randn(2, 1, 3, 8)
    q = x.to("rbln")
    expected = torch.nn.functional.scaled_dot_product_attention(x, x, x)
    torch.nn.functional.scaled_dot_product_attention(q, q, q)
    (q * q).sum()
    from torch_rbln.registry import attention, custom

    torch.ops.rbln.rms_norm(q, torch.ones(8).to("rbln"), 1e-6)
    assert _plans("mul.Tensor") and attention._inference_plans and custom._rms_norm_fast.plans
    registry.forget_plans()
    assert not _plans("mul.Tensor") and not _plans("sum.default") and not attention._inference_plans
    assert not custom._rms_norm_fast.plans and not attention._decode_templates
    got = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    torch.testing.assert_close(got.cpu(), expected, atol=1e-6, rtol=1e-6)
    assert attention._inference_plans and torch.equal((q * q).cpu(), x * x) and _plans("mul.Tensor")
