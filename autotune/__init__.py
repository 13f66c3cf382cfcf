"""torch_rbln.autotune: Triton-compatible autotuning with a queryable SQLite store.

    from torch_rbln import dsl as triton
    from torch_rbln.autotune import Config, autotune

    @autotune(configs=[Config({"BLOCK_SIZE": 128}), Config({"BLOCK_SIZE": 1024}, num_warps=8)],
              key=["n_elements"], bucket="pow2")
    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr): ...

    add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, out, n)

The best config per (bucketed key, tensor dtypes, TP size, backend, device kind) is measured once and
kept in the database named by ``TORCH_RBLN_AUTOTUNE_DB`` (see `torch_rbln.autotune.store`); later
processes only look it up.  ``rbln-autotune`` (`torch_rbln.autotune.cli`) warms, inspects, exports and
merges the database.  `counters` counts benchmarks (``counters["benchmarks"]``), store lookups and hits.

Importing this package imports neither sqlite-utils, jinja2 nor numba: the store's read path uses the
standard `sqlite3` module and sqlite-utils is imported on the first write.
"""

from __future__ import annotations

from torch_rbln.dsl import heuristics

from .bench import Timing, counters, reset_counters
from .configs import Config
from .keys import bucket_policy, launch_tp_size
from .tuner import AutotuneError, Autotuner, autotune, base_jit_function, tuning_options


def get_store(path=None):
    """The shared `Store` of `path` (default: ``TORCH_RBLN_AUTOTUNE_DB``)."""
    from .store import get_store as _get

    return _get(path)


def clear_caches() -> None:
    """Close every shared store (in-process memos live on each `Autotuner`; see `Autotuner.reset`)."""
    from .store import reset_stores

    reset_stores()


__all__ = [
    "Autotuner",
    "AutotuneError",
    "Config",
    "Timing",
    "autotune",
    "base_jit_function",
    "bucket_policy",
    "clear_caches",
    "counters",
    "get_store",
    "heuristics",
    "launch_tp_size",
    "reset_counters",
    "tuning_options",
]
