"""Running a function on N ranks (mp.spawn, gloo over localhost) and comparing rbln results with CPU."""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Callable

import torch
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, backend: str | None, body: Callable, env: bool,
           timeout: float) -> None:
    import torch.distributed as dist

    import torch_rbln  # noqa: F401  (spawned children import torch afresh)

    limit = {"timeout": datetime.timedelta(seconds=timeout)}
    if env:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
        kwargs = {} if backend is None else {"backend": backend}
        dist.init_process_group(**kwargs, **limit)
    else:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                **limit)
    try:
        body(rank, world)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn(body: Callable[[int, int], None], world: int, backend: str | None = "rbln-ccl", *,
          env: bool = False, timeout: float = 300.0) -> None:
    """Run `body(rank, world)` in `world` processes of one group; a failure in any rank raises here.
    `env`: rendezvous through env:// with torchrun's variables (LOCAL_RANK too), else tcp://.
    `timeout`: the group's collective timeout in seconds."""
    mp.spawn(_entry, args=(world, free_port(), backend, body, env, timeout), nprocs=world, join=True)


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes on the CPU, for bit-for-bit comparison (NaNs and signed zeros included)."""
    tensor = tensor.detach().cpu().contiguous()
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    return tensor.reshape(-1).view(torch.uint8) if tensor.numel() else tensor.reshape(-1).to(torch.uint8)


def assert_same(rbln: torch.Tensor | list, cpu: torch.Tensor | list, what: str) -> None:
    if isinstance(cpu, (list, tuple)):
        assert len(rbln) == len(cpu), what
        for i, (a, b) in enumerate(zip(rbln, cpu, strict=True)):
            assert_same(a, b, f"{what}[{i}]")
        return
    assert rbln.device.type == "rbln", f"{what}: result left rbln ({rbln.device})"
    assert rbln.dtype == cpu.dtype and rbln.shape == cpu.shape, \
        f"{what}: {rbln.dtype}{tuple(rbln.shape)} vs {cpu.dtype}{tuple(cpu.shape)}"
    assert torch.equal(bits(rbln), bits(cpu)), f"{what}: rbln differs from CPU\n{rbln.cpu()}\n{cpu}"
