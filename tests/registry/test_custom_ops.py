"""The custom ops' plain-call shortcut (registry `_plain_call_shortcut`) and their fast launches
(`custom._rms_norm_fast`, `custom._rotary_fast`: the plans of `custom.rms_norm_family` and
`custom.rotary_family`): same results as the checked path, and every call that
is not plain (a gradient to record, a dispatch mode, fake tensors, NaN inputs) still takes
`torch.library.custom_op`'s own path."""

from __future__ import annotations

import logging

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch_rbln.registry import custom

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _rms_reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)


@pytest.fixture
def general_path_forbidden(monkeypatch):
    """Make the checked path's launches raise: a call that still succeeds took the shortcut."""

    def forbid(*args, **kwargs):
        raise AssertionError("the checked path ran")

    def apply() -> None:
        monkeypatch.setattr(custom, "rms_norm_forward", forbid)
        monkeypatch.setattr(custom, "contiguous", forbid)  # a step of the rotary device kernel

    return apply


def test_rms_norm_plain_call_runs_the_kept_launch(general_path_forbidden):
    x, w = torch.randn(3, 8), torch.randn(8)
    xd, wd = x.to("rbln"), w.to("rbln")
    first = torch.ops.rbln.rms_norm(xd, wd, 1e-6)  # the checked path: keeps the launch
    general_path_forbidden()
    registry.reset_fallback_report()
    second = torch.ops.rbln.rms_norm(xd, wd, 1e-6)
    assert torch.equal(first.cpu(), second.cpu())
    torch.testing.assert_close(second.cpu(), _rms_reference(x, w, 1e-6), atol=1e-5, rtol=1e-5)
    assert registry.fallback_report()["rbln::rms_norm"] == {"device": 1, "cpu": 0, "reasons": {}}


def test_rms_norm_without_weight_and_half_precision():
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        x = torch.randn(2, 5, 16).to(dtype)
        xd = x.to("rbln")
        runs = [torch.ops.rbln.rms_norm(xd, None, 1e-5) for _ in range(2)]
        assert torch.equal(runs[0].cpu(), runs[1].cpu())
        expected = torch.nn.functional.rms_norm(x.float(), (16,), None, 1e-5).to(dtype)
        torch.testing.assert_close(runs[1].cpu(), expected, atol=tol, rtol=tol)


def test_rms_norm_scratch_is_not_allocated_per_call():
    xd, wd = torch.randn(4, 8, device="rbln"), torch.randn(8, device="rbln")
    for _ in range(2):
        torch.ops.rbln.rms_norm(xd, wd, 1e-6)
    before = torch.rbln.memory_allocated()
    outs = [torch.ops.rbln.rms_norm(xd, wd, 1e-6) for _ in range(5)]
    assert torch.rbln.memory_allocated() - before == sum(o.untyped_storage().nbytes() for o in outs)


def test_gradients_still_take_custom_ops_autograd():
    x = torch.randn(3, 8, requires_grad=True)
    xd = x.detach().to("rbln").requires_grad_()
    wd = torch.ones(8, device="rbln")
    for _ in range(2):  # the second call has a kept launch, but a gradient must be recorded
        out = torch.ops.rbln.rms_norm(xd, wd, 1e-6)
        assert out.grad_fn is not None
    out.sum().backward()
    torch.ops.rbln.rms_norm(x, torch.ones(8), 1e-6).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        assert torch.ops.rbln.rms_norm(xd, wd, 1e-6).grad_fn is None


def test_a_dispatch_mode_sees_the_custom_op():
    class Recorder(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    xd, wd = torch.randn(2, 8, device="rbln"), torch.randn(8, device="rbln")
    expected = torch.ops.rbln.rms_norm(xd, wd, 1e-6)
    with Recorder() as recorder:
        seen = torch.ops.rbln.rms_norm(xd, wd, 1e-6)
    assert "rbln.rms_norm.default" in recorder.ops
    assert torch.equal(seen.cpu(), expected.cpu())


def test_fake_tensors_get_the_fake_implementation():
    from torch._subclasses.fake_tensor import FakeTensorMode

    xd, wd = torch.randn(2, 8, device="rbln"), torch.randn(8, device="rbln")
    torch.ops.rbln.rms_norm(xd, wd, 1e-6)
    with FakeTensorMode() as mode:
        out = torch.ops.rbln.rms_norm(mode.from_tensor(xd), mode.from_tensor(wd), 1e-6)
    assert out.shape == (2, 8) and out.device.type == "rbln"


def test_a_nan_input_takes_the_logged_cpu_fallback(caplog):
    x = torch.randn(2, 8)
    xd, wd = x.to("rbln"), torch.ones(8, device="rbln")
    torch.ops.rbln.rms_norm(xd, wd, 1e-6)
    x[1, 3] = float("nan")
    registry.reset_fallback_report()
    with caplog.at_level(logging.INFO, logger="torch_rbln"):
        out = torch.ops.rbln.rms_norm(x.to("rbln"), wd, 1e-6)
    torch.testing.assert_close(out.cpu(), _rms_reference(x, torch.ones(8), 1e-6), equal_nan=True)
    assert registry.fallback_report()["rbln::rms_norm"] == {"device": 0, "cpu": 1, "reasons": {"nan_inf": 1}}


@pytest.mark.parametrize("cs_shape", [(6, 8), (1, 1, 6, 8)])
def test_rotary_plain_call_runs_the_kept_launch(general_path_forbidden, cs_shape):
    x = torch.randn(2, 3, 6, 8)
    angles = torch.randn(6, 4)
    cos = torch.cat([angles.cos()] * 2, -1).reshape(cs_shape)
    sin = torch.cat([angles.sin()] * 2, -1).reshape(cs_shape)
    args = (x.to("rbln"), cos.to("rbln"), sin.to("rbln"))
    first = torch.ops.rbln.rotary_embedding(*args)
    general_path_forbidden()
    registry.reset_fallback_report()
    second = torch.ops.rbln.rotary_embedding(*args)
    assert torch.equal(first.cpu(), second.cpu())
    half = x[..., 4:], x[..., :4]
    torch.testing.assert_close(second.cpu(), x * cos + torch.cat((-half[0], half[1]), -1) * sin)
    assert registry.fallback_report()["rbln::rotary_embedding"]["device"] == 1


def test_rotary_fast_declines_what_the_device_kernel_declines():
    x = torch.randn(2, 6, device="rbln")
    odd = torch.randn(2, 5, device="rbln")
    assert custom._rotary_fast(odd, odd, odd) is None  # odd head dim
    assert custom._rotary_fast(x, x.t().contiguous().t(), x) is None  # strided cos
    assert custom._rotary_fast(x, torch.randn(3, 6, device="rbln"), torch.randn(3, 6, device="rbln")) is None


def test_user_custom_op_takes_the_shortcut_and_keeps_its_checks(caplog):
    def reference(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    calls = []

    def impl(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape)
        return torch.ops.aten.add.Tensor(x, 1)

    registry.register_kernel("rbln_test::plus_one", impl, reference=reference,
                             accepts=lambda x: x.dim() == 1 or "1-D only")
    registry.reset_fallback_report()
    out = torch.ops.rbln_test.plus_one(torch.arange(4.0, device="rbln"))
    torch.testing.assert_close(out.cpu(), torch.arange(4.0) + 1)
    with caplog.at_level(logging.INFO, logger="torch_rbln"):
        declined = torch.ops.rbln_test.plus_one(torch.ones(2, 2, device="rbln"))
    torch.testing.assert_close(declined.cpu(), torch.full((2, 2), 2.0))
    assert calls == [torch.Size([4])]
    row = registry.fallback_report()["rbln_test::plus_one"]
    assert row == {"device": 1, "cpu": 1, "reasons": {"1-D only": 1}}


def test_inference_mode_calls_take_the_kept_launch(general_path_forbidden):
    x, w = torch.randn(2, 8), torch.randn(8)
    xd, wd = x.to("rbln"), w.to("rbln")
    first = torch.ops.rbln.rms_norm(xd, wd, 1e-6)
    general_path_forbidden()
    with torch.inference_mode():  # no autograd key: the PrivateUse1 kernel, which tries the shortcut first
        second = torch.ops.rbln.rms_norm(xd, wd, 1e-6)
    assert torch.equal(first.cpu(), second.cpu())
