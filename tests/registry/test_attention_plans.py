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
    plans = [plan for plan in A._inference_plans.values() if plan.launcher is not None and plan.scale == 0.5]
    assert plans and all(plan.grid[0] > 0 for plan in plans)

    def general_launch(*args, **kwargs):
        raise AssertionError("general launch reached")

    monkeypatch.setattr(A, "_forward_launch", general_launch)
    again = F.scaled_dot_product_attention(q, k, v, scale=0.5)
    torch.testing.assert_close(again.cpu(), first.cpu(), atol=0, rtol=0)


def _kept_forward_plans(scale: float) -> list:
    _, (q, k, v, _) = _operands()
    first = F.scaled_dot_product_attention(q, k, v, scale=scale)
    for _ in range(2):  # accepted and tuned, then the plan keeps the launch
        F.scaled_dot_product_attention(q, k, v, scale=scale)
    plans = [plan for plan in A._inference_plans.values()
             if plan.launcher is not None and plan.scale == scale]
    assert plans and all(plan.by_address is not None for plan in plans)
    return plans, (q, k, v), first


def test_kept_forward_launches_by_address(monkeypatch):
    """The kept launch takes the operands' addresses and the plan's element counts: the launch by
    tensors (which reads each tensor's address and size) is not used."""
    plans, (q, k, v), first = _kept_forward_plans(0.25)
    for plan in plans:
        monkeypatch.setattr(plan, "launcher", lambda *a: (_ for _ in ()).throw(AssertionError("by tensors")))
    monkeypatch.setattr(A, "_forward_launch", lambda *a, **k: pytest.fail("general launch reached"))
    again = F.scaled_dot_product_attention(q, k, v, scale=0.25)
    torch.testing.assert_close(again.cpu(), first.cpu(), atol=0, rtol=0)


def test_a_fault_in_the_kept_forward_launch_by_address_takes_the_general_launch(monkeypatch):
    """A kernel that reports a fault makes the launch by address return False: the general launch then
    runs the call (and would raise the fault with its report)."""
    plans, (q, k, v), first = _kept_forward_plans(0.375)
    faulted, general = [], []
    for plan in plans:
        monkeypatch.setattr(plan, "by_address", lambda *a: faulted.append(a) or False)
    launch = A._forward_launch
    monkeypatch.setattr(A, "_forward_launch", lambda *a, **k: general.append(a) or launch(*a, **k))
    again = F.scaled_dot_product_attention(q, k, v, scale=0.375)
    assert faulted and len(general) == 1
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
    (plan,) = [p for p in A._inference_plans.values() if p.launcher is not None and p.lse_shape == (1, 1, 2)
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


def _backward_count() -> int:
    return registry.device_counts().get(A.BACKWARD, 0)


def _train(q, k, v, mask=None, grad=None, **kwargs) -> list[torch.Tensor]:
    """Gradients of q, k, v (CPU copies) of one SDPA training step on these operands."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, attn_mask=mask, **kwargs)
    out.backward(torch.ones_like(out) if grad is None else grad.to(out.device))
    return [t.grad.cpu() for t in leaves]


def _transposed(t: torch.Tensor) -> torch.Tensor:
    """The (B, H, L, D) view of a (B, L, H, D) tensor, as models hand SDPA its operands."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def _randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


BACKWARD_PLANS = {
    # name: (q/k/v on the CPU, mask, sdpa kwargs); tiles the kernel tests compile anyway
    "one_tile": (_operands()[0][:3], None, {}),
    "one_tile_bool_mask": (_operands("bool")[0][:3], _operands("bool")[0][3], {}),
    "one_tile_float_mask_scale": (_operands("float")[0][:3], _operands("float")[0][3], {"scale": 0.3}),
    "one_tile_strided_gqa_causal": (tuple(_transposed(_randn(i, 1, h, m, 4)) for i, h, m in
                                          ((1, 4, 6), (2, 2, 3), (3, 2, 3))),
                                    None, {"is_causal": True, "enable_gqa": True}),
    "two_launches_causal": (tuple(_randn(i, 1, 2, 19, 16) for i in range(3)), None, {"is_causal": True}),
}


@pytest.mark.parametrize("name", sorted(BACKWARD_PLANS))
def test_repeated_backward_calls_take_the_plan_with_the_same_gradients(name, monkeypatch):
    """From the third backward of a structure on (the first tunes, the second keeps the launches), its
    plan runs the kept launches without `fused_attention_backward` or the tuner: the same gradients bit
    for bit, close to the CPU's, with
    strided operands (the gradients keep their layouts), masks, causal and grouped-query heads; one
    launch when the problem fits one product tile, dQ and dK/dV otherwise."""
    cpu, mask, kwargs = BACKWARD_PLANS[name]
    # only this test's plans: another test in this process may have left one of the same shape
    monkeypatch.setattr(A, "_backward_plans", type(A._backward_plans)(1024))
    dev = [t.to("rbln") for t in cpu]
    dev_mask = None if mask is None else mask.to("rbln")
    grad = torch.randn(cpu[0].shape, generator=torch.Generator().manual_seed(5))
    first = _train(*dev, dev_mask, grad, **kwargs)
    _train(*dev, dev_mask, grad, **kwargs)
    monkeypatch.setattr(A, "fused_attention_backward", lambda *a, **k: pytest.fail("general path ran"))
    from torch_rbln.kernels import attention as K

    for kernel in (K.attention_backward_tiny_kernel, K.attention_backward_dq_kernel,
                   K.attention_backward_dkdv_kernel):
        monkeypatch.setattr(kernel, "run", lambda *a, **k: pytest.fail("the autotuner ran"))
    for kept in A._backward_plans.values():  # the tiny kernel launches by address, never by tensors
        if kept.second is None and kept.first.kept() is not None:
            assert kept.first.by_address is not None
            monkeypatch.setattr(kept.first, "launcher", lambda *a: pytest.fail("launched by tensors"))
    before = _backward_count()
    again = [t.detach().clone().requires_grad_() for t in dev]
    out = F.scaled_dot_product_attention(*again, attn_mask=dev_mask, **kwargs)
    out.backward(grad.to("rbln"))
    assert _backward_count() == before + 1
    for ours, theirs, operand in zip(again, first, dev, strict=True):
        assert ours.grad.stride() == operand.stride()
        assert torch.equal(ours.grad.cpu(), theirs)
    expected = _train(*cpu, mask, grad, **kwargs)
    for ours, theirs in zip(first, expected, strict=True):
        torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=2e-5)
    (plan,) = [p for key, p in A._backward_plans.items() if key[3] == dev[0].shape and
               key[4] == dev[0].stride() and key[19] == kwargs.get("scale")
               and (len(key) > 20) == (mask is not None)]
    assert (plan.second is None) == name.startswith("one_tile")


def test_a_fault_in_the_tiny_backward_launch_by_address_takes_the_general_path(monkeypatch):
    """A kernel that reports a fault makes the launch by address return False: the general path
    (`fused_attention_backward`) then runs the call, which raises such a fault with its report."""
    cpu, mask, kwargs = BACKWARD_PLANS["one_tile"]
    dev = [t.to("rbln") for t in cpu]
    grad = torch.randn(cpu[0].shape, generator=torch.Generator().manual_seed(7))
    first = _train(*dev, None, grad, **kwargs)
    _train(*dev, None, grad, **kwargs)
    faulted, general = [], []
    for kept in A._backward_plans.values():
        if kept.second is None and kept.first.kept() is not None:
            monkeypatch.setattr(kept.first, "by_address", lambda *a: faulted.append(a) or False)
    backward = A.fused_attention_backward
    monkeypatch.setattr(A, "fused_attention_backward", lambda *a, **k: general.append(a) or backward(*a, **k))
    again = _train(*dev, None, grad, **kwargs)
    assert faulted and len(general) == 1
    for ours, theirs in zip(again, first, strict=True):
        assert torch.equal(ours, theirs)


def test_backward_plans_leave_tensor_parallel_grids_to_the_general_path(monkeypatch):
    """A kept backward launch of several programs runs on one NPU only: on a tensor-parallel device the
    general path (which splits the grid over the group) takes the call."""
    _, (q, k, v, _) = _operands()  # 2 x 3 heads: six programs
    expected = _train(q, k, v)
    _train(q, k, v)  # the plan's kept launch exists
    general = []
    real = A.fused_attention_backward
    monkeypatch.setattr(A, "fused_attention_backward", lambda *a, **k: general.append(1) or real(*a, **k))
    monkeypatch.setattr(A, "device_tp", lambda index: 2)
    grads = _train(q, k, v)
    assert general == [1]
    for ours, theirs in zip(grads, expected, strict=True):
        assert torch.equal(ours, theirs)


def test_fused_forward_shares_one_unused_output_until_it_is_changed():
    """The fused forward's five unused outputs are one zero-size tensor per device, shared by its calls;
    once someone changes it in place, later calls get a fresh one."""
    _, (q, k, v) = _tiny(3)
    fused = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
    first, second = fused(q, k, v), fused(q, k, v)
    assert first[2] is second[2] is second[3] is second[6] is second[7] is second[8]
    assert second[2].shape == (0,) and second[2].device == q.device
    second[2].add_(1.0)  # nothing to write, but the version moves
    third = fused(q, k, v)
    assert third[2] is not second[2] and third[2]._version == 0 and third[2].numel() == 0
    assert torch.equal(third[0].cpu(), first[0].cpu())


def test_fused_op_plan_runs_nan_operands_on_the_device_as_its_general_path_does(monkeypatch):
    """The fused op itself never declines NaN/Inf operands (SDPA does, before calling it): its plan
    skips the scan and gives what the general path gives."""
    cpu, _ = _tiny(4)
    bad = cpu[0].clone()
    bad[0, 0, 1, 0] = float("nan")
    q, k, v = bad.to("rbln"), cpu[1].to("rbln"), cpu[2].to("rbln")
    fused = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
    first = fused(q, k, v, scale=0.7)
    monkeypatch.setattr(A, "fused_attention_forward", lambda *a, **k: pytest.fail("general path ran"))
    registry.reset_fallback_report()
    second = fused(q, k, v, scale=0.7)
    torch.testing.assert_close(second[0].cpu(), first[0].cpu(), atol=0, rtol=0, equal_nan=True)
    assert second[0].cpu()[0, 0, 1].isnan().all() and not second[0].cpu()[0, 0, 0].isnan().any()
    assert A.SDPA not in registry.fallback_report()


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


# (query heads, key/value heads, query rows, mask kind, is_causal, dtype) of decoding steps
DECODE_CASES = {
    "bool_padding_mask": (4, 4, 1, "bool", False, torch.float32),
    "float_mask_two_rows": (4, 4, 2, "float", False, torch.float32),
    "no_mask_gqa": (4, 2, 1, None, False, torch.float32),
    "causal_three_rows": (4, 4, 3, None, True, torch.float32),
    "half_bool_mask": (4, 4, 1, "bool", False, torch.float16),
}


def _decode_step(case: str, length: int) -> tuple:
    heads, kv_heads, rows, mask, causal, dtype = DECODE_CASES[case]
    generator = torch.Generator().manual_seed(length)
    q = torch.randn(2, heads, rows, 16, generator=generator).to(dtype)
    k, v = (torch.randn(2, kv_heads, length, 16, generator=generator).to(dtype) for _ in range(2))
    masks = {None: None, "bool": torch.rand(2, 1, 1, length, generator=generator) > 0.2,
             "float": torch.randn(2, 1, rows, length, generator=generator).to(dtype)}
    return (q, k, v, masks[mask]), {"is_causal": causal, "enable_gqa": heads != kv_heads}


@pytest.mark.parametrize("case", list(DECODE_CASES))
def test_a_growing_cache_derives_each_lengths_decode_plan_with_the_built_plans_bits(case, monkeypatch):
    """A decoding loop meets a new key/value length every step: its plan derives from the plan of an
    earlier length (`_derived_decode_plan`: no structural checks, no `_new_plan`), and gives the bits
    of the plan the general path builds for that length, and the CPU's values."""
    lengths = [1, 2, 3, 17, 64, 65, 130]
    built = []
    for length in lengths:  # the reference: each length's plan built by the general path
        registry.forget_plans()
        A._decode_templates.clear()
        tensors, options = _decode_step(case, length)
        q, k, v, mask = (t.to("rbln") if t is not None else None for t in tensors)
        built.append(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **options))
    registry.forget_plans()
    A._decode_templates.clear()
    new_plans = []
    real = A._new_plan
    monkeypatch.setattr(A, "_new_plan", lambda *a, **k: (new_plans.append(1), real(*a, **k))[1])
    for length, reference in zip(lengths, built, strict=True):
        tensors, options = _decode_step(case, length)
        q, k, v, mask = (t.to("rbln") if t is not None else None for t in tensors)
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **options)
        assert torch.equal(got.cpu(), reference.cpu()), length
        expected = F.scaled_dot_product_attention(*tensors[:3], attn_mask=tensors[3], **options)
        tolerance = 2e-3 if tensors[0].dtype == torch.float16 else 1e-5
        torch.testing.assert_close(got.cpu(), expected, atol=tolerance, rtol=tolerance)
    assert len(new_plans) == 1  # the first length's; every later one derived


def test_a_derived_decode_plan_leaves_nan_and_other_layouts_to_the_general_path():
    registry.forget_plans()
    A._decode_templates.clear()
    tensors, options = _decode_step("bool_padding_mask", 5)
    device = [t.to("rbln") for t in tensors]
    F.scaled_dot_product_attention(*device[:3], attn_mask=device[3], **options)  # the template
    tensors, options = _decode_step("bool_padding_mask", 6)
    k = tensors[1].clone()
    k[1, 2, 3, 4] = float("nan")
    got = F.scaled_dot_product_attention(tensors[0].to("rbln"), k.to("rbln"), tensors[2].to("rbln"),
                                         attn_mask=tensors[3].to("rbln"))
    expected = F.scaled_dot_product_attention(tensors[0], k, tensors[2], attn_mask=tensors[3])
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True)
    # a static cache read through a slice: not contiguous, no template (each length plans itself)
    cache = torch.randn(2, 4, 32, 16)
    q = tensors[0]
    for length in (6, 7):
        got = F.scaled_dot_product_attention(q.to("rbln"), cache.to("rbln")[:, :, :length],
                                             cache.to("rbln")[:, :, :length])
        expected = F.scaled_dot_product_attention(q, cache[:, :, :length], cache[:, :, :length])
        torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-5)
    assert len(A._decode_templates) == 1  # the contiguous structure's only
