"""torch.compile(backend="rbln") with collectives in the graph: funcol and a DTensor TP model."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from distutil import spawn
from torch import nn

import torch_rbln


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _check_compiled(rank: int, world: int) -> None:
    from torch.distributed import _functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    device = torch.device("rbln", rank)

    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(funcol.all_reduce(x * 2, "sum", dist.group.WORLD)) + 1

    before = torch_rbln.registry.device_counts().get("c10d::allreduce_", 0)
    out = torch.compile(step, backend="rbln", fullgraph=True)(torch.full((8,), rank + 1.0, device=device))
    assert out.device == device
    assert torch.equal(out.cpu(), torch.full((8,), 2.0 * world * (world + 1) / 2 + 1))
    assert torch_rbln.registry.device_counts()["c10d::allreduce_"] == before + 1
    assert torch_rbln.compiler.stats()["eager_graphs"] == 0

    mesh = init_device_mesh("rbln", (world,))
    model = parallelize_module(_mlp().to(device), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = torch.compile(model, backend="rbln")(x.to(device))
        want = _mlp()(x)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_compiled_graphs_with_collectives():
    spawn(_check_compiled, 2, env=True)
