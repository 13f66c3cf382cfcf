"""Inference calls of scaled_dot_product_attention whose structure was accepted once skip the fused op's
dispatch and structural checks (registry/attention.py `_inference`), with the same results and counts,
and leave every call that needs more to the general path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch_rbln.registry import attention as A

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _operands(mask: str | None = None):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    masks = {None: None, "bool": torch.rand(5, 5) > 0.3, "float": torch.randn(1, 1, 5, 5)}
    cpu = (q, k, v, masks[mask])
    return cpu, tuple(t.to("rbln") if t is not None else None for t in cpu)


def _forward_count() -> int:
    return registry.device_counts().get(A.FORWARD, 0)


@pytest.fixture
def structure_checks_forbidden(monkeypatch):
    def forbid() -> None:
        def forbidden(*args, **kwargs):
            raise AssertionError("structural checks reached")

        monkeypatch.setattr(A, "unsupported", forbidden)

    return forbid


@pytest.mark.parametrize("mask", [None, "bool", "float"])
def test_repeated_inference_calls_skip_the_checks_with_the_same_results(mask, structure_checks_forbidden):
    cpu, dev = _operands(mask)
    q, k, v, m = dev
    first = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    structure_checks_forbidden()
    before = _forward_count()
    again = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    assert _forward_count() == before + 1
    torch.testing.assert_close(again.cpu(), first.cpu(), atol=0, rtol=0)
    expected = F.scaled_dot_product_attention(*cpu[:3], attn_mask=cpu[3])
    torch.testing.assert_close(again.cpu(), expected, atol=1e-5, rtol=1e-5)


def test_causal_and_scale_are_part_of_the_plan(structure_checks_forbidden):
    cpu, (q, k, v, _) = _operands()
    F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.25)
    structure_checks_forbidden()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.25)
    expected = F.scaled_dot_product_attention(*cpu[:3], is_causal=True, scale=0.25)
    torch.testing.assert_close(out.cpu(), expected, atol=1e-5, rtol=1e-5)
    with pytest.raises(AssertionError, match="structural checks reached"):
        F.scaled_dot_product_attention(q, k, v, is_causal=False, scale=0.25)  # another structure


def test_a_nan_query_still_takes_the_logged_cpu_fallback():
    cpu, (q, k, v, _) = _operands()
    F.scaled_dot_product_attention(q, k, v)
    bad = cpu[0].clone()
    bad[0, 0, 0, 0] = float("nan")
    registry.reset_fallback_report()
    out = F.scaled_dot_product_attention(bad.to("rbln"), k, v)
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(bad, *cpu[1:3]), equal_nan=True)
    assert registry.fallback_report()[A.SDPA]["reasons"] == {"nan_inf": 1}


def test_calls_that_need_a_gradient_keep_the_autograd_node():
    _, (q, k, v, _) = _operands()
    F.scaled_dot_product_attention(q, k, v)
    leaf = q.detach().requires_grad_()
    out = F.scaled_dot_product_attention(leaf, k, v)
    assert out.grad_fn is not None
    out.sum().backward()
    assert leaf.grad is not None and leaf.grad.shape == q.shape
    with torch.no_grad():
        assert F.scaled_dot_product_attention(leaf, k, v).grad_fn is None


def test_repeated_calls_run_the_kept_launch_of_the_tuned_tile(monkeypatch):
    """From the third call of a structure on (accepted, then tuned), the plan holds the kept launch of
    the tile the autotuner chose and runs it directly, with the general launch's result."""
    _, (q, k, v, _) = _operands()
    first = F.scaled_dot_product_attention(q, k, v, scale=0.5)  # accepted, tuned
    F.scaled_dot_product_attention(q, k, v, scale=0.5)  # the plan takes the tile; the launch is kept
    F.scaled_dot_product_attention(q, k, v, scale=0.5)  # the plan takes the kept launch
    plans = [plan for plan in A._inference_plans.values() if plan.run is not None and plan.scale == 0.5]
    assert plans and all(plan.grid[0] > 0 for plan in plans)

    def general_launch(*args, **kwargs):
        raise AssertionError("general launch reached")

    monkeypatch.setattr(A, "_forward_launch", general_launch)
    again = F.scaled_dot_product_attention(q, k, v, scale=0.5)
    torch.testing.assert_close(again.cpu(), first.cpu(), atol=0, rtol=0)


def _tiny(seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    cpu = tuple(torch.randn(1, 1, 2, 2, generator=generator) for _ in range(3))
    return cpu, tuple(t.to("rbln") for t in cpu)


def test_inference_calls_write_no_fresh_logsumexp_and_a_later_backward_is_still_right(monkeypatch):
    """Kept-launch inference calls write the logsumexp nobody reads into the plan's per-device scratch
    (no allocation per call); a call that needs a gradient still gets its own logsumexp, so inference
    calls between its forward and its backward cannot disturb the gradients."""
    cpu, (q, k, v) = _tiny()
    for _ in range(3):  # accepted and tuned, the tile taken, the kept launch taken
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    (plan,) = [p for p in A._inference_plans.values() if p.run is not None and p.lse_shape == (1, 1, 2)
               and p.tail[-2] == 1]
    scratch = plan.scratch[q.get_device()]
    allocated: list[tuple] = []
    real_empty = A._memory.empty

    def counting_empty(shape, dtype, index):
        allocated.append((tuple(shape), dtype))
        return real_empty(shape, dtype, index)

    monkeypatch.setattr(A._memory, "empty", counting_empty)
    before = _forward_count()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert _forward_count() == before + 1
    assert allocated == [((1, 1, 2, 2), torch.float32)]  # the output only
    assert plan.scratch[q.get_device()] is scratch
    expected = F.scaled_dot_product_attention(*cpu, is_causal=True)
    torch.testing.assert_close(out.cpu(), expected, atol=1e-6, rtol=1e-6)

    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    cpu_leaves = [t.clone().requires_grad_() for t in cpu]
    trained = F.scaled_dot_product_attention(*leaves, is_causal=True)
    reference = F.scaled_dot_product_attention(*cpu_leaves, is_causal=True)
    other = (q * 3.0, k * -2.0, v)
    for _ in range(2):  # inference calls of the same structure in between: they write the scratch
        F.scaled_dot_product_attention(*other, is_causal=True)
    grad = torch.tensor([[[[1.0, -2.0], [0.5, 3.0]]]])
    trained.backward(grad.to("rbln"))
    reference.backward(grad)
    for ours, theirs in zip(leaves, cpu_leaves, strict=True):
        torch.testing.assert_close(ours.grad.cpu(), theirs.grad, atol=2e-5, rtol=2e-5)


def test_kept_inference_launch_scans_every_operand_for_nan():
    """The one compiled scan of q, k and v in the kept inference launch finds a NaN in any of them."""
    cpu, dev = _tiny(2)
    for _ in range(3):
        F.scaled_dot_product_attention(*dev, scale=0.3)
    for position in range(3):
        bad = list(cpu)
        bad[position] = bad[position].clone()
        bad[position][0, 0, 1, 1] = float("nan")
        registry.reset_fallback_report()
        out = F.scaled_dot_product_attention(*(t.to("rbln") for t in bad), scale=0.3)
        expected = F.scaled_dot_product_attention(*bad, scale=0.3)
        torch.testing.assert_close(out.cpu(), expected, equal_nan=True)
        assert registry.fallback_report()[A.SDPA]["reasons"] == {"nan_inf": 1}


def test_repeated_backward_calls_keep_the_tuned_tiles_with_the_same_gradients(monkeypatch):
    """The second backward of a shape runs the tiles the tuner chose for the first (`_launch.tuned`), not
    the tuner: same gradients bit for bit, close to the CPU's."""
    cpu, device = _operands(None)
    grads = []
    for attempt in range(2):
        if attempt:
            def tuner_called(*args, **kwargs):
                raise AssertionError("the autotuner ran again for a kept shape")

            from torch_rbln.kernels import attention as K

            for kernel in (K.attention_backward_dq_kernel, K.attention_backward_dkdv_kernel):
                monkeypatch.setattr(kernel, "run", tuner_called)  # what kernel[grid](...) calls
        leaves = [t.detach().requires_grad_() for t in device[:3]]
        F.scaled_dot_product_attention(*leaves, attn_mask=device[3]).square().sum().backward()
        grads.append([t.grad.cpu() for t in leaves])
    for first, second in zip(*grads, strict=True):
        assert torch.equal(first, second)
    reference = [t.detach().requires_grad_() for t in cpu[:3]]
    F.scaled_dot_product_attention(*reference, attn_mask=cpu[3]).square().sum().backward()
    for got, expected in zip(grads[1], reference, strict=True):
        torch.testing.assert_close(got, expected.grad, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("training", [False, True])
def test_repeated_fused_op_calls_take_the_plan(training, monkeypatch):
    """The fused op (what autograd's SDPA records) keeps a plan per structure: the second call skips
    `fused_attention_forward` and gives the same output and logsumexp bit for bit, with or without
    autograd (both take the same tiles, which the backward recomputes the scores with)."""
    _, device = _operands("bool")
    fused = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
    operands = [t.detach().requires_grad_(training) for t in device[:3]]
    first = fused(*operands, device[3])
    monkeypatch.setattr(A, "fused_attention_forward", lambda *a, **k: pytest.fail("general path ran"))
    before = _forward_count()
    second = fused(*operands, device[3])
    assert _forward_count() == before + 1
    assert torch.equal(first[0].detach().cpu(), second[0].detach().cpu())
    assert torch.equal(first[1].cpu(), second[1].cpu())
    assert second[1].data_ptr() != first[1].data_ptr()  # a fresh logsumexp per call, never the scratch
    assert (second[4], second[5]) == (5, 5) and second[2].numel() == 0
