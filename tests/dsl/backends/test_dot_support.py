"""`dot_support.tile_dot` against numpy on the box-load semantics it implements: lane (i, j) of an
operand reads `memory[base + i * row_stride + j * col_stride]` when `i < count_rows and j < count_cols`,
else `fill`. Covers the direct gemm on memory (row- and column-major tiles, leading dimensions, a K
tail masked on both sides) and the staged path it must leave alone (edges in M or N, a nonzero fill,
f16 memory, strides without a unit one). NaN/Inf in memory must reach the masked lanes of an edge
tile as they do through staging (0 * Inf is NaN)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from torch_rbln.dsl.backends.numba_backend import dot_support


def _box(memory, base, row_stride, col_stride, rows, cols, count_rows, count_cols, fill, dtype):
    tile = np.full((rows, cols), fill, dtype=np.float64)
    for i, j in itertools.product(range(count_rows), range(count_cols)):
        value = memory[base + i * row_stride + j * col_stride]
        tile[i, j] = value.view(np.float16) if memory.dtype == np.uint16 else value
    return tile.astype(dtype)


def _operand(memory, base, row_stride, col_stride, shape, counts, fill, dtype, bits=0):
    rows, cols = shape
    exact = memory.dtype == dtype
    return (memory, np.int64(base), np.int64(row_stride), np.int64(col_stride), np.int64(counts[0]),
            np.int64(counts[1]), dtype.type(fill), np.empty((rows, cols), dtype),
            np.empty((cols, rows), dtype), np.int64(bits), exact)


def _layouts(rows, cols, order, pad):
    """(row stride, col stride) of a tile inside a larger matrix: row-major with `pad` extra
    columns, column-major with `pad` extra rows, or no unit stride at all."""
    if order == "row":
        return cols + pad, 1
    if order == "col":
        return 1, rows + pad
    return 2 * (cols + pad), 2


CASES = [
    # (M, K, N, a order, b order, a counts, b counts, fill)
    (8, 16, 4, "row", "row", (8, 16), (16, 4), 0.0),
    (8, 16, 4, "row", "col", (8, 16), (16, 4), 0.0),
    (8, 16, 4, "col", "row", (8, 16), (16, 4), 0.0),
    (8, 16, 4, "col", "col", (8, 16), (16, 4), 0.0),
    (16, 8, 16, "row", "col", (16, 5), (5, 16), 0.0),  # K tail masked on both sides: direct
    (16, 8, 16, "row", "row", (16, 5), (8, 16), 0.0),  # K tail on one side only: staged
    (16, 8, 16, "row", "row", (16, 0), (0, 16), 0.0),  # nothing counted in K
    (16, 8, 16, "row", "row", (9, 8), (8, 16), 0.0),  # M edge: direct, masked rows 0
    (16, 8, 16, "col", "row", (16, 8), (8, 11), 0.0),  # N edge: direct
    (16, 8, 16, "row", "col", (9, 5), (5, 11), 0.0),  # all three edges: direct
    (16, 8, 16, "row", "row", (16, 5), (5, 16), 1.5),  # nonzero fill: staged
    (16, 8, 16, "row", "row", (9, 8), (8, 16), 1.5),  # M edge, nonzero fill: staged
    (16, 8, 16, "row", "row", (0, 8), (8, 16), 0.0),  # no row counted: staged
    (16, 8, 16, "none", "row", (16, 8), (8, 16), 0.0),  # no unit stride: staged
    (1, 8, 16, "row", "col", (1, 8), (8, 16), 0.0),
    (16, 1, 1, "col", "row", (16, 1), (1, 1), 0.0),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)).replace(" ", ""))
@pytest.mark.parametrize("pad", [0, 3])
def test_tile_dot_matches_numpy(case, dtype, pad):
    m, k, n, a_order, b_order, a_counts, b_counts, fill = case
    rng = np.random.default_rng(0)
    memory_a = rng.standard_normal(4096).astype(dtype)
    memory_b = rng.standard_normal(4096).astype(dtype)
    a_rs, a_cs = _layouts(m, k, a_order, pad)
    b_rs, b_cs = _layouts(k, n, b_order, pad)
    a = _operand(memory_a, 7, a_rs, a_cs, (m, k), a_counts, fill, np.dtype(dtype))
    b = _operand(memory_b, 5, b_rs, b_cs, (k, n), b_counts, fill, np.dtype(dtype))
    expected = _box(memory_a, 7, a_rs, a_cs, m, k, *a_counts, fill, np.float64) @ \
        _box(memory_b, 5, b_rs, b_cs, k, n, *b_counts, fill, np.float64)
    got = dot_support.tile_dot(*a, *b)
    assert got.shape == (m, n) and got.dtype == dtype and got.flags.c_contiguous
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("order", ["row", "col"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_tile_dot_edges_carry_nan_and_inf_into_masked_lanes(order, bad):
    """A NaN/Inf in the counted part of b reaches the masked rows of a (0 * Inf = NaN) and one in a
    reaches the masked columns of b, as the staged product of zero-filled tiles computes them."""
    rng = np.random.default_rng(3)
    memory_a = rng.standard_normal(2048).astype(np.float32)
    memory_b = rng.standard_normal(2048).astype(np.float32)
    a_rs, a_cs = _layouts(16, 8, order, 2)
    b_rs, b_cs = _layouts(8, 16, order, 2)
    memory_b[5 + 3 * b_rs + 4 * b_cs] = bad  # b[3, 4]
    memory_a[7 + 2 * a_rs + 6 * a_cs] = bad  # a[2, 6]
    a = _operand(memory_a, 7, a_rs, a_cs, (16, 8), (9, 8), 0.0, np.dtype(np.float32))
    b = _operand(memory_b, 5, b_rs, b_cs, (8, 16), (8, 11), 0.0, np.dtype(np.float32))
    with np.errstate(invalid="ignore"):
        expected = _box(memory_a, 7, a_rs, a_cs, 16, 8, 9, 8, 0.0, np.float64) @ \
            _box(memory_b, 5, b_rs, b_cs, 8, 16, 8, 11, 0.0, np.float64)
    got = dot_support.tile_dot(*a, *b)
    assert np.isnan(got[12, 4]) and np.isnan(got[2, 13]) and got[12, 13] == 0 and got[12, 5] == 0
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_tile_dot_f16_memory_is_staged_and_converted():
    rng = np.random.default_rng(1)
    memory = rng.standard_normal(512).astype(np.float16).view(np.uint16)
    a = _operand(memory, 3, 9, 1, (4, 8), (4, 8), 0.0, np.dtype(np.float32), bits=1)
    b = _operand(memory, 40, 1, 10, (8, 4), (8, 4), 0.0, np.dtype(np.float32), bits=1)
    expected = _box(memory, 3, 9, 1, 4, 8, 4, 8, 0.0, np.float64) @ _box(memory, 40, 1, 10, 8, 4, 8, 4, 0.0,
                                                                          np.float64)
    np.testing.assert_allclose(dot_support.tile_dot(*a, *b), expected, rtol=1e-5, atol=1e-5)


def test_direct_gemm_taken_for_whole_unit_stride_tiles():
    """The direct path is the one that runs for whole float32 tiles with a unit stride (not only a
    result that happens to match): `_direct` reports it and writes the product."""
    rng = np.random.default_rng(2)
    memory = rng.standard_normal(1024).astype(np.float32)
    out = np.full((4, 6), np.nan, dtype=np.float32)
    # a: 4 x 8 row-major, ld 10; b: 8 x 6 column-major, ld 9
    taken = dot_support._direct(memory, 0, 10, 1, 4, 8, 4, 8, 0.0, memory, 100, 1, 9, 8, 6, 8, 6, 0.0, out,
                                True)
    a = np.array([[memory[i * 10 + j] for j in range(8)] for i in range(4)], dtype=np.float64)
    b = np.array([[memory[100 + i + j * 9] for j in range(6)] for i in range(8)], dtype=np.float64)
    assert taken
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    # a leading dimension below the tile's width (overlapping rows) is not a BLAS matrix: staged
    assert not dot_support._direct(memory, 0, 4, 1, 4, 8, 4, 8, 0.0, memory, 100, 1, 9, 8, 6, 8, 6, 0.0, out,
                                   True)


def test_gemm_binds_torch_blas_or_falls_back_to_scipy():
    """Where torch exports its BLAS, `tile_dot` runs on it; a process without it binds scipy's under
    the same symbols, so a kernel cached by either links in the other (the product checked there)."""
    import subprocess
    import sys
    import textwrap

    assert dot_support.GEMM_SOURCE in ("torch (MKL)", "scipy")
    script = textwrap.dedent("""
        import ctypes
        real = ctypes.CDLL
        def refuse(name, *args, **kwargs):
            if "libtorch_cpu" in str(name):
                raise OSError("hidden for the test")
            return real(name, *args, **kwargs)
        ctypes.CDLL = refuse
        import numpy as np
        from torch_rbln.dsl.backends.numba_backend import dot_support
        ctypes.CDLL = real
        assert dot_support.GEMM_SOURCE == "scipy", dot_support.GEMM_SOURCE
        memory = np.random.default_rng(0).standard_normal(1024).astype(np.float32)
        out = np.empty((4, 6), dtype=np.float32)
        assert dot_support._direct(memory, 0, 10, 1, 4, 8, 4, 8, 0.0, memory, 100, 1, 9, 8, 6, 8, 6, 0.0, out,
                                   True)
        a = np.array([[memory[i * 10 + j] for j in range(8)] for i in range(4)])
        b = np.array([[memory[100 + i + j * 9] for j in range(6)] for i in range(8)])
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]
