"""Frontend: Python AST of a `@jit` function -> typed block IR (`ir.Function`).

The frontend evaluates the kernel's AST abstractly.  Compile-time values (constexprs, Python numbers,
tuples, dtypes, None) are plain Python objects and fold as Python does; runtime values are
`semantic.tensor` objects whose operators emit IR.  `@jit` helpers are inlined.  `if`/`for`/`while` on
runtime values become structured region ops; the same statements on compile-time values are resolved
(unrolled for `tl.static_range` and tuples) at compile time.
"""

from __future__ import annotations

import ast
import builtins
import operator

from . import core
from . import dtypes as D
from . import semantic as S
from .errors import CompilationError, DSLError
from .ir import Block, BlockPtrType, Function, Loc, Param, TensorType, param_type, verify
from .semantic import tensor

_MAX_INLINE_DEPTH = 48

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}
_CMPOPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def _py_min(*args, **kw):
    if any(isinstance(a, tensor) for a in args):
        out = args[0]
        for a in args[1:]:
            out = S.minmax("minimum", out, a)
        return out
    return builtins.min(*args, **kw)


def _py_max(*args, **kw):
    if any(isinstance(a, tensor) for a in args):
        out = args[0]
        for a in args[1:]:
            out = S.minmax("maximum", out, a)
        return out
    return builtins.max(*args, **kw)


def _py_abs(x):
    return S.unary("abs", x) if isinstance(x, tensor) else builtins.abs(x)


def _py_range(*args, **kw):
    return core.range(*args, **kw)


def _py_breakpoint():
    """`breakpoint()` inside a kernel: stop in the debugger with the kernel's runtime variables."""
    comp = S.current().compiler
    names, vals = [], []
    for name, v in comp.scope.items():
        if isinstance(v, tensor) and not v.is_block_ptr() and name.isidentifier() and name != "pid":
            names.append(name)
            vals.append(v.handle)
    S.current().emit("breakpoint", vals, [], {"names": tuple(names)})


_BUILTIN_OVERRIDES = {
    "breakpoint": _py_breakpoint,
    "range": _py_range,
    "print": core.static_print,
    "min": _py_min,
    "max": _py_max,
    "abs": _py_abs,
}
_ALLOWED_BUILTINS = {
    "len",
    "isinstance",
    "int",
    "float",
    "bool",
    "tuple",
    "list",
    "zip",
    "enumerate",
    "getattr",
    "hasattr",
    "type",
    "str",
    "repr",
    "round",
    "sorted",
    "reversed",
    "all",
    "any",
    "sum",
    "divmod",
    "True",
    "False",
    "None",
    "ValueError",
    "TypeError",
    "AssertionError",
    "NotImplementedError",
    "slice",
    "dict",
    "set",
    "map",
    "pow",
}


def _contains_return(node) -> bool:
    """Whether `node` has a `return` of its own (not one of a nested function or lambda)."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Return):
            return True
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(n))
    return False


def _flatten(v):
    """Leaves of a (nested) tuple/list of returned values, and its structure."""
    if isinstance(v, (tuple, list)):
        leaves, shapes = [], []
        for x in v:
            lv, sh = _flatten(x)
            leaves += lv
            shapes.append(sh)
        return leaves, (type(v).__name__, tuple(shapes))
    return [v], "leaf"


def _unflatten(shape, it):
    if shape == "leaf":
        return next(it)
    kind, parts = shape
    vals = [_unflatten(p, it) for p in parts]
    return tuple(vals) if kind == "tuple" else vals


def _describe(v) -> str:
    if v is None:
        return "nothing"
    if isinstance(v, (tuple, list)):
        return f"a {type(v).__name__} of {len(v)}"
    return "a value"


def _assigned_names(stmts) -> set[str]:
    out: set[str] = set()
    for st in stmts:
        for node in ast.walk(st):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                out.add(node.id)
    return out


class FunctionCompiler:
    """Compiles (or inlines) one `JITFunction` body into the current builder."""

    def __init__(self, jf, builder: S.Builder, scope: dict, depth: int = 0, kernel_name: str = ""):
        self.jf = jf
        self.b = builder
        self.scope = scope
        self.depth = depth
        self.kernel_name = kernel_name or jf.__name__
        self.ret_value = None
        self.returned = False
        self.node = jf.tree
        self.dropped: dict[str, str] = {}

    # ------------------------------------------------------------------ locations and errors
    def loc(self, node) -> Loc:
        lineno = self.jf.line_offset + getattr(node, "lineno", 1) - 1
        col = getattr(node, "col_offset", 0) + self.jf.col_offset
        return Loc(self.jf.filename, lineno, col, self.jf.source_line(lineno), self.jf.__name__)

    def error(self, node, msg) -> CompilationError:
        lc = self.loc(node)
        return CompilationError(msg, lc.filename, lc.lineno, lc.col, lc.source_line, self.jf.__name__)

    def _guard(self, node, fn, *args):
        prev_node, prev_loc = self.node, self.b.loc
        self.node = node
        self.b.loc = self.loc(node)
        try:
            return fn(*args)
        except CompilationError:
            raise
        except (
            DSLError,
            TypeError,
            ValueError,
            IndexError,
            AttributeError,
            KeyError,
            ZeroDivisionError,
            OverflowError,
            AssertionError,
        ) as e:
            raise self.error(node, str(e) or type(e).__name__) from None
        finally:
            self.node = prev_node
            self.b.loc = prev_loc

    # ------------------------------------------------------------------ entry
    def compile_body(self):
        prev = getattr(self.b, "compiler", None)
        self.b.compiler = self
        try:
            return self._compile_body()
        finally:
            self.b.compiler = prev

    def call(self, fn, args):
        """Call `fn` (a @jit function, inlined, or a builtin/Python callable) from a builtin."""
        from .jit import JITFunction

        if isinstance(fn, JITFunction):
            return self.inline(fn, list(args), {}, self.node)
        return fn(*args)

    def _compile_body(self):
        body = self.jf.tree.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body = body[1:]
        self.visit_body(body)
        return self.ret_value

    def visit_body(self, stmts) -> bool:
        for i, st in enumerate(stmts):
            if isinstance(st, ast.If) and _contains_return(st):
                # an `if` with a `return` inside: the statements after it are its continuation, compiled
                # at the end of each branch (a branch that returns early never reaches them)
                self._guard(st, self.if_with_return, st, list(stmts[i + 1 :]))
                return self.returned
            self.visit_stmt(st)
            if self.returned:
                return True
        return False

    def if_with_return(self, node, rest):
        """`if` whose branches may `return` (Triton's early return): each branch is compiled followed by
        `rest`, so every path ends in a return or at the end of the function; a runtime condition
        becomes an `if` op whose results are the returned value(s)."""
        cond = S.unwrap(self.eval(node.test))
        if not isinstance(cond, tensor):
            return self.visit_body(list(node.body if cond else node.orelse) + rest)
        cond = self._scalar_condition(node, cond)
        before = dict(self.scope)
        blocks, rets = [], []
        for body in (node.body, node.orelse):
            blk = self.b.push()
            self.scope = dict(before)
            self.returned, self.ret_value = False, None
            self.visit_body(list(body) + rest)
            self.b.pop()
            blocks.append(blk)
            rets.append(self.ret_value)
        leaves_t, shape_t = _flatten(rets[0])
        leaves_e, shape_e = _flatten(rets[1])
        if shape_t != shape_e:
            raise self.error(
                node,
                "the paths through this runtime `if` return different kinds of values "
                f"({_describe(rets[0])} and {_describe(rets[1])}); every return must give the same "
                "structure",
            )
        merged, dynamic, types = [], [], []
        for i, (a, b) in enumerate(zip(leaves_t, leaves_e, strict=True)):
            if not isinstance(a, tensor) and not isinstance(b, tensor) and type(a) is type(b) and a == b:
                merged.append(a)
                continue
            if a is None or b is None:
                raise self.error(
                    node, "a path through this runtime `if` returns None where another returns a value"
                )
            dynamic.append(i)
            types.append(self._unify("return value", a, b, node))
            merged.append(None)
        for blk, leaves in zip(blocks, (leaves_t, leaves_e), strict=True):
            self.b.push(blk)
            vals = [self._coerce(leaves[i], t).handle for i, t in zip(dynamic, types, strict=True)]
            self.b.emit("yield", vals, [])
            self.b.pop()
        results = self.b.emit("if", [cond.handle], types, regions=blocks)
        for i, r in zip(dynamic, results, strict=True):
            merged[i] = tensor(r)
        self.scope = before
        self.returned = True
        self.ret_value = _unflatten(shape_t, iter(merged))
        return True

    # ------------------------------------------------------------------ statements
    def visit_stmt(self, node):
        meth = getattr(self, "stmt_" + type(node).__name__, None)
        if meth is None:
            raise self.error(
                node, f"unsupported syntax: {type(node).__name__} statements are not supported in DSL kernels"
            )
        return self._guard(node, meth, node)

    def stmt_Expr(self, node):
        self.eval(node.value)

    def stmt_Pass(self, node):
        pass

    def stmt_Assign(self, node):
        value = self.eval(node.value)
        for t in node.targets:
            self.assign(t, value)

    def stmt_AnnAssign(self, node):
        if node.value is None:
            return
        value = self.eval(node.value)
        ann = ast.unparse(node.annotation)
        if "constexpr" in ann:
            if isinstance(value, tensor):
                raise self.error(
                    node.value,
                    f"a value annotated constexpr must be known at compile time; "
                    f"'{ast.unparse(node.value)}' is a runtime tensor",
                )
            value = S.unwrap(value)
        self.assign(node.target, value)

    def stmt_AugAssign(self, node):
        if not isinstance(node.target, ast.Name):
            raise self.error(
                node.target, f"unsupported syntax: augmented assignment to {type(node.target).__name__}"
            )
        cur = self.lookup(node.target.id, node.target)
        val = self.eval(node.value)
        self.scope[node.target.id] = self._binop(type(node.op), cur, val, node)

    def assign(self, target, value):
        if isinstance(target, ast.Name):
            self.scope[target.id] = S.unwrap(value) if isinstance(value, S.constexpr) else value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, (tuple, list)):
                raise self.error(
                    target, f"cannot unpack {type(value).__name__} into {len(target.elts)} names"
                )
            if len(value) != len(target.elts):
                raise self.error(target, f"cannot unpack {len(value)} values into {len(target.elts)} names")
            for t, v in zip(target.elts, value, strict=False):
                self.assign(t, v)
        else:
            raise self.error(
                target,
                f"unsupported syntax: assignment to {type(target).__name__} "
                "(tensors are immutable; use tl.store to write memory)",
            )

    def stmt_Return(self, node):
        self.ret_value = self.eval(node.value) if node.value is not None else None
        self.returned = True

    def stmt_Assert(self, node):
        cond = self.eval(node.test)
        msg = self.eval(node.msg) if node.msg is not None else ""
        if isinstance(cond, tensor):
            S.device_assert(cond, msg)
        elif not cond:
            raise self.error(node, f"assertion failed at compile time: {msg}")

    def stmt_If(self, node):
        cond = S.unwrap(self.eval(node.test))
        if not isinstance(cond, tensor):
            self.visit_body(node.body if cond else node.orelse)
            return
        self.runtime_if(node, cond)

    def stmt_For(self, node):
        if node.orelse:
            raise self.error(node, "unsupported syntax: for/else")
        it = self.eval(node.iter)
        if isinstance(it, core.static_range):
            args = [S.unwrap(a) for a in it.args]
            if any(isinstance(a, tensor) for a in args):
                raise self.error(
                    node.iter, "tl.static_range bounds must be compile-time constants (constexpr)"
                )
            rng = (
                builtins.range(*[a for a in args if a is not None])
                if args[1] is not None
                else builtins.range(args[0])
            )
            if args[1] is None and args[2] is not None:
                raise self.error(node.iter, "static_range(n, step=...) needs an explicit start")
            self._unroll(node, list(rng))
        elif isinstance(it, (tuple, list)):
            self._unroll(node, list(it))
        elif isinstance(it, core.range):
            self.runtime_for(node, it)
        else:
            raise self.error(
                node.iter,
                f"cannot iterate over {type(it).__name__} in a kernel; use range, "
                "tl.range or tl.static_range",
            )

    def _unroll(self, node, values):
        for v in values:
            self.assign(node.target, v)
            if self.visit_body(node.body):
                raise self.error(node, "return inside a loop is not supported")

    def stmt_While(self, node):
        if node.orelse:
            raise self.error(node, "unsupported syntax: while/else")
        self.runtime_while(node)

    def stmt_Break(self, node):
        raise self.error(node, "unsupported syntax: break is not supported in DSL kernels (as in Triton)")

    def stmt_Continue(self, node):
        raise self.error(node, "unsupported syntax: continue is not supported in DSL kernels (as in Triton)")

    # ------------------------------------------------------------------ structured control flow
    def _unify(self, name, a, b, node):
        """Common TensorType of two values merged at a join point (None if both equal constants)."""
        if isinstance(a, tensor) and a.is_block_ptr() or isinstance(b, tensor) and b.is_block_ptr():
            if isinstance(a, tensor) and isinstance(b, tensor) and a.type == b.type:
                return a.type
            raise self.error(
                node,
                f"variable '{name}' is a block pointer on one path and something else "
                "(or a block pointer of another type) on another",
            )
        a_py, b_py = not isinstance(a, tensor), not isinstance(b, tensor)
        for v, py in ((a, a_py), (b, b_py)):
            if py and not S._is_py_scalar(v):
                raise self.error(
                    node,
                    f"variable '{name}' is the compile-time value {v!r} on one path and "
                    "something else on another: cannot merge them at runtime",
                )
        da = a.dtype if not a_py else S.scalar_dtype_of_py(a)
        db = b.dtype if not b_py else S.scalar_dtype_of_py(b)
        if da.is_ptr() or db.is_ptr():
            if da == db and a.type.root == b.type.root:
                return TensorType(da, S.broadcast_shapes(a.shape, b.shape), a.type.root)
            raise self.error(node, f"variable '{name}' points into different arguments on different paths")
        dt = S.computation_type(da, a_py, db, b_py, False)
        shape = S.broadcast_shapes(() if a_py else a.shape, () if b_py else b.shape)
        return TensorType(dt, shape)

    def _unify_ty(self, name, ty, y, node):
        """Type of a loop-carried variable whose type was `ty` and which the body sets to `y`."""
        if isinstance(ty, BlockPtrType):
            if isinstance(y, tensor) and y.type == ty:
                return ty
            raise self.error(node, f"loop-carried block pointer '{name}' changes type in the loop body")
        if not isinstance(y, tensor):
            if not S._is_py_scalar(y):
                raise self.error(
                    node,
                    f"loop-carried variable '{name}' is set to the compile-time value {y!r} in the loop body",
                )
            return TensorType(
                S.computation_type(ty.dtype, False, S.scalar_dtype_of_py(y), True, False), ty.shape, ty.root
            )
        if y.is_block_ptr():
            raise self.error(node, f"loop-carried variable '{name}' becomes a block pointer in the loop body")
        if ty.dtype.is_ptr() or y.dtype.is_ptr():
            if ty.dtype == y.dtype and ty.root == y.type.root:
                return TensorType(ty.dtype, S.broadcast_shapes(ty.shape, y.shape), ty.root)
            raise self.error(node, f"loop-carried pointer '{name}' changes type in the loop body")
        dt = S.computation_type(ty.dtype, False, y.dtype, False, False)
        return TensorType(dt, S.broadcast_shapes(ty.shape, y.shape))

    def _coerce(self, v, ty):
        """Emit casts/broadcasts so that `v` has TensorType/BlockPtrType `ty`."""
        if isinstance(ty, BlockPtrType):
            return v
        if not isinstance(v, tensor):
            return S.constant(v, ty.dtype, ty.shape)
        if ty.dtype.is_ptr():
            return S.broadcast_to_shape(v, ty.shape)
        return S.broadcast_to_shape(S.cast(v, ty.dtype), ty.shape)

    def _scalar_condition(self, node, cond):
        """The int1 condition of a runtime `if`; a block condition is refused at the `if` line."""
        if cond.shape != ():
            raise self.error(
                node.test,
                f"the condition of a runtime `if` must be a scalar, got a block of shape {list(cond.shape)}",
            )
        return S.to_int1(cond)

    def runtime_if(self, node, cond):
        cond = self._scalar_condition(node, cond)
        before = dict(self.scope)
        blocks, scopes = [], []
        for body in (node.body, node.orelse):
            blk = self.b.push()
            self.scope = dict(before)
            if self.visit_body(body):
                raise self.error(
                    node,
                    "return inside a runtime `if` is not supported; assign to a variable "
                    "and return after the if",
                )
            self.b.pop()
            blocks.append(blk)
            scopes.append(self.scope)
        st, se = scopes
        names, types = [], []
        merged = dict(before)
        for name in st:
            if name not in se:
                continue
            vt, ve = st[name], se[name]
            if vt is ve:
                merged[name] = vt
                continue
            if (
                not isinstance(vt, tensor)
                and not isinstance(ve, tensor)
                and type(vt) is type(ve)
                and vt == ve
            ):
                merged[name] = vt
                continue
            names.append(name)
            types.append(self._unify(name, vt, ve, node))
        for blk, sc in zip(blocks, scopes, strict=False):
            self.b.push(blk)
            vals = [self._coerce(sc[n], t).handle for n, t in zip(names, types, strict=False)]
            self.b.emit("yield", vals, [])
            self.b.pop()
        results = self.b.emit("if", [cond.handle], types, regions=blocks)
        for n, r in zip(names, results, strict=False):
            merged[n] = tensor(r)
        for sc in scopes:
            for n in sc:
                if n not in merged:
                    self.dropped[n] = (
                        f"it is assigned in only one branch of the runtime `if` at line "
                        f"{self.loc(node).lineno}; assign it before the `if` or in both branches"
                    )
        self.scope = merged

    def _carried(self, body_stmts, exclude=()):
        assigned = _assigned_names(body_stmts) - set(exclude)
        carried = []
        for name in sorted(assigned):
            if name not in self.scope:
                continue
            v = self.scope[name]
            if isinstance(v, tensor) or S._is_py_scalar(v):
                carried.append(name)
        return carried

    def _loop(self, node, carried, init_vals, build):
        """Shared driver for `for`/`while`: iterates until the loop-carried types are stable.

        `build(arg_types)` emits the region(s) and returns (regions, yielded values, scope after body)."""
        types = []
        for n, v in zip(carried, init_vals, strict=False):
            types.append(v.type if isinstance(v, tensor) else self._unify(n, v, v, node))
        before = dict(self.scope)
        for _attempt in builtins.range(4):
            self.scope = dict(before)
            regions, yielded, after = build(types)
            new_types = [
                self._unify_ty(n, t, y, node) for n, t, y in zip(carried, types, yielded, strict=False)
            ]
            if new_types == types:
                break
            types = new_types
        else:
            raise self.error(node, "loop-carried variable types do not converge")
        # constant (non-carried) compile-time variables must not change inside the loop
        for name, v in before.items():
            if name in after and after[name] is not v and name not in carried and not isinstance(v, tensor):
                if not (type(after[name]) is type(v) and after[name] == v):
                    raise self.error(
                        node,
                        f"variable '{name}' holds the compile-time value {v!r} and is "
                        "reassigned inside a runtime loop; initialise it with a tensor "
                        "(e.g. tl.zeros / tl.full) before the loop",
                    )
        return regions, yielded, types, before, after

    def runtime_for(self, node, rng):
        lo, hi, step = (S.unwrap(a) for a in rng.args)
        if hi is None:
            lo, hi = 0, lo
        if step is None:
            step = 1
        if isinstance(step, int) and step == 0:
            raise self.error(node.iter, "range step must not be zero")
        dts = [a.dtype if isinstance(a, tensor) else S.scalar_dtype_of_py(a) for a in (lo, hi, step)]
        for a, d in zip((lo, hi, step), dts, strict=False):
            if not d.is_int() or (isinstance(a, tensor) and a.shape != ()):
                raise self.error(node.iter, "range bounds must be integer scalars")
        iv_dt = D.int64 if D.int64 in dts else D.int32
        lo_t, hi_t, st_t = (S.cast(S.to_tensor(a), iv_dt) for a in (lo, hi, step))
        if not isinstance(node.target, ast.Name):
            raise self.error(
                node.target, "unsupported syntax: the target of a runtime for loop must be a name"
            )
        iv_name = node.target.id
        carried = self._carried(node.body, exclude=(iv_name,))
        init_vals = [self.scope[n] for n in carried]

        def build(types):
            iv = self.b.new_value(TensorType(iv_dt), iv_name)
            args = [self.b.new_value(t, n) for n, t in zip(carried, types, strict=False)]
            body = self.b.push(Block([iv] + args))
            self.scope[iv_name] = tensor(iv)
            for n, a in zip(carried, args, strict=False):
                self.scope[n] = tensor(a)
            if self.visit_body(node.body):
                raise self.error(node, "return inside a loop is not supported")
            self.b.pop()
            return [body], [self.scope[n] for n in carried], self.scope

        prev_iv = self.scope.get(iv_name, _MISSING)
        regions, yielded, types, before, after = self._loop(node, carried, init_vals, build)
        self.b.push(regions[0])
        self.b.emit("yield", [self._coerce(y, t).handle for y, t in zip(yielded, types, strict=False)], [])
        self.b.pop()
        inits = [self._coerce(v, t).handle for v, t in zip(init_vals, types, strict=False)]
        results = self.b.emit("for", [lo_t.handle, hi_t.handle, st_t.handle] + inits, types, regions=regions)
        for n in after:
            if n not in before and n not in carried:
                self.dropped[n] = (
                    f"it is first assigned inside the runtime loop at line {self.loc(node).lineno}; "
                    "assign it before the loop to use it afterwards"
                )
        self.scope = before
        for n, r in zip(carried, results, strict=False):
            self.scope[n] = tensor(r)
        if prev_iv is _MISSING:
            self.scope.pop(iv_name, None)

    def runtime_while(self, node):
        test0 = None
        carried = self._carried(node.body)
        init_vals = [self.scope[n] for n in carried]
        if not carried:
            scratch = self.b.push()  # a compile-time test folds; a runtime one is re-emitted in the region
            try:
                test0 = S.unwrap(self.eval(node.test))
            finally:
                self.b.pop()
            del scratch
            if not isinstance(test0, tensor):
                if not test0:
                    return
                raise self.error(
                    node.test,
                    "while loop with a compile-time true condition never ends (break is not supported)",
                )

        def build(types):
            args_b = [self.b.new_value(t, n) for n, t in zip(carried, types, strict=False)]
            before_blk = self.b.push(Block(args_b))
            for n, a in zip(carried, args_b, strict=False):
                self.scope[n] = tensor(a)
            cond = self._guard(node.test, self.eval, node.test)
            if not isinstance(cond, tensor):
                cond = S.to_tensor(bool(cond))
            if cond.shape != ():
                raise self.error(node.test, "the condition of a while loop must be a scalar")
            self.b.emit("condition", [S.to_int1(cond).handle], [])
            self.b.pop()
            args_a = [self.b.new_value(t, n) for n, t in zip(carried, types, strict=False)]
            after_blk = self.b.push(Block(args_a))
            for n, a in zip(carried, args_a, strict=False):
                self.scope[n] = tensor(a)
            if self.visit_body(node.body):
                raise self.error(node, "return inside a loop is not supported")
            self.b.pop()
            return [before_blk, after_blk], [self.scope[n] for n in carried], self.scope

        regions, yielded, types, before, after = self._loop(node, carried, init_vals, build)
        self.b.push(regions[1])
        self.b.emit("yield", [self._coerce(y, t).handle for y, t in zip(yielded, types, strict=False)], [])
        self.b.pop()
        inits = [self._coerce(v, t).handle for v, t in zip(init_vals, types, strict=False)]
        results = self.b.emit("while", inits, types, regions=regions)
        for n in after:
            if n not in before and n not in carried:
                self.dropped[n] = (
                    f"it is first assigned inside the runtime loop at line {self.loc(node).lineno}; "
                    "assign it before the loop to use it afterwards"
                )
        self.scope = before
        for n, r in zip(carried, results, strict=False):
            self.scope[n] = tensor(r)

    # ------------------------------------------------------------------ expressions
    def eval(self, node):
        meth = getattr(self, "expr_" + type(node).__name__, None)
        if meth is None:
            raise self.error(
                node,
                f"unsupported syntax: {type(node).__name__} expressions are not supported in DSL kernels",
            )
        return self._guard(node, meth, node)

    def lookup(self, name, node):
        if name in self.scope:
            return self.scope[name]
        jf = self.jf
        if name in jf.closure_vars:
            return S.unwrap(jf.closure_vars[name])
        g = jf.fn.__globals__
        if name in g:
            return S.unwrap(g[name])
        if name in _BUILTIN_OVERRIDES:
            return _BUILTIN_OVERRIDES[name]
        if name in _ALLOWED_BUILTINS and hasattr(builtins, name):
            return getattr(builtins, name)
        if name in self.dropped:
            raise self.error(node, f"variable '{name}' is not defined here: {self.dropped[name]}")
        raise self.error(node, f"name '{name}' is not defined")

    def expr_Constant(self, node):
        return node.value

    def expr_Name(self, node):
        return self.lookup(node.id, node)

    def expr_Attribute(self, node):
        v = self.eval(node.value)
        try:
            return S.unwrap(getattr(v, node.attr))
        except AttributeError:
            if S._is_py_scalar(S.unwrap(v)):
                # a Python number used as a tensor (`(1).to(tl.int64)`, `x.dtype` of `x = 0`), as
                # Triton's constexpr-to-tensor conversion allows
                try:
                    return S.unwrap(getattr(S.to_tensor(S.unwrap(v)), node.attr))
                except AttributeError:
                    pass
            what = getattr(v, "__name__", type(v).__name__)
            raise self.error(node, f"'{what}' has no attribute '{node.attr}'") from None

    def _binop(self, op_type, a, b, node):
        fn = _BINOPS.get(op_type)
        if fn is None:
            raise self.error(node, f"unsupported operator {op_type.__name__}")
        a, b = S.unwrap(a), S.unwrap(b)
        if isinstance(b, tensor) and not isinstance(a, tensor):
            # reflected operators on tensors handle python scalars on the left
            if op_type is ast.Div:
                return S.truediv(a, b)
            if op_type is ast.FloorDiv:
                return S.floordiv(a, b)
            if op_type is ast.Mod:
                return S.mod(a, b)
        return fn(a, b)

    def expr_BinOp(self, node):
        a = self.eval(node.left)
        b = self.eval(node.right)
        return self._binop(type(node.op), a, b, node)

    def expr_UnaryOp(self, node):
        v = S.unwrap(self.eval(node.operand))
        if isinstance(node.op, ast.Not):
            return S.logical_not(v)
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return +v
        if isinstance(node.op, ast.Invert):
            return ~v
        raise self.error(node, "unsupported unary operator")

    def expr_BoolOp(self, node):
        is_and = isinstance(node.op, ast.And)
        acc = S.unwrap(self.eval(node.values[0]))
        for vnode in node.values[1:]:
            if not isinstance(acc, tensor):
                if (is_and and not acc) or (not is_and and acc):
                    return acc
                acc = S.unwrap(self.eval(vnode))
                continue
            v = S.unwrap(self.eval(vnode))
            acc = S.logical("and" if is_and else "or", acc, v)
        return acc

    def expr_Compare(self, node):
        left = S.unwrap(self.eval(node.left))
        result = None
        for op, rnode in zip(node.ops, node.comparators, strict=False):
            right = S.unwrap(self.eval(rnode))
            if isinstance(op, ast.Is):
                r = left is right
            elif isinstance(op, ast.IsNot):
                r = left is not right
            elif isinstance(op, ast.In):
                r = left in right
            elif isinstance(op, ast.NotIn):
                r = left not in right
            else:
                r = _CMPOPS[type(op)](left, right)
            result = (
                r
                if result is None
                else (
                    S.logical("and", result, r)
                    if isinstance(result, tensor) or isinstance(r, tensor)
                    else (result and r)
                )
            )
            left = right
        return result

    def expr_IfExp(self, node):
        c = S.unwrap(self.eval(node.test))
        if not isinstance(c, tensor):
            return self.eval(node.body) if c else self.eval(node.orelse)
        if c.shape != ():
            return S.where(c, self.eval(node.body), self.eval(node.orelse))
        # a scalar runtime condition: each branch is compiled into its own block; pure value branches
        # become a select (as before), branches with side effects or without a value an `if` op, so only
        # the taken branch runs
        blocks, vals = [], []
        for branch in (node.body, node.orelse):
            blk = self.b.push()
            try:
                vals.append(S.unwrap(self.eval(branch)))
            finally:
                self.b.pop()
            blocks.append(blk)
        a, b = vals
        pure = not any(op.opcode in _SIDE_EFFECTS or op.regions for blk in blocks for op in blk.ops)
        if pure and a is not None and b is not None:
            for blk in blocks:
                self.b.block.ops.extend(blk.ops)
            return S.where(c, a, b)
        if (a is None) != (b is None):
            raise self.error(
                node, "one branch of this runtime conditional expression has a value and the other has none"
            )
        types = [] if a is None else [self._unify("conditional expression", a, b, node)]
        for blk, v in zip(blocks, vals, strict=True):
            self.b.push(blk)
            self.b.emit("yield", [self._coerce(v, t).handle for t in types], [])
            self.b.pop()
        results = self.b.emit("if", [S.to_int1(c).handle], types, regions=blocks)
        return tensor(results[0]) if results else None

    def expr_Tuple(self, node):
        return tuple(self._eval_elts(node.elts))

    def expr_List(self, node):
        return list(self._eval_elts(node.elts))

    def _eval_elts(self, elts):
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                out.extend(self.eval(e.value))
            else:
                out.append(self.eval(e))
        return out

    def expr_Slice(self, node):
        parts = [None if p is None else S.unwrap(self.eval(p)) for p in (node.lower, node.upper, node.step)]
        return slice(*parts)

    def expr_Subscript(self, node):
        v = S.unwrap(self.eval(node.value))
        idx = S.unwrap(self.eval(node.slice))
        if isinstance(v, tensor):
            return S.subscript(v, idx)
        if isinstance(idx, tensor):
            raise self.error(node.slice, "cannot index a compile-time sequence with a runtime tensor")
        return S.unwrap(v[idx])

    def expr_JoinedStr(self, node):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                val = S.unwrap(self.eval(v.value))
                spec = self.eval(v.format_spec) if v.format_spec is not None else ""
                parts.append(format(val, spec) if not isinstance(val, tensor) else repr(val))
        return "".join(parts)

    def expr_Call(self, node):
        fn = self.eval(node.func)
        args = self._eval_elts(node.args)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                kwargs.update(self.eval(kw.value))
            else:
                kwargs[kw.arg] = self.eval(kw.value)
        from .jit import JITFunction

        if isinstance(fn, JITFunction):
            return self.inline(fn, args, kwargs, node)
        if fn is S.constexpr or fn is core.constexpr:
            return S.unwrap(args[0]) if args else None
        if not callable(fn):
            raise self.error(node.func, f"'{ast.unparse(node.func)}' is not callable")
        return fn(*args, **kwargs)

    def inline(self, jf, args, kwargs, node):
        if self.depth >= _MAX_INLINE_DEPTH:
            raise self.error(
                node, f"@jit call depth exceeds {_MAX_INLINE_DEPTH} (recursion is not supported)"
            )
        try:
            bound = jf.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise self.error(node, f"in call to @jit function '{jf.__name__}': {e}") from None
        bound.apply_defaults()
        scope = {}
        for name, v in bound.arguments.items():
            # a helper's `tl.constexpr` annotation does not force its argument to be compile-time: Triton
            # passes a runtime value through unchanged (06-fused-attention's `offs_m: tl.constexpr`)
            scope[name] = S.unwrap(v)
        sub = FunctionCompiler(jf, self.b, scope, self.depth + 1, self.kernel_name)
        self.jf.used_functions.add(jf)
        return sub.compile_body()


_MISSING = object()
# ops that must not run on the path a runtime conditional expression does not take (effects, faults)
_SIDE_EFFECTS = frozenset(
    {"store", "atomic", "atomic_cas", "print", "assert", "block_store", "breakpoint", "load", "block_load"}
    | {"dyn_slice"}
)


def compile_kernel(jf, spec) -> Function:
    """Compile `jf` for `spec` (a `jit.Specialization`) into an `ir.Function`."""
    b = S.Builder()
    params, scope = [], {}
    for i, (name, kind, info) in enumerate(spec.params):
        if kind in ("ptr", "scalar"):
            ty = param_type(i, kind, info)
            v = b.new_value(ty, name)
            scope[name] = tensor(v)
            params.append(Param(name, kind, ty, v))
        elif kind == "none":
            scope[name] = None
            params.append(Param(name, "none", None, None))
        else:
            scope[name] = info
            params.append(Param(name, "constexpr", None, info))
    fc = FunctionCompiler(jf, b, scope)
    with S.builder_scope(b):
        ret = fc.compile_body()
    if ret is not None:
        raise fc.error(jf.tree, "a kernel launched with kernel[grid](...) must not return a value")
    fn = Function(jf.__name__, params, b.blocks[0], b.next_id, fc.loc(jf.tree), spec.key)
    verify(fn)
    return fn
