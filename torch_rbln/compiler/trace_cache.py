"""AOTAutograd's inference graphs, cached by the Dynamo graph they were traced from.

Why: on a warm kernel cache, most of a compiled model's first call under ``backend="rbln"`` is
AOTAutograd tracing the Dynamo graph into ATen (0.7 s of the 1.7 s for a 4-layer Llama), which inductor
skips with its own AOTAutograd cache. This cache keeps the ATen graph itself, so a later process (or a
``torch._dynamo.reset()``) that captures the same Dynamo graph goes straight to :func:`compile_graph`.

Only traces whose runtime wrappers are a plain call are kept, because a hit replaces AOTAutograd's
wrappers with one call of the compiled graph (`runner`), plus the copy of each data-mutated input's new
value back into it (a static key/value cache's update), which AOTAutograd's epilogue does:

* the key (:func:`key`) covers the Dynamo graph's code, every input's type, shape, strides, offset,
  dtype, device and ``requires_grad``, the modes that steer a trace (grad, inference mode, autocast,
  default dtype, deterministic algorithms), torch's version and functorch config, every ``TORCH_RBLN_*``
  variable, and the sources of ``torch_rbln`` and ``registry`` (our fake kernels, autograd kernels and
  decompositions decide which ATen ops a trace records), and the version of the distribution that owns
  any other namespace's custom op it calls (transformers'). A graph that calls anything versions and a
  source digest cannot pin (a user's Python function, a script's own custom op, a higher-order op),
  holds parameters or constants of its own, takes symbolic sizes, tensor subclasses or inputs sharing
  memory, or needs gradients is not cached;
* a trace is stored only when AOTAutograd reports (its ``ViewAndMutationMeta``) no mutation of an
  input's sizes, strides or storage (data mutations are returned as outputs and replayed), no output
  aliasing an input or another output, no effect tokens and no grad-mode change;
* entries are JSON (no pickle: nothing in the cache directory is executed by loading it), signed with
  a checksum like the graph cache's; a corrupt or foreign entry is reported with a WARNING and traced
  again; an op the running torch lacks makes the entry a miss.

torch's switches for its own AOTAutograd cache turn this one off too
(``torch._functorch.config.enable_autograd_cache = False`` or ``TORCHINDUCTOR_AUTOGRAD_CACHE=0``;
``torch.compiler.config.force_disable_caches`` or ``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import logging
import operator
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

from torch_rbln import cachedir
from torch_rbln.log import get_logger

from . import _stats
from .cache import FORMAT as ENTRY_FORMAT
from .cache import read_signed, write_signed

__all__ = ["key", "lookup", "store_if_plain", "runner", "Uncacheable"]

# Namespaces whose ops are pinned by the key (torch's version, our sources); a custom op of another
# namespace is pinned when an installed distribution of that name is (its version joins the key:
# transformers' ops), else the graph is not cached (a user's own op, defined in a script)
CACHED_NAMESPACES = frozenset({"aten", "prims", "rbln"})
CONSTANT_BYTES = 1 << 16  # larger tensor constants in a graph: not cached (they would bloat entries)
WHAT = "traced graph cache entry"
FORMAT = 2  # the encoding below (in the key: entries of another encoding are never looked up)


class Uncacheable(Exception):
    """Why one graph's trace is not cached (logged at DEBUG)."""


class MissingOp(Exception):
    """An entry names an op the running torch lacks (another build with the same version string)."""


def _log() -> logging.Logger:
    return get_logger("compiler")


def trace_dir() -> Path:
    return Path(cachedir.cache_path("traces"))


@functools.lru_cache(maxsize=1)
def _sources_digest() -> str:
    """The sources that decide what a trace records: torch_rbln's (fake/autograd kernels, decompositions,
    device hooks) and the registry's (the ops it binds for the rbln device)."""
    import torch_rbln
    from torch_rbln import registry

    digest = hashlib.sha256()
    for package in (torch_rbln, registry):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _modes() -> list[str]:
    """The thread-local modes and global settings a trace reads."""
    from torch._functorch import config as functorch_config

    autocast = [torch.is_autocast_enabled(device) for device in ("cpu", "rbln")]
    if any(autocast):
        raise Uncacheable("autocast is enabled")
    settings = functorch_config.get_config_copy()
    return [
        f"grad={torch.is_grad_enabled()}", f"inference={torch.is_inference_mode_enabled()}",
        f"default_dtype={torch.get_default_dtype()}",
        f"deterministic={torch.are_deterministic_algorithms_enabled()}",
        "functorch=" + repr(sorted((name, repr(value)) for name, value in settings.items())),
        "env=" + repr(sorted((name, value) for name, value in os.environ.items()
                             if name.startswith("TORCH_RBLN_"))),
    ]


def _namespace(op: torch._ops.OpOverload | torch._ops.OpOverloadPacket) -> str:
    if isinstance(op, torch._ops.OpOverloadPacket):
        return op._qualified_op_name.split("::")[0]
    return op.namespace


@functools.lru_cache(maxsize=64)
def _distribution_version(namespace: str) -> str | None:
    """The version of the installed distribution named `namespace` (None: there is none)."""
    import importlib.metadata

    try:
        return importlib.metadata.version(namespace)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def _pinned_op(namespace: str) -> bool:
    return namespace in CACHED_NAMESPACES or _distribution_version(namespace) is not None


def _pinned_target(target: Any) -> bool:
    """Whether a call target's behaviour is fixed by torch's version, our sources or a distribution's
    version (`_pins`)."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return _pinned_op(_namespace(target))
    if isinstance(target, torch._ops.HigherOrderOperator):
        return False
    module = getattr(target, "__module__", None) or ""
    return module.split(".")[0] in ("torch", "_operator", "operator", "math", "builtins")


def _name(value: torch.dtype | torch.layout | torch.memory_format) -> str:
    """`float32` for torch.float32 (`_torch_attribute` is the inverse)."""
    return str(value).removeprefix("torch.")


def _geometry(value: torch.Tensor, offset: bool = True) -> list:
    """[shape, strides, storage offset (0 without `offset`), dtype name, device] of a tensor with
    static sizes (Uncacheable for symbolic ones)."""
    if any(not isinstance(n, int) for n in (*value.shape, *value.stride(), value.storage_offset())):
        raise Uncacheable("symbolic sizes")
    return [list(value.shape), list(value.stride()), value.storage_offset() if offset else 0,
            _name(value.dtype), str(value.device)]


def _describe_input(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            raise Uncacheable(f"an input is a {type(value).__name__}")
        if value.is_conj() or value.is_neg() or value.layout != torch.strided:
            raise Uncacheable("an input is not a plain strided tensor")
        return f"T{_geometry(value)}:{value.requires_grad}"
    if type(value) in (int, float, bool) or value is None:
        return f"V{type(value).__name__}:{value!r}"
    raise Uncacheable(f"an input is a {type(value).__name__}")


def _check_graph(gm: fx.GraphModule) -> list[str]:
    """Refuse what the key cannot pin; returns the versions of the distributions whose ops it calls."""
    if any(True for _ in gm.parameters()) or any(True for _ in gm.buffers()):
        raise Uncacheable("the graph holds parameters or buffers")
    pins = set()
    for node in gm.graph.nodes:
        if node.op in ("call_module", "get_attr"):
            raise Uncacheable(f"the graph has a {node.op} node ({node.target})")
        if node.op == "call_function":
            if not _pinned_target(node.target):
                raise Uncacheable(f"the graph calls {node.target!r}")
            if isinstance(node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
                namespace = _namespace(node.target)
                if namespace not in CACHED_NAMESPACES:
                    pins.add(f"{namespace}=={_distribution_version(namespace)}")
    return sorted(pins)


def _not_cached(reason: Exception) -> None:
    """Count a trace left out of the cache; say why (DEBUG for what the cache refuses by design, WARNING
    for an unexpected error, which the compile survives)."""
    _stats.count("traces_uncached")
    if isinstance(reason, Uncacheable):
        _log().debug("trace not cached: %s", reason)
    else:
        _log().warning("trace not cached: %s: %s (the graph compiles as usual)", type(reason).__name__,
                       reason)


def key(gm: fx.GraphModule, example_inputs: Sequence) -> str | None:
    """The cache key of the trace of Dynamo graph `gm` on `example_inputs`; None when it is not cached."""
    from torch._functorch import config as functorch_config

    if torch.compiler.config.force_disable_caches or not functorch_config.enable_autograd_cache:
        return None  # torch's own switches for its AOTAutograd cache
    try:
        pins = _check_graph(gm)
        if torch.is_grad_enabled() and any(isinstance(v, torch.Tensor) and v.requires_grad
                                           for v in example_inputs):
            raise Uncacheable("an input requires grad (a training graph)")
        storages = set()
        for value in example_inputs:
            if isinstance(value, torch.Tensor):
                try:
                    memory = value.untyped_storage()
                    storage = memory.data_ptr()
                except RuntimeError as error:
                    raise Uncacheable("an input has no memory (a fake tensor)") from error
                if storage in storages and memory.nbytes():
                    raise Uncacheable("two inputs share memory")
                storages.add(storage)
        # (the entry format `cache.read_signed` checks is in the key: a new one never reads old entries)
        parts = [f"{FORMAT}/{ENTRY_FORMAT}", torch.__version__, _sources_digest(), *pins, *_modes(), gm.code]
        parts += [_describe_input(value) for value in example_inputs]
    except Exception as reason:  # noqa: BLE001 - a graph we cannot key is traced, never failed
        _not_cached(reason)
        return None
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


# ------------------------------------------------------------------------------------------- encoding
def _encode_value(value: Any) -> Any:
    """A node argument or recorded value as JSON (tagged lists; floats exact, inf/nan included)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"f": value.hex()}
    if isinstance(value, fx.Node):
        return {"n": value.name}
    if isinstance(value, (list, tuple)):
        return {"l" if isinstance(value, list) else "t": [_encode_value(v) for v in value]}
    if isinstance(value, dict) and all(isinstance(name, str) for name in value):
        return {"d": [[name, _encode_value(v)] for name, v in value.items()]}
    if isinstance(value, torch.dtype):
        return {"dtype": _name(value)}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": _name(value)}
    if isinstance(value, torch.memory_format):
        return {"memory_format": _name(value)}
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            raise Uncacheable("a recorded value requires grad")
        return {"tensor": _geometry(value)}
    raise Uncacheable(f"a {type(value).__name__} in the graph")


def _torch_attribute(kind: str, name: str) -> Any:
    value = getattr(torch, name, None)
    expected = {"dtype": torch.dtype, "layout": torch.layout, "memory_format": torch.memory_format}[kind]
    if not isinstance(value, expected):
        raise ValueError(f"unknown {kind} {name!r}")
    return value


def _fake_tensor(fake: Any, shape: list[int], stride: list[int], offset: int, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
    """A fake tensor of mode `fake` with the recorded geometry (made from a meta tensor: a fifth of the
    cost of dispatching `empty_strided` through the mode, 400 of them in a 4-layer Llama)."""
    if offset:
        extent = 0 if 0 in shape else 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))
        meta = torch.empty(offset + extent, dtype=dtype, device="meta").as_strided(shape, stride, offset)
    else:
        meta = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    return fake.fake_tensor_converter.from_meta_and_device(fake, meta, device)


def _decode_value(data: Any, nodes: dict[str, fx.Node], fake: Any = None) -> Any:
    """Inverse of `_encode_value`; recorded tensors become fake tensors of mode `fake` (None: a node
    argument, where a tensor is invalid)."""
    if data is None or isinstance(data, (bool, int, str)):
        return data
    if isinstance(data, dict) and len(data) == 1:
        (tag, item), = data.items()
        if tag == "f":
            return float.fromhex(item)
        if tag == "n":
            return nodes[item]
        if tag in ("l", "t"):
            values = [_decode_value(v, nodes, fake) for v in item]
            return values if tag == "l" else tuple(values)
        if tag == "d":
            return {str(name): _decode_value(v, nodes, fake) for name, v in item}
        if tag == "device":
            return torch.device(item)
        if tag == "tensor" and fake is not None:
            shape, stride, offset, dtype, device = item
            dtype = _torch_attribute("dtype", dtype)
            return _fake_tensor(fake, shape, stride, offset, dtype, torch.device(device))
        if tag in ("dtype", "layout", "memory_format"):
            return _torch_attribute(tag, item)
    raise ValueError(f"unknown value {data!r:.80}")


def _encode_target(node: fx.Node) -> str:
    target = node.target
    if node.op != "call_function":
        return target
    if target is operator.getitem:
        return "operator.getitem"
    if isinstance(target, torch._ops.OpOverload) and _pinned_op(target.namespace):
        return f"op:{target.namespace}.{target._opname}.{target._overloadname}"
    raise Uncacheable(f"the traced graph calls {target!r}")


def _decode_target(op: str, text: str) -> Any:
    if op != "call_function":
        return text
    if text == "operator.getitem":
        return operator.getitem
    namespace, name, overload = text.removeprefix("op:").split(".")
    if not _pinned_op(namespace):
        raise ValueError(f"op namespace {namespace!r}")
    try:
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)
    except (AttributeError, RuntimeError) as error:
        raise MissingOp(f"this torch has no op {text[3:]}") from error


def _encode_constant(value: Any) -> dict:
    """A small tensor constant of the traced graph (`lift_fresh_copy` of a `torch.tensor(...)`), with
    its bytes."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    if type(value) is not torch.Tensor or not value.is_contiguous() or \
            value.numel() * value.element_size() > CONSTANT_BYTES:
        raise Uncacheable("a tensor constant that is not small, plain and contiguous")
    with unset_fake_temporarily():  # (AOTAutograd's fake mode is active while it compiles)
        raw = value.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()
    return {"tensor": _geometry(value, offset=False), "bytes": base64.b64encode(raw).decode()}


def _decode_constant(data: dict) -> torch.Tensor:
    shape, _stride, _offset, dtype, device = data["tensor"]
    raw = base64.b64decode(data["bytes"], validate=True)
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    return flat.view(_torch_attribute("dtype", dtype)).reshape(shape).to(torch.device(device))


def encode(gm: fx.GraphModule) -> dict:
    """The ATen graph `gm` (nodes, targets, arguments, each node's recorded value, small constants) as
    JSON."""
    nodes = []
    for node in gm.graph.nodes:
        if node.op not in ("placeholder", "call_function", "get_attr", "output"):
            raise Uncacheable(f"the traced graph has a {node.op} node")
        entry = {"op": node.op, "name": node.name, "target": _encode_target(node),
                 "args": _encode_value(node.args), "kwargs": _encode_value(dict(node.kwargs))}
        if node.op == "get_attr":
            entry["constant"] = _encode_constant(getattr(gm, node.target))
        if "val" in node.meta and node.op != "output":
            entry["val"] = _encode_value(node.meta["val"])
        nodes.append(entry)
    return {"nodes": nodes}


def decode(data: dict) -> tuple[fx.GraphModule, list, list[int]]:
    """(graph module, its placeholders' recorded values as the example inputs, the inputs it mutates)
    from :func:`encode`'s JSON (+ "mutated"); the recorded tensors are fake tensors of a new
    FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    graph, root = fx.Graph(), torch.nn.Module()
    nodes: dict[str, fx.Node] = {}
    fake = FakeTensorMode()
    for entry in data["nodes"]:
        op = entry["op"]
        if op not in ("placeholder", "call_function", "get_attr", "output"):
            raise ValueError(f"node kind {op!r}")
        args, kwargs = _decode_value(entry["args"], nodes), _decode_value(entry["kwargs"], nodes)
        if not isinstance(args, tuple) or not isinstance(kwargs, dict):
            raise ValueError("node arguments are not a tuple and a dict")
        target = _decode_target(op, entry["target"])
        if op == "get_attr":
            if not isinstance(target, str) or not target.isidentifier() or hasattr(root, target):
                raise ValueError(f"constant name {target!r}")
            setattr(root, target, _decode_constant(entry["constant"]))
        node = graph.create_node(op, target, args, kwargs, name=entry["name"])
        if node.name != entry["name"]:
            raise ValueError(f"node name {entry['name']!r} is not unique")
        if "val" in entry:
            node.meta["val"] = _decode_value(entry["val"], nodes, fake)
        nodes[node.name] = node
    graph.lint()
    # lazy, as AOTAutograd's graphs are: its Python code is generated once, when first read (the graph
    # key reads it after our passes rewrote the graph), not here and again after each pass
    from torch.fx._lazy_graph_module import _LazyGraphModule

    gm = _LazyGraphModule(root, graph)
    inputs = [node.meta.get("val") for node in graph.nodes if node.op == "placeholder"]
    mutated = data.get("mutated", [])
    outputs = next(node for node in reversed(graph.nodes) if node.op == "output").args[0]
    if not isinstance(mutated, list) or any(type(i) is not int or not 0 <= i < len(inputs) for i in mutated) \
            or len(set(mutated)) != len(mutated) or len(mutated) > len(outputs):
        raise ValueError(f"mutated inputs {mutated!r:.80}")
    return gm, inputs, mutated


# ------------------------------------------------------------------------------------------- entries
def _path(cache_key: str) -> Path:
    return trace_dir() / f"{cache_key}.json"


def lookup(cache_key: str) -> tuple[fx.GraphModule, list, list[int]] | None:
    """The cached trace (graph, example inputs, mutated inputs) of `cache_key`, or None (no entry, or
    one that does not decode: reported and traced again)."""
    try:
        found = read_signed(_path(cache_key), cache_key, "graph", WHAT, parse=decode)
    except MissingOp as reason:
        _log().info("%s %s is not used: %s", WHAT, _path(cache_key), reason)
        return None
    if found is None:
        return None
    _stats.count("trace_hits")
    return found


def _plainness(meta: Any, graph: fx.GraphModule, inputs: int) -> tuple[str | None, list[int]]:
    """(why AOTAutograd's trace needs runtime wrappers we do not replay, or None; the inputs whose data
    it mutates, in the order the graph returns their new values first: `runner` copies them back, as
    AOTAutograd's epilogue does for a data-only mutation)."""
    from torch._functorch._aot_autograd.schemas import OutputType

    if meta is None:
        return "no AOTAutograd metadata", []
    if any(i.mutates_metadata or i.mutates_storage_metadata or i.mutation_inductor_storage_resize
           for i in meta.input_info):
        return "it mutates an input's sizes, strides or storage", []
    mutated = list(meta.mutated_inp_runtime_indices)
    if meta.keep_input_mutations or any(not meta.input_info[i].mutates_data for i in mutated) or \
            sum(i.mutates_data for i in meta.input_info) != len(mutated):
        return "its input mutations are not returned as outputs", []
    if any(o.output_type != OutputType.non_alias for o in meta.output_info):
        return "an output aliases an input or another output", []
    if meta.num_intermediate_bases or meta.tokens or meta.grad_enabled_mutation is not None:
        return "it needs AOTAutograd's runtime wrappers (bases, effect tokens or a grad-mode change)", []
    if getattr(meta, "num_graphsafe_rng_states", 0) or meta.is_rng_op_functionalized:
        return "it functionalises random state", []
    if any(not isinstance(m, int) and type(m).__name__ != "PlainTensorMeta" for m in meta.subclass_inp_meta):
        return "a tensor subclass input", []
    placeholders = sum(1 for node in graph.graph.nodes if node.op == "placeholder")
    if placeholders != inputs or len(meta.input_info) != inputs:
        return "the traced graph takes other inputs than the Dynamo graph", []
    return None, mutated


def store_if_plain(cache_key: str, graph: fx.GraphModule, inputs: int) -> None:
    """Store AOTAutograd's inference graph `graph` (before our passes rewrite it) under `cache_key`
    when the trace is a plain function of the Dynamo graph's `inputs` inputs."""
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    try:
        reason, mutated = _plainness(context.fw_metadata if context else None, graph, inputs)
        if reason is not None:
            raise Uncacheable(reason)
        data = {**encode(graph), "mutated": mutated}
    except Exception as why:  # noqa: BLE001 - a trace we cannot encode is compiled, never failed
        _not_cached(why)
        return
    write_signed(_path(cache_key), cache_key, "graph", data, WHAT, then="the next compile traces again")
    _stats.count("traces_stored")


def runner(compiled: Callable, mutated: Sequence[int] = ()) -> Callable:
    """The Dynamo-facing callable of a cached trace's compiled graph: what AOTAutograd's inference
    wrapper does for such a trace (grad mode off around the call; the new values of the `mutated`
    inputs, the graph's first outputs, copied into them; the other outputs as a list). A trace is
    cached only where no input requires grad under grad mode, so the copies record no autograd history
    with or without grad mode, as AOTAutograd's."""
    count = len(mutated)

    def forward(*args: Any) -> list:
        grad = torch.is_grad_enabled()
        if grad:
            torch._C._set_grad_enabled(False)
        try:
            outputs = compiled(*args)
            outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
            for position, index in enumerate(mutated):
                args[index].copy_(outputs[position])
        finally:
            if grad:
                torch._C._set_grad_enabled(True)
        return outputs[count:] if count else outputs

    return forward
