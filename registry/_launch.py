"""Cached launches for the registry's hottest paths (elementwise ops on small tensors).

`kernel[grid](...)` finds its compiled specialisation from the call's argument kinds on every launch;
for a 4-element tensor that lookup costs more than the kernel. Here a caller names the specialisation
with a key it can build cheaply (dtypes, op code, block size), and the kernel's direct launch function
(`JITFunction.launcher`) is kept under that key, together with the requested DSL backend, as
`kernel[grid]` would key it. `kernel.clear_cache()` drops a kernel's kept launches (`_forget`), so the
next launch compiles afresh, as it does through `kernel[grid]`.
"""

from __future__ import annotations

from collections.abc import Callable

from torch_rbln.dsl.jit import _device_tp, on_clear_cache, requested_backend

from ._finite_scan import is_dense_permutation
from ._memo import BoundedMemo

_plans: dict[tuple, Callable] = BoundedMemo(4096)


def launch(kernel, programs: int, key: tuple, args: tuple, kwargs: dict, rows: int = 1) -> None:
    """`kernel[(programs, rows)](*args, **kwargs)`, through the direct launch kept under `key` when
    there is one. `key` must determine the kernel's specialisation for these arguments (the dtype of
    every tensor, the constexprs, whether each int fits in 32 bits)."""
    full = (kernel, key, requested_backend())
    plan = _plans.get(full)
    if plan is not None and plan(args, kwargs, programs, rows, 1):
        return
    kernel[(programs, rows)](*args, **kwargs)
    if plan is None:
        plan = kernel.launcher(*args, **kwargs)
        if plan is not None:
            _plans[full] = plan


def unchecked(kernel, key: tuple) -> Callable | None:
    """The launch kept under `key` without its checks, `run(g0, g1, g2, *runtime values)`, for a caller
    that has checked that every tensor is contiguous host memory and that one NPU runs the grid; None
    until `launch` has run that specialisation once."""
    plan = _plans.get((kernel, key, requested_backend()))
    return None if plan is None else plan.unchecked


def dense_unchecked(kernel, key: tuple, tensors: tuple, programs: int) -> Callable | None:
    """The launch kept under `key` without its checks (see `unchecked`), when the caller's `tensors`
    allow it although some are not contiguous: each is an rbln tensor covering exactly the block of
    numel elements at its data pointer (contiguous, or a permutation of a contiguous block such as a
    transposed weight), and one NPU runs the grid of `programs` programs. None otherwise."""
    run = unchecked(kernel, key)
    if run is None:
        return None
    for tensor in tensors:
        if tensor.is_cpu:
            return None
        if not (tensor.is_contiguous() or is_dense_permutation(tensor.shape, tensor.stride())):
            return None
    return run if programs == 1 or _device_tp(tensors[-1].get_device()) == 1 else None


def _forget(kernel) -> None:
    """Drop the launches kept for `kernel`: its `clear_cache()` ran, so they run code it has forgotten."""
    for full in [full for full in list(_plans) if full[0] is kernel]:
        del _plans[full]


on_clear_cache(_forget)
