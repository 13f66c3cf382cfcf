"""`fusion.fuse_loops`, which fuses adjacent loop nests of generated numba kernels.

A wrong fusion is a miscompile, so the pass is held to the code it rewrites three ways:
- random straight-line programs of loop nests over a few arrays (rows, transposes, row and column
  broadcasts, whole-row reductions, column sums with scalar accumulators, reversed indices, stores to
  kernel memory, movable and immovable statements between the nests) run as Python before and after
  the pass and must leave every array bit for bit the same; the pass must fuse some of them;
- hand-written cases, fused or kept apart as the rules say (why, case by case);
- kernels through the numba backend, against the interpreter and torch: an attention-like row chain
  and a kernel whose nests must *not* fuse (a column reduction and a transposed read of a buffer the
  nest before it writes)."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend import codegen
from torch_rbln.dsl.backends.numba_backend.fusion import drop_dead_scalars, fuse_loops

from torch_rbln import dsl as triton

N = 4  # extent of every random nest (and of a few at 3, which must never fuse with them)
ARRAYS_2D = ("x0", "x1", "x2")
ARRAYS_1D = ("v0", "v1", "v2")
SCALARS = ("s0", "s1")


class _Program:
    """A random body of loop nests over ARRAYS_2D, ARRAYS_1D, SCALARS and the memory `m0`."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.counter = 0
        self.lines: list[str] = []

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def read(self, outer: str, inner: str | None) -> str:
        """An operand of an element (outer, inner) of a nest: any access pattern the pass must judge."""
        r = self.random
        options = [f"{r.choice(ARRAYS_1D)}[{outer}]", f"{r.choice(ARRAYS_1D)}[{N - 1} - {outer}]",
                   f"row_sum({r.choice(ARRAYS_2D)}[{outer}, :])", r.choice(SCALARS), "1.5",
                   f"{r.choice(ARRAYS_2D)}[{outer}, 0]", f"row_sum({r.choice(ARRAYS_1D)})"]
        if inner is not None:
            tile, row = r.choice(ARRAYS_2D), r.choice(ARRAYS_1D)
            options += [f"{tile}[{outer}, {inner}]", f"{tile}[{inner}, {outer}]", f"{row}[{inner}]",
                        f"{tile}[{inner}, {inner}]"]
        return r.choice(options)

    def expression(self, outer: str, inner: str | None) -> str:
        a, b = self.read(outer, inner), self.read(outer, inner)
        return self.random.choice([f"({a} + {b})", f"({a} * 0.5 - {b})", f"max({a}, {b})"])

    def nest(self) -> None:
        r = self.random
        extent = N if r.random() < 0.9 else N - 1
        outer = self.fresh("j")
        kind = r.choice(["row", "tile", "tile", "column_sum", "memory", "scalar_carry"])
        self.lines.append(f"for {outer} in range({extent}):")
        if kind == "row":
            self.lines.append(f"    {r.choice(ARRAYS_1D)}[{outer}] = {self.expression(outer, None)}")
        elif kind == "tile":
            inner, tile = self.fresh("j"), r.choice(ARRAYS_2D)
            self.lines.append(f"    for {inner} in range({N}):")
            self.lines.append(f"        {tile}[{outer}, {inner}] = {self.expression(outer, inner)}")
            if r.random() < 0.5:  # a row reduction of a tile, in the same nest
                tile = r.choice(ARRAYS_2D)
                self.lines.append(f"    {r.choice(ARRAYS_1D)}[{outer}] = row_sum({tile}[{outer}, :])")
        elif kind == "column_sum":
            inner, acc = self.fresh("j"), self.fresh("acc")
            self.lines.append(f"    {acc} = 0.0")
            self.lines.append(f"    for {inner} in range({N}):")
            self.lines.append(f"        {acc} = {acc} + {r.choice(ARRAYS_2D)}[{inner}, {outer}]")
            self.lines.append(f"    {r.choice(ARRAYS_1D)}[{outer}] = {acc}")
        elif kind == "memory":
            self.lines.append(f"    m0[{outer}] = {self.expression(outer, None)}")
        else:  # a scalar assigned in the nest and read after it
            scalar = r.choice(SCALARS)
            self.lines.append(f"    {scalar} = {self.expression(outer, None)}")

    def between(self) -> None:
        r = self.random
        choice = r.random()
        if choice < 0.25:
            self.lines.append(f"{r.choice(SCALARS)} = {r.choice(SCALARS)} * 0.25 + {r.choice(ARRAYS_1D)}[1]")
        elif choice < 0.35:
            self.lines.append(f"{r.choice(ARRAYS_1D)} = np.zeros({N}, dtype=np.float64)")
        elif choice < 0.4:
            self.lines.append(f"if {r.choice(SCALARS)} > 0.0:")
            self.lines.append(f"    {r.choice(SCALARS)} = 2.0")

    def body(self, nests: int) -> list[str]:
        for _ in range(nests):
            self.nest()
            if self.random.random() < 0.4:
                self.between()
        return self.lines


def _execute(lines: list[str], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    state = {name: rng.integers(-8, 8, (N, N)).astype(np.float64) for name in ARRAYS_2D}
    state |= {name: rng.integers(-8, 8, N).astype(np.float64) for name in ARRAYS_1D}
    state |= {name: float(rng.integers(-4, 4)) for name in SCALARS}
    state["m0"] = np.zeros(N)
    code = "def body():\n" + "".join(f"    global {name}\n" for name in state)
    code += "\n".join("    " + line for line in lines) + "\n"
    namespace = {"np": np, "row_sum": np.sum, **state}
    exec(code, namespace)  # noqa: S102 - a test runs the code it generated
    namespace["body"]()
    return {name: np.array(namespace[name]) for name in state}


def test_random_nest_programs_mean_the_same_after_fusion():
    fused_total = 0
    for seed in range(400):
        lines = _Program(seed).body(random.Random(seed).randint(2, 7))
        fused, count = fuse_loops(lines, [])
        fused_total += count
        before, after = _execute(lines, seed), _execute(fused, seed)
        for name in before:
            np.testing.assert_array_equal(after[name], before[name],
                                          err_msg=f"seed {seed} {name}\n" + "\n".join(lines) + "\n---\n"
                                          + "\n".join(fused))
        assert len(fused) == len(lines) - count  # each fusion drops one loop header
    assert fused_total > 150  # the programs do exercise fusion


def _fused(text: str, context: str = "") -> tuple[str, int]:
    context_lines = context.strip("\n").split("\n") if context else []
    lines, count = fuse_loops(text.strip("\n").split("\n"), context_lines)
    return "\n".join(lines), count


def test_a_row_chain_becomes_one_nest():
    text, count = _fused("""
for j1 in range(8):
    for j2 in range(8):
        b1[j1, j2] = p[j1, j2] * 2.0
for j3 in range(8):
    b2[j3] = np.float32(row_max(b1[j3, :]))
t = np.empty((8, 8), dtype=np.float32)
for j4 in range(8):
    for j5 in range(8):
        t[j4, j5] = np.float32(exp32(b1[j4, j5] - b2[j4]))
""")
    assert count == 2, text  # the inner loops stay apart: b2's row statement stands between them
    assert text.count("for ") == 3 and text.startswith("t = np.empty"), text
    assert "t[j1, j5] = np.float32(exp32(b1[j1, j5] - b2[j1]))" in text, text


@pytest.mark.parametrize("second, why", [
    ("b3[j2] = b1[j2, 0] + b1[0, j2]", "reads b1 across rows (a later row of the first loop)"),
    ("b3[j2] = b2[7 - j2]", "reads b2 at a reversed index"),
    ("b3[j2] = row_sum(b2)", "reads b2 whole"),
    ("b2[j2 + 1] = 0.0", "writes b2 at an index that is not the loop's"),
    ("m0[j2] = b2[j2]", "stores to kernel memory"),
    ("b3[j2] = s", "reads a scalar the first loop assigns"),
    ("b3[j2] = tile_dot(b2)", "calls a function that is not known to be pure"),
    ("b3[j2] = r9[j2]", "reads a view of b2 (another name of the same memory)"),
    ("b3[j2] = c1[j2]", "reads a loop-carried name of b2"),
])
def test_dependent_nests_stay_apart(second, why):
    nests = """
for j1 in range(8):
    s = b0[j1] * 2.0
    for j9 in range(8):
        b1[j1, j9] = s
    b2[j1] = s
for j2 in range(8):
    {second}
"""
    independent = "b3[j2] = b2[j2] + b1[j2, 3] + b0[7 - j2]"
    assert _fused(nests.format(second=independent))[1] == 1  # the same nests without the dependence fuse
    text, count = _fused(nests.format(second=second), context="r9 = b2.reshape((8,))\nc1, c2 = b2, b0")
    assert count == 0, (why, text)


def test_different_extents_and_immovable_statements_stay_apart():
    for between, extent in (("", 7), ("if box_fault1(err, 1, 0, program, 0, 1, 8, n0):\n    return", 8),
                            ("s = b2[3]", 8), ("b1 = np.empty((8, 8), dtype=np.float32)", 8)):
        text, count = _fused(f"""
for j1 in range(8):
    for j9 in range(8):
        b1[j1, j9] = 1.0
    b2[j1] = 2.0
{between}
for j2 in range({extent}):
    b3[j2] = b2[j2]
""")
        assert count == 0, (between, extent, text)


def test_dead_scalars_are_dropped_and_live_ones_kept():
    body = """
v1 = np.int32(v0 * 2)
v2 = np.int64(v1)
v3 = np.int64(v2 + 1)
v4 = np.int32(s5)
v5 = box_fault1(err, 1, 0, program, 0, 1, 8, n0)
v6 = np.int32(1)
if v4 > 0:
    v7 = np.int64(v6) + m0[np.uint64(3)]
    v8 = v7
else:
    v8 = 0
m1[np.uint64(0)] = v8
""".strip("\n").split("\n")
    kept, dropped = drop_dead_scalars(body, ["v0 = np.int32(s0)"])
    text = "\n".join(kept)
    assert dropped == 3, text  # v3, then v2, then v1 (a read of kernel memory is dropped too: v7 is not)
    for live in ("v4 = ", "v5 = box_fault1", "v6 = ", "v7 = ", "v8 = v7", "v8 = 0", "m1["):
        assert live in text, (live, text)
    # a branch left with nothing keeps a `pass`
    kept, dropped = drop_dead_scalars(["if v0 > 0:", "    v9 = np.int64(v0)", "m1[0] = 1.0"], [])
    assert dropped == 1 and kept == ["if v0 > 0:", "    pass", "m1[0] = 1.0"], kept


# ---- kernels through the backend


@triton.jit
def row_chain_kernel(x_ptr, y_ptr, out_ptr, lse_ptr, BLOCK: tl.constexpr):
    """An online-softmax step with a rescaled accumulator: row max, safe max, exp, row sum."""
    r = tl.arange(0, BLOCK)
    offsets = r[:, None] * BLOCK + r[None, :]
    s = tl.load(x_ptr + offsets) * 0.5
    y = tl.load(y_ptr + offsets)
    m_old = tl.max(y, axis=1) - 1.0
    m = tl.maximum(m_old, tl.max(s, axis=1))
    m_safe = tl.where(m == -float("inf"), 0.0, m)
    alpha = tl.exp(m_old - m_safe)
    p = tl.exp(s - m_safe[:, None])
    total = tl.sum(y, axis=1) * alpha + tl.sum(p, axis=1)
    acc = y * alpha[:, None] + p
    tl.store(out_ptr + offsets, acc / total[:, None])
    tl.store(lse_ptr + r, m_safe + tl.log(total))


@triton.jit
def crossing_kernel(x_ptr, out_ptr, col_ptr, BLOCK: tl.constexpr):
    """Nests that read what the nest before wrote in another row: a transposed tile and column sums."""
    r = tl.arange(0, BLOCK)
    offsets = r[:, None] * BLOCK + r[None, :]
    a = tl.exp(tl.load(x_ptr + offsets) * 0.25)
    a = tl.reshape(tl.reshape(a, (BLOCK * BLOCK,)), (BLOCK, BLOCK))  # kept in a buffer
    b = a - tl.trans(a) * 0.5
    column = tl.sum(b, axis=0)
    tl.store(out_ptr + offsets, b * column[None, :] + tl.max(b, axis=1)[:, None])
    tl.store(col_ptr + r, column)


def _row_chain_reference(x, y):
    s = x * 0.5
    m_old = y.max(dim=1).values - 1.0
    m = torch.maximum(m_old, s.max(dim=1).values)
    m_safe = torch.where(m == -float("inf"), 0.0, m)
    alpha = torch.exp(m_old - m_safe)
    p = torch.exp(s - m_safe[:, None])
    total = y.sum(dim=1) * alpha + p.sum(dim=1)
    return (y * alpha[:, None] + p) / total[:, None], m_safe + torch.log(total)


def _crossing_reference(x):
    a = torch.exp(x * 0.25)
    b = a - a.T * 0.5
    column = b.sum(dim=0)
    return b * column[None, :] + b.max(dim=1).values[:, None], column


def _loops(kernel, *args, **kwargs) -> tuple[str, int]:
    source = codegen.lower(kernel.warmup(*args, **kwargs).ir).source
    return source, len(re.findall(r"^\s*for j\d+ in", source, re.M))


@pytest.mark.parametrize("block", [4, 16])
def test_row_chain_kernel_fuses_and_matches(block, monkeypatch):
    generator = torch.Generator().manual_seed(block)
    x, y = torch.randn(block, block, generator=generator), torch.randn(block, block, generator=generator)
    source, loops = _loops(row_chain_kernel, x, y, x, x[0], BLOCK=block, grid=(1,))
    monkeypatch.setattr(codegen, "fuse_loops", lambda body, context: (body, 0))
    unfused_source, unfused = _loops(row_chain_kernel, x, y, x, x[0], BLOCK=block, grid=(1,))
    monkeypatch.undo()
    assert loops < unfused - 2, (source, unfused_source)
    expected = _row_chain_reference(x, y)
    for backend in ("numba", "interpret"):
        monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", backend)
        out, lse = torch.zeros_like(x), torch.zeros(block)
        row_chain_kernel[(1,)](x, y, out, lse, BLOCK=block)
        torch.testing.assert_close(out, expected[0], rtol=1e-5, atol=1e-6, msg=backend)
        torch.testing.assert_close(lse, expected[1], rtol=1e-5, atol=1e-6, msg=backend)


@pytest.mark.parametrize("block", [4, 8])
def test_crossing_nests_match(block, monkeypatch):
    x = torch.randn(block, block, generator=torch.Generator().manual_seed(block))
    expected = _crossing_reference(x)
    for backend in ("numba", "interpret"):
        monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", backend)
        out, column = torch.zeros_like(x), torch.zeros(block)
        crossing_kernel[(1,)](x, out, column, BLOCK=block)
        torch.testing.assert_close(out, expected[0], rtol=1e-5, atol=1e-5, msg=backend)
        torch.testing.assert_close(column, expected[1], rtol=1e-5, atol=1e-5, msg=backend)
