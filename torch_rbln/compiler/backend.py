"""The ``rbln`` torch.compile backend: options, AOTAutograd wiring, graph compilation, fallbacks.

``torch.compile(model, backend="rbln", options={...})`` reaches :func:`rbln_backend` through the
``torch_dynamo_backends`` entry point. Where Rebellions' rebel-compiler is installed, the graph goes to
its own Dynamo backend with the same options; otherwise AOTAutograd (core ATen decompositions) hands
each forward / backward / inference graph to :func:`compile_graph`, which fuses pointwise chains and
row reductions into generated DSL kernels and leaves every other node as an aten call (the registry).

* ``tensor_parallel_size``: default the logical device's group size, an explicit value wins
  (SPEC-device.md); the fused kernels launch over that many NPUs. TP failover follows
  ``TORCH_RBLN_USE_TP_FAILOVER``.
* Unknown options are passed through (to rebel-compiler where present) with a WARNING.
* A graph that fails to compile runs eagerly on the registry after a WARNING, unless
  ``TORCH_RBLN_DISABLE_FALLBACK=compile_error`` (then an ERROR is logged and the error raised).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from torch_rbln import config
from torch_rbln import profiling as _profiling
from torch_rbln.log import get_logger

from . import _stats, cache, trace_cache
from .codegen import KernelSpec, generate
from .fused import FusedKernel, subgraph_module
from .graph import fuse_graph
from .lowering import Unsupported, clones_for_cats_of_one_tensor, copies_for_lifted_constants, decompositions
from .partition import partition
from .program import Program

__all__ = ["CompileOptions", "rbln_backend", "compile_graph", "CompiledGraph", "parse_options"]



def _log() -> logging.Logger:
    """The ``torch_rbln.compiler`` logger (configured on first use, per SPEC-device.md "Logging")."""
    return get_logger("compiler")
KNOWN_OPTIONS = frozenset({"tensor_parallel_size"})
# Whether graphs on one NPU run as generated programs (`program.Program`) from their third call; False:
# node by node on the fused graph (benchmarks/compile.py compares the two)
PROGRAMS = True
_names = itertools.count()


@dataclass(frozen=True)
class CompileOptions:
    """Parsed ``options=`` of torch.compile: what this backend uses, and what it passes through."""

    tensor_parallel_size: int | None = None
    passthrough: dict[str, Any] = field(default_factory=dict)


def parse_options(options: dict | None) -> CompileOptions:
    options = dict(options or {})
    tp = options.pop("tensor_parallel_size", None)
    if tp is not None:
        from torch_rbln.tp import check_tp

        check_tp(tp, "torch.compile(backend='rbln'): tensor_parallel_size")
    for name in sorted(options):
        _log().warning(
            "torch.compile(backend='rbln'): option %r is not used by this backend; it is passed through "
            "unchanged (to rebel-compiler where installed). Known options: %s",
            name, ", ".join(sorted(KNOWN_OPTIONS)),
        )
    return CompileOptions(tp, options)


def _rebel_backend() -> Callable | None:
    """rebel-compiler's own Dynamo backend when that package is installed (lazy; thin by design)."""
    if importlib.util.find_spec("rebel") is None:
        return None
    for entry in importlib.metadata.entry_points(group="torch_dynamo_backends"):
        if entry.name == "rbln" and not entry.value.startswith("torch_rbln"):
            return entry.load()
    return None


def rbln_backend(gm: fx.GraphModule, example_inputs: Sequence, *, options: dict | None = None,
                 mode: str | None = None) -> Callable:
    """Dynamo backend: returns the compiled callable for one captured graph."""
    parsed = parse_options(options)
    delegate = _rebel_backend()
    if delegate is not None:
        _log().info("torch.compile(backend='rbln'): delegating to rebel-compiler")
        return delegate(gm, example_inputs, options=dict(options or {}))
    if mode not in (None, "default"):
        _log().warning("torch.compile(backend='rbln'): mode=%r has no effect on this backend", mode)
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    trace_key = trace_cache.key(gm, example_inputs)  # None: this graph's trace is not cached
    if trace_key is not None:
        cached = trace_cache.lookup(trace_key)
        if cached is not None:
            return _cached_trace(cached, trace_key, parsed)
    held: dict[str, dict] = {}  # a training trace's forward part, until its backward compiles

    def compiler(phase: str):
        def compile_phase(graph: fx.GraphModule, inputs: Sequence) -> Callable:
            if trace_key is not None:
                if phase == "inference":
                    trace_cache.store_if_plain(trace_key, graph, len(example_inputs))
                elif phase == "forward":
                    forward = trace_cache.forward_entry(graph, len(example_inputs))
                    if forward is not None:
                        held["forward"] = forward
                elif "forward" in held:
                    trace_cache.store_training(trace_key, held.pop("forward"), graph, len(example_inputs))
            # (the trace key determines this graph: the graph cache keys it so, on a miss as on a hit)
            identity = None if trace_key is None else f"{trace_key}/{phase}"
            return make_boxed_func(compile_graph(graph, inputs, parsed, phase, identity))

        return compile_phase

    backend = aot_autograd(
        fw_compiler=compiler("forward"),
        bw_compiler=compiler("backward"),
        inference_compiler=compiler("inference"),
        decompositions=decompositions(),
    )
    return backend(gm, example_inputs)


def _cached_trace(cached: trace_cache.Trace, trace_key: str, options: CompileOptions) -> Callable:
    """The compiled callable of a cached trace: its inference graph, or its forward graph with the
    backward compiled on the first backward. The trace key names each graph for the graph cache."""
    if cached.backward is None:
        return trace_cache.runner(compile_graph(cached.graph, cached.inputs, options, "inference",
                                                f"{trace_key}/inference"), cached.mutated)
    backward, backward_inputs = cached.backward
    forward = compile_graph(cached.graph, cached.inputs, options, "forward", f"{trace_key}/forward")

    def compile_backward() -> Callable:
        return compile_graph(backward, backward_inputs, options, "backward", f"{trace_key}/backward")

    return trace_cache.autograd_runner(forward, compile_backward, cached.autograd)


def _device_index(example_inputs: Sequence) -> int | None:
    for value in example_inputs:
        if isinstance(value, torch.Tensor) and value.device.type == "rbln":
            return value.device.index or 0
    return None


def _static(example_inputs: Sequence) -> bool:
    for value in example_inputs:
        if isinstance(value, torch.SymInt):
            return False
        if isinstance(value, torch.Tensor):
            if any(not isinstance(s, int) for s in (*value.shape, *value.stride())):
                return False
    return True


class CompiledGraph:
    """One ATen graph, compiled per tensor-parallel size (the tp=1 variant is built on failover)."""

    def __init__(self, gm: fx.GraphModule, example_inputs: Sequence, options: CompileOptions,
                 phase: str, identity: str | None = None) -> None:
        self.gm = gm
        self.identity = identity  # (see `cache.graph_key`)
        self.example_inputs = list(example_inputs)
        self.phase = phase
        self.name = f"rbln_{phase}_graph_{next(_names)}"
        self.device_index = _device_index(example_inputs)
        if self.device_index is not None:
            from torch_rbln.tp import compile_tp_size

            self.tp, self.explicit = compile_tp_size(self.device_index, options.tensor_parallel_size)
        else:  # a CPU graph: fused kernels run on host tensors, tp only as asked
            self.tp = options.tensor_parallel_size or 1
            self.explicit = options.tensor_parallel_size is not None
        self.specs: list[KernelSpec] = []
        self._variants: dict[int, Callable] = {}
        self._variants[self.tp] = self._build(self.tp)

    # ---------------------------------------------------------------- compile
    def _plan(self, tp: int) -> tuple[str, list[KernelSpec], bool]:
        """(graph key, kernel specs, whether they came from the graph cache)."""
        key = cache.graph_key(self.gm, self.example_inputs, tp, self.identity)
        hit = cache.lookup(key)
        if hit is not None:
            specs, where = hit
            try:
                names = {node.name for node in self.gm.graph.nodes}
                for spec in specs:
                    if not set(spec.nodes) | set(spec.inputs) | set(spec.outputs) <= names:
                        raise ValueError("node names do not match the graph")
            except ValueError as error:
                _log().warning("graph cache entry %s does not fit its graph (%s); regenerating it",
                               key[:16], error)
                _stats.count("cache_rebuilds")
            else:
                _stats.count(f"{where}_hits")
                return key, specs, True
        return key, self._generate(key, tp), False

    def _generate(self, key: str, tp: int) -> list[KernelSpec]:
        """Partition the graph and generate its kernels; the result is stored under `key`."""
        specs = []
        for group in partition(self.gm.graph):
            try:
                specs.append(generate(group, tp))
            except Unsupported as reason:
                _log().debug("group %s not fused: %s", [n.name for n in group.nodes], reason)
        _stats.count("kernels_generated", len(specs))
        cache.store(key, specs)
        return specs

    def _fuse(self, specs: list[KernelSpec], tp: int) -> fx.GraphModule:
        _dump(self.name, self.gm, specs)  # (before loading: a kernel that fails to load is dumped too)
        runners = [FusedKernel(spec, tp, functools.partial(subgraph_module, self.gm, spec)) for spec in specs]
        return fuse_graph(self.gm, specs, runners)

    def _build(self, tp: int) -> Callable:
        try:
            key, specs, cached = self._plan(tp)
            try:
                module = self._fuse(specs, tp)
            except Exception as error:  # noqa: BLE001 - a cached entry that cannot be loaded is rebuilt
                if not cached:
                    raise
                # Why: an entry written by another build of the DSL or of this compiler (same version
                # string) may hold kernel sources that no longer load; regenerating beats running the
                # whole graph eagerly from now on.
                _log().warning("graph cache entry %s could not be loaded (%s: %s); regenerating it",
                               key[:16], type(error).__name__, error)
                _stats.count("cache_rebuilds")
                specs = self._generate(key, tp)
                module = self._fuse(specs, tp)
            if PROGRAMS and tp == 1 and self.device_index is not None:
                module = Program(module, self.device_index, self.name)
            self.specs = specs
            _stats.count("graphs_compiled")
            return module
        except Exception as error:  # noqa: BLE001 - the documented fallback: run the graph eagerly
            if config.fallback_disabled("compile_error"):
                _log().error("torch.compile(backend='rbln') failed to compile %s: %s: %s", self.name,
                           type(error).__name__, error)
                raise
            _log().warning(
                "torch.compile(backend='rbln') could not compile %s (%s: %s); it runs eagerly on the "
                "registry. Set TORCH_RBLN_DISABLE_FALLBACK=compile_error to raise instead.",
                self.name, type(error).__name__, error,
            )
            _stats.count("eager_graphs")
            return self.gm

    def variant(self, tp: int) -> Callable:
        module = self._variants.get(tp)
        if module is None:
            module = self._variants[tp] = self._build(tp)
        return module

    # ---------------------------------------------------------------- run
    def __call__(self, *args: Any) -> Any:
        if _profiling.active():
            with _profiling.region("graph", self.name, phase=self.phase, tp=self.tp):
                return self._call(args)
        return self._call(args)

    def _call(self, args: tuple) -> Any:
        if self.tp == 1 or self.device_index is None:
            return self.variant(self.tp)(*args)
        from torch_rbln.tp import run_with_tp_failover

        used: list[int] = []

        def run(tp: int) -> Any:
            used.append(tp)
            return self.variant(tp)(*args)

        result = run_with_tp_failover(self.name, run, device_index=self.device_index, tp=self.tp,
                                      explicit=self.explicit)
        if used[-1] != self.tp:  # failed over: stay on tp=1 from now on
            _stats.count("tp_failovers")
            self.tp = used[-1]
        return result


def _shape_key(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.stride(), value.dtype, value.device)
    return value


class PerShapeGraph:
    """A graph with symbolic sizes (Dynamo's automatic dynamic shapes, or ``dynamic=True``): each call's
    concrete shapes get their own static graph (re-traced with ``make_fx``) and :class:`CompiledGraph`,
    so kernels are still planned for static shapes, one graph per shape as upstream."""

    def __init__(self, gm: fx.GraphModule, options: CompileOptions, phase: str) -> None:
        self.gm = gm
        self.options = options
        self.phase = phase
        self._graphs: dict[tuple, Callable] = {}

    def _specialize(self, args: Sequence) -> Callable:
        from torch.fx.experimental.proxy_tensor import make_fx

        try:
            static = make_fx(self.gm, tracing_mode="fake")(*args)
            example = [node.meta.get("val") for node in static.graph.nodes if node.op == "placeholder"]
        except Exception as error:  # noqa: BLE001 - the documented fallback: run the graph eagerly
            if config.fallback_disabled("compile_error"):
                raise
            _log().warning("torch.compile(backend='rbln') could not specialise a dynamic-shape graph "
                           "(%s: %s); it runs eagerly on the registry", type(error).__name__, error)
            _stats.count("eager_graphs")
            return self.gm
        _log().debug("specialising a dynamic-shape %s graph to %s", self.phase,
                     [tuple(v.shape) for v in example if isinstance(v, torch.Tensor)])
        return CompiledGraph(static, example, self.options, self.phase)

    def __call__(self, *args: Any) -> Any:
        key = tuple(_shape_key(a) for a in args)
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = self._specialize(args)
        return graph(*args)


def compile_graph(gm: fx.GraphModule, example_inputs: Sequence, options: CompileOptions | None = None,
                  phase: str = "inference", identity: str | None = None) -> Callable:
    """Compile one ATen graph (from AOTAutograd) into a callable taking the graph's inputs (`identity`:
    a name that determines the graph and its inputs, see `cache.graph_key`)."""
    options = options or CompileOptions()
    copies_for_lifted_constants(gm)
    clones_for_cats_of_one_tensor(gm)
    if not _static(example_inputs):
        return PerShapeGraph(gm, options, phase)
    return CompiledGraph(gm, example_inputs, options, phase, identity)


def _dump(name: str, gm: fx.GraphModule, specs: list[KernelSpec]) -> None:
    """With TORCH_RBLN_DUMP_KERNELS=<dir>: each fused kernel's source and the graph it came from."""
    directory = config.get("TORCH_RBLN_DUMP_KERNELS")
    if not directory:
        return
    from pathlib import Path

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    nodes = {node.name: node for node in gm.graph.nodes}
    lines = [f"# {name}: the ATen graph, then the nodes each fused kernel computes", gm.code.strip(), ""]
    for spec in specs:
        (root / f"{spec.name}.py").write_text(spec.source)
        group = [f"#   {nodes[n].format_node()}" for n in spec.nodes]
        lines += [f"# {spec.name}: inputs {spec.inputs} -> outputs {spec.outputs}", *group, ""]
        (root / f"{spec.name}.graph.txt").write_text(
            f"# nodes of {name} fused into {spec.name}\n" + "\n".join(group) + "\n"
        )
    (root / f"{name}.graph.py").write_text("\n".join(lines) + "\n")
