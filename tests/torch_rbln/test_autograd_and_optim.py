"""Training on rbln (incl. rbln:1, where the autograd engine's device threads used to crash)."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                               torch.nn.Linear(16, 1))


@pytest.mark.parametrize(
    ("optimizer", "options"),
    [
        (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
        (torch.optim.Adam, {"lr": 0.01}),
        (torch.optim.AdamW, {"lr": 0.01, "foreach": True}),
        (torch.optim.AdamW, {"lr": 0.01, "foreach": False}),
    ],
)
def test_mlp_trains_on_rbln1_like_cpu(optimizer: type, options: dict) -> None:
    cpu_model, device_model = _model(), _model().to("rbln:1")
    cpu_opt, device_opt = optimizer(cpu_model.parameters(), **options), optimizer(
        device_model.parameters(), **options
    )
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 8, generator=generator), torch.randn(32, 1, generator=generator)
    xd, yd = x.to("rbln:1"), y.to("rbln:1")
    for _ in range(4):
        for model, opt, inputs, target in ((cpu_model, cpu_opt, x, y), (device_model, device_opt, xd, yd)):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(inputs), target)
            loss.backward()
            opt.step()
    for cpu_param, device_param in zip(cpu_model.parameters(), device_model.parameters(), strict=True):
        assert device_param.device == torch.device("rbln:1")
        torch.testing.assert_close(device_param.detach().cpu(), cpu_param.detach(), rtol=1e-5, atol=1e-5)


def test_backward_in_a_worker_thread_on_rbln2() -> None:
    import threading

    errors: list[BaseException] = []

    def work() -> None:
        try:
            w = torch.randn(3, requires_grad=True, device="rbln:2")
            (w * w).sum().backward()
            torch.testing.assert_close(w.grad.cpu(), 2 * w.detach().cpu())
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert not errors, errors


def test_autocast_bfloat16_casts_matmuls_and_keeps_fp32_ops() -> None:
    a = torch.randn(4, 4).to("rbln:0")
    with torch.autocast("rbln", dtype=torch.bfloat16):
        product = a @ a
        linear = torch.nn.functional.linear(a, a)
        summed = a + 1
        soft = torch.softmax(product, dim=-1)
    assert product.dtype == torch.bfloat16 and linear.dtype == torch.bfloat16
    assert summed.dtype == torch.float32 and soft.dtype == torch.float32
    torch.testing.assert_close(product.float().cpu(), a.cpu() @ a.cpu(), rtol=2e-2, atol=5e-2)
    assert (a @ a).dtype == torch.float32  # outside the region nothing is cast
