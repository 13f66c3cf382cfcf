"""Run backward passes on the calling thread.

The autograd engine gives every device index its own worker thread, sized from the C++ device
count, which a Python-only device cannot report: backward through rbln:1 or higher trips an
internal assert. Disabling autograd multithreading makes the engine run the graph on the calling
thread; the flag is thread-local, so it is set around every engine entry, in whichever thread.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.autograd
import torch.autograd.graph


def _single_threaded(run_backward: Any) -> Any:
    @functools.wraps(run_backward)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not torch._C._is_multithreading_enabled():
            return run_backward(*args, **kwargs)
        torch._C._set_multithreading_enabled(False)
        try:
            return run_backward(*args, **kwargs)
        finally:
            torch._C._set_multithreading_enabled(True)

    wrapper.__torch_rbln_wrapped__ = True  # type: ignore[attr-defined]
    return wrapper


def register() -> None:
    original = torch.autograd.graph._engine_run_backward
    if getattr(original, "__torch_rbln_wrapped__", False):
        return
    wrapped = _single_threaded(original)
    torch.autograd.graph._engine_run_backward = wrapped
    torch.autograd._engine_run_backward = wrapped  # the name torch.autograd.backward/grad call
