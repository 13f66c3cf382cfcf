"""Ranges in `torch.profiler` traces for what torch-rbln does outside PyTorch's own ops.

PyTorch's profiler records aten ops, but a DSL kernel launched by `kernel[grid](...)`, a CPU fallback,
a kernel compile or a compiled graph's run happens inside Python that it does not see. Each of those
opens a `record_function` range named ``rbln::<what> <name>`` whose arguments say the grid, backend
and tier, so a Chrome trace shows where the time goes. Outside a profiling session the only cost is one
check (`active`, ~0.1 us).
"""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["active", "region"]

import torch.autograd.profiler as state  # noqa: E402  (loaded by `import torch` before it autoloads us)

# `state._is_profiler_enabled` is the flag PyTorch's profilers set on start and clear on stop for
# "fast python checks": hot paths read it directly (one attribute read); others call `active()`.


def active() -> bool:
    """Whether a torch.profiler session is recording."""
    return state._is_profiler_enabled


def region(what: str, name: str, **details: Any) -> contextlib.AbstractContextManager:
    """A profiler range ``rbln::<what> <name>`` with `details` as its arguments (`key=value, ...`)."""
    import torch

    text = ", ".join(f"{key}={value}" for key, value in details.items())
    return torch.profiler.record_function(f"rbln::{what} {name}", text or None)
