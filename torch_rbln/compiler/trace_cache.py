"""AOTAutograd's graphs, cached by the Dynamo graph they were traced from.

Why: on a warm kernel cache, most of a compiled model's first call under ``backend="rbln"`` is
AOTAutograd tracing the Dynamo graph into ATen (0.7 s of the 1.7 s for a 4-layer Llama; for a train
step, the joint trace and its partition: 1.2 s of GPT-2's 1.55 s), which inductor skips with its own
AOTAutograd cache. This cache keeps the ATen graphs themselves, so a later process (or a
``torch._dynamo.reset()``) that captures the same Dynamo graph goes straight to :func:`compile_graph`.

Only traces whose runtime wrappers we replay exactly are kept, because a hit replaces AOTAutograd's
wrappers: an inference trace runs as one call of the compiled graph (`runner`) plus the copy of each
data-mutated input's new value back into it (a static key/value cache's update), as AOTAutograd's
epilogue does; a training trace runs as an autograd function (`autograd_runner`) that does what
AOTAutograd's does for a graph without mutations, aliases or saved sizes:

* the key (:func:`key`) covers the Dynamo graph's code, every input's type, shape, strides, offset,
  dtype, device and ``requires_grad``, the modes that steer a trace (grad, inference mode, autocast,
  default dtype, deterministic algorithms), torch's version and functorch config, every ``TORCH_RBLN_*``
  variable, and the sources of ``torch_rbln`` and ``registry`` (our fake kernels, autograd kernels and
  decompositions decide which ATen ops a trace records), and the version of the distribution that owns
  any other namespace's custom op it calls (transformers'). A graph that calls anything versions and a
  source digest cannot pin (a user's Python function, a script's own custom op, a higher-order op),
  holds parameters or constants of its own, takes symbolic sizes, tensor subclasses or inputs sharing
  memory, or is a training graph under compiled autograd is not cached;
* an inference trace is stored only when AOTAutograd reports (its ``ViewAndMutationMeta``) no mutation
  of an input's sizes, strides or storage (data mutations are returned as outputs and replayed), no
  output aliasing an input or another output, no effect tokens and no grad-mode change; a training
  trace (`forward_entry`, then `store_training` at the first backward, when AOTAutograd compiles the
  backward graph) also no input mutation at all, and a backward that takes only saved tensors (with
  version checks) and the outputs' gradients;
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
from typing import Any, NamedTuple

import torch
import torch.fx as fx

from torch_rbln import cachedir
from torch_rbln.log import get_logger

from . import _stats
from .cache import FORMAT as ENTRY_FORMAT
from .cache import read_signed, write_signed

__all__ = ["Trace", "Uncacheable", "autograd_runner", "forward_entry", "key", "lookup", "runner",
           "store_if_plain", "store_training"]

# Namespaces whose ops are pinned by the key (torch's version, our sources); a custom op of another
# namespace is pinned when an installed distribution of that name is (its version joins the key:
# transformers' ops), else the graph is not cached (a user's own op, defined in a script)
CACHED_NAMESPACES = frozenset({"aten", "prims", "rbln"})
CONSTANT_BYTES = 1 << 16  # larger tensor constants in a graph: not cached (they would bloat entries)
WHAT = "traced graph cache entry"
FORMAT = 2  # the encoding below (in the key: entries of another encoding are never looked up)


class Uncacheable(Exception):
    """Why one graph's trace is not cached (logged at DEBUG)."""


class Autograd(NamedTuple):
    """How a cached training trace's forward and backward graphs connect, as AOTAutograd's autograd
    function connects them: the forward graph returns the user's `outputs` results, then `saved`
    tensors for the backward; output i is marked non-differentiable where `differentiable[i]` is
    False; the backward graph takes the saved tensors, then the gradients of the outputs listed in
    `tangents`, each coerced to its traced layout (`layouts`: a memory format's name, or None and the
    exact size and strides), and returns a gradient (or None) per forward input. The outputs in
    `unsafe_views` (views of an intermediate that AOTAutograd hides from autograd) are returned through
    ``aten._unsafe_view``, as AOTAutograd's forward epilogue returns them."""

    outputs: int
    saved: int
    differentiable: tuple[bool, ...]
    tangents: tuple[int, ...]
    layouts: tuple[tuple[str | None, tuple[int, ...], tuple[int, ...]], ...]
    unsafe_views: tuple[int, ...] = ()  # outputs AOTAutograd hands out through `aten._unsafe_view`


class Trace(NamedTuple):
    """A cached trace: AOTAutograd's inference (or, for training, forward) graph, its example inputs
    and the inputs whose data it mutates; a training trace also has its backward graph with its example
    inputs, and `autograd`."""

    graph: fx.GraphModule
    inputs: list
    mutated: list[int]
    backward: tuple[fx.GraphModule, list] | None = None
    autograd: Autograd | None = None


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


def _compiled_autograd() -> bool:
    """Whether compiled autograd is on: it traces a backward through AOTAutograd's own autograd
    function (its `_compiled_autograd_key`), which a cached training trace's runner is not."""
    from torch._dynamo import compiled_autograd
    from torch._dynamo import config as dynamo_config

    return bool(dynamo_config.compiled_autograd or compiled_autograd.compiled_autograd_enabled
                or compiled_autograd.in_compiled_autograd_region)


def key(gm: fx.GraphModule, example_inputs: Sequence) -> str | None:
    """The cache key of the trace of Dynamo graph `gm` on `example_inputs`; None when it is not cached."""
    from torch._functorch import config as functorch_config

    if torch.compiler.config.force_disable_caches or not functorch_config.enable_autograd_cache:
        return None  # torch's own switches for its AOTAutograd cache
    try:
        pins = _check_graph(gm)
        if torch.is_grad_enabled() and any(isinstance(v, torch.Tensor) and v.requires_grad
                                           for v in example_inputs) and _compiled_autograd():
            raise Uncacheable("compiled autograd traces the backward of a training graph itself")
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
def _encode_value(value: Any, grad_ok: bool = False) -> Any:
    """A node argument or recorded value as JSON (tagged lists; floats exact, inf/nan included).
    `grad_ok`: a recorded tensor may require grad (a training graph's primals: only its geometry is
    kept); in an inference graph that would mean a trace we do not understand."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"f": value.hex()}
    if isinstance(value, fx.Node):
        return {"n": value.name}
    if isinstance(value, (list, tuple)):
        return {"l" if isinstance(value, list) else "t": [_encode_value(v, grad_ok) for v in value]}
    if isinstance(value, dict) and all(isinstance(name, str) for name in value):
        return {"d": [[name, _encode_value(v, grad_ok)] for name, v in value.items()]}
    if isinstance(value, torch.dtype):
        return {"dtype": _name(value)}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": _name(value)}
    if isinstance(value, torch.memory_format):
        return {"memory_format": _name(value)}
    if isinstance(value, torch.Tensor):
        if value.requires_grad and not grad_ok:
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


def encode(gm: fx.GraphModule, training: bool = False) -> dict:
    """The ATen graph `gm` (nodes, targets, arguments, each node's recorded value, small constants) as
    JSON (`training`: a forward or backward graph, whose recorded values may require grad)."""
    nodes = []
    for node in gm.graph.nodes:
        if node.op not in ("placeholder", "call_function", "get_attr", "output"):
            raise Uncacheable(f"the traced graph has a {node.op} node")
        entry = {"op": node.op, "name": node.name, "target": _encode_target(node),
                 "args": _encode_value(node.args), "kwargs": _encode_value(dict(node.kwargs))}
        if node.op == "get_attr":
            entry["constant"] = _encode_constant(getattr(gm, node.target))
        if "val" in node.meta and node.op != "output":
            entry["val"] = _encode_value(node.meta["val"], training)
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
    _, outputs = _arity(gm)
    if not isinstance(mutated, list) or any(type(i) is not int or not 0 <= i < len(inputs) for i in mutated) \
            or len(set(mutated)) != len(mutated) or len(mutated) > outputs:
        raise ValueError(f"mutated inputs {mutated!r:.80}")
    return gm, inputs, mutated


# ------------------------------------------------------------------------------------------- entries
def _path(cache_key: str) -> Path:
    return trace_dir() / f"{cache_key}.json"


def _decode_autograd(data: Any, forward: tuple[int, int], backward: tuple[int, int]) -> Autograd:
    """The `Autograd` of a training entry, checked against its two graphs' (inputs, outputs)."""
    meta = Autograd(int(data["outputs"]), int(data["saved"]), tuple(bool(d) for d in data["differentiable"]),
                    tuple(int(i) for i in data["tangents"]),
                    tuple((None if f is None else str(f), tuple(map(int, size)), tuple(map(int, stride)))
                          for f, size, stride in data["layouts"]),
                    tuple(int(i) for i in data.get("unsafe_views", ())))
    if any(not 0 <= i < meta.outputs for i in meta.unsafe_views):
        raise ValueError("autograd metadata names an output that does not exist")
    if meta.outputs < 0 or meta.saved < 0 or len(meta.differentiable) != meta.outputs or \
            list(meta.tangents) != sorted(set(meta.tangents)) or \
            any(not 0 <= i < meta.outputs for i in meta.tangents) or len(meta.layouts) != len(meta.tangents):
        raise ValueError("autograd metadata does not describe the outputs")
    for name, _size, _stride in meta.layouts:
        if name is not None:
            _torch_attribute("memory_format", name)
    (forward_in, forward_out), (backward_in, backward_out) = forward, backward
    if forward_out != meta.outputs + meta.saved or backward_in != meta.saved + len(meta.tangents) or \
            backward_out != forward_in:
        raise ValueError("the forward and backward graphs do not connect")
    return meta


def _arity(gm: fx.GraphModule) -> tuple[int, int]:
    """(placeholders, outputs) of a graph that returns a list or tuple."""
    inputs = sum(1 for node in gm.graph.nodes if node.op == "placeholder")
    outputs = next(node for node in reversed(gm.graph.nodes) if node.op == "output").args[0]
    if not isinstance(outputs, (list, tuple)):
        raise ValueError("the graph does not return a list")
    return inputs, len(outputs)


def _decode_entry(data: dict) -> Trace:
    graph, inputs, mutated = decode(data)
    if "backward" not in data:
        return Trace(graph, inputs, mutated)
    if mutated:
        raise ValueError("a training entry with mutated inputs")
    backward, backward_inputs, _ = decode({"nodes": data["backward"]["nodes"]})
    autograd = _decode_autograd(data["autograd"], _arity(graph), _arity(backward))
    return Trace(graph, inputs, [], (backward, backward_inputs), autograd)


def lookup(cache_key: str) -> Trace | None:
    """The cached trace of `cache_key`, or None (no entry, or one that does not decode: reported and
    traced again)."""
    try:
        found = read_signed(_path(cache_key), cache_key, "graph", WHAT, parse=_decode_entry)
    except MissingOp as reason:
        _log().info("%s %s is not used: %s", WHAT, _path(cache_key), reason)
        return None
    if found is None:
        return None
    _stats.count("trace_hits")
    return found


def _plain_outputs(meta: Any) -> bool:
    """Whether every output of AOTAutograd's trace has a type its runtime does nothing for (its
    `NoopAliasHandler`): a fresh tensor, a view of an intermediate it hides from autograd
    (`unsafe_view_alias`; a training forward returns it through `aten._unsafe_view`) or a custom
    autograd function's view output."""
    from torch._functorch._aot_autograd.schemas import OutputType

    plain = (OutputType.non_alias, OutputType.unsafe_view_alias, OutputType.custom_function_view)
    return all(o.output_type in plain for o in meta.output_info)


def _wrapper_refusal(meta: Any, graph: fx.GraphModule, inputs: int) -> str | None:
    """Why a trace needs AOTAutograd runtime wrappers that neither `runner` nor `autograd_runner`
    replays, for inference and training traces alike (None: it needs none of these)."""
    if not _plain_outputs(meta):
        return "an output aliases an input or another output"
    if meta.num_intermediate_bases or meta.tokens or meta.grad_enabled_mutation is not None:
        return "it needs AOTAutograd's runtime wrappers (bases, effect tokens or a grad-mode change)"
    if getattr(meta, "num_graphsafe_rng_states", 0) or meta.is_rng_op_functionalized:
        return "it functionalises random state"
    if not _plain_tensor_metas(meta.subclass_inp_meta):
        return "a tensor subclass input"
    placeholders = sum(1 for node in graph.graph.nodes if node.op == "placeholder")
    if placeholders != inputs or len(meta.input_info) != inputs:
        return "the traced graph takes other inputs than the Dynamo graph"
    return None


def _plain_tensor_metas(metas: Sequence) -> bool:
    return all(isinstance(m, int) or type(m).__name__ == "PlainTensorMeta" for m in metas)


def _plainness(meta: Any, graph: fx.GraphModule, inputs: int) -> tuple[str | None, list[int]]:
    """(why AOTAutograd's trace needs runtime wrappers we do not replay, or None; the inputs whose data
    it mutates, in the order the graph returns their new values first: `runner` copies them back, as
    AOTAutograd's epilogue does for a data-only mutation)."""

    if meta is None:
        return "no AOTAutograd metadata", []
    if any(i.mutates_metadata or i.mutates_storage_metadata or i.mutation_inductor_storage_resize
           for i in meta.input_info):
        return "it mutates an input's sizes, strides or storage", []
    mutated = list(meta.mutated_inp_runtime_indices)
    if meta.keep_input_mutations or any(not meta.input_info[i].mutates_data for i in mutated) or \
            sum(i.mutates_data for i in meta.input_info) != len(mutated):
        return "its input mutations are not returned as outputs", []
    reason = _wrapper_refusal(meta, graph, inputs)
    return reason, [] if reason is not None else mutated


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
    inputs, the graph's first outputs, copied into them; the other outputs as a list). AOTAutograd
    takes its inference path under grad mode only when no input that requires grad is mutated there,
    so the copies, made with grad mode off, record no autograd history, as AOTAutograd's."""
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


# ------------------------------------------------------------------------------------------- training
def _training_autograd(meta: Any, graph: fx.GraphModule, inputs: int) -> dict:
    """The `Autograd` (as JSON) of a training trace whose runtime is a plain autograd function of the
    Dynamo graph's `inputs` inputs; Uncacheable when it needs more of AOTAutograd's runtime wrappers."""

    if meta is None:
        raise Uncacheable("no AOTAutograd metadata")
    if any(i.mutates_data or i.mutates_metadata or i.mutates_storage_metadata or
           i.mutation_inductor_storage_resize for i in meta.input_info):
        raise Uncacheable("a training graph that mutates an input")
    reason = _wrapper_refusal(meta, graph, inputs)
    if reason is not None:
        raise Uncacheable(reason)
    if meta.num_backward_tokens:
        raise Uncacheable("its backward takes effect tokens")
    if not (_plain_tensor_metas(meta.subclass_fw_graph_out_meta) and
            _plain_tensor_metas(meta.subclass_tangent_meta)):
        raise Uncacheable("a tensor subclass output or gradient")
    if meta.num_symints_saved_for_bw or meta.num_opaque_objects_saved_for_bw or \
            meta.num_tensors_saved_with_no_vc_check or \
            meta.indices_of_inputs_that_requires_grad_with_mutations_in_bw:
        raise Uncacheable("its backward takes sizes, objects or tensors saved without version checks")
    _, returned = _arity(graph)
    if meta.num_forward_returns != meta.num_outputs or returned < meta.num_outputs:
        raise Uncacheable("the forward graph returns more than the outputs and saved tensors")
    tangents = [i for i, o in enumerate(meta.output_info)
                if isinstance(o.raw_type, type) and issubclass(o.raw_type, torch.Tensor)
                and o.requires_grad_for_backward]
    if len(meta.subclass_tangent_meta) != len(tangents):
        raise Uncacheable("its gradients do not match its differentiable outputs")
    layouts = []
    for tangent in meta.subclass_tangent_meta:
        layout = tangent.memory_format
        if layout is None:
            layouts.append([None, [], []])
        elif layout.memory_format is not None:
            layouts.append([_name(layout.memory_format), [], []])
        elif any(not isinstance(n, int) for n in (*layout.size, *layout.stride)):
            raise Uncacheable("symbolic sizes")
        else:
            layouts.append([None, list(layout.size), list(layout.stride)])
    return {"outputs": meta.num_outputs, "saved": returned - meta.num_outputs,
            "differentiable": [bool(o.requires_grad) for o in meta.output_info], "tangents": tangents,
            "layouts": layouts, "unsafe_views": list(meta.unsafe_view_out_indices)}


def forward_entry(graph: fx.GraphModule, inputs: int) -> dict | None:
    """At the forward compile of a training trace (before our passes rewrite `graph`): the entry's
    forward part, kept until the backward compiles (`store_training`); None when the trace is not
    cached (counted, logged)."""
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    try:
        autograd = _training_autograd(context.fw_metadata if context else None, graph, inputs)
        return {**encode(graph, training=True), "mutated": [], "autograd": autograd}
    except Exception as why:  # noqa: BLE001 - a trace we cannot encode is compiled, never failed
        _not_cached(why)
        return None


def store_training(cache_key: str, forward: dict, backward: fx.GraphModule, inputs: int) -> None:
    """At the (lazy, first-backward) compile of the backward graph: store the training trace, its
    forward part from `forward_entry` (whose graph takes the Dynamo graph's `inputs` inputs), under
    `cache_key`."""
    try:
        data = {**forward, "backward": encode(backward, training=True)}
        # (they connect as recorded: the forward graph returns the outputs and the saved tensors)
        autograd = forward["autograd"]
        _decode_autograd(autograd, (inputs, autograd["outputs"] + autograd["saved"]), _arity(backward))
    except Exception as why:  # noqa: BLE001 - a trace we cannot encode is compiled, never failed
        _not_cached(why)
        return
    write_signed(_path(cache_key), cache_key, "graph", data, WHAT, then="the next compile traces again")
    _stats.count("traces_stored")


def _coerced(gradient: Any, layout: tuple) -> Any:
    """`gradient` in the layout its backward graph was traced for (AOTAutograd's
    `coerce_to_expected_memory_format`): the memory format named, or the exact sizes and strides."""
    name, size, stride = layout
    if not isinstance(gradient, torch.Tensor):
        return gradient
    if name is not None:
        memory_format = getattr(torch, name)
        return gradient if gradient.is_contiguous(memory_format=memory_format) else \
            gradient.contiguous(memory_format=memory_format)
    if not size or (tuple(gradient.shape) == size and gradient.stride() == stride):
        return gradient
    restrided = torch.empty_strided(size, stride, dtype=gradient.dtype, device=gradient.device)
    restrided.copy_(gradient)
    return restrided


class _OnceDifferentiable(torch.autograd.Function):
    """The gradients of a backward run under `create_graph=True`: computed by `compute(arguments)`
    inside this function, so they carry a grad_fn whose backward raises, as AOTAutograd's double
    backward does (`anchor`, a tensor that requires grad, makes autograd record the call)."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, compute: Callable, arguments: list) -> tuple:
        return tuple(compute(arguments))

    @staticmethod
    def backward(ctx: Any, *gradients: Any) -> None:
        raise RuntimeError("torch.compile(backend='rbln') does not support double backward through a "
                           "compiled graph (as torch.compile with aot_autograd); compute higher-order "
                           "gradients eagerly")


def autograd_runner(forward: Callable, compile_backward: Callable[[], Callable], meta: Autograd) -> Callable:
    """The Dynamo-facing callable of a cached training trace: an autograd function whose forward runs the
    compiled forward graph (saving the tensors it returns after the outputs) and whose backward runs the
    backward graph, compiled on the first backward (`compile_backward`) as AOTAutograd compiles it
    lazily. Double backward raises, as AOTAutograd's does."""
    count, fixed = meta.outputs, [i for i, d in enumerate(meta.differentiable) if not d]
    tangents = list(zip(meta.tangents, meta.layouts, strict=True))
    unsafe_views, unsafe_view = meta.unsafe_views, torch.ops.aten._unsafe_view
    compiled: list[Callable] = []

    def backward_graph(arguments: list) -> Any:
        if not compiled:
            compiled.append(compile_backward())
        return compiled[0](*arguments)

    class CachedTrainingTrace(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *args: Any) -> tuple:
            results = forward(*args)
            results = list(results) if isinstance(results, (list, tuple)) else [results]
            ctx.save_for_backward(*results[count:])
            outputs = results[:count]
            for i in unsafe_views:
                outputs[i] = unsafe_view(outputs[i], outputs[i].shape)
            ctx.mark_non_differentiable(*(outputs[i] for i in fixed if isinstance(outputs[i], torch.Tensor)))
            return tuple(outputs)

        @staticmethod
        def backward(ctx: Any, *gradients: Any) -> tuple:
            arguments = [*ctx.saved_tensors, *(_coerced(gradients[i], layout) for i, layout in tangents)]
            if torch.is_grad_enabled():  # create_graph=True
                anchor = torch.empty(0, requires_grad=True)
                return _OnceDifferentiable.apply(anchor, backward_graph, arguments)
            return tuple(backward_graph(arguments))

    def run(*args: Any) -> list:
        return list(CachedTrainingTrace.apply(*args))

    return run
