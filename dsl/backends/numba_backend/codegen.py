"""Lower an `ir.Function` to the Python source of a numba kernel, through a jinja2 template.

Block values are not arrays by default. Elementwise ops build *lazy* expressions that are rendered
at their consumer, inside the consumer's own loop nest, so a chain such as load -> sub -> exp -> store
becomes one loop with scalar code; a value is materialised into a small local buffer only when it is
reused and costly, when a consumer needs an array (dot, reshape, loop-carried values), or when it
is read from memory. Scalars are plain local variables. f16/bf16 values are computed in float32 and
rounded wherever the IR says their dtype is f16/bf16; their memory is read and written as raw bits.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources

from ... import dtypes as D
from ...ir import BlockPtrType, Function, Op, Value
from ..interpret import int_cast_preserves_value
from .dot_padding import mark_unread_padding
from .fusion import drop_dead_scalars, fuse_loops
from .short_loops import hide_short_trip_counts
from .vector_width import prefers_wide_vectors

ERR_OUT_OF_BOUNDS = 1
ERR_ASSERT = 2
ERR_DYN_SLICE = 3
# Not a fault: the launch's arguments overlap in a way this variant's deferred reads cannot honour
# (`_ReadHazards`); the executable re-runs the launch on its variant that reads every load in place.
ERR_ALIASED = 4
# Not a fault: every in-place pair (`_ReadHazards` "identical": an output written at the very element of
# an input read there, in one memory dtype) is the same memory, as in `x.add_(y)`; the executable re-runs
# the launch on its same-memory variant, where each such output's array *is* its input's
# (`_Lowering._same_memory`), so LLVM vectorises the loop instead of failing its runtime overlap check
# (div_ on 65,536 floats: 67 us against 19 for div). Launches below SAME_MEMORY_MIN elements keep the
# scalar loop (a few us at most), so small in-place calls compile no second variant.
ERR_SAME_MEMORY = 5
SAME_MEMORY_MIN = 16384
_I32_MAX = 2**31 - 1  # a bound past any block

_TRANSCENDENTAL = {
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
    "sigmoid",
    "log1p",
    "expm1",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "log10",
    "pow",
    "atan2",
    "div",
}


# binary ops without an operator symbol whose rendering is `_typed` (the rest are symbols, also `_typed`
# or, when `closed`, of the exact type already)
_TYPED_BINARY = frozenset(("floordiv", "mod", "maximum", "minimum", "atan2", "umulhi"))


class UnsupportedByNumba(NotImplementedError):
    """The IR uses something this backend does not lower (the caller falls back to the interpreter)."""


def _portable_location(fn: Function) -> str:
    """Where the kernel's source is, for the generated module's header, as the file's name and line
    without its directory. Why: the module's text is its cache identity (`Lowered.digest`), and a
    directory in it tied every cached kernel to one install path: the op library installed in another
    venv or checkout, and a cache (or a compiled graph's kernels, whose DSL source lives in the cache
    directory) copied to another path for `rbln-autotune precompile`'s fleet, recompiled every kernel."""
    if not fn.loc:
        return fn.name
    return f"{os.path.basename(fn.loc.filename)}:{fn.loc.lineno}:{fn.loc.col}"


@functools.cache
@functools.lru_cache(maxsize=1)
def _support_digest() -> str:
    """Hash of support.py. numba caches a kernel's machine code by the kernel file alone, with the
    support helpers it calls inlined; naming this hash in the generated source gives a changed helper
    (a new erf32, say) a new file, so no kernel keeps running stale helper code from the cache."""
    text = resources.files(__package__).joinpath("support.py").read_bytes()
    return hashlib.sha256(text).hexdigest()[:16]


@functools.cache
def _dot_support_digest() -> str:
    """Hash of dot_support.py and dot_call.py, named in the source of kernels that call `tile_dot`:
    numba caches a kernel's machine code with the helpers it links and the C entry it declares
    (`dot_call`), so a changed helper or entry must give a new file."""
    package = resources.files(__package__)
    text = package.joinpath("dot_support.py").read_bytes() + package.joinpath("dot_call.py").read_bytes()
    return hashlib.sha256(text).hexdigest()[:16]


@functools.cache
def _fp8_support_digest() -> str:
    """Hash of fp8_support.py, named in the source of kernels that use fp8 (as `_dot_support_digest`)."""
    text = resources.files(__package__).joinpath("fp8_support.py").read_bytes()
    return hashlib.sha256(text).hexdigest()[:16]


@functools.cache
def _box_check_digest() -> str:
    """Hash of box_check.py, named in the source of kernels that call it (as `_dot_support_digest`)."""
    text = resources.files(__package__).joinpath("box_check.py").read_bytes()
    return hashlib.sha256(text).hexdigest()[:16]


@functools.cache
def _vector_width_digest() -> str:
    """Hash of vector_width.py, named in the source of kernels compiled through it (as
    `_dot_support_digest`): a changed pipeline or choice of width must give a new file."""
    text = resources.files(__package__).joinpath("vector_width.py").read_bytes()
    return hashlib.sha256(text).hexdigest()[:16]


@functools.cache
def _template():
    """The kernel template, parsed once per process: jinja2 compiles a template to Python each time it
    parses it (~15 ms), which every kernel's lowering paid again, cached kernels included (a warm README
    demo lowers ~30 kernels)."""
    import jinja2

    source = resources.files(__package__).joinpath("templates", "kernel.py.j2").read_text()
    environment = jinja2.Environment(keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    return environment.from_string(source)


# -- dtypes ----------------------------------------------------------------------------------------

_NP_NAMES = {
    "int1": "np.bool_",
    "int8": "np.int8",
    "int16": "np.int16",
    "int32": "np.int32",
    "int64": "np.int64",
    "uint8": "np.uint8",
    "uint16": "np.uint16",
    "uint32": "np.uint32",
    "uint64": "np.uint64",
    "fp16": "np.float32",
    "bf16": "np.float32",
    "fp32": "np.float32",
    "fp64": "np.float64",
    "fp8e5": "np.float32",
    "fp8e4nv": "np.float32",
    "fp8e4b8": "np.float32",
    "fp8e5b16": "np.float32",
}
_FP8 = ("fp8e5", "fp8e4nv", "fp8e4b8", "fp8e5b16")


def source_text_hint(*parts) -> str:
    """The generated lines joined, to see whether the kernel calls the fp8 helpers (imported only then)."""
    return "\n".join(line for part in parts for line in part)


def compute_type(dt: D.dtype) -> str:
    """The numpy scalar type a value of `dt` is held in (f16/bf16 are held in float32)."""
    if dt.is_ptr():
        return "np.int64"
    return _NP_NAMES[dt.name]


def memory_dtype_name(dt: D.dtype) -> str:
    """numpy dtype name of an argument's memory as the kernel sees it (f16/bf16 as raw uint16 bits)."""
    if dt.name in _FP8:
        return "uint8"
    return {"fp16": "uint16", "bf16": "uint16", "int1": "bool"}.get(dt.name, _NP_NAMES[dt.name][3:])


def _itemsize(dt: D.dtype) -> int:
    """Bytes per element of an argument's memory as the kernel sees it (`memory_dtype_name`)."""
    import numpy as np

    return np.dtype(memory_dtype_name(dt)).itemsize


def _cast(type_name: str, expression: str) -> str:
    """`type_name(expression)`, or `expression` itself when it already is that very call: the second
    cast of `np.int64(np.int64(x))` changes nothing, and every call is numba IR to type and lower (an
    attention kernel rendered ~360 casts, many of them such repeats)."""
    if _sole_argument(expression, type_name) is not None:
        return expression
    if type_name == "np.int64" and _int64_closed(expression):
        # kept one group, as the call was: the caller may multiply it
        grouped = _sole_argument(expression, "") is not None and _balanced(expression[1:-1])
        return expression if grouped else f"({expression})"
    return f"{type_name}({expression})"


def _int_argument(expression: str) -> str:
    """An int64 argument of a `tile_dot` call: a literal or a box count variable (`c<n>`, int64) as it
    is, anything else cast. numba types a call's literal ints as int64 first (the overload compiles
    for int64 as before), and each `np.int64(16)` was three statements of numba IR to type and lower
    (a tile_dot call had eight of them)."""
    if expression.isdigit() or re.fullmatch(r"c\d+", expression):
        return expression
    return _cast("np.int64", expression)


def _int64_closed(expression: str) -> bool:
    """Whether `expression` is `+ - *` over `np.int64(...)` calls and int literals (at least one call),
    parenthesized or not: numba types it int64 already, so an `np.int64` around it changes nothing
    (an affine offset `np.int64(np.int64(a) + np.int64(b))` was three casts for one sum)."""
    while _sole_argument(expression, "") is not None and _balanced(expression[1:-1]):
        expression = expression[1:-1]
    pieces, depth, start = [], 0, 0
    for position, char in enumerate(expression):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and expression[position:position + 3] in (" + ", " - ", " * "):
            pieces.append(expression[start:position])
            start = position + 3
    pieces.append(expression[start:])
    calls = 0
    for piece in pieces:
        if piece.isdigit():
            continue
        if _sole_argument(piece, "np.int64") is not None:
            calls += 1
        elif piece.startswith("(") and piece != expression and _int64_closed(piece):
            # (a piece that is the whole expression is not one group, e.g. `(a) // b`: not closed)
            calls += 1
        else:
            return False
    return calls > 0


def _balanced(text: str) -> bool:
    """Whether the parentheses of `text` never close more than they opened (so `(text)` is one group)."""
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


# dtypes whose `_typed` rendering is a plain numpy constructor call (`np.float32(...)`), so the rendered
# value has exactly the compute type: f16/bf16/fp8 (rounding helpers) and int1 (a comparison) are not
_PLAIN = frozenset(("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "fp32", "fp64"))
# dtypes whose `+ - *` (and `/` for floats) of two operands of exactly that type give exactly that type
# in numba, rounded or wrapped as the cast would: float32 op float32 is float32 (not float64), int64
# op int64 is int64. Narrower integers are promoted to int64 by numba and need their cast to wrap.
_CLOSED = {"fp32": ("add", "sub", "mul", "div"), "fp64": ("add", "sub", "mul", "div"),
           "int64": ("add", "sub", "mul")}


def _typed(dt: D.dtype, expression: str) -> str:
    """`expression` converted to (and rounded to) the representation of `dt`."""
    if dt.name == "bf16":
        return f"round_bf16({expression})"
    if dt.name == "fp16":
        return f"round_f16({expression})"
    if dt.name in _FP8:
        return f"round_{dt.name}({expression})"
    if dt.name == "int1":
        return f"({expression} != 0)"
    return _cast(compute_type(dt), expression)


def _literal(dt: D.dtype, value) -> str:
    if dt.name == "int1":
        return "True" if value else "False"
    if dt.is_floating():
        value = float(value)
        if value != value:
            text = "np.nan"
        elif value in (float("inf"), float("-inf")):
            text = "np.inf" if value > 0 else "-np.inf"
        else:
            text = repr(value)
        return _typed(dt, text) if dt.name in ("bf16", "fp16") + _FP8 else f"{compute_type(dt)}({text})"
    return f"{compute_type(dt)}({int(value)})"


def _load_value(dt: D.dtype, element: str) -> str:
    if dt.name == "bf16":
        return f"bf16_bits_to_f32({element})"
    if dt.name == "fp16":
        return f"f16_bits_to_f32({element})"
    if dt.name in _FP8:
        return f"{dt.name}_bits_to_f32({element})"
    return element


def _sole_argument(expression: str, function: str) -> str | None:
    """`x` when `expression` is exactly the call `function(x)`, else None."""
    if not (expression.startswith(function + "(") and expression.endswith(")")):
        return None
    depth = 0
    for position in range(len(function), len(expression)):
        depth += {"(": 1, ")": -1}.get(expression[position], 0)
        if depth == 0:
            return expression[len(function) + 1:-1] if position == len(expression) - 1 else None
    return None


def _store_value(dt: D.dtype, value: str, exact: bool = False) -> str:
    """`value` as written to memory of `dt`; `exact`: it already has `dt`'s compute type (`_Lowering.exact`),
    which for a plain dtype is also the memory's, so it is written as it is."""
    if exact and dt.name in _PLAIN:
        return value
    if dt.name in ("bf16", "fp16"):
        # a value already rounded to the memory's dtype (`x.to(tl.float16)` before the store) converts
        # to the same bits unrounded: one rounding per element instead of two
        rounding, conversion = ("round_bf16", "f32_to_bf16_bits") if dt.name == "bf16" else \
            ("round_f16", "f32_to_f16_bits")
        return f"{conversion}({_sole_argument(value, rounding) or value})"
    if dt.name in _FP8:
        return f"f32_to_{dt.name}_bits({_sole_argument(value, 'round_' + dt.name) or value})"
    if dt.name == "int1":
        return f"({value} != 0)"
    return _cast(compute_type(dt), value)


def _memory(root: int, offset: str) -> str:
    """Element `offset` of pointer argument `root`'s memory. Every offset reaching here has passed a
    bounds check (`_address`, `_check_box`), so it is indexed as unsigned: numba wraps a signed index
    that may be negative (`a[-1]` is the last element), and that per-element test kept LLVM from
    vectorising any loop whose base offset is a runtime value (a 4096x4096 row sum took 5x as long)."""
    return f"m{root}[np.uint64({offset})]"


# -- value representations --------------------------------------------------------------------------


@dataclass
class Scalar:
    name: str

    def render(self, index: list[str]) -> str:
        return self.name


@dataclass
class Buffer:
    name: str
    shape: tuple[int, ...]

    def render(self, index: list[str]) -> str:
        return f"{self.name}[{', '.join(index)}]" if self.shape else self.name


@dataclass(frozen=True)
class Affine:
    """An integer block value equal to `base + sum(index[d] * coefficients[d])` (no overflow assumed,
    as on hardware). Coefficients are int literals or scalar expressions."""

    base: str
    coefficients: tuple

    def render(self, index: list[str]) -> str:
        terms = [] if _is_zero(self.base) else [self.base]
        for i, c in zip(index, self.coefficients, strict=True):
            if c == 0:
                continue
            terms.append(i if c == 1 else f"{i} * {c}")
        return _cast("np.int64", " + ".join(terms) or "0")


@dataclass(frozen=True)
class Interval:
    """A mask that is true exactly where `index[d] < upper[d]` for every d whose upper is not None."""

    upper: tuple


@dataclass
class Lazy:
    """An elementwise expression of the loop indices of whoever consumes it."""

    shape: tuple[int, ...]
    build: object  # Callable[[list[str]], str]
    cost: int = 1
    transcendental: bool = False
    affine: Affine | None = None
    interval: Interval | None = None
    # the rendering always has exactly the compute type of the value's dtype (`_Lowering.exact`)
    exact: bool = False

    def render(self, index: list[str]) -> str:
        return self.build(index)


@dataclass
class BlockPointer:
    root: int
    base: str
    shape: list[str]
    strides: list[str]
    offsets: list[str]
    block_shape: tuple[int, ...]
    # float64 twins of the base's exact value and of a bound on its terms, when the base pointer is
    # `x_ptr + a + ...` (its int64 variable may have wrapped): see `_block_wraps`
    exact_base: tuple[str, str] | None = None


@dataclass(frozen=True)
class BoxLoad:
    """A load read where it is consumed (`_load_box`): lanes `index[d] < counts[d]` read
    `m{root}[affine]`, the others `fill`, a scalar expression (None when `other` is a block).
    `tl.dot` hands such an operand to `dot_support.tile_dot` as memory, offset and strides."""

    root: int
    affine: Affine
    counts: tuple[str, ...]
    dtype: D.dtype
    fill: str | None


@dataclass
class ErrorSite:
    op: Op
    kind: str


@dataclass
class Lowered:
    """Result of lowering: the module source and what the launcher needs to know."""

    source: str
    name: str
    ptr_params: list[int]
    scalar_params: list[int]
    error_sites: list[ErrorSite]
    uses_atomics: bool
    stored_roots: set[int] = field(default_factory=set)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:24]


# -- the lowering -----------------------------------------------------------------------------------


class _ReadHazards:
    """Which deferred reads a launch's aliasing can break, for the prologue's overlap check.

    A load from an argument that this kernel never writes is read where its value is consumed, not
    where the load stands (one loop instead of two). That is what the program means only while no
    write in between reaches the loaded memory, and a *different* argument can point at the same memory
    (`kernel[grid](x, y, out=x)`). So each deferred read is recorded as it is rendered: a write to
    root `w` between the load and its read, or a read inside a loop deeper than the load (a later
    iteration reads after this iteration's writes), makes (root, w) *strict*: any overlap of the
    two arguments' memory sends the launch to the variant that reads every load in place. A read in the
    loop of a write to `w` at the very same, injective address (`store(out + o, load(x + o) * 2)`, what
    an in-place elementwise op does) makes (root, w) *identical*: each element is read just before the
    same iteration writes it, so only an overlap other than exactly the same memory (same address, same
    element size) breaks it."""

    def __init__(self) -> None:
        self.writes: list[int] = []  # roots written, in program order
        self.host: tuple[int, str | None] | None = None  # the write whose loop is being emitted
        self.pairs: dict[tuple[int, int], str] = {}

    def begin_write(self, root: int) -> None:
        self.writes.append(root)

    @contextmanager
    def hosted(self, root: int, address: str | None):
        """Reads rendered inside happen in the loop of the write just begun, before its element is
        written there; `address` is its element offset (None when not provably injective)."""
        outer, self.host = self.host, (root, address)
        try:
            yield
        finally:
            self.host = outer

    def read(self, root: int, created: int, deeper: bool, address: str | None,
             written_roots: set[int]) -> None:
        """A deferred read of `root` (a load made after `created` writes) rendered now at `address`."""
        host = self.host
        hosted_at = len(self.writes) - 1 if host is not None else None
        for serial in range(created, len(self.writes)):
            if serial != hosted_at:
                self._mark(root, self.writes[serial], "strict")
        if deeper:
            for written in written_roots:
                self._mark(root, written, "strict")
        if host is not None:
            same = address is not None and address == host[1]
            self._mark(root, host[0], "identical" if same else "strict")

    def _mark(self, read: int, written: int, kind: str) -> None:
        if self.pairs.get((read, written)) != "strict":
            self.pairs[(read, written)] = kind


def _injective(affine: Affine, shape) -> bool:
    """Whether distinct indices of a `shape` block give distinct offsets under `affine` (provably:
    integer coefficients, each larger than the span of all smaller ones)."""
    terms = []
    for coefficient, extent in zip(affine.coefficients, shape, strict=True):
        if extent == 1:
            continue
        if not isinstance(coefficient, int) or coefficient == 0:
            return False
        terms.append((abs(coefficient), extent))
    span = 0
    for coefficient, extent in sorted(terms):
        if coefficient <= span:
            return False
        span += coefficient * (extent - 1)
    return True


class _Lowering:
    def __init__(self, fn: Function, eager_reads: bool = False, same_memory: bool = False) -> None:
        self.fn = fn
        self.same_memory = same_memory  # the variant whose in-place outputs are their inputs' arrays
        self.lines: list[str | None] = []  # None: an allocation moved to the prologue
        self.depth = 0
        self.values: dict[int, object] = {}
        self.uses: dict[int, int] = {}
        self.counter = 0
        self.error_sites: list[ErrorSite] = []
        self.uses_atomics = False
        self.stored_roots: set[int] = set()
        self.regions = 0  # nesting depth of for/while/if regions
        self.loops = 0  # nesting depth of for/while loops (a read deeper than its load repeats)
        self.scope = [0]  # innermost region id: what a memoised count variable is valid in
        # per open region: the values it materialized that were bound before it, with their former
        # representation (restored when the region closes; see `region`)
        self.rebound: list[dict[int, object]] = []
        self.count_memo: dict[tuple, str] = {}
        self.loop_bounds: dict[str, str] = {}  # loop index variable -> its bound
        self.written_roots = {
            op.attrs["root"] if "root" in op.attrs else op.operands[0].type.root
            for op in fn.walk()
            if op.opcode in ("store", "atomic", "atomic_cas", "block_store")
        }
        self.hoisted: list[str] = []
        # per open region: its buffers' allocations, (line index, name, allocation), for `_close_region`
        self.region_buffers: list[list[tuple[int, str, str]]] = []
        # the carried variables of each open for/while loop, innermost last (`_close_region`)
        self.carried: list[list[str]] = []
        # loop-yielded buffers that alternate between two launch-wide arrays (`_alternate`): (line
        # index, name, allocation, the carried variables of the loops around it)
        self.alternating: list[tuple[int, str, str, tuple[str, ...]]] = []
        # variable -> the buffers it may name (a reshape view of one, a carried or yielded variable
        # assigned one): what a region's yield lets outlive it
        self.aliases: dict[str, set[str]] = {}
        self.box_loads: dict[int, BoxLoad] = {}  # lazily read box loads, by value id (see op_dot)
        self.eager_reads = eager_reads  # read every load where it stands (the alias-safe variant)
        self.hazards = _ReadHazards()
        # box load value id -> (root, writes before it, loop depth): for `_ReadHazards.read`
        self.deferred: dict[int, tuple[int, int, int]] = {}
        self.pointer_affine: dict[int, Affine] = {}  # scalar pointers' exact forms (see op_ptr_add)
        # variables whose magnitude is bounded by their type (int32 and narrower; see `_static_bound`)
        self.leaf_bounds: dict[str, int] = {f"{n}{axis}": 2**31 for n in ("pid", "g") for axis in range(3)}
        self.uses_dot_support = False  # a 2-D tl.dot calls dot_support.tile_dot
        self.uses_box_check = False  # a box access calls box_check's compiled check
        # (a memory, b memory, work) numpy dtype names of those calls: the C entries (`dot_call`) the
        # generated module registers when it is imported
        self.dot_entries: set[tuple[str, str, str, bool]] = set()  # (..., store: `tile_dot_store`'s entry)
        # `tl.store`s of a 2-D product (by the store op's id): the product's call, deferred to the store,
        # which writes it straight into a row-major block (`_direct_dot_store`)
        self.dot_stores: dict[int, tuple] = {}
        self._block: tuple[list, int] = ([], 0)  # the op list being lowered and the current op's position
        # scalar variables that hold exactly the compute type of their value's dtype (see `exact`)
        self.exact_scalars: set[str] = set()
        # `tl.trans` results of a 2-D buffer, by value id: the buffer's name (`tl.dot` reads it strided)
        self.transposed: dict[int, str] = {}
        self._count_uses(fn.body)

    # ---- bookkeeping
    def _count_uses(self, block) -> None:
        for op in block.ops:
            for operand in op.operands:
                if operand is not None:
                    self.uses[operand.id] = self.uses.get(operand.id, 0) + 1
            for region in op.regions:
                self._count_uses(region)

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def get(self, value: Value):
        return self.values[value.id]

    def error_code(self, op: Op, kind: str) -> int:
        self.error_sites.append(ErrorSite(op, kind))
        return len(self.error_sites) - 1

    def fail(self, code: int, site: int, offset: str) -> None:
        self.emit(f"err[0] = {code}; err[1] = {site}; err[2] = np.int64({offset}); err[3] = program")
        self.emit("return")

    def open_loops(self, shape: tuple[int, ...]) -> list[str]:
        index = []
        for extent in shape:
            name = self.fresh("j")
            self.emit(f"for {name} in range({extent}):")
            self.depth += 1
            index.append(name)
        return index

    def close_loops(self, shape: tuple[int, ...]) -> None:
        self.depth -= len(shape)

    def buffer(self, value_id: int, shape: tuple[int, ...], dt: D.dtype) -> str:
        """A new local array. Outside loop/if regions it is allocated once per launch (every program
        fully writes a top-level buffer before reading it); inside a region, once per launch too
        unless the region's yield lets it outlive the region (`_close_region`)."""
        name = f"b{value_id}_{self.fresh('')}"
        self._allocate(name, f"np.empty({tuple(shape)!r}, dtype={compute_type(dt)})")
        return name

    def _allocate(self, name: str, allocation: str) -> None:
        """Allocate array `name` (fully written before it is read, in every execution of its
        region): in the launch's prologue at top level, else where it stands until its region
        closes, which moves it to the prologue when nothing lets it outlive the region."""
        line = f"{name} = {allocation}"
        if self.regions == 0:
            self.hoisted.append(line)
            return
        self.region_buffers[-1].append((len(self.lines), name, line))
        self.emit(line)

    def _names_buffers(self, names: list[str]) -> set[str]:
        """The buffers the variables `names` may name (themselves included)."""
        found: set[str] = set()
        for name in names:
            found.add(name)
            found |= self.aliases.get(name, set())
        return found

    def _close_region(self, escaping: set[str], loop: bool) -> None:
        """Move the allocations of the closing region's buffers that its yield does not carry out
        (`escaping`, with what they alias) to the prologue: one allocation per launch instead of
        one per execution (a loop body allocated ~9 tiles per iteration, each an allocation at run
        time and a stretch of numba lowering and LLVM IR at compile time). Safe because a region's
        values are visible after it only through its yield, and every execution of the region
        writes such a buffer in full before reading it; within one execution the buffer holds one
        value. A buffer a loop body yields cannot be one array: the next iteration would overwrite
        the value it carries while reading it. It alternates between two (`_alternate`) instead of
        an allocation per iteration (a row reduction's running sum allocated once per chunk)."""
        for index, name, line in self.region_buffers.pop():
            if name not in escaping:
                self.lines[index] = None
                self.hoisted.append(line)
            elif loop:
                carried = tuple(variable for names in self.carried for variable in names)
                self.alternating.append((index, name, line.split(" = ", 1)[1], carried))

    def _alternate(self) -> None:
        """Give each loop-yielded buffer (`_close_region`) two launch-wide arrays: an iteration writes
        the first that no carried variable of the loops around it may hold (a variable whose aliases
        include the buffer, tested by address: `holds`), so the value it carries in stays intact. A
        fresh allocation remains for the case where carried variables hold both (`a, b = f(a), a`).
        Called once every region has closed, when the aliases of outer loops' variables are known."""
        for index, name, allocation, carried in self.alternating:
            holders = [variable for variable in carried if name in self.aliases.get(variable, ())]
            line = self.lines[index]
            if not holders or line is None:
                continue
            indent = line[: len(line) - len(line.lstrip())]
            first, second = f"{name}_a", f"{name}_b"
            self.hoisted += [f"{first} = {allocation}", f"{second} = {allocation}"]

            held_first = " or ".join(f"holds({first}, {variable})" for variable in holders)
            held_second = " or ".join(f"holds({second}, {variable})" for variable in holders)
            self.lines[index] = (f"{indent}{name} = {first} if not ({held_first}) else "
                                 f"({second} if not ({held_second}) else {allocation})")

    def materialize(self, value: Value) -> Buffer | Scalar:
        representation = self.get(value)
        if isinstance(representation, (Buffer, Scalar)):
            return representation
        shape = value.type.shape
        name = self.buffer(value.id, shape, value.type.dtype)
        index = self.open_loops(shape)
        self.emit(f"{name}[{', '.join(index)}] = {representation.render(index)}")
        self.close_loops(shape)
        buffer = Buffer(name, shape)
        if self.rebound:
            self.rebound[-1].setdefault(value.id, representation)
        self.values[value.id] = buffer
        return buffer

    def define(
        self,
        value: Value,
        build,
        cost: int = 1,
        transcendental: bool = False,
        *,
        affine: Affine | None = None,
        interval: Interval | None = None,
        exact: bool = False,
    ) -> None:
        """Bind a pure elementwise result: a scalar variable now, or a lazy expression. `exact`: every
        rendering has exactly the compute type of the value's dtype (consumers may then skip a cast)."""
        shape = value.type.shape
        if not shape:
            name = f"v{value.id}"
            text = build([])
            self.emit(f"{name} = {text}")
            self.values[value.id] = Scalar(name)
            self._bound_leaf(name, value.type.dtype)
            if name not in self.leaf_bounds:
                self._bound_derived(name, text, value.type.dtype)
            if exact or _sole_argument(text, compute_type(value.type.dtype)) is not None:
                self.exact_scalars.add(name)
            return
        if affine is not None:
            build = affine.render
            exact = compute_type(value.type.dtype) == "np.int64"  # `Affine.render` is an np.int64 call
        lazy = Lazy(shape, build, cost, transcendental, affine, interval, exact)
        self.values[value.id] = lazy
        # a value used twice is computed once into a buffer when it is costly, except an index or a
        # mask whose affine or interval form lets a load or store check and address a whole box at once
        if self.uses.get(value.id, 0) >= 2 and (transcendental or cost >= 6) and affine is None \
                and interval is None:
            self.materialize(value)

    def exact(self, value: Value) -> bool:
        """Whether every rendering of `value` has exactly the numpy type `compute_type` gives its dtype:
        a buffer element (buffers are allocated with that type), a scalar variable assigned a value of
        that type, or a lazy expression built so. Then an operation whose numba result type already is
        that type (`_CLOSED`) needs no cast around it."""
        representation = self.get(value)
        if isinstance(representation, Buffer):
            return True
        if isinstance(representation, Scalar):
            return representation.name in self.exact_scalars
        return isinstance(representation, Lazy) and representation.exact

    def affine_of(self, value: Value) -> Affine | None:
        """`value` as an affine function of the block indices, when it is one (integers and pointers)."""
        representation = self.get(value)
        if isinstance(representation, Lazy):
            return representation.affine
        dt = value.type.dtype
        if value.id in self.pointer_affine:
            return self.pointer_affine[value.id]
        if isinstance(representation, Scalar) and (dt.is_ptr() or (dt.is_int() and not dt.is_bool())):
            name = representation.name
            if not (name in self.exact_scalars and compute_type(dt) == "np.int64"):
                name = _cast("np.int64", name)  # (an exact int64 variable needs no cast)
            return Affine(name, (0,) * len(value.type.shape))
        return None

    def interval_of(self, value: Value) -> Interval | None:
        representation = self.get(value)
        return representation.interval if isinstance(representation, Lazy) else None

    def operand_cost(self, *values: Value) -> tuple[int, bool]:
        cost, transcendental = 1, False
        for value in values:
            representation = self.get(value)
            if isinstance(representation, Lazy):
                cost += representation.cost
                transcendental = transcendental or representation.transcendental
        return cost, transcendental

    # ---- driver
    def lower(self) -> Lowered:
        fn = self.fn
        # The signature lists every pointer (address, span) first, then the scalars, whatever their
        # order in the kernel's own signature: that is the order the executable passes them in.
        ptr_signature, scalar_signature, ptr_params, scalar_params, prologue = [], [], [], [], []
        for index, param in enumerate(fn.params):
            if param.kind == "ptr":
                ptr_signature.extend([f"p{index}", f"n{index}"])
                ptr_params.append(index)
                memory = memory_dtype_name(param.type.dtype.element_ty)
                prologue.append(f"m{index} = numba.carray(as_pointer(p{index}, np.{memory}), n{index})")
                self.values[param.value.id] = Scalar("np.int64(0)")
            elif param.kind == "scalar":
                scalar_signature.append(f"s{index}")
                scalar_params.append(index)
                name = f"v{param.value.id}"
                prologue.append(f"{name} = {_typed(param.type.dtype, f's{index}')}")
                self.values[param.value.id] = Scalar(name)
                if param.type.dtype.name in _PLAIN:
                    self.exact_scalars.add(name)
                self._bound_leaf(name, param.type.dtype)
        self.depth = 0
        self.block(fn.body)
        self._alternate()
        prologue += self._alias_check()
        prologue = self._same_memory(prologue)
        self.lines = [line for line in self.lines if line is not None]  # moved allocations
        self.lines, _ = fuse_loops(self.lines, prologue + self.hoisted)
        self.lines, _ = drop_dead_scalars(self.lines, prologue + self.hoisted)
        prologue, _ = drop_dead_scalars(prologue, self.hoisted + self.lines)  # unused scalar arguments
        if self.uses_dot_support:
            self.lines, _ = mark_unread_padding(self.lines)
        self.lines, lane_counts = hide_short_trip_counts(self.lines)
        prologue += lane_counts
        fp8 = "fp8" in source_text_hint(self.lines, self.hoisted, prologue)
        wide_vectors = prefers_wide_vectors(self.lines)
        source = _template().render(
            name=_identifier(fn.name),
            params=ptr_signature + scalar_signature,
            prologue=prologue + self.hoisted,
            body=self.lines,
            location=_portable_location(fn),
            key=fn.key,
            support_module=f"{__package__}.support",
            support_digest=_support_digest(),
            dot_support=self.uses_dot_support,
            dot_support_digest=_dot_support_digest() if self.uses_dot_support else "",
            dot_entries=sorted(self.dot_entries),
            fp8=fp8,
            fp8_support_digest=_fp8_support_digest() if fp8 else "",
            box_check=self.uses_box_check,
            box_check_digest=_box_check_digest() if self.uses_box_check else "",
            wide_vectors=wide_vectors,
            vector_width_digest=_vector_width_digest() if wide_vectors else "",
        )
        return Lowered(
            source,
            _identifier(fn.name),
            ptr_params,
            scalar_params,
            self.error_sites,
            self.uses_atomics,
            self.stored_roots,
        )

    def _alias_check(self) -> list[str]:
        """Prologue lines that end the launch with ERR_ALIASED, before any program runs, when two
        arguments overlap in a way a deferred read cannot honour (`_ReadHazards`)."""
        tests = []
        for (read, written), kind in sorted(self.hazards.pairs.items()):
            sizes = [_itemsize(self.fn.params[root].type.dtype.element_ty) for root in (read, written)]
            overlap = (f"(n{read} > 0 and n{written} > 0 and p{read} < p{written} + n{written} * {sizes[1]} "
                       f"and p{written} < p{read} + n{read} * {sizes[0]})")
            if kind == "identical" and sizes[0] == sizes[1]:
                overlap = f"({overlap} and p{read} != p{written})"
            tests.append(overlap)
        if not tests:
            return []
        return [f"if {' or '.join(tests)}:",
                f"    err[0] = {ERR_ALIASED}; err[1] = 0; err[2] = 0; err[3] = program_start",
                "    return"]

    def _same_memory(self, prologue: list[str]) -> list[str]:
        """The prologue with the same-memory check (`ERR_SAME_MEMORY`): in the normal variant, lines
        that end a launch whose in-place pairs are all the same memory (address and element count; at
        least SAME_MEMORY_MIN elements) with that code before any program runs; in the same-memory
        variant, each such output's array bound to its input's (`m3 = m0`: one array, so LLVM sees the
        load and the store of an element as one address, not two that may overlap) and a check that
        sends any other launch to the alias-safe variant (never expected: the executable runs this
        variant only for launches the normal one refused so). Binding changes nothing at run time (the
        two arrays are the same memory, dtype and length); the alias-safe variant has no pairs."""
        pairs: dict[int, int] = {}  # output root -> the input root its array is bound to
        if not self.eager_reads:
            for (read, written), kind in sorted(self.hazards.pairs.items()):
                same_type = self.fn.params[read].type.dtype.element_ty == \
                    self.fn.params[written].type.dtype.element_ty
                if kind == "identical" and same_type and written not in pairs and read not in pairs:
                    pairs[written] = read
        if not pairs:
            return prologue
        same = " and ".join(f"p{read} == p{written} and n{read} == n{written}"
                            for written, read in sorted(pairs.items()))
        if not self.same_memory:
            first = min(pairs)
            return [*prologue,
                    f"if {same} and n{first} >= {SAME_MEMORY_MIN}:",
                    f"    err[0] = {ERR_SAME_MEMORY}; err[1] = 0; err[2] = 0; err[3] = program_start",
                    "    return"]
        bound = [line for line in prologue if not any(line.startswith(f"m{w} = ") for w in pairs)]
        carrays = max(i for i, line in enumerate(bound) if line.startswith("m") and "numba.carray" in line)
        bound[carrays + 1:carrays + 1] = [f"m{written} = m{read}" for written, read in sorted(pairs.items())]
        return [*bound,
                f"if not ({same}):",
                f"    err[0] = {ERR_ALIASED}; err[1] = 0; err[2] = 0; err[3] = program_start",
                "    return"]

    def block(self, block) -> None:
        self.block_ops(block.ops)

    # ---- elementwise and structural ops
    def op_constant(self, op: Op) -> None:
        dt = op.result.type.dtype
        text = _literal(dt, op.attrs["value"])
        affine = None
        if dt.is_int() and not dt.is_bool():
            affine = Affine(str(int(op.attrs["value"])), (0,) * len(op.result.type.shape))
        self.define(op.result, lambda index: text, affine=affine, exact=dt.name in _PLAIN)

    def op_program_id(self, op: Op) -> None:
        self.values[op.result.id] = Scalar(f"pid{op.attrs['axis']}")
        if compute_type(op.result.type.dtype) == "np.int32":  # the template's pid variables are np.int32
            self.exact_scalars.add(f"pid{op.attrs['axis']}")

    def op_num_programs(self, op: Op) -> None:
        self.values[op.result.id] = Scalar(f"np.int32(g{op.attrs['axis']})")

    def op_arange(self, op: Op) -> None:
        start = op.attrs["start"]
        self.define(
            op.result, lambda index: f"np.int32({start} + {index[0]})", affine=Affine(str(start), (1,))
        )

    def op_broadcast(self, op: Op) -> None:
        source = op.operands[0]
        representation = self.get(source)
        source_shape = source.type.shape
        target_shape = op.result.type.shape
        source_affine = self.affine_of(source)
        source_interval = self.interval_of(source)
        if not source_shape:
            affine = Affine(source_affine.base, (0,) * len(target_shape)) if source_affine else None
            self.define(
                op.result, lambda index: representation.render([]), *self.operand_cost(source), affine=affine,
                exact=self.exact(source),
            )
            return
        widened = [s == 1 and t != 1 for s, t in zip(source_shape, target_shape, strict=True)]

        def build(index: list[str]) -> str:
            return representation.render(["0" if w else i for w, i in zip(widened, index, strict=True)])

        affine = interval = None
        if source_affine is not None:
            coefficients = tuple(
                0 if w else c for w, c in zip(widened, source_affine.coefficients, strict=True)
            )
            affine = Affine(source_affine.base, coefficients)
        if source_interval is not None:
            interval = Interval(
                tuple(None if w else u for w, u in zip(widened, source_interval.upper, strict=True))
            )
        self.define(op.result, build, *self.operand_cost(source), affine=affine, interval=interval,
                    exact=self.exact(source))

    def op_reshape(self, op: Op) -> None:
        source = op.operands[0]
        source_shape = source.type.shape
        target_shape = op.result.type.shape
        if [d for d in source_shape if d != 1] == [d for d in target_shape if d != 1]:
            representation = self.get(source)
            source_positions = [i for i, d in enumerate(source_shape) if d != 1]
            target_positions = [i for i, d in enumerate(target_shape) if d != 1]

            def build(index: list[str]) -> str:
                mapped = ["0"] * len(source_shape)
                for s, t in zip(source_positions, target_positions, strict=True):
                    mapped[s] = index[t]
                return representation.render(mapped)

            if not target_shape:
                self.define(op.result, build, exact=self.exact(source))
                return
            affine = interval = None
            source_affine, source_interval = self.affine_of(source), self.interval_of(source)
            if source_affine is not None:
                coefficients = [0] * len(target_shape)
                for s_, t in zip(source_positions, target_positions, strict=True):
                    coefficients[t] = source_affine.coefficients[s_]
                affine = Affine(source_affine.base, tuple(coefficients))
            if source_interval is not None:
                upper = [None] * len(target_shape)
                for s_, t in zip(source_positions, target_positions, strict=True):
                    upper[t] = source_interval.upper[s_]
                interval = Interval(tuple(upper))
            exact = self.exact(source)
            if affine is not None:
                build = affine.render
                exact = compute_type(op.result.type.dtype) == "np.int64"
            self.values[op.result.id] = Lazy(
                target_shape, build, *self.operand_cost(source), affine, interval, exact
            )
            return
        buffer = self.materialize(source)
        name = f"r{op.result.id}"
        self.emit(f"{name} = {buffer.name}.reshape({tuple(target_shape)!r})")
        self.aliases[name] = self._names_buffers([buffer.name])
        self.values[op.result.id] = Buffer(name, target_shape)

    def op_permute(self, op: Op) -> None:
        source = op.operands[0]
        representation = self.get(source)
        dims = op.attrs["dims"]

        def build(index: list[str]) -> str:
            mapped = [""] * len(dims)
            for result_axis, source_axis in enumerate(dims):
                mapped[source_axis] = index[result_axis]
            return representation.render(mapped)

        if isinstance(representation, Buffer) and tuple(dims) == (1, 0):
            self.transposed[op.result.id] = representation.name
        source_affine, source_interval = self.affine_of(source), self.interval_of(source)
        affine = interval = None
        if source_affine is not None:
            affine = Affine(source_affine.base, tuple(source_affine.coefficients[d] for d in dims))
        if source_interval is not None:
            interval = Interval(tuple(source_interval.upper[d] for d in dims))
        self.define(op.result, build, *self.operand_cost(source), affine=affine, interval=interval,
                    exact=self.exact(source))

    def op_cast(self, op: Op) -> None:
        source = op.operands[0]
        representation = self.get(source)
        src = source.type.dtype
        dst = op.result.type.dtype
        if op.attrs.get("bitcast"):
            if src.name in ("fp16", "bf16") + _FP8 or dst.name in ("fp16", "bf16", "int1") + _FP8:
                raise UnsupportedByNumba(f"bitcast {src.name} -> {dst.name}")
            target = compute_type(dst)
            self.define(
                op.result,
                lambda index: f"{compute_type(src)}({representation.render(index)}).view({target})",
                *self.operand_cost(source),
            )
            return
        if dst.is_int() and not dst.is_bool() and src.is_floating():
            low, high = _int_range(dst)
            target = compute_type(dst)

            def build(index: list[str]) -> str:
                x = representation.render(index)
                return (
                    f"({target}(0) if {x} != {x} else {target}(min(max(math.trunc(np.float64({x})), "
                    f"{low}), {high})))"
                )

            self.define(op.result, build, *self.operand_cost(source), exact=True)
            return
        if src.is_bool() and dst.is_floating():
            self.define(
                op.result,
                lambda index: _typed(dst, f"1.0 if {representation.render(index)} else 0.0"),
                *self.operand_cost(source),
            )
            return
        affine = None
        if int_cast_preserves_value(src, dst):
            affine = self.affine_of(source)
        if dst.name in ("bf16", "fp16") and (src.name == "fp64" or src.is_int()):
            # one rounding straight from the wide value, no float32 step in between
            function = "round_bf16_64" if dst.name == "bf16" else "round_f16_64"
            self.define(
                op.result,
                lambda index: f"{function}(np.float64({representation.render(index)}))",
                *self.operand_cost(source),
            )
            return
        self.define(
            op.result,
            lambda index: _typed(dst, representation.render(index)),
            *self.operand_cost(source),
            affine=affine,
            exact=dst.name in _PLAIN,
        )

    def op_binary(self, op: Op) -> None:
        a, b = op.operands
        ra, rb = self.get(a), self.get(b)
        dt = op.result.type.dtype
        kind = op.attrs["op"]
        # both operands of exactly the result's type and an op closed over it: the cast is a no-op
        closed = (kind in _CLOSED.get(dt.name, ()) and a.type.dtype.name == b.type.dtype.name == dt.name
                  and self.exact(a) and self.exact(b))
        symbol = {
            "add": "+",
            "sub": "-",
            "mul": "*",
            "div": "/",
            "and": "&",
            "or": "|",
            "xor": "^",
            "shl": "<<",
            "shr": ">>",
            "pow": "**",
        }.get(kind)

        def build(index: list[str]) -> str:
            x, y = ra.render(index), rb.render(index)
            if kind in ("and", "or", "xor") and dt.is_bool() or closed:
                return f"({x} {symbol} {y})"
            if symbol is not None:
                return _typed(dt, f"{x} {symbol} {y}")
            if kind == "floordiv":
                return _typed(dt, f"trunc_div({x}, {y})")
            if kind == "mod":
                if dt.is_floating():
                    return _typed(dt, f"np.fmod({x}, {y})")
                return _typed(dt, f"trunc_mod({x}, {y})")
            if kind in ("maximum", "minimum"):
                function = "fmax" if kind == "maximum" else "fmin"
                if not dt.is_floating():
                    function = "max" if kind == "maximum" else "min"
                return _typed(dt, f"{function}({x}, {y})")
            if kind == "atan2":
                return _typed(dt, f"math.atan2({x}, {y})")
            if kind == "umulhi":  # the high half of the double-width product (philox rounds use it)
                wide = "np.uint64" if dt.is_int_unsigned() else "np.int64"
                return _typed(dt, f"({wide}({x}) * {wide}({y})) >> {wide}({dt.primitive_bitwidth})")
            raise UnsupportedByNumba(f"binary op {kind}")

        cost, transcendental = self.operand_cost(a, b)
        affine = interval = None
        if dt.is_int() and not dt.is_bool() and kind in ("add", "sub", "mul"):
            affine = _combine_affine(kind, self.affine_of(a), self.affine_of(b))
        elif dt.is_bool() and kind == "and":
            interval = _intersect(self.interval_of(a), self.interval_of(b))
        self.define(
            op.result,
            build,
            cost,
            transcendental or kind in _TRANSCENDENTAL,
            affine=affine,
            interval=interval,
            exact=dt.name in _PLAIN and (symbol is not None or kind in _TYPED_BINARY),
        )

    def op_cmp(self, op: Op) -> None:
        a, b = op.operands
        ra, rb = self.get(a), self.get(b)
        kind = op.attrs["op"]
        symbol = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[kind]
        interval = _interval_from_compare(kind, self.affine_of(a), self.affine_of(b))
        self.define(
            op.result,
            lambda index: f"({ra.render(index)} {symbol} {rb.render(index)})",
            *self.operand_cost(a, b),
            interval=interval,
        )

    def op_unary(self, op: Op) -> None:
        (source,) = op.operands
        representation = self.get(source)
        dt = op.result.type.dtype
        kind = op.attrs["op"]
        ct = compute_type(dt)
        formulas = {
            "exp": "np.exp({x})" if dt.name == "fp64" else "exp32({x})",
            "exp2": "np.exp2({x})",
            "log": "np.log({x})",
            "log2": "np.log2({x})",
            "sqrt": "np.sqrt({x})",
            "rsqrt": f"{ct}(1) / np.sqrt({{x}})",
            "sin": "np.sin({x})",
            "cos": "np.cos({x})",
            "tan": "np.tan({x})",
            "tanh": "np.tanh({x})" if dt.name == "fp64" else "tanh32({x})",
            "erf": "erf64({x})" if dt.name == "fp64" else "erf32({x})",
            "floor": "np.floor({x})",
            "ceil": "np.ceil({x})",
            "sigmoid": f"{ct}(1) / ({ct}(1) + {'np.exp' if dt.name == 'fp64' else 'exp32'}(-{{x}}))",
            "log1p": "np.log1p({x})",
            "expm1": "np.expm1({x})",
            "rint": "np.rint({x})",
            "trunc": "np.trunc({x})",
            "asin": "np.arcsin({x})",
            "acos": "np.arccos({x})",
            "atan": "np.arctan({x})",
            "sinh": "np.sinh({x})",
            "cosh": "np.cosh({x})",
            "log10": "np.log10({x})",
            "recip": f"{ct}(1) / {{x}}",
            "neg": "-{x}",
            "abs": "abs({x})",
        }

        def build(index: list[str]) -> str:
            x = representation.render(index)
            if kind == "invert":
                return f"(not {x})" if dt.is_bool() else _typed(dt, f"~{x}")
            if kind == "isnan":
                return f"({x} != {x})"
            if kind == "isinf":
                return f"np.isinf({x})"
            if kind == "signbit":
                return f"np.signbit({x})"
            formula = formulas.get(kind)
            if formula is None:
                raise UnsupportedByNumba(f"unary op {kind}")
            return _typed(dt, formula.format(x=x))

        cost, transcendental = self.operand_cost(source)
        exact = dt.name in _PLAIN and kind not in ("isnan", "isinf", "signbit")  # the rest render `_typed`
        self.define(op.result, build, cost + 1, transcendental or kind in _TRANSCENDENTAL, exact=exact)

    def op_ptr_add(self, op: Op) -> None:
        pointer, offset = op.operands
        rp, ro = self.get(pointer), self.get(offset)
        affine = _combine_affine("add", self.affine_of(pointer), self.affine_of(offset))
        self.define(
            op.result,
            lambda index: _cast("np.int64", _add_bases(rp.render(index), ro.render(index), "+")),
            *self.operand_cost(pointer, offset),
            affine=affine,
        )
        if affine is not None and not op.result.type.shape and isinstance(self.get(op.result), Scalar):
            # a scalar pointer's variable holds its int64 value, which wraps (`x_ptr + a + b` with
            # huge scalars); accesses through it check the exact sum of its terms instead
            self.pointer_affine[op.result.id] = affine

    def op_fma(self, op: Op) -> None:
        a, b, c = op.operands
        ra, rb, rc = self.get(a), self.get(b), self.get(c)
        dt = op.result.type.dtype

        def build(index: list[str]) -> str:
            x, y, z = ra.render(index), rb.render(index), rc.render(index)
            if dt.name == "fp64":
                return f"({x} * {y} + {z})"
            return _typed(dt, f"fma32({x}, {y}, {z})")

        self.define(op.result, build, *self.operand_cost(a, b, c), exact=dt.name == "fp32")

    def op_where(self, op: Op) -> None:
        c, a, b = op.operands
        rc, ra, rb = self.get(c), self.get(a), self.get(b)
        self.define(
            op.result,
            lambda index: f"({ra.render(index)} if {rc.render(index)} else {rb.render(index)})",
            *self.operand_cost(c, a, b),
            # numba unifies two values of one type to that type
            exact=self.exact(a) and self.exact(b)
            and a.type.dtype.name == b.type.dtype.name == op.result.type.dtype.name,
        )

    # ---- memory
    def _address(
        self, op: Op, root: int, pointer: str, mask: str | None, kind: str, wrapped: str | None = None
    ) -> str:
        """Emit the bounds check of one lane; returns the offset variable. `wrapped`, when given, is
        a test true where the int64 offset may have wrapped and its exact value is out of bounds."""
        offset = self.fresh("o")
        self.emit(f"{offset} = {pointer}")
        site = self.error_code(op, kind)
        condition = f"{offset} < 0 or {offset} >= n{root}"
        if wrapped is not None:
            condition += f" or ({wrapped})"
        self.emit(f"if {condition}:")
        self.depth += 1
        self.fail(ERR_OUT_OF_BOUNDS, site, offset)
        self.depth -= 1
        return offset

    def _bound_leaf(self, name: str, dt: D.dtype) -> None:
        """Record the magnitude bound of scalar variable `name` when its type is 32 bits or narrower
        (it is held in that type: `define` renders scalars typed)."""
        if dt.is_int() and not dt.is_bool() and dt.primitive_bitwidth <= 32:
            self.leaf_bounds[name] = 2 ** (dt.primitive_bitwidth - (0 if dt.is_int_unsigned() else 1))

    def _bound_derived(self, name: str, text: str, dt: D.dtype) -> None:
        """Record a magnitude bound of a 64-bit signed integer (or pointer offset) scalar `name` =
        `text` when `text` is + - * over bounded variables and literals (`_shadow`) and the bound
        stays below 2**62: then no intermediate wraps, so the bound holds for the int64 value. Why:
        the common `b * stride_b + h * stride_h` of 32-bit values cast to 64 bits was unbounded, so
        every box check over it added a float64 twin of the offset (`mg` ...) to prove at run time
        what this proves while lowering (`_check_box`, `_affine_wraps`). Unsigned casts are left
        out: `np.uint32(-1)` exceeds the magnitude of its argument."""
        if "np.uint" in text or not (dt.is_ptr() or (dt.is_int() and not dt.is_bool()
                                                      and not dt.is_int_unsigned())):
            return

        def leaf(token: str) -> str | None:
            bound = self.leaf_bounds.get(token)
            return None if bound is None else f"{bound}.0"

        shadow = _shadow(text, True, leaf)
        if shadow is None:
            return
        bound = float(eval(shadow, {"__builtins__": {}}))  # noqa: S307 - digits, + * ( ) only
        if bound < 2.0**62:
            # rounded up past any float rounding of the sum (its terms are below 2**62)
            self.leaf_bounds[name] = int(bound * (1 + 2**-40)) + 1

    def _static_bound(self, affine: Affine, shape: tuple[int, ...]) -> float | None:
        """A bound, known when lowering, on every term of `affine` over a block of `shape` (None when
        a term involves a 64-bit variable). Below 2**63 no offset can wrap: the runtime test is left
        out, and the common `pid * BLOCK + tl.arange(0, BLOCK)` pays nothing for it."""
        def leaf(token: str) -> str | None:
            bound = self.leaf_bounds.get(token)
            return None if bound is None else f"{bound}.0"

        terms = [_shadow(affine.base, True, leaf)]
        terms += [_shadow(c, True, leaf) for c in affine.coefficients]
        if None in terms or len(shape) != len(affine.coefficients):
            return None
        spans = [f"({t}) * {extent - 1}.0" for t, extent in zip(terms[1:], shape, strict=True)]
        return float(eval(" + ".join([f"({terms[0]})", *spans]), {"__builtins__": {}}))  # noqa: S307

    def _affine_wraps(self, pointer: Value, shape: tuple[int, ...]):
        """For a lane-by-lane access through an affine pointer: once per access, a variable false
        when no lane's int64 offset can wrap; returns a function of the lane index giving the test
        `_address` adds (None when the pointer is not affine, and then its typed value is checked)."""
        affine = self.affine_of(pointer)
        if affine is None:
            return lambda index: None
        base = _shadow(affine.base, False)
        bounds = [_shadow(affine.base, True)] + [_shadow(c, True) for c in affine.coefficients]
        signed = [_shadow(c, False) for c in affine.coefficients]
        if base is None or None in bounds or None in signed:
            return lambda index: None
        static = self._static_bound(affine, shape)
        if static is not None and static < _EXACT_BELOW:
            return lambda index: None
        may_wrap = self.fresh("mg")
        spans = [f"({b}) * {extent - 1}.0" for b, extent in zip(bounds[1:], shape, strict=True)]
        self.emit(f"{may_wrap} = {' + '.join([bounds[0], *spans])} >= {_SHADOW_LIMIT}")

        def test(index: list[str]) -> str:
            exact = " + ".join([f"({base})", *(f"{i} * ({c})" for i, c in zip(index, signed, strict=True))])
            return f"{may_wrap} and abs({exact}) >= {_SHADOW_LIMIT}"

        return test

    def _box(self, pointer: Value, mask: Value | None, shape: tuple[int, ...]):
        """For an affine pointer under an interval mask (or none): the active lanes form a box
        `index[d] < count[d]`. Returns (affine, counts) or None when the access is irregular."""
        affine = self.affine_of(pointer)
        if affine is None or not shape or _shadow(affine.base, True) is None \
                or any(_shadow(c, True) is None for c in affine.coefficients):
            return None
        if mask is None:
            upper = (None,) * len(shape)
        else:
            interval = self.interval_of(mask)
            if interval is None:
                return None
            upper = interval.upper
        counts = []
        for bound, extent in zip(upper, shape, strict=True):
            if bound is None:
                counts.append(str(extent))
                continue
            memo_key = (self.scope[-1], bound, extent)
            name = self.count_memo.get(memo_key)
            if name is None:
                name = self.fresh("c")
                self.emit(f"{name} = max(0, min({extent}, {_cast('np.int64', bound)}))")
                self.count_memo[memo_key] = name
            counts.append(name)
        return affine, counts

    def _check_box(
        self, op: Op, root: int, affine: Affine, counts: list[str], kind: str, shape: tuple[int, ...]
    ) -> None:
        """One bounds check for the whole box: its lowest and highest addresses.

        Every variable is assigned once (`lo = base + min(0, t0) + ...`, `hi = lo + abs(t0) + ...`,
        since max(0, t) - min(0, t) = |t|): a variable assigned several times (`lo += ...` per axis)
        makes numba's SSA reconstruction rewrite every block of the kernel once per such variable,
        and these checks were nearly all of a kernel's reassigned variables (27 of 29 in the tiny
        attention backward)."""
        static = self._static_bound(affine, shape)
        exact = static is not None and static < _EXACT_BELOW  # no term wraps: int64 bounds are exact
        if exact and len(counts) in (1, 2):
            # one call of the compiled check (box_check.py) in place of its ~60 statements of numba IR
            axes = [f"{_int_argument(str(c))}, {count}" for c, count in zip(affine.coefficients, counts,
                                                                             strict=True)]
            site = self.error_code(op, kind)
            self.uses_box_check = True
            self.emit(f"if box_fault{len(counts)}(err, {ERR_OUT_OF_BOUNDS}, {site}, program, "
                      f"{_int_argument(affine.base)}, {', '.join(axes)}, n{root}):")
            self.emit("    return")
            return
        variable = [c for c in counts if not c.isdigit()]
        if variable:
            self.emit(f"if {' and '.join(f'{c} > 0' for c in variable)}:")
            self.depth += 1
        low, high = self.fresh("lo"), self.fresh("hi")
        spans, magnitudes = [], []
        for coefficient, count in zip(affine.coefficients, counts, strict=True):
            if coefficient == 0:
                continue
            span = self.fresh("t")
            self.emit(f"{span} = {_cast('np.int64', str(coefficient))} * ({count} - 1)")
            spans.append(span)
            magnitudes.append(f"({_shadow(coefficient, True)}) * np.float64({count} - 1)")
        self.emit(f"{low} = {' + '.join([_cast('np.int64', affine.base), *(f'min(0, {s})' for s in spans)])}")
        self.emit(f"{high} = {' + '.join([low, *(f'abs({s})' for s in spans)])}")
        # the bound on every intermediate of the offsets: below 2**62 their int64 values are exact
        bound = self.fresh("mg")
        if not exact:
            self.emit(f"{bound} = {' + '.join([f'({_shadow(affine.base, True)})', *magnitudes])}")
        site = self.error_code(op, kind)
        wrapped = "" if exact else f" or {bound} >= {_SHADOW_LIMIT}"
        self.emit(f"if {low} < 0 or {high} >= n{root}{wrapped}:")
        self.depth += 1
        self.fail(ERR_OUT_OF_BOUNDS, site, f"{low} if {low} < 0 else {high}")
        self.depth -= 1
        if variable:
            self.depth -= 1

    def op_load(self, op: Op) -> None:
        pointer, mask, other = op.operands
        root = op.attrs["root"]
        shape = op.result.type.shape
        box = self._box(pointer, mask, shape)
        if box is not None:
            self._load_box(op, box)
            return
        rp = self.get(pointer)
        rm = self.get(mask) if mask is not None else None
        ro = self.get(other) if other is not None else None
        dt = op.result.type.dtype
        shape = op.result.type.shape
        default = _literal(dt, 0)
        if shape:
            name = self.buffer(op.result.id, shape, dt)
        else:
            name = f"v{op.result.id}"
        wrapped = self._affine_wraps(pointer, shape)
        index = self.open_loops(shape)
        target = f"{name}[{', '.join(index)}]" if shape else name
        if rm is not None:
            self.emit(f"if {rm.render(index)}:")
            self.depth += 1
        offset = self._address(op, root, rp.render(index), None, "load", wrapped(index))
        self.emit(f"{target} = {_load_value(dt, _memory(root, offset))}")
        if rm is not None:
            self.depth -= 1
            self.emit("else:")
            self.depth += 1
            self.emit(f"{target} = {ro.render(index) if ro is not None else default}")
            self.depth -= 1
        self.close_loops(shape)
        self.values[op.result.id] = Buffer(name, shape) if shape else Scalar(name)

    def _load_box(self, op: Op, box) -> None:
        pointer, mask, other = op.operands
        root = op.attrs["root"]
        affine, counts = box
        dt = op.result.type.dtype
        shape = op.result.type.shape
        self._check_box(op, root, affine, counts, "load", shape)
        if root not in self.written_roots and self.uses.get(op.result.id, 0) == 1 and not self.eager_reads:
            # Read where it is consumed (one loop instead of two): nothing in this kernel writes to
            # this argument, so reading later sees the same values unless another argument aliases
            # it, which the prologue checks (`_ReadHazards`).
            fill = self.get(other).render if other is not None else (lambda index: _literal(dt, 0))
            partial = [(d, c) for d, c in enumerate(counts) if not c.isdigit()]
            created, depth = len(self.hazards.writes), self.loops
            self.deferred[op.result.id] = (root, created, depth)

            def build(index: list[str]) -> str:
                address = affine.render(index)
                self.hazards.read(root, created, self.loops > depth, address, self.written_roots)
                value = _load_value(dt, _memory(root, address))
                # a consumer looping to the same count needs no test: every lane it visits is active
                tests = [f"{index[d]} < {c}" for d, c in partial if self.loop_bounds.get(index[d]) != c]
                if not tests:
                    return value
                return f"({value} if {' and '.join(tests)} else {fill(index)})"

            # the element read is of the compute type when the memory holds it as such (fp32 as float32,
            # not f16 as uint16 bits), and so is the fill, a literal of it or an exact `other`
            exact = (dt.name in _PLAIN and memory_dtype_name(dt) == compute_type(dt)[3:]
                     and (other is None or self.exact(other)))
            self.values[op.result.id] = Lazy(shape, build, 2, exact=exact)
            scalar_fill = _literal(dt, 0)
            if other is not None:
                # `other` is usually a scalar broadcast to the block: its rendering names no index
                probes = [[f"_probe{k}_{d}" for d in range(len(shape))] for k in range(2)]
                first, second = (fill(probe) for probe in probes)
                scalar_fill = first if first == second else None
            self.box_loads[op.result.id] = BoxLoad(root, affine, tuple(counts), dt, scalar_fill)
            return
        name = self.buffer(op.result.id, shape, dt)
        partial = [f"{c} < {e}" for c, e in zip(counts, shape, strict=True) if not c.isdigit()]
        if partial:
            fill = self.get(other).render if other is not None else (lambda index: _literal(dt, 0))
            self.emit(f"if {' or '.join(partial)}:")
            self.depth += 1
            index = self.open_loops(shape)
            self.emit(f"{name}[{', '.join(index)}] = {fill(index)}")
            self.close_loops(shape)
            self.depth -= 1

        def copy(unit: Affine) -> None:
            index = self.open_loops_to(counts)
            self.emit(f"{name}[{', '.join(index)}] = {_load_value(dt, _memory(root, unit.render(index)))}")
            self.close_loops(tuple(counts))

        self._with_unit_stride(affine, copy)
        self.values[op.result.id] = Buffer(name, shape)

    def _with_unit_stride(self, affine: Affine, emit_access) -> None:
        """Emit `emit_access(affine)`; when the innermost coefficient is a runtime value, also a copy
        specialised for a unit stride (the contiguous case LLVM vectorises) behind a runtime test."""
        innermost = affine.coefficients[-1]
        if isinstance(innermost, int):
            emit_access(affine)
            return
        self.emit(f"if {_cast('np.int64', innermost)} == 1:")
        self.depth += 1
        emit_access(Affine(affine.base, (*affine.coefficients[:-1], 1)))
        self.depth -= 1
        self.emit("else:")
        self.depth += 1
        emit_access(affine)
        self.depth -= 1

    def open_loops_to(self, counts: list[str]) -> list[str]:
        index = []
        for count in counts:
            name = self.fresh("j")
            self.loop_bounds[name] = count
            self.emit(f"for {name} in range({count}):")
            self.depth += 1
            index.append(name)
        return index

    def op_store(self, op: Op) -> None:
        pointer, value, mask = op.operands
        root = op.attrs["root"]
        self.stored_roots.add(root)
        self.hazards.begin_write(root)
        box = self._box(pointer, mask, value.type.shape)
        deferred = self.dot_stores.pop(id(op), None)
        if deferred is not None:
            if self._dot_store(op, root, box, deferred):
                return
            product, arguments = deferred[0], deferred[1]
            self.emit(f"{product} = tile_dot({', '.join(arguments)}, True)")  # (deferred from the dot)
        if box is not None:
            affine, counts = box
            self._check_box(op, root, affine, counts, "store", value.type.shape)
            self._with_unit_stride(affine, lambda unit: self._box_store(root, unit, counts, value))
            return
        rp, rv = self.get(pointer), self.get(value)
        rm = self.get(mask) if mask is not None else None
        dt = value.type.dtype
        shape = value.type.shape
        wrapped = self._affine_wraps(pointer, shape)
        index = self.open_loops(shape)
        if rm is not None:
            self.emit(f"if {rm.render(index)}:")
            self.depth += 1
        offset = self._address(op, root, rp.render(index), None, "store", wrapped(index))
        with self.hazards.hosted(root, None):
            stored = _store_value(dt, rv.render(index), self.exact(value))
        self.emit(f"{_memory(root, offset)} = {stored}")
        if rm is not None:
            self.depth -= 1
        self.close_loops(shape)

    def _box_store(self, root: int, affine: Affine, counts: list[str], value: Value) -> None:
        """The loops storing `value` at `affine` over the box `counts` of argument `root`; deferred
        reads rendered inside are recorded as reads in this write's loop (`_ReadHazards.hosted`)."""
        index = self.open_loops_to(counts)
        address = affine.render(index)
        with self.hazards.hosted(root, address if _injective(affine, value.type.shape) else None):
            stored = _store_value(value.type.dtype, self.get(value).render(index), self.exact(value))
        self.emit(f"{_memory(root, address)} = {stored}")
        self.close_loops(tuple(counts))

    def _dot_store(self, op: Op, root: int, box, deferred: tuple) -> bool:
        """Emit the store of a deferred product (`_direct_dot_store`) when its box stores exactly the
        product's counted rows and columns: behind the box's bounds check, `tile_dot_store` into the
        block where its column stride is 1 (a runtime test when the stride is an argument), else the
        product's call and the store loop. False, with nothing emitted, when the box does not match:
        the caller emits the call and the usual store."""
        product, arguments, scale, addend, roots = deferred
        if box is None:
            return False
        affine, counts = box
        # tile_dot's arguments: a's counted rows are its 5th, b's counted columns its 17th (0-based 4, 16)
        if len(counts) != 2 or counts[0] != arguments[4] or counts[1] != arguments[16]:
            return False
        column = affine.coefficients[-1]
        if isinstance(column, int) and column != 1:
            return False
        shape = op.operands[1].type.shape
        self._check_box(op, root, affine, counts, "store", shape)
        for read in roots:  # gemm reads the operands while it writes the block: they must not overlap
            self.hazards._mark(read, root, "strict")
        factor = "1.0" if scale is None else self.get(scale).render([])
        base, row = _int_argument(affine.base), _int_argument(str(affine.coefficients[0]))
        accumulate = int(addend is not None)
        call = f"tile_dot_store(m{root}, {base}, {row}, {factor}, {accumulate}, {', '.join(arguments)})"
        unit = Affine(affine.base, (affine.coefficients[0], 1))
        if not isinstance(column, int):
            self.emit(f"if {_cast('np.int64', column)} == 1:")
            self.depth += 1
        if addend is not None:  # the addend first, stored as any value is; gemm adds the product onto it
            self._box_store(root, unit, counts, addend)
        self.emit(call)
        if isinstance(column, int):
            return True
        self.depth -= 1
        self.emit("else:")
        self.depth += 1
        self.emit(f"{product} = tile_dot({', '.join(arguments)}, True)")
        self._box_store(root, affine, counts, op.operands[1])
        self.depth -= 1
        return True

    def op_atomic(self, op: Op) -> None:
        pointer, value, mask = op.operands
        root = op.attrs["root"]
        self.uses_atomics = True
        self.stored_roots.add(root)
        self.hazards.begin_write(root)
        rp, rv = self.get(pointer), self.get(value)
        rm = self.get(mask) if mask is not None else None
        dt = value.type.dtype
        shape = value.type.shape
        kind = op.attrs["kind"]
        name = self.buffer(op.result.id, shape, dt) if shape else f"v{op.result.id}"
        wrapped = self._affine_wraps(pointer, shape)
        index = self.open_loops(shape)
        target = f"{name}[{', '.join(index)}]" if shape else name
        self.emit(f"{target} = {_literal(dt, 0)}")
        if rm is not None:
            self.emit(f"if {rm.render(index)}:")
            self.depth += 1
        offset = self._address(op, root, rp.render(index), None, "atomic", wrapped(index))
        old = self.fresh("old")
        new = rv.render(index)
        self.emit(f"{old} = {_load_value(dt, _memory(root, offset))}")
        combined = {
            "add": _typed(dt, f"{old} + {new}"),
            "max": _typed(dt, f"max({old}, {new})"),
            "min": _typed(dt, f"min({old}, {new})"),
            "xchg": new,
            "and": _typed(dt, f"{old} & {new}"),
            "or": _typed(dt, f"{old} | {new}"),
            "xor": _typed(dt, f"{old} ^ {new}"),
        }.get(kind)
        if combined is None:
            raise UnsupportedByNumba(f"atomic {kind}")
        self.emit(f"{_memory(root, offset)} = {_store_value(dt, combined)}")
        self.emit(f"{target} = {old}")
        if rm is not None:
            self.depth -= 1
        self.close_loops(shape)
        self.values[op.result.id] = Buffer(name, shape) if shape else Scalar(name)

    def op_atomic_cas(self, op: Op) -> None:
        pointer, compare, value = op.operands
        root = op.attrs["root"]
        self.uses_atomics = True
        self.stored_roots.add(root)
        self.hazards.begin_write(root)
        rp, rc, rv = self.get(pointer), self.get(compare), self.get(value)
        dt = value.type.dtype
        shape = value.type.shape
        name = self.buffer(op.result.id, shape, dt) if shape else f"v{op.result.id}"
        wrapped = self._affine_wraps(pointer, shape)
        index = self.open_loops(shape)
        target = f"{name}[{', '.join(index)}]" if shape else name
        offset = self._address(op, root, rp.render(index), None, "atomic_cas", wrapped(index))
        self.emit(f"{target} = {_load_value(dt, _memory(root, offset))}")
        self.emit(f"if {target} == {rc.render(index)}:")
        self.emit(f"    {_memory(root, offset)} = {_store_value(dt, rv.render(index))}")
        self.close_loops(shape)
        self.values[op.result.id] = Buffer(name, shape) if shape else Scalar(name)

    # ---- reductions, scans, dot
    def op_reduce(self, op: Op) -> None:
        (source,) = op.operands
        representation = self.get(source)
        kind = op.attrs["kind"]
        axis = op.attrs["axis"]
        keep_dims = op.attrs["keep_dims"]
        src_dt = source.type.dtype
        dt = op.result.type.dtype
        shape = source.type.shape
        accumulate_dt = D.float32 if src_dt.name in ("fp16", "bf16") else src_dt
        axes = list(range(len(shape))) if axis is None else [axis % len(shape)]
        outer = [d for d in range(len(shape)) if d not in axes]
        result_shape = op.result.type.shape
        if kind in ("sum", "max", "min") and src_dt.is_floating() and (axes == [len(shape) - 1] or not outer):
            self._reduce_rows(op, kind, axes, outer)
            return
        result = self.buffer(op.result.id, result_shape, dt) if result_shape else f"v{op.result.id}"
        outer_index = self.open_loops(tuple(shape[d] for d in outer))
        accumulator, position = self.fresh("acc"), self.fresh("pos")
        ct = compute_type(accumulate_dt)
        initial = {
            "sum": f"{ct}(0)",
            "prod": f"{ct}(1)",
            "xor_sum": f"{ct}(0)",
            "max": f"{ct}(-np.inf)"
            if accumulate_dt.is_floating()
            else f"{ct}({_int_range(accumulate_dt)[0]})",
            "min": f"{ct}(np.inf)"
            if accumulate_dt.is_floating()
            else f"{ct}({_int_range(accumulate_dt)[1]})",
        }
        if kind in ("argmax", "argmin"):
            initial_value = f"{ct}(-np.inf)" if kind == "argmax" else f"{ct}(np.inf)"
            if not accumulate_dt.is_floating():
                bound = _int_range(accumulate_dt)
                initial_value = f"{ct}({bound[0] if kind == 'argmax' else bound[1]})"
            self.emit(f"{accumulator} = {initial_value}")
            self.emit(f"{position} = np.int32(-1)")
        elif kind in initial:
            self.emit(f"{accumulator} = {initial[kind]}")
        else:
            raise UnsupportedByNumba(f"reduce {kind}")
        nan_seen = self.fresh("nan")
        if kind in ("max", "min") and accumulate_dt.is_floating():
            # NaN propagates (as torch.max): tracked apart so the comparison loop stays vectorisable.
            self.emit(f"{nan_seen} = False")
        inner_index = self.open_loops(tuple(shape[d] for d in axes))
        full = [""] * len(shape)
        for d, name in zip(outer, outer_index, strict=True):
            full[d] = name
        for d, name in zip(axes, inner_index, strict=True):
            full[d] = name
        x = representation.render(full)
        element = self.fresh("x")
        self.emit(f"{element} = {ct}({x})")
        if kind == "sum":
            self.emit(f"{accumulator} = {ct}({accumulator} + {element})")
        elif kind == "prod":
            self.emit(f"{accumulator} = {ct}({accumulator} * {element})")
        elif kind == "xor_sum":
            self.emit(f"{accumulator} = {ct}({accumulator} ^ {element})")
        elif kind in ("max", "min"):
            better = ">" if kind == "max" else "<"
            self.emit(f"{accumulator} = {element} if {element} {better} {accumulator} else {accumulator}")
            if accumulate_dt.is_floating():
                self.emit(f"{nan_seen} = {nan_seen} | ({element} != {element})")
        else:
            linear = " + ".join(f"{name} * {_stride(shape, axes, k)}" for k, name in enumerate(inner_index))
            better = ">" if kind == "argmax" else "<"
            nan_first = f"({element} != {element} and {accumulator} == {accumulator})"
            self.emit(f"if {position} < 0 or {element} {better} {accumulator} or {nan_first}:")
            self.emit(f"    {accumulator} = {element}")
            self.emit(f"    {position} = np.int32({linear})")
        self.close_loops(tuple(shape[d] for d in axes))
        if kind in ("max", "min") and accumulate_dt.is_floating():
            self.emit(f"if {nan_seen}:")
            self.emit(f"    {accumulator} = {ct}(np.nan)")
        final = position if kind in ("argmax", "argmin") else _typed(dt, accumulator)
        if result_shape:
            out_index = []
            k = 0
            for d in range(len(shape)):
                if d in axes:
                    if keep_dims:
                        out_index.append("0")
                else:
                    out_index.append(outer_index[k])
                    k += 1
            self.emit(f"{result}[{', '.join(out_index)}] = {final}")
        else:
            self.emit(f"{result} = {final}")
        self.close_loops(tuple(shape[d] for d in outer))
        self.values[op.result.id] = Buffer(result, result_shape) if result_shape else Scalar(result)

    def _reduce_rows(self, op: Op, kind: str, axes: list[int], outer: list[int]) -> None:
        """A float sum/max/min over the last axis (or everything) as calls of the vectorised row
        helpers on a materialised buffer."""
        (source,) = op.operands
        shape = source.type.shape
        dt = op.result.type.dtype
        keep_dims = op.attrs["keep_dims"]
        helper = {"sum": "row_sum", "max": "row_max", "min": "row_min"}[kind]
        buffer = self.materialize(source)
        result_shape = op.result.type.shape
        if not outer:
            total = 1
            for extent in shape:
                total *= extent
            row = buffer.name if len(shape) == 1 else f"{buffer.name}.reshape({total})"
            value = _typed(dt, f"{helper}({row})")
            if result_shape:
                name = self.buffer(op.result.id, result_shape, dt)
                self.emit(f"{name}[{', '.join('0' for _ in result_shape)}] = {value}")
                self.values[op.result.id] = Buffer(name, result_shape)
            else:
                name = f"v{op.result.id}"
                self.emit(f"{name} = {value}")
                self.values[op.result.id] = Scalar(name)
            return
        name = self.buffer(op.result.id, result_shape, dt)
        index = self.open_loops(tuple(shape[d] for d in outer))
        target = index + (["0"] if keep_dims else [])
        row = f"{buffer.name}[{', '.join(index)}, :]"
        self.emit(f"{name}[{', '.join(target)}] = {_typed(dt, f'{helper}({row})')}")
        self.close_loops(tuple(shape[d] for d in outer))
        self.values[op.result.id] = Buffer(name, result_shape)

    def op_scan(self, op: Op) -> None:
        (source,) = op.operands
        representation = self.get(source)
        kind = op.attrs["kind"]
        axis = op.attrs["axis"] % len(source.type.shape)
        reverse = op.attrs.get("reverse", False)
        dt = op.result.type.dtype
        shape = source.type.shape
        accumulate_dt = D.float32 if dt.name in ("fp16", "bf16") else dt
        ct = compute_type(accumulate_dt)
        result = self.buffer(op.result.id, shape, dt)
        outer = [d for d in range(len(shape)) if d != axis]
        outer_index = self.open_loops(tuple(shape[d] for d in outer))
        accumulator = self.fresh("acc")
        self.emit(f"{accumulator} = {ct}({0 if kind == 'sum' else 1})")
        step = self.fresh("k")
        extent = shape[axis]
        self.emit(f"for {step} in range({extent}):")
        self.depth += 1
        position = f"({extent - 1} - {step})" if reverse else step
        full = [""] * len(shape)
        for d, name in zip(outer, outer_index, strict=True):
            full[d] = name
        full[axis] = position
        symbol = "+" if kind == "sum" else "*"
        if kind not in ("sum", "prod"):
            raise UnsupportedByNumba(f"scan {kind}")
        self.emit(f"{accumulator} = {ct}({accumulator} {symbol} {representation.render(full)})")
        self.emit(f"{result}[{', '.join(full)}] = {_typed(dt, accumulator)}")
        self.depth -= 1
        self.close_loops(tuple(shape[d] for d in outer))
        self.values[op.result.id] = Buffer(result, shape)

    def op_dot(self, op: Op) -> None:
        """`tl.dot`: a 2-D product is one call of `dot_support.tile_dot`, which stages each operand in
        the layout of its memory (a column-major tile, such as the transposed weight of `linear`, as
        a Fortran array gemm reads through its transpose flag), passes a full contiguous tile as a
        view, and calls BLAS gemm through `np.dot`; a batched one loops `np.dot` over C copies."""
        a, b = op.operands[0], op.operands[1]
        acc = op.operands[2] if len(op.operands) > 2 else None
        out_dt = op.result.type.dtype
        a_dt = a.type.dtype
        if not a_dt.is_floating():
            raise UnsupportedByNumba("integer dot")
        work_dt = D.float64 if a_dt.name == "fp64" or out_dt.name == "fp64" else D.float32
        result_shape = op.result.type.shape
        product = f"p{op.result.id}"
        if len(result_shape) == 2:
            # operands the direct gemm reads in place get unallocated staging placeholders
            in_place = self._dot_in_place(a, work_dt) and self._dot_in_place(b, work_dt)
            arguments = self._tile_dot_operand(a, work_dt, in_place) + \
                self._tile_dot_operand(b, work_dt, in_place)
            self.uses_dot_support = True
            entry = (self._dot_memory(a, work_dt), self._dot_memory(b, work_dt), compute_type(work_dt)[3:])
            self.dot_entries.add((*entry, False))
            only_stored = acc is None and out_dt.name == work_dt.name
            store = self._direct_dot_store(op, work_dt) if only_stored else None
            if store is not None and id(store[0]) not in self.dot_stores:  # (one product per store: a sum
                # of two products defers the first, whose addend is the second, computed as usual)
                store_op, scale, addend = store
                roots = [box.root for box in (self._direct_box(a), self._direct_box(b)) if box is not None]
                self.dot_entries.add((*entry, True))
                self.dot_stores[id(store_op)] = (product, arguments, scale, addend, roots)
                self.values[op.result.id] = Buffer(product, result_shape)
                return
            # padding read: True unless `dot_padding` shows every read is at counted rows and columns
            self.emit(f"{product} = tile_dot({', '.join(arguments)}, True)")
        else:
            operands = [self._dot_array(value, work_dt) for value in (a, b)]
            self._allocate(product, f"np.empty({tuple(result_shape)!r}, dtype={compute_type(work_dt)})")
            batch = result_shape[:-2]
            index = self.open_loops(batch)
            where = ", ".join(index)
            self.emit(f"{product}[{where}] = np.dot({operands[0]}[{where}], {operands[1]}[{where}])")
            self.close_loops(batch)
        if acc is None and out_dt.name == work_dt.name:
            self.values[op.result.id] = Buffer(product, result_shape)
            return
        racc = self.get(acc) if acc is not None else None
        name = self.buffer(op.result.id, result_shape, out_dt)
        index = self.open_loops(result_shape)
        total = f"{product}[{', '.join(index)}]"
        if racc is not None:
            total = f"{total} + {racc.render(index)}"
        self.emit(f"{name}[{', '.join(index)}] = {_typed(out_dt, total)}")
        self.close_loops(result_shape)
        self.values[op.result.id] = Buffer(name, result_shape)

    def _direct_dot_store(self, op: Op, work_dt: D.dtype) -> tuple[Op, Value | None, Value | None] | None:
        """(the store, the scalar scale or None, the addend or None) when this 2-D product's only use is
        `tl.store(ptr, product [* scale] [+ addend])` (scale a scalar broadcast; the addend any value
        of the product's shape and dtype: the op library's `beta * bias`) later in the same op list,
        into memory of the work dtype, with no store, atomic or region op in between (so reading the
        operands at the store reads what the product would have read). Its `tile_dot` call is then
        made at the store, into the stored block itself where that block is row-major (the op
        library's matmul: no product tile and no copy; an addend is stored first and gemm adds onto
        it). Not in the alias-safe variant, which reads every operand where it stands."""
        if self.eager_reads or self.uses.get(op.result.id, 0) != 1:
            return None
        ops, position = self._block
        defined = {o.result.id: o for o in ops[:position] if o.results}
        scale = addend = None
        value = op.result
        for later in ops[position + 1:]:
            if later.opcode in ("store", "atomic") or later.regions:
                if later.opcode != "store" or later.operands[1] is not value:
                    return None
                root = later.attrs["root"]
                memory = self.fn.params[root].type.dtype.element_ty
                return (later, scale, addend) if memory.name == work_dt.name else None
            if value in later.operands:
                kind = later.attrs.get("op") if later.opcode == "binary" else None
                if kind not in ("mul", "add") or addend is not None or \
                        later.operands[0] is later.operands[1] or self.uses.get(later.result.id, 0) != 1 or \
                        later.result.type != op.result.type:
                    return None
                other = later.operands[1] if later.operands[0] is value else later.operands[0]
                if kind == "add":
                    if other.type != op.result.type:
                        return None
                    addend, value = other, later.result
                    continue
                source = defined.get(other.id)
                if scale is not None or source is None or source.opcode != "broadcast" or \
                        source.operands[0].type.shape or source.operands[0].type.dtype.name != work_dt.name:
                    return None
                scale, value = source.operands[0], later.result
            if later.results:
                defined[later.result.id] = later
        return None

    def _dot_array(self, value: Value, work_dt: D.dtype) -> str:
        """`value` as a C-contiguous array of the work type: its buffer, or an elementwise copy."""
        representation = self.get(value)
        if isinstance(representation, Buffer) and compute_type(value.type.dtype) == compute_type(work_dt):
            return representation.name
        name = f"d{value.id}_{self.fresh('')}"
        shape = value.type.shape
        self._allocate(name, f"np.empty({tuple(shape)!r}, dtype={compute_type(work_dt)})")
        index = self.open_loops(shape)
        self.emit(f"{name}[{', '.join(index)}] = {representation.render(index)}")
        self.close_loops(shape)
        return name

    def _direct_box(self, value: Value) -> BoxLoad | None:
        """The box load `tile_dot` reads `value` through, in its argument's memory (a masked box load
        not yet materialised), or None."""
        box = self.box_loads.get(value.id)
        if box is not None and box.fill is not None and isinstance(self.get(value), Lazy):
            return box
        return None

    def _dot_memory(self, value: Value, work_dt: D.dtype) -> str:
        """numpy dtype name of the memory `_tile_dot_operand` passes for `value` (its argument's
        memory for a box load read by `tile_dot`, else a work-dtype array)."""
        box = self._direct_box(value)
        if box is not None:
            # the prologue's `m{root}` array of that pointer argument
            return memory_dtype_name(self.fn.params[box.root].type.dtype.element_ty)
        return compute_type(work_dt)[3:]

    def _dot_in_place(self, value: Value, work_dt: D.dtype) -> bool:
        """Whether `tile_dot`'s direct gemm may read this operand where it lies: a box load from memory
        of the work dtype, a `tl.trans` of a work-type buffer, or a work-type array of the kernel's own
        (the last two are always contiguous tiles)."""
        box = self._direct_box(value)
        if box is not None:
            return box.dtype.name == work_dt.name
        return True

    def _staging(self, value: Value, rows: int, cols: int, ct: str, in_place: bool) -> tuple[str, str]:
        """The C and transposed staging buffers of one operand, allocated once per launch (tile_dot
        fills and consumes them in one call, so the next loop iteration or program may reuse them);
        when the direct gemm should read both operands in place (`in_place`), unallocated placeholders
        of the same type and shape that `dot_support.tile_dot_into` allocates only if a call stages."""
        names = f"sc{value.id}_{self.fresh('')}", f"st{value.id}_{self.fresh('')}"
        for name, shape in zip(names, ((rows, cols), (cols, rows)), strict=True):
            if in_place:
                self.hoisted.append(f"{name} = numba.carray(as_pointer(np.int64(0), {ct}), {shape!r})")
            else:
                self.hoisted.append(f"{name} = np.empty({shape!r}, dtype={ct})")
        return names

    def _tile_dot_operand(self, value: Value, work_dt: D.dtype, in_place: bool) -> list[str]:
        """The 11 `tile_dot` arguments of one 2-D operand: memory, offset, row and column strides,
        active rows and columns, fill, C and transposed staging buffers (`_staging`), f16/bf16 bits,
        exact. A box load passes its own memory; anything else is a C array of the work type, passed
        as memory that is one full contiguous tile (so `tile_dot` uses it as it is)."""
        rows, cols = value.type.shape
        ct = compute_type(work_dt)
        box = self._direct_box(value)
        if box is not None:
            root, created, depth = self.deferred[value.id]
            self.hazards.read(root, created, self.loops > depth, None, self.written_roots)
            staged_c, staged_t = self._staging(value, rows, cols, ct, in_place)
            row_stride, col_stride = box.affine.coefficients
            bits = {"fp16": 1, "bf16": 2}.get(box.dtype.name, 0)
            return [f"m{box.root}", _int_argument(box.affine.base), _int_argument(str(row_stride)),
                    _int_argument(str(col_stride)), _int_argument(box.counts[0]),
                    _int_argument(box.counts[1]), f"{ct}({box.fill})", staged_c, staged_t, str(bits),
                    str(box.dtype.name == work_dt.name)]
        source = self.transposed.get(value.id)
        if source is not None and isinstance(self.get(value), Lazy) \
                and compute_type(value.type.dtype) == ct:
            # `tl.trans` of a C buffer of the work type: the buffer itself, read with swapped strides
            # (gemm's transpose flag), instead of an elementwise copy into a new array
            staged_c, staged_t = self._staging(value, rows, cols, ct, in_place)
            return [f"{source}.reshape(({rows * cols},))", "0", "1", str(rows), str(rows), str(cols),
                    f"{ct}(0)", staged_c, staged_t, "0", "True"]
        name = self._dot_array(value, work_dt)
        return [f"{name}.reshape(({rows * cols},))", "0", str(cols), "1", str(rows), str(cols), f"{ct}(0)",
                name, name, "0", "True"]

    def op_make_block_ptr(self, op: Op) -> None:
        ty: BlockPtrType = op.result.type
        rank = len(ty.block_shape)
        operands = op.operands
        names = []
        for value in operands:
            names.append(self.get(value).render([]))
        base = self.fresh("base")
        self.emit(f"{base} = np.int64({names[0]})")
        shape = [self._scalar64(n) for n in names[1 : 1 + rank]]
        strides = [self._scalar64(n) for n in names[1 + rank : 1 + 2 * rank]]
        offsets = [self._scalar64(n) for n in names[1 + 2 * rank : 1 + 3 * rank]]
        affine = self.affine_of(operands[0])
        exact_base = None
        if affine is not None:
            twins = (_shadow(affine.base, False), _shadow(affine.base, True))
            exact_base = None if None in twins else twins
        self.values[op.result.id] = BlockPointer(
            ty.root, base, shape, strides, offsets, ty.block_shape, exact_base
        )

    def _scalar64(self, expression: str) -> str:
        name = self.fresh("q")
        self.emit(f"{name} = np.int64({expression})")
        return name

    def op_advance(self, op: Op) -> None:
        pointer: BlockPointer = self.get(op.operands[0])
        deltas = [self._scalar64(self.get(v).render([])) for v in op.operands[1:]]
        offsets = []
        for o, d in zip(pointer.offsets, deltas, strict=True):
            # an offset advanced past the int64 range saturates instead of wrapping: it stays outside
            # any shape and its lanes' addresses stay huge (out of bounds), as the exact value is
            name = self._scalar64(f"{o} + {d}")
            self.emit(f"if (({o} ^ {name}) & ({d} ^ {name})) < 0:")
            self.emit(f"    {name} = np.int64({2**63 - 1}) if {d} > 0 else np.int64({-(2**63)})")
            offsets.append(name)
        self.values[op.result.id] = BlockPointer(
            pointer.root, pointer.base, pointer.shape, pointer.strides, offsets, pointer.block_shape,
            pointer.exact_base,
        )

    def _block_wraps(self, pointer: BlockPointer) -> str:
        """Once per access: a variable false when no lane's int64 address can wrap (a bound on its
        terms below 2**62); lanes of an access where it is true also test their float64 address."""
        bound = self.fresh("mg")
        base_bound = pointer.exact_base[1] if pointer.exact_base else f"abs(np.float64({pointer.base}))"
        terms = [f"({base_bound})"] + [
            f"(abs(np.float64({o})) + {extent - 1}.0) * abs(np.float64({s}))"
            for o, s, extent in zip(pointer.offsets, pointer.strides, pointer.block_shape, strict=True)
        ]
        self.emit(f"{bound} = {' + '.join(terms)} >= {_SHADOW_LIMIT}")
        return bound

    def _block_exact(self, pointer: BlockPointer, index: list[str], may_wrap: str) -> str:
        """The per-lane test `_address` adds when the access may wrap: the exact address is huge."""
        base = f"({pointer.exact_base[0]})" if pointer.exact_base else f"np.float64({pointer.base})"
        address = " + ".join(
            [base]
            + [f"(np.float64({o}) + {i}) * np.float64({s})"
               for o, i, s in zip(pointer.offsets, index, pointer.strides, strict=True)]
        )
        return f"{may_wrap} and abs({address}) >= {_SHADOW_LIMIT}"

    def _block_lane(self, pointer: BlockPointer, index: list[str], checked) -> tuple[str, str]:
        coordinates = [f"({o} + {i})" for o, i in zip(pointer.offsets, index, strict=True)]
        # `0 <= offset + lane < size` without forming `offset + lane`: numba's int64 additions carry
        # LLVM's no-signed-wrap flag, so for an offset near 2**63 LLVM folded the test to true on lanes
        # whose sum wraps (the launch fuzzer's offset 2**63 - 1 over an empty shape wrote a lane). With
        # the lane (0 <= lane < block) on the other side nothing can wrap: `size - lane` is formed only
        # for a positive size.
        inside = " and ".join(
            f"{pointer.offsets[d]} >= -{index[d]} and {pointer.shape[d]} > 0 and "
            f"{pointer.offsets[d]} < {pointer.shape[d]} - {index[d]}" for d in checked) or "True"
        address = " + ".join(
            [pointer.base] + [f"{c} * {s}" for c, s in zip(coordinates, pointer.strides, strict=True)]
        )
        return inside, f"np.int64({address})"

    def op_block_load(self, op: Op) -> None:
        pointer: BlockPointer = self.get(op.operands[0])
        dt = op.result.type.dtype
        shape = op.result.type.shape
        checked = op.attrs.get("boundary_check") or ()
        padding = op.attrs.get("padding") or "zero"
        pad = _literal(dt, float("nan") if padding == "nan" else 0)
        name = self.buffer(op.result.id, shape, dt)
        may_wrap = self._block_wraps(pointer)
        index = self.open_loops(shape)
        inside, address = self._block_lane(pointer, index, checked)
        target = f"{name}[{', '.join(index)}]"
        self.emit(f"if {inside}:")
        self.depth += 1
        wrapped = self._block_exact(pointer, index, may_wrap)
        offset = self._address(op, pointer.root, address, None, "block_load", wrapped)
        self.emit(f"{target} = {_load_value(dt, _memory(pointer.root, offset))}")
        self.depth -= 1
        self.emit("else:")
        self.emit(f"    {target} = {pad}")
        self.close_loops(shape)
        self.values[op.result.id] = Buffer(name, shape)

    def op_block_store(self, op: Op) -> None:
        pointer: BlockPointer = self.get(op.operands[0])
        value = op.operands[1]
        representation = self.get(value)
        self.stored_roots.add(pointer.root)
        self.hazards.begin_write(pointer.root)
        dt = value.type.dtype
        shape = value.type.shape
        checked = op.attrs.get("boundary_check") or ()
        may_wrap = self._block_wraps(pointer)
        index = self.open_loops(shape)
        inside, address = self._block_lane(pointer, index, checked)
        self.emit(f"if {inside}:")
        self.depth += 1
        wrapped = self._block_exact(pointer, index, may_wrap)
        offset = self._address(op, pointer.root, address, None, "block_store", wrapped)
        self.emit(f"{_memory(pointer.root, offset)} = {_store_value(dt, representation.render(index))}")
        self.depth -= 1
        self.close_loops(shape)

    # ---- padding and dynamic slices
    def op_pad(self, op: Op) -> None:
        (source,) = op.operands
        representation = self.get(source)
        pads = op.attrs["pads"]
        fill = _literal(op.result.type.dtype, op.attrs["value"])
        source_shape = source.type.shape

        def build(index: list[str]) -> str:
            mapped = [f"({i} - {lo})" for i, (lo, _hi) in zip(index, pads, strict=True)]
            inside = " and ".join(f"0 <= {m} < {n}" for m, n in zip(mapped, source_shape, strict=True))
            return f"({representation.render(mapped)} if {inside} else {fill})"

        self.define(op.result, build, *self.operand_cost(source))
        self.materialize(op.result)

    def op_dyn_slice(self, op: Op) -> None:
        source, start = op.operands
        representation = self.get(source)
        axis = op.attrs["axis"]
        length = op.result.type.shape[axis]
        extent = source.type.shape[axis]
        begin = self.fresh("start")
        self.emit(f"{begin} = np.int64({self.get(start).render([])})")
        site = self.error_code(op, "dyn_slice")
        self.emit(f"if {begin} < 0 or {begin} + {length} > {extent}:")
        self.depth += 1
        self.fail(ERR_DYN_SLICE, site, begin)
        self.depth -= 1

        def build(index: list[str]) -> str:
            mapped = list(index)
            mapped[axis] = f"({index[axis]} + {begin})"
            return representation.render(mapped)

        self.values[op.result.id] = Lazy(op.result.type.shape, build, *self.operand_cost(source))
        self.materialize(op.result)

    def op_dyn_update(self, op: Op) -> None:
        source, update, start = op.operands
        rs, ru = self.get(source), self.get(update)
        axis = op.attrs["axis"]
        length = update.type.shape[axis]
        extent = source.type.shape[axis]
        begin = self.fresh("start")
        self.emit(f"{begin} = np.int64({self.get(start).render([])})")
        site = self.error_code(op, "dyn_slice")
        self.emit(f"if {begin} < 0 or {begin} + {length} > {extent}:")
        self.depth += 1
        self.fail(ERR_DYN_SLICE, site, begin)
        self.depth -= 1
        shape = op.result.type.shape
        name = self.buffer(op.result.id, shape, op.result.type.dtype)
        index = self.open_loops(shape)
        self.emit(f"{name}[{', '.join(index)}] = {rs.render(index)}")
        self.close_loops(shape)
        index = self.open_loops(update.type.shape)
        mapped = list(index)
        mapped[axis] = f"{index[axis]} + {begin}"
        self.emit(f"{name}[{', '.join(mapped)}] = {ru.render(index)}")
        self.close_loops(update.type.shape)
        self.values[op.result.id] = Buffer(name, shape)

    # ---- debugging
    def op_print(self, op: Op) -> None:
        raise UnsupportedByNumba("device_print runs on the interpreter backend, which formats it exactly")

    def op_assert(self, op: Op) -> None:
        (condition,) = op.operands
        representation = self.get(condition)
        site = self.error_code(op, "assert")
        shape = condition.type.shape
        index = self.open_loops(shape)
        self.emit(f"if not {representation.render(index)}:")
        self.depth += 1
        self.fail(ERR_ASSERT, site, "0")
        self.depth -= 1
        self.close_loops(shape)

    # ---- control flow
    def _flat(self, value: Value) -> list[str]:
        """The variable names (or scalar expressions) that hold `value`, for carried/yielded positions:
        one for a scalar or an array, base/shape/strides/offsets for a block pointer."""
        representation = self.get(value)
        if isinstance(representation, Lazy):
            representation = self.materialize(value)
        if isinstance(representation, Scalar):
            return [representation.render([])]
        if isinstance(representation, Buffer):
            return [representation.name]
        return [representation.base, *representation.shape, *representation.strides, *representation.offsets]

    def _slot(self, value: Value) -> tuple[object, list[str]]:
        """A fresh set of variables able to hold values of `value`'s type."""
        ty = value.type
        if isinstance(ty, BlockPtrType):
            rank = len(ty.block_shape)
            names = [self.fresh(f"bp{value.id}_") for _ in range(1 + 3 * rank)]
            pointer = BlockPointer(
                ty.root,
                names[0],
                names[1 : 1 + rank],
                names[1 + rank : 1 + 2 * rank],
                names[1 + 2 * rank :],
                ty.block_shape,
            )
            return pointer, names
        name = f"v{value.id}"
        return (Buffer(name, ty.shape) if ty.shape else Scalar(name)), [name]

    def _assign(self, targets: list[str], sources: list[str]) -> None:
        if targets:
            self.emit(f"{', '.join(targets)} = {', '.join(sources)}")
        for target, source in zip(targets, sources, strict=True):
            self.aliases.setdefault(target, set()).update(self._names_buffers([source]))

    def _bind(self, values: list[Value]) -> list[str]:
        """Bind `values` to fresh variables; returns the flat variable names."""
        names: list[str] = []
        for value in values:
            representation, flat = self._slot(value)
            self.values[value.id] = representation
            names.extend(flat)
        return names

    def _flat_all(self, values) -> list[str]:
        return [name for value in values for name in self._flat(value)]

    def op_for(self, op: Op) -> None:
        lower, upper, step = (self.get(v).render([]) for v in op.operands[:3])
        initial = self._flat_all(op.operands[3:])
        body = op.regions[0]
        induction, *carried = body.args
        carried_names = self._bind(carried)
        self._assign(carried_names, initial)
        raw = self.fresh("it")
        self.emit(f"for {raw} in range({lower}, {upper}, {step}):")
        self.depth += 1
        self.emit(f"v{induction.id} = {compute_type(induction.type.dtype)}({raw})")
        self.values[induction.id] = Scalar(f"v{induction.id}")
        self.exact_scalars.add(f"v{induction.id}")
        self._bound_leaf(f"v{induction.id}", induction.type.dtype)  # held in its (32-bit) type
        self.loops += 1
        self.carried.append(carried_names)
        self.block_with_terminator(body, carried_names, loop=True)
        self.carried.pop()
        self.loops -= 1
        self.depth -= 1
        for result, arg in zip(op.results, carried, strict=True):
            self.values[result.id] = self.values[arg.id]

    @contextmanager
    def region(self, loop: bool = False):
        """Lower the ops of one region (a loop body, a branch, a while condition).

        A value materialized inside the region lives in a buffer that is written only when the region
        runs, so the binding must not outlive it: a sibling branch, code after an untaken branch or a
        zero-trip loop, or a later program (the generated function loops over programs) would read
        whatever an earlier execution left there.  On exit every value bound before the region gets
        back the representation it had, and its next use materializes it where it is.

        Yields the set the region's terminator adds its yielded variables to (`_close_region`)."""
        self.regions += 1
        # a fresh id, never the function body's 0: a region entered before the first `fresh` call took
        # the counter's 0, and a count memoised in it (a masked load in a branch) was reused after it
        self.fresh("scope")
        self.scope.append(self.counter)
        self.rebound.append({})
        self.region_buffers.append([])
        yielded: set[str] = set()
        try:
            yield yielded
        finally:
            self._close_region(self._names_buffers(sorted(yielded)), loop)
            self.values.update(self.rebound.pop())
            self.scope.pop()
            self.regions -= 1

    def block_with_terminator(self, block, targets: list[str], loop: bool = False) -> None:
        with self.region(loop) as yielded:
            self.block_ops(block.ops[:-1])
            terminator = block.ops[-1]
            sources = self._flat_all(terminator.operands)
            self._assign(targets, sources)
            yielded.update(sources)

    def block_ops(self, ops) -> None:
        outer = self._block
        for position, op in enumerate(ops):
            handler = getattr(self, "op_" + op.opcode, None)
            if handler is None:
                raise UnsupportedByNumba(f"op '{op.opcode}' is not supported by the numba backend")
            self._block = (ops, position)
            handler(op)
        self._block = outer

    def op_while(self, op: Op) -> None:
        before, after = op.regions
        initial = self._flat_all(op.operands)
        names = self._bind(before.args)
        self._assign(names, initial)
        self.emit("while True:")
        self.depth += 1
        self.loops += 1
        self.carried.append(names)
        with self.region():
            self.block_ops(before.ops[:-1])
            condition = before.ops[-1].operands[0]
            self.emit(f"if not {self.get(condition).render([])}:")
            self.emit("    break")
        for after_arg, before_arg in zip(after.args, before.args, strict=True):
            self.values[after_arg.id] = self.values[before_arg.id]
        self.block_with_terminator(after, names, loop=True)
        self.carried.pop()
        self.loops -= 1
        self.depth -= 1
        for result, arg in zip(op.results, before.args, strict=True):
            self.values[result.id] = self.values[arg.id]

    def op_if(self, op: Op) -> None:
        condition = self.get(op.operands[0]).render([])
        then_block, else_block = op.regions
        slots = [self._slot(result) for result in op.results]
        names = [name for _, flat in slots for name in flat]
        self.emit(f"if {condition}:")
        self.depth += 1
        self.block_with_terminator(then_block, names)
        self.emit("pass")
        self.depth -= 1
        self.emit("else:")
        self.depth += 1
        self.block_with_terminator(else_block, names)
        self.emit("pass")
        self.depth -= 1
        for result, (representation, _) in zip(op.results, slots, strict=True):
            self.values[result.id] = representation

    def op_breakpoint(self, op: Op) -> None:
        raise UnsupportedByNumba("breakpoint() needs the interpreter backend")


_SHADOW_TOKEN = re.compile(r"np\.u?int\d+\(|[A-Za-z_]\w*|\d+|[-+*() ]")
_SHADOW_LIMIT = "4.611686018427388e18"  # 2**62: no tensor has that many elements
_EXACT_BELOW = 2**63 - 2**40  # a static bound below this (with room for float rounding): no int64 wrap


def _shadow(expression, magnitude: bool, leaf=None) -> str | None:
    """A float64 twin of an integer offset expression built from +, -, * over scalar variables and
    literals (an `Affine` base or coefficient). `magnitude` sums absolute values instead (a bound on
    every intermediate value). int64 arithmetic wraps past 2**63, and a wrapped offset can land back
    inside a tensor; the twin cannot wrap, so a bound below 2**62 proves the int64 value exact, and
    a twin at 2**62 or beyond proves the offset outside any tensor. None when the expression holds
    anything else (the caller then checks lane by lane). `leaf`, when given, renders each variable
    (a static bound, or None when it has none, which makes the whole result None)."""
    if isinstance(expression, int):
        return repr(float(abs(expression) if magnitude else expression))
    parts, position = [], 0
    for match in _SHADOW_TOKEN.finditer(expression):
        token = match.group()
        if match.start() != position:
            return None
        position = match.end()
        if token.startswith("np."):
            parts.append("(")
        elif token[0].isdigit():
            parts.append(repr(float(token)))
        elif token[0].isalpha() or token[0] == "_":
            if expression[position:position + 1] in ("(", "."):
                return None  # a call or attribute: not a plain variable
            if leaf is not None:
                rendered = leaf(token)
                if rendered is None:
                    return None
                parts.append(rendered)
                continue
            parts.append(f"abs(np.float64({token}))" if magnitude else f"np.float64({token})")
        else:
            parts.append("+" if magnitude and token == "-" else token)
    return "".join(parts) if position == len(expression) else None


def _is_uniform(affine: Affine) -> bool:
    return all(c == 0 for c in affine.coefficients)


def _add_terms(x, y, sign: str = "+"):
    if isinstance(x, int) and isinstance(y, int):
        return x + y if sign == "+" else x - y
    if y == 0:
        return x
    if x == 0 and sign == "+":
        return y
    return f"({x} {sign} {y})"


def _mul_terms(x, factor: str):
    if x == 0:
        return 0
    if x == 1:
        return factor
    return f"({x} * {factor})"


def _combine_affine(kind: str, a: Affine | None, b: Affine | None) -> Affine | None:
    if a is None or b is None or len(a.coefficients) != len(b.coefficients):
        return None
    if kind in ("add", "sub"):
        sign = "+" if kind == "add" else "-"
        return Affine(
            _add_bases(a.base, b.base, sign),
            tuple(_add_terms(x, y, sign) for x, y in zip(a.coefficients, b.coefficients, strict=True)),
        )
    if kind == "mul":
        if _is_uniform(b):
            a, b = a, b
        elif _is_uniform(a):
            a, b = b, a
        else:
            return None
        factor = b.base
        base = "0" if _is_zero(a.base) or _is_zero(factor) else f"({a.base} * {factor})"
        return Affine(base, tuple(_mul_terms(c, factor) for c in a.coefficients))
    return None


def _is_zero(base: str) -> bool:
    """Whether an `Affine` base is the literal 0 (the base of `tl.arange(0, n)`, of a pointer argument)."""
    return base in ("0", "np.int64(0)")


def _add_bases(x: str, y: str, sign: str) -> str:
    """`x sign y` for two `Affine` bases, without the term that is a literal 0 (each term is IR numba
    types and lowers, and `_shadow` twins it into float64 arithmetic besides)."""
    if _is_zero(y):
        return x
    if _is_zero(x) and sign == "+":
        return y
    return f"({x} {sign} {y})"


def _interval_from_compare(kind: str, a: Affine | None, b: Affine | None) -> Interval | None:
    """`index[d] + base < bound` style comparisons as an interval mask."""
    if a is None or b is None:
        return None
    if kind in ("gt", "ge"):
        a, b = b, a
        kind = "lt" if kind == "gt" else "le"
    if kind not in ("lt", "le") or not _is_uniform(b):
        return None
    live = [d for d, c in enumerate(a.coefficients) if c != 0]
    if not live and a.coefficients:
        # the same test for every lane (`rows[:, None] < n` with a block of one row): all lanes or
        # none, i.e. `index[0] <` a bound past the block or 0
        symbol = "<" if kind == "lt" else "<="
        upper = f"({_I32_MAX} if {a.base} {symbol} {b.base} else 0)"
        return Interval((upper,) + (None,) * (len(a.coefficients) - 1))
    if len(live) != 1 or a.coefficients[live[0]] != 1:
        return None
    upper = _add_bases(b.base, a.base, "-")
    if kind == "le":
        upper = f"({upper} + 1)"
    return Interval(tuple(upper if d == live[0] else None for d in range(len(a.coefficients))))


def _intersect(a: Interval | None, b: Interval | None) -> Interval | None:
    if a is None or b is None or len(a.upper) != len(b.upper):
        return None
    combined = []
    for x, y in zip(a.upper, b.upper, strict=True):
        combined.append(x if y is None else y if x is None else f"min({x}, {y})")
    return Interval(tuple(combined))


def _identifier(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"k_{cleaned}"


def _int_range(dt: D.dtype) -> tuple[int, int]:
    import numpy as np

    info = np.iinfo(compute_type(dt)[3:])
    return int(info.min), int(info.max)


def _stride(shape, axes, k) -> int:
    stride = 1
    for d in axes[k + 1 :]:
        stride *= shape[d]
    return stride


def lower(fn: Function, eager_reads: bool = False, same_memory: bool = False) -> Lowered:
    """Generate the numba module source for `fn` (raises UnsupportedByNumba for what it cannot lower).
    `eager_reads` reads every load where it stands: the variant for launches whose arguments alias;
    `same_memory` binds each in-place output's array to its input's: the variant for launches whose
    in-place pairs are the same memory (`ERR_SAME_MEMORY`)."""
    return _Lowering(fn, eager_reads, same_memory).lower()
