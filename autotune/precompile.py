"""Ahead-of-time compiles for ``rbln-autotune precompile``: fill numba's kernel cache on all cores.

Work items are independent and run in worker processes (each compiles synchronously; numba's cache is
shared through the cache directory, and the cross-process compile lock makes a kernel that two items
need compile once):

* ``("op", entry, dtype)``: an op-library table entry (``torch_rbln.registry.table.TABLE``) run on rbln
  with the first samples of its OpInfo in that dtype, as the OpInfo tests run it: every kernel
  specialisation those calls launch is compiled (and cached).
* ``("config", manifest, launch id, config index)``: one config of one launch of an autotune manifest
  (see ``autotune.manifest``), compiled without running (``warmup=True``), so tuning it later only
  measures.

A cache built so is portable to identical hosts (the same CPU, torch, numba and torch-rbln): copy
``$TORCH_RBLN_CACHE_DIR/kernels``; where torch-rbln is installed and where the cache lies do not enter
a kernel's cache identity (tests/dsl/backends/test_portable_cache.py).
"""

from __future__ import annotations

import time

DTYPES = ("float32", "float16", "bfloat16")
# as tests/registry/test_opinfo_table.py: at most this many samples, and stop once this many ran on the
# device kernel
MAX_SAMPLES = 6
ON_DEVICE = {"float32": 3, "float16": 1, "bfloat16": 1}

_op_db: list | None = None
_manifests: dict = {}


def op_items(dtypes: list[str]) -> list[tuple]:
    """One item per op-library table entry with an OpInfo, per dtype."""
    from torch_rbln.registry.table import TABLE

    return [("op", entry.name, dtype) for entry in TABLE if entry.opinfo for dtype in dtypes]


def manifest_items(path: str) -> list[tuple]:
    """One item per config of each launch of the manifest at `path`."""
    from .manifest import load_manifest

    items = []
    for launch in load_manifest(path).launches:
        for index in range(len(_tuner(launch.kernel_ref).configs)):
            items.append(("config", path, launch.id, index))
    return items


def describe(item: tuple) -> str:
    if item[0] == "op":
        return f"{item[1]} [{item[2]}]"
    return f"{item[1]} launch {'/'.join(map(str, item[2]))} config {item[3]}"


def _tuner(kernel_ref: str):
    from .manifest import resolve_kernel
    from .tuner import Autotuner

    tuner = resolve_kernel(kernel_ref)
    while not isinstance(tuner, Autotuner):
        tuner = tuner.fn
    return tuner


def _opinfo(spec: str):
    global _op_db
    if _op_db is None:
        from torch.testing._internal.common_methods_invocations import op_db

        _op_db = op_db
    name, _, variant = spec.partition(":")
    return next(info for info in _op_db if info.name == name and info.variant_test_name == variant)


def _run_op(entry_name: str, dtype_name: str) -> None:
    import torch
    from torch_rbln.registry.table import TABLE

    from torch_rbln import registry

    entry = next(e for e in TABLE if e.name == entry_name)
    info = _opinfo(entry.opinfo)
    dtype = getattr(torch, dtype_name)
    if dtype not in info.supported_dtypes("cpu"):
        return
    schema = "aten::" + entry.name.partition(".")[0]
    on_device = 0

    def to_rbln(value):
        return value.detach().to("rbln") if isinstance(value, torch.Tensor) else value

    for number, sample in enumerate(info.sample_inputs("cpu", dtype, requires_grad=False)):
        if number >= MAX_SAMPLES or on_device >= ON_DEVICE.get(dtype_name, 1):
            break
        device_sample = sample.transform(to_rbln)
        registry.reset_fallback_report()
        try:
            info.op(device_sample.input, *device_sample.args, **device_sample.kwargs)
        except Exception:  # noqa: BLE001, S112 - a sample the op refuses compiles nothing; the rest do
            continue
        if registry.fallback_report().get(schema, {}).get("device"):
            on_device += 1


def _compile_config(path: str, launch_id: tuple, index: int) -> None:
    from .manifest import load_manifest

    manifest = _manifests.get(path)
    if manifest is None:
        manifest = _manifests[path] = load_manifest(path)
    launch = next(x for x in manifest.launches if x.id == tuple(launch_id))
    tuner = _tuner(launch.kernel_ref)
    args, kwargs, _ = launch.build()
    kwargs.pop("tp", None)
    tuner.fn.run(*args, grid=(1,), warmup=True, **{**kwargs, **tuner.configs[index].all_kwargs()})


def precompile_one(item: tuple) -> dict:
    """Run one work item (in a worker process): its label, seconds, numba compiles, and error (or None)."""
    from torch_rbln.dsl.backends.numba_backend.executable import compile_count

    before = compile_count()[0]
    began = time.perf_counter()
    error = None
    try:
        if item[0] == "op":
            _run_op(item[1], item[2])
        else:
            _compile_config(item[1], item[2], item[3])
    except Exception as failure:  # noqa: BLE001 - reported in the summary
        lines = str(failure).strip().splitlines()
        error = f"{type(failure).__name__}: {lines[-1] if lines else ''}"
    return {"item": describe(item), "seconds": time.perf_counter() - began,
            "compiles": compile_count()[0] - before, "error": error}
