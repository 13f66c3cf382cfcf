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

_enabled = None  # torch.autograd._profiler_enabled, bound on first use (imported while `import torch` runs)


def active() -> bool:
    """Whether a torch.profiler session is recording."""
    global _enabled
    if _enabled is None:
        import torch

        _enabled = torch.autograd._profiler_enabled
    return _enabled()


def region(what: str, name: str, **details: Any) -> contextlib.AbstractContextManager:
    """A profiler range ``rbln::<what> <name>`` with `details` as its arguments (`key=value, ...`)."""
    import torch

    text = ", ".join(f"{key}={value}" for key, value in details.items())
    return torch.profiler.record_function(f"rbln::{what} {name}", text or None)
