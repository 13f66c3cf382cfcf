"""pixel_shuffle / pixel_unshuffle (r^2 copies of four-dim strided views), diagonal_copy (`torch.diag`)
and trace on the device (`registry/indexing.py`): moved values compared bit for bit with the CPU's, the
trace's sum within float32 rounding; what torch refuses still raises its errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torch_rbln import registry

from .checks import cpu_calls


@pytest.mark.parametrize("shape,factor", [((2, 12, 3, 5), 2), ((8, 4, 4), 2), ((1, 2, 27, 2, 3), 3),
                                          ((1, 4, 1, 1), 2)])
def test_pixel_shuffle_and_unshuffle_move_every_value_as_torch_does(shape, factor):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    registry.reset_fallback_report()
    shuffled = F.pixel_shuffle(x.to("rbln"), factor)
    assert torch.equal(shuffled.cpu(), F.pixel_shuffle(x, factor)) and shuffled.is_contiguous()
    assert torch.equal(F.pixel_unshuffle(shuffled, factor).cpu(), x)
    ints = (x * 10).to(torch.int64)
    assert torch.equal(F.pixel_shuffle(ints.to("rbln"), factor).cpu(), F.pixel_shuffle(ints, factor))
    assert not cpu_calls(), cpu_calls()


def test_a_subpixel_upsampler_trains_on_the_device():
    generator = torch.Generator().manual_seed(1)
    conv = torch.nn.Conv2d(3, 12, 3, padding=1)
    reference = torch.nn.Conv2d(3, 12, 3, padding=1)
    reference.load_state_dict(conv.state_dict())
    conv.to("rbln")
    image = torch.randn(2, 3, 8, 8, generator=generator)
    registry.reset_fallback_report()
    F.pixel_shuffle(conv(image.to("rbln")), 2).square().mean().backward()
    F.pixel_shuffle(reference(image), 2).square().mean().backward()
    torch.testing.assert_close(conv.weight.grad.cpu(), reference.weight.grad, atol=1e-5, rtol=1e-4)
    assert "aten::pixel_shuffle" not in cpu_calls() and "aten::pixel_unshuffle" not in cpu_calls()


@pytest.mark.parametrize("offset", [0, 2, -3])
def test_diag_diagonal_copy_and_trace(offset):
    generator = torch.Generator().manual_seed(2)
    matrix = torch.randn(5, 7, generator=generator)
    cube = torch.randn(3, 4, 5, generator=generator)
    registry.reset_fallback_report()
    assert torch.equal(torch.diag(matrix.to("rbln"), offset).cpu(), torch.diag(matrix, offset))
    assert torch.equal(torch.diagonal_copy(cube.to("rbln"), offset, 2, 1).cpu(),
                       torch.diagonal_copy(cube, offset, 2, 1))
    torch.testing.assert_close(torch.trace(matrix.to("rbln")).cpu(), torch.trace(matrix), atol=1e-6,
                               rtol=1e-6)
    ints = (matrix * 10).to(torch.int32)
    assert torch.equal(torch.trace(ints.to("rbln")).cpu(), torch.trace(ints))
    assert not cpu_calls(), cpu_calls()


def test_shapes_torch_refuses_still_raise_torchs_errors():
    with pytest.raises(RuntimeError, match="divisible by the square of upscale_factor"):
        F.pixel_shuffle(torch.randn(1, 3, 2, 2).to("rbln"), 2)
    with pytest.raises(RuntimeError, match="divisible by downscale_factor"):
        F.pixel_unshuffle(torch.randn(1, 1, 3, 2).to("rbln"), 2)
