"""The structural kernels bound directly for rbln (`torch_rbln._structural`): `_to_copy` (`.to`, `.cpu`),
the memmove transfer of `_copy_from`, and `resize_`. Their plain cases take one Python call; every other
case must still give exactly what torch's composite gives."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import _structural, registry


@pytest.fixture
def composite_calls(monkeypatch):
    """Count the calls `to_copy` hands to torch's composite."""
    calls = []
    composite = _structural._to_copy_composite

    def counted(*args, **kwargs):
        calls.append(kwargs)
        return composite(*args, **kwargs)

    monkeypatch.setattr(_structural, "_to_copy_composite", counted)
    return calls


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32, torch.float32])
def test_dtype_conversion_on_device_runs_the_copy_kernel(dtype, composite_calls):
    x = torch.randn(3, 5) * 4
    xd = x.to("rbln")
    registry.reset_fallback_report()
    converted = xd.to(dtype) if dtype is not torch.float32 else xd.to(dtype, copy=True)
    assert converted.device == xd.device and converted.dtype == dtype
    assert converted.data_ptr() != xd.data_ptr()
    assert torch.equal(converted.cpu(), x.to(dtype))
    assert registry.fallback_report()["aten::_copy_from"]["device"] == 1
    assert composite_calls == []


@pytest.mark.parametrize("dtype", [None, torch.float16, torch.int64])
def test_host_to_device_and_back(dtype, composite_calls):
    x = torch.randn(2, 3, 4)
    on_device = x.to("rbln", dtype=dtype)
    expected = x if dtype is None else x.to(dtype)
    assert on_device.device.type == "rbln" and on_device.dtype == expected.dtype
    back = on_device.cpu()
    assert back.device.type == "cpu" and torch.equal(back, expected)
    assert torch.equal(on_device.to("cpu", torch.float32), expected.float())
    assert composite_calls == []
    assert torch.equal(torch.tensor(2.5).to("rbln").cpu(), torch.tensor(2.5))  # 0-d
    assert torch.zeros(0, 3).to("rbln").cpu().shape == (0, 3)  # empty


def test_other_cases_take_torchs_composite(composite_calls):
    x = torch.randn(4, 6)
    strided = x.t().to("rbln")  # a non-contiguous source keeps its strides (preserve format)
    assert strided.stride() == x.t().stride() and torch.equal(strided.cpu(), x.t())
    other = x.to("rbln:0").to("rbln:1")
    assert other.device == torch.device("rbln:1") and torch.equal(other.cpu(), x)
    images = torch.randn(2, 3, 4, 5)
    channels_last = images.to("rbln").to(memory_format=torch.channels_last)
    assert channels_last.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(channels_last.cpu(), images)
    negated = torch._neg_view(x).to("rbln")  # a negative-bit view is resolved
    assert torch.equal(negated.cpu(), -x)
    assert len(composite_calls) == 5  # the four above and strided.cpu() (a non-contiguous source)


def test_to_copy_keeps_autograd():
    x = torch.randn(3, requires_grad=True)
    xd = x.to("rbln")
    assert xd.grad_fn is not None
    (xd.to(torch.float16).float() * 2).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0))


def test_copy_into_an_existing_tensor_across_devices():
    x = torch.randn(2, 3)
    target = torch.empty(2, 3, device="rbln")
    target.copy_(x)  # the memmove transfer
    assert torch.equal(target.cpu(), x)
    host = torch.empty(2, 3)
    host.copy_(target)
    assert torch.equal(host, x)
    broadcast = torch.empty(4, 2, 3, device="rbln").copy_(x)  # a broadcast: the host-view copy
    assert torch.equal(broadcast.cpu(), x.expand(4, 2, 3))
    cast = torch.empty(2, 3, dtype=torch.float16, device="rbln").copy_(x)
    assert torch.equal(cast.cpu(), x.half())


def test_resize_grows_shrinks_and_keeps_the_old_bytes():
    t = torch.arange(6.0).to("rbln")
    t.resize_(2, 5)
    assert t.shape == (2, 5) and t.stride() == (5, 1)
    assert torch.equal(t.cpu().flatten()[:6], torch.arange(6.0))
    t.resize_(3)
    assert torch.equal(t.cpu(), torch.arange(3.0))
    fresh = torch.empty(0, device="rbln").resize_(4)
    assert fresh.shape == (4,) and fresh.untyped_storage().nbytes() == 16
    offset = torch.arange(8.0).to("rbln")[2:]  # a view with a storage offset grows past its storage
    offset.resize_(10)
    assert offset.storage_offset() == 2 and torch.equal(offset.cpu()[:6], torch.arange(2.0, 8.0))
    images = torch.empty(0, device="rbln").resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert images.is_contiguous(memory_format=torch.channels_last)


def test_resize_to_a_negative_size_raises_torchs_error():
    with pytest.raises(RuntimeError) as on_cpu:
        torch.empty(2).resize_(-1)
    with pytest.raises(RuntimeError) as on_device:
        torch.empty(2, device="rbln").resize_(-1)
    assert str(on_device.value) == str(on_cpu.value)


def test_new_empty_strided_allocates_on_the_device_without_a_fallback():
    """SDPA's math decomposition calls it; it is an allocation, not a CPU op."""
    from torch_rbln import registry

    x = torch.ones(3, device="rbln")
    registry.reset_fallback_report()
    a = x.new_empty_strided((2, 3), (1, 2))
    b = x.new_empty_strided((2,), (1,), dtype=torch.int64, device="rbln:1")
    assert (a.device, a.stride(), a.dtype) == (torch.device("rbln:0"), (1, 2), torch.float32)
    assert (b.device, b.dtype) == (torch.device("rbln:1"), torch.int64)
    assert registry.fallback_report() == {}


def test_lift_fresh_copy_is_a_device_copy():
    """A constant made in a compiled forward is lifted with `lift_fresh_copy` (fake-tensor tracing runs
    it on the real constant): a copy on the device, not the CPU fallback."""
    constant = torch.tensor([1.5, -2.0, 3.25]).to("rbln")
    registry.reset_fallback_report()
    copy = torch.ops.aten.lift_fresh_copy(constant)
    assert not any(row["cpu"] for row in registry.fallback_report().values())
    assert copy.device == constant.device and copy.data_ptr() != constant.data_ptr()
    assert torch.equal(copy.cpu(), constant.cpu())
