"""Every custom op torch-rbln ships passes torch.library.opcheck (schema, fake tensors, AOT dispatch,
autograd registration), and rms_norm trains under torch.compile (its backward is an opaque op too)."""

from __future__ import annotations

import pytest
import torch
from torch.library import opcheck

import torch_rbln  # noqa: F401

# torch's autograd-registration check supports CPU/CUDA/XPU only ("NYI devices other than ..."): on rbln
# tensors every other check runs; on CPU tensors all of them do.
RBLN_CHECKS = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


def _cases(device: str) -> list:
    generator = torch.Generator().manual_seed(0)

    def t(*shape):
        return torch.randn(*shape, generator=generator).to(device)

    x, w, grad = t(4, 8), t(8), t(4, 8)
    return [
        ("rms_norm", torch.ops.rbln.rms_norm, (x.requires_grad_(), w.requires_grad_(), 1e-6)),
        ("rms_norm_no_weight", torch.ops.rbln.rms_norm, (t(4, 8).requires_grad_(), None, 1e-5)),
        ("rms_norm_backward", torch.ops.rbln.rms_norm_backward, (grad, t(4, 8), t(8), 1e-6)),
        ("rms_norm_backward_no_weight", torch.ops.rbln.rms_norm_backward, (grad, t(4, 8), None, 1e-6)),
        ("rotary_embedding", torch.ops.rbln.rotary_embedding,
         (t(2, 4, 8).requires_grad_(), t(4, 8), t(4, 8))),
    ]


@pytest.mark.parametrize("device", ["cpu", "rbln"])
@pytest.mark.parametrize("index", range(5))
def test_custom_ops_pass_opcheck(device, index):
    name, op, args = _cases(device)[index]
    checks = None if device == "cpu" else RBLN_CHECKS
    opcheck(op, args, test_utils=checks) if checks else opcheck(op, args)


def test_rms_norm_backward_reference_is_the_gradient():
    torch.manual_seed(1)
    x, w, grad = torch.randn(3, 5, 16, dtype=torch.float64), torch.randn(16, dtype=torch.float64), \
        torch.randn(3, 5, 16, dtype=torch.float64)
    from torch_rbln.registry.custom import _rms_norm_reference  # plain torch ops: autograd's own gradient

    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    torch.autograd.backward(_rms_norm_reference(xr, wr, 1e-6), grad)
    dx, dw = torch.ops.rbln.rms_norm_backward(grad, x, w, 1e-6)
    torch.testing.assert_close(dx, xr.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(dw, wr.grad, rtol=1e-5, atol=1e-6)


def test_rms_norm_trains_under_torch_compile():
    torch.manual_seed(0)
    x = torch.randn(6, 16)
    w = torch.randn(16)

    def loss(x, w):
        return (torch.ops.rbln.rms_norm(x, w, 1e-6) ** 2).sum()

    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    loss(xc, wc).backward()
    xr, wr = x.to("rbln").requires_grad_(), w.to("rbln").requires_grad_()
    torch.compile(loss, backend="rbln")(xr, wr).backward()
    torch.testing.assert_close(xr.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(wr.grad.cpu(), wc.grad, rtol=1e-4, atol=1e-5)
