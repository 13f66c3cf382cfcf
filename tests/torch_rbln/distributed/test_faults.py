"""A rank that dies: the others fail with an error well within the timeout; destroy cleans up."""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist
from distutil import spawn

TIMEOUT_S = 10.0


def _one_rank_dies(rank: int, world: int) -> None:
    x = torch.ones(1024, device="rbln")
    dist.all_reduce(x)  # everyone is connected
    if rank == world - 1:
        os._exit(0)  # dies without a goodbye
    start = time.monotonic()
    with pytest.raises(RuntimeError) as failure:
        for _ in range(3):  # the first call may still be buffered by the dead peer's socket
            dist.all_reduce(x)
    elapsed = time.monotonic() - start
    assert elapsed < TIMEOUT_S + 5, f"took {elapsed:.1f} s"
    message = str(failure.value).lower()
    assert any(word in message for word in ("closed", "timed out", "timeout", "connection", "peer")), message
    dist.destroy_process_group()
    assert not dist.is_initialized()
    # The process can start a new group afterwards (nothing of the old one is left).
    dist.init_process_group("rbln-ccl", store=dist.HashStore(), rank=0, world_size=1)
    y = torch.full((3,), 2.0, device="rbln")
    dist.all_reduce(y)
    assert y.cpu().tolist() == [2.0, 2.0, 2.0]
    dist.destroy_process_group()


@pytest.mark.slow
def test_dead_rank_fails_the_others_within_the_timeout():
    started = time.monotonic()
    spawn(_one_rank_dies, 3, timeout=TIMEOUT_S)
    assert time.monotonic() - started < 120


HANG_TIMEOUT_S = 4.0


def _one_rank_hangs(rank: int, world: int) -> None:
    x = torch.ones(16, device="rbln")
    dist.all_reduce(x)
    if rank == 1:
        time.sleep(HANG_TIMEOUT_S + 8)  # alive, but never joins the next collective
        os._exit(0)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="(?i)timed out|timeout"):
        dist.all_reduce(x)
    elapsed = time.monotonic() - start
    assert HANG_TIMEOUT_S - 1 < elapsed < HANG_TIMEOUT_S + 5, f"failed after {elapsed:.1f} s"


@pytest.mark.slow
def test_hung_rank_fails_the_others_at_the_timeout():
    spawn(_one_rank_hangs, 2, timeout=HANG_TIMEOUT_S)
