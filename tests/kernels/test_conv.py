"""Convolution (im2col + matmul, col2im) against CPU torch: forward and every gradient, on device."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry

# (N, C, H, W, Cout, kernel, stride, padding, dilation, groups, bias)
CASES = [
    (2, 3, 9, 7, 8, 3, 1, 1, 1, 1, True),
    (2, 4, 10, 11, 6, (3, 2), 2, (0, 1), 2, 2, False),
    (1, 4, 5, 5, 8, 1, 1, 0, 1, 1, True),  # 1x1: the input is the matmul operand, no im2col
    (2, 4, 6, 7, 6, 1, 1, 0, 1, 2, True),  # grouped 1x1
    (2, 6, 8, 8, 6, 3, 1, 1, 1, 6, True),  # depthwise
    (3, 5, 7, 6, 4, (2, 3), (2, 1), (1, 0), (1, 2), 1, True),
    (1, 3, 16, 16, 5, 8, 8, 0, 1, 1, True),  # patch embedding (ViT)
    # an output plane of several tiles (at most 64 columns each): col2im's taps overlap across tile edges
    (1, 2, 20, 70, 3, 3, 1, 1, 1, 1, True),
]
F32 = {"atol": 1e-4, "rtol": 1e-4}


def _run_conv(x, w, b, stride, padding, dilation, groups, layout=None):
    """(output, grad x, grad w, grad b) of conv + backward of a fixed random weighting."""
    x = x.detach().requires_grad_()
    w = w.detach().requires_grad_()
    b = b.detach().requires_grad_() if b is not None else None
    conv = F.conv1d if x.dim() == 3 else F.conv2d
    inp = layout(x) if layout else x
    y = conv(inp, w, b, stride, padding, dilation, groups)
    weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(3)).to(y.device)
    (y * weights).sum().backward()
    return y, x.grad, w.grad, None if b is None else b.grad


def _compare(cpu_x, cpu_w, cpu_b, args, tol, layout=None):
    expected = _run_conv(cpu_x, cpu_w, cpu_b, *args, layout=layout)
    registry.reset_fallback_report()
    got = _run_conv(cpu_x.to("rbln"), cpu_w.to("rbln"), None if cpu_b is None else cpu_b.to("rbln"), *args,
                    layout=layout)
    names = ("output", "grad_input", "grad_weight", "grad_bias")
    for name, g, e in zip(names, got, expected, strict=True):
        if e is None:
            assert g is None
            continue
        torch.testing.assert_close(g.cpu(), e, **tol, msg=lambda m, name=name: f"{name}: {m}")
    report = registry.fallback_report()
    for op in ("aten::convolution", "aten::convolution_backward"):
        assert report[op]["cpu"] == 0 and report[op]["device"] == 1, registry.format_report(report)
    return got, expected


@pytest.mark.parametrize("case", CASES, ids=str)
def test_conv2d_forward_backward_match_cpu(case):
    N, C, H, W, Cout, k, stride, padding, dilation, groups, bias = case
    gen = torch.Generator().manual_seed(sum(case[:5]))
    kh, kw = (k, k) if isinstance(k, int) else k
    x = torch.randn(N, C, H, W, generator=gen)
    w = torch.randn(Cout, C // groups, kh, kw, generator=gen)
    b = torch.randn(Cout, generator=gen) if bias else None
    _compare(x, w, b, (stride, padding, dilation, groups), F32)


@pytest.mark.parametrize("layout", ["channels_last", "transposed"])
@pytest.mark.parametrize("pointwise", [False, True])
def test_conv2d_non_contiguous_input(layout, pointwise):
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 4, 7, 9, generator=gen)
    k = 1 if pointwise else 3
    w, b = torch.randn(6, 4, k, k, generator=gen), torch.randn(6, generator=gen)
    if layout == "channels_last":
        def make(t):
            return t.contiguous(memory_format=torch.channels_last)
    else:
        def make(t):
            return t.transpose(2, 3).contiguous().transpose(2, 3)
    got, expected = _compare(x, w, b, (1, 0 if pointwise else 1, 1, 1), F32, layout=make)
    # the output keeps the memory format the CPU gives it (channels-last in, channels-last out)
    assert got[0].stride() == expected[0].stride()


def test_conv1d_matches_cpu():
    gen = torch.Generator().manual_seed(7)
    x, w = torch.randn(3, 4, 19, generator=gen), torch.randn(6, 2, 5, generator=gen)
    b = torch.randn(6, generator=gen)
    _compare(x, w, b, (2, 2, 1, 2), F32)


# float16 is `slow` (8 compiles, 8 s of a cold suite): bfloat16 runs the same kernels with its coarser
# rounding, and test_cnn's channels-last and pooling tests run float16
@pytest.mark.parametrize("dtype,tol", [
    pytest.param(torch.float16, {"atol": 2e-2, "rtol": 2e-2}, marks=pytest.mark.slow),
    (torch.bfloat16, {"atol": 1.5e-1, "rtol": 5e-2})], ids=str)
def test_conv2d_half_precision(dtype, tol):
    """Half inputs stay in their dtype; the products accumulate in float32 (the CPU reference is
    computed in float32 from the same rounded inputs)."""
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(2, 3, 9, 8, generator=gen).to(dtype)
    w = (torch.randn(5, 3, 3, 3, generator=gen) / 3).to(dtype)
    b = torch.randn(5, generator=gen).to(dtype)
    y = F.conv2d(x.to("rbln"), w.to("rbln"), b.to("rbln"), 1, 1)
    assert y.dtype == dtype
    expected = F.conv2d(x.float(), w.float(), b.float(), 1, 1)
    torch.testing.assert_close(y.cpu().float(), expected, **tol)
    got = _run_conv(x.to("rbln"), w.to("rbln"), b.to("rbln"), 1, 1, 1, 1)
    want = _run_conv(x.float(), w.float(), b.float(), 1, 1, 1, 1)
    for g, e in zip(got[1:], want[1:], strict=True):
        assert g.dtype == dtype
        scale = e.abs().max().item()
        torch.testing.assert_close(g.cpu().float(), e, atol=tol["atol"] * scale, rtol=tol["rtol"])


# (x shape, weight shape, stride, padding, output_padding, groups, dilation)
TRANSPOSED = [
    ((2, 4, 5, 6), (4, 3, 3, 3), 2, 1, 1, 1, 1),  # a decoder's 2x upsampling
    ((2, 4, 5, 6), (4, 2, 3, 2), (2, 1), (0, 1), (1, 0), 2, 1),  # grouped, per-dim parameters
    ((1, 3, 4, 4), (3, 5, 1, 1), 1, 0, 0, 1, 1),  # 1x1: one matmul, no col2im
    ((2, 2, 5, 5), (2, 2, 3, 3), 1, 2, 0, 1, 2),  # dilated
    ((2, 3, 7), (3, 4, 3), 3, 1, 2, 1, 1),  # 1-d
]


@pytest.mark.parametrize("case", TRANSPOSED, ids=str)
def test_transposed_convolution_forward_backward_match_cpu(case):
    """A transposed convolution is the input gradient of the direct one whose output has x's shape;
    its backward is that direct convolution and its weight gradient, with the roles swapped."""
    x_shape, w_shape, stride, padding, output_padding, groups, dilation = case
    gen = torch.Generator().manual_seed(sum(x_shape))
    x, w = torch.randn(*x_shape, generator=gen), torch.randn(*w_shape, generator=gen)
    b = torch.randn(w_shape[1] * groups, generator=gen)
    conv = F.conv_transpose2d if len(x_shape) == 4 else F.conv_transpose1d

    def run(x, w, b):
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
        y = conv(x, w, b, stride, padding, output_padding, groups, dilation)
        weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(3)).to(y.device)
        (y * weights).sum().backward()
        return y, x.grad, w.grad, b.grad

    expected = run(x, w, b)
    registry.reset_fallback_report()
    got = run(x.to("rbln"), w.to("rbln"), b.to("rbln"))
    for name, g, e in zip(("output", "grad_input", "grad_weight", "grad_bias"), got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e, **F32, msg=lambda m, name=name: f"{name}: {m}")
    report = registry.fallback_report()
    for op in ("aten::convolution", "aten::convolution_backward"):
        assert report[op]["cpu"] == 0 and report[op]["device"] == 1, registry.format_report(report)


def test_transposed_convolution_layouts_and_half_precision():
    gen = torch.Generator().manual_seed(13)
    x, w = torch.randn(2, 4, 5, 6, generator=gen), torch.randn(4, 3, 3, 3, generator=gen)
    x_last = x.contiguous(memory_format=torch.channels_last)
    expected = F.conv_transpose2d(x_last, w, stride=2, padding=1, output_padding=1)
    got = F.conv_transpose2d(x_last.to("rbln"), w.to("rbln"), stride=2, padding=1, output_padding=1)
    torch.testing.assert_close(got.cpu(), expected, **F32)
    assert got.stride() == expected.stride()  # channels-last in, channels-last out, as on the CPU
    half = F.conv_transpose2d(x.half().to("rbln"), w.half().to("rbln"), stride=2)
    assert half.dtype == torch.float16
    torch.testing.assert_close(half.cpu().float(), F.conv_transpose2d(x.half().float(), w.half().float(),
                                                                     stride=2), atol=2e-2, rtol=2e-2)


def test_3d_convolutions_and_padding_only_the_dilation_allows_decline_with_reason():
    x, w = torch.randn(1, 2, 5, 5), torch.randn(2, 3, 3, 3)
    registry.reset_fallback_report()
    # output_padding 1 with stride 1 is valid only because the dilation is 2: not the input gradient
    # of a direct convolution of the result, so the CPU computes it
    got = F.conv_transpose2d(x.to("rbln"), w.to("rbln"), output_padding=1, dilation=2)
    torch.testing.assert_close(got.cpu(), F.conv_transpose2d(x, w, output_padding=1, dilation=2), **F32)
    x3, w3 = torch.randn(1, 2, 4, 4, 4), torch.randn(3, 2, 2, 2, 2)
    torch.testing.assert_close(F.conv3d(x3.to("rbln"), w3.to("rbln")).cpu(), F.conv3d(x3, w3), **F32)
    reasons = registry.fallback_report()["aten::convolution"]["reasons"]
    assert set(reasons) == {"output_padding at or over the stride", "3-d convolution (1-d and 2-d only)"}, \
        reasons


def test_bad_input_raises_torchs_error():
    x, w = torch.randn(1, 4, 5, 5), torch.randn(3, 2, 3, 3)  # 4 channels, the weight expects 2
    with pytest.raises(RuntimeError) as cpu_error:
        F.conv2d(x, w)
    with pytest.raises(RuntimeError) as device_error:
        F.conv2d(x.to("rbln"), w.to("rbln"))
    assert str(device_error.value) == str(cpu_error.value)
