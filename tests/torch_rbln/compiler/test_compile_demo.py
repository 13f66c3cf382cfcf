"""The GPT-2 demo model under torch.compile(backend="rbln"): forward and a training step match eager and
the CPU, with fused kernels doing the pointwise/normalisation work."""

from __future__ import annotations

import pytest
import torch

from torch_rbln import demo, registry

pytest.importorskip("transformers")
ATOL = 1e-4


def _models():
    make, _ = demo._build(vocab=128, width=64, layers=2, heads=4, positions=64)
    torch.manual_seed(0)
    cpu = make()
    device = make()
    device.load_state_dict(cpu.state_dict())
    device.to("rbln")
    device.tie_weights()
    return cpu, device


def test_demo_forward_and_training_step_match(fresh_compiler):  # issue 8 acceptance: runs in CI
    cpu, device = _models()
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    compiled = torch.compile(device, backend="rbln")
    with torch.no_grad():
        cpu_logits = cpu(ids).logits
        eager_logits = device(ids.to("rbln")).logits.cpu()
        compiled_logits = compiled(ids.to("rbln")).logits.cpu()
    torch.testing.assert_close(compiled_logits, cpu_logits, atol=ATOL, rtol=ATOL)
    torch.testing.assert_close(compiled_logits, eager_logits, atol=ATOL, rtol=ATOL)
    inference = fresh_compiler.stats()
    # embeddings add + layer norm, then per layer: GELU, and twice residual add + the next layer norm
    assert inference["fused_launches"] >= 7

    cpu_logits, cpu_loss = demo._step(cpu, ids, lr=0.1)
    registry.reset_fallback_report()
    logits, loss = demo._step(compiled, ids.to("rbln"), lr=0.1)
    torch.testing.assert_close(logits.cpu(), cpu_logits, atol=ATOL, rtol=ATOL)
    torch.testing.assert_close(loss.cpu(), cpu_loss, atol=ATOL, rtol=ATOL)
    cpu_state = cpu.state_dict()
    for name, value in device.state_dict().items():
        if value.is_floating_point():
            torch.testing.assert_close(value.cpu(), cpu_state[name], atol=ATOL, rtol=ATOL, msg=name)
    stats = fresh_compiler.stats()
    assert stats["graphs_compiled"] >= 3  # inference, training forward, backward
    assert stats["fused_launches"] >= inference["fused_launches"] + 14  # training forward and backward
    assert stats["eager_graphs"] == 0 and stats["compile_errors"] == 0
    report = registry.fallback_report()
    assert sum(r["device"] for r in report.values()) > 0  # matmuls etc. ran on registry kernels
