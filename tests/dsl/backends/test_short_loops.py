"""`short_loops`: lane loops of 16..63 lanes count to a variable LLVM cannot fold (so it vectorises them
instead of unrolling them into scalar code), and still run exactly their lanes in every program: the
rewrite's unit cases, generated kernels that use it, and numba against torch and the interpreter."""

from __future__ import annotations

import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend import codegen
from torch_rbln.dsl.backends.numba_backend.short_loops import hide_short_trip_counts

from torch_rbln import dsl as triton


def test_loops_of_16_to_63_lanes_count_to_a_lanes_variable_defined_once():
    body = ["c1 = max(0, min(16, v4))", "for j1 in range(16):", "    for j2 in range(32):",
            "        b3[j1, j2] = v5", "for j4 in range(63):", "    b6[j4] = v5", "for j7 in range(16):",
            "    b8[j7] = v5"]
    lines, prologue = hide_short_trip_counts(body)
    assert lines == ["c1 = max(0, min(16, v4))", "for j1 in range(lanes16):", "    for j2 in range(lanes32):",
                     "        b3[j1, j2] = v5", "for j4 in range(lanes63):", "    b6[j4] = v5",
                     "for j7 in range(lanes16):", "    b8[j7] = v5"]
    assert prologue == ["lanes16 = np.int64(16) if g0 > 0 else np.int64(17)",
                        "lanes32 = np.int64(32) if g0 > 0 else np.int64(33)",
                        "lanes63 = np.int64(63) if g0 > 0 else np.int64(64)"]


def test_a_box_count_that_folds_into_the_band_counts_to_a_lanes_variable():
    """`mask = lanes < 32` with a literal bound gives a box count LLVM folds to 32, and the loops over the
    box then unroll to scalar code: the count becomes `lanes32` (the fused cat kernels' pieces)."""
    body = ["c1 = max(0, min(32, np.int64(32)))", "for j2 in range(c1):", "    b3[j2] = v5",
            "c4 = max(0, min(64, np.int64(20)))", "c5 = max(0, min(8, np.int64(8)))",
            "c6 = max(0, min(32, v4))", "c7 = max(0, min(16, np.int64(100)))"]
    lines, prologue = hide_short_trip_counts(body)
    assert lines == ["c1 = lanes32", "for j2 in range(c1):", "    b3[j2] = v5", "c4 = lanes20",
                     "c5 = max(0, min(8, np.int64(8)))", "c6 = max(0, min(32, v4))", "c7 = lanes16"]
    assert prologue == ["lanes16 = np.int64(16) if g0 > 0 else np.int64(17)",
                        "lanes20 = np.int64(20) if g0 > 0 else np.int64(21)",
                        "lanes32 = np.int64(32) if g0 > 0 else np.int64(33)"]


@pytest.mark.parametrize("line", [
    "for j1 in range(8):", "for j1 in range(15):", "for j1 in range(64):", "for j1 in range(4096):",
    "for j1 in range(c1):", "for j1 in range(0, 16):", "for it2 in range(v1, v2, 16):",
    "v3 = row_sum(b4[0:16])", "# for j1 in range(16):",
])
def test_other_loops_and_lines_stay_as_they_are(line):
    assert hide_short_trip_counts([line, "    pass"]) == ([line, "    pass"], [])


@triton.jit
def causal_softmax_kernel(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    """Row softmax of one BLOCK x BLOCK tile per program (program 1 = head), keys after the query and
    beyond `n` masked: exp32 over 2-D lanes, the body the rewrite is for."""
    head = tl.program_id(1)
    rows = tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK)
    keep = (rows[:, None] < n) & (cols[None, :] < n) & (cols[None, :] <= rows[:, None])
    base = x_ptr + head * stride
    s = tl.load(base + rows[:, None] * n + cols[None, :], mask=keep, other=-float("inf"))
    p = tl.exp(s - tl.max(s, axis=1)[:, None])
    p = p / tl.sum(p, axis=1)[:, None]
    tl.store(out_ptr + head * stride + rows[:, None] * n + cols[None, :], p,
             mask=(rows[:, None] < n) & (cols[None, :] < n))


@triton.jit
def lane_count_kernel(out_ptr, BLOCK: tl.constexpr):
    """Each program stores how many lanes its reductions saw and the sum of their indices."""
    pid = tl.program_id(0) + tl.num_programs(0) * tl.program_id(1)
    lanes = tl.arange(0, BLOCK)
    ones = tl.full((BLOCK,), 1, tl.int32)
    tl.store(out_ptr + 2 * pid, tl.sum(ones, axis=0))
    tl.store(out_ptr + 2 * pid + 1, tl.sum(lanes, axis=0))


def _reference(x: torch.Tensor, n: int) -> torch.Tensor:
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    return torch.softmax(x.masked_fill(~causal, float("-inf")), dim=-1)


def _source(kernel, *args, grid, **constants) -> str:
    return codegen.lower(kernel.warmup(*args, **constants, grid=grid).ir).source


@pytest.mark.parametrize("block, n", [(16, 16), (16, 11), (32, 27)])
def test_a_short_tile_kernel_hides_its_counts_and_matches_torch_and_the_interpreter(block, n):
    heads = 3
    x = torch.randn(heads, n, n, generator=torch.Generator().manual_seed(block + n))
    results = {}
    for backend in ("numba", "interpret"):
        out = torch.full((heads, n, n), 7.0)
        causal_softmax_kernel[(1, heads)](x, out, n, n * n, BLOCK=block, backend=backend)
        results[backend] = out
    torch.testing.assert_close(results["numba"], _reference(x, n), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(results["numba"], results["interpret"], rtol=1e-6, atol=1e-6)
    source = _source(causal_softmax_kernel, x, torch.empty(heads, n, n), n, n * n, BLOCK=block,
                     grid=(1, heads))
    assert f"lanes{block} = np.int64({block}) if g0 > 0" in source
    assert f"in range(lanes{block}):" in source and f"in range({block}):" not in source


@pytest.mark.parametrize("block", [16, 32])
@pytest.mark.parametrize("grid", [(1,), (4,), (3, 5)])
def test_every_program_runs_exactly_its_lanes(block, grid):
    programs = grid[0] * (grid[1] if len(grid) > 1 else 1)
    out = torch.full((2 * programs,), -1, dtype=torch.int32)
    lane_count_kernel[grid](out, BLOCK=block)
    expected = torch.tensor([block, block * (block - 1) // 2] * programs, dtype=torch.int32)
    assert torch.equal(out, expected)


def test_a_grid_without_programs_writes_nothing():
    out = torch.full((8,), -1, dtype=torch.int32)
    lane_count_kernel[(0, 4)](out, BLOCK=16)
    assert torch.equal(out, torch.full((8,), -1, dtype=torch.int32))
