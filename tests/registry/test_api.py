"""register_kernel (aten override and custom op), per-call decisions, fallback_report, the demo."""

from __future__ import annotations

import logging

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

from ..sample_kernels import double


def _double(x: torch.Tensor) -> torch.Tensor:
    return double(x, block=64)


def _reference_double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_custom_op_runs_dsl_kernel_and_declines_to_reference(caplog):
    op = registry.register_kernel("rbln_test::double", _double, reference=_reference_double,
                                  accepts=lambda x: x.is_contiguous() or "non-contiguous")
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    registry.reset_fallback_report()
    out = torch.ops.rbln_test.double(x.to("rbln"))
    assert out.device.type == "rbln"
    torch.testing.assert_close(out.cpu(), x * 2)
    assert registry.fallback_report()["rbln_test::double"]["device"] == 1
    with caplog.at_level(logging.INFO, logger="torch_rbln"):
        declined = torch.ops.rbln_test.double(x.to("rbln").t())
    torch.testing.assert_close(declined.cpu(), x.t() * 2)
    row = registry.fallback_report()["rbln_test::double"]
    assert row["cpu"] == 1 and row["reasons"] == {"non-contiguous": 1}
    torch.testing.assert_close(op(x), x * 2)  # CPU tensors: the reference
    # traceable: the fake implementation gives shapes under FakeTensorMode
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert torch.ops.rbln_test.double(torch.empty(2, 5)).shape == (2, 5)


def test_aten_override_with_decorator_and_reasons():
    calls = []

    @registry.register_kernel("aten::neg", accepts=lambda x: x.numel() < 100 or "large")
    def my_neg(x):
        calls.append(x.shape)
        return _double(x) * -0.5

    try:
        registry.reset_fallback_report()
        x = torch.randn(5)
        torch.testing.assert_close((-x.to("rbln")).cpu(), -x)
        assert calls == [torch.Size([5])]
        torch.testing.assert_close((-torch.ones(200).to("rbln")).cpu(), -torch.ones(200))
        report = registry.fallback_report()
        assert report["aten::neg"]["reasons"] == {"large": 1}
        assert report["aten::neg"]["device"] == 1
    finally:
        registry._user.pop("neg.default", None)  # back to the op library's kernel


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: (torch.randn(4, dtype=torch.float64).to("rbln"),), "dtype float64"),
        (lambda: (torch.tensor([1.0, float("nan")]).to("rbln"),), "nan_inf"),
    ],
)
def test_per_call_decisions(make, reason):
    registry.reset_fallback_report()
    (x,) = make()
    y = torch.exp(x)
    torch.testing.assert_close(y.cpu(), torch.exp(x.cpu()), equal_nan=True)
    row = registry.fallback_report()["aten::exp"]
    assert row["reasons"] == {reason: 1} and row["device"] == 0


def test_deploy_mode_skips_the_nan_check(monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_DEPLOY", "ON")
    registry.reset_fallback_report()
    x = torch.tensor([1.0, float("inf")])
    torch.testing.assert_close(torch.exp(x.to("rbln")).cpu(), torch.exp(x))
    assert registry.fallback_report()["aten::exp"]["device"] == 1


def test_broadcasting_promotion_inplace_and_out():
    a = torch.randn(3, 4, dtype=torch.float16)
    b = torch.randn(4)
    registry.reset_fallback_report()
    torch.testing.assert_close((a.to("rbln") + b.to("rbln")).cpu(), a + b)
    torch.testing.assert_close(torch.sub(a.to("rbln"), 2.5, alpha=3).cpu(), torch.sub(a, 2.5, alpha=3))
    d = b.to("rbln")
    d.mul_(3)
    torch.testing.assert_close(d.cpu(), b * 3)
    out = torch.empty(3, 4, device="rbln")
    torch.add(a.float().to("rbln"), b.to("rbln"), out=out)
    torch.testing.assert_close(out.cpu(), a.float() + b)
    report = registry.fallback_report()
    for name in ("aten::add", "aten::sub", "aten::mul_"):
        assert report[name]["cpu"] == 0, report[name]



GELU_CALLS = [
    ("aten::gelu", lambda t: torch.nn.functional.gelu(t, approximate="bogus")),
    ("aten::gelu_", lambda t: torch.ops.aten.gelu_(t, approximate="bogus")),
    ("aten::gelu", lambda t: torch.ops.aten.gelu.out(t, approximate="bogus", out=torch.empty_like(t))),
]


@pytest.mark.parametrize(("name", "call"), GELU_CALLS, ids=["functional", "inplace", "out"])
def test_gelu_with_an_unknown_approximate_raises_torchs_error(name, call):
    x = torch.randn(4)
    with pytest.raises(RuntimeError) as on_cpu:
        call(x.clone())
    d = x.to("rbln")
    torch.nn.functional.gelu(d, approximate="tanh")  # the known forms are device kernels (and fast)
    torch.nn.functional.gelu(d, approximate="tanh")
    registry.reset_fallback_report()
    with pytest.raises(RuntimeError) as on_rbln:
        call(d)
    assert type(on_rbln.value) is type(on_cpu.value) and str(on_rbln.value) == str(on_cpu.value)
    assert "approximate argument must be either none or tanh" in str(on_rbln.value)
    torch.testing.assert_close(d.cpu(), x, atol=0, rtol=0)  # an in-place call left its input alone
    row = registry.fallback_report()[name]  # declined to torch's own check, with the reason
    reason = "gelu approximate='bogus' (neither 'none' nor 'tanh')"
    assert row == {"device": 0, "cpu": 1, "reasons": {reason: 1}}


def test_gelu_backward_with_an_unknown_approximate_raises_torchs_error():
    grad, x = torch.randn(4), torch.randn(4)
    with pytest.raises(RuntimeError) as on_cpu:
        torch.ops.aten.gelu_backward(grad, x, approximate="bogus")
    registry.reset_fallback_report()
    with pytest.raises(RuntimeError) as on_rbln:
        torch.ops.aten.gelu_backward(grad.to("rbln"), x.to("rbln"), approximate="bogus")
    assert type(on_rbln.value) is type(on_cpu.value) and str(on_rbln.value) == str(on_cpu.value)
    reason = "gelu_backward approximate='bogus' (neither 'none' nor 'tanh')"
    row = registry.fallback_report()["aten::gelu_backward"]
    assert row == {"device": 0, "cpu": 1, "reasons": {reason: 1}}
    tanh = torch.ops.aten.gelu_backward(grad.to("rbln"), x.to("rbln"), approximate="tanh")
    torch.testing.assert_close(tanh.cpu(), torch.ops.aten.gelu_backward(grad, x, approximate="tanh"),
                               rtol=1e-5, atol=1e-6)


def test_demo_gpt2_matches_cpu_mostly_on_device_kernels():
    pytest.importorskip("transformers")
    from torch_rbln import demo

    result = demo.run(quiet=True)
    assert result["ok"], result
    assert result["share"] >= 0.9, registry.format_report(result["report"])


def test_rms_norm_custom_op_forward_backward_on_device():
    x = torch.randn(3, 40, requires_grad=True)
    w = torch.randn(40, requires_grad=True)
    xd = x.detach().to("rbln").requires_grad_()
    wd = w.detach().to("rbln").requires_grad_()
    registry.reset_fallback_report()
    for a, b in ((x, w), (xd, wd)):
        torch.ops.rbln.rms_norm(a, b, 1e-6).square().sum().backward()
    reference = torch.nn.functional.rms_norm(x.detach(), (40,), w.detach(), 1e-6)
    torch.testing.assert_close(torch.ops.rbln.rms_norm(xd, wd, 1e-6).detach().cpu(), reference)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(wd.grad.cpu(), w.grad, atol=1e-5, rtol=1e-5)
    assert registry.fallback_report()["rbln::rms_norm"]["device"] >= 2


def test_rotary_embedding_custom_op():
    x = torch.randn(2, 4, 6, 8, requires_grad=True)  # batch, heads, positions, head dim
    angles = torch.randn(6, 4)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    xd = x.detach().to("rbln").requires_grad_()
    registry.reset_fallback_report()
    out = torch.ops.rbln.rotary_embedding(xd, cos.to("rbln"), sin.to("rbln"))
    half = x[..., 4:], x[..., :4]
    expected = x * cos + torch.cat((-half[0], half[1]), -1) * sin
    torch.testing.assert_close(out.detach().cpu(), expected.detach())
    assert registry.fallback_report()["rbln::rotary_embedding"]["device"] == 1
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad)


def test_format_report_tables_calls_and_reasons():
    report = {"aten::add": {"device": 5, "cpu": 0, "reasons": {}},
              "aten::cos": {"device": 0, "cpu": 3, "reasons": {"dtype int64": 2}}}
    text = registry.format_report(report)
    lines = text.splitlines()
    assert lines[0].split() == ["op", "device", "cpu", "cpu", "reasons"]
    assert ["aten::add", "5", "0"] in [line.split() for line in lines]
    cos = next(line for line in lines if line.startswith("aten::cos"))
    assert "dtype int64: 2, no rbln kernel: 1" in cos
    assert lines[-1] == "total: 5 of 8 op calls on device kernels (62.5%), 3 on CPU"
