"""Checks shared by the registry's op tests: which calls the CPU fallback ran, and a loss's value and
gradient against the CPU's."""

from __future__ import annotations

from collections.abc import Callable

import torch

from torch_rbln import registry


def cpu_calls() -> dict:
    """The ops the fallback report counts on the CPU since its last reset: op -> its report row."""
    return {op: row for op, row in registry.fallback_report().items() if row["cpu"]}


def loss_and_gradient(loss: Callable, x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                      reduction: str, generator: torch.Generator, grad_atol: float) -> torch.Tensor:
    """`loss(x, target, weight=, reduction=)` on rbln against the CPU (1e-5), then its backward from one
    random upstream gradient, compared within `grad_atol`; asserts no call ran on the CPU. Returns the
    device gradient."""
    cpu = x.clone().requires_grad_()
    device = x.to("rbln").requires_grad_()
    registry.reset_fallback_report()
    expected = loss(cpu, target, weight=weight, reduction=reduction)
    got = loss(device, target.to("rbln"), weight=None if weight is None else weight.to("rbln"),
               reduction=reduction)
    torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-5)
    upstream = torch.rand(expected.shape, generator=generator)
    expected.backward(upstream)
    got.backward(upstream.to("rbln"))
    torch.testing.assert_close(device.grad.cpu(), cpu.grad, atol=grad_atol, rtol=1e-5)
    assert not cpu_calls(), cpu_calls()
    return device.grad
