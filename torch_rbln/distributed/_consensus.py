"""Tuning that ranks agree on: one autotune decision per key for the whole job.

Ranks that tune the same kernel key independently can pick different configs (timings are noisy),
and different configs can round differently, so replicas drift apart or a collective's operands
disagree. While a multi-rank default group exists, rank 0 decides each key (its store's decision, or
it tunes) and publishes the config id in the group's TCP store; the other ranks wait for it and use
it without tuning. Only rank 0 writes the decision to the SQLite store, so it is recorded once.

The autotuner never imports this module: `rbln-ccl` loads it when a group is created, and the tuner
looks it up in `sys.modules` on its slow path (a key not yet in its memo).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

_PREFIX = "rbln-autotune/"


def active() -> Callable | None:
    """`agree` while this process is one of several ranks of an initialized default group."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        return agree
    return None


def _store_key(ids: tuple, candidates: list) -> str:
    from torch_rbln.autotune.configs import configs_hash

    text = json.dumps([list(ids), configs_hash(candidates)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def agree(ids: tuple, candidates: list, decide: Callable[[], tuple[Any, bool]]) -> tuple[Any, bool]:
    """(config, tuned here) for the key `ids`: rank 0 runs `decide` and publishes its choice; the
    other ranks take rank 0's choice. RuntimeError when rank 0 chose a config this rank's candidate
    list lacks (the ranks' configs or pruning differ), or when rank 0 does not decide within the
    group's timeout."""
    from torch.distributed.distributed_c10d import _get_default_store

    store = dist.PrefixStore(_PREFIX, _get_default_store())
    key = _store_key(ids, candidates)
    if dist.get_rank() == 0:
        config, tuned = decide()
        store.set(key, config.id)
        return config, tuned
    try:
        store.wait([key])  # the store's timeout: init_process_group's `timeout=`
    except Exception as e:  # noqa: BLE001 - a store timeout or a dead rank 0: name the kernel key
        raise RuntimeError(f"autotune consensus: rank 0 published no config for {ids[0]} key {ids[2]} "
                           f"({type(e).__name__}: {e}); every rank must launch the same keys") from e
    chosen = store.get(key).decode()
    for config in candidates:
        if config.id == chosen:
            return config, False
    raise RuntimeError(f"autotune consensus: rank 0 chose config {chosen} for {ids[0]} key {ids[2]}, "
                       "which is not among this rank's candidates (the ranks' configs or pruning differ)")
