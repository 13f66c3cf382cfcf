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

import torch
from torch_rbln.dsl.jit import on_clear_cache

from torch_rbln.tp import device_tp as _device_tp
from torch_rbln.tp import requested_backend

from ._finite_scan import is_dense_permutation
from ._memo import BoundedMemo
from .geometry import I32

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


def launch_decided(g, args: tuple) -> None:
    """Launch a decided `plan.Launch` `g` on `args` through the launch kept under its key, or the
    general launch when it has no key (an int that needs 64 bits)."""
    if g.key is not None:
        launch(g.kernel, g.programs, g.key, args, g.keywords, g.rows)
    else:
        g.kernel[(g.programs, g.rows)](*args, **g.keywords)


def _arg_kind(value) -> object:
    """What of a launch argument decides the kernel's specialisation: a tensor's dtype, an int's fitting
    in 32 bits, else the value's type."""
    if isinstance(value, torch.Tensor):
        return value.dtype
    if isinstance(value, bool):
        return bool
    if isinstance(value, int):
        return -I32 < value < I32
    return type(value)


def launch_grid(kernel, grid: tuple[int, int], args: tuple, **constexprs) -> None:
    """`kernel[grid](*args, **constexprs)` through the launch kept under a key made of every argument's
    kind and the constexprs (what decides the specialisation): for callers with no cheaper key."""
    key = (*map(_arg_kind, args), *constexprs.values())
    launch(kernel, grid[0], key, args, constexprs, rows=grid[1])


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


# (autotuner, launch shape) -> (grid, kernel keywords) of the config the tuner chose for that shape
_tuned: dict[tuple, tuple] = BoundedMemo(1024)


def tuned(tuner, shape_key: tuple, args: tuple, constexprs: dict, grid_of: Callable[[dict], tuple],
          dtypes: tuple, tensors: tuple, fits_int32: bool) -> None:
    """`tuner[grid_of](*args, **constexprs)` for an autotuned kernel, keeping its decision.

    The first launch of a shape goes through the autotuner (which tunes it, or reads its decision from
    the store). Later launches of that shape run the kernel with the kept config directly, since the
    tuner's per-call key and grid callback cost more than a small launch computes: through the kept
    unchecked launch when `tensors` (every tensor argument) are dense and one NPU runs the grid, else
    through the kernel's own launch. `shape_key` must determine the tuner's decision (what its key reads,
    dtypes, tensor-parallel size, requested backend); `dtypes` (of `tensors`) and the config's
    constexprs key the kept launch when `fits_int32` (every int argument fits in 32 bits)."""
    full = (tuner, shape_key)
    plan = _tuned.get(full)
    if plan is None:
        tuner[grid_of](*args, **constexprs)
        config = tuner.lookup(*args, **constexprs)
        if config is not None and config.pre_hook is None and not tuner.reset_to_zero:
            keywords = {**constexprs, **config.all_kwargs()}
            _tuned[full] = (tuple(grid_of(keywords)) + (1, 1), keywords)
        return
    grid, keywords = plan
    if fits_int32 and grid[2] == 1:
        key = (*dtypes, *keywords.values())
        run = dense_unchecked(tuner.fn, key, tensors, grid[0] * grid[1])
        if run is not None:
            run(grid[0], grid[1], 1, *args)
        else:
            launch(tuner.fn, grid[0], key, args, keywords, rows=grid[1])
        return
    tuner.fn.run(*args, grid=grid[:3], **keywords)


def tuned_config(tuner, shape_key: tuple) -> tuple | None:
    """(grid, kernel keywords) that `tuned` keeps for `shape_key`, or None before its first launch."""
    return _tuned.get((tuner, shape_key))


def _forget(kernel) -> None:
    """Drop the launches kept for `kernel`: its `clear_cache()` ran, so they run code it has forgotten."""
    for full in [full for full in list(_plans) if full[0] is kernel]:
        del _plans[full]


on_clear_cache(_forget)


_modules: dict[str, object] = {}


def kernel_module(name: str):
    """`torch_rbln.kernels.<name>`, imported on first use (the first one also switches the allocator
    and DLPack retagging to their compiled versions: numba is loaded from then on)."""
    module = _modules.get(name)
    if module is None:
        import importlib

        module = importlib.import_module(f"torch_rbln.kernels.{name}")
        if not _modules:
            from torch_rbln import _dlpack, _memory

            # numba is loaded now: allocations may use it
            _dlpack.enable_compiled_retag()
            _memory.enable_compiled_allocator()
        _modules[name] = module
    return module
