"""torch_rbln.compiler: the ``torch.compile(model, backend="rbln")`` backend.

Registered through the ``torch_dynamo_backends`` entry point, so neither ``import torch_rbln`` nor this
package's import loads ``torch._dynamo``: that happens when torch.compile first calls the backend.
Chains of pointwise ops and reductions with their producers become generated DSL kernels (see
``partition``, ``codegen``); matmuls, attention and every other op run through the registry.

    model = torch.compile(model, backend="rbln", options={"tensor_parallel_size": 2})
    torch_rbln.compiler.stats()   # graphs compiled, cache hits, fused kernel launches, fallbacks
    print(torch_rbln.compiler.format_stats())   # the same as tables
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["rbln_backend", "stats", "format_stats", "reset_stats"]


def rbln_backend(gm: Any, example_inputs: Sequence, **kwargs: Any) -> Callable:
    """The Dynamo backend (``backend="rbln"``); see :mod:`torch_rbln.compiler.backend`."""
    from .backend import rbln_backend as backend

    return backend(gm, example_inputs, **kwargs)


def stats() -> dict:
    """What the compiler did in this process: counters and launches per fused kernel."""
    from . import _stats

    return _stats.snapshot()


def format_stats(snapshot: dict | None = None, width: int = 100) -> str:
    """`stats()` (or a snapshot of it) as two plain-text tables: the counters, then launches per fused
    kernel, most launched first."""
    from .._tables import render_table

    snapshot = stats() if snapshot is None else snapshot
    counters = [(name, value) for name, value in snapshot.items() if name != "kernels"]
    text = render_table(("counter", "value"), counters, width, right=("value",))
    kernels = sorted(snapshot.get("kernels", {}).items(), key=lambda item: (-item[1], item[0]))
    if kernels:
        text += "\n" + render_table(("fused kernel", "launches"), kernels, width, right=("launches",))
    return text


def reset_stats() -> None:
    from . import _stats

    _stats.reset()
