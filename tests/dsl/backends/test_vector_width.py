"""`vector_width`: generated kernels whose lane loops are all long compile with LLVM's per-function
`"prefer-vector-width"="512"` (through `WideVectorCompiler`), others as before; the choice's unit cases,
the attribute in the compiled IR, and the same bits either way, the interpreter's and torch's values."""

from __future__ import annotations

import llvmlite.binding
import numba
import numpy as np
import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend import codegen
from torch_rbln.dsl.backends.numba_backend.vector_width import (
    WIDE_LANES,
    WideVectorCompiler,
    lane_loop_lengths,
    prefers_wide_vectors,
)

from torch_rbln import dsl as triton

_ATTRIBUTE = '"prefer-vector-width"="512"'


def test_lane_loop_lengths_reads_literals_lane_variables_and_box_counts_of_innermost_loops():
    body = ["c1 = max(0, min(128, (np.int64(v3) - np.int64(v6))))", "c2 = lanes32",
            "for j1 in range(128):",  # outer: not a lane loop
            "    for j2 in range(64):", "        b3[j1, j2] = v5",
            "    b4[j1] = v5",
            "for j5 in range(c1):", "    m2[j5] = v5",
            "for j6 in range(lanes48):", "    m2[j6] = v5",
            "for j7 in range(c2):", "    m2[j7] = v5",
            "for j8 in range(v9):", "    m2[j8] = v5"]
    assert lane_loop_lengths(body) == [64, 128, 48, 32, None]


@pytest.mark.parametrize(("body", "wide"), [
    (["for j1 in range(4096):", "    m1[j1] = v2"], True),
    (["c1 = max(0, min(1024, v3))", "for j1 in range(c1):", "    m1[j1] = v2"], True),
    (["for j1 in range(128):", "    for j2 in range(64):", "        b1[j1, j2] = v2"], True),
    (["for j1 in range(v4):", "    m1[j1] = v2"], True),  # only unknown counts: a runtime extent
    (["for j1 in range(256):", "    for j2 in range(lanes16):", "        b1[j1, j2] = v2"], False),
    (["for j1 in range(4096):", "    m1[j1] = v2", "for j2 in range(8):", "    b1[j2] = v2"], False),
    (["v1 = v2 + v3"], False),  # no loop: nothing to vectorise
])
def test_wide_vectors_are_asked_for_where_every_known_lane_loop_is_long(body, wide):
    assert prefers_wide_vectors(body) is wide
    assert WIDE_LANES == 64


@triton.jit
def silu_mul_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * tl.sigmoid(x) * y, mask=mask)


def _source(kernel, *args, grid, **constexprs) -> str:
    return codegen.lower(kernel.warmup(*args, **constexprs, grid=grid).ir).source


def _scaled_sum(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i] * np.float32(3.0) + y[i]


def test_the_pipeline_puts_the_attribute_on_the_function_and_llvm_uses_512_bit_registers():
    """`WideVectorCompiler` is numba's pipeline with one change: the compiled function carries the
    attribute, and on an AVX-512 CPU its loop then runs in zmm registers (ymm under numba's default)."""
    wide = numba.njit(error_model="numpy", boundscheck=False, pipeline_class=WideVectorCompiler)(_scaled_sum)
    plain = numba.njit(error_model="numpy", boundscheck=False)(_scaled_sum)
    x = np.arange(1000, dtype=np.float32)
    y_wide, y_plain = np.ones(1000, np.float32), np.ones(1000, np.float32)
    wide(x, y_wide)
    plain(x, y_plain)
    assert np.array_equal(y_wide, y_plain)
    assert _ATTRIBUTE in wide.inspect_llvm(wide.signatures[0])
    assert _ATTRIBUTE not in plain.inspect_llvm(plain.signatures[0])
    if "+avx512f" in (numba.config.CPU_FEATURES or llvmlite.binding.get_host_cpu_features().flatten()):
        assert "zmm" in wide.inspect_asm(wide.signatures[0])


def test_a_kernel_gets_the_attribute_by_its_lane_loops_and_computes_the_same_bits():
    """Elementwise arithmetic is not reassociated, so the 512-bit kernel (1024-lane blocks) and the
    256-bit one (16-lane blocks) of the same kernel give the same bits; both are the interpreter's
    values within exp's rounding, and torch's."""
    n = 3000
    generator = torch.Generator().manual_seed(3)
    x, y = torch.randn(n, generator=generator) * 4, torch.randn(n, generator=generator)
    results = {}
    for block, wide in ((1024, True), (16, False)):
        out = torch.empty(n)
        grid = ((n + block - 1) // block,)
        silu_mul_kernel[grid](x, y, out, n, BLOCK=block)
        source = _source(silu_mul_kernel, x, y, out, n, BLOCK=block, grid=grid)
        assert ("pipeline_class=WideVectorCompiler" in source) is wide
        results[block] = out
    assert torch.equal(results[1024], results[16])
    interpreted = torch.empty(n)
    silu_mul_kernel[(3,)](x, y, interpreted, n, BLOCK=1024, backend="interpret")
    torch.testing.assert_close(results[1024], interpreted, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(results[1024], torch.nn.functional.silu(x) * y, rtol=2e-6, atol=1e-6)


def test_the_choice_is_part_of_the_generated_source_and_its_digest():
    """A kernel compiled wide names the pipeline module's hash, so a changed pipeline gives a new file
    (numba caches machine code by file), as the support helpers' hashes do."""
    x = torch.randn(4096)
    silu_mul_kernel[(4,)](x, x, torch.empty(4096), 4096, BLOCK=1024)
    source = _source(silu_mul_kernel, x, x, torch.empty(4096), 4096, BLOCK=1024, grid=(4,))
    assert f"# Vector width: {codegen._vector_width_digest()}" in source
