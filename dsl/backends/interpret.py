"""The numpy interpreter backend: runs an `ir.Function` program by program.

The IR is precompiled into flat lists of Python closures over numpy (one closure per op, no dispatch at
run time).  Values live in a list indexed by `Value.id`.  Three tiers of ops:

- *static*: pure ops whose operands are static (constants, aranges, their broadcasts...) are evaluated
  once, when the executable is built;
- *launch-invariant*: pure top-level ops that depend only on arguments and `num_programs`, evaluated
  once per launch;
- everything else runs once per program (`program_id` values are written straight into the env).

Pointers are int64 element offsets into the flat numpy view of their argument; every active lane of a
load/store is bounds-checked, and a violation raises `KernelRuntimeError` naming the kernel line.
fp16/bf16 arithmetic is computed in fp32 and rounded (round-to-nearest-even) to the declared dtype;
casts from fp64/int to bf16 round directly (no double rounding).
"""

from __future__ import annotations

import builtins
import threading

import numpy as np

from .. import dtypes as D
from ..errors import KernelRuntimeError
from ..ir import BlockPtrType, Function

_F32 = np.dtype(np.float32)
_PURE_EXCLUDE = {
    "breakpoint",
    "load",
    "store",
    "atomic",
    "atomic_cas",
    "print",
    "assert",
    "for",
    "while",
    "if",
    "yield",
    "condition",
    "block_load",
    "block_store",
    "program_id",
}


def compile(fn: Function):  # noqa: A001 - backend factory name
    return Executable(fn)


def _npd(dt):
    return D.numpy_dtype(dt)


def _is_low(dt) -> bool:
    return dt is D.float16 or dt is D.bfloat16


# ------------------------------------------------------------------------------------------------
# exact conversions
# ------------------------------------------------------------------------------------------------
def to_bf16(x) -> np.ndarray:
    """Round to bfloat16, nearest-even, directly from any float/int input (no double rounding)."""
    bf = _npd(D.bfloat16)
    x = np.asarray(x)
    if x.dtype == _F32 or x.dtype == np.float16 or x.dtype == bf:
        return x.astype(bf)
    if x.dtype == np.bool_:
        return x.astype(np.float32).astype(bf)
    x64 = x.astype(np.float64)
    bits = x64.view(np.uint64)
    lsb = (bits >> np.uint64(45)) & np.uint64(1)
    rounded = (bits + (np.uint64((1 << 44) - 1) + lsb)) & np.uint64(~((1 << 45) - 1) & 0xFFFFFFFFFFFFFFFF)
    r64 = rounded.view(np.float64)
    tiny = np.abs(x64) < 2.0**-126
    r = np.where(np.isnan(x64) | tiny | np.isinf(x64), x64, r64)
    with np.errstate(over="ignore"):
        return r.astype(np.float32).astype(bf)


def cast_array(x, src: D.dtype, dst: D.dtype, bitcast: bool = False):
    nd = _npd(dst)
    if bitcast:
        return np.asarray(x).view(nd) if np.ndim(x) else np.asarray(x).reshape(1).view(nd)[0]
    if dst is D.int1:
        return np.not_equal(x, 0) if src is not D.bfloat16 else np.not_equal(np.asarray(x, _F32), 0)
    scalar = np.ndim(x) == 0
    if dst.is_fp8():  # nearest code, ties to even (dtypes.round_to_fp8_codes), from the exact source value
        src_values = np.asarray(x).astype(_F32) if src.is_fp8() or src is D.bfloat16 else np.asarray(x)
        out = D.round_to_fp8_codes(src_values, dst).view(nd)
    elif src.is_fp8():
        out = cast_array(np.asarray(x).astype(_F32), D.float32, dst)
    elif dst is D.bfloat16:
        out = to_bf16(x)
    elif src is D.bfloat16:
        out = np.asarray(x).astype(_F32).astype(nd)
    elif dst.is_int() and src.is_floating():
        xf = np.asarray(x)
        info = np.iinfo(nd)
        with np.errstate(invalid="ignore"):
            out = np.where(np.isnan(xf), 0, np.clip(np.trunc(xf), info.min, info.max)).astype(nd)
    else:
        out = np.asarray(x).astype(nd)
    return out[()] if scalar else out


def _const(value, dt: D.dtype, shape):
    nd = _npd(dt)
    if dt is D.bfloat16:
        v = to_bf16(np.float64(value))[()]
    elif dt.is_fp8():
        v = D.round_to_fp8_codes(np.float64(value), dt).view(nd)[()]
    else:
        v = nd.type(value)
    if shape == ():
        return v
    a = np.full(shape, v, dtype=nd)
    a.flags.writeable = False
    return a


# ------------------------------------------------------------------------------------------------
# elementwise tables
# ------------------------------------------------------------------------------------------------
def _trunc_div(a, b):
    q = np.floor_divide(a, b)
    r = a - q * b
    fix = (r != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype) if np.ndim(q) else type(q)(q + (1 if fix else 0))


_BIN = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "floordiv": _trunc_div,
    "mod": np.fmod,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "shl": np.left_shift,
    "shr": np.right_shift,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "pow": np.power,
    "atan2": np.arctan2,
    "umulhi": None,  # specialised in _op_binary
}
_CMP = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def _erf(x):
    import torch

    a = np.asarray(x)
    out = torch.special.erf(torch.from_numpy(np.ascontiguousarray(a))).numpy()
    return out[()] if np.ndim(x) == 0 else out


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


_UN = {
    "neg": np.negative,
    "invert": np.invert,
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log2": np.log2,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "tanh": np.tanh,
    "erf": _erf,
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "sigmoid": _sigmoid,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "rint": np.rint,
    "trunc": np.trunc,
    "isnan": np.isnan,
    "isinf": np.isinf,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "log10": np.log10,
    "recip": lambda x: 1 / x,
    "signbit": np.signbit,
}


_GROUP_OPS = frozenset(
    {
        "constant",
        "arange",
        "broadcast",
        "binary",
        "cmp",
        "unary",
        "cast",
        "where",
        "fma",
        "ptr_add",
        "load",
        "store",
        "program_id",
        "num_programs",
    }
)
_GROUP_TARGET = 1 << 16  # elements per grouped super-program
GROUP_PROGRAMS = True  # module switch (benchmarks/tests turn it off to measure program-by-program runs)


def groupable_block(fn: Function) -> int | None:
    """Block length N if consecutive programs of `fn` can run as one program of P*N lanes, else None.

    Holds for straight-line 1-D elementwise kernels whose program-dependent integers are all of the form
    ``pid*N + lane + c`` (the `offs = pid * BLOCK + tl.arange(0, BLOCK)` pattern): every lane then
    computes exactly what it computes in its own program.  Integer values are tracked as affine forms
    ``a*pid + l*lane + invariant`` (None = opaque data); any value that reaches an op other than
    add/sub/mul-by-constant/cast/broadcast must satisfy ``a == l*N``."""
    n = None
    for op in fn.body.ops:
        if op.opcode not in _GROUP_OPS or op.regions:
            return None
        for r in op.results:
            shp = r.type.shape
            if shp:
                if len(shp) != 1 or (n is not None and shp[0] != n):
                    return None
                n = shp[0]
    if n is None:
        return None
    form: dict[int, tuple[int, int] | None] = {}
    const: dict[int, object] = {}
    for prm in fn.params:
        if prm.kind in ("ptr", "scalar"):
            form[prm.value.id] = (0, 0)

    def valid(v):
        f = form.get(v.id) if v is not None else None
        return f is None or f[0] == f[1] * n

    for op in fn.body.ops:
        oc = op.opcode
        ops = op.operands
        r = op.result.id if op.results else None
        is_int = bool(op.results) and (op.result.type.dtype.is_int() or op.result.type.dtype.is_ptr())
        if oc == "program_id":
            if op.attrs["axis"] != 0:
                return None
            form[r] = (1, 0)
        elif oc in ("num_programs", "constant"):
            form[r] = (0, 0)
            if oc == "constant":
                const[r] = op.attrs["value"]
        elif oc == "arange":
            form[r] = (0, 1)
        elif oc == "broadcast" or (oc == "cast" and is_int and ops[0].type.dtype.is_int()):
            form[r] = form.get(ops[0].id)
            if oc == "broadcast" and ops[0].id in const:
                const[r] = const[ops[0].id]
        elif oc in ("binary", "ptr_add") and op.attrs.get("op", "add") in ("add", "sub", "mul") and is_int:
            fa, fb = form.get(ops[0].id), form.get(ops[1].id)
            name = op.attrs.get("op", "add")
            if name == "mul":
                ca, cb = const.get(ops[0].id), const.get(ops[1].id)
                if fa is not None and cb is not None:
                    form[r] = (fa[0] * cb, fa[1] * cb)
                elif fb is not None and ca is not None:
                    form[r] = (fb[0] * ca, fb[1] * ca)
                elif fa == (0, 0) and fb == (0, 0):
                    form[r] = (0, 0)
                elif valid(ops[0]) and valid(ops[1]):
                    form[r] = None
                else:
                    return None
            elif fa is not None and fb is not None:
                sg = -1 if name == "sub" else 1
                form[r] = (fa[0] + sg * fb[0], fa[1] + sg * fb[1])
            elif valid(ops[0]) and valid(ops[1]):
                form[r] = None
            else:
                return None
        else:
            if not all(valid(o) for o in ops):
                return None
            if r is not None:
                pure_inv = all(o is None or form.get(o.id) == (0, 0) for o in ops)
                form[r] = (0, 0) if (pure_inv and oc != "load" and not op.result.type.shape) else None
    return n


def regroup(fn: Function, n: int, p: int) -> Function:
    """A copy of `fn` whose [n] blocks are [p*n] blocks (see `groupable_block`)."""
    import copy

    g = copy.deepcopy(fn)
    for op in g.walk():
        for v in op.results:
            if v.type.shape == (n,):
                v.type = v.type.with_shape((p * n,))
        if op.opcode == "arange":
            op.attrs["end"] = op.attrs["start"] + p * n
    return g


def int_cast_preserves_value(src: D.dtype, dst: D.dtype) -> bool:
    """Whether every `src` integer converts to `dst` unchanged. Only such casts keep an offset's
    exact (contiguous or affine) form; a narrowing cast wraps (`tl.arange(0, 256).to(tl.int8)` is
    -128..127, as in Triton) and is computed element by element."""
    if not (src.is_int() and not src.is_bool() and dst.is_int() and not dst.is_bool()):
        return False
    src_bits, dst_bits = src.primitive_bitwidth, dst.primitive_bitwidth
    if dst.is_int_unsigned():
        return src.is_int_unsigned() and dst_bits >= src_bits
    return dst_bits > src_bits if src.is_int_unsigned() else dst_bits >= src_bits


def _offset_range(a: int, b: int) -> np.ndarray:
    """Offsets a..b-1 of a contiguous access for an out-of-bounds report; exact (Python integers)
    when they pass the int64 range, which an offset computed from a huge scalar can."""
    if -(2**63) <= a and b <= 2**63:
        return np.arange(a, b, dtype=np.int64)
    return np.array([a + k for k in range(b - a)], dtype=object)


class Executable:
    """A compiled interpreter kernel; `run(grid, args)` executes every program of `grid`.

    Straight-line 1-D elementwise kernels (see `groupable_block`) run groups of consecutive programs as
    one wider program; everything else runs program by program."""

    def __init__(self, fn: Function, group: int = 1):
        self.fn = fn
        self.group = group
        self.group_n = groupable_block(fn) if group == 1 else None
        self._grouped: dict[int, Executable] = {}
        self.mem: list = [None] * len(fn.params)
        self._only: tuple[int, int, int] | None = None  # set by replay()
        self._lock = threading.RLock()  # per-launch state (memory views, program id) lives here
        self.pid = (0, 0, 0)
        self.nprog = (1, 1, 1)
        self.names = [p.name for p in fn.params]
        self.static: set[int] = set()
        self.template: list = [None] * fn.num_values
        self.alias: dict[int, int] = {}
        self._cse(fn.body, {})
        self.used = {o.id for op in fn.walk() for o in op.operands if o is not None}
        self.written_roots = {
            (op.attrs["root"] if "root" in op.attrs else op.operands[0].type.root)
            for op in fn.walk()
            if op.opcode in ("store", "atomic", "atomic_cas", "block_store")
        }
        self.no_copy = [False] * len(fn.params)
        self._elide_broadcasts(fn)
        self.uniform: set[int] = set()
        self.contig: set[int] = set()
        self.interval: set[int] = set()
        self.lazy: set[int] = set()
        self.scalar_ids = {p.value.id for p in fn.params if p.kind in ("ptr", "scalar")}
        for op in fn.walk():
            self.scalar_ids.update(r.id for r in op.results if getattr(r.type, "shape", None) == ())
            for reg in op.regions:
                self.scalar_ids.update(a.id for a in reg.args if getattr(a.type, "shape", None) == ())
        self._affine(fn)
        self._decide_lazy(fn)
        self.param_ids = [
            (i, p.value.id, p.type) for i, p in enumerate(fn.params) if p.kind in ("ptr", "scalar")
        ]
        self.pid_slots: list[tuple[int, int]] = []
        self.launch_ops, self.program_ops = self._compile_top(fn.body)

    # ---------------------------------------------------------------- helpers
    def _id(self, v):
        if v is None:
            return None
        return self.alias.get(v.id, v.id)

    def _cse(self, block, seen):
        """Common-subexpression elimination of pure, region-free ops (alias map on value ids)."""
        seen = dict(seen)
        for op in block.ops:
            if (
                op.opcode not in _PURE_EXCLUDE
                and not op.regions
                and len(op.results) == 1
                and op.opcode not in ("num_programs",)
            ):
                key = (
                    op.opcode,
                    tuple(self._id(o) for o in op.operands),
                    repr(sorted(op.attrs.items())),
                    op.result.type,
                )
                if key in seen:
                    self.alias[op.result.id] = seen[key]
                else:
                    seen[key] = op.result.id
            for r in op.regions:
                self._cse(r, seen)

    _ELEMENTWISE = frozenset({"binary", "cmp", "ptr_add", "where", "fma"})

    def _elide_broadcasts(self, fn):
        """Alias away `broadcast` ops whose users all broadcast implicitly (numpy elementwise ops) and
        still produce their declared shape from the un-broadcast operands."""
        users: dict[int, list] = {}
        bcast: dict[int, object] = {}
        for op in fn.walk():
            for o in op.operands:
                if o is not None:
                    users.setdefault(self._id(o), []).append(op)
            if op.opcode == "broadcast" and op.result.id not in self.alias:
                bcast[op.result.id] = op
        lazy = set(bcast)

        def rshape(v):
            i = self._id(v)
            if i in lazy:
                return rshape(bcast[i].operands[0])
            return tuple(v.type.shape)

        changed = True
        while changed:
            changed = False
            for rid in list(lazy):
                for u in users.get(rid, []):
                    ok = u.opcode in self._ELEMENTWISE
                    if ok:
                        try:
                            got = np.broadcast_shapes(*[rshape(o) for o in u.operands])
                        except ValueError:
                            got = None
                        ok = got == tuple(u.result.type.shape)
                    if not ok:
                        lazy.discard(rid)
                        for o in u.operands:
                            lazy.discard(self._id(o))
                        changed = True
                        break
        for rid in lazy:
            self.alias[rid] = self._id(bcast[rid].operands[0])
        # resolve alias chains
        for k in list(self.alias):
            v = self.alias[k]
            while v in self.alias:
                v = self.alias[v]
            self.alias[k] = v

    def _affine(self, fn):
        """Mark uniform values (all lanes equal) and 1-D contiguous values (v[i] = v[0] + i)."""
        U, C = self.uniform, self.contig
        U.update(p.value.id for p in fn.params if p.kind in ("ptr", "scalar"))
        for op in fn.walk():
            if not op.results or op.result.id in self.alias:
                continue
            rid = op.result.id
            shape = op.result.type.shape
            ids = [self._id(o) for o in op.operands]
            oc = op.opcode
            if oc == "constant" or (shape == () and len(op.results) == 1):
                U.add(rid)
            elif oc == "broadcast":
                if ids[0] in U:
                    U.add(rid)
            elif oc == "arange":
                C.add(rid)
            elif oc in ("binary", "ptr_add"):
                name = op.attrs.get("op", "add")
                a, b = ids
                if a in U and b in U:
                    U.add(rid)
                elif name in ("add", "sub") and a in C and b in U:
                    C.add(rid)
                elif name == "add" and a in U and b in C:
                    C.add(rid)
            elif oc == "cast" and op.result.type.dtype.is_int() and op.operands[0].type.dtype.is_int():
                if ids[0] in C and int_cast_preserves_value(op.operands[0].type.dtype, op.result.type.dtype):
                    C.add(rid)
                elif ids[0] in U:
                    U.add(rid)
        # interval masks: comparisons of a contiguous value with a uniform one, and their conjunctions
        M = self.interval
        for op in fn.walk():
            if not op.results or op.result.id in self.alias or len(op.result.type.shape) != 1:
                continue
            ids = [self._id(o) for o in op.operands]
            if op.opcode == "cmp" and op.attrs["op"] in ("lt", "le", "gt", "ge"):
                if (ids[0] in C and ids[1] in U) or (ids[0] in U and ids[1] in C):
                    M.add(op.result.id)
            elif op.opcode == "binary" and op.attrs["op"] == "and" and ids[0] in M and ids[1] in M:
                M.add(op.result.id)

    def _decide_lazy(self, fn):
        """Contiguous values and interval masks whose users all understand the symbolic form (a start
        offset, or a (lo, hi) lane interval) are never materialised as arrays."""
        C, M = self.contig, self.interval
        users: dict[int, list] = {}
        for op in fn.walk():
            for k, o in enumerate(op.operands):
                if o is not None:
                    users.setdefault(self._id(o), []).append((op, k))
        for vid in C | M:
            ok = vid in users
            for op, k in users.get(vid, []):
                res = op.result.id if op.results else None
                if res is not None and res in self.alias:
                    continue  # a CSE'd or elided op never runs
                if res is not None and (res in C or res in M):
                    continue
                if (
                    op.opcode in ("load", "store")
                    and len(op.operands[0].type.shape) == 1
                    and self._id(op.operands[0]) in C
                    and ((vid in C and k == 0) or (vid in M and k == 2 - (op.opcode == "load")))
                ):
                    continue
                ok = False
                break
            if ok:
                self.lazy.add(vid)

    def _err(self, op, msg):
        loc = op.loc
        where = (
            f'File "{loc.filename}", line {loc.lineno}, in {loc.function}\n    {loc.source_line.strip()}\n'
            if loc
            else ""
        )
        prog = (
            f"program {self.pid}"
            if self.group == 1
            else f"one of programs ({self.pid[0]}..{self.pid[0] + self.group - 1}, 0, 0)"
        )
        return KernelRuntimeError(f"{where}kernel '{self.fn.name}', {prog}: {msg}")

    def _compile_top(self, block):
        launch, program = [], []
        invariant: set[int] = set(pid for _, pid, _ in self.param_ids)
        for op in block.ops:
            if op.opcode == "program_id":
                self.pid_slots.append((op.result.id, op.attrs["axis"]))
                continue
            f = self._compile_op(op)
            if f is None:
                continue
            is_inv = (
                op.opcode not in _PURE_EXCLUDE
                and not op.regions
                and all(
                    o is None or self._id(o) in invariant or self._id(o) in self.static for o in op.operands
                )
            )
            if is_inv:
                invariant.update(r.id for r in op.results)
                launch.append(f)
            else:
                program.append(f)
        return launch, program

    def _compile_block(self, block):
        fns = []
        for op in block.ops:
            if op.opcode in ("yield", "condition"):
                continue
            f = self._compile_op(op)
            if f is not None:
                fns.append(f)
        return fns

    def _compile_op(self, op):
        if op.results and op.result.id in self.alias:
            return None
        maker = getattr(self, "_op_" + op.opcode)
        if op.results and op.opcode not in ("load",):
            rid = op.result.id
            if (rid in self.contig or rid in self.interval) and (
                rid in self.lazy or any(self._id(o) in self.lazy for o in op.operands if o is not None)
            ):
                maker = self._symbolic
        f = maker(op)
        # static evaluation: pure ops over static operands are computed now
        if (
            op.opcode not in _PURE_EXCLUDE
            and op.opcode != "num_programs"
            and not op.regions
            and all(o is None or self._id(o) in self.static for o in op.operands)
        ):
            f(self.template)
            for r in op.results:
                self.static.add(r.id)
            return None
        return f

    # ---------------------------------------------------------------- run
    def run(self, grid, args):
        with self._lock:
            gx, gy, gz = grid
            if GROUP_PROGRAMS and self.group_n is not None and gy == 1 and gz == 1:
                p = min(gx, max(1, _GROUP_TARGET // self.group_n))
                p = 1 << (p.bit_length() - 1)  # powers of two: few grouped executables per kernel
                if p >= 2:
                    sub = self._grouped.get(p)
                    if sub is None:
                        sub = self._grouped[p] = Executable(regroup(self.fn, self.group_n, p), group=p)
                    q = gx // p
                    sub._launch((q, 1, 1), args, nprog=tuple(grid))
                    if q * p < gx:
                        self._launch(grid, args, x_start=q * p)
                    return
            self._launch(grid, args)

    def _launch(self, grid, args, x_start=0, nprog=None):
        env = list(self.template)
        for i, vid, ty in self.param_ids:
            a = args[i]
            if ty.dtype.is_ptr():
                self.mem[i] = a
                env[vid] = np.int64(0)
            else:
                env[vid] = (
                    cast_array(
                        np.asarray(a, dtype=np.float64 if isinstance(a, float) else None),
                        D.float64 if isinstance(a, float) else ty.dtype,
                        ty.dtype,
                    )
                    if ty.dtype.is_floating()
                    else _npd(ty.dtype).type(a)
                )
        self.nprog = tuple(nprog or grid)
        # loads may return views instead of copies for arguments nothing in this launch writes to
        written = [self.mem[i] for i in self.written_roots if self.mem[i] is not None]
        for i in range(len(self.mem)):
            a = self.mem[i]
            self.no_copy[i] = (
                a is not None
                and i not in self.written_roots
                and not any(np.may_share_memory(a, w) for w in written)
            )
        try:
            self._run(env, grid, x_start)
        finally:
            for i in range(len(self.mem)):
                self.mem[i] = None

    def replay(self, grid, args, program: tuple[int, int, int]) -> None:
        """Run one program of a launch (e.g. to report the exact fault another backend detected)."""
        with self._lock:
            self._only = program
            try:
                self._launch(grid, args)
            finally:
                self._only = None

    def _programs(self, grid, x_start):
        if self._only is not None:
            return [self._only]
        gx, gy, gz = grid
        return ((x, y, z) for z in range(gz) for y in range(gy) for x in range(x_start, gx))

    def _run(self, env, grid, x_start=0):
        ops = self.program_ops
        slots = self.pid_slots
        scale = self.group
        with np.errstate(all="ignore"):
            for f in self.launch_ops:
                f(env)
            for x, y, z in self._programs(grid, x_start):
                self.pid = (x * scale, y, z)
                e = env.copy()
                for vid, axis in slots:
                    e[vid] = np.int32((x * scale, y, z)[axis])
                for f in ops:
                    f(e)

    # ---------------------------------------------------------------- symbolic contiguous values / masks
    def _start_getter(self, v):
        """Function env -> int first lane of contiguous value `v` (lazy or materialised)."""
        i = self._id(v)
        if i in self.lazy:
            return lambda e: e[i]
        return lambda e: int(e[i][0])

    def _int_getter(self, v):
        i = self._id(v)
        if i in self.scalar_ids:
            return lambda e: int(e[i])
        return lambda e: int(np.asarray(e[i]).flat[0])

    def _symbolic(self, op):
        """Ops producing a contiguous value or an interval mask when lazy forms are involved."""
        r = op.result.id
        n = op.result.type.shape[0] if op.result.type.shape else 1
        oc = op.opcode
        lazy_out = r in self.lazy
        fast = self._symbolic_fast(op, r, n, oc) if lazy_out else None
        if fast is not None:
            return fast
        if r in self.contig:
            if oc == "arange":
                st = op.attrs["start"]

                def start(e):
                    return st
            elif oc == "cast":
                start = self._start_getter(op.operands[0])
            else:
                a, b = op.operands
                sign = -1 if op.attrs.get("op") == "sub" else 1
                if self._id(a) in self.contig:
                    sa, ub = self._start_getter(a), self._int_getter(b)

                    def start(e):
                        return sa(e) + sign * ub(e)
                else:
                    ua, sb = self._int_getter(a), self._start_getter(b)

                    def start(e):
                        return ua(e) + sb(e)

            if lazy_out:

                def run(e):
                    e[r] = start(e)
            else:
                nd = _npd(op.result.type.dtype)

                def run(e):
                    s0 = start(e)
                    e[r] = np.arange(s0, s0 + n, dtype=nd)

            return run
        # interval masks
        if oc == "binary":  # and of two intervals
            ga, gb = (self._interval_getter(o, n) for o in op.operands)

            def interval(e):
                a0, a1 = ga(e)
                b0, b1 = gb(e)
                return max(a0, b0), max(max(a0, b0), min(a1, b1))
        else:
            a, b = op.operands
            cmp = op.attrs["op"]
            if self._id(a) not in self.contig:  # u OP c  ->  c OP' u
                a, b = b, a
                cmp = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}[cmp]
            sa, ub = self._start_getter(a), self._int_getter(b)

            def interval(e):
                d = ub(e) - sa(e)
                if cmp == "lt":
                    lo, hi = 0, d
                elif cmp == "le":
                    lo, hi = 0, d + 1
                elif cmp == "gt":
                    lo, hi = d + 1, n
                else:
                    lo, hi = d, n
                lo = min(max(lo, 0), n)
                return lo, max(lo, min(max(hi, 0), n))

        if lazy_out:

            def run(e):
                e[r] = interval(e)
        else:

            def run(e):
                lo, hi = interval(e)
                m = np.zeros(n, np.bool_)
                m[lo:hi] = True
                e[r] = m

        return run

    def _symbolic_fast(self, op, r, n, oc):
        """Specialised closures for the common all-lazy cases (no helper calls per program)."""
        ids = [self._id(o) for o in op.operands]
        lazy, scal = self.lazy, self.scalar_ids
        if r in self.contig:
            if oc == "cast" and ids[0] in lazy:
                (a,) = ids

                def run(e):
                    e[r] = e[a]

                return run
            if oc in ("binary", "ptr_add"):
                a, b = ids
                sub = op.attrs.get("op") == "sub"
                if a in lazy and b in scal:
                    if sub:

                        def run(e):
                            e[r] = e[a] - int(e[b])
                    else:

                        def run(e):
                            e[r] = e[a] + int(e[b])

                    return run
                if b in lazy and a in scal and not sub:

                    def run(e):
                        e[r] = int(e[a]) + e[b]

                    return run
            return None
        if oc != "cmp":
            return None
        a, b = ids
        cmp = op.attrs["op"]
        if b in lazy and a in scal:
            a, b = b, a
            cmp = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}[cmp]
        if not (a in lazy and b in scal):
            return None
        if cmp in ("lt", "le"):
            extra = 1 if cmp == "le" else 0

            def run(e):
                d = int(e[b]) - e[a] + extra
                e[r] = (0, n if d > n else (d if d > 0 else 0))
        else:
            extra = 1 if cmp == "gt" else 0

            def run(e):
                d = int(e[b]) - e[a] + extra
                e[r] = (n if d > n else (d if d > 0 else 0), n)

        return run

    def _interval_getter(self, v, n):
        i = self._id(v)
        if i in self.lazy:
            return lambda e: e[i]

        def get(e):
            m = e[i]
            idx = np.flatnonzero(m)
            return (int(idx[0]), int(idx[-1]) + 1) if idx.size else (0, 0)

        return get

    def _contig_mem(self, op, kind):
        """Fast path for 1-D contiguous pointers: returns f(e) -> (arr, start, lo, hi) or None."""
        p = op.operands[0]
        m = op.operands[1 if kind == "load" else 2]
        start = self._start_getter(p)
        n = op.operands[0].type.shape[0]
        if m is None:
            return start, None, n
        mi = self._id(m)
        if mi in self.lazy:
            return start, (lambda e: e[mi]), n
        return start, "array", n

    # ---------------------------------------------------------------- ops: creation
    def _op_constant(self, op):
        r = op.result.id
        val = _const(op.attrs["value"], op.result.type.dtype, op.result.type.shape)

        def run(e):
            e[r] = val

        return run

    def _op_program_id(self, op):  # only reached inside regions
        r, axis = op.result.id, op.attrs["axis"]

        def run(e):
            e[r] = np.int32(self.pid[axis])

        return run

    def _op_num_programs(self, op):
        r, axis = op.result.id, op.attrs["axis"]

        def run(e):
            e[r] = np.int32(self.nprog[axis])

        return run

    def _op_arange(self, op):
        r = op.result.id
        val = np.arange(op.attrs["start"], op.attrs["end"], dtype=np.int32)
        val.flags.writeable = False

        def run(e):
            e[r] = val

        return run

    # ---------------------------------------------------------------- ops: shapes
    def _op_broadcast(self, op):
        r, a, shape = op.result.id, self._id(op.operands[0]), op.result.type.shape

        def run(e):
            e[r] = np.broadcast_to(e[a], shape)

        return run

    def _op_reshape(self, op):
        r, a, shape = op.result.id, self._id(op.operands[0]), op.result.type.shape
        if shape == ():

            def run(e):
                e[r] = np.asarray(e[a]).reshape(())[()]
        else:

            def run(e):
                e[r] = np.reshape(e[a], shape)

        return run

    def _op_permute(self, op):
        r, a, dims = op.result.id, self._id(op.operands[0]), op.attrs["dims"]

        def run(e):
            e[r] = np.transpose(e[a], dims)

        return run

    def _op_cast(self, op):
        r, a = op.result.id, self._id(op.operands[0])
        src, dst, bc = op.operands[0].type.dtype, op.result.type.dtype, op.attrs.get("bitcast", False)
        nd = _npd(dst)
        if (
            not bc
            and not _is_low(src)
            and not _is_low(dst)
            and dst is not D.int1
            and not (dst.is_int() and src.is_floating())
            and not (src.is_fp8() or dst.is_fp8())
        ):

            def run(e):
                e[r] = e[a].astype(nd)
        else:

            def run(e):
                e[r] = cast_array(e[a], src, dst, bc)

        return run

    # ---------------------------------------------------------------- ops: elementwise
    def _op_binary(self, op):
        r, a, b = op.result.id, self._id(op.operands[0]), self._id(op.operands[1])
        name, dt = op.attrs["op"], op.result.type.dtype
        f = _BIN[name]
        if _is_low(dt):
            nd = _npd(dt)
            if dt is D.bfloat16:

                def run(e):
                    e[r] = f(e[a].astype(_F32), e[b].astype(_F32)).astype(nd)
            else:

                def run(e):
                    e[r] = f(e[a].astype(_F32), e[b].astype(_F32)).astype(nd)

            return run
        if dt.is_int() and name in ("shl", "shr"):
            bits = dt.primitive_bitwidth

            def run(e):
                x, s = e[a], e[b]
                e[r] = np.where((s < 0) | (s >= bits), 0, f(x, np.clip(s, 0, bits - 1))).astype(x.dtype)[()]

            return run
        if name == "umulhi":
            bits = dt.primitive_bitwidth
            wide = np.uint64 if dt.is_int_unsigned() else np.int64

            def run(e):
                x, y = e[a], e[b]
                prod = np.asarray(x).astype(wide) * np.asarray(y).astype(wide)
                e[r] = (prod >> bits).astype(x.dtype)[()]

            return run
        if name == "floordiv" and dt.is_int():

            def run(e):
                e[r] = _trunc_div(e[a], e[b])

            return run

        def run(e):
            e[r] = f(e[a], e[b])

        return run

    def _op_cmp(self, op):
        r, a, b = op.result.id, self._id(op.operands[0]), self._id(op.operands[1])
        f = _CMP[op.attrs["op"]]
        if op.operands[0].type.dtype is D.bfloat16:

            def run(e):
                e[r] = f(e[a].astype(_F32), e[b].astype(_F32))
        else:

            def run(e):
                e[r] = f(e[a], e[b])

        return run

    def _op_unary(self, op):
        r, a = op.result.id, self._id(op.operands[0])
        name, dt = op.attrs["op"], op.operands[0].type.dtype
        f = _UN[name]
        out_dt = op.result.type.dtype
        if name == "invert" and dt is D.int1:
            f = np.logical_not
        if _is_low(dt):
            nd = _npd(out_dt)

            def run(e):
                e[r] = np.asarray(f(e[a].astype(_F32))).astype(nd)[()]
        elif (
            name
            in (
                "exp",
                "log",
                "sqrt",
                "rsqrt",
                "sigmoid",
                "recip",
                "exp2",
                "log2",
                "tanh",
                "sin",
                "cos",
                "erf",
            )
            and dt is D.float32
        ):

            def run(e):
                e[r] = f(e[a])
        else:

            def run(e):
                e[r] = f(e[a])

        return run

    def _op_ptr_add(self, op):
        r, a, b = op.result.id, self._id(op.operands[0]), self._id(op.operands[1])
        if not op.result.type.shape:

            def run(e):
                # a scalar pointer is exact: `x_ptr + a + b` with huge scalars would wrap in int64
                # (possibly back inside the tensor); past the int64 range it stays a Python integer,
                # which every bounds check reports as out of bounds
                exact = int(e[a]) + int(e[b])
                e[r] = np.int64(exact) if -(2**63) <= exact < 2**63 else exact

            return run

        def run(e):
            x, y = e[a], e[b]
            if type(x) is int or type(y) is int:  # an exact scalar pointer past the int64 range
                e[r] = np.asarray(x, dtype=object) + np.asarray(y).astype(object)
                return
            e[r] = x + y

        return run

    def _op_fma(self, op):
        r = op.result.id
        a, b, c = (self._id(o) for o in op.operands)
        nd = _npd(op.result.type.dtype)
        dt = op.result.type.dtype
        if dt is D.float64:

            def run(e):
                e[r] = e[a] * e[b] + e[c]
        else:

            def run(e):
                v = e[a].astype(np.float64) * e[b].astype(np.float64) + e[c].astype(np.float64)
                e[r] = cast_array(v, D.float64, dt) if dt.is_floating() else v.astype(nd)

        return run

    def _op_where(self, op):
        r = op.result.id
        c, a, b = (self._id(o) for o in op.operands)

        def run(e):
            e[r] = np.where(e[c], e[a], e[b])[()]

        return run

    # ---------------------------------------------------------------- ops: reductions
    def _op_reduce(self, op):
        r, a = op.result.id, self._id(op.operands[0])
        kind, axis, keep = op.attrs["kind"], op.attrs["axis"], op.attrs["keep_dims"]
        dt = op.result.type.dtype
        src_dt = op.operands[0].type.dtype
        nd = _npd(dt)
        out_shape = op.result.type.shape
        rank = len(op.operands[0].type.shape)

        def finish(v):
            v = np.asarray(v)
            if keep and axis is None:
                v = v.reshape(out_shape)
            return v[()] if v.ndim == 0 else v

        if kind in ("argmax", "argmin"):
            f = np.argmax if kind == "argmax" else np.argmin
            lowf = src_dt is D.bfloat16

            def run(e):
                x = e[a].astype(_F32) if lowf else e[a]
                if rank == 0:
                    e[r] = np.int32(0)
                    return
                if axis is None:
                    v = np.int32(f(x))
                else:
                    v = f(x, axis=axis, keepdims=keep).astype(np.int32)
                e[r] = finish(v)

            return run
        if kind in ("sum", "prod"):
            f = np.sum if kind == "sum" else np.prod
            if _is_low(dt):

                def run(e):
                    e[r] = finish(
                        np.asarray(
                            f(e[a].astype(_F32), axis=axis, keepdims=keep and axis is not None)
                        ).astype(nd)
                    )
            else:

                def run(e):
                    e[r] = finish(f(e[a], axis=axis, dtype=nd, keepdims=keep and axis is not None))

            return run
        if kind == "xor_sum":

            def run(e):
                x = e[a]
                v = np.bitwise_xor.reduce(
                    x.ravel() if axis is None else x,
                    axis=0 if axis is None else axis,
                    keepdims=keep and axis is not None,
                )
                e[r] = finish(np.asarray(v).astype(nd))

            return run
        f = np.max if kind == "max" else np.min
        lowf = dt is D.bfloat16

        def run(e):
            x = e[a]
            if lowf:
                e[r] = finish(
                    np.asarray(f(x.astype(_F32), axis=axis, keepdims=keep and axis is not None)).astype(nd)
                )
            else:
                e[r] = finish(f(x, axis=axis, keepdims=keep and axis is not None))

        return run

    def _op_flip(self, op):
        r, a, ax = op.result.id, self._id(op.operands[0]), op.attrs["axis"]

        def run(e):
            e[r] = np.flip(e[a], ax)

        return run

    def _op_sort(self, op):
        r, a, ax, desc = op.result.id, self._id(op.operands[0]), op.attrs["axis"], op.attrs["descending"]
        low = op.result.type.dtype is D.bfloat16
        nd = _npd(op.result.type.dtype)

        def run(e):
            x = e[a].astype(_F32) if low else e[a]
            v = np.sort(x, axis=ax)
            if desc:
                v = np.flip(v, ax)
            e[r] = v.astype(nd) if low else v

        return run

    def _op_scan(self, op):
        r, a = op.result.id, self._id(op.operands[0])
        kind, axis, rev = op.attrs["kind"], op.attrs["axis"], op.attrs["reverse"]
        dt = op.result.type.dtype
        nd = _npd(dt)
        f = np.cumsum if kind == "sum" else np.cumprod
        low = _is_low(dt)

        def run(e):
            x = e[a]
            if rev:
                x = np.flip(x, axis)
            v = f(x.astype(_F32), axis=axis).astype(nd) if low else f(x, axis=axis, dtype=nd)
            e[r] = np.flip(v, axis) if rev else v

        return run

    def _op_dot(self, op):
        r = op.result.id
        a, b = self._id(op.operands[0]), self._id(op.operands[1])
        c = self._id(op.operands[2]) if len(op.operands) > 2 else None
        in_dt, out_dt = op.operands[0].type.dtype, op.result.type.dtype
        if in_dt.is_int():
            acc_nd = np.dtype(np.int64) if in_dt.primitive_bitwidth > 32 else np.dtype(np.int32)
        elif in_dt is D.float64:
            acc_nd = np.dtype(np.float64)
        else:
            acc_nd = _F32
        out_nd = _npd(out_dt)

        def run(e):
            x, y = e[a], e[b]
            if x.dtype != acc_nd:
                x = x.astype(acc_nd)
            if y.dtype != acc_nd:
                y = y.astype(acc_nd)
            v = np.matmul(x, y)
            if c is not None:
                acc = e[c]
                v = v + (acc.astype(acc_nd) if acc.dtype != acc_nd else acc)
            if v.dtype != out_nd:
                v = cast_array(
                    v,
                    D.float32 if acc_nd == _F32 else D.from_name(str(acc_nd).replace("float64", "fp64")),
                    out_dt,
                )
            e[r] = v

        return run

    # ---------------------------------------------------------------- ops: memory
    def _check(self, op, root, offs, kind):
        arr = self.mem[root]
        n = arr.shape[0]
        bad = (
            offs[(offs < 0) | (offs >= n)]
            if np.ndim(offs)
            else (np.array([offs]) if not 0 <= offs < n else np.array([], np.int64))
        )
        if bad.size:
            shown = ", ".join(str(int(x)) for x in np.unique(bad)[:8])
            more = f" (+{np.unique(bad).size - 8} more)" if np.unique(bad).size > 8 else ""
            raise self._err(
                op,
                f"out-of-bounds {kind} of argument '{self.names[root]}' (valid element "
                f"offsets 0..{n - 1}): offending offsets [{shown}]{more}",
            )

    def _op_load(self, op):
        r = op.result.id
        p, m, o = (self._id(x) for x in op.operands)
        root = op.attrs["root"]
        shape = op.result.type.shape
        dt = op.result.type.dtype
        nd = _npd(dt)
        mem = self.mem
        check = self._check
        zero = _const(0, dt, ())

        def run(e):
            arr = mem[root]
            offs = e[p]
            if m is not None:
                mask = e[m]
                if not mask.all():
                    if shape == ():
                        e[r] = e[o] if o is not None else zero
                        return
                    sel = offs[mask]
                    if sel.size and (sel.min() < 0 or sel.max() >= arr.shape[0]):
                        check(op, root, sel, "load")
                    out = np.array(e[o], dtype=nd) if o is not None else np.zeros(shape, nd)
                    out[mask] = arr[sel]
                    e[r] = out
                    return
            if np.ndim(offs):
                if offs.min() < 0 or offs.max() >= arr.shape[0]:
                    check(op, root, offs, "load")
            elif not 0 <= offs < arr.shape[0]:
                check(op, root, offs, "load")
            e[r] = arr[offs]

        if len(shape) != 1 or p not in self.contig:
            return run
        no_copy = self.no_copy
        start, mask_kind, n = self._contig_mem(op, "load")
        interval = mask_kind if callable(mask_kind) else None
        arange_n = np.arange(n, dtype=np.int64)

        def run_contig(e):
            arr = mem[root]
            s0 = start(e)
            if interval is not None:
                lo, hi = interval(e)
            elif mask_kind is None or e[m].all():
                lo, hi = 0, n
            else:
                e_p = e[p] if p not in self.lazy else arange_n + s0
                mask = e[m]
                sel = e_p[mask]
                if sel.size and (sel.min() < 0 or sel.max() >= arr.shape[0]):
                    check(op, root, sel, "load")
                out = np.array(e[o], dtype=nd) if o is not None else np.zeros(shape, nd)
                out[mask] = arr[sel]
                e[r] = out
                return
            a, b = s0 + lo, s0 + hi
            if lo < hi and (a < 0 or b > arr.shape[0]):
                check(op, root, _offset_range(int(a), int(b)), "load")
            if lo == 0 and hi == n:
                e[r] = arr[a:b] if no_copy[root] else arr[a:b].copy()
                return
            out = np.array(e[o], dtype=nd) if o is not None else np.zeros(shape, nd)
            out[lo:hi] = arr[a:b]
            e[r] = out

        if p in self.lazy and (m is None or m in self.lazy):

            def run_fast(e):
                arr = mem[root]
                s0 = e[p]
                if (m is None or e[m] == (0, n)) and s0 >= 0 and s0 + n <= arr.shape[0]:
                    e[r] = arr[s0 : s0 + n] if no_copy[root] else arr[s0 : s0 + n].copy()
                else:
                    run_contig(e)

            return run_fast
        return run_contig

    def _op_store(self, op):
        p, v, m = (self._id(x) for x in op.operands)
        root = op.attrs["root"]
        mem = self.mem
        check = self._check
        pshape = op.operands[0].type.shape
        scalar = pshape == ()

        def run(e):
            arr = mem[root]
            offs = e[p]
            val = e[v]
            if m is not None:
                mask = e[m]
                if not mask.all():
                    if scalar:
                        return
                    offs = offs[mask]
                    val = val[mask]
            if np.ndim(offs):
                if offs.size and (offs.min() < 0 or offs.max() >= arr.shape[0]):
                    check(op, root, offs, "store")
            elif not 0 <= offs < arr.shape[0]:
                check(op, root, offs, "store")
            arr[offs] = val

        if len(pshape) != 1 or p not in self.contig:
            return run
        start, mask_kind, n = self._contig_mem(op, "store")
        interval = mask_kind if callable(mask_kind) else None
        arange_n = np.arange(n, dtype=np.int64)

        def run_contig(e):
            arr = mem[root]
            s0 = start(e)
            if interval is not None:
                lo, hi = interval(e)
            elif mask_kind is None or e[m].all():
                lo, hi = 0, n
            else:
                offs = e[p] if p not in self.lazy else arange_n + s0
                mask = e[m]
                offs = offs[mask]
                if offs.size and (offs.min() < 0 or offs.max() >= arr.shape[0]):
                    check(op, root, offs, "store")
                arr[offs] = e[v][mask]
                return
            a, b = s0 + lo, s0 + hi
            if lo < hi and (a < 0 or b > arr.shape[0]):
                check(op, root, _offset_range(int(a), int(b)), "store")
            if lo < hi:
                arr[a:b] = e[v][lo:hi] if (lo, hi) != (0, n) else e[v]

        if p in self.lazy and (m is None or m in self.lazy):

            def run_fast(e):
                arr = mem[root]
                s0 = e[p]
                if (m is None or e[m] == (0, n)) and s0 >= 0 and s0 + n <= arr.shape[0]:
                    arr[s0 : s0 + n] = e[v]
                else:
                    run_contig(e)

            return run_fast
        return run_contig

    def _op_atomic(self, op):
        r = op.result.id
        p, v, m = (self._id(x) for x in op.operands)
        root, kind = op.attrs["root"], op.attrs["kind"]
        dt = op.result.type.dtype
        mem = self.mem
        check = self._check
        uf = {
            "add": np.add,
            "max": np.maximum,
            "min": np.minimum,
            "and": np.bitwise_and,
            "or": np.bitwise_or,
            "xor": np.bitwise_xor,
        }.get(kind)
        zero = _const(0, dt, ())
        need_old = r in self.used
        low = dt is D.bfloat16 or dt is D.float16

        def run(e):
            arr = mem[root]
            offs = np.atleast_1d(e[p])
            val = np.atleast_1d(e[v])
            scalar = np.ndim(e[p]) == 0
            active = (
                np.ones(offs.shape, bool) if m is None else np.broadcast_to(np.atleast_1d(e[m]), offs.shape)
            )
            sel = offs[active]
            if sel.size:
                check(op, root, sel, f"atomic_{kind}") if (
                    sel.min() < 0 or sel.max() >= arr.shape[0]
                ) else None
            old = np.full(offs.shape, zero, dtype=arr.dtype)
            if need_old and sel.size > 1 and np.unique(sel).size < sel.size:
                # duplicate addresses whose old values are used: apply lane by lane (a valid atomic order)
                vals = val[active]
                olds = []
                for i, x in zip(sel.tolist(), vals, strict=True):
                    cur = arr[i]
                    olds.append(cur)
                    if kind == "xchg":
                        arr[i] = x
                    elif low:
                        arr[i] = cast_array(uf(np.float32(cur), np.float32(x)), D.float32, dt)
                    else:
                        arr[i] = uf(cur, x)
                old[active] = np.array(olds, dtype=arr.dtype)
                e[r] = old[0] if scalar else old
                return
            old[active] = arr[sel]
            if kind == "xchg":
                arr[sel] = val[active]
            elif dt is D.bfloat16 or dt is D.float16:
                for i, x in zip(sel.tolist(), val[active].astype(_F32).tolist(), strict=False):
                    arr[i] = cast_array(
                        np.float32(arr[i]) + np.float32(x)
                        if kind == "add"
                        else uf(np.float32(arr[i]), np.float32(x)),
                        D.float32,
                        dt,
                    )
            else:
                uf.at(arr, sel, val[active])
            e[r] = old[0] if scalar else old

        return run

    def _op_atomic_cas(self, op):
        r = op.result.id
        p, c, v = (self._id(x) for x in op.operands)
        root = op.attrs["root"]
        mem = self.mem
        check = self._check

        def run(e):
            arr = mem[root]
            offs = np.atleast_1d(e[p])
            cmp = np.atleast_1d(e[c])
            val = np.atleast_1d(e[v])
            check(op, root, offs, "atomic_cas")
            old = arr[offs].copy()
            for i in range(offs.size):
                cur = arr[offs[i]]
                old[i] = cur
                if cur == cmp[i]:
                    arr[offs[i]] = val[i]
            e[r] = old[0] if np.ndim(e[p]) == 0 else old

        return run

    # ---------------------------------------------------------------- ops: block pointers
    def _op_make_block_ptr(self, op):
        r = op.result.id
        n = len(op.attrs["block_shape"])
        ids = [self._id(o) for o in op.operands]
        base, sh, st, of = ids[0], ids[1 : 1 + n], ids[1 + n : 1 + 2 * n], ids[1 + 2 * n :]

        def run(e):
            e[r] = (
                int(e[base]),
                tuple(int(e[i]) for i in sh),
                tuple(int(e[i]) for i in st),
                tuple(int(e[i]) for i in of),
            )

        return run

    def _op_advance(self, op):
        r = op.result.id
        ids = [self._id(o) for o in op.operands]
        b, offs = ids[0], ids[1:]

        def run(e):
            base, sh, st, of = e[b]
            e[r] = (base, sh, st, tuple(o + int(e[i]) for o, i in zip(of, offs, strict=False)))

        return run

    def _block_index(self, bshape, checked):
        nd = len(bshape)
        aranges = [
            np.arange(s, dtype=np.int64).reshape([s if k == d else 1 for k in range(nd)])
            for d, s in enumerate(bshape)
        ]
        grid_cache: dict = {}

        def index(bp):
            base, sh, st, of = bp
            g = grid_cache.get(st)
            if g is None:
                g = np.zeros(bshape, np.int64)
                for d in range(nd):
                    g = g + aranges[d] * st[d]
                if len(grid_cache) > 64:
                    grid_cache.clear()
                grid_cache[st] = g
            start = base + sum(o * s for o, s in zip(of, st, strict=False))
            bound = abs(start) + sum(abs(s) * (b - 1) for s, b in zip(st, bshape, strict=False))
            if bound >= 2**62:
                # int64 lanes could wrap back inside the tensor: exact (Python integer) addresses
                idx = np.zeros(bshape, dtype=object) + start
                for d in range(nd):
                    idx = idx + aranges[d].astype(object) * int(st[d])
            else:
                idx = g + start
            mask = None
            for d in checked:
                if of[d] < 0 or of[d] + bshape[d] > sh[d]:
                    pos = aranges[d] + of[d]
                    md = (pos >= 0) & (pos < sh[d])
                    mask = md if mask is None else (mask & md)
            if mask is not None:
                mask = np.broadcast_to(mask, bshape)
            return idx, mask

        return index

    def _op_block_load(self, op):
        r, b = op.result.id, self._id(op.operands[0])
        ty: BlockPtrType = op.operands[0].type
        bshape = ty.block_shape
        index = self._block_index(bshape, op.attrs["boundary_check"])
        dt = ty.dtype
        nd = _npd(dt)
        pad = _const(float("nan") if op.attrs["padding"] == "nan" else 0, dt, ())
        root = ty.root
        mem = self.mem
        check = self._check

        def run(e):
            arr = mem[root]
            idx, mask = index(e[b])
            if mask is None:
                if idx.min() < 0 or idx.max() >= arr.shape[0]:
                    check(op, root, idx, "load (block pointer)")
                e[r] = arr[idx.astype(np.int64, copy=False)]
                return
            sel = idx[mask]
            if sel.size and (sel.min() < 0 or sel.max() >= arr.shape[0]):
                check(op, root, sel, "load (block pointer)")
            out = np.full(bshape, pad, dtype=nd)
            out[mask] = arr[sel.astype(np.int64, copy=False)]
            e[r] = out

        return run

    def _op_block_store(self, op):
        b, v = self._id(op.operands[0]), self._id(op.operands[1])
        ty: BlockPtrType = op.operands[0].type
        index = self._block_index(ty.block_shape, op.attrs["boundary_check"])
        root = ty.root
        mem = self.mem
        check = self._check

        def run(e):
            arr = mem[root]
            idx, mask = index(e[b])
            val = e[v]
            if mask is not None:
                idx = idx[mask]
                val = np.broadcast_to(val, mask.shape)[mask]
            if idx.size and (idx.min() < 0 or idx.max() >= arr.shape[0]):
                check(op, root, idx, "store (block pointer)")
            arr[idx.astype(np.int64, copy=False)] = val

        return run

    # ---------------------------------------------------------------- ops: pad and dynamic slices
    def _op_pad(self, op):
        r, a = op.result.id, self._id(op.operands[0])
        pads = op.attrs["pads"]
        shape = op.result.type.shape
        fill = _const(op.attrs["value"], op.result.type.dtype, ())
        nd = _npd(op.result.type.dtype)
        inner = tuple(slice(lo, lo + s) for (lo, _), s in zip(pads, op.operands[0].type.shape, strict=True))

        def run(e):
            out = np.full(shape, fill, dtype=nd)
            out[inner] = e[a]
            e[r] = out

        return run

    def _dyn_index(self, op, x_shape, start, size):
        ax = op.attrs["axis"]
        if not 0 <= start <= x_shape[ax] - size:
            raise self._err(
                op, f"window [{start}, {start + size}) is out of range for dim {ax} of size {x_shape[ax]}"
            )
        return tuple(slice(start, start + size) if d == ax else slice(None) for d in range(len(x_shape)))

    def _op_dyn_slice(self, op):
        r, a, s = op.result.id, self._id(op.operands[0]), self._id(op.operands[1])
        x_shape = op.operands[0].type.shape
        size = op.result.type.shape[op.attrs["axis"]]

        def run(e):
            e[r] = np.array(e[a][self._dyn_index(op, x_shape, int(e[s]), size)])

        return run

    def _op_dyn_update(self, op):
        r, a, u, s = op.result.id, *(self._id(o) for o in op.operands)
        x_shape = op.operands[0].type.shape
        size = op.operands[1].type.shape[op.attrs["axis"]]

        def run(e):
            out = np.array(e[a])
            out[self._dyn_index(op, x_shape, int(e[s]), size)] = e[u]
            e[r] = out

        return run

    # ---------------------------------------------------------------- ops: debugging
    def _op_print(self, op):
        ids = [self._id(o) for o in op.operands]
        prefix, hexa = op.attrs["prefix"], op.attrs["hex"]

        def fmt(x):
            if hexa:
                return np.array2string(np.asarray(x), formatter={"all": lambda v: hex(int(v))})
            return np.array2string(np.asarray(x), threshold=1 << 30) if np.ndim(x) else str(x)

        def run(e):
            vals = " ".join(fmt(e[i]) for i in ids)
            print(f"pid ({self.pid[0]}, {self.pid[1]}, {self.pid[2]}) {prefix}{vals}", flush=True)

        return run

    def _op_breakpoint(self, op):
        ids = [self._id(o) for o in op.operands]
        names = op.attrs["names"]
        loc = op.loc
        fname = f"{self.fn.name}_line{loc.lineno if loc else 0}"
        src = (
            f"def {fname}(pid, {', '.join(names)}):\n    breakpoint()\n"
            if names
            else f"def {fname}(pid):\n    breakpoint()\n"
        )
        ns: dict = {}
        exec(builtins.compile(src, f"<kernel {self.fn.name} at {loc}>", "exec"), ns)
        frame_fn = ns[fname]

        def run(e):
            frame_fn(self.pid, *[e[i] for i in ids])

        return run

    def _op_assert(self, op):
        c, msg = self._id(op.operands[0]), op.attrs["msg"]

        def run(e):
            if not np.all(e[c]):
                raise self._err(op, f"device_assert failed: {msg}")

        return run

    # ---------------------------------------------------------------- ops: control flow
    def _op_for(self, op):
        lo, hi, st = (self._id(o) for o in op.operands[:3])
        inits = [self._id(o) for o in op.operands[3:]]
        body = op.regions[0]
        iv = body.args[0].id
        ivt = _npd(body.args[0].type.dtype).type
        args = [a.id for a in body.args[1:]]
        yields = [self._id(o) for o in body.ops[-1].operands]
        fns = self._compile_block(body)
        results = [x.id for x in op.results]
        nargs = len(args)

        def run(e):
            vals = [e[i] for i in inits]
            for i in range(int(e[lo]), int(e[hi]), int(e[st])):
                e[iv] = ivt(i)
                for k in range(nargs):
                    e[args[k]] = vals[k]
                for f in fns:
                    f(e)
                vals = [e[y] for y in yields]
            for k in range(nargs):
                e[results[k]] = vals[k]

        return run

    def _op_while(self, op):
        inits = [self._id(o) for o in op.operands]
        before, after = op.regions
        bargs = [a.id for a in before.args]
        aargs = [a.id for a in after.args]
        cond = self._id(before.ops[-1].operands[0])
        yields = [self._id(o) for o in after.ops[-1].operands]
        bf = self._compile_block(before)
        af = self._compile_block(after)
        results = [x.id for x in op.results]

        def run(e):
            vals = [e[i] for i in inits]
            while True:
                for k, a in enumerate(bargs):
                    e[a] = vals[k]
                for f in bf:
                    f(e)
                if not e[cond]:
                    break
                for k, a in enumerate(aargs):
                    e[a] = vals[k]
                for f in af:
                    f(e)
                vals = [e[y] for y in yields]
            for k, rid in enumerate(results):
                e[rid] = vals[k]

        return run

    def _op_if(self, op):
        c = self._id(op.operands[0])
        then_r, else_r = op.regions
        tf, ef = self._compile_block(then_r), self._compile_block(else_r)
        ty = [self._id(o) for o in then_r.ops[-1].operands]
        ey = [self._id(o) for o in else_r.ops[-1].operands]
        results = [x.id for x in op.results]

        def run(e):
            if e[c]:
                for f in tf:
                    f(e)
                ys = ty
            else:
                for f in ef:
                    f(e)
                ys = ey
            vals = [e[y] for y in ys]
            for k, rid in enumerate(results):
                e[rid] = vals[k]

        return run
