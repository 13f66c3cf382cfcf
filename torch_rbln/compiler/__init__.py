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
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table

    snapshot = stats() if snapshot is None else snapshot
    counters = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    counters.add_column("counter")
    counters.add_column("value", justify="right")
    for name, value in snapshot.items():
        if name != "kernels":
            counters.add_row(name, str(value))
    kernels = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    kernels.add_column("fused kernel", overflow="fold")
    kernels.add_column("launches", justify="right")
    for name, launches in sorted(snapshot.get("kernels", {}).items(), key=lambda item: (-item[1], item[0])):
        kernels.add_row(name, str(launches))
    stream = io.StringIO()
    console = Console(file=stream, width=width, color_system=None, highlight=False)
    console.print(counters)
    if snapshot.get("kernels"):
        console.print(kernels)
    return "\n".join(line.rstrip() for line in stream.getvalue().splitlines())


def reset_stats() -> None:
    from . import _stats

    _stats.reset()
