"""`dot_padding`: `tile_dot` may leave a product's padded lanes unwritten only where the kernel provably
reads the product at counted rows and columns alone; every other use keeps the exact fill. End to end,
a kernel that reads the whole product (a row sum over padded columns) still computes torch's result,
and the op library's one-step matmul stores its product straight into its output (test_dot_store.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend import codegen
from torch_rbln.dsl.backends.numba_backend.dot_padding import mark_unread_padding

from torch_rbln import dsl as triton

_ARGS_A = "m0, 0, v8, 1, c1, c2, np.float32(0.0), sc_a, st_a, 0, True"
_ARGS_B = "m1, 0, v9, 1, c2, c3, np.float32(0.0), sc_b, st_b, 0, True"
_CALL = f"p9 = tile_dot({_ARGS_A}, {_ARGS_B}, True)"
_COUNTS = ["c1 = max(0, min(32, v4))", "c2 = max(0, min(64, v6))", "c3 = max(0, min(16, v5))"]
_EPILOGUE = ["for j1 in range(c1):", "    for j2 in range(c3):", "        m2[j1 * 16 + j2] = p9[j1, j2] * v7"]


def _program(*statements: str) -> list[str]:
    """`statements` as the body of the program loop, the way codegen nests them."""
    return ["for program in range(program_start, program_stop):", *("    " + line for line in statements)]


def _marked(body: list[str]) -> bool:
    lines, count = mark_unread_padding(body)
    calls = [line for line in lines if "tile_dot(" in line]
    assert len(calls) == 1 and count in (0, 1)
    return calls[0].rstrip().endswith(", False)")


def test_a_product_stored_at_counted_rows_and_columns_leaves_its_padding_unwritten():
    assert _marked(_program(*_COUNTS, _CALL, "if c1 > 0 and c3 > 0:", *("    " + line for line in _EPILOGUE)))
    assert _marked(_program(*_COUNTS, _CALL, *_EPILOGUE))


@pytest.mark.parametrize("body, why", [
    (_program(*_COUNTS, _CALL, "for j1 in range(32):", "    for j2 in range(16):",
              "        b5[j1, j2] = p9[j1, j2] + b4[j1, j2]"), "an accumulator loop over the whole tile"),
    (_program(*_COUNTS, _CALL, "b5 = p9", *_EPILOGUE), "an alias of the product"),
    (_program(*_COUNTS, _CALL, "for j1 in range(c3):", "    for j2 in range(c1):",
              "        m2[j1 * 16 + j2] = p9[j1, j2]"), "rows and columns swapped"),
    (_program(*_COUNTS, _CALL, "for j1 in range(c1):", "    for j2 in range(c3):", "        j2 = 0",
              "        m2[j1] = p9[j1, j2]"), "a loop variable assigned in its loop"),
    (_program(*_COUNTS, _CALL, "c1 = max(0, min(32, v5))", *_EPILOGUE), "a count assigned twice"),
    (_program(*_COUNTS[1:], _CALL, *_EPILOGUE), "a count not assigned before the call"),
    (["c1 = max(0, min(32, v4))", *_program(*_COUNTS[1:], _CALL, *_EPILOGUE)],
     "a count assigned in an outer block"),
    (_program(*_COUNTS, *_EPILOGUE, _CALL), "a read before the call (the previous program's product)"),
    (_program(*_COUNTS, _CALL, "v3 = row_sum(p9[0])", *_EPILOGUE), "a read of a whole row"),
    (_program(*_COUNTS, _CALL.replace("c1, c2, np", "32, c2, np"), *_EPILOGUE), "a literal count"),
])
def test_any_other_read_keeps_the_exact_padding(body, why):
    assert not _marked(body), why


def test_a_body_without_tile_dot_is_returned_as_it_is():
    body = _program("v1 = v2 + 1")
    assert mark_unread_padding(body) == (body, 0)


@triton.jit
def row_sums_kernel(a_ptr, b_ptr, out_ptr, m, n, K: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr):
    """Sums of each row of a @ b over BLOCK_N columns, n of them counted: the padded columns of the
    product take part in the sum, so they must be the exact 0 of masked lanes."""
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=rm[:, None] < m, other=0.0)
    b = tl.load(b_ptr + rk[:, None] * n + rn[None, :], mask=rn[None, :] < n, other=0.0)
    tl.store(out_ptr + rm, tl.sum(tl.dot(a, b), axis=1), mask=rm < m)


@triton.jit
def masked_product_kernel(a_ptr, b_ptr, c_ptr, m, n, K: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr):
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=rm[:, None] < m, other=0.0)
    b = tl.load(b_ptr + rk[:, None] * n + rn[None, :], mask=rn[None, :] < n, other=0.0)
    tl.store(c_ptr + rm[:, None] * n + rn[None, :], tl.dot(a, b), mask=(rm[:, None] < m) & (rn[None, :] < n))


def _source(kernel, *args, **constants) -> str:
    return codegen.lower(kernel.warmup(*args, **constants, grid=(1,)).ir).source


def test_a_kernel_reading_the_whole_product_keeps_the_fill_and_matches_torch():
    m, n, k = 5, 3, 16
    a, b = torch.randn(m, k), torch.randn(k, n)
    a[1, 2] = float("inf")  # row 1 is inf/nan in the counted columns only
    out = torch.empty(m)
    row_sums_kernel[(1,)](a, b, out, m, n, K=k, BLOCK_M=16, BLOCK_N=32)
    torch.testing.assert_close(out, (a @ b).sum(1), equal_nan=True, rtol=1e-5, atol=1e-5)
    assert ", True)" in _source(row_sums_kernel, a, b, out, m, n, K=k, BLOCK_M=16, BLOCK_N=32)


def test_a_masked_store_of_the_product_writes_no_padding_and_matches_torch():
    """The product is stored at counted lanes only: a row-major block takes it straight from gemm
    (`tile_dot_store`, tests/dsl/backends/test_dot_store.py), so no product tile, filled or not."""
    m, n, k = 5, 3, 16
    a, b = torch.randn(m, k), torch.randn(k, n)
    b[4, 1] = float("nan")
    c = torch.full((m, n), 7.0)
    masked_product_kernel[(1,)](a, b, c, m, n, K=k, BLOCK_M=16, BLOCK_N=64)
    torch.testing.assert_close(c, a @ b, equal_nan=True, rtol=1e-5, atol=1e-5)
    source = _source(masked_product_kernel, a, b, c, m, n, K=k, BLOCK_M=16, BLOCK_N=64)
    assert "tile_dot_store(" in source and " = tile_dot(" not in source


def test_the_op_librarys_one_step_matmul_stores_its_product_directly():
    from torch_rbln.kernels import matmul

    config = matmul._fitted_tile(32, 48, 64, 1, in_place=True)
    assert config.kwargs["ONE_STEP"] and config.kwargs["BLOCK_N"] == 1024  # 48 of its columns counted
    x, w, bias = torch.randn(32, 64), torch.randn(48, 64), torch.randn(48)
    got = torch.nn.functional.linear(x.to("rbln"), w.to("rbln"), bias.to("rbln")).cpu()
    np.testing.assert_allclose(got.numpy(), torch.nn.functional.linear(x, w, bias).numpy(), rtol=1e-5,
                               atol=1e-5)
    # the specialisation that linear ran, lowered here (a process that ran it before loads it from memory,
    # so its cache file need not be written by this test): a = x, b = w.t(), c, bias, then the strides
    out = torch.empty(32, 48)
    source = _source(matmul.matmul_kernel.fn, x, w.t(), out, bias, 32, 48, 64, 0, 64, 1, 0, 1, 64, 0, 48, 1,
                     0, 1, 1.0, 1.0, HAS_BIAS=True, **config.kwargs)
    # the bias stored first, then gemm adds the product onto it in place (`tile_dot_store`, accumulating)
    (call,) = [line for line in source.splitlines() if "tile_dot_store(" in line]
    assert ", v18, 1, m0, " in call  # scale alpha, accumulate


@pytest.mark.parametrize("kernel, block_n", [(row_sums_kernel, 32), (masked_product_kernel, 64)],
                         ids=["reads-the-whole-product", "stores-counted-lanes"])
def test_numba_matches_the_interpreter_with_and_without_the_fill(kernel, block_n):
    """The differential check of both ways `dot_padding` decides: the numba result equals the
    interpreter's (which computes every lane of the product exactly) within gemm's rounding."""
    m, n, k = 7, 5, 16
    generator = torch.Generator().manual_seed(11)
    a, b = torch.randn(m, k, generator=generator), torch.randn(k, n, generator=generator)
    b[3, 2] = float("inf")
    results = {}
    for backend in ("interpret", "numba"):
        out = torch.full((m,) if kernel is row_sums_kernel else (m, n), 7.0)
        kernel[(1,)](a, b, out, m, n, K=k, BLOCK_M=16, BLOCK_N=block_n, backend=backend)
        results[backend] = out
    torch.testing.assert_close(results["numba"], results["interpret"], rtol=1e-5, atol=1e-5, equal_nan=True)
