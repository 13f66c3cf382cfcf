"""Random ops on device. Dropout (`native_dropout` and its backward): the mask's statistics, values
computed as torch's CPU kernel computes them from that mask, seeded runs that repeat, and the forms that
decline. `torch.rand`/`torch.randn` (`uniform_`, `normal_`): range, moments, seeding, declines."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _row(op: str) -> dict:
    return registry.fallback_report().get(op, {"device": 0, "cpu": 0, "reasons": {}})


@pytest.fixture(autouse=True)
def _fresh_report():
    registry.reset_fallback_report()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_drops_a_p_share_and_scales_the_rest_as_the_cpu_does(dtype, p):
    torch.manual_seed(0)
    x = torch.randn(64, 1000, dtype=dtype)
    out, mask = torch.ops.aten.native_dropout(x.to("rbln"), p, True)
    out, mask = out.cpu(), mask.cpu()
    assert mask.dtype == torch.bool and out.dtype == dtype
    n = mask.numel()
    dropped = n - int(mask.sum())
    # a binomial count: 6 standard deviations leave no room for a flaky test, and catch a p/1-p swap
    assert abs(dropped - p * n) < 6 * (n * p * (1 - p)) ** 0.5, (dropped, p * n)
    expected = x * mask.to(dtype) * (1.0 / (1.0 - p))  # the CPU kernel's arithmetic on our mask
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    assert _row("aten::native_dropout") == {"device": 1, "cpu": 0, "reasons": {}}


def test_dropout_masks_repeat_under_manual_seed_and_differ_between_calls():
    x = torch.ones(4096).to("rbln")
    torch.manual_seed(7)
    first = torch.ops.aten.native_dropout(x, 0.5, True)[1].cpu()
    second = torch.ops.aten.native_dropout(x, 0.5, True)[1].cpu()
    torch.rbln.manual_seed(7)
    again = torch.ops.aten.native_dropout(x, 0.5, True)[1].cpu()
    assert torch.equal(first, again)
    assert not torch.equal(first, second)


def test_dropout_edges_p_zero_p_one_and_eval():
    x = torch.tensor([-1.0, 2.0, -0.0, 3.5])
    out, mask = torch.ops.aten.native_dropout(x.to("rbln"), 1.0, True)
    torch.testing.assert_close(out.cpu(), torch.ops.aten.native_dropout(x, 1.0, True)[0], atol=0, rtol=0)
    assert torch.equal(torch.signbit(out.cpu()), torch.tensor([True, False, True, False]))  # -x * 0
    assert not mask.cpu().any()
    for p, train in ((0.0, True), (0.7, False)):
        out, mask = torch.ops.aten.native_dropout(x.to("rbln"), p, train)
        torch.testing.assert_close(out.cpu(), x, atol=0, rtol=0)
        assert mask.cpu().all()


def test_dropout_backward_and_a_training_step_run_on_device():
    torch.manual_seed(3)
    layer = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Dropout(0.25)).to("rbln")
    x = torch.randn(8, 32).to("rbln")
    out = layer(x)
    grad = torch.randn(8, 32)
    out.backward(grad.to("rbln"))
    # the gradient reaching the linear layer's output is grad * mask / (1 - p): zero where dropped
    kept = (out.detach().cpu() != 0)
    weight_grad = layer[0].weight.grad.cpu()
    pre = layer[0](x).detach().cpu()
    mask = out.detach().cpu() == pre * (1 / 0.75)
    expected = (grad * mask * (1 / 0.75)).t() @ x.cpu()
    torch.testing.assert_close(weight_grad, expected, atol=1e-4, rtol=1e-4)
    assert kept.any() and not kept.all()
    assert _row("aten::native_dropout")["device"] == 1
    assert _row("aten::native_dropout_backward") == {"device": 1, "cpu": 0, "reasons": {}}


def test_dropout_backward_matches_the_cpu_exactly():
    torch.manual_seed(4)
    grad = torch.randn(300, dtype=torch.float16)
    mask = torch.rand(300) > 0.3
    expected = torch.ops.aten.native_dropout_backward(grad, mask, 1 / 0.7)
    actual = torch.ops.aten.native_dropout_backward(grad.to("rbln"), mask.to("rbln"), 1 / 0.7)
    torch.testing.assert_close(actual.cpu(), expected, atol=0, rtol=0)


def test_dropout_declines_what_it_does_not_cover():
    empty = torch.ops.aten.native_dropout(torch.empty(0).to("rbln"), 0.5, True)
    assert empty[0].numel() == 0
    assert "empty" in next(iter(_row("aten::native_dropout")["reasons"]))
    with pytest.raises(RuntimeError, match="expects p to be in"):  # p > 1: torch's own error, from the CPU
        torch.ops.aten.native_dropout(torch.ones(3).to("rbln"), 1.5, True)
    assert "p outside" in next(iter(_row("aten::native_dropout")["reasons"].keys() - {"empty tensor"}))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # bfloat16: the coarsest steps
def test_rand_and_randn_on_device_have_the_right_distribution(dtype):
    n = 200_000
    torch.manual_seed(0)
    u = torch.rand(n, device="rbln", dtype=dtype).cpu().float()
    z = torch.randn(n, device="rbln", dtype=dtype).cpu().float()
    assert u.min() >= 0 and u.max() < 1 and u.max() > 0.99 and u.min() < 0.01  # [0, 1), halves too
    # moments within 6 standard errors (n = 200k): catches a wrong scale, offset or a stuck stream
    assert abs(u.mean() - 0.5) < 6 * (1 / 12 / n) ** 0.5 + 1e-3 and abs(u.var() - 1 / 12) < 2e-3
    assert abs(z.mean()) < 6 / n**0.5 + 1e-3 and abs(z.std() - 1) < 1e-2
    assert abs((z.abs() < 1).float().mean() - 0.6827) < 6e-3  # the normal's shape, not just its moments
    steps = 2 ** {torch.float16: 11, torch.bfloat16: 8}.get(dtype, 24)  # the values torch's rand can take
    assert len(u.unique()) > min(n // 4, steps // 2)  # not a short cycle
    for op in ("aten::uniform_", "aten::normal_"):
        assert _row(op) == {"device": 1, "cpu": 0, "reasons": {}}, registry.format_report()


def test_uniform_and_normal_parameters_seeding_and_offsets():
    torch.manual_seed(5)
    a = torch.empty(3000, device="rbln").uniform_(-2.0, 3.0).cpu()
    b = torch.empty(3000, device="rbln").normal_(10.0, 0.5).cpu()
    torch.manual_seed(5)
    assert torch.equal(torch.empty(3000, device="rbln").uniform_(-2.0, 3.0).cpu(), a)  # repeats
    assert not torch.equal(torch.empty(3000, device="rbln").uniform_(-2.0, 3.0).cpu(), a)  # next draw
    assert a.min() >= -2 and a.max() < 3 and abs(a.mean() - 0.5) < 0.2
    assert abs(b.mean() - 10) < 0.05 and abs(b.std() - 0.5) < 0.03
    same = torch.empty(0, device="rbln").normal_()  # empty: nothing drawn, nothing launched
    assert same.numel() == 0


def test_rand_declines_explicit_generators_and_invalid_parameters():
    generator = torch.Generator().manual_seed(1)
    got = torch.empty(4, device="rbln").normal_(generator=generator).cpu()
    assert torch.equal(got, torch.empty(4).normal_(generator=torch.Generator().manual_seed(1)))
    with pytest.raises(RuntimeError, match="std"):
        torch.empty(4, device="rbln").normal_(0.0, -1.0)
    with pytest.raises(RuntimeError, match="from"):
        torch.empty(4, device="rbln").uniform_(3.0, 2.0)
    strided = torch.zeros(4, 4, device="rbln").t()
    strided.uniform_()
    assert (strided.cpu() != 0).any()
    assert _row("aten::normal_")["reasons"] == {"explicit generator": 1, "negative or non-real std": 1}
    assert _row("aten::uniform_")["reasons"] == {"bounds": 1}  # the strided one: on a staging tensor


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # the specialisations above
def test_random_kernels_numba_and_interpreter_draw_the_same_numbers(dtype):
    """Differential: the compiled kernels and the numpy interpreter run the same Philox stream (its
    integer rounds exactly; Box-Muller's log/cos to float32 rounding)."""
    from torch_rbln.kernels import random as kernels

    n, seed = 3000, 1234
    for name, args, tol in (("uniform_kernel", (-1.0, 2.0), 0.0), ("normal_kernel", (0.5, 2.0), 1e-5)):
        outputs = []
        for backend in ("numba", "interpret"):
            out = torch.zeros(n, dtype=dtype)
            steps = float(2 ** (8 if dtype == torch.bfloat16 else 24))  # as registry/random.py passes
            extra = {"STEPS": steps} if name == "uniform_kernel" else {}
            getattr(kernels, name)[(3,)](out, n, *args, seed, BLOCK=kernels.BLOCK, backend=backend, **extra)
            outputs.append(out)
        torch.testing.assert_close(outputs[0], outputs[1], atol=tol, rtol=tol, msg=name)
        assert outputs[0].abs().sum() > 0
    x = torch.randn(n, dtype=dtype)
    results = []
    for backend in ("numba", "interpret"):
        out, mask = torch.empty(n, dtype=dtype), torch.empty(n, dtype=torch.bool)
        kernels.dropout_kernel[(3,)](x, out, mask, n, 0.3, 1 / 0.7, seed, BLOCK=kernels.BLOCK,
                                     backend=backend)
        results.append((out, mask))
    assert torch.equal(results[0][1], results[1][1]) and torch.equal(results[0][0], results[1][0])


def test_draws_depend_on_the_seed_and_index_only_not_on_the_block():
    """Small fills launch 16-lane blocks (`registry.random._block`), large ones 1024: the same seed
    gives the same values at the same indices either way."""
    dropout = lambda t: torch.nn.functional.dropout(t, 0.5)  # noqa: E731
    for fill in (lambda t: t.uniform_(), lambda t: t.normal_(), dropout):
        torch.manual_seed(11)
        small = fill(torch.ones(16, device="rbln")).cpu()
        torch.manual_seed(11)
        large = fill(torch.ones(3000, device="rbln")).cpu()
        assert torch.equal(small, large[:16])


# ---------------------------------------------------------------- multinomial


def test_multinomial_draws_in_proportion_to_the_weights_and_never_a_zero_one():
    torch.manual_seed(0)
    weights = torch.tensor([[1.0, 0.0, 6.0, 3.0], [0.0, 0.0, 2.0, 0.0]], device="rbln")  # unnormalised
    draws = torch.cat([torch.multinomial(weights, 1) for _ in range(1000)], 1).cpu()
    assert draws.dtype == torch.int64 and draws.shape == (2, 1000)
    assert (draws[1] == 2).all()
    shares = torch.bincount(draws[0], minlength=4).double() / 1000
    assert shares[1] == 0
    # 1000 draws: each share within ~4.5 standard deviations (sqrt(p(1-p)/1000) <= 0.016)
    expected = torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=torch.float64)
    torch.testing.assert_close(shares, expected, atol=0.07, rtol=0)
    report = registry.fallback_report()["aten::multinomial"]
    assert report["cpu"] == 0 and report["device"] >= 1000


def test_multinomial_without_replacement_repeats_under_manual_seed():
    weights = torch.tensor([0.5, 0.0, 1.0, 2.0, 0.25], device="rbln")
    torch.manual_seed(3)
    first = torch.multinomial(weights, 5).cpu()
    torch.manual_seed(3)
    again = torch.multinomial(weights, 5).cpu()
    assert torch.equal(first, again) and first.shape == (5,)
    assert sorted(first.tolist()) == [0, 1, 2, 3, 4]  # each category once
    assert first[4].item() == 1  # the zero weight only once the others ran out
    assert sorted(torch.multinomial(weights, 4).cpu().tolist()) == [0, 2, 3, 4]


def test_multinomial_declines_what_torch_rejects_or_draws_otherwise():
    registry.reset_fallback_report()
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.tensor([0.5, -0.1], device="rbln"), 1)  # torch's error, from the CPU
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.tensor([[0.0, 0.0]], device="rbln"), 1)
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.tensor([0.2, 0.8], device="rbln"), 3)  # 3 of 2 without replacement
    reasons = registry.fallback_report()["aten::multinomial"]["reasons"]
    assert reasons == {"a negative weight or a row summing to 0": 2, "num_samples out of range": 1}


def test_multinomial_with_replacement_draws_each_sample_independently():
    torch.manual_seed(1)
    weights = torch.tensor([[1.0, 0.0, 3.0], [0.0, 5.0, 0.0]], device="rbln")
    drawn = torch.multinomial(weights, 4000, replacement=True).cpu()
    assert drawn.shape == (2, 4000) and drawn.dtype == torch.int64
    assert (drawn[1] == 1).all()
    shares = torch.bincount(drawn[0], minlength=3).double() / 4000
    expected = torch.tensor([0.25, 0.0, 0.75], dtype=torch.float64)
    torch.testing.assert_close(shares, expected, atol=0.04, rtol=0)
    assert torch.multinomial(weights[0], 5, replacement=True).shape == (5,)
    report = registry.fallback_report()["aten::multinomial"]
    assert report == {"device": 2, "cpu": 0, "reasons": {}}
