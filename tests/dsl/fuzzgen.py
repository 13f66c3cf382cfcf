"""Random kernel generator for the differential fuzzer (`test_fuzz_differential.py`).

A hypothesis strategy (`kernel_cases`) draws a small kernel as Python source text: a few block
variables (float32 and int32 blocks of one shape ``(R, C)``) that statements define and reassign, under
runtime and constexpr `if`/`else` (nested), `for` loops over runtime and static ranges, `while` loops,
reductions, scans, casts, masked loads, `tl.where`, `tl.dot` and deterministic integer atomics.  At the
end every live variable is stored, so any value a backend computes wrongly shows up in the outputs.

Inputs are multiples of 1/8 in [-8, 8]: most float arithmetic on them is exact in float32, so the
backends agree bit for bit unless one of them is wrong; the comparison's small tolerance only absorbs
the reassociation of sums and dots (`compare`).

The source is written to a file (the DSL reads a kernel's source with `inspect`) whose path depends only
on the text, so the numba backend's on-disk compile cache is reused across runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import strategies as st
from torch_rbln.dsl.backends import get_factory

PRELUDE = '''\
import torch_rbln.dsl as tl
from torch_rbln import dsl as triton


@triton.jit
def first(a, b):
    return a


@triton.jit
def last(a, b):
    return b


@triton.jit
def last_nonzero(a, b):
    return tl.where(b != 0, b, a)


@triton.jit
def first_nonzero(a, b):
    return tl.where(a != 0, a, b)


@triton.jit
def add(a, b):
    return a + b
'''

SIGNATURE = (
    "def kernel(x_ptr, y_ptr, i_ptr, c_ptr, of_ptr, oi_ptr, acc_ptr, n,\n"
    "           R: tl.constexpr, C: tl.constexpr, FLAG: tl.constexpr):"
)

# combine functions the scans use: associative, and all but `add` not commutative
COMBINES = ("first", "last", "last_nonzero", "first_nonzero", "add")
# runtime scalar conditions: per-program (c, pid) and per-launch (n)
CONDITIONS = ("c > 0", "c == 1", "pid % 2 == 0", "n > 2", "c >= n", "tl.sum(k0) > 0")
MAX_FLOATS = 5
MAX_INTS = 3


@dataclass(frozen=True)
class KernelCase:
    source: str
    R: int
    C: int
    programs: int
    n: int
    flag: int
    seed: int
    n_float_out: int
    n_int_out: int
    # -1, or where in the float output `x` lies (x is then a view of that memory: the kernel's stores
    # overwrite what its loads read, and both backends must honour program order)
    alias: int = -1


class _Writer:
    """Draws statements; tracks which variables are visible (a block's new names die at its end)."""

    def __init__(self, draw, R: int, C: int) -> None:
        self.draw = draw
        self.R, self.C = R, C
        self.lines: list[str] = []
        self.indent = 1
        self.floats = ["x0", "x1"]
        self.ints = ["k0"]
        self.counter = 0
        self.depth = 0  # nesting depth of control flow
        self.loop_vars: list[str] = []

    # ---- helpers
    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def new_name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def pick(self, pool: list[str]) -> str:
        return self.draw(st.sampled_from(pool))

    def scalar(self) -> str:
        """A float scalar term: a constant, or a loop counter when inside a loop."""
        options = ["0.5", "1.5", "-2.0", "c", "pid"] + self.loop_vars
        choice = self.draw(st.sampled_from(options))
        return choice if "." in choice else f"({choice} * 1.0)"

    # ---- expressions
    def fexpr(self, depth: int = 0) -> str:
        a = self.pick(self.floats)
        if depth >= 2:
            return a
        kind = self.draw(st.integers(0, 9))
        b = self.fexpr(depth + 1)
        if kind == 0:
            return f"({a} + {b})"
        if kind == 1:
            return f"({a} - {b})"
        if kind == 2:
            return f"({a} * {self.scalar()})"
        if kind == 3:
            return f"tl.maximum({a}, {b})"
        if kind == 4:
            return f"tl.minimum({a}, {b})"
        if kind == 5:
            return f"tl.where({a} > {b}, {a}, {b} + 1.0)"
        if kind == 6:
            k = self.pick(self.ints)
            return f"tl.where({k} > 0, {a}, {b})"
        if kind == 7:
            return f"({a} + {self.scalar()})"
        if kind == 8:
            return f"tl.abs({a})"
        return f"(-{a} * 0.25 + {b})"

    def iexpr(self, depth: int = 0) -> str:
        a = self.pick(self.ints)
        if depth >= 2:
            return a
        kind = self.draw(st.integers(0, 6))
        b = self.iexpr(depth + 1)
        if kind == 0:
            return f"({a} + {b})"
        if kind == 1:
            return f"({a} - {b})"
        if kind == 2:
            return f"({a} * 3)"
        if kind == 3:
            return f"({a} ^ {b})"
        if kind == 4:
            return f"tl.maximum({a}, {b})"
        if kind == 5:
            return f"({a} & 7)"
        return f"tl.where({a} > {b}, {a}, c)"

    # ---- statements
    def assign_float(self) -> None:
        """A new float variable, a reassignment, or a plain copy (which forces a value into a buffer)."""
        expr = self.pick(self.floats) if self.draw(st.booleans()) else self.fexpr()
        self.set_float(expr)

    def set_float(self, expr: str) -> None:
        if len(self.floats) < MAX_FLOATS and self.draw(st.booleans()):
            name = self.new_name("f")
            self.emit(f"{name} = {expr}")
            self.floats.append(name)
        else:
            self.emit(f"{self.pick(self.floats)} = {expr}")

    def set_int(self, expr: str) -> None:
        if len(self.ints) < MAX_INTS and self.draw(st.booleans()):
            name = self.new_name("i")
            self.emit(f"{name} = {expr}")
            self.ints.append(name)
        else:
            self.emit(f"{self.pick(self.ints)} = {expr}")

    def reduction(self) -> None:
        a = self.pick(self.floats)
        axis = self.draw(st.sampled_from([0, 1]))
        op = self.draw(st.sampled_from(["sum", "max", "min", "argmax", "argmin", "isum"]))
        if op in ("argmax", "argmin"):
            self.set_int(f"tl.{op}({a}, axis={axis}, keep_dims=True) + {self.pick(self.ints)}")
        elif op == "isum":
            k = self.pick(self.ints)
            self.set_int(f"tl.sum({k}, axis={axis}, keep_dims=True) + {k}")
        else:
            self.set_float(f"tl.{op}({a}, axis={axis}, keep_dims=True) + {self.pick(self.floats)}")

    def scan(self) -> None:
        axis = self.draw(st.sampled_from([0, 1]))
        reverse = self.draw(st.booleans())
        if self.draw(st.booleans()):
            k = self.pick(self.ints)
            self.set_int(f"tl.cumsum({k}, axis={axis}, reverse={reverse})")
            return
        a = self.pick(self.floats)
        if self.draw(st.booleans()):
            self.set_float(f"tl.cumsum({a}, axis={axis}, reverse={reverse})")
        else:
            fn = self.draw(st.sampled_from(COMBINES))
            self.set_float(f"tl.associative_scan({a}, {axis}, {fn}, reverse={reverse})")

    def cast(self) -> None:
        a = self.pick(self.floats)
        kind = self.draw(st.integers(0, 4))
        if kind == 0:
            self.set_float(f"{a}.to(tl.float16).to(tl.float32)")
        elif kind == 1:
            self.set_float(f"({a} * 1.125).to(tl.bfloat16).to(tl.float32)")
        elif kind == 2:
            target = self.draw(st.sampled_from(["int32", "int8", "uint8", "int16"]))
            self.set_int(f"tl.minimum(tl.maximum({a}, -200.0), 200.0).to(tl.{target}).to(tl.int32)")
        elif kind == 3:
            self.set_float(f"{self.pick(self.ints)}.to(tl.float32)")
        else:
            target = self.draw(st.sampled_from(["int8", "uint8"]))
            self.set_int(f"{self.pick(self.ints)}.to(tl.{target}).to(tl.int32)")

    def dot(self) -> None:
        if self.R != self.C:
            return
        a, b = self.pick(self.floats), self.pick(self.floats)
        self.set_float(f"tl.dot({a}, {b})")

    def atomic(self) -> None:
        kind = self.draw(st.sampled_from(["atomic_add", "atomic_max", "atomic_min"]))
        k = self.pick(self.ints)
        self.emit(f"tl.{kind}(acc_ptr + offs, {k}, mask=cols < n)")

    def load(self) -> None:
        """A load in mid-kernel, of this program's x block or of it reversed (other lanes' elements):
        with `x` aliasing the float output, stores before and after it change what it must see."""
        where = self.draw(st.sampled_from(["base", "pid * (R * C) + (R * C - 1 - offs)"]))
        self.set_float(f"tl.load(x_ptr + {where})")

    def store(self) -> None:
        """A store into a float output slot in mid-kernel (the tail's store of that slot, if any,
        overwrites it later): with `x` aliasing that memory, later reads of x see it."""
        slot = self.draw(st.integers(0, MAX_FLOATS - 1))
        self.emit(f"tl.store(of_ptr + (pid * {MAX_FLOATS} + {slot}) * (R * C) + offs, {self.fexpr(1)})")

    def block(self, size: int) -> None:
        """A nested block: names it creates are not visible after it (Triton's scoping of if/loops)."""
        saved = (list(self.floats), list(self.ints))
        self.indent += 1
        self.depth += 1
        for _ in range(size):
            self.statement()
        self.emit("pass")
        self.depth -= 1
        self.indent -= 1
        self.floats, self.ints = saved

    def if_runtime(self) -> None:
        condition = self.draw(st.sampled_from(CONDITIONS))
        self.emit(f"if {condition}:")
        self.block(self.draw(st.integers(1, 3)))
        if self.draw(st.integers(0, 3)) > 0:
            self.emit("else:")
            self.block(self.draw(st.integers(1, 3)))

    def if_constexpr(self) -> None:
        self.emit(self.draw(st.sampled_from(["if FLAG:", "if FLAG == 0:"])))
        self.block(self.draw(st.integers(1, 2)))
        if self.draw(st.booleans()):
            self.emit("else:")
            self.block(self.draw(st.integers(1, 2)))

    def for_loop(self) -> None:
        variable = self.new_name("it")
        header = self.draw(st.sampled_from([
            "range(0, c)", "range(c, 3)", "range(0, n, 2)", "tl.static_range(2)", "tl.range(1, c + 1)",
        ]))
        self.emit(f"for {variable} in {header}:")
        self.loop_vars.append(variable)
        self.block(self.draw(st.integers(1, 3)))
        self.loop_vars.pop()

    def while_loop(self) -> None:
        counter = self.new_name("w")
        self.emit(f"{counter} = 0")
        self.emit(f"while {counter} < {self.draw(st.sampled_from(['c', 'n - 1', '2']))}:")
        self.loop_vars.append(counter)
        self.block(self.draw(st.integers(1, 2)))
        self.loop_vars.pop()
        self.emit(f"    {counter} += 1")

    def statement(self) -> None:
        options = ["float", "float", "int", "reduce", "scan", "cast", "dot", "atomic", "load", "store"]
        if self.depth < 2:
            options += ["if", "if", "if", "ifc", "for", "for", "while"]
        kind = self.draw(st.sampled_from(options))
        {
            "float": self.assign_float,
            "int": lambda: self.set_int(self.iexpr()),
            "reduce": self.reduction,
            "scan": self.scan,
            "cast": self.cast,
            "dot": self.dot,
            "atomic": self.atomic,
            "load": self.load,
            "store": self.store,
            "if": self.if_runtime,
            "ifc": self.if_constexpr,
            "for": self.for_loop,
            "while": self.while_loop,
        }[kind]()


@st.composite
def kernel_cases(draw, max_statements: int = 6) -> KernelCase:
    R, C = draw(st.sampled_from([(2, 4), (4, 4), (1, 8), (4, 2)]))
    writer = _Writer(draw, R, C)
    # values defined up front, then statements (mostly control flow) that use and reassign them
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 3)) > 0:
            writer.set_float(writer.fexpr(1))
        else:
            writer.set_int(writer.iexpr(1))
    for _ in range(draw(st.integers(1, max_statements))):
        writer.statement()
    head = [
        SIGNATURE,
        "    pid = tl.program_id(0)",
        "    rows = tl.arange(0, R)[:, None]",
        "    cols = tl.arange(0, C)[None, :]",
        "    offs = rows * C + cols",
        "    base = pid * (R * C) + offs",
        "    c = tl.load(c_ptr + pid)",
        "    x0 = tl.load(x_ptr + base)",
        "    x1 = tl.load(y_ptr + base, mask=cols < n, other=2.5)",
        "    k0 = tl.load(i_ptr + base)",
    ]
    tail = []
    for slot, name in enumerate(writer.floats):
        tail.append(f"    tl.store(of_ptr + (pid * {MAX_FLOATS} + {slot}) * (R * C) + offs, {name})")
    for slot, name in enumerate(writer.ints):
        tail.append(f"    tl.store(oi_ptr + (pid * {MAX_INTS} + {slot}) * (R * C) + offs, {name})")
    source = PRELUDE + "\n\n@triton.jit\n" + "\n".join(head + writer.lines + tail) + "\n"
    return KernelCase(
        source=source,
        R=R,
        C=C,
        programs=draw(st.integers(1, 4)),
        n=draw(st.integers(0, C + 1)),
        flag=draw(st.integers(0, 1)),
        seed=draw(st.integers(0, 2**16)),
        n_float_out=len(writer.floats),
        n_int_out=len(writer.ints),
        alias=draw(st.one_of(st.just(-1), st.integers(0, (MAX_FLOATS - 1) * R * C))),
    )


# ---- running


LAST_CASE = "last_case.txt"


def _directory() -> str:
    root = os.environ.get("TORCH_RBLN_CACHE_DIR") or tempfile.gettempdir()
    path = os.path.join(root, "fuzz-kernels")
    os.makedirs(path, exist_ok=True)
    return path


def load_kernel(source: str):
    """Write `source` to a file named by its hash and import it; returns its `kernel`."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    name = f"fuzz_kernel_{digest}"
    if name in sys.modules:
        return sys.modules[name].kernel
    path = os.path.join(_directory(), name + ".py")
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            f.write(source)
        os.replace(path + ".tmp", path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.kernel


def inputs(case: KernelCase) -> dict[str, torch.Tensor]:
    rng = np.random.RandomState(case.seed)
    size = case.programs * case.R * case.C
    return {
        "x": torch.from_numpy(rng.randint(-64, 65, size).astype(np.float32) / 8),
        "y": torch.from_numpy(rng.randint(-64, 65, size).astype(np.float32) / 8),
        "i": torch.from_numpy(rng.randint(-20, 21, size).astype(np.int32)),
        "c": torch.from_numpy(rng.randint(0, 4, case.programs).astype(np.int32)),
    }


def describe(case: KernelCase) -> str:
    return (
        f"launch: grid=({case.programs},) n={case.n} R={case.R} C={case.C} FLAG={case.flag} "
        f"seed={case.seed} alias={case.alias}\n--- kernel source ---\n{case.source}"
    )


def run(case: KernelCase, backend: str, isolate: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Launch `case` on `backend`; returns the float, int and atomic outputs.

    With `isolate`, the launch runs in a forked child writing into shared-memory outputs, so a compiled
    kernel that crashes the process (a wild read) becomes an ordinary, shrinkable failure.  The case is
    also written to `LAST_CASE` in the cache directory first."""
    with open(os.path.join(_directory(), LAST_CASE), "w") as f:
        f.write(f"backend={backend}\n{describe(case)}")
    kernel = load_kernel(case.source)
    data = inputs(case)
    block = case.R * case.C
    of = torch.full((case.programs * MAX_FLOATS * block,), -777.0)
    oi = torch.full((case.programs * MAX_INTS * block,), -777, dtype=torch.int32)
    acc = torch.zeros(block, dtype=torch.int32)

    def launch() -> None:
        x = data["x"]
        if case.alias >= 0:  # x is a view of the float output (made here: after share_memory_)
            x = of[case.alias: case.alias + x.numel()]
            x.copy_(data["x"])
        kernel[(case.programs,)](
            x, data["y"], data["i"], data["c"], of, oi, acc, case.n,
            R=case.R, C=case.C, FLAG=case.flag, backend=backend,
        )

    if not isolate:
        launch()
        return of.numpy(), oi.numpy(), acc.numpy()
    for tensor in (of, oi, acc):
        tensor.share_memory_()
    # import the backend here, so every child runs the compiler this process started with
    get_factory(backend)
    pid = os.fork()
    if pid == 0:  # the child: launch, report failure through the exit status, never return
        status = 0
        try:
            launch()
        except BaseException as error:  # noqa: BLE001 - reported to the parent below
            status = 3
            with open(os.path.join(_directory(), f"child_error_{os.getpid()}.txt"), "w") as f:
                f.write(f"{type(error).__name__}: {error}")
        os._exit(status)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise AssertionError(f"{backend} crashed with signal {os.WTERMSIG(status)}\n{describe(case)}")
    if os.WEXITSTATUS(status) != 0:
        path = os.path.join(_directory(), f"child_error_{pid}.txt")
        with open(path) as f:
            message = f.read()
        os.remove(path)
        raise AssertionError(f"{backend} raised {message}\n{describe(case)}")
    return of.numpy(), oi.numpy(), acc.numpy()


# float tolerance: inputs are multiples of 1/8, so almost all float32 arithmetic is exact and the
# backends agree bit for bit; sums and dots may add in a different order, whose rounding this absorbs.
RTOL = 1e-5
ATOL = 1e-5


def compare(case: KernelCase, numba_out, interpret_out) -> None:
    """Element by element: ints exactly, floats within RTOL/ATOL with NaN == NaN."""
    for label, a, b in zip(("floats", "ints", "atomics"), numba_out, interpret_out, strict=True):
        if a.dtype.kind == "f":
            same = np.isclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True)
        else:
            same = a == b
        if not same.all():
            where = np.flatnonzero(~same)[:8]
            raise AssertionError(
                f"numba and interpret disagree on {label} at {where.tolist()}: "
                f"numba {a[where].tolist()} vs interpret {b[where].tolist()}\n{describe(case)}"
            )
