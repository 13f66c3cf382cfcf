"""Tell `tile_dot` when a kernel never reads its product outside the counted rows and columns.

Why: a 2-D `tl.dot` of box loads computes its product with one gemm on the counted (unmasked) rows of
`a` and columns of `b`, then fills the rest of the BLOCK_M x BLOCK_N tile with the exact values of the
masked lanes (0, or NaN where a NaN/Inf of the other operand meets them), because a kernel may read
any lane of a tile. That fill costs time in proportion to the padding, so the op library had to fit
every matmul tile tightly to its problem, and each shape compiled a specialisation of its own (the
README demo: eight matmul tiles, ~0.6-1 s of numba each). Most kernels, the op library's matmul among
them, read the product only where they store it: at counted rows and columns. Told so, `tile_dot`
skips the fill and a wide tile costs nothing over a fitted one.

When the answer is "not read" (the only claim this module may ever make is one that holds): the
product `pN = tile_dot(...)` is assigned once in the kernel body, and every other use of `pN` is a
subscript `pN[i, j]` in which `i` is the variable of an enclosing `for i in range(cA)` and `j` that of
an enclosing `for j in range(cB)`, where `cA` and `cB` are the very names passed to `tile_dot` as the
counted rows of `a` and the counted columns of `b`; each of `cA`, `cB` is assigned once, in the same
statement list as the call and before it, and every use lies in a statement of that list after the
call (so the uses see this call's product and the counts it was computed for); neither loop variable
is assigned inside its loop. Anything else (a whole-tile loop such as an accumulator's, an alias, a
literal count) keeps the fill.

The pass works on the generated text like `fusion`: it parses the body with `ast` and changes only the
last argument of a qualifying call from `True` to `False`.
"""

from __future__ import annotations

import ast

_A_ROWS, _B_COLS = 4, 16  # positions of the counted rows of a and columns of b among tile_dot's arguments
_ARGUMENTS = 23


def mark_unread_padding(body: list[str]) -> tuple[list[str], int]:
    """`body` (generated kernel body, four-space indents from 0) with `padding_read` False in each
    `tile_dot` call whose product is read only at counted rows and columns, and how many calls."""
    lines = [part for line in body for part in line.split("\n")]
    if not any("tile_dot(" in line for line in lines):
        return body, 0
    source = "def kernel():\n" + "\n".join("    " + line for line in lines)
    try:
        function = ast.parse(source).body[0]
    except SyntaxError:
        return body, 0
    stores = _store_counts(function)
    changed = 0
    for statements in _statement_lists(function):
        for position, statement in enumerate(statements):
            call = _tile_dot_assignment(statement)
            if call is None:
                continue
            product = statement.targets[0].id
            rows, cols = call.args[_A_ROWS], call.args[_B_COLS]
            if not (isinstance(rows, ast.Name) and isinstance(cols, ast.Name)):
                continue
            if stores.get(product) != 1 or stores.get(rows.id) != 1 or stores.get(cols.id) != 1:
                continue
            if not _assigned_before(statements[:position], {rows.id, cols.id}):
                continue
            if _reads_only_counted(function, statements[position + 1:], statement, product, rows.id, cols.id):
                line = statement.lineno - 2  # the wrapper's `def` is line 1
                text = lines[line]
                if text.rstrip().endswith(", True)"):
                    lines[line] = text.rstrip()[: -len(", True)")] + ", False)"
                    changed += 1
    return (lines, changed) if changed else (body, 0)


def _tile_dot_assignment(statement: ast.stmt) -> ast.Call | None:
    """The call of `pN = tile_dot(..., True)` written on one line, else None."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name) and isinstance(statement.value, ast.Call)):
        return None
    call = statement.value
    if not (isinstance(call.func, ast.Name) and call.func.id == "tile_dot" and len(call.args) == _ARGUMENTS
            and isinstance(call.args[-1], ast.Constant) and call.args[-1].value is True
            and statement.lineno == statement.end_lineno):
        return None
    return call


def _store_counts(function: ast.FunctionDef) -> dict[str, int]:
    """How many times each name is assigned (assignment targets, loop variables) in the function."""
    counts: dict[str, int] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            counts[node.id] = counts.get(node.id, 0) + 1
    return counts


def _statement_lists(node: ast.AST):
    """Every statement list (function body, loop and branch bodies) under `node`."""
    for child in ast.walk(node):
        for field in ("body", "orelse"):
            statements = getattr(child, field, None)
            if isinstance(statements, list) and statements and isinstance(statements[0], ast.stmt):
                yield statements


def _assigned_before(statements: list[ast.stmt], names: set[str]) -> bool:
    """Whether each of `names` is assigned by one of `statements` itself (not inside a nested block)."""
    found = set()
    for statement in statements:
        if isinstance(statement, ast.Assign):
            found.update(target.id for target in statement.targets if isinstance(target, ast.Name))
    return names <= found


def _reads_only_counted(function: ast.FunctionDef, after: list[ast.stmt], call: ast.stmt, product: str,
                        rows: str, cols: str) -> bool:
    """Whether every use of `product` in the function, other than its assignment `call`, lies in one of
    the statements `after` and is a `product[i, j]` with i and j loop variables over range(rows) and
    range(cols) (module docstring)."""
    inside = {id(node) for statement in after for node in ast.walk(statement)}
    ok = True

    def visit(node: ast.AST, loops: dict[str, tuple[str, ast.For]], parent: ast.AST | None) -> None:
        nonlocal ok
        if not ok:
            return
        if node is call:
            return
        if isinstance(node, ast.Name) and node.id == product:
            ok = id(node) in inside and _counted_subscript(parent, node, loops, rows, cols)
            return
        if isinstance(node, ast.For):
            for child in (node.target, node.iter, *node.orelse):
                visit(child, loops, node)
            bound = _range_bound(node)
            inner = dict(loops)
            if isinstance(node.target, ast.Name):
                inner.pop(node.target.id, None)
                if bound is not None:
                    inner[node.target.id] = (bound, node)
            for child in node.body:
                visit(child, inner, node)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, loops, node)

    visit(function, {}, None)
    return ok


def _range_bound(loop: ast.For) -> str | None:
    """`c` of `for x in range(c)` with a plain name `c`, else None."""
    iterator = loop.iter
    if not (isinstance(iterator, ast.Call) and isinstance(iterator.func, ast.Name)
            and iterator.func.id == "range" and len(iterator.args) == 1 and not iterator.keywords):
        return None
    bound = iterator.args[0]
    return bound.id if isinstance(bound, ast.Name) else None


def _counted_subscript(parent: ast.AST | None, name: ast.Name, loops: dict[str, tuple[str, ast.For]],
                       rows: str, cols: str) -> bool:
    """Whether `name` is read as `name[i, j]` with i over range(rows) and j over range(cols), neither loop
    variable assigned in its loop's body."""
    if not (isinstance(parent, ast.Subscript) and parent.value is name and isinstance(parent.ctx, ast.Load)):
        return False
    index = parent.slice
    if not (isinstance(index, ast.Tuple) and len(index.elts) == 2
            and all(isinstance(element, ast.Name) for element in index.elts)):
        return False
    for variable, bound in zip(index.elts, (rows, cols), strict=True):
        loop = loops.get(variable.id)
        if loop is None or loop[0] != bound or _assigns(loop[1].body, variable.id):
            return False
    return True


def _assigns(statements: list[ast.stmt], name: str) -> bool:
    return any(isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store)
               for statement in statements for node in ast.walk(statement))
