"""Compiled-graph cache: in memory, then on disk under ``<TORCH_RBLN_CACHE_DIR>/graphs/<key>.json``.

The key hashes the ATen graph's code, its inputs' shapes, strides, dtypes and device type, the
tensor-parallel size, the compiler's own sources and template, and the torch / torch_rbln versions. An
entry holds the fused kernels' specs (their generated source included), so a hit skips partitioning and
code generation; the kernels' compiled code is in the DSL's own compile cache. A corrupt entry is
reported with a WARNING and regenerated; so is one whose kernels name nodes its graph lacks, or whose
kernel sources no longer load (`backend.CompiledGraph._build`; counted as ``cache_rebuilds``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

from torch_rbln import cachedir
from torch_rbln.log import get_logger

from .codegen import KernelSpec, template_digest

__all__ = ["graph_key", "lookup", "store", "clear_memory", "graphs_dir", "read_signed", "write_signed",
           "FORMAT"]

FORMAT = 3  # 2: kernel specs record their outputs' strides; 3: pointwise kernels store at them


def _log() -> logging.Logger:
    """The ``torch_rbln.compiler`` logger (configured on first use, per SPEC-device.md "Logging")."""
    return get_logger("compiler")
_lock = threading.Lock()
_memory: dict[str, list[KernelSpec]] = {}


def graphs_dir() -> Path:
    return Path(cachedir.cache_path("graphs"))


@functools.lru_cache(maxsize=1)
def _compiler_digest() -> str:
    h = hashlib.sha256(template_digest().encode())
    here = Path(__file__).parent
    for name in ("lowering.py", "partition.py", "codegen.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"T{tuple(value.shape)}:{tuple(value.stride())}:{value.dtype}:{value.device.type}"
    return f"V{value!r}"


def graph_key(gm: fx.GraphModule, example_inputs: Sequence, tp: int, identity: str | None = None) -> str:
    """The graph cache key of `gm` compiled for `tp` NPUs. `identity`: a name that determines the graph
    and its inputs already (a cached trace's key and phase), which then stands for the graph's code and
    inputs: a decoded trace's Python code is never generated just to be hashed (~10 ms a graph)."""
    from torch_rbln import __version__

    parts = [str(FORMAT), __version__, torch.__version__, _compiler_digest(), f"tp={tp}"]
    if identity is not None:
        parts.append(f"identity={identity}")
    else:
        parts += [gm.code, *(_describe(value) for value in example_inputs)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def clear_memory() -> None:
    """Forget the in-memory entries (the disk cache stays)."""
    with _lock:
        _memory.clear()


def _path(key: str) -> Path:
    return graphs_dir() / f"{key}.json"


def read_signed(path: Path, key: str, field: str, what: str = "graph cache entry",
                parse: Callable[[Any], Any] | None = None) -> Any | None:
    """The `field` of a signed JSON entry at `path`, through `parse` when given (None: no entry; `what`
    names the entry in messages). An entry that is not valid JSON, names another format or key, whose
    checksum does not match `field`, or that `parse` rejects (ValueError, KeyError, TypeError,
    AttributeError, RuntimeError) is reported with a WARNING and treated as absent, so the caller
    rebuilds it; any other exception of `parse` is the caller's."""
    try:
        text = path.read_text()
    except OSError:
        return None
    try:
        data = json.loads(text)
        if data.get("format") != FORMAT or data.get("key") != key:
            raise ValueError("format or key mismatch")
        payload = json.dumps(data[field], sort_keys=True)
        if hashlib.sha256(payload.encode()).hexdigest() != data.get("digest"):
            raise ValueError("checksum mismatch")
        return data[field] if parse is None else parse(data[field])
    except (ValueError, KeyError, TypeError, AttributeError, RuntimeError) as error:  # (RecursionError:
        _log().warning("%s %s is corrupt (%s: %s); regenerating it", what, path,  # nested too deeply)
                       type(error).__name__, error)
        return None


def write_signed(path: Path, key: str, field: str, value: Any, what: str = "graph cache entry",
                 then: str = "it stays in memory only") -> None:
    """Write `value` as the `field` of a signed JSON entry at `path`, atomically (a concurrent reader sees
    the old entry or the new one); a cache that cannot be written is reported with a WARNING that says
    what follows (`then`)."""
    payload = json.dumps(value, sort_keys=True)
    data = {"format": FORMAT, "key": key, "digest": hashlib.sha256(payload.encode()).hexdigest(),
            field: value}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError as error:
        _log().warning("could not write %s %s (%s); %s", what, path, error, then)


def lookup(key: str) -> tuple[list[KernelSpec], str] | None:
    """(specs, "memory" | "disk") for a cached graph, or None."""
    with _lock:
        specs = _memory.get(key)
    if specs is not None:
        return specs, "memory"
    specs = read_signed(_path(key), key, "kernels",
                        parse=lambda kernels: [KernelSpec.from_json(item) for item in kernels])
    if specs is None:
        return None
    with _lock:
        _memory[key] = specs
    return specs, "disk"


def store(key: str, specs: list[KernelSpec]) -> None:
    with _lock:
        _memory[key] = specs
    write_signed(_path(key), key, "kernels", [spec.to_json() for spec in specs])
