"""Device-to-device copies run on the strided copy kernel and are counted; host transfers are not ops."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

NAME = "aten::_copy_from"


def _device_copies() -> int:
    return registry.fallback_report().get(NAME, {"device": 0})["device"]


def _host_copies() -> dict:
    return registry.fallback_report().get(NAME, {"reasons": {}})["reasons"]


CASES = {
    "contiguous of a transpose": (lambda t: t.transpose(1, 2).contiguous()),
    "clone": (lambda t: t.clone()),
    "to float16": (lambda t: t.to(torch.float16)),
    "to bfloat16 of a slice": (lambda t: t[:, 1:, ::2].to(torch.bfloat16)),
    "to int64 (truncation)": (lambda t: (t * 3).to(torch.int64)),
    "to bool": (lambda t: t.to(torch.bool)),
    "to another rbln device": (lambda t: t.to("rbln:1")),
}


@pytest.mark.parametrize("convert", CASES.values(), ids=CASES.keys())
def test_device_copies_match_cpu(convert):
    x = torch.randn(4, 6, 5)
    x[0, 0, 0] = 0.0
    expected = convert(x).cpu()
    d = x.to("rbln")
    registry.reset_fallback_report()
    actual = convert(d)
    assert actual.device.type == "rbln" and actual.dtype == expected.dtype
    torch.testing.assert_close(actual.cpu(), expected)
    assert _device_copies() >= 1 and not _host_copies(), registry.format_report()


def test_copy_into_strided_views_with_broadcast():
    source = torch.randn(4, 1, 5)
    expected = torch.zeros(4, 6, 10)
    expected[:, :, ::2].copy_(source)
    target = torch.zeros(4, 6, 10).to("rbln")
    registry.reset_fallback_report()
    target[:, :, ::2].copy_(source.to("rbln"))
    torch.testing.assert_close(target.cpu(), expected)
    assert _device_copies() == 1


def test_host_transfers_are_not_counted_and_unsupported_copies_say_why():
    x = torch.randn(4, 3)
    registry.reset_fallback_report()
    d = x.to("rbln")
    torch.testing.assert_close(d.cpu(), x)
    assert NAME not in registry.fallback_report()
    d.to(torch.float64)
    d[::2].copy_(d[1::2])  # strided views spanning each other: the host copy, like torch
    expected = x.clone()
    expected[::2].copy_(expected[1::2])
    torch.testing.assert_close(d.cpu(), expected)
    assert _host_copies() == {"dtype float64": 1, "source and destination overlap": 1}


def test_overlapping_copies_raise_like_cpu_and_disjoint_parts_of_one_storage_copy_on_device():
    x = torch.randn(6, 3)
    d = x.to("rbln")
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        x[1:].copy_(x[:-1])
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        d[1:].copy_(d[:-1])
    registry.reset_fallback_report()
    d[:3].copy_(d[3:])
    d.copy_(d[:])  # a copy onto the same memory is a no-op
    x[:3].copy_(x[3:])
    torch.testing.assert_close(d.cpu(), x)
    assert _device_copies() == 1 and not _host_copies()


CLONES = {
    "contiguous": (lambda t: t, {}),
    "transpose, preserve": (lambda t: t.transpose(0, 2), {}),
    "transpose, contiguous_format": (lambda t: t.transpose(0, 2), {"memory_format": torch.contiguous_format}),
    "strided slice, preserve": (lambda t: t[:, ::2], {}),
    "channels_last": (lambda t: t.unsqueeze(0), {"memory_format": torch.channels_last}),
    "empty": (lambda t: t[:, :0], {}),
    "int64": (lambda t: (t * 10).to(torch.int64), {}),
}


@pytest.mark.parametrize(("view", "kwargs"), CLONES.values(), ids=CLONES.keys())
def test_clone_keeps_torch_layouts_and_copies_on_device(view, kwargs):
    """aten::clone is bound directly for rbln: the result has the strides torch's composite clone gives
    (preserve: a dense source's own strides, else row-major; or the asked format), its values, and the
    copy ran on the device kernel."""
    x = torch.randn(4, 6, 5)
    expected = view(x).clone(**kwargs)
    source = view(x.to("rbln"))
    registry.reset_fallback_report()
    actual = source.clone(**kwargs)
    assert actual.device.type == "rbln" and actual.dtype == expected.dtype
    assert actual.shape == expected.shape and actual.stride() == expected.stride()
    assert actual.data_ptr() != source.data_ptr() or not expected.numel()
    torch.testing.assert_close(actual.cpu(), expected, atol=0, rtol=0)
    assert not _host_copies(), registry.format_report()
    if expected.numel():
        assert _device_copies() == 1


def test_clone_keeps_autograd_and_repeated_dense_copies_take_the_kept_launch():
    x = torch.randn(3, 4).to("rbln").requires_grad_()
    y = x.clone()
    y.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.ones(3, 4))
    a, b = torch.randn(3, 4).to("rbln"), torch.empty(3, 4).to("rbln")
    b.copy_(a)  # the general path keeps the launch the dense branch then takes
    registry.reset_fallback_report()
    for _ in range(3):
        b.copy_(a * 2)
    torch.testing.assert_close(b.cpu(), a.cpu() * 2, atol=0, rtol=0)
    assert _device_copies() == 3 and not _host_copies()


def test_a_copy_within_one_storage_is_not_taken_as_a_dense_copy():
    """Two halves of one buffer: separate elements, one storage; the dense branch leaves it to the
    general path (which checks the overlap), with the same result as on the CPU."""
    x = torch.arange(8.0)
    d = x.to("rbln")
    d[4:].copy_(d[:4])
    x[4:].copy_(x[:4])
    torch.testing.assert_close(d.cpu(), x, atol=0, rtol=0)
