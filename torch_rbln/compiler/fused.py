"""Run one fused kernel inside a compiled graph: check the inputs' strides, allocate the outputs, launch.

The kernel is compiled (numba, through the DSL jit) on its first launch. If that fails, the group's ATen
nodes run eagerly on the registry from then on, after a WARNING, unless
``TORCH_RBLN_DISABLE_FALLBACK=compile_error`` (then an ERROR is logged and the error raised). Inputs
whose strides differ from the ones the kernel was planned for (rare: the plan uses the fake tensors'
strides) take the same eager path for that call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import torch
import torch.fx as fx

from torch_rbln import config
from torch_rbln.log import get_logger

from . import _stats
from .codegen import KernelSpec, _contiguous, _differs, load_kernel

__all__ = ["FusedKernel", "subgraph_module"]



def _log() -> logging.Logger:
    """The ``torch_rbln.compiler`` logger (configured on first use, per SPEC-device.md "Logging")."""
    return get_logger("compiler")


def subgraph_module(root: fx.GraphModule, spec: KernelSpec) -> fx.GraphModule:
    """The group's original ATen nodes as a GraphModule (inputs in, outputs out): the eager path."""
    nodes = {node.name: node for node in root.graph.nodes}
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for name in spec.inputs:
        env[nodes[name]] = graph.placeholder(name)
    for name in spec.nodes:
        env[nodes[name]] = graph.node_copy(nodes[name], lambda n: env[n])
    graph.output(tuple(env[nodes[name]] for name in spec.outputs))
    return fx.GraphModule(root, graph)


class FusedKernel:
    """Callable placed in the rewritten graph for one group: ``outputs = kernel(*inputs)``."""

    def __init__(self, spec: KernelSpec, tp: int, eager: Callable[[], Callable[..., Sequence[torch.Tensor]]]
                 ) -> None:
        """`eager` builds the group's eager path (`subgraph_module`) when a call first needs it: building
        a GraphModule per group (Python code generated and compiled for each) took ~0.2 s of a Llama
        graph's compile, for a path that a compiled kernel never takes."""
        self.spec = spec
        self.tp = tp
        self._build_eager = eager
        self._eager: Callable[..., Sequence[torch.Tensor]] | None = None
        self.kernel = load_kernel(spec.name, spec.source)
        self._strides = [tuple(s) for s in spec.input_strides]
        recorded = spec.output_strides or [None] * len(spec.output_shapes)
        # (shape, dtype, strides the kernel writes): the recorded ones where it stores there
        stores = spec.stores_recorded
        self._outputs = [(tuple(shape), getattr(torch, dtype),
                          tuple(stride) if stores and stride is not None else _contiguous(shape))
                         for shape, dtype, stride in zip(spec.output_shapes, spec.output_dtypes, recorded,
                                                         strict=True)]
        self._scalars = list(spec.scalars)
        # outputs the kernel writes row-major though recorded otherwise: (index, shape, strides)
        self._relayout = [(i, shape, tuple(stride)) for i, ((shape, _, _), stride) in
                          enumerate(zip(self._outputs, recorded, strict=True))
                          if stride is not None and not spec.stores_recorded and _differs(shape, stride)]
        self._grid = (spec.grid,)
        # a kernel with fewer programs than NPUs runs on as many NPUs as it has programs
        self.launch_tp = max(1, min(tp, spec.grid))
        self._compiled = False
        self._broken = False
        self._launch_options: dict | None = None
        self.__name__ = spec.name

    def _options(self, device: torch.device) -> dict:
        """Launch options: ``tp=`` only when it differs from what the DSL launcher would pick itself."""
        if self._launch_options is None:
            default = 1
            if device.type == "rbln":
                from torch_rbln.tp import tp_size_for

                default = tp_size_for(device.index or 0)
            options = {"BLOCK": self.spec.block}
            if self.launch_tp != default:
                options["tp"] = self.launch_tp
            self._launch_options = options
        return self._launch_options

    def _allocate(self, device: torch.device) -> list[torch.Tensor]:
        if device.type == "rbln":
            from torch_rbln import _memory

            index = device.index or 0
            return [_memory.empty_strided(list(shape), list(strides), dtype, index)
                    for shape, dtype, strides in self._outputs]
        return [torch.empty_strided(shape, strides, dtype=dtype, device=device)
                for shape, dtype, strides in self._outputs]

    def _run_eager(self, inputs: Sequence[torch.Tensor], reason: str) -> list[torch.Tensor]:
        _stats.count("eager_group_calls")
        _log().debug("fused kernel %s: running its %d ops eagerly (%s)", self.spec.name, len(self.spec.nodes),
                   reason)
        if self._eager is None:
            self._eager = self._build_eager()
        return list(self._eager(*inputs))

    def _compile(self, args: list, options: dict) -> bool:
        """Compile on first use; False when the kernel cannot be compiled and the fallback is allowed."""
        try:
            self.kernel.warmup(*args, grid=self._grid, **options)
        except Exception as error:  # noqa: BLE001 - any compiler failure takes the documented fallback
            if config.fallback_disabled("compile_error"):
                _log().error("fused kernel %s failed to compile: %s: %s", self.spec.name,
                             type(error).__name__, error)
                raise
            _log().warning(
                "fused kernel %s failed to compile (%s: %s); its %d ops (%s) run eagerly on the registry. "
                "Set TORCH_RBLN_DISABLE_FALLBACK=compile_error to raise instead.",
                self.spec.name, type(error).__name__, error, len(self.spec.nodes), ", ".join(self.spec.nodes),
            )
            _stats.count("compile_errors")
            self._broken = True
            return False
        self._compiled = True
        return True

    def launch(self, args: list, options: dict) -> None:
        """One launch of the kernel over its grid (tensor-parallel when ``tp`` > 1)."""
        self.kernel[self._grid](*args, **options)

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        if self._broken:
            return self._run_eager(inputs, "compile error")
        for tensor, stride in zip(inputs, self._strides, strict=True):
            if tensor.stride() != stride:
                return self._run_eager(inputs, f"strides {tuple(tensor.stride())} instead of {stride}")
        device = next((t.device for t in inputs if t.device.type != "cpu"), inputs[0].device)
        outputs = self._allocate(device)
        args = [*inputs, *outputs, *self._scalars]
        options = self._options(device)
        if not self._compiled and not self._compile(args, options):
            return self._run_eager(inputs, "compile error")
        self.launch(args, options)
        for i, shape, stride in self._relayout:
            outputs[i] = torch.empty_strided(shape, stride, dtype=outputs[i].dtype,
                                             device=outputs[i].device).copy_(outputs[i])
        _stats.count("fused_launches")
        _stats.count(f"fused_launches_tp{self.tp}")
        _stats.count_kernel(self.spec.name)
        return outputs

