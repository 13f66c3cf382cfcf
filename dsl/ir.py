"""The typed block IR: the single input of every backend.

Structure
---------
- `Function`: one specialised kernel.  `params` describe the launch arguments (`Param.kind` is
  ``"ptr"``, ``"scalar"``, ``"none"`` or ``"constexpr"``); `body` is a `Block`.  Only ``ptr`` and
  ``scalar`` params have an IR value (`Param.value`); constexpr and None params were folded away.
- `Block`: a list of `Op` plus block arguments (`args`, used by loop bodies).  Values defined in an
  enclosing block are visible in nested blocks (structured SSA, as in MLIR's scf dialect).
- `Op`: `opcode` (one of `OPCODES`), `operands` (Values), `results` (Values), `attrs` (plain Python
  data: ints, floats, tuples, strings, dtypes), `regions` (nested Blocks) and `loc` (`Loc`).
- `Value`: an SSA value with a static `type`; ``id`` is unique inside its Function (dense, from 0), so a
  backend can keep values in a list.

Types
-----
- `TensorType(dtype, shape)`: every ordinary value; ``shape == ()`` is a scalar.  `dtype` is a
  `dtypes.dtype` or a `dtypes.pointer_type`.  A pointer value is an int64 *element offset* from the start
  of the kernel argument it points into; `TensorType.root` names that argument (its index in
  `Function.params`), so backends address ``memory[root][offset]`` and every access is bounds-checkable.
- `BlockPtrType(dtype, block_shape, root)`: a block pointer (`make_block_ptr`); its runtime value is the
  tuple ``(base_offset, shape, strides, offsets)`` of integers.

Operand invariants established by the frontend (checked by `verify`, run after every compile):
elementwise operands have identical shapes (explicit `broadcast` ops are inserted) and identical dtypes
(explicit `cast` ops), except where an op says otherwise.  See `OPCODES` for each op's contract; the set
is closed.  Constexprs are folded: the IR has no compile-time values other than op attributes.

Writing a backend
-----------------
A backend is a factory ``compile(fn: Function) -> executable`` registered in `torch_rbln.dsl.backends`;
``executable.run(grid, args)`` runs programs ``(x, y, z)`` for ``x < grid[0]`` etc., where ``args[i]`` is,
for ``fn.params[i]``, a 1-D numpy array over the argument's elements (kind ``ptr``; element offset 0 is the
tensor's ``data_ptr()``), a Python number (``scalar``) or None.  Walk ``fn.body.ops`` in order; an op's
operands are results of earlier ops in the same or an enclosing block, block arguments, or param values.
Region ops (`for`, `while`, `if`) end their regions with `yield` / `condition`; their results are the
final carried / yielded values.  Every `Value` has a static `TensorType` (or `BlockPtrType`), so a code
generator can declare every variable with its numpy dtype and shape up front.  `backends/interpret.py`
is the reference implementation of each op's semantics (rounding, masking, bounds checks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .dtypes import dtype, from_name, pointer_type

__all__ = [
    "Loc",
    "TensorType",
    "BlockPtrType",
    "Value",
    "Op",
    "Block",
    "Param",
    "Function",
    "OPCODES",
    "ELEMENTWISE_BINARY",
    "ELEMENTWISE_UNARY",
    "COMPARISONS",
    "format_function",
    "verify",
    "IRError",
]


@dataclass(frozen=True)
class Loc:
    filename: str
    lineno: int
    col: int
    source_line: str = ""
    function: str = ""

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}:{self.col}"


@dataclass(frozen=True)
class TensorType:
    dtype: dtype
    shape: tuple[int, ...] = ()
    root: int | None = None  # for pointer dtypes: index of the Param the pointer points into

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def with_shape(self, shape) -> TensorType:
        return TensorType(self.dtype, tuple(shape), self.root)

    @property
    def element_ty(self):
        """Triton's `x.type.element_ty`: a scalar pointer's pointee type, else the element dtype."""
        dt = self.dtype
        return dt.element_ty if self.shape == () and dt.is_ptr() else dt

    def __str__(self) -> str:
        d = self.dtype.name
        if self.root is not None:
            d += f"@{self.root}"
        return f"{d}[{','.join(map(str, self.shape))}]" if self.shape else d


@dataclass(frozen=True)
class BlockPtrType:
    dtype: dtype  # element type
    block_shape: tuple[int, ...]
    root: int

    @property
    def shape(self):
        return self.block_shape

    @property
    def element_ty(self) -> TensorType:
        """Triton's `block_ptr.type.element_ty`: the block type (`.shape` is the block shape,
        `.element_ty` the element dtype)."""
        return TensorType(self.dtype, self.block_shape)

    def __str__(self) -> str:
        return f"block_ptr<{self.dtype.name}@{self.root}, {list(self.block_shape)}>"


@dataclass(eq=False)
class Value:
    id: int
    type: Any  # TensorType | BlockPtrType
    name: str = ""

    def __repr__(self) -> str:
        return f"%{self.id}"


@dataclass(eq=False)
class Op:
    opcode: str
    operands: list[Value | None]
    results: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    regions: list[Block] = field(default_factory=list)
    loc: Loc | None = None

    @property
    def result(self) -> Value:
        return self.results[0]


@dataclass(eq=False)
class Block:
    args: list[Value] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)


@dataclass
class Param:
    name: str
    kind: str  # "ptr" | "scalar" | "none" | "constexpr"
    type: Any = None  # TensorType for ptr/scalar
    value: Any = None  # Value for ptr/scalar; the Python value for constexpr
    annotation: str = ""


def param_type(index: int, kind: str, info: Any) -> TensorType | None:
    """The type of a kernel parameter from its specialisation entry `(name, kind, info)` at `index`: a
    pointer's carries its argument index. One definition for the front end and for launches that run
    without the IR (a warm start)."""
    if kind == "ptr":
        return TensorType(pointer_type(from_name(info)), (), index)
    if kind == "scalar":
        return TensorType(from_name(info))
    return None


@dataclass(eq=False)
class Function:
    name: str
    params: list[Param]
    body: Block
    num_values: int = 0
    loc: Loc | None = None
    key: str = ""

    def walk(self):
        """Yield every op, depth first, in program order."""
        stack = [iter(self.body.ops)]
        while stack:
            try:
                op = next(stack[-1])
            except StopIteration:
                stack.pop()
                continue
            yield op
            for r in reversed(op.regions):
                stack.append(iter(r.ops))

    def __str__(self) -> str:
        return format_function(self)


# ---------------------------------------------------------------------------------------------------
# The closed op set.  opcode -> one-line contract (operands; attrs; result).
# ---------------------------------------------------------------------------------------------------
ELEMENTWISE_BINARY = {
    "add": "a + b (ints wrap)",
    "sub": "a - b",
    "mul": "a * b",
    "div": "float true division a / b (float operands only)",
    "floordiv": "integer division truncating toward zero (C semantics, as Triton)",
    "mod": "remainder with the sign of the dividend (C fmod/srem semantics, as Triton)",
    "and": "bitwise and",
    "or": "bitwise or",
    "xor": "bitwise xor",
    "shl": "left shift",
    "shr": "right shift (arithmetic for signed ints)",
    "maximum": "elementwise max (NaN propagates)",
    "minimum": "elementwise min (NaN propagates)",
    "pow": "a ** b (floats)",
    "atan2": "atan2(a, b)",
    "umulhi": "high half of the double-width product of two unsigned/signed ints",
}
COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
ELEMENTWISE_UNARY = {
    "neg": "-x",
    "invert": "~x (bitwise not; logical not on int1)",
    "exp": "e**x",
    "exp2": "2**x",
    "log": "ln x",
    "log2": "log2 x",
    "sqrt": "sqrt x",
    "rsqrt": "1/sqrt x",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "tanh": "tanh",
    "erf": "erf",
    "abs": "|x|",
    "floor": "floor",
    "ceil": "ceil",
    "sigmoid": "1/(1+exp(-x))",
    "log1p": "ln(1+x)",
    "expm1": "exp(x)-1",
    "rint": "round half to even",
    "trunc": "round toward zero",
    "isnan": "x != x (result int1)",
    "isinf": "|x| == inf (result int1)",
    "asin": "asin",
    "acos": "acos",
    "atan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "log10": "log10",
    "recip": "1/x",
    "signbit": "sign bit set (result int1)",
}
FLOAT_ONLY_UNARY = set(ELEMENTWISE_UNARY) - {"neg", "invert", "abs"}

OPCODES = {
    "constant": "(); attrs value; a splat of a Python scalar to the result type",
    "program_id": "(); attrs axis; int32 scalar",
    "num_programs": "(); attrs axis; int32 scalar",
    "arange": "(); attrs start, end; int32[end-start]",
    "broadcast": "(x); x has the result's rank, each dim 1 or equal; result shape is wider",
    "reshape": "(x); row-major reshape to the result shape",
    "permute": "(x); attrs dims; transposition",
    "cast": "(x); attrs bitcast (bool); convert to the result dtype (RNE for floats, truncation for "
    "float->int, !=0 for ->int1)",
    "binary": "(a, b); attrs op in ELEMENTWISE_BINARY; same shape and dtype; result same type",
    "cmp": "(a, b); attrs op in COMPARISONS; same shape and dtype; int1 result",
    "unary": "(x); attrs op in ELEMENTWISE_UNARY; f16/bf16 computed in fp32 and rounded to x's dtype",
    "ptr_add": "(p, off); p pointer tensor, off int64 of the same shape; p + off (in elements)",
    "fma": "(a, b, c); a*b + c, one rounding",
    "where": "(c, a, b); c int1; a, b same type; all same shape",
    "reduce": "(x); attrs kind in sum/max/min/argmax/argmin/prod/xor_sum, axis (int or None), keep_dims; "
    "f16/bf16 sums accumulate in fp32 and round once",
    "flip": "(x); attrs axis; reverse the order along axis",
    "sort": "(x); attrs axis, descending; sort along axis (NaNs last)",
    "scan": "(x); attrs kind in sum/prod, axis, reverse; inclusive scan",
    "dot": "(a, b[, acc]); a [..., M, K], b [..., K, N] (same batch dims); attrs out_dtype, "
    "input_precision; fp32 (int32 for ints) products accumulated, + acc, rounded to out_dtype",
    "load": "(ptr, mask|None, other|None); attrs root, volatile; gather; masked-off lanes read `other` "
    "(0 when None); active lanes outside the argument's memory are a runtime error",
    "store": "(ptr, value, mask|None); attrs root; scatter of active lanes",
    "atomic": "(ptr, value, mask|None); attrs kind in add/max/min/xchg/and/or/xor, root; returns old values",
    "atomic_cas": "(ptr, cmp, value); attrs root; returns old values",
    "make_block_ptr": "(base, *shape, *strides, *offsets) scalars; attrs block_shape, order; BlockPtrType",
    "advance": "(bptr, *offsets); BlockPtrType with offsets incremented",
    "block_load": "(bptr); attrs boundary_check (dims), padding ('zero'|'nan'); tensor of block_shape",
    "block_store": "(bptr, value); attrs boundary_check; stores the in-bounds part",
    "pad": "(x); attrs pads ((lo, hi) per dim), value; constant padding",
    "dyn_slice": "(x, start); attrs axis; x[start:start+n] along axis (n = result dim); runtime error when "
    "out of range",
    "dyn_update": "(x, upd, start); attrs axis; copy of x with x[start:start+k] = upd along axis",
    "print": "(*values); attrs prefix, hex; prints per program (device_print)",
    "breakpoint": "(*values); attrs names; debugger stop (interpreter: Python's breakpoint() in a frame "
    "whose locals are the kernel's variables and `pid`); compiled backends may ignore it",
    "assert": "(cond); attrs msg; runtime error if any lane of cond is false (device_assert)",
    "for": "(lb, ub, step, *init); region body(iv, *carried) ends with yield; results: final carried",
    "while": "(*init); regions [before(*carried) ends with condition(cond), "
    "after(*carried) ends with yield]; results: final carried",
    "if": "(cond); regions [then, else], each ends with yield; results: yielded values",
    "yield": "(*values); terminator of for/if/while-after regions",
    "condition": "(cond); terminator of while-before regions",
}


def _fmt_attrs(attrs: dict) -> str:
    if not attrs:
        return ""
    return " {" + ", ".join(f"{k}={v!r}" for k, v in attrs.items()) + "}"


def _fmt_block(block: Block, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    for op in block.ops:
        res = ", ".join(f"{r!r}: {r.type}" for r in op.results)
        lhs = f"{res} = " if res else ""
        ops = ", ".join("None" if o is None else repr(o) for o in op.operands)
        out.append(f"{pad}{lhs}{op.opcode}({ops}){_fmt_attrs(op.attrs)}")
        for i, region in enumerate(op.regions):
            args = ", ".join(f"{a!r}: {a.type}" for a in region.args)
            out.append(f"{pad}  region {i} ({args}):")
            _fmt_block(region, indent + 2, out)


def format_function(fn: Function) -> str:
    params = []
    for p in fn.params:
        if p.kind in ("ptr", "scalar"):
            params.append(f"{p.value!r} {p.name}: {p.type}")
        else:
            params.append(f"{p.name}={p.value!r} ({p.kind})")
    out = [f"func {fn.name}({', '.join(params)}):"]
    _fmt_block(fn.body, 1, out)
    return "\n".join(out)


# Re-exported so backends only need this module.
pointer_type = pointer_type


class IRError(ValueError):
    """The IR violates an invariant (a frontend bug, not a user error)."""


def verify(fn: Function) -> None:
    """Check the IR invariants backends rely on: closed op set, SSA dominance (operands defined earlier in
    the same or an enclosing block), identical operand types for elementwise ops, and region terminators
    whose values match the op's results / block arguments."""
    defined: list[set[int]] = [{p.value.id for p in fn.params if p.kind in ("ptr", "scalar")}]

    def visible(v):
        return any(v.id in s for s in defined)

    def fail(op, msg):
        where = f" at {op.loc}" if op.loc else ""
        raise IRError(f"{op.opcode}{where}: {msg}")

    def types_of(vals):
        return [v.type for v in vals]

    def check_block(block: Block, terminator: str | None):
        defined.append({a.id for a in block.args})
        for i, op in enumerate(block.ops):
            if op.opcode not in OPCODES:
                fail(op, "unknown opcode")
            for o in op.operands:
                if o is not None and not visible(o):
                    fail(op, f"operand %{o.id} is used before it is defined")
            ts = [o.type for o in op.operands if o is not None]
            if op.opcode in ("binary", "cmp", "fma"):
                if len(set(ts)) != 1:
                    fail(op, f"operand types differ: {[str(t) for t in ts]}")
                if op.result.type.shape != ts[0].shape:
                    fail(op, "result shape differs from the operands'")
            elif op.opcode == "where":
                if ts[1] != ts[2] or ts[0].shape != ts[1].shape or ts[0].dtype.name != "int1":
                    fail(op, "where needs an int1 condition and equal value types of one shape")
            elif op.opcode == "ptr_add":
                if ts[0].shape != ts[1].shape or not ts[0].dtype.is_ptr() or ts[1].dtype.name != "int64":
                    fail(op, "ptr_add needs a pointer and int64 offsets of the same shape")
            elif op.opcode in ("yield", "condition"):
                if op.opcode != terminator or i != len(block.ops) - 1:
                    fail(op, "misplaced terminator")
            if op.opcode == "for":
                body = op.regions[0]
                carried = types_of(op.operands[3:])
                if types_of(body.args[1:]) != carried or types_of(op.results) != carried:
                    fail(op, "loop-carried types differ between inits, block arguments and results")
                check_block(body, "yield")
                if types_of(body.ops[-1].operands) != carried:
                    fail(op, "yielded types differ from the loop-carried types")
            elif op.opcode == "while":
                before, after = op.regions
                carried = types_of(op.operands)
                if types_of(before.args) != carried or types_of(after.args) != carried:
                    fail(op, "while block arguments differ from the carried types")
                check_block(before, "condition")
                check_block(after, "yield")
                if types_of(after.ops[-1].operands) != carried or types_of(op.results) != carried:
                    fail(op, "while yields/results differ from the carried types")
            elif op.opcode == "if":
                for r in op.regions:
                    check_block(r, "yield")
                    if types_of(r.ops[-1].operands) != types_of(op.results):
                        fail(op, "if branches yield types that differ from its results")
            elif op.regions:
                fail(op, "unexpected regions")
            if terminator and i == len(block.ops) - 1 and op.opcode != terminator:
                fail(op, f"block does not end with {terminator}")
            defined[-1].update(r.id for r in op.results)
        if terminator and not block.ops:
            raise IRError(f"empty block (expected a {terminator} terminator)")
        defined.pop()

    check_block(fn.body, None)
