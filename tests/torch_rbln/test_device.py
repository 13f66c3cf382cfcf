"""The rbln device: tensors, copies, views, in-place and out= ops, mixed-device errors."""

from __future__ import annotations

import warnings

import pytest
import torch

import torch_rbln  # noqa: F401  (registers the device even with autoload off)

DTYPES = [
    torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
]


def _sample(dtype: torch.dtype, *shape: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(*shape, generator=generator) * 10
    if dtype.is_complex:
        return torch.complex(values, values.flip(-1)).to(dtype)
    return values.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("index", [0, 1, 7])
def test_round_trip_every_dtype(dtype: torch.dtype, index: int) -> None:
    cpu = _sample(dtype, 5, 7)
    device = cpu.to(f"rbln:{index}")
    assert device.device == torch.device("rbln", index)
    assert device.dtype == dtype and device.shape == cpu.shape
    assert torch.equal(device.cpu(), cpu)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.complex64], ids=str)
def test_non_contiguous_and_offset_views_round_trip(dtype: torch.dtype) -> None:
    cpu = _sample(dtype, 6, 8)
    view = cpu.t()[2:, 1:5]
    assert torch.equal(view.to("rbln:1").cpu(), view)
    device_view = cpu.to("rbln:1").t()[2:, 1:5]
    assert not device_view.is_contiguous()
    assert device_view.storage_offset() == view.storage_offset()
    assert torch.equal(device_view.cpu(), view)


def test_copy_between_devices_converts_dtype_and_broadcasts() -> None:
    source = torch.arange(4, dtype=torch.float32).to("rbln:0")
    target = torch.zeros(3, 4, dtype=torch.float64, device="rbln:2")
    target.copy_(source)
    assert target.device == torch.device("rbln:2")
    assert torch.equal(target.cpu(), torch.arange(4, dtype=torch.float64).expand(3, 4))
    moved = source.to("rbln:3")
    assert moved.device.index == 3 and moved.data_ptr() != source.data_ptr()
    assert torch.equal(moved.cpu(), source.cpu())


def test_views_share_storage_and_see_writes() -> None:
    base = torch.arange(12.0).to("rbln:2")
    view = base.view(3, 4)
    assert view._base is base
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    view[1].fill_(-1)
    assert torch.equal(base.cpu()[4:8], torch.full((4,), -1.0))
    column = view[:, 2]
    column.mul_(10)
    assert base.cpu()[2].item() == 20.0


def test_in_place_ops_keep_identity() -> None:
    x = torch.ones(3, 4).to("rbln:0")
    pointer = x.data_ptr()
    same = x.add_(2)
    assert same is x and x.data_ptr() == pointer
    x.mul_(torch.full((4,), 2.0).to("rbln:0"))
    x[:, 1] += 1
    expected = torch.full((3, 4), 6.0)
    expected[:, 1] = 7
    assert torch.equal(x.cpu(), expected)


def test_out_with_wrong_size_is_resized() -> None:
    a = torch.randn(3, 4).to("rbln:0")
    out = torch.empty(1).to("rbln:0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = torch.add(a, 1, out=out)
    assert result is out and out.shape == (3, 4) and out.device == a.device
    torch.testing.assert_close(out.cpu(), a.cpu() + 1)
    empty = torch.empty(0, device="rbln:0")
    torch.cumsum(a, 1, out=empty)
    torch.testing.assert_close(empty.cpu(), a.cpu().cumsum(1))


def test_out_of_right_size_writes_in_place() -> None:
    a = torch.randn(5).to("rbln:1")
    out = torch.empty(5, device="rbln:1")
    pointer = out.data_ptr()
    torch.exp(a, out=out)
    assert out.data_ptr() == pointer
    torch.testing.assert_close(out.cpu(), a.cpu().exp())


def test_set_and_resize() -> None:
    x = torch.arange(6.0).to("rbln:0")
    y = torch.empty(0, device="rbln:0")
    y.set_(x.untyped_storage(), 2, (2, 2), (2, 1))
    assert torch.equal(y.cpu(), torch.tensor([[2.0, 3.0], [4.0, 5.0]]))
    x.resize_(20)
    assert x.shape == (20,)
    assert torch.equal(x.cpu()[:6], torch.arange(6.0))
    x.resize_(2, 3)
    assert torch.equal(x.cpu(), torch.arange(6.0).view(2, 3))


def test_scalars_zero_dim_and_item() -> None:
    x = torch.tensor([1.5, 2.5]).to("rbln:1")
    assert x.sum().item() == 4.0
    assert (x > 2).any().item() is True
    assert int(torch.tensor(7).to("rbln:1")) == 7
    assert torch.equal((x * torch.tensor(2.0)).cpu(), torch.tensor([3.0, 5.0]))  # CPU 0-dim is fine
    assert torch.equal(x.remainder(2).cpu(), torch.tensor([1.5, 0.5]))  # Python scalar promotion


def test_factories_with_device_argument() -> None:
    assert torch.zeros(3, device="rbln:2").device == torch.device("rbln:2")
    assert torch.equal(torch.full((2,), 3.0, device="rbln:1").cpu(), torch.full((2,), 3.0))
    assert torch.equal(torch.arange(4, device="rbln:1").cpu(), torch.arange(4))
    assert torch.eye(3, device="rbln:0").sum().item() == 3
    memory_format = torch.channels_last
    channels_last = torch.empty(2, 3, 4, 5, device="rbln:0", memory_format=memory_format)
    assert channels_last.is_contiguous(memory_format=memory_format)


def test_conj_and_neg_bits() -> None:
    c = _sample(torch.complex64, 4).to("rbln:0")
    conj = c.conj()
    assert conj.is_conj()
    torch.testing.assert_close(conj.cpu(), c.cpu().conj())
    torch.testing.assert_close((conj * 2).cpu(), c.cpu().conj() * 2)
    torch.testing.assert_close(conj.resolve_conj().cpu(), c.cpu().conj())
    imag = c.imag
    torch.testing.assert_close(imag.cpu(), c.cpu().imag)
    torch.testing.assert_close(torch.view_as_real(c).cpu(), torch.view_as_real(c.cpu()))


def test_results_that_alias_inputs_stay_views() -> None:
    a = torch.randn(4, 6).to("rbln:0")
    parts = a.split(2, dim=1)
    assert all(p.device == a.device for p in parts)
    assert parts[1].untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
    values, indices = a.max(dim=1)
    assert indices.dtype == torch.int64 and indices.device == a.device
    torch.testing.assert_close(values.cpu(), a.cpu().max(dim=1).values)


def test_index_with_cpu_or_rbln_indices() -> None:
    a = torch.randn(5, 3).to("rbln:0")
    index = torch.tensor([0, 4, 2])
    torch.testing.assert_close(a[index].cpu(), a.cpu()[index])
    torch.testing.assert_close(a[index.to("rbln:0")].cpu(), a.cpu()[index])


def test_mixed_devices_raise_like_cuda() -> None:
    a = torch.randn(3).to("rbln:0")
    b = torch.randn(3).to("rbln:1")
    c = torch.randn(3)
    for operation in (lambda: a + b, lambda: a + c, lambda: c + a, lambda: torch.cat([a, b])):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            operation()


def test_printing() -> None:
    text = repr(torch.arange(3.0).to("rbln:1"))
    assert text == "tensor([0., 1., 2.], device='rbln:1')"
    assert "device='rbln:0'" in repr(torch.tensor([1 + 2j]).to("rbln:0"))
    assert "..." in str(torch.randn(300, 300).to("rbln:0"))


def test_convolution_forward_and_backward() -> None:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3)
    device_conv = torch.nn.Conv2d(3, 4, 3).to("rbln:1")
    device_conv.load_state_dict(conv.state_dict())
    x = torch.randn(2, 3, 8, 8)
    xd = x.clone().to("rbln:1").requires_grad_()
    x.requires_grad_()
    conv(x).square().sum().backward()
    device_conv(xd).square().sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(device_conv.weight.grad.cpu(), conv.weight.grad, rtol=1e-4, atol=1e-4)


def test_module_to_device_index() -> None:
    module = torch.nn.Linear(4, 2).to("rbln:1")
    assert all(p.device == torch.device("rbln:1") for p in module.parameters())
    out = module(torch.randn(3, 4).to("rbln:1"))
    assert out.device == torch.device("rbln:1")


def test_accelerator_api() -> None:
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("rbln")
    assert torch.accelerator.device_count() == torch.rbln.device_count()


def test_non_blocking_copy_warns_once() -> None:
    from torch_rbln import _structural

    _structural._non_blocking_warned.clear()
    with pytest.warns(UserWarning, match="synchronously"):
        torch.ones(2).to("rbln:0", non_blocking=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.ones(2).to("rbln:0", non_blocking=True)
