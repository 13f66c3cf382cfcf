"""Render one DSL kernel per fused group (jinja2 template ``templates/fused_kernel.py.j2``) and load it.

The generated source is structural: sizes and strides are runtime scalar arguments and variable names are
canonical (``in0``, ``v3_mul``, ``out0``), so the same chain in every layer of a model, and at every
shape, is one source text, one ``@tl.jit`` function and one compiled specialisation per dtype set.
Sources are written under ``<TORCH_RBLN_CACHE_DIR>/graphs/kernels/`` and imported from there, so the
DSL jit (which reads a kernel's source with ``inspect``) and tracebacks see a real file.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import math
import os
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

from torch_rbln import cachedir

from .lowering import Unsupported, literal, pointwise_rule, reduction_rule
from .partition import Group, cat_pieces, static_shape, trailing_stride

__all__ = ["KernelSpec", "generate", "load_kernel", "template_digest", "kernels_dir"]

TEMPLATE = "fused_kernel.py.j2"
_lock = threading.Lock()
_loaded: dict[str, Any] = {}  # kernel name -> JITFunction


@dataclass
class KernelSpec:
    """Everything needed to run one fused group; JSON-serialisable (the on-disk graph cache stores it)."""

    name: str
    source: str
    kind: str  # "pointwise" or "rows"
    nodes: list[str]  # member node names, in graph order
    inputs: list[str]  # input node names (kernel pointer arguments, in order)
    input_strides: list[list[int]]  # the strides the plan was made for (checked at run time)
    outputs: list[str]
    output_shapes: list[list[int]]
    output_dtypes: list[str]
    scalars: list[int] = field(default_factory=list)  # runtime scalar arguments after the pointers
    grid: int = 1
    block: int = 1024
    # the strides the traced graph records for each output (its fake tensors'); the kernel writes
    # row-major, and an output recorded with other strides is handed on in the recorded layout, since
    # later nodes (views) were traced against it. None: row-major (entries cached before this field)
    output_strides: list[list[int]] | None = None
    # whether the kernel itself stores each output at its recorded strides (pointwise kernels since
    # cache format 3); False: it writes row-major and the runner copies an output recorded otherwise
    stores_recorded: bool = False

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> KernelSpec:
        spec = cls(**data)
        if not isinstance(spec.source, str) or spec.kind not in ("pointwise", "rows"):
            raise ValueError("malformed kernel spec")
        return spec


def kernels_dir() -> Path:
    return Path(cachedir.cache_path("graphs", "kernels"))


@functools.lru_cache(maxsize=1)
def _environment():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


@functools.lru_cache(maxsize=1)
def template_digest() -> str:
    text = (Path(__file__).parent / "templates" / TEMPLATE).read_text()
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _op_name(node: fx.Node) -> str:
    packet = getattr(node.target, "_opname", None) or getattr(node.target, "__name__", "op")
    return str(packet).split(".")[0].strip("_") or "op"


def _differs(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether ``stride`` is another layout than row-major for ``shape`` (size-1 dims do not count)."""
    return any(size != 1 and a != b for size, a, b in zip(shape, stride, _contiguous(shape), strict=True))


def _contiguous(shape: Sequence[int]) -> tuple[int, ...]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))


def _aligned_strides(node: fx.Node, rank: int) -> list[int]:
    value = node.meta["val"]
    pad = rank - value.dim()
    return [0] * pad + [st if sz != 1 else 0 for sz, st in zip(value.shape, value.stride(), strict=True)]


def _collapse(sizes: list[int], stride_sets: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent dims that every access walks contiguously; drop size-1 dims."""
    out_sizes: list[int] = []
    out_strides: list[list[int]] = [[] for _ in stride_sets]
    for dim, size in enumerate(sizes):
        if size == 1:
            continue
        pairs = list(zip(out_strides, stride_sets, strict=True))
        if out_sizes and all(s[-1] == full[dim] * size for s, full in pairs):
            out_sizes[-1] *= size
            for s, full in zip(out_strides, stride_sets, strict=True):
                s[-1] = full[dim]
            continue
        out_sizes.append(size)
        for s, full in zip(out_strides, stride_sets, strict=True):
            s.append(full[dim])
    return out_sizes, out_strides


def _block(kind: str, extent: int, tp: int = 1) -> int:
    """BLOCK for a kernel: by size, in few buckets (each is a specialisation); a pointwise kernel gets a
    smaller one when that gives each of the ``tp`` NPUs at least one program. A rows kernel takes its
    row in one chunk up to 1024 columns (the power of two at or above it, at least 128): a 512-column
    row (Llama's RMSNorm) in chunks of 1024 left half of every pass's lanes masked."""
    if kind == "rows":
        return min(1024, max(128, _pow2(extent)))
    block = 1024 if extent <= 1024 else 4096
    while block > 128 and -(-extent // block) < tp:
        block //= 4
    return block


# Strided pointwise groups whose innermost collapsed dim has this many elements run a program per line
# (`_Generator._pointwise_rows`); shorter lines would leave most of a program's lanes idle.
_ROW_MIN = 16
_ROW_MAX = 4096


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _decompose(index: str, prefix: str, size_param: str, dims: int) -> list[str]:
    """Lines splitting the flat ``index`` into coordinates ``<prefix>0..`` over collapsed dims."""
    if dims == 1:
        return [f"{prefix}0 = {index}"]
    lines = [f"rest = {index}"]
    for d in range(dims - 1, 0, -1):
        lines.append(f"{prefix}{d} = rest % {size_param}{d}")
        lines.append(f"rest = rest // {size_param}{d}")
    lines.append(f"{prefix}0 = rest")
    return lines


class _Generator:
    """Builds the template context for one group."""

    def __init__(self, group: Group, tp: int = 1) -> None:
        self.group = group
        self.tp = tp
        self.members = list(group.nodes)
        self.member_set = set(self.members)
        self.inputs = group.inputs()
        self.outputs = group.outputs()
        self.input_index = {node: j for j, node in enumerate(self.inputs)}
        self.output_index = {node: j for j, node in enumerate(self.outputs)}
        self.var = {node: f"v{i}_{_op_name(node)}" for i, node in enumerate(self.members)}
        self.boolean = {node: bool(pointwise_rule(node) and pointwise_rule(node).boolean)
                        for node in self.members}
        self.params = [f"in{j}_ptr" for j in range(len(self.inputs))]
        self.params += [f"out{j}_ptr" for j in range(len(self.outputs))]
        self.scalars: list[int] = []

    # ---------------------------------------------------------------- helpers
    def _scalar(self, name: str, value: int) -> str:
        self.params.append(name)
        self.scalars.append(int(value))
        return name

    def _offset(self, coordinates: list[str], prefix: str, strides: list[int]) -> str:
        """The element offset ``sum(coordinate * stride)``. Strides of 0 and 1 are written into the
        source (a broadcast dim drops out; a unit-stride line becomes ``c``, which LLVM vectorises as
        one contiguous load, where ``c * stride`` with a runtime stride of 1 is a gather: Llama's RoPE
        on a permuted q ran ~1.7 ns per element so); every other stride is a runtime scalar. Safe
        because a fused kernel runs only on inputs with exactly the strides it was planned for."""
        terms = []
        for d, (coordinate, stride) in enumerate(zip(coordinates, strides, strict=True)):
            if stride == 1:
                terms.append(coordinate)
            elif stride:
                terms.append(f"{coordinate} * {self._scalar(f'{prefix}_stride{d}', stride)}")
        return " + ".join(terms) or "0"

    def _load(self, j: int, address: str, masked: bool) -> str:
        """Expression loading input ``j`` at ``address`` as float32, or as booleans for a bool tensor."""
        is_bool = self.inputs[j].meta["val"].dtype == torch.bool
        other = "0" if is_bool else "0.0"
        call = f"tl.load(in{j}_ptr + {address}, mask=mask, other={other})" if masked else \
            f"tl.load(in{j}_ptr + {address})"
        return f"{call} != 0" if is_bool else f"{call}.to(tl.float32)"

    def _expr(self, node: fx.Node, value_of) -> str:
        """The assignment right-hand side of a pointwise member; ``value_of(operand)`` names an operand."""
        def operand(arg: Any, kind: str) -> str:
            if isinstance(arg, fx.Node):
                name, is_bool = value_of(arg)
                if kind == "f" and is_bool:
                    return f"{name}.to(tl.float32)"
                if kind == "b" and not is_bool:
                    return f"({name} != 0.0)"
                return name
            return literal(arg)

        return pointwise_rule(node).emit(node.args, dict(node.kwargs), operand)

    def _store(self, node: fx.Node, address: str, masked: bool) -> str:
        j = self.output_index[node]
        value = f"{self.var[node]}.to(out{j}_ptr.dtype.element_ty)"
        return f"tl.store(out{j}_ptr + {address}, {value}" + (", mask=mask)" if masked else ")")

    # ---------------------------------------------------------------- pointwise
    def _pointwise_body(self, kinds: dict[int, str], stores: dict[int, str]) -> list[str]:
        """The loads, member expressions and stores shared by both pointwise layouts: input ``j`` is read
        at ``offs`` ("direct"), once unmasked ("scalar") or at the address expression ``kinds[j]``;
        output ``j`` is stored at ``stores[j]`` (default ``offs``). Both layouts define ``offs`` and
        ``mask`` before these lines.

        An input the members read more than once (SiLU's ``x * sigmoid(x)``) is loaded at each read, as
        the DSL then reads memory where each value is consumed (LLVM merges the reads) where one load
        of two uses was first copied into a buffer: a copy loop before the product loop."""
        lines: list[str] = []
        values: dict[fx.Node, tuple[str, bool]] = {}
        reads: Counter[fx.Node] = Counter()  # textual reads: an emitter may name an operand twice
        for node in self.members:
            expression = self._expr(node, lambda operand: (f"@{id(operand)}@", False))
            reads.update({operand: expression.count(f"@{id(operand)}@") for operand in node.all_input_nodes})
        for j, node in enumerate(self.inputs):
            kind = kinds[j]
            is_bool = node.meta["val"].dtype == torch.bool
            if kind == "scalar":
                load = self._load(j, "0", False)
            else:
                load = self._load(j, "offs" if kind == "direct" else kind, True)
                if reads[node] > 1:
                    values[node] = (f"({load})", is_bool)
                    continue
            lines.append(f"in{j} = {load}")
            values[node] = (f"in{j}", is_bool)
        for node in self.members:
            lines.append(f"{self.var[node]} = {self._expr(node, values.get)}")
            values[node] = (self.var[node], self.boolean[node])
        lines += [self._store(node, stores.get(j, "offs"), True) for j, node in enumerate(self.outputs)]
        return lines

    def pointwise(self) -> dict:
        if self.group.has_cat:
            return self._pointwise_cat()
        shape = self.group.shape
        numel = math.prod(shape)
        contiguous = _contiguous(shape)
        kinds: dict[int, str] = {}
        strided: list[int] = []
        # outputs recorded with other strides than row-major (a RoPE applied to a permuted q): stored
        # there, since later nodes (views) were traced against that layout
        strided_out = [j for j, node in enumerate(self.outputs) if _differs(shape, node.meta["val"].stride())]
        stores: dict[int, str] = {}
        for j, node in enumerate(self.inputs):
            value = node.meta["val"]
            if tuple(value.shape) == shape and (tuple(value.stride()) == contiguous or value.is_contiguous()):
                kinds[j] = "direct"
            elif value.numel() == 1:
                kinds[j] = "scalar"
            else:
                kinds[j] = "strided"
                strided.append(j)
        sizes: list[int] = []
        strides: list[list[int]] = []
        if strided or strided_out:
            stride_sets = [_aligned_strides(self.inputs[j], len(shape)) for j in strided]
            stride_sets += [_aligned_strides(self.outputs[j], len(shape)) for j in strided_out]
            sizes, strides = _collapse(list(shape), stride_sets)
        if len(sizes) >= 2 and _ROW_MIN <= sizes[-1] <= _ROW_MAX:
            return self._pointwise_rows(kinds, strided, strided_out, sizes, strides, numel)
        self._scalar("numel", numel)
        lines = ["offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "mask = offs < numel"]
        if strided or strided_out:
            dims = len(sizes)
            for d in range(1, dims):
                self._scalar(f"size{d}", sizes[d])
            lines += _decompose("offs", "i", "size", dims)
            coordinates = [f"i{d}" for d in range(dims)]
            for j, st in zip(strided, strides[:len(strided)], strict=True):
                kinds[j] = self._offset(coordinates, f"in{j}", st)
            for j, st in zip(strided_out, strides[len(strided):], strict=True):
                stores[j] = self._offset(coordinates, f"out{j}", st)
        lines += self._pointwise_body(kinds, stores)
        block = _block("pointwise", numel, self.tp)
        ops = " -> ".join(_op_name(n) for n in self.members)
        doc = f"Fused pointwise kernel: {ops}; one program per BLOCK of the numel elements."
        return {"phases": [{"before": lines, "loop": [], "after": []}], "docstring": doc,
                "grid": -(-numel // block), "block": block}

    def _pointwise_rows(self, kinds: dict[int, str], strided: list[int], strided_out: list[int],
                        sizes: list[int], strides: list[list[int]], numel: int) -> dict:
        """A pointwise group with strided operands, one program per line of the innermost (collapsed)
        dim: the flat kernel splits every element's index into coordinates (a division and a remainder
        per dim, per element: Llama's RoPE on a permuted q, 65536 elements, ~35 ns each); here a program
        splits its line number once and walks the line with unit steps (or the operand's stride)."""
        inner = sizes[-1]
        dims = len(sizes)
        self._scalar("inner", inner)
        for d in range(1, dims - 1):
            self._scalar(f"size{d}", sizes[d])
        lines = ["row = tl.program_id(0)", "c = tl.arange(0, BLOCK)", "mask = c < inner",
                 "offs = row * inner + c"]
        lines += _decompose("row", "r", "size", dims - 1)
        coordinates = [f"r{d}" for d in range(dims - 1)] + ["c"]
        for j, st in zip(strided, strides[:len(strided)], strict=True):
            kinds[j] = self._offset(coordinates, f"in{j}", st)
        stores = {j: self._offset(coordinates, f"out{j}", st)
                  for j, st in zip(strided_out, strides[len(strided):], strict=True)}
        lines += self._pointwise_body(kinds, stores)
        ops = " -> ".join(_op_name(n) for n in self.members)
        doc = (f"Fused pointwise kernel: {ops}; one program per line of {inner} elements (operands "
               "with strides).")
        return {"phases": [{"before": lines, "loop": [], "after": []}], "docstring": doc,
                "grid": numel // inner, "block": _pow2(inner)}

    def _pointwise_cat(self) -> dict:
        """A pointwise group with a ``cat`` along the last dim (`partition.CatPiece`): one program per line
        of the last dim, computed piece by piece. For the piece at columns ``[o, o + s)`` the program
        takes lanes ``cp = arange(0, pow2(s))`` (``cp < s`` live) at columns ``c = cp + o``: the piece's
        own chain reads its operands at ``cp``, every other member at ``c``, and the cat's value is the
        piece's. Each access stays affine under a prefix mask, which the backend checks per box and
        vectorises, where one pass over the line would need masks with lower bounds (``c >= o``). Pieces
        that are one tensor repeated compute once when nothing else is read at ``c``: RoPE's cos/sin
        table (``cat((freqs, freqs)).cos()``) evaluated each transcendental twice per position."""
        shape = self.group.shape
        rank, inner = len(shape), shape[-1]
        cat = next(node for node in self.members if node.target is torch.ops.aten.cat.default)
        pieces = cat_pieces(cat)
        piece_of = {node: i for i, piece in enumerate(pieces) for node in piece.chain}
        reads: dict[int, set] = {j: set() for j in range(len(self.inputs))}  # input -> "full" / pieces
        for node in self.members:
            if node is cat:
                for i, piece in enumerate(pieces):
                    if piece.root in self.input_index:
                        reads[self.input_index[piece.root]].add(i)
                continue
            for operand in node.all_input_nodes:
                if operand in self.input_index:
                    reads[self.input_index[operand]].add(piece_of.get(node, "full"))
        scalar = {j for j, node in enumerate(self.inputs) if node.meta["val"].numel() == 1}
        direct = {j for j, node in enumerate(self.inputs) if j not in scalar and
                  tuple(node.meta["val"].shape) == shape and node.meta["val"].is_contiguous()}
        # accesses through strides: (prefix of their scalars, aligned strides, column coordinate)
        accesses: dict[tuple[int | str, Any], tuple[str, list[int], str]] = {}
        for j in sorted(set(range(len(self.inputs))) - scalar):
            for context in sorted(reads[j], key=str):
                if context == "full" and j in direct:
                    continue
                prefix, column = (f"in{j}", "c") if context == "full" else (f"in{j}_p{context}", "cp")
                accesses[(j, context)] = (prefix, _aligned_strides(self.inputs[j], rank), column)
        for j, node in enumerate(self.outputs):
            if _differs(shape, node.meta["val"].stride()):
                accesses[("out", j)] = (f"out{j}", _aligned_strides(node, rank), "c")
        sizes, lead_strides = _collapse(list(shape[:-1]), [st[:-1] for _, st, _ in accesses.values()])
        self._scalar("inner", inner)
        for d in range(1, len(sizes)):
            self._scalar(f"size{d}", sizes[d])
        lines = ["row = tl.program_id(0)"]
        if sizes:
            lines += _decompose("row", "r", "size", len(sizes))
        coordinates = [f"r{d}" for d in range(len(sizes))]
        address = {key: self._offset(coordinates + [column], prefix, lead + [st[-1]])
                   for (key, (prefix, st, column)), lead in zip(accesses.items(), lead_strides, strict=True)}
        for j in sorted(scalar):
            lines.append(f"in{j} = {self._load(j, '0', False)}")
        # cat([x, x]) (RoPE's `cat((freqs, freqs), dim=-1)`) with nothing read at the line's own columns:
        # every piece computes the same values, so the first computes them and the others only store
        repeated = len({(piece.root, piece.size) for piece in pieces}) == 1 and \
            not any("full" in reads[j] for j in range(len(self.inputs)) if j not in scalar)
        for i, piece in enumerate(pieces):
            if i and repeated:  # the first piece's values, stored at this piece's columns
                lines += [f"c = cp + {piece.offset}", "offs = row * inner + c"]
            else:
                lines += [f"cp = tl.arange(0, {_pow2(piece.size)})", f"mask = cp < {piece.size}",
                          f"c = cp + {piece.offset}", "offs = row * inner + c"]
                full: dict[fx.Node, tuple[str, bool]] = {}
                own: dict[fx.Node, tuple[str, bool]] = {}
                for j, node in enumerate(self.inputs):
                    is_bool = node.meta["val"].dtype == torch.bool
                    if j in scalar:
                        full[node] = own[node] = (f"in{j}", is_bool)
                        continue
                    if "full" in reads[j]:
                        at = "offs" if j in direct else address[(j, "full")]
                        lines.append(f"in{j} = {self._load(j, at, True)}")
                        full[node] = (f"in{j}", is_bool)
                    if i in reads[j]:
                        lines.append(f"in{j}_p{i} = {self._load(j, address[(j, i)], True)}")
                        own[node] = (f"in{j}_p{i}", is_bool)
                for node in self.members:
                    if node is cat:
                        value = own.get(piece.root) or full[piece.root]
                        lines.append(f"{self.var[node]} = {value[0]}")
                        full[node] = (self.var[node], False)
                    elif piece_of.get(node, i) == i:
                        values = own if node in piece_of else full
                        lines.append(f"{self.var[node]} = {self._expr(node, values.__getitem__)}")
                        values[node] = (self.var[node], self.boolean[node])
            lines += [self._store(node, address.get(("out", j), "offs"), True)
                      for j, node in enumerate(self.outputs)]
        ops = " -> ".join(_op_name(n) for n in self.members)
        doc = (f"Fused pointwise kernel: {ops}; one program per line of {inner} elements, computed in "
               f"the {len(pieces)} pieces of its cat.")
        return {"phases": [{"before": lines, "loop": [], "after": []}], "docstring": doc,
                "grid": math.prod(shape) // inner, "block": _pow2(inner)}

    # ---------------------------------------------------------------- rows
    def rows(self) -> dict:
        group = self.group
        shape, k = group.shape, group.reduce_rank
        lead = list(group.row_shape)
        rows = 1
        for size in lead:
            rows *= size
        n = 1
        for size in shape[len(lead):]:
            n *= size
        full_users = {node: False for node in self.inputs}
        row_users: dict[fx.Node, int] = {}  # input -> rank of the row-shaped node reading it
        for node in self.members:
            full = group.is_full(node) or reduction_rule(node) is not None
            for operand in node.all_input_nodes:
                if operand in self.input_index:
                    if full:
                        full_users[operand] = True
                    else:
                        row_users[operand] = len(static_shape(node))
        # accesses: (input j, "full" | "row") -> leading strides over `lead`, column stride
        accesses: list[tuple[int, str, list[int], int]] = []
        lead_contig = list(_contiguous(tuple(lead)))
        for j, node in enumerate(self.inputs):
            if full_users[node]:
                strides = _aligned_strides(node, len(shape))[: len(lead)]
                cstride = trailing_stride(node, shape, k)
                if cstride is None:
                    raise Unsupported(f"input {node.name} does not flatten over the reduced dims")
                accesses.append((j, "full", strides, cstride))
            if node in row_users:
                strides = _aligned_strides(node, row_users[node])[: len(lead)]
                accesses.append((j, "row", strides, 0))
        self._scalar("n", n)
        before = ["row = tl.program_id(0)", "cols = tl.arange(0, BLOCK)"]
        def direct(access: tuple[int, str, list[int], int]) -> bool:
            _, context, strides, cstride = access
            scale = n if context == "full" else 1
            same = all(st == c * scale
                       for st, c, size in zip(strides, lead_contig, lead, strict=True) if size != 1)
            return same and (cstride == 1 if context == "full" else True)

        general = [a for a in accesses if not direct(a)]
        bases: dict[tuple[int, str], str] = {}
        for j, context, _, _ in accesses:
            bases[(j, context)] = "row * n" if context == "full" else "row"
        if general:
            sizes, strides = _collapse(lead, [a[2] for a in general])
            dims = len(sizes)
            for d in range(1, dims):
                self._scalar(f"rsize{d}", sizes[d])
            if dims:
                before += _decompose("row", "r", "rsize", dims)
            for (j, context, _, _), st in zip(general, strides, strict=True):
                offset = self._offset([f"r{d}" for d in range(dims)], f"in{j}_{context}", st)
                before.append(f"in{j}_{context}_base = {offset}")
                bases[(j, context)] = f"in{j}_{context}_base"
        loop_loads: dict[fx.Node, str] = {}
        scalar_values: dict[fx.Node, tuple[str, bool]] = {}  # values constant over a row
        row_values: dict[fx.Node, tuple[str, bool]] = {}
        for j, context, _, cstride in accesses:
            node = self.inputs[j]
            is_bool = node.meta["val"].dtype == torch.bool
            base = bases[(j, context)]
            if context == "row":
                before.append(f"in{j}_row = {self._load(j, base, False)}")
                row_values[node] = (f"in{j}_row", is_bool)
            elif cstride == 0:
                before.append(f"in{j} = {self._load(j, base, False)}")
                scalar_values[node] = (f"in{j}", is_bool)
            else:
                column = "c" if cstride == 1 else f"c * {self._scalar(f'in{j}_cstride', cstride)}"
                loop_loads[node] = f"in{j} = {self._load(j, f'{base} + {column}', True)}"
                scalar_values[node] = (f"in{j}", is_bool)

        def full_lines(targets: list[fx.Node]) -> list[str]:
            """Loop-body lines computing ``targets`` (full-shape members or inputs) for one chunk."""
            needed: set[fx.Node] = set()
            loads: set[fx.Node] = set()
            stack = list(targets)
            while stack:
                node = stack.pop()
                if node in needed or node in loads:
                    continue
                if node in self.member_set:
                    if not group.is_full(node) or reduction_rule(node) is not None:
                        continue  # computed once per row, before this loop
                    needed.add(node)
                    stack.extend(node.all_input_nodes)
                elif node in loop_loads:
                    loads.add(node)
            lines = [loop_loads[node] for node in self.inputs if node in loads]
            lines += [f"{self.var[node]} = {self._expr(node, lookup)}"
                      for node in self.members if node in needed]
            return lines

        reduced: dict[fx.Node, tuple[str, bool]] = {}

        def lookup(node: fx.Node) -> tuple[str, bool]:
            if node in self.member_set:
                if node in reduced:
                    return reduced[node]
                return self.var[node], self.boolean[node]
            return scalar_values.get(node) or row_values[node]

        phases: list[dict] = [{"before": before, "loop": [], "after": []}]
        for node in self.members:
            rule = reduction_rule(node)
            if rule is not None:
                phases.append(self._reduction(node, rule, full_lines, lookup, n))
                reduced[node] = (self.var[node], False)
            elif not group.is_full(node):
                line = f"{self.var[node]} = {self._expr(node, lookup_row(lookup, row_values, reduced))}"
                phases.append({"before": [line], "loop": [], "after": []})
                reduced[node] = (self.var[node], self.boolean[node])
            if node in self.output_index and not group.is_full(node):
                phases[-1]["after"].append(self._store(node, "row", False))
        stores = [node for node in self.outputs if group.is_full(node)]
        if stores:
            loop = full_lines(stores) + [self._store(node, "row * n + c", True) for node in stores]
            phases.append({"before": [], "loop": loop, "after": []})
        ops = " -> ".join(_op_name(node) for node in self.members)
        doc = (f"Fused rows kernel: {ops}; one program per row, reducing the last {k} dim(s) in chunks "
               "of BLOCK columns.")
        return {"phases": phases, "docstring": doc, "grid": rows, "block": _block("rows", n)}

    def _reduction(self, node: fx.Node, rule, full_lines, lookup, n: int) -> dict:
        source = node.args[0]
        v = self.var[node]
        acc = f"{v}_acc"
        loop = full_lines([source])
        name, is_bool = lookup(source)
        value = f"{name}.to(tl.float32)" if is_bool else name
        if rule.combine == "sum":
            before = [f"{acc} = tl.zeros((BLOCK,), dtype=tl.float32)"]
            loop.append(f"{acc} += tl.where(mask, {value}, 0.0)")
            total = f"tl.sum({acc}, axis=0)"
            after = [f"{v} = {total} / n" if rule.mean else f"{v} = {total}"]
        else:
            pick = ">" if rule.combine == "max" else "<"
            start = '-float("inf")' if rule.combine == "max" else 'float("inf")'
            before = [f"{acc} = tl.full((BLOCK,), {start}, tl.float32)",
                      f"{v}_nan = tl.zeros((BLOCK,), dtype=tl.float32)"]
            loop.append(f"{acc} = tl.where(mask & ({value} {pick} {acc}), {value}, {acc})")
            loop.append(f"{v}_nan += tl.where(mask & ({value} != {value}), 1.0, 0.0)")
            after = [f"{v} = tl.where(tl.sum({v}_nan, axis=0) > 0.0, float(\"nan\"), "
                     f"tl.{rule.combine}({acc}, axis=0))"]
        return {"before": before, "loop": loop, "after": after}


def lookup_row(lookup, row_values, reduced):
    """Operand names for a row-shaped member: row-shaped inputs and earlier row-shaped members."""
    def inner(node: fx.Node) -> tuple[str, bool]:
        if node in reduced:
            return reduced[node]
        if node in row_values:
            return row_values[node]
        return lookup(node)

    return inner


def generate(group: Group, tp: int = 1) -> KernelSpec:
    """Render and describe the kernel of one group (raises Unsupported when it cannot be expressed)."""
    gen = _Generator(group, tp)
    context = gen.rows() if group.is_rows else gen.pointwise()
    env = _environment()
    template = env.get_template(TEMPLATE)
    render = functools.partial(template.render, params=gen.params, phases=context["phases"],
                               docstring=context["docstring"])
    digest = hashlib.sha256(render(name="fused").encode()).hexdigest()[:10]
    ops = []
    for node in group.nodes:
        op = _op_name(node)
        if op not in ops:
            ops.append(op)
    name = "fused_" + "_".join(ops[:4]) + ("_etc" if len(ops) > 4 else "") + f"_{digest}"
    return KernelSpec(
        name=name,
        source=render(name=name),
        kind="rows" if group.is_rows else "pointwise",
        nodes=[node.name for node in group.nodes],
        inputs=[node.name for node in gen.inputs],
        input_strides=[list(node.meta["val"].stride()) for node in gen.inputs],
        outputs=[node.name for node in gen.outputs],
        output_shapes=[list(static_shape(node)) for node in gen.outputs],
        output_dtypes=[str(node.meta["val"].dtype).replace("torch.", "") for node in gen.outputs],
        output_strides=[list(node.meta["val"].stride()) for node in gen.outputs],
        scalars=gen.scalars,
        stores_recorded=not group.is_rows,
        grid=context["grid"],
        block=context["block"],
    )


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def load_kernel(name: str, source: str):
    """The ``@tl.jit`` function of a generated source (written to the kernels dir, imported once)."""
    with _lock:
        kernel = _loaded.get(name)
        if kernel is not None:
            return kernel
        path = kernels_dir() / f"{name}.py"
        try:
            current = path.read_text()
        except OSError:
            current = None
        if current != source:
            _atomic_write(path, source)
        module_name = f"torch_rbln_fused_{name}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        kernel = getattr(module, name)
        _loaded[name] = kernel
        return kernel

