"""`dot_call`: generated kernels call `dot_support.tile_dot` through a registered C entry point.

The entry must compute exactly what `tile_dot` computes (same staging, same gemm) for every operand
layout it handles, and a kernel must not carry `tile_dot`'s code (the point of the entry: compile time).
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend import codegen, dot_call, dot_support

from torch_rbln import dsl as triton


def _pair(call, padding_read: bool | None):
    """A kernel-like njit function that multiplies two box loads with `call` (tile_dot's interface, with
    the entry's `padding_read` argument unless it is None)."""

    @numba.njit(error_model="numpy")
    def product(a_mem, a_base, a_rs, a_cs, a_rows, a_cols, a_fill, a_bits, a_exact,
                b_mem, b_base, b_rs, b_cs, b_rows, b_cols, b_fill, b_bits, b_exact, m, k, n):
        a_c, a_t = np.empty((m, k), np.float32), np.empty((k, m), np.float32)
        b_c, b_t = np.empty((k, n), np.float32), np.empty((n, k), np.float32)
        if padding_read is None:
            return call(a_mem, a_base, a_rs, a_cs, a_rows, a_cols, a_fill, a_c, a_t, a_bits, a_exact,
                        b_mem, b_base, b_rs, b_cs, b_rows, b_cols, b_fill, b_c, b_t, b_bits, b_exact)
        return call(a_mem, a_base, a_rs, a_cs, a_rows, a_cols, a_fill, a_c, a_t, a_bits, a_exact,
                    b_mem, b_base, b_rs, b_cs, b_rows, b_cols, b_fill, b_c, b_t, b_bits, b_exact,
                    padding_read)

    return product


_through_entry = _pair(dot_call.tile_dot, True)
_through_entry_padding_unread = _pair(dot_call.tile_dot, False)
_linked = _pair(dot_support.tile_dot, None)


@pytest.mark.parametrize(
    "a_layout, b_layout, a_counts, b_counts",
    [
        ("row", "row", (8, 16), (16, 4)),  # full contiguous tiles: views, no staging
        ("row", "col", (8, 16), (16, 4)),  # `linear`'s transposed weight: a Fortran operand
        ("col", "row", (5, 9), (9, 3)),  # partial boxes: staged with the fill
        ("col", "col", (8, 16), (16, 4)),
    ],
)
@pytest.mark.parametrize("memory", ["float32", "float16"])
def test_entry_computes_what_tile_dot_computes(a_layout, b_layout, a_counts, b_counts, memory):
    m, k, n = 8, 16, 4
    rng = np.random.default_rng(0)

    def operand(rows, cols, layout):
        values = rng.standard_normal(rows * cols + 7).astype(np.float32)
        if memory == "float16":
            values = values.astype(np.float16).view(np.uint16)
        strides = (cols, 1) if layout == "row" else (1, rows)
        return values, strides

    a, (a_rs, a_cs) = operand(m, k, a_layout)
    b, (b_rs, b_cs) = operand(k, n, b_layout)
    bits = 1 if memory == "float16" else 0
    exact = memory == "float32"
    arguments = (a, 0, a_rs, a_cs, *a_counts, np.float32(0.5), bits, exact,
                 b, 0, b_rs, b_cs, *b_counts, np.float32(-1.0), bits, exact, m, k, n)
    expected = _linked(*arguments)
    got = _through_entry(*arguments)
    assert got.dtype == expected.dtype == np.float32 and got.shape == (m, n)
    np.testing.assert_array_equal(got, expected)  # the same gemm on the same staged tiles: bit for bit
    rows, cols = a_counts[0], b_counts[1]
    unread = _through_entry_padding_unread(*arguments)  # the counted block alike; padding left unwritten
    np.testing.assert_array_equal(unread[:rows, :cols], expected[:rows, :cols])


def test_register_is_idempotent_and_names_the_combination():
    first = dot_call.register("float32", "float32", "float32")
    assert first == dot_call.register("float32", "float32", "float32")
    assert first == "torch_rbln_tile_dot_float32_float32_float32"


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


def test_generated_kernel_declares_the_entry_instead_of_linking_tile_dot():
    a, b = torch.randn(32, 64), torch.randn(64, 16)
    c = torch.empty(32, 16)
    dot_kernel[(1,)](a, b, c, M=32, N=16, K=64)
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)
    source = codegen.lower(dot_kernel.warmup(a, b, c, M=32, N=16, K=64, grid=(1,)).ir).source
    # the module registers the entry it calls when imported (before numba loads a cached kernel)
    assert 'register_tile_dot("float32", "float32", "float32")' in source
    assert "dot_call import register as register_tile_dot, tile_dot" in source
    assert "dot_support import" not in source


def test_the_entry_runs_dot_supports_own_tile_dot_into():
    """The entry is `dot_support.tile_dot_into` (the direct gemm on the operands' memory first), not a
    copy of its staging: a change there reaches generated kernels."""
    assert "tile_dot_into(" in dot_call._ENTRY_SOURCE
    assert "_stage" not in dot_call._ENTRY_SOURCE and "np.dot" not in dot_call._ENTRY_SOURCE


_CACHED_KERNEL = r'''
import sys
import torch
import torch_rbln.dsl as tl
from torch_rbln import dsl as triton


@triton.jit
def cached_dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=rm[:, None] < M - 3, other=0.0)
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


a, b = torch.randn(32, 64), torch.randn(64, 16)
c = torch.empty(32, 16)
cached_dot_kernel[(1,)](a, b, c, M=32, N=16, K=64)
a[29:] = 0
torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)
# float16 memory: raw uint16 bits, an entry of its own (registered by the header as well)
half_a, half_b = torch.randn(32, 64).half(), torch.randn(64, 16).half()
cached_dot_kernel[(1,)](half_a, half_b, c, M=32, N=16, K=64)
half_a[29:] = 0
torch.testing.assert_close(c, half_a.float() @ half_b.float(), rtol=1e-3, atol=1e-3)
from torch_rbln.dsl.backends.numba_backend import executable
print("compiled", executable.compile_count()[0])
'''


def test_a_new_process_loads_a_cached_kernel_with_its_entry_registered(tmp_path):
    """A kernel's machine code loaded from numba's cache in a fresh process calls the entry's symbol:
    the generated module registers it on import, before numba loads the code (an unresolved symbol would
    abort the process inside LLVM), float32 and float16 (uint16 bits) memory alike. Run twice on one
    cache: the second run compiles nothing."""
    import os
    import subprocess
    import sys

    script = tmp_path / "cached_dot.py"
    script.write_text(_CACHED_KERNEL)
    env = {**os.environ, "TORCH_RBLN_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                           timeout=600)
            for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    assert "compiled 2" in runs[0].stdout and "compiled 0" in runs[1].stdout, [r.stdout for r in runs]
