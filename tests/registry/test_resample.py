"""Nearest upsampling and reflection / replication padding on the device (registry/resample.py): bitwise
the CPU's (values moved, NaN and Inf included), and what stays on the CPU fallback."""

import pytest
import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry


@pytest.fixture(autouse=True)
def _fresh_report():
    registry.reset_fallback_report()


def _with_specials(shape, dtype=torch.float32, seed=0):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
    flat = x.view(-1)
    flat[0], flat[-1], flat[len(flat) // 2] = float("nan"), float("inf"), -0.0
    return x


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(got.cpu().view(torch.int16 if got.element_size() == 2 else torch.int32),
                       want.view(torch.int16 if want.element_size() == 2 else torch.int32))  # bits


def _no_cpu_calls() -> None:
    report = registry.fallback_report()
    assert all(row["cpu"] == 0 for row in report.values()), registry.format_report(report)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("resize", [
    {"scale_factor": 2}, {"scale_factor": 3}, {"scale_factor": 1.5}, {"scale_factor": 0.5},
    {"scale_factor": (1.7, 2.3)}, {"size": (8, 9)}, {"size": (3, 13)}, {"size": (5, 7)},
])
def test_upsample_nearest_2d(mode, resize):
    x = _with_specials((2, 3, 5, 7))
    _same(F.interpolate(x.to("rbln"), mode=mode, **resize), F.interpolate(x, mode=mode, **resize))
    _no_cpu_calls()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("spatial", [(11,), (3, 4, 5)])
def test_upsample_nearest_1d_3d_and_half_types(dtype, spatial):
    x = _with_specials((2, 2, *spatial), dtype)
    for mode in ("nearest", "nearest-exact"):
        want = F.interpolate(x, scale_factor=2.5, mode=mode)
        _same(F.interpolate(x.to("rbln"), scale_factor=2.5, mode=mode), want)
    _no_cpu_calls()


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize(("shape", "padding"), [
    ((2, 3, 10), (2, 3)), ((3, 10), (0, 9)), ((2, 3, 5, 7), (1, 1, 1, 1)), ((2, 3, 5, 7), (1, 2, 4, 0)),
    ((1, 2, 3, 4, 5), (1, 2, 0, 1, 2, 2)), ((2, 3, 5, 7), (0, 0, 0, 0)),
])
def test_reflection_and_replication_pad(mode, shape, padding):
    x = _with_specials(shape)
    _same(F.pad(x.to("rbln"), padding, mode=mode), F.pad(x, padding, mode=mode))
    _no_cpu_calls()


def test_what_stays_on_the_cpu():
    x = torch.randn(2, 3, 4)
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        F.pad(x.to("rbln"), (4, 0), mode="reflect")  # torch's own error, from the CPU
    cropped = F.pad(x.to("rbln"), (-1, 2), mode="replicate")  # a negative pad crops: the CPU computes it
    assert torch.equal(cropped.cpu(), F.pad(x, (-1, 2), mode="replicate"))
    ints = torch.arange(24, dtype=torch.uint8).reshape(1, 2, 3, 4)
    upsampled = F.interpolate(ints.to("rbln"), scale_factor=2).cpu()
    assert torch.equal(upsampled, F.interpolate(ints, scale_factor=2))
    report = registry.fallback_report()
    assert report["aten::reflection_pad1d"]["reasons"] == {"reflection pad not smaller than the input": 1}
    assert report["aten::replication_pad1d"]["reasons"] == {"padding": 1}
    assert report["aten::upsample_nearest2d"]["reasons"] == {"dtype uint8": 1}


@pytest.mark.parametrize("shape", [(2, 3, 9), (2, 3, 5, 7), (1, 2, 4, 3, 5)])
def test_gradients_of_upsampling_and_padding(shape):
    """The backward ops add each output's gradient to its source on the scatter_add kernel (float32
    sums in another order than the CPU's: a tolerance)."""
    spatial = len(shape) - 2
    resizes = [
        lambda t: F.interpolate(t, scale_factor=2),
        lambda t: F.interpolate(t, scale_factor=1.5, mode="nearest-exact"),
        lambda t: F.interpolate(t, scale_factor=0.6),
        lambda t: F.pad(t, (1, 2) * spatial, mode="reflect"),
        lambda t: F.pad(t, (2, 0) * spatial, mode="replicate"),
    ]
    g = torch.Generator().manual_seed(2)
    x = torch.randn(*shape, generator=g, requires_grad=True)
    device = x.detach().to("rbln").requires_grad_()
    for resize in resizes:
        y = resize(x)
        weights = torch.randn(y.shape, generator=g)
        (want,) = torch.autograd.grad((y * weights).sum(), x)
        (got,) = torch.autograd.grad((resize(device) * weights.to("rbln")).sum(), device)
        torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    report = registry.fallback_report()
    backward = [name for name in report if name.endswith("_backward")]
    assert sum(report[name]["device"] for name in backward) == 5 and \
        all(report[name]["cpu"] == 0 for name in backward), \
        registry.format_report(report)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize(("shape", "mode"), [((2, 3, 9), "linear"), ((2, 3, 5, 7), "bilinear"),
                                             ((1, 2, 3, 4, 5), "trilinear")])
def test_linear_upsampling_and_its_gradient(shape, mode, align_corners):
    """Per resized dim two gathers and a weighted sum (weights as torch's CPU kernel computes them); the
    sums' roundings may differ from the CPU's by an ulp: a tolerance."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(*shape, generator=g, requires_grad=True)
    device = x.detach().to("rbln").requires_grad_()
    spatial = len(shape) - 2
    for resize in ({"scale_factor": 2}, {"scale_factor": 1.5}, {"scale_factor": 0.5},
                   {"size": (4,) * spatial}, {"scale_factor": 3.3}):
        want = F.interpolate(x, mode=mode, align_corners=align_corners, **resize)
        got = F.interpolate(device, mode=mode, align_corners=align_corners, **resize)
        torch.testing.assert_close(got.detach().cpu(), want.detach(), atol=1e-5, rtol=1e-5)
        weights = torch.randn(want.shape, generator=g)
        (want_grad,) = torch.autograd.grad((want * weights).sum(), x)
        (got_grad,) = torch.autograd.grad((got * weights.to("rbln")).sum(), device)
        torch.testing.assert_close(got_grad.cpu(), want_grad, atol=2e-5, rtol=2e-5)
    _no_cpu_calls()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_bilinear_half_types(dtype):
    x = torch.randn(1, 2, 6, 5, generator=torch.Generator().manual_seed(4)).to(dtype)
    want = F.interpolate(x, scale_factor=1.7, mode="bilinear")
    got = F.interpolate(x.to("rbln"), scale_factor=1.7, mode="bilinear").cpu()
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    _no_cpu_calls()


@pytest.mark.parametrize("resize", [
    lambda t: F.interpolate(t, scale_factor=2), lambda t: F.interpolate(t, scale_factor=0.6),
    lambda t: F.interpolate(t, scale_factor=2.7, mode="nearest-exact"),
    lambda t: F.interpolate(t, size=(11, 4)), lambda t: F.pad(t, (2, 1, 0, 3), mode="replicate"),
])
def test_run_sum_gradients_are_the_cpus_bits(resize):
    """Non-decreasing sources (nearest, replication): each input sums its run of outputs in row-major
    order in one launch, as torch's CPU backward adds them: the same bits in 1-d and 2-d."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(2, 3, 5, 7, generator=g, requires_grad=True)
    device = x.detach().to("rbln").requires_grad_()
    y = resize(x)
    weights = torch.randn(y.shape, generator=g)
    (want,) = torch.autograd.grad((y * weights).sum(), x)
    (got,) = torch.autograd.grad((resize(device) * weights.to("rbln")).sum(), device)
    _same(got, want)
    _no_cpu_calls()
