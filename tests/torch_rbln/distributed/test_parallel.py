"""DDP, FSDP2 and DTensor tensor parallelism on rbln with rbln-ccl, against single-process training.

One spawned 2-rank group runs all three (spawning and first compiles are the slow part). Each rank
trains on its half of a batch; the reference trains the same model on the whole batch in-process.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from distutil import spawn
from torch import nn

TOL = {"rtol": 1e-5, "atol": 1e-6}


class Block(nn.Module):
    """A small transformer-style block: attention-free, but norm, MLP and a residual."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block(), nn.Linear(8, 4))


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)


def _train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 3) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def _check_parallel(rank: int, world: int) -> None:
    device = torch.device("rbln", rank)
    x, y = _batch()
    rows = slice(rank * 8 // world, (rank + 1) * 8 // world)
    reference = _model()
    _train(reference, x, y)
    expected = [p.detach() for p in reference.parameters()]

    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(_model().to(device))
    _train(ddp, x[rows].to(device), y[rows].to(device))
    for got, want in zip(ddp.module.parameters(), expected, strict=True):
        assert got.device == device
        torch.testing.assert_close(got.detach().cpu(), want, **TOL, msg="DDP differs from one process")

    from torch.distributed.fsdp import fully_shard

    sharded = _model().to(device)
    for block in sharded[:2]:
        fully_shard(block)
    fully_shard(sharded)
    _train(sharded, x[rows].to(device), y[rows].to(device))
    for got, want in zip(sharded.parameters(), expected, strict=True):
        full = got.full_tensor()
        assert full.device == device
        torch.testing.assert_close(full.detach().cpu(), want, **TOL, msg="FSDP2 differs from one process")

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("rbln", (world,))
    plan = {"0.up": ColwiseParallel(), "0.down": RowwiseParallel(), "1.up": ColwiseParallel(),
            "1.down": RowwiseParallel()}
    tp = parallelize_module(_model().to(device), mesh, plan)
    assert tp[0].up.weight.to_local().shape == (16 // world, 8)
    with torch.no_grad():
        out = tp(x.to(device))
        want = _model()(x)
    assert out.device == device
    torch.testing.assert_close(out.cpu(), want, **TOL, msg="TP forward differs from the unsharded model")

    from torch.distributed import _functional_collectives as funcol

    t = torch.full((4,), float(rank + 1), device=device)
    summed = funcol.wait_tensor(funcol.all_reduce(t, "sum", dist.group.WORLD))
    gathered = funcol.wait_tensor(funcol.all_gather_tensor(t, 0, dist.group.WORLD))
    assert summed.device == device and torch.equal(summed.cpu(), torch.full((4,), world * (world + 1) / 2))
    assert torch.equal(gathered.cpu(), torch.arange(1, world + 1).float().repeat_interleave(4))


@pytest.mark.slow
def test_ddp_fsdp2_tp_match_one_process():
    spawn(_check_parallel, 2, env=True)
