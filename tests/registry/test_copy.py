"""Device-to-device copies run on the copy kernels and are counted; host transfers are not ops."""

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


LARGE_CASES = {
    "transpose of a matrix": (lambda t: t.reshape(96, 80).t().contiguous()),
    "heads first: (b, s, h, d) -> (b, h, s, d)":
        (lambda t: t.reshape(2, 24, 4, 40).transpose(1, 2).contiguous()),
    "3-d permute moving the last dim first": (lambda t: t.reshape(12, 16, 40).permute(2, 0, 1).contiguous()),
    "clone": (lambda t: t.clone()),
    "slice of columns": (lambda t: t.reshape(96, 80)[:, 3:70].contiguous()),
    "a slice of a transpose": (lambda t: t.reshape(96, 80).t()[1:, 2:].contiguous()),
    "to float16 (ties, subnormals, overflow)": (lambda t: t.to(torch.float16)),
    "to bfloat16 of a transpose": (lambda t: t.reshape(96, 80).t().to(torch.bfloat16)),
    "a broadcast row": (lambda t: t[:80].expand(96, 80).contiguous()),
    "to int64 of a transpose": (lambda t: (t * 100).reshape(96, 80).t().to(torch.int64)),
}


@pytest.mark.parametrize("convert", LARGE_CASES.values(), ids=LARGE_CASES.keys())
def test_large_copies_run_in_tiles_and_match_cpu(convert):
    """Copies of 4096 or more elements run `tiled_copy_kernel` (a transpose in square tiles, the rest in
    rows): the same values as the CPU's, bit for bit, including float16's rounding edge cases."""
    x = torch.randn(7680, generator=torch.Generator().manual_seed(0)) * 1000
    x[:6] = torch.tensor([65519.0, 65520.0, 1e-7, 2.9802322e-08, 5.9604645e-08, -0.0])
    expected = convert(x)
    registry.reset_fallback_report()
    actual, launched = _with_copy_kernels(convert, x.to("rbln"))
    assert actual.dtype == expected.dtype and actual.stride() == expected.stride()
    assert torch.equal(actual.cpu(), expected)
    assert launched and set(launched) == {"tiled_copy_kernel"}, launched
    assert _device_copies() >= 1 and not _host_copies(), registry.format_report()


def _with_copy_kernels(convert, x: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
    """`convert(x)` and the names of the copy kernels it launched, in order."""
    from torch_rbln.registry import _copy

    launched = []
    run = _copy._run
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_copy, "_run", lambda launch, *a: (launched.append(launch.kernel), run(launch, *a)))
        return convert(x), launched


SMALL_CASES = {
    "a transposed attention tensor": (lambda t: t[:2048].reshape(2, 16, 4, 16).transpose(1, 2).contiguous()),
    "a permute to float16": (lambda t: t[:60].reshape(3, 4, 5).permute(2, 0, 1).to(torch.float16)),
    "an expanded row": (lambda t: t[:8].expand(6, 8).contiguous()),
    "a slice of rows": (lambda t: t[:300].reshape(20, 15)[3:17, 2:9].clone()),
}


@pytest.mark.parametrize("convert", SMALL_CASES.values(), ids=SMALL_CASES.keys())
def test_small_copies_of_several_dims_run_in_tiles_and_match_cpu(convert):
    """Below 4096 elements too, a copy of two or more collapsed dims runs `tiled_copy_kernel` (the flat
    kernel divides every lane's index over four dims); bit for bit the CPU's values and strides."""
    x = torch.randn(4096, generator=torch.Generator().manual_seed(3)) * 100
    expected = convert(x)
    actual, launched = _with_copy_kernels(convert, x.to("rbln"))
    assert actual.dtype == expected.dtype and actual.stride() == expected.stride()
    assert torch.equal(actual.cpu(), expected)
    assert launched and set(launched) == {"tiled_copy_kernel"}, launched


def test_a_small_copy_along_one_strided_dim_is_one_tiled_row():
    """A copy that collapses to one dim takes the tiled kernel as a single row: a flat kernel split
    each of its 1,024 lanes' index over four dims (a 1,000-element clone took ~80 us)."""
    from torch_rbln.registry import _copy

    source = torch.empty(200, device="meta")[::2]
    target = torch.empty(source.shape, device="meta")
    launch = _copy._copy_geometry((target.shape, source.shape, source.stride(), target.stride()))
    assert launch.kernel == "tiled_copy_kernel"
    assert (launch.constexprs, launch.programs, launch.rows) == \
        ({"UNIT_INNER": False, "BLOCK_M": 1, "BLOCK_N": 1024}, 1, 1)
    x = torch.arange(200, dtype=torch.float32)
    assert torch.equal(x.to("rbln")[::2].contiguous().cpu(), x[::2])


@pytest.mark.parametrize("n", [1, 5, 16, 17, 1000, 4095, 4096, 5000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_clones_and_casts_of_contiguous_tensors_are_tiled_rows_on_device(n, dtype):
    """clone / .to(dtype) / copy_ of a contiguous tensor (`dense_copy`): one tiled row of 16 or 1,024
    lanes per program, every size, counted on device; its numel-keyed launch is the general path's."""
    from torch_rbln.registry import _copy

    x = (torch.arange(n) * 3 - 7).to(dtype)
    d = x.to("rbln")
    before = _copy._device_counts[_copy.NAME]
    assert torch.equal(d.clone().cpu(), x)
    target = torch.float16 if dtype != torch.float16 else torch.float32
    assert torch.equal(d.to(target).cpu(), x.to(target))
    out = torch.empty(n, dtype=dtype, device="rbln")
    out.copy_(d)
    assert torch.equal(out.cpu(), x)
    assert _copy._device_counts[_copy.NAME] - before == 3
    launch = _copy._dense_geometries[n]
    assert launch == _copy._geometries[(d.shape, d.shape, d.stride(), d.stride())]
    assert launch.kernel == "tiled_copy_kernel" and launch.rows == 1
    # one element collapses to no dim: a stride-0 "row" of one (not a unit-stride run)
    assert launch.constexprs == {"UNIT_INNER": n > 1, "BLOCK_M": 1, "BLOCK_N": 16 if n <= 16 else 1024}


@pytest.mark.parametrize(("view", "tile"), [
    (lambda t: t.reshape(4096, 8).t(), (128, 128)),  # a transpose: read along dim 2, written along 3
    (lambda t: t.reshape(8, 4096)[:, :1000], (4, 1024)),  # rows of 1000: several rows per tile
    (lambda t: t.reshape(64, 16, 32).permute(0, 2, 1), (128, 128)),
    (lambda t: t.reshape(64, 512)[:, ::2], (1, 1024)),  # one merged dim, read with stride 2
])
def test_the_copy_geometry_puts_the_written_dim_last_and_the_read_dim_next(view, tile):
    from torch_rbln.registry import _copy

    source = view(torch.empty(32768, device="meta"))
    target = torch.empty(source.shape, device="meta")
    launch = _copy._copy_geometry((target.shape, source.shape, source.stride(), target.stride()))
    assert launch.kernel == "tiled_copy_kernel"
    assert (launch.constexprs["BLOCK_M"], launch.constexprs["BLOCK_N"]) == tile
    sizes, src_strides, dst_strides = launch.ints[1:4], launch.ints[4:8], launch.ints[8:12]
    assert dst_strides[3] == 1  # the destination is written along the tile's columns
    assert launch.constexprs["UNIT_INNER"] == (src_strides[3] == 1)
    assert launch.rows * sizes[1] * sizes[2] == source.numel()


@pytest.mark.parametrize(("dim", "count", "transposed"),
                         [(0, 2, False), (1, 2, False), (1, 3, False), (0, 3, True)])
def test_large_cats_copy_each_input_into_its_slice_in_tiles(dim, count, transposed):
    """cat of inputs totalling 4096+ elements copies each into its slice of the result (tiled), whatever
    their layout; small pairs keep the one-launch pair kernel (the OpInfo tests cover those)."""
    parts = [torch.randn(48, 40 + 8 * i, generator=torch.Generator().manual_seed(i)) for i in range(count)]
    if dim == 0:
        parts = [p[:, :40] for p in parts]
    if transposed:
        parts = [p.t().contiguous().t() for p in parts]
    expected = torch.cat(parts, dim)
    devices = [p.to("rbln") for p in parts]
    registry.reset_fallback_report()
    actual = torch.cat(devices, dim)
    assert torch.equal(actual.cpu(), expected)
    entry = registry.fallback_report()["aten::cat"]
    assert entry["device"] == 1 and not entry.get("reasons"), registry.format_report()


def test_a_reduction_over_leading_dims_of_a_large_tensor_matches_cpu():
    """Reductions over dims other than the last copy the input into a permuted contiguous block first
    (the op's own copy, tiled when large, not a `_copy_from` call)."""
    x = torch.randn(24, 40, 36, generator=torch.Generator().manual_seed(3))
    registry.reset_fallback_report()
    actual = x.to("rbln").sum((0, 2))
    torch.testing.assert_close(actual.cpu(), x.sum((0, 2)), atol=1e-4, rtol=1e-5)
    report = registry.fallback_report()
    assert not any(entry.get("cpu") for entry in report.values()), registry.format_report()


STRIDED_VIEWS = {
    "every other column": lambda t: t[1][:, ::2],
    "a narrowed block": lambda t: t[2, 1:, 3:],
    "the last columns, at the storage's end": lambda t: t[:, :, -5:],
}


@pytest.mark.parametrize("view", STRIDED_VIEWS.values(), ids=STRIDED_VIEWS.keys())
def test_strided_copies_take_the_kept_launch_by_address_after_the_first(view, monkeypatch):
    """A strided view spans more elements than it holds: after the general launch has kept the
    specialisation, its copies go by address with each operand's extent to the end of its storage (the
    kernel's access checks bound to that), with no general launch, into a fresh tensor and into a
    strided view at the end of a storage alike."""
    from torch_rbln.registry import _copy, _launch

    base = torch.arange(3 * 4 * 32, dtype=torch.float32).reshape(3, 4, 32)
    d = base.to("rbln")
    view(d).contiguous()
    target = torch.zeros(3, 4, 32, device="rbln")
    view(target).copy_(view(d) * 2)
    calls = []
    real = _launch.launch
    monkeypatch.setattr(_launch, "launch",
                        lambda kernel, *a, **k: (calls.append(kernel), real(kernel, *a, **k)))
    got = view(d).contiguous()
    target = torch.zeros(3, 4, 32, device="rbln")
    view(target).copy_(view(d) * 2)
    assert torch.equal(got.cpu(), view(base).contiguous())
    expected = torch.zeros(3, 4, 32)
    view(expected).copy_(view(base) * 2)
    assert torch.equal(target.cpu(), expected)
    assert not [kernel for kernel in calls if kernel.fn.__name__ == "tiled_copy_kernel"], calls
    assert _copy._extent(view(d)) == base.numel() - view(base).storage_offset()
