"""Custom ops backed by op-library kernels: `torch.ops.rbln.rms_norm` (forward and backward kernels)
and `torch.ops.rbln.rotary_embedding` (forward kernel; backward through registered aten ops).

Defined with `torch_rbln.registry.register_kernel` (so `torch.library.custom_op` + `register_fake`:
they also trace under torch.compile); on CPU tensors, and for declined calls, the reference runs.
"""

from __future__ import annotations

import torch

from . import _launch
from . import _ops as O


def _rms_norm_reference(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    y = (x.float() * rstd).to(x.dtype)
    return y * weight if weight is not None else y


def _rms_norm_device(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    if x.dim() == 0 or x.numel() == 0:
        raise O.Decline("empty tensor")
    if weight is not None and (weight.dtype != x.dtype or weight.shape != x.shape[-1:]):
        raise O.Decline("weight dtype/shape")
    return O.rms_norm_forward(x, weight, eps)[0]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotary_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


def _rotary_device(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    D = x.shape[-1] if x.dim() else 0
    if D == 0 or D % 2 or x.numel() == 0:
        raise O.Decline("last dim must be even and non-empty")
    if cos.shape != sin.shape or cos.shape[-1] != D or cos.dtype != x.dtype or sin.dtype != x.dtype:
        raise O.Decline("cos/sin shape or dtype")
    cs_shape = list(cos.shape)
    while cs_shape and cs_shape[0] == 1:
        cs_shape.pop(0)
    if list(x.shape[x.dim() - len(cs_shape):]) != cs_shape:
        raise O.Decline("cos/sin broadcast over other than the leading dims")
    x, cos, sin = O.contiguous(x), O.contiguous(cos), O.contiguous(sin)
    out = O.empty(x.shape, x.dtype, x.get_device())
    block = max(16, 1 << (D // 2 - 1).bit_length())
    rows, cs_rows = x.numel() // D, cos.numel() // D
    # the kept launch: dtypes and block determine the specialisation while the ints fit in 32 bits
    key = (x.dtype, block) if x.numel() < O._I32 else (x.dtype, block, "int64")
    _launch.launch(O._k("rotary").rotary_kernel, rows, key, (x, cos, sin, out, D, cs_rows), {"BLOCK": block})
    return out


def register() -> None:
    from . import register_kernel

    op = register_kernel("rbln::rms_norm", _rms_norm_device, reference=_rms_norm_reference)

    def setup_context(ctx, inputs, output):
        x, weight, eps = inputs
        ctx.save_for_backward(x, weight)
        ctx.eps = eps

    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        if x.device.type == "rbln" and x.dtype in O.FLOATS and (weight is None or weight.dtype == x.dtype):
            _, rstd = O.rms_norm_forward(x, weight, ctx.eps)
            dx, dw = O.rms_norm_backward(grad, x, weight, rstd)
            return dx, (dw.view(weight.shape) if weight is not None else None), None
        with torch.enable_grad():
            xr = x.detach().requires_grad_()
            wr = weight.detach().requires_grad_() if weight is not None else None
            out = _rms_norm_reference(xr, wr, ctx.eps)
            inputs = [xr] + ([wr] if wr is not None else [])
            grads = torch.autograd.grad(out, inputs, grad)
        return grads[0], (grads[1] if weight is not None else None), None

    op.register_autograd(backward, setup_context=setup_context)

    rotary = register_kernel("rbln::rotary_embedding", _rotary_device, reference=_rotary_reference)

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
