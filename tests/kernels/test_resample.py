"""kernels/resample.py: the plane gather, the linear plane kernel and the run sums give the same bits on
the numba backend and on the numpy interpreter (a miscompile in either shows as a difference), and a
table that points outside the input is refused by the launch's checks instead of read."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch_rbln.kernels import resample as kernels

import torch_rbln  # noqa: F401


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.cpu()
    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


def _on(backend: str, call, monkeypatch) -> torch.Tensor:
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", backend)
    return call()


def _input(shape: tuple, seed: int, requires_grad: bool = False) -> torch.Tensor:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    x.view(-1)[3] = -0.0
    return x.requires_grad_(requires_grad)


@pytest.mark.parametrize("resize", [
    lambda t: F.interpolate(t, scale_factor=2),
    lambda t: F.interpolate(t, size=(7, 3), mode="nearest-exact"),
    lambda t: F.pad(t, (2, 1, 3, 0), mode="reflect"),
    lambda t: F.interpolate(t, scale_factor=1.7, mode="bilinear"),
    lambda t: F.interpolate(t, size=(9, 4), mode="bilinear", align_corners=True),
], ids=["nearest", "nearest-exact", "reflect", "bilinear", "bilinear-corners"])
def test_forward_and_backward_agree_across_backends(resize, monkeypatch):
    x = _input((2, 3, 5, 6), seed=1)
    weights = torch.randn(resize(x).shape, generator=torch.Generator().manual_seed(2))

    def forward_and_gradient() -> tuple[torch.Tensor, torch.Tensor]:
        device = x.to("rbln").requires_grad_()
        y = resize(device)
        (grad,) = torch.autograd.grad((y * weights.to("rbln")).sum(), device)
        return y.detach(), grad

    numba_y, numba_grad = _on("numba", forward_and_gradient, monkeypatch)
    interpret_y, interpret_grad = _on("interpret", forward_and_gradient, monkeypatch)
    assert torch.equal(_bits(numba_y), _bits(interpret_y)), "numba and the interpreter differ (forward)"
    assert torch.equal(_bits(numba_grad), _bits(interpret_grad)), "numba and the interpreter differ (grad)"
    cpu = x.clone().requires_grad_()
    y = resize(cpu)
    (grad,) = torch.autograd.grad((y * weights).sum(), cpu)
    torch.testing.assert_close(numba_y.cpu(), y.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(numba_grad.cpu(), grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_a_gather_table_outside_the_input_is_refused(backend, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", backend)
    x = torch.randn(2, 4, 5, device="rbln")
    rows = torch.tensor([0, 1, 9], device="rbln")  # row 9 of a 4-row plane
    cols = torch.tensor([0, 4], device="rbln")
    out = torch.zeros(2, 3, 2, device="rbln")
    with pytest.raises(Exception, match="gather_plane_kernel"):
        kernels.gather_plane_kernel[(1, 2)](x, rows, cols, out, 4, 5, 3, 2, BLOCK_H=4, BLOCK_W=16)


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_a_run_past_the_gradient_is_refused(backend, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", backend)
    grad = torch.randn(2, 4, 5, device="rbln")
    # the third input's run: gradient rows 7..11 of a 4-row plane
    start, count = torch.tensor([0, 3, 7], device="rbln"), torch.tensor([1, 1, 5], device="rbln")
    columns, ones = torch.arange(5, device="rbln"), torch.ones(5, dtype=torch.int64, device="rbln")
    out = torch.zeros(2, 3, 5, device="rbln")
    with pytest.raises(Exception, match="run_sum_plane_kernel"):
        kernels.run_sum_plane_kernel[(1, 2)](grad, start, count, start, count, start, columns, ones, columns,
                                             ones, columns, out, 4, 5, 3, 5, 5, 1, WEIGHTED=False, BLOCK_H=4,
                                             BLOCK_W=16)
