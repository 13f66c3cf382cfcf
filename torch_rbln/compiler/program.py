"""A compiled graph as one generated Python function: kernels launched by address, views as address
arithmetic, calls only where nothing better is known.

Why: run node by node (the fused ``GraphModule``), a graph pays for every aten node a dispatcher round
trip, the registry's per-call checks and an allocation through the allocator's Python entry; a view alone
(``view``, ``permute``, ``split``) costs 6-10 us on this device, more than many kernels of a small model.
:class:`Program` runs the fused graph normally on its first two calls (the first compiles kernels and
lets the autotuner choose matmul tiles, the second keeps the direct launches), recording every node's
value on the second, then generates one function in which

* a **view** (``view``, ``permute``, ``split`` + ``getitem``, ...) is no code at all: its value is its root
  tensor's address plus an offset known from the graph's fake tensors (``node.meta["val"]``); a view is
  made a tensor (``as_strided``) only where a call or the graph's output needs one;
* a **fused kernel** and every node whose registry plan describes its kept launch (``Plan.direct``:
  the matmul family) is an allocation of its output, with exactly the sizes and strides the graph
  records, and a call of the kernel's ``unchecked.by_address`` launch on a grid decided here;
* every other node stays a call of its aten overload (through the registry): counted
  (``program_call_nodes``) and listed by ``Program.report``.

Guards are checked once per call: the requested DSL backend, the device's tensor-parallel size (1) and
every tensor input's strides; a call that fails them runs the fused graph as before. NaN/Inf are
checked where the fused graph checks them: a directly launched node scans the operands its registry plan
scans (`Plan.scanned`; none for the exact matmul family and the fused attention op), a call goes through
the registry, which scans as eagerly, and fused kernels read them as IEEE arithmetic does, in the program
and in the fused graph alike; a call whose scan finds one reruns on the fused graph. A kernel fault
(an out-of-bounds access) makes that call rerun on the fused graph, whose checked launches report it.
Intermediate tensors are released after their last use; the buffers only kernels see are allocated
once, when the program is generated, their addresses constants of it (`_Builder.source`).
"""

from __future__ import annotations

import builtins
import logging
import math
import operator
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx

from torch_rbln.log import get_logger
from torch_rbln.registry._finite_scan import is_dense_permutation
from torch_rbln.registry._memo import BoundedMemo

from . import _stats
from .codegen import _contiguous
from .fused import FusedKernel

__all__ = ["Program", "VIEW_OPS"]

aten = torch.ops.aten

# ops whose result is a view of their first operand (metadata only)
VIEW_OPS = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default,
    aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.expand.default,
    aten.t.default, aten.transpose.int, aten.slice.Tensor, aten.select.int, aten.alias.default,
    aten.detach.default, aten.as_strided.default, aten.view_as.default, aten.diagonal.default,
    aten.unflatten.int, aten.flatten.using_ints,
})
# ops returning several views of their first operand (picked by getitem)
MULTI_VIEW_OPS = frozenset({aten.split_with_sizes.default, aten.split.Tensor, aten.unbind.int,
                            aten.chunk.default})


# A planned float32 matmul of at least this many multiply-adds runs as one tile (`_Builder.one_tile`),
# when the tile (M x N rounded up to powers of 2) is at most ONE_TILE_MAX_AREA elements (its float32
# accumulator: 1 MiB) and K rounded up at most ONE_TILE_MAX_K.
ONE_TILE_MIN_VOLUME = 1 << 18
ONE_TILE_MAX_AREA = 1 << 18
ONE_TILE_MAX_K = 4096
# One-tile specialisations compared with the registry's result in this process (`_Builder.one_tile`):
# (kernel, tile, scalar arguments, operand layouts) -> the kept launch that matched. Why: the comparison
# launches the whole product once more and copies both results to the host; Llama's 29 projections have
# 4 geometries, and those launches were ~0.3-0.5 s of CPU in generating its program (most of it in a
# fresh process). Same specialisation, same geometry and scalars: only the values differ.
_ONE_TILE_CHECKED: dict[tuple, Any] = BoundedMemo(1024)


def _layout(value: Any) -> Any:
    """A tensor's geometry as a hashable key (None stays None)."""
    if value is None:
        return None
    return (tuple(value.shape), tuple(value.stride()), value.dtype, value.device.type)


def _log() -> logging.Logger:
    return get_logger("compiler")


class _NotAProgram(Exception):
    """This graph keeps running node by node (why: for DEBUG logs)."""


class _Fault(Exception):
    """A directly launched kernel reported a fault: rerun the call on the fused graph."""


def _span(value: torch.Tensor) -> int:
    """Elements reachable from a tensor's first element (what a by-address launch may read)."""
    if value.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(value.shape, value.stride(), strict=True))


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same sizes, and the same strides along every dim of more than one element."""
    return tuple(a.shape) == tuple(b.shape) and all(
        size == 1 or x == y for size, x, y in zip(a.shape, a.stride(), b.stride(), strict=True))


class _Tensor:
    """A value of the program: a tensor variable (`root` None), or a view of the tensor variable `root`
    at `offset` elements from it with the fake tensor's sizes and strides (`meta`)."""

    __slots__ = ("name", "meta", "root", "offset", "address", "escapes")

    def __init__(self, name: str | None, meta: torch.Tensor, root: _Tensor | None = None, offset: int = 0):
        self.name, self.meta, self.root, self.offset = name, meta, root, offset
        self.address: str | None = None
        self.escapes = True  # (views: whether the graph's output may alias it)


class _Builder:
    """Generates the program's source from the fused graph and one call's recorded values."""

    def __init__(self, gm: fx.GraphModule, values: dict[fx.Node, Any], index: int) -> None:
        self.gm, self.values, self.index = gm, values, index
        self.lines: list[tuple[str, tuple[str, ...], str]] = []  # (statement, names it reads, kind)
        self.namespace: dict[str, Any] = {}
        self.env: dict[fx.Node, Any] = {}  # node -> _Tensor, or ("expr", source) for other values
        self.counter = Counter()
        self.calls: Counter[str] = Counter()
        self.scanned: set = set()  # values (names, or a view's root and layout) checked for NaN/Inf
        self.device_counts: Counter[str] = Counter()
        self.kernels: Counter[str] = Counter()
        self.guards: list[str] = []
        self._names = 0
        self.allocs: dict[str, tuple] = {}  # buffer variable -> (shape, strides, dtype)
        self.alloc_lines: dict[str, int] = {}  # buffer variable -> the position of its allocation
        self.view_lines: dict[str, tuple] = {}  # view variable -> (its position, root variable, meta, offset)
        self.constants: set[fx.Node] = set()  # get_attr nodes and nodes computed from them only
        self.escaping = _escaping(gm.graph)

    # ---------------------------------------------------------------- helpers
    def fresh(self, prefix: str) -> str:
        self._names += 1
        return f"{prefix}{self._names}"

    def const(self, value: Any, prefix: str = "k") -> str:
        name = self.fresh(prefix)
        self.namespace[name] = value
        return name

    def emit(self, statement: str, reads: Sequence[str] = (), kind: str = "other") -> None:
        """One statement; `kind` "launch", "scan", "pointer" or "alloc" for statements that only pass
        addresses to kernels or allocate (the memory plan may reuse buffers read by those alone)."""
        self.lines.append((statement, tuple(reads), kind))

    def materialise(self, value: _Tensor) -> str:
        """A variable holding `value` as a tensor (a view is made with `as_strided` once)."""
        if value.name is None:
            root = self.materialise(value.root)
            name = self.fresh("v")
            meta = value.meta
            # a view only calls see: the CPU view kernel straight (what the rbln one redispatches to,
            # a third of its cost); one the output may alias: through ADInplaceOrView too, so that it is
            # a view of its base as AOTAutograd expects of an output that aliases an intermediate (the
            # program's tensors come from kernels: none requires grad, so autograd has nothing to record)
            # (a base that requires grad, an input's, takes the view op, which autograd sees)
            geometry = (f"{tuple(meta.shape)}, {tuple(meta.stride())}, "
                        f"{root}.storage_offset() + {value.offset}")
            text = f"as_strided_below(CPU_KEYS, {root}, {geometry})"
            if value.escapes:
                text = (f"as_strided({root}, {geometry}) if {root}.requires_grad else "
                        f"as_strided_below(VIEW_KEYS, {root}, {geometry})")
            self.view_lines[name] = (len(self.lines), root, meta, value.offset)
            self.emit(f"{name} = {text}", (root,))
            value.name = name
        return value.name

    def address(self, value: _Tensor) -> str:
        """An expression of the address of `value`'s first element."""
        if value.root is not None:
            base = self.address(value.root)
            return f"{base} + {value.offset * value.meta.element_size()}" if value.offset else base
        if value.address is None:
            constant = self.namespace.get(value.name)
            if isinstance(constant, torch.Tensor):  # a constant of the program: its address is one too
                value.address = str(constant.data_ptr())
                return value.address
            value.address = self.fresh("p")
            self.emit(f"{value.address} = {value.name}.data_ptr()", (value.name,), "pointer")
        return value.address

    def render(self, arg: Any) -> str:
        """Source of a call argument: tensors materialised, other values as literals or constants."""
        if isinstance(arg, fx.Node):
            value = self.env[arg]
            if isinstance(value, _Tensor):
                return self.materialise(value)
            return value[1]
        if isinstance(arg, (list, tuple)):
            inner = ", ".join(self.render(a) for a in arg)
            return f"[{inner}]" if isinstance(arg, list) else f"({inner}{',' if len(arg) == 1 else ''})"
        if arg is None or isinstance(arg, (bool, int, str)):
            return repr(arg)
        if isinstance(arg, float) and math.isfinite(arg):
            return repr(arg)
        return self.const(arg)

    def meta_of(self, node: fx.Node) -> Any:
        """The node's recorded value (`meta["val"]`); for the `getitem` of a fused kernel's output, which
        the fused graph adds without one, the layout the kernel stores (its `_Tensor`'s)."""
        meta = node.meta.get("val")
        if meta is None and isinstance(self.env.get(node), _Tensor):
            return self.env[node].meta
        return meta

    def reads(self, text: str) -> tuple[str, ...]:
        return tuple(word for word in _words(text) if word[:1] in "vp" and word[1:].isdigit())

    # ---------------------------------------------------------------- nodes
    def build(self) -> tuple[str, dict[str, Any]]:
        nodes = list(self.gm.graph.nodes)
        for node in nodes:
            schema = getattr(node.target, "_schema", None)
            if node.op == "call_function" and schema is not None and schema.is_mutable:
                # a call that reruns on the fused graph (a NaN operand, a kernel fault) would mutate twice
                raise _NotAProgram(f"the graph mutates a tensor ({node.target})")
        params = []
        for node in nodes:
            if node.op == "placeholder":
                name = self.fresh("v")
                params.append(name)
                meta = node.meta.get("val")
                if isinstance(meta, torch.Tensor) and isinstance(self.values.get(node), torch.Tensor):
                    self.env[node] = _Tensor(name, meta)
                    self.guards.append(f"{name}.stride() != {tuple(meta.stride())}")
                else:
                    self.env[node] = ("expr", name)
            elif node.op == "get_attr":
                self.constants.add(node)
                value = self.values[node]
                name = self.const(value, "c")
                meta = node.meta.get("val")
                if isinstance(value, torch.Tensor) and isinstance(meta, torch.Tensor) and \
                        _same_layout(value, meta):
                    self.env[node] = _Tensor(name, meta)
                else:
                    self.env[node] = ("expr", name)
            elif node.op == "call_function":
                self.call_function(node)
            elif node.op == "output":
                result = self.render(node.args[0])
                self.emit(f"return {result}", self.reads(result))
            else:
                raise ValueError(f"unsupported node {node.op}")
        return self.source(params), self.namespace

    def call_function(self, node: fx.Node) -> None:
        target = node.target
        meta = node.meta.get("val")
        if self.hoist(node):
            return
        if target is aten.cat.default and self.cat_as_copies(node):
            return
        if target is operator.getitem:
            source = self.env.get(node.args[0])
            if isinstance(source, tuple) and source[0] == "outputs":  # a fused kernel's output
                self.env[node] = source[1][node.args[1]]
                return
            if isinstance(source, tuple) and source[0] == "views":
                if self.view(node, source[1]) is not None:
                    return
                self.call(node.args[0], node.args[0].meta.get("val"))  # the split itself, as a call
        if target in VIEW_OPS and isinstance(node.args[0], fx.Node):
            root = self.env.get(node.args[0])
            if isinstance(root, _Tensor) and self.view(node, root) is not None:
                return
        if target in MULTI_VIEW_OPS and isinstance(node.args[0], fx.Node) and \
                isinstance(self.env.get(node.args[0]), _Tensor) and \
                all(user.target is operator.getitem for user in node.users):
            self.env[node] = ("views", self.env[node.args[0]])
            self.counter["views"] += 1
            return
        runner = getattr(target, "rbln_fused_runner", None)
        if runner is not None and self.fused(node, runner):
            return
        if target in (aten.embedding.default, aten.index_select.default) and self.gather(node):
            return
        if isinstance(target, torch._ops.OpOverload) and self.planned(node):
            return
        self.call(node, meta)

    def hoist(self, node: fx.Node) -> bool:
        """A node computed from constants only (an `arange` of positions, a copy of a lifted constant),
        by a deterministic op, whose value never reaches the graph's output: its value from the recorded
        call, kept as a constant of the program."""
        target = node.target
        real, meta = self.values.get(node), node.meta.get("val")
        if not isinstance(target, torch._ops.OpOverload) or target._schema.is_mutable or \
                torch.Tag.nondeterministic_seeded in target.tags or node in self.escaping or \
                not isinstance(real, torch.Tensor) or not isinstance(meta, torch.Tensor) or \
                not _same_layout(real, meta) or \
                not all(source in self.constants for source in node.all_input_nodes):
            return False
        self.env[node] = _Tensor(self.const(real, "c"), meta)
        self.constants.add(node)
        self.counter["hoisted"] += 1
        return True

    def cat_as_copies(self, node: fx.Node) -> bool:
        """`cat` as one tiled copy per non-empty input into its slice of the output, allocated as the
        graph records it (the registry's tiled copy kernel, `_copy_launch`, launched by address; a cat
        along the last dim fuses into its pointwise group instead, and a cat of one non-empty tensor is
        a clone, `lowering.clones_for_cats_of_one_tensor`): a cat in the registry pays its
        dispatch, its checks and a launch per input through the checked path; Llama's RoPE
        (`rotate_half`) makes one per q and k per layer. The copies are made once here on the
        recorded values and checked against the recorded result."""
        tensors, meta = node.args[0], node.meta.get("val")
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        real_out = self.values.get(node)
        if not isinstance(meta, torch.Tensor) or not isinstance(real_out, torch.Tensor) or \
                real_out.device.type != "rbln" or meta.dim() == 0 or \
                not _same_layout(real_out, meta) or not isinstance(tensors, (list, tuple)):
            return False
        dim = dim % meta.dim()
        pieces, start, guards = [], 0, []
        for tensor in tensors:
            value = self.env.get(tensor) if isinstance(tensor, fx.Node) else None
            source = self.meta_of(tensor) if isinstance(tensor, fx.Node) else None
            real = self.values.get(tensor) if isinstance(tensor, fx.Node) else None
            if not isinstance(source, torch.Tensor) or not isinstance(real, torch.Tensor) or \
                    source.dtype != meta.dtype or real.dtype != meta.dtype:
                return False
            if source.numel() == 0:
                continue
            if isinstance(value, tuple) and value[0] == "expr" and tuple(real.shape) == tuple(source.shape) \
                    and real.storage_offset() == 0:
                # a call whose result has other strides than the graph records (the registry's `neg`
                # of a strided view): copied from the layout it has, which a guard checks per call
                source = torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device="meta")
                value = _Tensor(value[1], source)
                guards.append(f"{value.name}.stride() != {tuple(real.stride())} or "
                              f"{value.name}.storage_offset() != 0")
            if not isinstance(value, _Tensor):
                return False
            if source.dim() != meta.dim() or any(a != b for d, (a, b) in enumerate(
                    zip(source.shape, meta.shape, strict=True)) if d != dim):
                return False
            pieces.append((source, value, real, start))
            start += source.shape[dim]
        if start != meta.shape[dim] or not pieces:
            return False
        trial = torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype, device=real_out.device)
        launches = []
        for source, value, real, offset in pieces:
            shape = list(meta.shape)
            shape[dim] = source.shape[dim]
            view = torch.empty_strided(shape, meta.stride(), dtype=meta.dtype, device="meta")
            kept = self._copy_launch(source, real, view, trial.narrow(dim, offset, shape[dim]))
            if kept is None:
                return False
            launches.append((value, view, offset * meta.stride()[dim], kept))
        if not torch.equal(trial.cpu(), real_out.cpu()):
            return False
        if guards:
            self.emit(f"if {' or '.join(guards)}:\n        raise Unplanned()",
                      self.reads(" ".join(guards)))
        out = _Tensor(self.allocate(meta), meta)
        for value, view, offset, (launcher, grid, ints) in launches:
            self.launch(launcher, grid, [value, _Tensor(None, view, out, offset)], ints, node.name)
        self.env[node] = out
        self.counter["planned"] += 1
        from torch_rbln.registry import _copy

        self.device_counts[_copy.NAME] += len(launches)
        return True

    def _copy_launch(self, src_meta: torch.Tensor, real_src: torch.Tensor, dst_meta: torch.Tensor,
                     real_dst: torch.Tensor) -> tuple | None:
        """The registry's tiled copy of `src_meta` into `dst_meta`'s layout, launched once on the real
        tensors (which writes `real_dst`), as (by-address launcher, grid, int arguments); None where
        the kernel cannot take it (more than four dims after merging, ints over 32 bits, a dtype it
        has no specialisation for) or kept no direct launch."""
        from torch_rbln.registry import _copy, _launch
        from torch_rbln.registry.geometry import broadcast_strides, collapse

        if real_src.device.type != "rbln" or dst_meta.dtype not in (torch.float32, torch.float16,
                                                                    torch.bfloat16):
            return None
        shape = list(dst_meta.shape)
        sizes, (src_strides, dst_strides) = collapse(
            shape, [broadcast_strides(src_meta.shape, src_meta.stride(), shape), list(dst_meta.stride())])
        if not sizes or len(sizes) > 4:
            return None
        pad = 4 - len(sizes)
        launch = _copy._tiled(dst_meta.numel(), [1] * pad + sizes, [0] * pad + src_strides,
                              [0] * pad + dst_strides, False)
        if not launch.fits:
            return None
        kernel = _launch.kernel_module("elementwise").tiled_copy_kernel
        key = (dst_meta.dtype, dst_meta.dtype, *launch.constexprs.values())
        _launch.launch(kernel, launch.programs, key, (real_src, real_dst, *launch.ints), launch.constexprs,
                       launch.rows)
        kept = _launch.unchecked(kernel, key)
        if kept is None or not hasattr(kept, "by_address"):
            return None
        return kept.by_address, (launch.programs, launch.rows, 1), launch.ints

    def gather(self, node: fx.Node) -> bool:
        """An embedding lookup (`embedding(weight, indices)`, `index_select(x, dim, indices)`) launched
        by address on the registry's gather kernel (`registry.gather.index_select_launch`): as a call
        it went through the composite embedding, the registry's dispatch, its signature and plan, a
        weight scan and an allocation, two thirds of the demo model's per-call time outside kernels.

        Per call, as the registry does: the indices are range-checked first (one out of range reruns
        the call on the fused graph, whose registry call takes the CPU fallback that raises torch's
        error). The NaN/Inf check reads the result instead of the weight (the gather copies the rows
        it reads, so a result without NaN/Inf holds none of the weight's that it used; a weight row
        with one that no index reads is not used, and the whole weight was a 512K-element scan per
        Llama call); a result with one reruns the call on the fused graph as eagerly. The launch is
        made once here on the recorded values and checked against the recorded result."""
        from torch_rbln.registry import _launch, gather
        from torch_rbln.registry._ops import _k

        args = node.args
        if node.target is aten.embedding.default:
            if len(args) < 2 or any(node.kwargs.values()):
                return False
            source, indices, dim = args[0], args[1], 0
        else:
            if len(args) != 3 or node.kwargs:
                return False
            source, dim, indices = args
        if not isinstance(source, fx.Node) or not isinstance(indices, fx.Node) or type(dim) is not int:
            return False
        weight, index = self.env.get(source), self.env.get(indices)
        meta, real_out = node.meta.get("val"), self.values.get(node)
        real_x, real_i = self.values.get(source), self.values.get(indices)
        if not isinstance(weight, _Tensor) or not isinstance(index, _Tensor) or \
                not isinstance(meta, torch.Tensor) or not isinstance(real_out, torch.Tensor) or \
                not isinstance(real_x, torch.Tensor) or not isinstance(real_i, torch.Tensor) or \
                real_x.device.type != "rbln" or real_i.device.type != "rbln":
            return False
        x_meta, i_meta = weight.meta, index.meta
        if x_meta.dtype not in (torch.float32, torch.float16, torch.bfloat16) or \
                i_meta.dtype not in gather.INDICES or x_meta.dim() == 0 or \
                x_meta.stride() != _contiguous(x_meta.shape) or i_meta.stride() != _contiguous(i_meta.shape) \
                or meta.stride() != _contiguous(meta.shape) or meta.dtype != x_meta.dtype or \
                (node.target is aten.index_select.default and i_meta.dim() > 1) or \
                (node.target is aten.embedding.default and x_meta.dim() != 2):
            return False
        dim %= x_meta.dim()
        count, size = i_meta.numel(), x_meta.shape[dim]
        if count == 0 or x_meta.numel() == 0 or meta.numel() != count * x_meta.numel() // size:
            return False
        g = gather.index_select_launch(x_meta.dtype, i_meta.dtype, tuple(x_meta.shape), dim, count)
        trial = torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype, device=real_out.device)
        _launch.launch(g.kernel, g.programs, g.key, (real_x, real_i, trial, *g.ints), g.keywords, rows=g.rows)
        kept = _launch.unchecked(g.kernel, g.key)
        if kept is None or not hasattr(kept, "by_address") or not torch.equal(trial.cpu(), real_out.cpu()):
            return False
        scan = _k("embedding").in_range_64 if i_meta.dtype is torch.int64 else _k("embedding").in_range_32
        address = self.address(index)
        if indices in self.constants:  # the same indices every call: checked here, once
            if not scan(real_i.data_ptr(), count, size, 0):
                return False
        else:
            check = f"{self.const(scan, 's')}({address}, {count}, {size}, 0)"
            self.emit(f"if not {check}:\n        raise Unplanned()",
                      (*self.reads(address), (index.root or index).name), "scan")
        out = _Tensor(self.allocate(meta), meta)
        self.launch(kept.by_address, (g.programs, g.rows, 1), [weight, index, out], g.ints, node.name)
        self.scan_operands([out])
        self.env[node] = out
        self.counter["planned"] += 1
        from torch_rbln import registry

        self.device_counts[registry.fallback._plan_for(aten.index_select.default).name] += 1
        return True

    def view(self, node: fx.Node, source: _Tensor) -> _Tensor | None:
        """`node` as a view of `source` (address arithmetic), when the recorded call agrees."""
        meta, real = node.meta.get("val"), self.values.get(node)
        root = source if source.root is None else source.root
        if not isinstance(meta, torch.Tensor) or not isinstance(real, torch.Tensor) or \
                meta.dtype != root.meta.dtype:
            return None
        offset = meta.storage_offset() - root.meta.storage_offset()
        root_real = self.values_of(root)
        # (strides compared along dims of more than one element: torch's view of a permuted tensor may
        # give a size-1 dim another stride than the fake tensor, Llama's attention output did)
        if root_real is None or real.data_ptr() != root_real.data_ptr() + offset * real.element_size() or \
                not _same_layout(real, meta):
            return None
        self.env[node] = value = _Tensor(None, meta, root, offset)
        value.escapes = node in self.escaping
        self.counter["views"] += 1
        return value

    def values_of(self, value: _Tensor) -> torch.Tensor | None:
        for node, known in self.env.items():
            if known is value:
                real = self.values.get(node)
                return real if isinstance(real, torch.Tensor) else None
        return None

    def call(self, node: fx.Node, meta: Any) -> None:
        """`node` as a call of its target (aten overloads dispatch to the registry)."""
        target = node.target
        function = self.const(target, "f")
        args = [self.render(a) for a in node.args]
        args += [f"{key}={self.render(value)}" for key, value in node.kwargs.items()]
        name = self.fresh("v")
        text = f"{function}({', '.join(args)})"
        self.emit(f"{name} = {text}", self.reads(text))
        real = self.values.get(node)
        if isinstance(meta, torch.Tensor) and isinstance(real, torch.Tensor) and _same_layout(real, meta):
            self.env[node] = _Tensor(name, meta)
        else:
            self.env[node] = ("expr", name)
        if target is not operator.getitem:
            self.counter["calls"] += 1
            self.calls[str(getattr(target, "__name__", target))] += 1

    def allocate(self, meta: torch.Tensor) -> str:
        name = self.fresh("v")
        self.alloc_lines[name] = len(self.lines)
        self.emit(self._allocation(name, tuple(meta.shape), tuple(meta.stride()), meta.dtype), (), "alloc")
        self.allocs[name] = (tuple(meta.shape), tuple(meta.stride()), meta.dtype)
        return name

    def _allocation(self, name: str, shape: tuple, strides: tuple, dtype: torch.dtype) -> str:
        constant = self.const(dtype, "d")
        if strides == _contiguous(shape) or all(s == 1 for s in shape):
            return f"{name} = empty({list(shape)}, {constant}, {self.index})"
        return f"{name} = empty_strided({list(shape)}, {list(strides)}, {constant}, {self.index})"

    def fold_whole_views(self) -> None:
        """A view made a tensor only to be the graph's output (Llama's logits: the last matmul's
        (128, 1024) buffer viewed as (1, 128, 1024)), of a buffer the program allocates and that nothing
        else sees as a tensor: the buffer is allocated in the view's layout instead, when both cover the
        same dense block, and the view is that tensor. Why: the view's `as_strided` call, between
        kernels that evict the dispatcher's code from the caches, took 11 us of the demo's call and
        80 us of Llama's."""
        for name, (position, root, meta, offset) in self.view_lines.items():
            if root not in self.allocs or offset != 0:
                continue
            shape, strides, dtype = self.allocs[root]
            dense = is_dense_permutation(meta.shape, meta.stride()) and is_dense_permutation(shape, strides)
            if meta.dtype != dtype or meta.numel() != math.prod(shape) or not dense:
                continue
            if any(root in reads and kind == "other" and at != position
                   for at, (_, reads, kind) in enumerate(self.lines)):
                continue  # the buffer is a tensor of its own elsewhere too (kernels see addresses)
            layout = (tuple(meta.shape), tuple(meta.stride()), dtype)
            self.lines[self.alloc_lines[root]] = (self._allocation(root, *layout), (), "alloc")
            self.allocs[root] = layout
            self.lines[position] = (f"{name} = {root}", (root,), "other")
            self.counter["folded_views"] += 1

    def launch(self, launcher: Callable, grid: tuple, tensors: list[_Tensor], values: Sequence[Any],
               label: str) -> None:
        """`launcher(grid, address and span of each tensor, values)`; a fault reruns the call."""
        function = self.const(launcher, "l")
        parts = [str(g) for g in grid]
        reads: list[str] = []
        for tensor in tensors:
            address = self.address(tensor)
            parts += [address, str(_span(tensor.meta))]
            reads += self.reads(address)
            reads.append((tensor.root or tensor).name)  # the memory must live until the launch
        parts += [self.render(v) for v in values]
        self.emit(f"if not {function}({', '.join(parts)}):\n        raise Fault({label!r})", reads, "launch")

    def scan_operands(self, tensors: list[_Tensor]) -> None:
        """The NaN/Inf check the registry makes before the plan's launch (unless deploy mode), or of an
        embedding's rows after their gather: a call that finds one reruns on the fused graph, whose
        registry call takes the CPU fallback as eager does."""
        from torch_rbln.registry._finite_scan import contiguous_scan

        checks = []
        reads: list[str] = []
        for tensor in tensors:
            seen = tensor.name or (tensor.root.name, tensor.offset, tuple(tensor.meta.shape),
                                   tuple(tensor.meta.stride()))
            if seen in self.scanned:
                continue  # a value does not change within a call: one check of it serves every reader
            self.scanned.add(seen)
            scan, mask = contiguous_scan(tensor.meta.dtype)
            address = self.address(tensor)
            checks.append(f"{self.const(scan, 's')}({address}, {_span(tensor.meta)}, {mask})")
            reads += [*self.reads(address), (tensor.root or tensor).name]
        if checks:
            self.emit(f"if checked and not ({' and '.join(checks)}):\n        raise Unplanned()", reads,
                      "scan")

    def fused(self, node: fx.Node, runner: FusedKernel) -> bool:
        """A fused kernel launched by address, when its launch was kept and needs nothing per call."""
        if not runner._compiled or runner._broken or runner._relayout or runner.launch_tp != 1:
            return False
        inputs = []
        for arg, stride in zip(node.args, runner._strides, strict=True):
            value = self.env.get(arg) if isinstance(arg, fx.Node) else None
            if not isinstance(value, _Tensor) or tuple(value.meta.stride()) != stride:
                return False
            inputs.append(value)
        outputs = self.values.get(node)
        options = runner._launch_options
        if options is None or not isinstance(outputs, (list, tuple)):
            return False
        real_inputs = [self.values.get(arg) for arg in node.args]
        kept = runner.kernel.launcher(*real_inputs, *outputs, *runner._scalars, **options)
        if kept is None or not hasattr(getattr(kept, "unchecked", None), "by_address"):
            return False
        names = []
        tensors = list(inputs)
        for shape, dtype, strides in runner._outputs:
            meta = torch.empty_strided(shape, strides, dtype=dtype, device="meta")
            name = self.allocate(meta)
            value = _Tensor(name, meta)
            names.append(value)
            tensors.append(value)
        self.launch(kept.unchecked.by_address, (runner.spec.grid, 1, 1), tensors, runner._scalars,
                    runner.spec.name)
        self.env[node] = ("outputs", names)
        self.counter["fused"] += 1
        self.kernels[runner.spec.name] += 1
        return True

    def planned(self, node: fx.Node) -> bool:
        """A node whose registry plan describes its kept launch (`Plan.direct`; the fused attention
        op's `attention.fused_forward_direct`), launched by address."""
        from torch_rbln import registry
        from torch_rbln.registry.table import NAMES

        args = tuple(self.eager_value(a) for a in node.args)
        kwargs = {k: self.eager_value(v) for k, v in node.kwargs.items()}
        if node.target is aten._scaled_dot_product_fused_attention_overrideable.default:
            from torch_rbln.registry import attention

            direct = attention.fused_forward_direct(*args, **kwargs)
            return direct is not None and self.direct(node, direct, args, (), attention.FORWARD)
        name = registry._aten_name(node.target)
        dispatcher = registry._kernels.get(name) if name in NAMES else None
        meta = node.meta.get("val")
        if dispatcher is None or registry._user.get(name) or not isinstance(meta, torch.Tensor):
            return False
        family = registry.TABLE[[op.name for op in registry.TABLE].index(name)].planner
        signed = family.signature(args, kwargs) if family is not None else None
        if signed is None:
            return False
        key, operands = signed
        plan = dispatcher.plans().get(key)
        direct = plan.direct(operands) if plan is not None and plan.run is not None else None
        if direct is None or direct.outputs is not None:
            return False
        direct = direct._replace(outputs=((tuple(plan.shape), _contiguous(plan.shape), plan.dtype),))
        counted = registry.fallback._plan_for(node.target).name
        from torch_rbln.registry.matmul import MatmulPlan

        if isinstance(plan, MatmulPlan):
            direct = self.one_tile(node, plan, operands, direct)
        return self.direct(node, direct, operands, plan.scanned, counted)

    def eager_value(self, arg: Any) -> Any:
        """A node argument as an eager call brings it: a node's recorded value, and fx's immutable list
        as a plain list (what a family's signature keys)."""
        if isinstance(arg, fx.Node):
            return self.values.get(arg)
        return list(arg) if isinstance(arg, list) else arg

    def one_tile(self, node: fx.Node, plan: Any, operands: tuple, direct: Any) -> Any:
        """`direct` (a planned matmul's kept launch) on one tile that covers the whole product, where
        the product is large enough for its tiling to cost (`ONE_TILE_MIN_VOLUME`) and the tile small
        enough (`ONE_TILE_MAX_AREA`, `ONE_TILE_MAX_K`); `direct` unchanged otherwise.

        Why: on the numba backend `tl.dot` of a tile is one BLAS gemm on the tile's real extent (its
        masked edges filled after it), so one tile is one gemm for the whole product, as inductor's
        extern mm calls; the registry's tiles (up to 128 x 256, chosen for any caller and for
        tensor-parallel groups) split Llama's 128 x 1376 x 512 projection into six gemms, and its
        K = 1376 one into three K steps with staging copies: ~0.6-0.7x torch's addmm per linear,
        against ~1.0x for one tile (1 thread). A program runs on one NPU (its guard checks tp == 1), so
        a grid of one program loses nothing. The specialisation is launched once here on the recorded
        operands and its result compared with the recorded one (the same products summed in another
        order: a tolerance, not equality)."""
        from torch_rbln.registry.geometry import I32

        keywords, (a, b, bias, _, alpha, beta) = plan.tuned, operands
        M, N, K = plan.tail[:3]
        batch = plan.shape_key[-1]
        real_out = self.values.get(node)
        if keywords is None or set(keywords) != {"HAS_BIAS", "BLOCK_M", "BLOCK_N", "BLOCK_K", "ONE_STEP"} or \
                batch != 1 or plan.dtype is not torch.float32 or M * N * K < ONE_TILE_MIN_VOLUME or \
                not isinstance(real_out, torch.Tensor) or real_out.device.type != "rbln" or \
                max(M, N, K, *map(abs, plan.tail)) >= I32:
            return direct
        block_m, block_n, block_k = (1 << max(x - 1, 0).bit_length() for x in (M, N, K))
        if block_m * block_n > ONE_TILE_MAX_AREA or block_k > ONE_TILE_MAX_K or \
                (plan.grid == (1, 1, 1) and keywords["ONE_STEP"]):
            return direct
        tile = {**keywords, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "ONE_STEP": True}
        kernel = plan.kernel
        geometry = (kernel, tuple(sorted(tile.items())), tuple(plan.tail), float(alpha), float(beta),
                    *(_layout(t) for t in (a, b, bias, real_out)))
        checked = _ONE_TILE_CHECKED.get(geometry)
        if checked is not None:
            # the same compiled specialisation (`launcher` returns one object per specialisation) on
            # the same geometry and scalars as a launch already compared: only the values differ
            same = (a, b, real_out, real_out if bias is None else bias, *plan.tail, float(alpha), float(beta))
            if kernel.launcher(*same, **tile) is checked:
                self.counter["one_tile"] += 1
                return direct._replace(launcher=checked.unchecked.by_address, grid=(1, 1, 1))
        trial = torch.empty_strided(real_out.shape, real_out.stride(), dtype=real_out.dtype,
                                    device=real_out.device)
        args = (a, b, trial, trial if bias is None else bias, *plan.tail, float(alpha), float(beta))
        try:
            kernel.run(*args, grid=(1, 1, 1), **tile)
            kept = kernel.launcher(*args, **tile)
        except Exception as error:  # noqa: BLE001 - the registry's kept launch still serves
            _log().debug("one-tile matmul %s not used: %s: %s", node.name, type(error).__name__, error)
            return direct
        by_address = getattr(getattr(kept, "unchecked", None), "by_address", None)
        if by_address is None or not torch.allclose(trial.cpu(), real_out.cpu(), rtol=1e-4, atol=1e-4):
            return direct
        _ONE_TILE_CHECKED[geometry] = kept
        self.counter["one_tile"] += 1
        return direct._replace(launcher=by_address, grid=(1, 1, 1))

    def direct(self, node: fx.Node, direct: Any, operands: tuple, scanned: tuple, counted: str) -> bool:
        """Emit `direct` (a `plan.Direct`) for `node`: its outputs allocated as the graph records them,
        the NaN/Inf check of the `scanned` operands, the launch by address.

        A matmul's result is not checked: the family is exact (its IEEE products and sums give the
        CPU's NaN and Inf, `tests/registry/test_exact_ops.py`), so eagerly nothing scans it either; a
        NaN/Inf it carries meets the same checks downstream as in the fused graph (a call's registry
        scan, a planned node's `scanned` operands). Checking every result was 0.5 ms (1.8%) of Llama's
        compiled forward and made a NaN/Inf weight rerun the call on the fused graph for the same
        values."""
        meta = node.meta.get("val")
        metas = (meta,) if isinstance(meta, torch.Tensor) else tuple(meta or ())
        if len(metas) < len(direct.outputs):
            return False
        for (shape, strides, dtype), recorded in zip(direct.outputs, metas, strict=False):
            if not isinstance(recorded, torch.Tensor) or recorded.dtype != dtype or \
                    not _same_layout(recorded, torch.empty_strided(shape, strides, device="meta")):
                return False
        inputs = {id(self.values.get(a)): a for a in node.all_input_nodes}
        tensors, values, checked = [], [], []
        outputs: list[_Tensor | None] = [None] * len(direct.outputs)
        for kind, item in direct.args:
            if kind == "tensor":
                source = inputs.get(id(operands[item]))
                value = self.env.get(source) if source is not None else None
                if not isinstance(value, _Tensor):
                    return False
                tensors.append(value)
                if item in scanned and value not in checked:
                    checked.append(value)
            elif kind == "out":
                which = item or 0
                if outputs[which] is None:
                    outputs[which] = _Tensor(self.allocate(metas[which]), metas[which])
                tensors.append(outputs[which])
            else:
                values.append(item)
        if any(out is None for out in outputs):
            return False
        self.scan_operands(checked)
        self.launch(direct.launcher, direct.grid, tensors, values, node.name)
        if isinstance(meta, torch.Tensor):
            self.env[node] = outputs[0]
        else:
            extra = [("expr", self.const(value, "k")) for value in direct.extra]
            self.env[node] = ("outputs", [*outputs, *extra])
        self.counter["planned"] += 1
        self.device_counts[counted] += 1
        return True

    # ---------------------------------------------------------------- source
    def source(self, params: list[str]) -> str:
        """The function: guards, then the statements, each tensor variable released after its last use.

        The static memory plan: a buffer the program allocates and only ever passes to kernels by
        address (no call, view or output sees it, so nothing can alias it past the call) is allocated
        once, here, and its address is a constant of the program; a buffer of the same layout that is
        dead by then is taken instead of a new one (the kernels write every element of their outputs),
        so the buffers are as many as the most of a layout alive at once. Why: an allocation and a
        `data_ptr()` per buffer were a quarter of the demo model's per-call time outside kernels, as
        in inductor's wrapper they are not. A lock makes the buffers one call's at a time: a call made
        while another runs (another thread) runs on the fused graph. Outputs, and buffers a call reads,
        are allocated per call."""
        from torch_rbln import _memory

        self.fold_whole_views()
        last: dict[str, int] = {}
        escaped: set[str] = set()
        for position, (_, reads, kind) in enumerate(self.lines):
            for name in reads:
                last[name] = position
            if kind == "other":
                escaped.update(reads)
        kept = set(params)
        dying: dict[int, list[str]] = {}  # statement position -> the variables it reads last
        for name, at in last.items():
            if name not in kept and name[0] == "v":
                dying.setdefault(at, []).append(name)
        pool: dict[tuple, list[str]] = {}
        static: dict[str, torch.Tensor] = {}  # buffer variable -> the tensor allocated here
        body = []
        for position, (statement, _, kind) in enumerate(self.lines):
            if kind == "alloc":
                name = statement.split(" = ", 1)[0]
                if name not in escaped:
                    free = pool.get(self.allocs[name])
                    if free:
                        static[name] = static[free.pop()]
                        self.counter["reused"] += 1
                    else:
                        shape, strides, dtype = self.allocs[name]
                        static[name] = _memory.empty_strided(shape, strides, dtype, self.index)
                        self.counter["static"] += 1
                    statement = ""
            elif kind == "pointer":
                name, _, expression = statement.partition(" = ")
                root = expression.split(".", 1)[0]
                if root in static:
                    statement = f"{name} = {static[root].data_ptr()}"
            if statement:
                body.append(f"    {statement}")
            dead = [] if statement.startswith("return") else sorted(dying.get(position, ()))
            released = []
            for name in dead:
                if name in static:
                    pool.setdefault(self.allocs[name], []).append(name)
                else:
                    released.append(name)
            if released:
                body.append(f"    {' = '.join(released)} = None")
        self.namespace["_static_buffers"] = tuple({id(t): t for t in static.values()}.values())
        guard = " or ".join(["backend() != BACKEND", f"device_tp({self.index}) != 1", *self.guards])
        head = [f"def program({', '.join(params)}):", f"    if {guard}:", "        raise Unplanned()",
                "    checked = not deploy_mode()"]
        if static:
            self.namespace["_lock"] = threading.Lock()
            head += ["    if not _lock.acquire(False):", "        raise Unplanned()", "    try:"]
            body = ["    " + line.replace("\n", "\n    ") for line in body] + \
                ["    finally:", "        _lock.release()"]
        return "\n".join(head + body) + "\n"


def _escaping(graph: fx.Graph) -> set[fx.Node]:
    """Nodes whose value the output may alias: the output's operands and what they view."""
    found: set[fx.Node] = set()
    output = next(node for node in graph.nodes if node.op == "output")
    stack = list(output.all_input_nodes)
    while stack:
        node = stack.pop()
        if node in found:
            continue
        found.add(node)
        if node.target in VIEW_OPS or node.target in MULTI_VIEW_OPS or node.target is operator.getitem:
            stack.extend(node.all_input_nodes)
    return found


_WORD = re.compile(r"\w+")


def _words(text: str) -> list[str]:
    """The identifiers and numbers of a statement (runs of letters, digits and underscores)."""
    return _WORD.findall(text)


class _Unplanned(Exception):
    """A guard failed: this call runs on the fused graph."""


class _Recorder(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.values: dict[fx.Node, Any] = {}

    def run_node(self, node: fx.Node) -> Any:
        value = super().run_node(node)
        self.values[node] = value
        return value


class Program:
    """The fused graph `gm`, run as one generated function from its third call (see the module)."""

    def __init__(self, gm: fx.GraphModule, index: int, name: str) -> None:
        self.gm, self.index, self.name = gm, index, name
        self.calls = 0
        self.reruns = 0  # calls a guard, a NaN/Inf operand or a kernel fault sent to the fused graph
        self.function: Callable | None = None
        self.source: str | None = None
        self.report: dict[str, Any] = {}
        self._kernels: tuple = ()  # (fused kernel name, launches per call)
        self._uncounted = [0]  # calls not yet added to the device and launch counters (`_deferred_counter`)

    def __call__(self, *args: Any) -> Any:
        function = self.function
        if function is not None:
            try:
                result = function(*args)
            except (_Unplanned, _Fault):
                self.reruns += 1
                return self.gm(*args)
            self._uncounted[0] += 1
            return result
        self.calls += 1
        if self.calls < 2:
            return self.gm(*args)
        recorder = _Recorder(self.gm)
        result = recorder.run(*args)
        self._generate(recorder.values)
        return result

    def _deferred_counter(self, device_counts: tuple, fused: int) -> None:
        """Count this program's calls when the counters are read (`registry._checks.fold_deferred_counts`,
        which `registry.device_counts()` and `compiler.stats()` call) instead of on every call: each
        call adds its op calls to the device counts and its fused launches to the compiler's. The fold
        holds the pending count and a weak reference to the program, so the calls of a program since
        freed still count, and its fold is dropped after the first read that finds it gone."""
        import weakref

        from torch_rbln.registry import _checks

        uncounted, kernels, alive = self._uncounted, self._kernels, weakref.ref(self)

        def fold() -> bool:
            calls = uncounted[0]
            if calls:
                uncounted[0] -= calls
                for name, count in device_counts:
                    _checks._device_counts[name] += count * calls
                if fused:
                    _stats.count_launches(fused * calls, tuple((k, c * calls) for k, c in kernels))
            return alive() is not None

        _checks.defer_counts(fold)

    def _generate(self, values: dict[fx.Node, Any]) -> None:
        from torch_rbln import _memory, config
        from torch_rbln.tp import device_tp, requested_backend

        builder = _Builder(self.gm, values, self.index)
        try:
            source, namespace = builder.build()
        except _NotAProgram as reason:
            _log().debug("compiled graph %s runs node by node: %s", self.name, reason)
            self.calls = -(1 << 62)
            return
        except Exception as error:  # noqa: BLE001 - the fused graph still runs every call
            _log().warning("compiled graph %s: no program generated (%s: %s); its nodes run one by one",
                           self.name, type(error).__name__, error)
            self.calls = -(1 << 62)  # do not try again
            return
        namespace.update(empty=_memory.empty, empty_strided=_memory.empty_strided,
                         as_strided=aten.as_strided.default, backend=requested_backend,
                         as_strided_below=aten.as_strided.default._handle.redispatch_boxed,
                         CPU_KEYS=torch._C.DispatchKeySet(torch._C.DispatchKey.CPU),
                         VIEW_KEYS=torch._C.DispatchKeySet(torch._C.DispatchKey.CPU) |
                         torch._C.DispatchKeySet(torch._C.DispatchKey.ADInplaceOrView),
                         BACKEND=requested_backend(), device_tp=device_tp, deploy_mode=config.deploy_mode,
                         Fault=_Fault, Unplanned=_Unplanned)
        code = builtins.compile(source, f"<rbln program {self.name}>", "exec")
        exec(code, namespace)  # noqa: S102 - generated from this graph's own nodes
        self.source = source
        self.function = namespace["program"]
        self._kernels = tuple(builder.kernels.items())
        self._deferred_counter(tuple(builder.device_counts.items()), builder.counter["fused"])
        self.report = {"fused": builder.counter["fused"], "planned": builder.counter["planned"],
                       "views": builder.counter["views"], "hoisted": builder.counter["hoisted"],
                       "reused_buffers": builder.counter["reused"],
                       "static_buffers": builder.counter["static"],
                       "one_tile_matmuls": builder.counter["one_tile"],
                       "folded_views": builder.counter["folded_views"], "calls": dict(builder.calls)}
        _stats.count("programs_generated")
        _stats.count("program_direct_nodes", builder.counter["fused"] + builder.counter["planned"])
        _stats.count("program_view_nodes", builder.counter["views"])
        _stats.count("program_call_nodes", builder.counter["calls"])
        _log().debug("compiled graph %s as one program: %s\n%s", self.name, self.report, source)
