"""Ops writing a strided view (an `out=` view, an in-place op on a view) through a contiguous staging
tensor on the device (registry/staging.py), and the cases that stay on the CPU fallback."""

import pytest
import torch
from torch_rbln.registry.staging import distinct_elements

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _cpu_calls(name: str) -> dict:
    row = registry.fallback_report().get(name, {"device": 0, "cpu": 0, "reasons": {}})
    return {"device": row["device"], "cpu": row["cpu"], "reasons": row["reasons"]}


@pytest.fixture(autouse=True)
def _fresh_report():
    registry.reset_fallback_report()


def test_mm_into_a_transposed_out_view():
    a, b = torch.randn(6, 8), torch.randn(8, 5)
    want = torch.zeros(5, 6).t()
    got = torch.zeros(5, 6, device="rbln").t()
    result = torch.mm(a.to("rbln"), b.to("rbln"), out=got)
    torch.mm(a, b, out=want)
    assert result is got
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    assert _cpu_calls("aten::mm") == {"device": 1, "cpu": 0, "reasons": {}}


def test_a_slice_of_a_buffer_keeps_its_neighbours():
    """The copy writes the view's elements only: the rest of the storage keeps its values."""
    base = torch.randn(4, 6)
    device = base.to("rbln")
    base[:, 1:4].zero_()
    device[:, 1:4].zero_()
    base[::2].add_(1.5)
    device[::2].add_(1.5)
    base[1].fill_(-2.0)
    device[1].fill_(-2.0)  # a contiguous row: the kernel writes it directly
    base.t()[2:].mul_(torch.arange(4.0))
    device.t()[2:].mul_(torch.arange(4.0, device="rbln"))
    assert torch.equal(device.cpu(), base)
    for name in ("aten::zero_", "aten::add_", "aten::fill_", "aten::mul_"):
        assert _cpu_calls(name)["cpu"] == 0, registry.format_report(registry.fallback_report())


def test_binary_out_view_with_a_cast_and_an_integer_fill():
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    want = torch.zeros(4, 3, dtype=torch.float16).t()
    got = torch.zeros(4, 3, dtype=torch.float16, device="rbln").t()
    torch.add(a, b, alpha=2.0, out=want)
    torch.add(a.to("rbln"), b.to("rbln"), alpha=2.0, out=got)
    assert torch.equal(got.cpu(), want)
    ints = torch.arange(20).reshape(4, 5)
    device = ints.to("rbln")
    ints[:, ::2].fill_(7)
    device[:, ::2].fill_(7)
    assert torch.equal(device.cpu(), ints)
    assert _cpu_calls("aten::add")["cpu"] == 0 and _cpu_calls("aten::fill_")["cpu"] == 0


def test_in_place_ternary_and_triangle_on_views():
    x, t1, t2 = torch.randn(5, 5), torch.randn(5, 5), torch.randn(5, 5)
    device = x.to("rbln")
    x.t().addcmul_(t1, t2, value=0.5)
    device.t().addcmul_(t1.to("rbln"), t2.to("rbln"), value=0.5)
    x.t().tril_()
    device.t().tril_()
    torch.testing.assert_close(device.cpu(), x, atol=1e-6, rtol=1e-6)
    assert _cpu_calls("aten::addcmul_")["cpu"] == 0 and _cpu_calls("aten::tril_")["cpu"] == 0


def test_writing_an_expanded_view_raises_torchs_error():
    target = torch.zeros(3, device="rbln").expand(2, 3)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        target.add_(1.0)
    assert _cpu_calls("aten::add_")["cpu"] == 1


def test_an_operand_sharing_self_keeps_torchs_overlap_rules():
    y = torch.randn(5, 5, device="rbln")
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        y.t().add_(y)
    assert _cpu_calls("aten::add_")["device"] == 0


def test_a_view_the_copy_kernels_cannot_address_takes_the_cpu():
    """Five dims that no two merge: the strided copy declines, so the whole call runs on the CPU."""
    base = torch.randn(2, 3, 2, 3, 2, 3, 2, 3, 2, 3)
    view = base[:, 1, :, 1, :, 1, :, 1, :, 1]
    device_base = base.to("rbln")
    device_view = device_base[:, 1, :, 1, :, 1, :, 1, :, 1]
    view.zero_()
    device_view.zero_()
    assert torch.equal(device_base.cpu(), base)
    assert _cpu_calls("aten::zero_")["reasons"] == {"non-contiguous in-place": 1}


@pytest.mark.parametrize(("shape", "strides", "distinct"), [
    ((4, 6), (6, 1), True),
    ((6, 4), (1, 6), True),
    ((4, 3), (12, 2), True),
    ((2, 3), (0, 1), False),  # expanded
    ((3, 3), (1, 1), False),  # a sliding window
    ((1, 5), (0, 1), True),  # a stride-0 dim of size 1 touches nothing twice
    ((2, 2, 2), (4, 1, 2), True),
    ((2, 2, 2), (3, 1, 2), False),
])
def test_distinct_elements(shape, strides, distinct):
    assert distinct_elements(torch.empty(64).as_strided(shape, strides)) is distinct


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fill_of_a_view_is_one_broadcast_copy(dtype):
    """Floating fills of a view write it from a kept one-element tensor per value (NaN and -0.0 too)."""
    base = torch.randn(6, 8).to(dtype)
    device = base.to("rbln")
    device.add(1.0)  # fills before any kernel module has loaded run on the host (`elementwise.fill`)
    registry.reset_fallback_report()
    for value in (0.0, -0.0, float("nan"), 3.5, 0.0):
        base[:, 1::3].fill_(value)
        device[:, 1::3].fill_(value)
        assert torch.equal(device.cpu().view(torch.int16 if dtype != torch.float32 else torch.int32),
                           base.view(torch.int16 if dtype != torch.float32 else torch.int32))
    assert _cpu_calls("aten::fill_") == {"device": 5, "cpu": 0, "reasons": {}}
    # the fill kernel itself keeps the sign of zero (it computed 0 + value, which is +0.0 for -0.0)
    whole = torch.empty(5, dtype=dtype, device="rbln").fill_(-0.0).cpu()
    assert torch.equal(whole.view(torch.int16 if dtype != torch.float32 else torch.int32),
                       torch.full((5,), -0.0, dtype=dtype).view(torch.int16 if dtype != torch.float32
                                                                  else torch.int32))
