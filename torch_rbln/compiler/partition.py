"""Which FX nodes fuse into one generated kernel.

Two kinds of group, both over a static iteration shape ``S`` taken from the nodes' fake-tensor metadata:

* **pointwise**: a chain (or DAG) of pointwise nodes of output shape ``S``; its operands from outside may
  broadcast and have any strides. One kernel over the ``numel(S)`` elements.
* **rows**: reductions over the last ``k`` dims of ``S`` (sum, mean, amax, amin; one row per index of
  the leading dims) together with their pointwise producers (full-shape nodes) and consumers (full-shape
  nodes, or row-shaped ones of ``S[:-k]`` / ``S[:-k] + (1,) * k``), e.g. a whole decomposed softmax or a
  layer-norm backward. One program per row.

A ``cat`` along the last dim joins a pointwise group as one of its nodes (Llama's RoPE: ``q * cos +
cat(-q2, q1) * sin`` is one kernel, not a negation, two copies and a multiply-add), together with the
pointwise chains that only feed it (``-q2``): each part of the cat is computed where it lands
(`CatPiece`).

Everything else (matmuls, attention, views, embeddings, ops without a rule) stays a call into aten,
which dispatches to the registry's kernels. The partition is greedy in graph order: a node joins the
group of one of its operands when the shapes fit and no path leaves the group and comes back (which
would make the fused graph cyclic); groups of a single node are dropped (the registry runs those), but
for a pointwise node that reads a strided operand (one launch instead of a copy and a launch).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from torch_rbln.log import get_logger

from .lowering import FUSABLE_DTYPES, Unsupported, pointwise_rule, reduction_dims, reduction_rule

__all__ = ["CatPiece", "Group", "cat_pieces", "partition", "static_shape", "trailing_stride"]

aten = torch.ops.aten
_CAT_LINE_MAX = 4096  # longest fused cat line (one program computes a line of the last dim)



def _log() -> logging.Logger:
    """The ``torch_rbln.compiler`` logger (configured on first use, per SPEC-device.md "Logging")."""
    return get_logger("compiler")


@dataclass(eq=False)
class Group:
    """Nodes computed by one fused kernel, in graph order.  ``reduce_rank`` is ``k`` (0: pointwise)."""

    index: int
    shape: tuple[int, ...]
    reduce_rank: int = 0
    nodes: list[fx.Node] = field(default_factory=list)

    @property
    def is_rows(self) -> bool:
        return self.reduce_rank > 0

    @property
    def row_shape(self) -> tuple[int, ...]:
        return self.shape[: len(self.shape) - self.reduce_rank]

    @property
    def keepdim_shape(self) -> tuple[int, ...]:
        return self.row_shape + (1,) * self.reduce_rank

    def is_full(self, node: fx.Node) -> bool:
        return static_shape(node) == self.shape

    @property
    def has_cat(self) -> bool:
        return any(node.target is aten.cat.default for node in self.nodes)

    def inputs(self) -> list[fx.Node]:
        """Tensor operands produced outside the group, in first-use order."""
        members = set(self.nodes)
        seen: dict[fx.Node, None] = {}
        for node in self.nodes:
            for operand in node.all_input_nodes:
                if operand not in members:
                    seen.setdefault(operand, None)
        return list(seen)

    def outputs(self) -> list[fx.Node]:
        """Members used outside the group (or by the graph output): the kernel stores these."""
        members = set(self.nodes)
        return [node for node in self.nodes if any(user not in members for user in node.users)]


def static_shape(node: fx.Node) -> tuple[int, ...] | None:
    """The node's concrete shape from its fake tensor, or None (no metadata, symbolic sizes, not a tensor)."""
    value = node.meta.get("val") if isinstance(node, fx.Node) else None
    if not isinstance(value, torch.Tensor):
        return None
    try:
        return tuple(int(s) for s in value.shape)
    except (TypeError, ValueError):
        return None


def _meta(node: fx.Node) -> torch.Tensor:
    return node.meta["val"]


def _aligned(shape: tuple[int, ...], stride: tuple[int, ...], rank: int) -> tuple[list[int], list[int]]:
    """Shape and strides left-padded to ``rank`` dims; a size-1 dim gets stride 0 (it broadcasts)."""
    pad = rank - len(shape)
    sizes = [1] * pad + list(shape)
    strides = [0] * pad + [st if sz != 1 else 0 for sz, st in zip(shape, stride, strict=True)]
    return sizes, strides


def trailing_stride(operand: fx.Node, shape: tuple[int, ...], k: int) -> int | None:
    """The single stride that walks the last ``k`` dims of ``shape`` (flattened) in ``operand``
    broadcast to ``shape``: 0 when it broadcasts along them, None when they do not flatten."""
    value = _meta(operand)
    sizes, strides = _aligned(tuple(value.shape), tuple(value.stride()), len(shape))
    dims = [i for i in range(len(shape) - k, len(shape)) if shape[i] != 1]
    effective = [strides[i] if sizes[i] != 1 else 0 for i in dims]
    if all(s == 0 for s in effective):
        return 0
    if any(s == 0 for s in effective):
        return None
    for a, b in zip(dims, dims[1:], strict=False):
        if strides[a] != strides[b] * shape[b]:
            return None
    return effective[-1] if effective else 0


def _tensor_ok(node: fx.Node, allow_bool: bool) -> bool:
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or static_shape(node) is None:
        return False
    if value.dtype in FUSABLE_DTYPES:
        return True
    return allow_bool and value.dtype == torch.bool


@dataclass(frozen=True)
class _Kind:
    reduction: bool
    dims: tuple[int, ...] = ()  # reductions: the reduced dims of the operand


def _classify(node: fx.Node) -> _Kind | None:
    """Whether the node could live in a fused kernel at all (shape-independent checks)."""
    if node.op != "call_function":
        return None
    if node.target is aten.cat.default:
        return None  # a cat `cat_pieces` can compute joins a group through `_Partitioner.cat_chains`
    rule = pointwise_rule(node)
    reduction = reduction_rule(node)
    if rule is None and reduction is None:
        return None
    if any(isinstance(v, fx.Node) for v in node.kwargs.values()):
        return None
    if not _tensor_ok(node, allow_bool=rule is not None and rule.boolean):
        return None
    if reduction is not None:
        source = node.args[0]
        if not isinstance(source, fx.Node) or not _tensor_ok(source, allow_bool=False):
            return None
        if source.meta["val"].device != node.meta["val"].device:
            return None
        rank = len(static_shape(source) or ())
        dims, _ = reduction_dims(node, rank)
        if rank == 0 or dims != tuple(range(rank - len(dims), rank)):
            return None  # only reductions over a suffix of dims (contiguous rows or all elements)
        return _Kind(True, dims)
    device = node.meta["val"].device
    for position, arg in enumerate(node.args):
        if isinstance(arg, fx.Node):
            if position not in rule.tensor_args or not _tensor_ok(arg, allow_bool=True):
                return None
            operand = arg.meta["val"]
            if operand.device != device and not (operand.device.type == "cpu" and operand.dim() == 0):
                return None  # a device move (or a device mix only a CPU scalar may make)
        elif isinstance(arg, (list, tuple)) and any(isinstance(a, fx.Node) for a in arg):
            return None
    if not _emittable(node):
        return None
    return _Kind(False)


def _emittable(node: fx.Node) -> bool:
    """Dry-run the node's emitter: it raises Unsupported for arguments it cannot express."""
    rule = pointwise_rule(node)
    try:
        rule.emit(node.args, dict(node.kwargs), lambda value, kind: "x")
    except Unsupported as reason:
        _log().debug("not fusing %s: %s", node.name, reason)
        return False
    return True


@dataclass(frozen=True)
class CatPiece:
    """One part of a fused ``cat`` along the last dim: the value ``root`` (an outside tensor, or the last
    node of ``chain``) fills columns ``[offset, offset + size)``. ``chain``: the pointwise nodes, in graph
    order, that compute ``root`` and are used by nothing but this piece and the cat, so they run only
    at the piece's columns; their outside operands have the piece's shape (or broadcast to it)."""

    root: fx.Node
    offset: int
    size: int
    chain: tuple[fx.Node, ...] = ()


def cat_pieces(node: fx.Node) -> list[CatPiece] | None:
    """The pieces of ``node`` when it is a ``cat`` that a pointwise group can compute (along the last dim,
    of at least two non-empty tensors of one fusable dtype on its device, lines of at most
    ``_CAT_LINE_MAX``); None otherwise."""
    if node.op != "call_function" or node.target is not aten.cat.default:
        return None
    tensors = node.args[0]
    dim = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else 0)
    shape = static_shape(node)
    if shape is None or not shape or not isinstance(tensors, (list, tuple)) or len(tensors) < 2 \
            or not isinstance(dim, int) or dim % len(shape) != len(shape) - 1 or shape[-1] > _CAT_LINE_MAX:
        return None
    value = _meta(node)
    pieces, offset = [], 0
    for tensor in tensors:
        if not isinstance(tensor, fx.Node) or not _tensor_ok(tensor, allow_bool=False):
            return None
        piece_shape = static_shape(tensor)
        operand = _meta(tensor)
        if len(piece_shape) != len(shape) or piece_shape[:-1] != shape[:-1] or not piece_shape[-1] \
                or operand.dtype != value.dtype or operand.device != value.device:
            return None
        pieces.append(CatPiece(tensor, offset, piece_shape[-1], _piece_chain(tensor, node)))
        offset += piece_shape[-1]
    chained = [n for piece in pieces for n in piece.chain]
    if len(set(chained)) != len(chained) or len(set(tensors)) != len(tensors) or \
            any(piece.root in chained for piece in pieces if not piece.chain):
        # chains that would share nodes (each runs only at its own columns): none are fused
        pieces = [CatPiece(piece.root, piece.offset, piece.size) for piece in pieces]
    return pieces


def _piece_chain(root: fx.Node, cat: fx.Node) -> tuple[fx.Node, ...]:
    """The pointwise nodes computing ``root`` that only the cat needs (see `CatPiece`), in graph order."""
    shape = static_shape(root)
    chain: list[fx.Node] = []
    inside = {cat}
    stack = [root]
    while stack:
        node = stack.pop()
        if node in inside or any(user not in inside for user in node.users):
            continue  # already taken, or needed elsewhere too: an outside operand
        kind = _classify(node)
        if kind is None or kind.reduction or static_shape(node) != shape \
                or pointwise_rule(node).boolean:
            continue
        if any(not _broadcasts_to(static_shape(o), shape) for o in node.all_input_nodes):
            continue
        inside.add(node)
        chain.append(node)
        stack.extend(node.all_input_nodes)
    position = {n: i for i, n in enumerate(root.graph.nodes)}
    return tuple(sorted(chain, key=position.__getitem__))


def _broadcasts_to(shape: tuple[int, ...] | None, target: tuple[int, ...]) -> bool:
    if shape is None or len(shape) > len(target):
        return False
    return all(a in (1, b) for a, b in zip(shape, target[len(target) - len(shape):], strict=True))


class _Partitioner:
    def __init__(self, graph: fx.Graph) -> None:
        self.graph = graph
        self.group_of: dict[fx.Node, Group] = {}
        self.groups: list[Group] = []
        self.position = {node: i for i, node in enumerate(graph.nodes)}
        # fusable cats -> their pieces' chains; chain nodes join their cat's group with it, never alone
        self.cat_chains: dict[fx.Node, tuple[fx.Node, ...]] = {}
        for node in graph.nodes:
            pieces = cat_pieces(node)
            if pieces is not None:
                self.cat_chains[node] = tuple(n for piece in pieces for n in piece.chain)
        self.in_chain = {n for chain in self.cat_chains.values() for n in chain}

    def _operands(self, node: fx.Node) -> list[fx.Node]:
        """The tensors ``node`` reads from outside itself: for a fused cat, what its pieces read."""
        chain = self.cat_chains.get(node)
        if chain is None:
            return node.all_input_nodes
        inside = set(chain)
        seen: dict[fx.Node, None] = {}
        for member in (*chain, node):
            for operand in member.all_input_nodes:
                if operand not in inside:
                    seen.setdefault(operand, None)
        return list(seen)

    # ---------------------------------------------------------------- legality
    def _depends_on(self, start: list[fx.Node], group: Group) -> bool:
        """Whether any of ``start`` (outside ``group``) depends on ``group``, treating every other group
        as one unit (it runs as a whole, so it depends on all its members' operands)."""
        seen: set[fx.Node] = set()
        stack = list(start)
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            owner = self.group_of.get(node)
            if owner is group:
                return True
            if owner is not None:
                for member in owner.nodes:
                    stack.extend(member.all_input_nodes)
            else:
                stack.extend(node.all_input_nodes)
        return False

    def _operand_fits(self, group: Group, node: fx.Node, operand: fx.Node, full: bool) -> bool:
        """Shape rules for one tensor operand of ``node`` if ``node`` joins ``group``."""
        shape = static_shape(operand)
        target = static_shape(node)
        if self.group_of.get(operand) is group:
            padded = (1,) * (len(target) - len(shape)) + shape if len(shape) <= len(target) else None
            if padded == target:
                return True
            return full and group.is_rows and padded == group.keepdim_shape
        if not group.is_rows:
            return True
        if full:
            return trailing_stride(operand, group.shape, group.reduce_rank) is not None
        return True  # a row-shaped node reads row-shaped operands at the row's offset

    def _fits(self, group: Group, node: fx.Node, kind: _Kind) -> tuple[bool, int]:
        """(may join, the group's reduce rank afterwards)."""
        shape = static_shape(node)
        if kind.reduction:
            source = node.args[0]
            k = len(kind.dims)
            if self.group_of.get(source) is not group or static_shape(source) != group.shape:
                return False, 0
            if (group.is_rows and group.reduce_rank != k) or group.has_cat:
                return False, 0
            if not group.is_rows:
                probe = Group(group.index, group.shape, k, group.nodes)
                if not all(self._members_fit_rows(probe)):
                    return False, 0
            return True, k
        if node in self.cat_chains:  # a cat joins a pointwise group of its shape (one cat per group)
            return not group.is_rows and not group.has_cat and shape == group.shape, 0
        if not group.is_rows:
            if shape != group.shape:
                return False, 0
            return all(self._operand_fits(group, node, o, True) for o in node.all_input_nodes), 0
        if shape == group.shape:
            full = True
        elif shape in (group.row_shape, group.keepdim_shape):
            full = False
            if any(self.group_of.get(o) is group and group.is_full(o) for o in node.all_input_nodes):
                return False, 0
        else:
            return False, 0
        return all(self._operand_fits(group, node, o, full) for o in node.all_input_nodes), group.reduce_rank

    def _members_fit_rows(self, probe: Group):
        for member in probe.nodes:
            for operand in member.all_input_nodes:
                if self.group_of.get(operand) is not probe and operand not in probe.nodes:
                    yield trailing_stride(operand, probe.shape, probe.reduce_rank) is not None

    # ---------------------------------------------------------------- driver
    def run(self) -> list[Group]:
        for node in self.graph.nodes:
            if node in self.in_chain:
                continue  # joins its cat's group with the cat
            kind = _Kind(False) if node in self.cat_chains else _classify(node)
            if kind is None:
                continue
            operands = self._operands(node)
            candidates: list[Group] = []
            for operand in reversed(operands):
                owner = self.group_of.get(operand)
                if owner is not None and owner not in candidates:
                    candidates.append(owner)
            candidates.sort(key=lambda g: (not g.is_rows, -g.index))  # rows groups can absorb pointwise ones
            for group in candidates:
                ok, k = self._fits(group, node, kind)
                if not ok:
                    continue
                outside = [o for o in operands if self.group_of.get(o) is not group]
                if self._depends_on(outside, group):
                    continue
                group.reduce_rank = k
                self._add(group, node)
                for other in candidates:
                    if other is not group:
                        self._try_merge(group, other)
                break
            else:
                self._start(node, kind)
        kept = [g for g in self.groups if len(g.nodes) >= 2 or _reads_strided(g)]
        for number, group in enumerate(kept):
            group.index = number
        return kept

    def _try_merge(self, group: Group, other: Group) -> None:
        """Absorb ``other`` (a pointwise group of the same full shape that feeds ``group``'s new node, e.g.
        the ``x * 0.5`` branch of a decomposed GELU) when that leaves the unit graph acyclic."""
        if other.is_rows or other.shape != group.shape or not other.nodes or \
                (other.has_cat and (group.has_cat or group.is_rows)):
            return
        merged = set(group.nodes) | set(other.nodes)
        outside = [o for member in merged for o in member.all_input_nodes if o not in merged]
        if group.is_rows and any(
            trailing_stride(o, group.shape, group.reduce_rank) is None
            for member in other.nodes for o in member.all_input_nodes if o not in merged
        ):
            return
        if self._reaches(outside, merged):
            return
        group.nodes = sorted(merged, key=self.position.__getitem__)
        for member in other.nodes:
            self.group_of[member] = group
        other.nodes = []

    def _reaches(self, start: list[fx.Node], targets: set[fx.Node]) -> bool:
        """Whether any of ``start`` depends on a node of ``targets`` (other groups count as units)."""
        seen: set[fx.Node] = set()
        stack = list(start)
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if node in targets:
                return True
            owner = self.group_of.get(node)
            if owner is not None and not (set(owner.nodes) & targets):
                for member in owner.nodes:
                    stack.extend(member.all_input_nodes)
            else:
                stack.extend(node.all_input_nodes)
        return False

    def _add(self, group: Group, node: fx.Node) -> None:
        """Add ``node`` (a cat with the chains of its pieces) to ``group``, keeping graph order."""
        for member in (*self.cat_chains.get(node, ()), node):
            group.nodes.append(member)
            self.group_of[member] = group
        group.nodes.sort(key=self.position.__getitem__)

    def _start(self, node: fx.Node, kind: _Kind) -> None:
        if kind.reduction:
            source = node.args[0]
            shape = static_shape(source)
            k = len(kind.dims)
            if trailing_stride(source, shape, k) is None:
                return
            group = Group(len(self.groups), shape, k)
        else:
            shape = static_shape(node)
            group = Group(len(self.groups), shape, 0)
        self.groups.append(group)
        self._add(group, node)


def _reads_strided(group: Group) -> bool:
    """Whether a single-node pointwise group reads a tensor that is not contiguous (Llama's RoPE negates
    a half-slice of q and k) or that it broadcasts (RoPE's positions times frequencies, (1, 128, 1) x
    (32,)): its fused kernel reads it through its strides in one launch, which a generated program
    makes by address, where the registry's call is a dispatch, a plan lookup and a scan (~25 us warm,
    ~170 us inside Llama's program, between kernels that evict the dispatcher's code from the caches)."""
    if group.is_rows or len(group.nodes) != 1:
        return False
    for operand in group.nodes[0].all_input_nodes:
        value = operand.meta.get("val")
        if isinstance(value, torch.Tensor) and value.numel() > 1 and \
                (not value.is_contiguous() or tuple(value.shape) != group.shape):
            return True
    return False


def partition(graph: fx.Graph) -> list[Group]:
    """Fusable groups of ``graph`` (each of at least two nodes, or one pointwise node that reads a
    strided tensor), in graph order of their first node."""
    return _Partitioner(graph).run()
