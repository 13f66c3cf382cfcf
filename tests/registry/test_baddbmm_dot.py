"""baddbmm (a batched product, then `c` scaled and added) and dot (a 1 x K x 1 product) on the device."""

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry


@pytest.fixture(autouse=True)
def _fresh_report():
    registry.reset_fallback_report()


@pytest.mark.parametrize("c_shape", [(4, 3, 6), (3, 6), (6,), (1, 3, 1)])
@pytest.mark.parametrize(("beta", "alpha"), [(1, 1), (0.5, 2.0), (0, 1), (0, -3.0), (2, 1)])
def test_baddbmm_matches_the_cpu(c_shape, beta, alpha):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 3, 5, generator=g), torch.randn(4, 5, 6, generator=g)
    c = torch.randn(*c_shape, generator=g)
    want = torch.baddbmm(c, a, b, beta=beta, alpha=alpha)
    got = torch.baddbmm(c.to("rbln"), a.to("rbln"), b.to("rbln"), beta=beta, alpha=alpha)
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    assert registry.fallback_report()["aten::baddbmm"]["cpu"] == 0


def test_baddbmm_special_operands_give_the_cpus_results():
    """beta 0 ignores NaN in c, as torch (the input scan sends that call to the CPU, visibly); alpha 0
    reads no product: declined."""
    a, b = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    c = torch.full((2, 3, 5), float("nan"))
    got = torch.baddbmm(c.to("rbln"), a.to("rbln"), b.to("rbln"), beta=0)
    torch.testing.assert_close(got.cpu(), torch.bmm(a, b), atol=1e-5, rtol=1e-5)
    zero = torch.baddbmm(torch.ones(2, 3, 5, device="rbln"), a.to("rbln"), b.to("rbln"), alpha=0, beta=2)
    assert torch.equal(zero.cpu(), torch.full((2, 3, 5), 2.0))
    assert registry.fallback_report()["aten::baddbmm"]["reasons"] == {"nan_inf": 1, "alpha 0": 1}


def test_dot():
    g = torch.Generator().manual_seed(1)
    for n in (1, 7, 300):
        x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
        got = torch.dot(x.to("rbln"), y.to("rbln"))
        assert got.shape == ()
        torch.testing.assert_close(got.cpu(), torch.dot(x, y), atol=1e-5, rtol=1e-5)
    assert registry.fallback_report()["aten::dot"] == {"device": 3, "cpu": 0, "reasons": {}}
    with pytest.raises(RuntimeError):  # torch's error for mismatched lengths, from the CPU
        torch.dot(torch.ones(3, device="rbln"), torch.ones(4, device="rbln"))
