"""A training step with torch's optimizers on rbln runs every op on device kernels and matches the CPU:
the forward, cross-entropy with label smoothing, the backward, `clip_grad_norm_` (linalg_vector_norm) and
each optimizer's update (Adam/AdamW: lerp_, addcmul_, addcdiv_; amsgrad: clamp_min_ with a tensor;
RMSprop, Adagrad: addcmul_, addcdiv_), with the per-tensor and the `foreach` implementations."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry

OPTIMIZERS = {
    "Adam": lambda p, foreach: torch.optim.Adam(p, lr=1e-2, foreach=foreach),
    "AdamW-amsgrad": lambda p, foreach: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, foreach=foreach),
    "SGD-nesterov": lambda p, foreach: torch.optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True,
                                                       weight_decay=0.01, foreach=foreach),
    "RMSprop": lambda p, foreach: torch.optim.RMSprop(p, lr=1e-3, foreach=foreach),
    "Adagrad": lambda p, foreach: torch.optim.Adagrad(p, lr=1e-2, foreach=foreach),
}


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 32),
                               torch.nn.GELU(), torch.nn.Linear(32, 50))


@pytest.mark.parametrize("foreach", [False, True], ids=["per_tensor", "foreach"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_clipped_training_step_runs_on_device_and_matches_the_cpu(name, foreach):
    torch.manual_seed(0)
    cpu = _model()
    device = _model()
    device.load_state_dict(cpu.state_dict())
    device = device.to("rbln")
    optimizers = [OPTIMIZERS[name](cpu.parameters(), foreach), OPTIMIZERS[name](device.parameters(), foreach)]
    generator = torch.Generator().manual_seed(1)
    registry.reset_fallback_report()
    for _ in range(3):
        x = torch.randint(0, 50, (4, 6), generator=generator)
        y = torch.randint(0, 50, (4, 6), generator=generator)
        for model, optimizer, where in ((cpu, optimizers[0], "cpu"), (device, optimizers[1], "rbln")):
            optimizer.zero_grad()
            logits = model(x.to(where))
            F.cross_entropy(logits.reshape(-1, 50), y.to(where).reshape(-1), label_smoothing=0.1).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
    for expected, got in zip(cpu.parameters(), device.parameters(), strict=True):
        torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
    on_cpu = {op: row["reasons"] for op, row in registry.fallback_report().items() if row["cpu"]}
    assert not on_cpu
