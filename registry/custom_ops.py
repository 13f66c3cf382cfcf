"""The custom ops of the op library: `torch.ops.rbln.rms_norm` (with `rms_norm_backward`) and
`torch.ops.rbln.rotary_embedding`, defined with `torch_rbln.registry`'s custom-op registration (so
`torch.library.custom_op` + `register_fake`: they also trace under torch.compile); on CPU tensors, and
for declined calls, the reference runs.

This module holds what the definition needs (references, fake, autograd formulas) and imports nothing
heavy: registration runs at `import torch`. The device implementations (`custom`) load on first call.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def _rms_norm_reference(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    y = (x.float() * rstd).to(x.dtype)
    return y * weight if weight is not None else y


def _rms_norm_backward_reference(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
                                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight) of `_rms_norm_reference`, in float32 from its closed form (a custom op's kernel runs
    below autograd, so it cannot differentiate the forward): with ``r = rsqrt(mean(x^2) + eps)``,
    ``xhat = x * r`` and ``g = grad * weight``, ``dx = r * (g - xhat * mean(g * xhat))`` and ``dweight``
    sums ``grad * xhat`` over the rows. dweight is an empty tensor when there is no weight (a custom op
    cannot return None)."""
    xf, gf = x.float(), grad.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    xhat = xf * r
    g = gf * weight.float() if weight is not None else gf
    dx = (r * (g - xhat * (g * xhat).mean(-1, keepdim=True))).to(x.dtype)
    if weight is None:
        return dx, x.new_empty(0)
    dw = (gf * xhat).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype).reshape(weight.shape)
    return dx, dw


def _rms_norm_backward_fake(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
                            eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), (torch.empty_like(weight) if weight is not None else x.new_empty(0))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotary_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


def register(_register_custom: Callable) -> None:
    """Define the ops with `_register_custom` (the registry's custom-op registration, passed in so that
    this module does not import the package that imports it)."""
    from ._base import Ref

    op = _register_custom("rbln::rms_norm", Ref("custom", "_rms_norm_device"), None, _rms_norm_reference,
                          None, (), fast=Ref("custom", "_rms_norm_fast"))

    def setup_context(ctx, inputs, output):
        x, weight, eps = inputs
        ctx.save_for_backward(x, weight)
        ctx.eps = eps

    def backward(ctx, grad):
        # through an opaque custom op, so that torch.compile traces the backward (fake tensors reach
        # the op's fake implementation, never a kernel launch)
        x, weight = ctx.saved_tensors
        dx, dw = torch.ops.rbln.rms_norm_backward(grad, x, weight, ctx.eps)
        return dx, (dw if weight is not None else None), None

    op.register_autograd(backward, setup_context=setup_context)
    _register_custom("rbln::rms_norm_backward", Ref("custom", "_rms_norm_backward_device"), None,
                     _rms_norm_backward_reference, _rms_norm_backward_fake, ())

    rotary = _register_custom("rbln::rotary_embedding", Ref("custom", "_rotary_device"), None,
                              _rotary_reference, None, (), fast=Ref("custom", "_rotary_fast"))

    def rotary_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def rotary_backward(ctx, grad):
        x, cos, sin = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(need) for t, need in zip((x, cos, sin), ctx.needs_input_grad,
                                                                          strict=True)]
            out = _rotary_reference(*leaves)
            wanted = [t for t in leaves if t.requires_grad]
            grads = iter(torch.autograd.grad(out, wanted, grad))
        return tuple(next(grads) if t.requires_grad else None for t in leaves)

    rotary.register_autograd(rotary_backward, setup_context=rotary_setup)
