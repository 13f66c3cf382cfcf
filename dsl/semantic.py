"""The semantic layer: type promotion, broadcasting and IR emission for every builtin.

User-facing builtins (`core.py`) are thin documented wrappers over the functions here.  Everything
works on `tensor` (an IR value seen from the frontend) and on plain Python values (compile-time
constants, Triton's constexprs).  Errors are raised as `DSLError`; the frontend attaches the location.
"""

from __future__ import annotations

import math
import threading

from . import dtypes as D
from .dtypes import dtype, pointer_type
from .errors import DSLError
from .ir import Block, BlockPtrType, Op, TensorType, Value

__all__ = ["Builder", "tensor", "constexpr", "current", "builder_scope"]


# ---------------------------------------------------------------------------------------------------
# builder
# ---------------------------------------------------------------------------------------------------
class Builder:
    """Appends ops to the innermost open block; allocates dense value ids."""

    def __init__(self):
        self.next_id = 0
        self.blocks: list[Block] = [Block()]
        self.loc = None

    @property
    def block(self) -> Block:
        return self.blocks[-1]

    def new_value(self, ty, name: str = "") -> Value:
        v = Value(self.next_id, ty, name)
        self.next_id += 1
        return v

    def emit(self, opcode, operands, result_types, attrs=None, regions=None) -> list[Value]:
        results = [self.new_value(t) for t in result_types]
        self.block.ops.append(
            Op(opcode, list(operands), results, dict(attrs or {}), list(regions or []), self.loc)
        )
        return results

    def emit1(self, opcode, operands, result_type, attrs=None) -> tensor:
        return tensor(self.emit(opcode, operands, [result_type], attrs)[0])

    def push(self, block: Block | None = None) -> Block:
        b = block if block is not None else Block()
        self.blocks.append(b)
        return b

    def pop(self) -> Block:
        return self.blocks.pop()


_tls = threading.local()


def current() -> Builder:
    b = getattr(_tls, "builder", None)
    if b is None:
        raise DSLError("DSL builtins can only be called inside a @jit function")
    return b


class builder_scope:
    def __init__(self, builder: Builder):
        self.builder = builder

    def __enter__(self):
        self.prev = getattr(_tls, "builder", None)
        _tls.builder = self.builder
        return self.builder

    def __exit__(self, *exc):
        _tls.builder = self.prev


# ---------------------------------------------------------------------------------------------------
# constexpr
# ---------------------------------------------------------------------------------------------------
class constexpr:
    """A compile-time constant.  As an annotation (`BLOCK: tl.constexpr`) it marks a parameter whose
    value is specialised into the kernel; `constexpr(v)` wraps a value (unwrapped by the compiler)."""

    def __init__(self, value=None):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self):
        return f"constexpr[{self.value!r}]"

    def __index__(self):
        return self.value

    def __bool__(self):
        return bool(self.value)

    def __eq__(self, other):
        return self.value == unwrap(other)

    def __hash__(self):
        return hash(self.value)


def unwrap(x):
    return x.value if isinstance(x, constexpr) else x


def _is_py_scalar(x) -> bool:
    return isinstance(x, (bool, int, float)) and not isinstance(x, tensor)


# ---------------------------------------------------------------------------------------------------
# tensor
# ---------------------------------------------------------------------------------------------------
class _Shape(tuple):
    """A tensor's shape: a tuple that also equals the list of the same sizes, because Triton's
    `tensor.shape` is a list and kernels write `tl.static_assert(x.shape == [BLOCK])`."""

    __slots__ = ()

    def __eq__(self, other):
        return tuple.__eq__(self, tuple(other) if isinstance(other, list) else other)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = tuple.__hash__


class tensor:
    """A value inside a kernel: a block (or scalar) with static `shape` and `dtype`.

    Supports Triton's operators and methods (`x.to`, `x.sum(axis)`, `x[:, None]`, ...)."""

    __slots__ = ("handle", "type")

    def __init__(self, handle: Value):
        self.handle = handle
        self.type = handle.type

    @property
    def dtype(self) -> dtype:
        t = self.type
        if isinstance(t, BlockPtrType):
            return pointer_type(t.dtype)
        return t.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return _Shape(self.type.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def T(self):
        return trans(self)

    def is_block_ptr(self) -> bool:
        return isinstance(self.type, BlockPtrType)

    def __repr__(self):
        return f"tensor({self.type})"

    def __bool__(self):
        raise DSLError(
            "the truth value of a runtime tensor is not known at compile time; use it as a "
            "condition of `if`/`while` directly, or use tl.where"
        )

    def __iter__(self):
        raise DSLError("cannot iterate over a tensor")

    def __index__(self):
        raise DSLError("a runtime tensor cannot be used where a compile-time integer is required")

    # arithmetic
    def __add__(self, o):
        return binary("add", self, o)

    def __radd__(self, o):
        return binary("add", o, self)

    def __sub__(self, o):
        return binary("sub", self, o)

    def __rsub__(self, o):
        return binary("sub", o, self)

    def __mul__(self, o):
        return binary("mul", self, o)

    def __rmul__(self, o):
        return binary("mul", o, self)

    def __truediv__(self, o):
        return truediv(self, o)

    def __rtruediv__(self, o):
        return truediv(o, self)

    def __floordiv__(self, o):
        return floordiv(self, o)

    def __rfloordiv__(self, o):
        return floordiv(o, self)

    def __mod__(self, o):
        return mod(self, o)

    def __rmod__(self, o):
        return mod(o, self)

    def __pow__(self, o):
        return binary("pow", self, o)

    def __rpow__(self, o):
        return binary("pow", o, self)

    def __neg__(self):
        return neg(self)

    def __pos__(self):
        return self

    def __invert__(self):
        return invert(self)

    def __and__(self, o):
        return bitwise("and", self, o)

    def __rand__(self, o):
        return bitwise("and", o, self)

    def __or__(self, o):
        return bitwise("or", self, o)

    def __ror__(self, o):
        return bitwise("or", o, self)

    def __xor__(self, o):
        return bitwise("xor", self, o)

    def __rxor__(self, o):
        return bitwise("xor", o, self)

    def __lshift__(self, o):
        return bitwise("shl", self, o)

    def __rlshift__(self, o):
        return bitwise("shl", o, self)

    def __rshift__(self, o):
        return bitwise("shr", self, o)

    def __rrshift__(self, o):
        return bitwise("shr", o, self)

    def __abs__(self):
        return unary("abs", self)

    # comparisons
    def __eq__(self, o):
        return compare("eq", self, o)  # noqa: E704

    def __ne__(self, o):
        return compare("ne", self, o)

    def __lt__(self, o):
        return compare("lt", self, o)

    def __le__(self, o):
        return compare("le", self, o)

    def __gt__(self, o):
        return compare("gt", self, o)

    def __ge__(self, o):
        return compare("ge", self, o)

    __hash__ = object.__hash__

    def __getitem__(self, idx):
        return subscript(self, idx)

    # methods (resolved lazily against core to keep one definition of each builtin)
    def __getattr__(self, name):
        from . import core

        fn = core.TENSOR_METHODS.get(name)
        if fn is None:
            raise AttributeError(f"tensor has no attribute {name!r}")
        return lambda *a, **k: fn(self, *a, **k)


# ---------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------
def _ty(x) -> TensorType:
    return x.type


def is_tensor(x) -> bool:
    return isinstance(x, tensor)


def scalar_dtype_of_py(v) -> dtype:
    if isinstance(v, bool):
        return D.int1
    if isinstance(v, int):
        if -(2**31) <= v < 2**31:
            return D.int32
        if -(2**63) <= v < 2**63:
            return D.int64
        if v < 2**64:
            return D.uint64
        raise DSLError(f"integer constant {v} is out of the 64-bit range")
    if isinstance(v, float):
        return D.float32
    raise DSLError(f"cannot convert {type(v).__name__} {v!r} to a tensor")


def constant(value, dt: dtype, shape=()) -> tensor:
    b = current()
    if dt.is_floating():
        value = float(value)
    elif dt is D.int1:
        value = bool(value)
    else:
        value = int(value)
    return b.emit1("constant", [], TensorType(dt, tuple(shape)), {"value": value})


def to_tensor(x, dt: dtype | None = None) -> tensor:
    x = unwrap(x)
    if isinstance(x, tensor):
        return x
    if _is_py_scalar(x):
        return constant(x, dt or scalar_dtype_of_py(x))
    raise DSLError(f"expected a tensor or a number, got {type(x).__name__} {x!r}")


def _check_tensor(x, what="operand") -> tensor:
    if isinstance(x, tensor) and x.is_block_ptr():
        raise DSLError(f"a block pointer cannot be used as {what}; use tl.load/tl.store/tl.advance")
    return x


def broadcast_shapes(a: tuple, b: tuple) -> tuple:
    if a == b:
        return a
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + tuple(a)
    pb = (1,) * (n - len(b)) + tuple(b)
    out = []
    for i, (x, y) in enumerate(zip(pa, pb, strict=False)):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise DSLError(
                f"cannot broadcast shapes {list(a)} and {list(b)}: incompatible dimensions "
                f"at index {i}: {x} and {y}"
            )
    return tuple(out)


def broadcast_to_shape(x: tensor, shape: tuple) -> tensor:
    shape = tuple(shape)
    xs = x.shape
    if xs == shape:
        return x
    if len(xs) > len(shape):
        raise DSLError(f"cannot broadcast shape {list(xs)} to {list(shape)}")
    if xs and len(xs) < len(shape):
        x = reshape(x, (1,) * (len(shape) - len(xs)) + xs)
        xs = x.shape
    for i, (s, t) in enumerate(zip(xs, shape, strict=False)):
        if s != t and s != 1:
            raise DSLError(
                f"cannot broadcast shape {list(xs)} to {list(shape)}: dimension {i} is {s}, expected 1 or {t}"
            )
    return current().emit1("broadcast", [x.handle], x.type.with_shape(shape))


def integer_promote(a: dtype, b: dtype) -> dtype:
    if a is b:
        return a
    if a is D.int1:
        return b
    if b is D.int1:
        return a
    if a.is_int_signed() == b.is_int_signed():
        return a if a.primitive_bitwidth >= b.primitive_bitwidth else b
    u, s = (a, b) if a.is_int_unsigned() else (b, a)
    return u if u.primitive_bitwidth >= s.primitive_bitwidth else s


def computation_type(a: dtype, a_scalar: bool, b: dtype, b_scalar: bool, div_or_mod: bool) -> dtype:
    """Triton's promotion rules (python scalars are 'weak': they don't widen a tensor of >= kind)."""
    if a_scalar != b_scalar:
        s, t = (a, b) if a_scalar else (b, a)
        if s.kind <= t.kind:
            if div_or_mod and t in (D.float16, D.bfloat16):
                return D.float32
            return t
    if a is D.float64 or b is D.float64:
        return D.float64
    if a is D.float32 or b is D.float32:
        return D.float32
    if a is D.float16 or b is D.float16:
        return D.float32 if div_or_mod else D.float16
    if a is D.bfloat16 or b is D.bfloat16:
        if div_or_mod:
            return D.float32
        return D.bfloat16 if a is b else D.float32
    if a.is_fp8() and b.is_fp8():  # Triton: one fp8 type stays, two different ones meet in fp16
        return a if a is b else D.float16
    if not a.is_int() or not b.is_int():
        raise DSLError(f"unexpected operand types {a} and {b}")
    if div_or_mod and a.is_int_signed() != b.is_int_signed() and D.int1 not in (a, b):
        raise DSLError(f"cannot use / // or % with {a} and {b} (signedness differs); cast first")
    return integer_promote(a, b)


def _operand_dtype(x) -> dtype:
    if isinstance(x, tensor):
        return x.dtype
    return scalar_dtype_of_py(x)


def _prepare(a, b, div_or_mod=False, want=None):
    """Promote and broadcast two operands; returns (a, b) tensors of identical type."""
    a, b = unwrap(a), unwrap(b)
    _check_tensor(a)
    _check_tensor(b)
    a_py, b_py = not isinstance(a, tensor), not isinstance(b, tensor)
    if a_py and not _is_py_scalar(a):
        raise DSLError(f"unsupported operand {a!r} of type {type(a).__name__}")
    if b_py and not _is_py_scalar(b):
        raise DSLError(f"unsupported operand {b!r} of type {type(b).__name__}")
    ta, tb = _operand_dtype(a), _operand_dtype(b)
    ct = want or computation_type(ta, a_py, tb, b_py, div_or_mod)
    shape = broadcast_shapes(a.shape if not a_py else (), b.shape if not b_py else ())
    return _materialize(a, ct, shape), _materialize(b, ct, shape)


def _materialize(x, dt: dtype, shape) -> tensor:
    if not isinstance(x, tensor):
        if dt.is_int_unsigned() and x < 0:
            raise DSLError(f"cannot mix negative constant {x} with unsigned {dt}")
        if dt.is_int() and not dt.is_bool() and not isinstance(x, bool):
            bits = dt.primitive_bitwidth
            low = 0 if dt.is_int_unsigned() else -(2 ** (bits - 1))
            high = 2**bits - 1 if dt.is_int_unsigned() else 2 ** (bits - 1) - 1
            if isinstance(x, int) and not low <= x <= high:
                raise DSLError(f"integer constant {x} is out of range for {dt} (Triton does not wrap it)")
        return constant(x, dt, shape)
    return broadcast_to_shape(cast(x, dt), shape)


# ---------------------------------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------------------------------
def binary(op: str, a, b) -> tensor:
    a, b = unwrap(a), unwrap(b)
    if isinstance(b, PointerChoice) and not isinstance(a, PointerChoice):
        return b._offset(op, a, reflected=True) if op in ("add", "sub") else _no_choice_op(op)
    if isinstance(a, PointerChoice):
        return a._offset(op, b) if op in ("add", "sub") else _no_choice_op(op)
    if not isinstance(a, tensor) and not isinstance(b, tensor):
        return _fold(op, a, b)
    # pointer arithmetic
    pa = isinstance(a, tensor) and a.dtype.is_ptr()
    pb = isinstance(b, tensor) and b.dtype.is_ptr()
    if pa or pb:
        if pa and pb:
            raise DSLError(f"unsupported pointer arithmetic {op} between two pointers")
        if op not in ("add", "sub") or (pb and op == "sub"):
            raise DSLError(f"unsupported pointer arithmetic: {op}")
        p, off = (a, b) if pa else (b, a)
        if _operand_dtype(off).is_floating():
            raise DSLError("pointer offsets must be integers")
        shape = broadcast_shapes(p.shape, off.shape if isinstance(off, tensor) else ())
        offt = _materialize(off, D.int64, shape)
        if op == "sub":
            offt = neg(offt)
        p = broadcast_to_shape(p, shape)
        return current().emit1("ptr_add", [p.handle, offt.handle], p.type)
    if op == "pow":
        a, b = _prepare(a, b)
        if not a.dtype.is_floating():
            raise DSLError("** is only supported on floating point tensors")
    else:
        a, b = _prepare(a, b)
    if a.dtype.is_fp8():
        return _via_f32(a.dtype, lambda x, y: binary(op, x, y), a, b)
    return current().emit1("binary", [a.handle, b.handle], a.type, {"op": op})


def _via_f32(dt: dtype, fn, *xs):
    """`fn` of fp8 operands computed in fp32 (every fp8 value is exact there) and rounded back to `dt`
    once: fp8 arithmetic as Triton lowers it (upcast, compute, round to nearest even)."""
    r = fn(*[cast(x, D.float32) for x in xs])
    return cast(r, dt) if isinstance(r, tensor) and r.dtype is D.float32 else r


def _no_choice_op(op):
    raise DSLError(f"unsupported pointer arithmetic: {op}")


def _fold(op, a, b):
    import operator as O

    f = {
        "add": O.add,
        "sub": O.sub,
        "mul": O.mul,
        "pow": O.pow,
        "and": O.and_,
        "or": O.or_,
        "xor": O.xor,
        "shl": O.lshift,
        "shr": O.rshift,
        "maximum": max,
        "minimum": min,
    }[op]
    return f(a, b)


def truediv(a, b) -> tensor:
    a, b = unwrap(a), unwrap(b)
    if not isinstance(a, tensor) and not isinstance(b, tensor):
        return a / b
    ta, tb = _operand_dtype(a), _operand_dtype(b)
    a_py, b_py = not isinstance(a, tensor), not isinstance(b, tensor)
    ct = computation_type(ta, a_py, tb, b_py, True)
    if ct.is_int():
        ct = D.float32
    a, b = _prepare(a, b, want=ct)
    return current().emit1("binary", [a.handle, b.handle], a.type, {"op": "div"})


def floordiv(a, b) -> tensor:
    a, b = unwrap(a), unwrap(b)
    if not isinstance(a, tensor) and not isinstance(b, tensor):
        return a // b
    a, b = _prepare(a, b, div_or_mod=True)
    if not a.dtype.is_int():
        raise DSLError(f"// is only supported on integers (got {a.dtype}); use / and tl.floor")
    return current().emit1("binary", [a.handle, b.handle], a.type, {"op": "floordiv"})


def mod(a, b) -> tensor:
    a, b = unwrap(a), unwrap(b)
    if not isinstance(a, tensor) and not isinstance(b, tensor):
        return a % b
    a, b = _prepare(a, b, div_or_mod=True)
    return current().emit1("binary", [a.handle, b.handle], a.type, {"op": "mod"})


def bitwise(op, a, b) -> tensor:
    a, b = unwrap(a), unwrap(b)
    if not isinstance(a, tensor) and not isinstance(b, tensor):
        return _fold(op, a, b)
    ta, tb = _operand_dtype(a), _operand_dtype(b)
    if not ta.is_int() or not tb.is_int():
        raise DSLError(f"bitwise operation {op} requires integer operands, got {ta} and {tb}")
    a, b = _prepare(a, b)
    return current().emit1("binary", [a.handle, b.handle], a.type, {"op": op})


def compare(op, a, b) -> tensor:
    a, b = unwrap(a), unwrap(b)
    if not isinstance(a, tensor) and not isinstance(b, tensor):
        import operator as O

        return {"eq": O.eq, "ne": O.ne, "lt": O.lt, "le": O.le, "gt": O.gt, "ge": O.ge}[op](a, b)
    if (isinstance(a, tensor) and a.dtype.is_ptr()) or (isinstance(b, tensor) and b.dtype.is_ptr()):
        if isinstance(a, tensor) and isinstance(b, tensor) and a.dtype.is_ptr() and b.dtype.is_ptr():
            shape = broadcast_shapes(a.shape, b.shape)
            a, b = broadcast_to_shape(a, shape), broadcast_to_shape(b, shape)
        else:
            raise DSLError("pointers can only be compared with pointers")
    else:
        a, b = _prepare(a, b)
        if a.dtype.is_fp8():
            a, b = cast(a, D.float32), cast(b, D.float32)
    return current().emit1("cmp", [a.handle, b.handle], TensorType(D.int1, a.shape), {"op": op})


def logical(op, a, b):
    a, b = unwrap(a), unwrap(b)
    a = to_int1(a)
    b = to_int1(b)
    return bitwise(op, a, b)


def to_int1(x):
    x = unwrap(x)
    if not isinstance(x, tensor):
        return bool(x)
    if x.dtype is D.int1:
        return x
    return compare("ne", x, 0)


def neg(x) -> tensor:
    x = unwrap(x)
    if not isinstance(x, tensor):
        return -x
    _check_tensor(x)
    if x.dtype.is_ptr():
        raise DSLError("cannot negate a pointer")
    return current().emit1("unary", [x.handle], x.type, {"op": "neg"})


def invert(x) -> tensor:
    x = unwrap(x)
    if not isinstance(x, tensor):
        return ~x
    if not x.dtype.is_int():
        raise DSLError(f"~ requires an integer operand, got {x.dtype}")
    return current().emit1("unary", [x.handle], x.type, {"op": "invert"})


def logical_not(x):
    x = unwrap(x)
    if not isinstance(x, tensor):
        return not x
    return invert(to_int1(x))


_FLOAT_MATH = {
    "exp",
    "exp2",
    "log",
    "log2",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "tanh",
    "erf",
    "floor",
    "ceil",
    "sigmoid",
    "log1p",
    "expm1",
    "rint",
    "trunc",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "log10",
    "recip",
    "isnan",
    "isinf",
    "signbit",
}


def unary(op: str, x) -> tensor:
    x = unwrap(x)
    if not isinstance(x, tensor):
        x = to_tensor(x)
    _check_tensor(x)
    dt = x.dtype
    if dt.is_ptr():
        raise DSLError(f"{op} is not defined on pointers")
    if op in _FLOAT_MATH and not dt.is_floating():
        if op in ("floor", "ceil", "rint", "trunc"):
            return x
        raise DSLError(f"{op} expects a floating point tensor (fp16, bf16, fp32, fp64), got {dt}")
    if dt.is_fp8():
        return _via_f32(dt, lambda v: unary(op, v), x)
    out = TensorType(D.int1, x.shape) if op in ("isnan", "isinf", "signbit") else x.type
    return current().emit1("unary", [x.handle], out, {"op": op})


def fma(a, b, c) -> tensor:
    a, b, c = unwrap(a), unwrap(b), unwrap(c)
    a, b = _prepare(a, b)
    a, c = _prepare(a, c)
    a, b = _prepare(a, b)
    if a.dtype.is_fp8():
        return _via_f32(a.dtype, fma, a, b, c)
    return current().emit1("fma", [a.handle, b.handle, c.handle], a.type)


class PointerChoice:
    """`tl.where(c, a, b)` of pointers into two different kernel arguments.

    An IR pointer points into one argument, so the choice stays symbolic: offsets apply to both pointers,
    and a load reads through `a` where `c` holds and through `b` elsewhere (each load masked to its own
    lanes, so no lane reads the memory it did not choose); a store writes the same way."""

    def __init__(self, cond: tensor, a: tensor, b: tensor):
        shape = broadcast_shapes(broadcast_shapes(a.shape, b.shape), cond.shape)
        self.cond = broadcast_to_shape(cond, shape)
        self.a, self.b = broadcast_to_shape(a, shape), broadcast_to_shape(b, shape)

    @property
    def dtype(self):
        return self.a.dtype

    @property
    def shape(self):
        return self.a.shape

    def _offset(self, op, off, reflected=False):
        if isinstance(off, PointerChoice) or (isinstance(off, tensor) and off.dtype.is_ptr()):
            raise DSLError(f"unsupported pointer arithmetic {op} between two pointers")
        if reflected and op == "sub":
            raise DSLError("unsupported pointer arithmetic: an integer minus a pointer")
        return PointerChoice(self.cond, binary(op, self.a, off), binary(op, self.b, off))

    def __add__(self, o):
        return self._offset("add", o)

    def __radd__(self, o):
        return self._offset("add", o, True)

    def __sub__(self, o):
        return self._offset("sub", o)

    def __rsub__(self, o):
        return self._offset("sub", o, True)

    def __getitem__(self, idx):
        return PointerChoice(subscript(self.cond, idx), subscript(self.a, idx), subscript(self.b, idx))

    def __bool__(self):
        raise DSLError("the truth value of a pointer chosen at runtime is not known at compile time")

    def _masks(self, mask):
        take_a, take_b = self.cond, logical_not(self.cond)
        if mask is not None:
            m = to_int1(to_tensor(mask))
            take_a, take_b = logical("and", take_a, m), logical("and", take_b, m)
        return take_a, take_b

    def load(self, mask, other, volatile):
        take_a, take_b = self._masks(mask)
        va = load(self.a, take_a, other, volatile=volatile)
        vb = load(self.b, take_b, other, volatile=volatile)
        return where(self.cond, va, vb)

    def store(self, value, mask):
        take_a, take_b = self._masks(mask)
        store(self.a, value, take_a)
        store(self.b, value, take_b)


def where(cond, x, y) -> tensor:
    cond, x, y = unwrap(cond), unwrap(x), unwrap(y)
    if not isinstance(cond, tensor):
        if not isinstance(x, tensor) and not isinstance(y, tensor):
            return x if cond else y
    cond_t = to_int1(to_tensor(cond) if not isinstance(cond, tensor) else cond)
    if (isinstance(x, tensor) and x.dtype.is_ptr()) or (isinstance(y, tensor) and y.dtype.is_ptr()):
        if not (
            isinstance(x, tensor)
            and isinstance(y, tensor)
            and x.type.dtype == y.type.dtype
            and x.type.root == y.type.root
        ):
            if isinstance(x, tensor) and isinstance(y, tensor) and x.dtype == y.dtype:
                return PointerChoice(cond_t, x, y)
            raise DSLError(
                "tl.where choosing between pointers of different element types (or a pointer and a value) "
                f"is not supported: {_operand_dtype(x)} and {_operand_dtype(y)}"
            )
        shape = broadcast_shapes(broadcast_shapes(x.shape, y.shape), cond_t.shape)
        xt, yt = broadcast_to_shape(x, shape), broadcast_to_shape(y, shape)
    else:
        x_py, y_py = not isinstance(x, tensor), not isinstance(y, tensor)
        dt = computation_type(_operand_dtype(x), x_py, _operand_dtype(y), y_py, False)
        shape = broadcast_shapes(
            broadcast_shapes(() if x_py else x.shape, () if y_py else y.shape), cond_t.shape
        )
        xt, yt = _materialize(x, dt, shape), _materialize(y, dt, shape)
    cond_t = broadcast_to_shape(cond_t, shape)
    return current().emit1("where", [cond_t.handle, xt.handle, yt.handle], xt.type)


def minmax(op, a, b, propagate_nan=None):
    a, b = unwrap(a), unwrap(b)
    if not isinstance(a, tensor) and not isinstance(b, tensor):
        return max(a, b) if op == "maximum" else min(a, b)
    a, b = _prepare(a, b)
    if a.dtype.is_fp8():
        return _via_f32(a.dtype, lambda x, y: minmax(op, x, y), a, b)
    return current().emit1("binary", [a.handle, b.handle], a.type, {"op": op})


# ---------------------------------------------------------------------------------------------------
# casts and shapes
# ---------------------------------------------------------------------------------------------------
def as_dtype(dt) -> dtype:
    """A DSL dtype from a DSL dtype or a torch dtype (accepted for convenience)."""
    dt = unwrap(dt)
    if isinstance(dt, dtype):
        return dt
    if type(dt).__name__ == "dtype" and type(dt).__module__ == "torch":
        d = D.from_torch(dt)
        if d is not None:
            return d
    raise DSLError(f"expected a dtype, got {dt!r}")


def cast(x, dt, bitcast=False, fp_downcast_rounding=None) -> tensor:
    x, dt = unwrap(x), as_dtype(dt)
    if not isinstance(x, tensor):
        return to_tensor(x, dt) if not bitcast else cast(to_tensor(x), dt, bitcast=True)
    _check_tensor(x)
    if x.dtype is dt:
        return x
    if dt.is_ptr() or x.dtype.is_ptr():
        raise DSLError(
            f"casting between pointers and values ({x.dtype} -> {dt}) is not supported: a pointer is an "
            "offset into one kernel argument, not an address"
        )
    if D.float8e4b15 in (x.dtype, dt):
        D.numpy_dtype(D.float8e4b15)  # raises: no values of this format (see dtypes)
    if bitcast and x.dtype.primitive_bitwidth != dt.primitive_bitwidth:
        raise DSLError(f"bitcast needs equal bit widths: {x.dtype} -> {dt}")
    mode = unwrap(fp_downcast_rounding)
    if mode is not None:
        if mode not in ("rtne", "rtz"):
            raise DSLError(f"fp_downcast_rounding must be 'rtne' or 'rtz', got {mode!r}")
        if bitcast or not (x.dtype.is_floating() and dt.is_floating()
                           and dt.primitive_bitwidth < x.dtype.primitive_bitwidth):
            raise DSLError(
                f"fp_downcast_rounding is only for narrowing float conversions, not {x.dtype} -> {dt}"
            )
        if mode == "rtz":
            return _cast_toward_zero(x, dt)
    return current().emit1("cast", [x.handle], TensorType(dt, x.shape), {"bitcast": bool(bitcast)})


def _cast_toward_zero(x: tensor, dt: dtype) -> tensor:
    """Narrowing float cast rounded toward zero (Triton's fp_downcast_rounding="rtz"): the nearest-even
    result, stepped one code toward zero where it came out larger in magnitude than `x` (an overflow to
    inf becomes the largest finite value).  Exact: the wider type holds every narrow value."""
    r = cast(x, dt)
    back = cast(r, x.dtype)
    too_big = compare("gt", unary("abs", back), unary("abs", x))
    bits_dt = D.int8 if dt.primitive_bitwidth == 8 else D.int16
    stepped_bits = binary("sub", cast(r, bits_dt, bitcast=True), 1)
    fnuz = dt.name in ("fp8e4b8", "fp8e5b16")
    if fnuz:  # code 0x80 is NaN there, not -0: one step below -(smallest) is +0
        stepped_bits = where(compare("eq", stepped_bits, -128), 0, stepped_bits)
    out = where(too_big, cast(stepped_bits, dt, bitcast=True), r)
    if fnuz:  # overflow gives NaN there (no inf): toward zero it is the largest finite value
        values, positive, _nan = D.fp8_tables(dt)
        largest = float(values[positive[-1]])
        overflow = logical("and", unary("isnan", back), logical_not(unary("isnan", x)))
        out = where(overflow, cast(where(compare("lt", x, 0.0), -largest, largest), dt), out)
    return out


def _shape_arg(shape) -> tuple[int, ...]:
    shape = unwrap(shape)
    if isinstance(shape, (int,)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        out = tuple(int(unwrap(s)) for s in shape)
    except (TypeError, DSLError):
        raise DSLError(f"shape must be a tuple of compile-time integers (constexpr), got {shape!r}") from None
    for s in out:
        if s < 0:
            raise DSLError(f"negative dimension in shape {list(out)}")
    return out


def reshape(x, shape, can_reorder=False) -> tensor:
    x = to_tensor(x)
    _check_tensor(x)
    shape = _shape_arg(shape)
    if math.prod(shape) != x.numel:
        raise DSLError(
            f"cannot reshape a tensor of shape {list(x.shape)} ({x.numel} elements) to "
            f"{list(shape)} ({math.prod(shape)} elements)"
        )
    if shape == x.shape:
        return x
    return current().emit1("reshape", [x.handle], x.type.with_shape(shape))


def permute(x, dims) -> tensor:
    x = to_tensor(x)
    dims = _shape_arg(dims)
    if sorted(dims) != list(range(len(x.shape))):
        raise DSLError(
            f"permute: {list(dims)} is not a permutation of the {len(x.shape)} dims of a tensor "
            f"of shape {list(x.shape)}"
        )
    if dims == tuple(range(len(dims))):
        return x
    shape = tuple(x.shape[d] for d in dims)
    return current().emit1("permute", [x.handle], x.type.with_shape(shape), {"dims": dims})


def trans(x, dims=None) -> tensor:
    x = to_tensor(x)
    if not dims:
        if len(x.shape) != 2:
            raise DSLError(f"trans without dims needs a 2-D tensor, got shape {list(x.shape)}")
        dims = (1, 0)
    return permute(x, dims)


def expand_dims(x, axis) -> tensor:
    x = to_tensor(x)
    axis = unwrap(axis)
    axes = [unwrap(a) for a in axis] if isinstance(axis, (tuple, list)) else [axis]
    n = len(x.shape) + len(axes)
    norm = []
    for a in axes:
        if not isinstance(a, int):
            raise DSLError("expand_dims axis must be a compile-time integer")
        if not -n <= a < n:
            raise DSLError(f"expand_dims axis {a} out of range for result rank {n}")
        norm.append(a % n)
    if len(set(norm)) != len(norm):
        raise DSLError("expand_dims: repeated axis")
    shape, it = [], iter(x.shape)
    for i in range(n):
        shape.append(1 if i in norm else next(it))
    return reshape(x, tuple(shape))


def subscript(x: tensor, idx) -> tensor:
    if not isinstance(idx, tuple):
        idx = (idx,)
    shape, src = [], 0
    for i in idx:
        i = unwrap(i)
        if i is None:
            shape.append(1)
        elif isinstance(i, slice) and i == slice(None, None, None):
            if src >= len(x.shape):
                raise DSLError(f"too many indices for a tensor of shape {list(x.shape)}")
            shape.append(x.shape[src])
            src += 1
        else:
            raise DSLError(f"unsupported tensor index {i!r}: only None and ':' are supported")
    if src != len(x.shape):
        shape.extend(x.shape[src:])
    return reshape(x, tuple(shape))


# ---------------------------------------------------------------------------------------------------
# creation
# ---------------------------------------------------------------------------------------------------
def program_id(axis) -> tensor:
    axis = unwrap(axis)
    if axis not in (0, 1, 2):
        raise DSLError(f"program_id axis must be 0, 1 or 2, got {axis!r}")
    return current().emit1("program_id", [], TensorType(D.int32), {"axis": axis})


def num_programs(axis) -> tensor:
    axis = unwrap(axis)
    if axis not in (0, 1, 2):
        raise DSLError(f"num_programs axis must be 0, 1 or 2, got {axis!r}")
    return current().emit1("num_programs", [], TensorType(D.int32), {"axis": axis})


def arange(start, end) -> tensor:
    start, end = unwrap(start), unwrap(end)
    if not isinstance(start, int) or not isinstance(end, int) or isinstance(start, bool):
        raise DSLError("arange's arguments must be compile-time integers (constexpr)")
    n = end - start
    if n <= 0:
        raise DSLError(f"arange's end ({end}) must be greater than its start ({start})")
    if n & (n - 1):
        raise DSLError(f"arange's range must be a power of 2, got {n} (start={start}, end={end})")
    return current().emit1("arange", [], TensorType(D.int32, (n,)), {"start": start, "end": end})


def full(shape, value, dt) -> tensor:
    shape = _shape_arg(shape)
    dt = as_dtype(dt)
    value = unwrap(value)
    if isinstance(value, tensor):
        if value.shape != ():
            raise DSLError("tl.full value must be a scalar")
        return broadcast_to_shape(cast(value, dt), shape)
    return constant(value, dt, shape)


# ---------------------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------------------
def _ptr_check(p, what):
    p = unwrap(p)
    if not isinstance(p, tensor) or not p.dtype.is_ptr():
        raise DSLError(f"{what} expects a pointer (a tensor argument plus offsets), got {p!r}")
    return p


def load(ptr, mask=None, other=None, boundary_check=(), padding_option="", volatile=False) -> tensor:
    ptr = unwrap(ptr)
    if isinstance(ptr, PointerChoice):
        return ptr.load(unwrap(mask), unwrap(other), volatile)
    if isinstance(ptr, tensor) and ptr.is_block_ptr():
        if mask is not None or other is not None:
            raise DSLError("mask and other are not allowed with block pointers; use boundary_check")
        return block_load(ptr, boundary_check, padding_option)
    ptr = _ptr_check(ptr, "tl.load")
    if unwrap(boundary_check):
        raise DSLError("boundary_check is only allowed with block pointers")
    elem = ptr.dtype.element_ty
    mask, other = unwrap(mask), unwrap(other)
    mh = oh = None
    if mask is not None:
        mask = to_int1(to_tensor(mask))
        shape = broadcast_shapes(ptr.shape, mask.shape)
        ptr, mask = broadcast_to_shape(ptr, shape), broadcast_to_shape(mask, shape)
        mh = mask.handle
        if other is not None:
            oh = broadcast_to_shape(cast(other, elem), shape).handle
    elif other is not None:
        pass  # other is meaningless without a mask
    return current().emit1(
        "load",
        [ptr.handle, mh, oh],
        TensorType(elem, ptr.shape),
        {"root": ptr.type.root, "volatile": bool(unwrap(volatile))},
    )


def store(ptr, value, mask=None, boundary_check=()) -> None:
    ptr = unwrap(ptr)
    if isinstance(ptr, PointerChoice):
        return ptr.store(value, unwrap(mask))
    if isinstance(ptr, tensor) and ptr.is_block_ptr():
        if mask is not None:
            raise DSLError("mask is not allowed with block pointers; use boundary_check")
        return block_store(ptr, value, boundary_check)
    ptr = _ptr_check(ptr, "tl.store")
    elem = ptr.dtype.element_ty
    value = unwrap(value)
    mask = unwrap(mask)
    if isinstance(value, tensor) and len(value.shape) > len(ptr.shape):
        ptr = broadcast_to_shape(ptr, broadcast_shapes(ptr.shape, value.shape))
    v = broadcast_to_shape(cast(value, elem), ptr.shape)
    mh = None
    if mask is not None:
        m = broadcast_to_shape(to_int1(to_tensor(mask)), ptr.shape)
        mh = m.handle
    current().emit("store", [ptr.handle, v.handle, mh], [], {"root": ptr.type.root})


def atomic(kind, ptr, val, mask=None) -> tensor:
    ptr = _ptr_check(ptr, f"tl.atomic_{kind}")
    elem = ptr.dtype.element_ty
    val = unwrap(val)
    if isinstance(val, tensor) and len(val.shape) > len(ptr.shape):
        ptr = broadcast_to_shape(ptr, broadcast_shapes(ptr.shape, val.shape))
    v = broadcast_to_shape(cast(val, elem), ptr.shape)
    mh = None
    if unwrap(mask) is not None:
        mh = broadcast_to_shape(to_int1(to_tensor(unwrap(mask))), ptr.shape).handle
    return current().emit1(
        "atomic",
        [ptr.handle, v.handle, mh],
        TensorType(elem, ptr.shape),
        {"kind": kind, "root": ptr.type.root},
    )


def atomic_cas(ptr, cmp, val) -> tensor:
    ptr = _ptr_check(ptr, "tl.atomic_cas")
    elem = ptr.dtype.element_ty
    c = broadcast_to_shape(cast(unwrap(cmp), elem), ptr.shape)
    v = broadcast_to_shape(cast(unwrap(val), elem), ptr.shape)
    return current().emit1(
        "atomic_cas", [ptr.handle, c.handle, v.handle], TensorType(elem, ptr.shape), {"root": ptr.type.root}
    )


def _int64_scalar(x, what) -> tensor:
    x = unwrap(x)
    if isinstance(x, tensor):
        if x.shape != () or not x.dtype.is_int():
            raise DSLError(f"{what} must be integer scalars, got {x.type}")
        return cast(x, D.int64)
    if not isinstance(x, int):
        raise DSLError(f"{what} must be integers, got {x!r}")
    return constant(x, D.int64)


def _int_list(xs, what):
    xs = unwrap(xs)
    if not isinstance(xs, (tuple, list)):
        xs = (xs,)
    return [unwrap(x) for x in xs]


def make_block_ptr(base, shape, strides, offsets, block_shape, order=None) -> tensor:
    base = _ptr_check(base, "tl.make_block_ptr")
    if base.shape != ():
        raise DSLError("make_block_ptr base must be a scalar pointer")
    shape, strides, offsets = (
        _int_list(shape, "shape"),
        _int_list(strides, "strides"),
        _int_list(offsets, "offsets"),
    )
    bshape = _shape_arg(block_shape)
    n = len(bshape)
    for name, lst in (("shape", shape), ("strides", strides), ("offsets", offsets)):
        if len(lst) != n:
            raise DSLError(f"make_block_ptr: {name} has {len(lst)} entries but block_shape has {n}")
    if order is not None:
        order = _shape_arg(order)
        if sorted(order) != list(range(n)):
            raise DSLError(f"make_block_ptr: order {list(order)} is not a permutation of range({n})")
    ops = [base.handle]
    ops += [_int64_scalar(s, "make_block_ptr shape").handle for s in shape]
    ops += [_int64_scalar(s, "make_block_ptr strides").handle for s in strides]
    ops += [_int64_scalar(s, "make_block_ptr offsets").handle for s in offsets]
    ty = BlockPtrType(base.dtype.element_ty, bshape, base.type.root)
    return current().emit1("make_block_ptr", ops, ty, {"block_shape": bshape, "order": order})


def advance(bptr, offsets) -> tensor:
    bptr = unwrap(bptr)
    if not (isinstance(bptr, tensor) and bptr.is_block_ptr()):
        raise DSLError("tl.advance expects a block pointer (from tl.make_block_ptr)")
    offs = _int_list(offsets, "offsets")
    if len(offs) != len(bptr.type.block_shape):
        raise DSLError(
            f"tl.advance: got {len(offs)} offsets for a {len(bptr.type.block_shape)}-D block pointer"
        )
    ops = [bptr.handle] + [_int64_scalar(o, "advance offsets").handle for o in offs]
    return current().emit1("advance", ops, bptr.type)


def _boundary(bc, n):
    bc = unwrap(bc)
    if bc is None:
        return ()
    if isinstance(bc, int):
        bc = (bc,)
    out = []
    for d in bc:
        d = unwrap(d)
        if not isinstance(d, int) or not 0 <= d < n:
            raise DSLError(f"boundary_check entry {d!r} is not a dimension of a {n}-D block")
        out.append(d)
    return tuple(sorted(set(out)))


def block_load(bptr, boundary_check=(), padding_option="") -> tensor:
    t = bptr.type
    pad = unwrap(padding_option) or "zero"
    if pad not in ("zero", "nan"):
        raise DSLError(f"padding_option must be 'zero' or 'nan', got {pad!r}")
    if pad == "nan" and not t.dtype.is_floating():
        raise DSLError("padding_option='nan' needs a floating point element type")
    return current().emit1(
        "block_load",
        [bptr.handle],
        TensorType(t.dtype, t.block_shape),
        {"boundary_check": _boundary(boundary_check, len(t.block_shape)), "padding": pad},
    )


def block_store(bptr, value, boundary_check=()) -> None:
    t = bptr.type
    v = broadcast_to_shape(cast(unwrap(value), t.dtype), t.block_shape)
    current().emit(
        "block_store",
        [bptr.handle, v.handle],
        [],
        {"boundary_check": _boundary(boundary_check, len(t.block_shape))},
    )


# ---------------------------------------------------------------------------------------------------
# dot, reductions, scans
# ---------------------------------------------------------------------------------------------------
def dot(a, b, acc=None, input_precision=None, out_dtype=D.float32) -> tensor:
    a, b, acc, out_dtype = unwrap(a), unwrap(b), unwrap(acc), unwrap(out_dtype)
    if not isinstance(a, tensor) or not isinstance(b, tensor):
        raise DSLError("tl.dot expects two tensors")
    sa, sb = a.shape, b.shape
    if len(sa) < 2 or len(sb) < 2 or len(sa) != len(sb):
        raise DSLError(f"tl.dot needs two tensors of equal rank >= 2, got shapes {list(sa)} and {list(sb)}")
    if sa[:-2] != sb[:-2]:
        raise DSLError(f"tl.dot batch dimensions differ: {list(sa)} and {list(sb)}")
    if sa[-1] != sb[-2]:
        raise DSLError(
            f"tl.dot shape mismatch: the inner dimensions of {list(sa)} and {list(sb)} differ "
            f"({sa[-1]} != {sb[-2]})"
        )
    if a.dtype.is_fp8() or b.dtype.is_fp8():
        # fp8 operands (of any fp8 formats) are exact in fp16; the products accumulate in fp32 as for fp16
        a = cast(a, D.float16) if a.dtype.is_fp8() else a
        b = cast(b, D.float16) if b.dtype.is_fp8() else b
    if a.dtype is not b.dtype:
        ct = computation_type(a.dtype, False, b.dtype, False, False)
        a, b = cast(a, ct), cast(b, ct)
    in_dt = a.dtype
    if in_dt.is_int():
        out = D.int32 if in_dt.primitive_bitwidth <= 32 else D.int64
    elif in_dt is D.float64:
        out = D.float64
    else:
        out = out_dtype if isinstance(out_dtype, dtype) else D.float32
    shape = sa[:-1] + sb[-1:]
    ops = [a.handle, b.handle]
    if acc is not None:
        acc = to_tensor(acc)
        out = acc.dtype
        ops.append(broadcast_to_shape(acc, shape).handle)
    return current().emit1(
        "dot",
        ops,
        TensorType(out, shape),
        {"out_dtype": out, "input_precision": unwrap(input_precision) or "ieee"},
    )


def _norm_axis(axis, rank, what):
    axis = unwrap(axis)
    if axis is None:
        return None
    if not isinstance(axis, int):
        raise DSLError(f"{what}: axis must be a compile-time integer, got {axis!r}")
    if not -rank <= axis < max(rank, 1):
        raise DSLError(f"{what}: axis {axis} is out of range for a tensor of rank {rank}")
    return axis % rank if rank else 0


def pick_sum_dtype(dt: dtype, requested=None) -> dtype:
    requested = unwrap(requested)
    if requested is not None:
        return requested
    if dt is D.int1 or (dt.is_int_signed() and dt.primitive_bitwidth < 32):
        return D.int32
    if dt.is_int_unsigned() and dt.primitive_bitwidth < 32:
        return D.uint32
    return dt


def reduce(kind, x, axis=None, keep_dims=False, out_dtype=None) -> tensor:
    x = to_tensor(x)
    _check_tensor(x)
    if x.dtype.is_fp8():
        return _via_f32(x.dtype, lambda v: reduce(kind, v, axis, keep_dims, out_dtype), x)
    rank = len(x.shape)
    ax = _norm_axis(axis, rank, f"tl.{kind}")
    keep = bool(unwrap(keep_dims))
    if ax is None:
        shape = (1,) * rank if keep else ()
    elif rank == 0:
        shape = ()
    else:
        shape = x.shape[:ax] + ((1,) if keep else ()) + x.shape[ax + 1 :]
    if kind in ("argmax", "argmin"):
        dt = D.int32
    elif kind in ("sum", "prod", "xor_sum"):
        dt = pick_sum_dtype(x.dtype, out_dtype)
        if dt is not x.dtype:
            x = cast(x, dt)
    else:
        dt = x.dtype
    return current().emit1(
        "reduce", [x.handle], TensorType(dt, shape), {"kind": kind, "axis": ax, "keep_dims": keep}
    )


def scan(kind, x, axis=0, reverse=False, out_dtype=None) -> tensor:
    x = to_tensor(x)
    rank = len(x.shape)
    if rank == 0:
        raise DSLError(f"tl.cum{kind} needs a block, got a scalar")
    ax = _norm_axis(axis, rank, f"tl.cum{kind}")
    if x.dtype.is_fp8():
        return _via_f32(x.dtype, lambda v: scan(kind, v, axis, reverse, out_dtype), x)
    dt = pick_sum_dtype(x.dtype, out_dtype)
    x = cast(x, dt)
    return current().emit1(
        "scan", [x.handle], x.type, {"kind": kind, "axis": ax, "reverse": bool(unwrap(reverse))}
    )


# ---------------------------------------------------------------------------------------------------
# debugging
# ---------------------------------------------------------------------------------------------------
def device_print(prefix, *args, hex=False):
    vals = [to_tensor(a).handle for a in args]
    current().emit("print", vals, [], {"prefix": str(unwrap(prefix)), "hex": bool(unwrap(hex))})


def device_assert(cond, msg=""):
    cond = unwrap(cond)
    if not isinstance(cond, tensor):
        if not cond:
            raise DSLError(f"assertion failed at compile time: {unwrap(msg)}")
        return
    c = to_int1(cond)
    current().emit("assert", [c.handle], [], {"msg": str(unwrap(msg))})


# ---------------------------------------------------------------------------------------------------
# static pad, dynamic slices (used by the RBLN intrinsics)
# ---------------------------------------------------------------------------------------------------
def iota(n: int) -> tensor:
    """int32 [0, n) for any n > 0 (no power-of-two restriction; internal)."""
    return current().emit1("arange", [], TensorType(D.int32, (int(n),)), {"start": 0, "end": int(n)})


def pad(x, pads, value=0) -> tensor:
    x = to_tensor(x)
    pads = tuple((int(unwrap(lo)), int(unwrap(hi))) for lo, hi in pads)
    if len(pads) != len(x.shape) or any(lo < 0 or hi < 0 for lo, hi in pads):
        raise DSLError(f"pad: need one non-negative (lo, hi) pair per dim of shape {list(x.shape)}")
    shape = tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, pads, strict=True))
    value = unwrap(value)
    if isinstance(value, tensor):
        raise DSLError("pad value must be a compile-time constant")
    return current().emit1("pad", [x.handle], x.type.with_shape(shape), {"pads": pads, "value": value})


def dyn_slice(x, start, size, axis) -> tensor:
    x = to_tensor(x)
    ax = _norm_axis(axis, len(x.shape), "slice")
    size = int(unwrap(size))
    if not 0 < size <= x.shape[ax]:
        raise DSLError(f"slice size {size} does not fit dim {ax} of shape {list(x.shape)}")
    st = cast(to_tensor(start), D.int32)
    if st.shape != ():
        raise DSLError("slice start must be a scalar")
    shape = x.shape[:ax] + (size,) + x.shape[ax + 1 :]
    return current().emit1("dyn_slice", [x.handle, st.handle], x.type.with_shape(shape), {"axis": ax})


def dyn_update(x, upd, start, axis) -> tensor:
    x = to_tensor(x)
    ax = _norm_axis(axis, len(x.shape), "update")
    upd = to_tensor(upd)
    if len(upd.shape) != len(x.shape):
        raise DSLError(f"update rank {len(upd.shape)} differs from the tensor's rank {len(x.shape)}")
    ushape = x.shape[:ax] + (upd.shape[ax],) + x.shape[ax + 1 :]
    upd = broadcast_to_shape(cast(upd, x.dtype), ushape)
    if upd.shape[ax] > x.shape[ax]:
        raise DSLError(f"update of size {upd.shape[ax]} does not fit dim {ax} of shape {list(x.shape)}")
    st = cast(to_tensor(start), D.int32)
    return current().emit1("dyn_update", [x.handle, upd.handle, st.handle], x.type, {"axis": ax})
