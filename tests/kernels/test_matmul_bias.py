"""matmul_kernel's bias is a runtime argument (`has_bias`), not a constexpr: a linear with a bias and one
without, of the same shape, run one compiled specialisation, and each still matches the CPU (the
no-bias launch must not read the stand-in `bias_ptr`, which is the output itself)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch_rbln.kernels import matmul
from torch_rbln.registry.table import MATMUL

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _specialisations() -> set[str]:
    return set(matmul.matmul_kernel.fn.cache)


def test_linear_with_and_without_bias_share_one_specialisation():
    torch.manual_seed(3)
    m, k, n = 37, 64, 200  # a fitted tile (`_fitted_tile`) with partial M and N tiles
    x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    before = _specialisations()
    registry.reset_fallback_report()
    with_bias = F.linear(x.to("rbln"), w.to("rbln"), b.to("rbln"))
    added = _specialisations() - before
    without_bias = F.linear(x.to("rbln"), w.to("rbln"))
    assert _specialisations() - before == added and len(added) <= 1  # no second specialisation
    atol, rtol = MATMUL["float32"]
    torch.testing.assert_close(with_bias.cpu(), F.linear(x, w, b), atol=atol, rtol=rtol)
    torch.testing.assert_close(without_bias.cpu(), F.linear(x, w), atol=atol, rtol=rtol)
    counts = registry.device_counts()
    assert counts.get("aten::addmm", 0) == 1 and counts.get("aten::mm", 0) == 1


def test_addmm_scales_and_broadcasts_the_bias_and_mm_ignores_the_output_it_writes():
    torch.manual_seed(4)
    a, b = torch.randn(20, 48), torch.randn(48, 24)
    bias = torch.randn(20, 1)  # broadcast along N: stride 0 there
    got = torch.addmm(bias.to("rbln"), a.to("rbln"), b.to("rbln"), beta=0.5, alpha=2.0)
    atol, rtol = MATMUL["float32"]
    torch.testing.assert_close(got.cpu(), torch.addmm(bias, a, b, beta=0.5, alpha=2.0), atol=atol, rtol=rtol)
    # mm into an out= tensor full of NaN: the no-bias launch passes the output as `bias_ptr`; reading
    # it would put the NaN into the product
    out = torch.full((20, 24), float("nan"), device="rbln")
    torch.mm(a.to("rbln"), b.to("rbln"), out=out)
    torch.testing.assert_close(out.cpu(), a @ b, atol=atol, rtol=rtol)
