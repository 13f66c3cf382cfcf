"""Fuse adjacent elementwise loop nests of a generated kernel body into one nest.

Why: codegen emits one loop nest per materialised tile value, reduction and copy, so a row-wise chain
such as attention's online softmax (scores, row max, safe max, rescale, exp, row sum) became six loops
over the same rows one after the other. Each loop is ~10 numba IR statements and several basic blocks
of header alone, and numba's SSA, use-def, typing and lowering passes and LLVM's loop passes all pay
per statement and per block: the forward attention kernel had 25 loops, the tiny backward 49. Fusing
`for j in range(16): A` and `for k in range(16): B` into `for j in range(16): A; B[k := j]` keeps the
work and removes the second header (and, nested, the inner ones).

When fusing is exact (the only thing this module may ever do is leave the program's meaning as it is):
both loops run over the same `range(E)` (a literal or a variable neither body assigns), and no
iteration of the fused loop can see an effect of a *later* iteration of the first loop, nor an earlier
iteration of the second loop an effect it would not have seen before. Shown conservatively, on the
parsed statements of both bodies:

- both bodies are plain assignments, `for` and `if` statements, calls only of the pure helpers below
  (no `return`, `break`, `while`, store to kernel memory `m*` or to `err`, `tile_dot`, atomics, print);
- no plain variable assigned in one body is read or assigned in the other;
- every array written by one body and touched by the other (an alias class: a view, a loop-carried
  or branch-yielded name of an array joins the array's class) is touched in both bodies through a
  single name, always subscripted, with the fused loop's variable as the index at one fixed position.
  Iteration t then touches exactly the elements whose index there is t, in both loops: the fused
  loop performs, element by element, the same accesses in the same order.

Statements standing between the two loops are moved above the first when that is also exact: an
allocation (`x = np.empty(...)`) or a pure scalar assignment whose target the first loop does not
touch and whose operands it does not write. Anything else between them keeps the loops apart.

The pass works on the generated text (one statement per line, four-space indents) and parses each
candidate with `ast` for the analysis; lines are moved and renamed, never re-rendered, so the code it
emits is the code codegen wrote. A nest that fails to parse is left as it is.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

# Functions whose calls have no effect but their result (numpy scalar constructors and math through
# the `np.` / `math.` attributes, `support`'s and `fp8_support`'s helpers, a few builtins). Anything
# else called in a body (tile_dot, box checks, atomics, print) keeps its nest unfused.
_PURE_HELPERS = frozenset({
    "abs", "bool", "float", "int", "max", "min", "range",
    "as_pointer", "bf16_bits_to_f32", "erf32", "erf64", "exp32", "f16_bits_to_f32", "f32_to_bf16_bits",
    "f32_to_f16_bits", "fma32", "fmax", "fmin", "holds", "round_bf16", "round_bf16_64", "round_f16",
    "round_f16_64",
    "row_max", "row_min", "row_sum", "trunc_div", "trunc_mod",
    "f32_to_fp8e4b8_bits", "f32_to_fp8e4nv_bits", "f32_to_fp8e5_bits", "f32_to_fp8e5b16_bits",
    "fp8e4b8_bits_to_f32", "fp8e4nv_bits_to_f32", "fp8e5_bits_to_f32", "fp8e5b16_bits_to_f32",
    "round_fp8e4b8", "round_fp8e4nv", "round_fp8e5", "round_fp8e5b16",
})
_PURE_MODULES = frozenset({"np", "math"})
_PURE_METHODS = frozenset({"reshape"})  # a view: its result joins the array's alias class
_MEMORY = re.compile(r"m\d+|err")  # the kernel's memory arrays and error record
_HEADER = re.compile(r"for (\w+) in range\(([A-Za-z_]\w*|\d+)\):")
_INDENT = "    "


@dataclass
class _Node:
    """One statement of the body: its text without indentation, and its block when it opens one."""

    text: str
    children: list[_Node] | None = None

    def lines(self, depth: int) -> list[str]:
        out = [_INDENT * depth + self.text]
        for child in self.children or ():
            out.extend(child.lines(depth + 1))
        return out


def _tree(lines: list[str]) -> list[_Node] | None:
    """The statements of `lines` (indented by four spaces per level) as a tree; None if irregular."""
    root: list[_Node] = []
    stack: list[tuple[int, list[_Node]]] = [(0, root)]
    for raw in lines:
        if not raw.strip():
            continue
        stripped = raw.lstrip(" ")
        indent = len(raw) - len(stripped)
        if indent % len(_INDENT):
            return None
        depth = indent // len(_INDENT)
        while stack and stack[-1][0] > depth:
            stack.pop()
        if not stack or stack[-1][0] != depth:
            return None
        node = _Node(stripped)
        stack[-1][1].append(node)
        if stripped.endswith(":"):
            node.children = []
            stack.append((depth + 1, node.children))
    return root


def _parse(nodes: list[_Node]) -> list[ast.stmt] | None:
    """The statements of `nodes`, parsed as a function body (so that `return` parses)."""
    if not nodes:
        return []
    text = "\n".join(line for node in nodes for line in node.lines(1))
    try:
        (function,) = ast.parse("def _():\n" + text).body
    except (SyntaxError, ValueError):
        return None
    return function.body


@dataclass
class _Access:
    """What one stretch of statements does: plain names assigned and read, subscripted accesses
    (name, index expressions, written), names used bare (loaded other than as a subscript's base),
    and whether it stays within what may be reordered (`_Facts`)."""

    assigned: set[str] = field(default_factory=set)
    read: set[str] = field(default_factory=set)
    subscripts: list[tuple[str, list[ast.expr], bool]] = field(default_factory=list)
    bare: set[str] = field(default_factory=set)
    pure: bool = True


class _Facts(ast.NodeVisitor):
    def __init__(self) -> None:
        self.access = _Access()

    # statements
    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.Assign, ast.For, ast.If, ast.Pass,
                                                                  ast.Expr)):
            self.access.pure = False  # return, break, while, augmented assignment, ...
            return
        super().generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        if node.orelse or not isinstance(node.target, ast.Name):
            self.access.pure = False
            return
        self.access.assigned.add(node.target.id)
        self.visit(node.iter)
        for statement in node.body:
            self.visit(statement)

    def visit_Expr(self, node: ast.Expr) -> None:
        self.access.pure = False  # a bare expression statement is there for its effect

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target)
        self.visit(node.value)

    def _target(self, target: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self.access.assigned.add(target.id)
        elif isinstance(target, ast.Tuple):
            for element in target.elts:
                self._target(element)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            self.access.subscripts.append((target.value.id, _index(target.slice), True))
            self.visit(target.slice)
        else:
            self.access.pure = False

    # expressions
    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.value, ast.Name):
            self.access.subscripts.append((node.value.id, _index(node.slice), False))
        else:
            self.visit(node.value)
        self.visit(node.slice)

    def visit_Name(self, node: ast.Name) -> None:
        self.access.read.add(node.id)
        self.access.bare.add(node.id)

    def visit_Call(self, node: ast.Call) -> None:
        function = node.func
        if isinstance(function, ast.Name) and function.id in _PURE_HELPERS:
            pass
        elif isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name) \
                and function.value.id in _PURE_MODULES:
            pass
        elif isinstance(function, ast.Attribute) and function.attr in _PURE_METHODS:
            self.visit(function.value)
        else:
            self.access.pure = False
            return
        for argument in node.args:
            self.visit(argument)
        for keyword in node.keywords:
            self.visit(keyword.value)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if not (isinstance(node.value, ast.Name) and node.value.id in _PURE_MODULES):
            self.visit(node.value)  # `x.shape`, `x.T`: uses `x` whole


def _index(slice_: ast.expr) -> list[ast.expr]:
    return list(slice_.elts) if isinstance(slice_, ast.Tuple) else [slice_]


def _facts(statements: list[ast.stmt]) -> _Access:
    visitor = _Facts()
    for statement in statements:
        visitor.visit(statement)
    return visitor.access


class _Aliases:
    """Alias classes of the function's names: `y = x`, `y = x.reshape(...)` and tuple assignments of
    those (a loop's carried values, a branch's yield) put `y` in `x`'s class."""

    def __init__(self, statements: list[ast.stmt]) -> None:
        self.parent: dict[str, str] = {}
        for node in statements:
            for statement in ast.walk(node):
                if isinstance(statement, ast.Assign):
                    for target in statement.targets:
                        self._assign(target, statement.value)

    def _assign(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
                and len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts, strict=True):
                self._assign(t, v)
            return
        if not isinstance(target, ast.Name):
            return
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                and value.func.attr in _PURE_METHODS:
            value = value.func.value
        while isinstance(value, ast.Attribute):
            value = value.value
        if isinstance(value, ast.Name):
            self._union(target.id, value.id)
        elif isinstance(value, (ast.Tuple, ast.IfExp)):
            for name in ast.walk(value):
                if isinstance(name, ast.Name):
                    self._union(target.id, name.id)

    def find(self, name: str) -> str:
        while self.parent.get(name, name) != name:
            name = self.parent[name]
        return name

    def _union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb

    def members(self) -> dict[str, set[str]]:
        classes: dict[str, set[str]] = {}
        for name in self.parent:
            classes.setdefault(self.find(name), set()).add(name)
        for name in list(self.parent.values()):
            classes.setdefault(self.find(name), set()).add(name)
        return classes


class _Fuser:
    def __init__(self, everything: list[ast.stmt]) -> None:
        self.aliases = _Aliases(everything)
        self.classes = self.aliases.members()
        self.fused = 0

    def _class(self, name: str) -> set[str]:
        return self.classes.get(self.aliases.find(name), {name})

    def block(self, nodes: list[_Node]) -> list[_Node]:
        """Fuse the fusible neighbours among `nodes`, then inside every block (also the fused ones)."""
        out: list[_Node] = []
        i = 0
        while i < len(nodes):
            node = nodes[i]
            i += 1
            if _HEADER.fullmatch(node.text):
                while True:
                    merged = self._absorb(node, nodes, i)
                    if merged is None:
                        break
                    hoisted, node, i = merged
                    out.extend(hoisted)
            out.append(node)
        for node in out:
            if node.children:
                node.children = self.block(node.children)
        return out

    def _absorb(self, first: _Node, nodes: list[_Node], start: int):
        """(moved statements, fused nest, next index) when `first` can take in the next loop nest of
        `nodes` (from `start`, past movable statements), else None."""
        header = _HEADER.fullmatch(first.text)
        first_body = _parse(first.children or [])
        if header is None or first_body is None:
            return None
        variable, extent = header.groups()
        a = _facts(first_body)
        if not a.pure or extent in a.assigned:
            return None
        moved: list[_Node] = []
        j = start
        while j < len(nodes):
            candidate = nodes[j]
            match = _HEADER.fullmatch(candidate.text)
            if match is not None:
                break
            if candidate.children is not None or not self._movable(candidate, a):
                return None
            moved.append(candidate)
            j += 1
        else:
            return None
        second = nodes[j]
        other, other_extent = match.groups()
        second_body = _parse(second.children or [])
        if other_extent != extent or second_body is None:
            return None
        b = _facts(second_body)
        if not b.pure or extent in b.assigned or extent in {n for m in moved for n in _assigned(m)}:
            return None
        if not self._independent(a, b, variable, other):
            return None
        renamed = re.compile(rf"\b{re.escape(other)}\b")
        body = _rename(second.children or [], renamed, variable)
        self.fused += 1
        return moved, _Node(first.text, (first.children or []) + body), j + 1

    def _movable(self, node: _Node, a: _Access) -> bool:
        """Whether the single statement `node` may move above a loop that does `a`."""
        parsed = _parse([node])
        if parsed is None or len(parsed) != 1 or not isinstance(parsed[0], ast.Assign):
            return False
        s = _facts(parsed)
        if not s.pure or any(not isinstance(t, ast.Name) for t in parsed[0].targets):
            return False
        written_by_a = {self.aliases.find(n) for n, _, w in a.subscripts if w}
        touched_by_a = a.read | a.assigned | {n for n, _, _ in a.subscripts}
        for name in s.assigned:
            if name in touched_by_a or self._class(name) & touched_by_a:
                return False
        read = s.read | {n for n, _, _ in s.subscripts}
        return not (read & a.assigned) and not {self.aliases.find(n) for n in read} & written_by_a

    def _independent(self, a: _Access, b: _Access, va: str, vb: str) -> bool:
        """Whether loops over `va` doing `a` and over `vb` doing `b` may run as one (module docstring)."""
        a_names = a.read | a.assigned | {n for n, _, _ in a.subscripts}
        b_names = b.read | b.assigned | {n for n, _, _ in b.subscripts}
        if a.assigned & b_names or b.assigned & a_names or va in b_names or vb in a_names:
            return False
        written = {self.aliases.find(n) for n, _, w in a.subscripts + b.subscripts if w}
        for n, _, w in a.subscripts + b.subscripts:
            if w and any(_MEMORY.fullmatch(m) for m in self._class(n)):
                return False  # a store to kernel memory (or through a view of it)
        for root in written:
            members = self._class(root)
            in_a = [(n, i) for n, i, _ in a.subscripts if n in members]
            in_b = [(n, i) for n, i, _ in b.subscripts if n in members]
            a_writes = any(w for n, _, w in a.subscripts if n in members)
            b_writes = any(w for n, _, w in b.subscripts if n in members)
            a_touches = bool(in_a or members & a.bare)
            b_touches = bool(in_b or members & b.bare)
            if not ((a_writes and b_touches) or (b_writes and a_touches)):
                continue  # written on one side only and not touched on the other
            if members & (a.bare | b.bare):
                return False  # used whole (`row_sum(x)`, `x.reshape`): not element by element
            if len({n for n, _ in in_a + in_b}) != 1:
                return False
            positions = {_position(i, va) for _, i in in_a} | {_position(i, vb) for _, i in in_b}
            if len(positions) != 1 or None in positions:
                return False
        return True


def _position(index: list[ast.expr], variable: str) -> int | None:
    """The position at which `index` is exactly `variable` (None when at none or several)."""
    hits = [k for k, e in enumerate(index) if isinstance(e, ast.Name) and e.id == variable]
    return hits[0] if len(hits) == 1 else None


def _assigned(node: _Node) -> set[str]:
    parsed = _parse([node])
    return _facts(parsed).assigned if parsed else set()


def _rename(nodes: list[_Node], pattern: re.Pattern, name: str) -> list[_Node]:
    return [_Node(pattern.sub(name, node.text),
                  None if node.children is None else _rename(node.children, pattern, name))
            for node in nodes]


_SCALAR = re.compile(r"v\d+")  # codegen's names of scalar values (`_Lowering.define`)
_WORD = re.compile(r"[A-Za-z_]\w*")


def drop_dead_scalars(body: list[str], context: list[str]) -> tuple[list[str], int]:
    """`body` without the assignments of scalar values (`v<id> = <pure expression>`) that nothing in
    the function reads, and how many were dropped. Why: codegen defines a scalar when its op is
    lowered, and a pointer's integer offset whose loads and stores all use its affine form, or a
    product only a bounds check proved, is then never read (26 assignments, ~90 numba IR statements
    in the tiny attention backward, each typed and lowered). Dropping one can make another dead, so
    it repeats; a block left empty gets `pass`."""
    tree = _tree([part for line in body for part in line.split("\n")])
    if tree is None:
        return body, 0
    counts: dict[str, int] = {}
    for line in [*context, *body]:
        for word in _WORD.findall(line):
            counts[word] = counts.get(word, 0) + 1
    dropped = 0

    def prune(nodes: list[_Node]) -> list[_Node]:
        nonlocal dropped
        kept = []
        for node in nodes:
            if node.children is not None:
                node.children = prune(node.children) or [_Node("pass")]
                kept.append(node)
                continue
            target, _, value = node.text.partition(" = ")
            if _SCALAR.fullmatch(target) and counts.get(target, 0) == 1:
                parsed = _parse([node])
                if parsed is not None and len(parsed) == 1 and isinstance(parsed[0], ast.Assign) \
                        and _facts(parsed).pure:
                    for word in _WORD.findall(node.text):
                        counts[word] -= 1
                    dropped += 1
                    continue
            kept.append(node)
        return kept

    while True:
        before = dropped
        tree = prune(tree)
        if dropped == before:
            break
    return [line for node in tree for line in node.lines(0)], dropped


def fuse_loops(body: list[str], context: list[str]) -> tuple[list[str], int]:
    """`body` (the generated kernel body, four-space indents from 0) with adjacent fusible loop nests
    fused, and how many fusions were made. `context`: the other statements of the function (its
    prologue), for the alias classes."""
    tree = _tree([part for line in body for part in line.split("\n")])
    context_tree = _tree([part for line in context for part in line.split("\n")])
    whole = _parse(tree) if tree is not None else None
    everything = _parse(context_tree) if context_tree is not None else None
    if tree is None or whole is None or everything is None:
        return body, 0
    fuser = _Fuser(everything + whole)
    fused = fuser.block(tree)
    return [line for node in fused for line in node.lines(0)], fuser.fused
