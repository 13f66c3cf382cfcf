"""Rewrite an ATen FX graph so that each fused group is one call of its FusedKernel.

Nodes outside groups are copied unchanged (aten calls that dispatch to the registry). A group is emitted
as ``outs = fused_xxx(*inputs)`` followed by ``getitem``s; the units (nodes and groups) are ordered
topologically, keeping the original order where the dependencies allow (the partition guarantees the
unit graph is acyclic).
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Callable, Sequence

import torch.fx as fx

from .codegen import KernelSpec

__all__ = ["fuse_graph"]


def _as_function(runner: Callable, name: str) -> Callable:
    def call(*inputs):
        return runner(*inputs)

    call.__name__ = call.__qualname__ = name
    call.rbln_fused_runner = runner  # type: ignore[attr-defined]  # (compiler.program launches it directly)
    return call


def fuse_graph(
    gm: fx.GraphModule, specs: Sequence[KernelSpec], runners: Sequence[Callable]
) -> fx.GraphModule:
    nodes = {node.name: node for node in gm.graph.nodes}
    position = {node: i for i, node in enumerate(gm.graph.nodes)}
    owner: dict[fx.Node, int] = {}
    for index, spec in enumerate(specs):
        for name in spec.nodes:
            owner[nodes[name]] = index

    def unit(node: fx.Node):
        group = owner.get(node)
        return ("group", group) if group is not None else ("node", node.name)

    members: dict[tuple, list[fx.Node]] = {}
    for node in gm.graph.nodes:
        members.setdefault(unit(node), []).append(node)
    deps: dict[tuple, set[tuple]] = {u: set() for u in members}
    users: dict[tuple, set[tuple]] = {u: set() for u in members}
    for u, group_nodes in members.items():
        for node in group_nodes:
            for operand in node.all_input_nodes:
                v = unit(operand)
                if v != u:
                    deps[u].add(v)
                    users[v].add(u)
    first = {u: min(position[n] for n in group_nodes) for u, group_nodes in members.items()}
    ready = [(first[u], u) for u, d in deps.items() if not d]
    heapq.heapify(ready)
    remaining = {u: len(d) for u, d in deps.items()}
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    emitted = 0
    while ready:
        _, u = heapq.heappop(ready)
        emitted += 1
        if u[0] == "node":
            node = nodes[u[1]]
            env[node] = graph.node_copy(node, lambda n: env[n])
        else:
            spec = specs[u[1]]
            call = graph.call_function(_as_function(runners[u[1]], spec.name),
                                       tuple(env[nodes[name]] for name in spec.inputs))
            for j, name in enumerate(spec.outputs):
                env[nodes[name]] = graph.call_function(operator.getitem, (call, j))
        for v in users[u]:
            remaining[v] -= 1
            if remaining[v] == 0:
                heapq.heappush(ready, (first[v], v))
    if emitted != len(members):
        raise RuntimeError("fused graph has a cycle (partition bug); compile this graph eagerly")
    graph.lint()
    return fx.GraphModule(gm, graph)
