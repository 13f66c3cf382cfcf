"""A product only stored (`tl.store(ptr, tl.dot(a, b))`, or `* scale`) is written by gemm straight into
the stored block where that block is row-major (`codegen._direct_dot_store`, `dot_support.tile_dot_store`):
no product tile and no copy. Every case is checked against the interpreter (which computes the product
lane by lane) and torch: runtime and literal column strides (the unit one takes gemm, another the tile
and the loop), masked rows, columns and depth, scales (0 and infinite ones keep the tile's NaN), operands
aliasing the output (the alias-safe variant), and the kernels whose product has another use."""

from __future__ import annotations

import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend import codegen

from torch_rbln import dsl as triton


@triton.jit
def scaled_product_kernel(a_ptr, b_ptr, c_ptr, m, n, k, scm, scn, scale,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """c[i, j] = scale * (a @ b)[i, j] for i < m, j < n, c with strides (scm, scn) given at run time."""
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = tl.load(a_ptr + rm[:, None] * k + rk[None, :], mask=(rm[:, None] < m) & (rk[None, :] < k), other=0.0)
    b = tl.load(b_ptr + rk[:, None] * n + rn[None, :], mask=(rk[:, None] < k) & (rn[None, :] < n), other=0.0)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, tl.dot(a, b) * scale,
             mask=(rm[:, None] < m) & (rn[None, :] < n))


@triton.jit
def biased_product_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, m, n, k, scm, scn, sbm, sbn, alpha, beta,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """c = alpha * (a @ b) + beta * bias (bias read with strides (sbm, sbn): 0 broadcasts), as the op
    library's addmm: the addend is stored first and gemm adds the product onto it."""
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = tl.load(a_ptr + rm[:, None] * k + rk[None, :], mask=(rm[:, None] < m) & (rk[None, :] < k), other=0.0)
    b = tl.load(b_ptr + rk[:, None] * n + rn[None, :], mask=(rk[:, None] < k) & (rn[None, :] < n), other=0.0)
    acc = tl.dot(a, b) * alpha
    inside = (rm[:, None] < m) & (rn[None, :] < n)
    bias = tl.load(bias_ptr + rm[:, None] * sbm + rn[None, :] * sbn, mask=inside, other=0.0)
    acc += beta * bias
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=(rm[:, None] < m) & (rn[None, :] < n))


@triton.jit
def product_and_sum_kernel(a_ptr, b_ptr, c_ptr, s_ptr, K: tl.constexpr, BLOCK: tl.constexpr):
    """The product stored and summed: a second use, so the product tile stays."""
    r = tl.arange(0, BLOCK)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + r[:, None] * K + rk[None, :])
    p = tl.dot(a, tl.load(b_ptr + rk[:, None] * BLOCK + r[None, :]))
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], p)
    tl.store(s_ptr + r, tl.sum(p, axis=1))


def _run(backend: str, a, b, c, m, n, k, strides, scale, blocks) -> torch.Tensor:
    out = c.clone()
    scaled_product_kernel[(1,)](a, b, out, m, n, k, *strides, scale, BLOCK_M=blocks[0], BLOCK_N=blocks[1],
                                BLOCK_K=blocks[2], backend=backend)
    return out


CASES = [  # (m, n, k, blocks, layout of c, scale)
    (5, 7, 16, (16, 16, 16), "row-major", 1.0),
    (16, 16, 16, (16, 16, 16), "row-major", 2.5),  # full tile, a scale gemm's result is multiplied by
    (5, 7, 9, (16, 16, 16), "row-major", 1.0),  # masked depth: the fills are 0
    (5, 7, 16, (16, 16, 16), "padded rows", -0.5),  # a leading dimension beyond n
    (5, 7, 16, (16, 16, 16), "transposed", 1.0),  # column stride m: the product tile and the loop
]


@pytest.mark.parametrize(("m", "n", "k", "blocks", "layout", "scale"), CASES,
                         ids=[f"{c[4]}-k{c[2]}-scale{c[5]}" for c in CASES])
def test_a_stored_product_matches_the_interpreter_and_torch(m, n, k, blocks, layout, scale):
    generator = torch.Generator().manual_seed(m * 100 + k)
    a, b = torch.randn(m, k, generator=generator), torch.randn(k, n, generator=generator)
    if layout == "row-major":
        c, strides = torch.full((m, n), 7.0), (n, 1)
    elif layout == "padded rows":
        c, strides = torch.full((m, n + 3), 7.0), (n + 3, 1)
    else:
        c, strides = torch.full((n, m), 7.0), (1, m)
    got = _run("numba", a, b, c, m, n, k, strides, scale, blocks)
    torch.testing.assert_close(got, _run("interpret", a, b, c, m, n, k, strides, scale, blocks), rtol=1e-5,
                               atol=1e-5)
    expected = c.clone()
    view = expected.as_strided((m, n), strides)
    view.copy_((a @ b) * scale)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)  # lanes outside the block untouched


@pytest.mark.parametrize("scale", [0.0, float("inf")])
def test_scales_gemm_would_skip_keep_the_products_nan(scale):
    """gemm with alpha 0 never reads the operands; `product * 0` is NaN where the product is NaN or
    Inf, so such scales take the product tile."""
    a, b = torch.ones(4, 16), torch.ones(16, 4)
    a[1, 3] = float("nan")
    c = torch.zeros(4, 4)
    got = _run("numba", a, b, c, 4, 4, 16, (4, 1), scale, (16, 16, 16))
    torch.testing.assert_close(got, _run("interpret", a, b, c, 4, 4, 16, (4, 1), scale, (16, 16, 16)),
                               equal_nan=True)
    assert got[1].isnan().all()


def test_an_output_aliasing_an_operand_reads_the_operand_first():
    """gemm must not write memory it reads: the launch finds the overlap and runs the alias-safe
    variant, whose product tile is read before any store (Triton's program order)."""
    a = torch.randn(16, 16)
    b = torch.randn(16, 16)
    expected = a @ b
    scaled_product_kernel[(1,)](a, b, a, 16, 16, 16, 16, 1, 1.0, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    torch.testing.assert_close(a, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["row bias", "full bias", "transposed out", "bias is out"])
def test_a_product_plus_an_addend_matches_the_interpreter_and_torch(layout):
    m, n, k = 6, 9, 13
    generator = torch.Generator().manual_seed(len(layout))
    a, b = torch.randn(m, k, generator=generator), torch.randn(k, n, generator=generator)
    full = torch.randn(m, n, generator=generator)
    row = torch.randn(n, generator=generator)
    bias, bias_strides = (row, (0, 1)) if layout == "row bias" else (full, (n, 1))
    out_strides = (1, m) if layout == "transposed out" else (n, 1)
    results = {}
    for backend in ("interpret", "numba"):
        out = torch.full((n, m) if layout == "transposed out" else (m, n), 7.0)
        operand = out.copy_(full) if layout == "bias is out" else bias.clone()
        biased_product_kernel[(1,)](a, b, out, operand, m, n, k, *out_strides, *bias_strides, 0.5, 2.0,
                                    BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, backend=backend)
        results[backend] = out.as_strided((m, n), out_strides)
    torch.testing.assert_close(results["numba"], results["interpret"], rtol=1e-5, atol=1e-5)
    expected = 0.5 * (a @ b) + 2.0 * (full if layout != "row bias" else row.expand(m, n))
    torch.testing.assert_close(results["numba"], expected, rtol=1e-5, atol=1e-5)


def test_only_a_product_with_no_other_use_is_stored_directly():
    a, b, c = torch.randn(16, 16), torch.randn(16, 16), torch.empty(16, 16)
    fn = scaled_product_kernel.warmup(a, b, c, 16, 16, 16, 16, 1, 1.0, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16,
                                      grid=(1,))
    assert "tile_dot_store(" in codegen.lower(fn.ir).source
    s = torch.empty(16)
    fn = product_and_sum_kernel.warmup(a, b, c, s, K=16, BLOCK=16, grid=(1,))
    assert "tile_dot_store(" not in codegen.lower(fn.ir).source
    product_and_sum_kernel[(1,)](a, b, c, s, K=16, BLOCK=16)
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s, (a @ b).sum(1), rtol=1e-4, atol=1e-4)


def test_the_op_librarys_matmul_without_bias_stores_its_product_directly():
    from torch_rbln.kernels import matmul

    config = matmul._fitted_tile(32, 48, 64, 1, in_place=True)
    x, w = torch.randn(32, 64), torch.randn(64, 48)
    out = torch.empty(32, 48)
    fn = matmul.matmul_kernel.fn.warmup(x, w, out, out, 32, 48, 64, 0, 64, 1, 0, 48, 1, 0, 48, 1, 0, 0, 1.0,
                                        0.0, HAS_BIAS=False, grid=(1,), **config.kwargs)
    assert "tile_dot_store(" in codegen.lower(fn.ir).source
    got = torch.mm(x.to("rbln"), w.to("rbln")).cpu()
    torch.testing.assert_close(got, x @ w, rtol=1e-5, atol=1e-5)


def test_a_block_beyond_the_output_faults_before_gemm_writes_anything():
    """The direct store stands behind the store's own bounds check: an output too small for the block
    (or an offset past its end) raises the out-of-bounds fault and leaves the memory untouched."""
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    backing = torch.full((120,), 7.0)
    small = backing[:100]  # the 16 x 16 block needs 256 elements; 20 more lie past the view's end
    with pytest.raises(tl.KernelRuntimeError, match="out-of-bounds store"):
        scaled_product_kernel[(1,)](a, b, small, 16, 16, 16, 16, 1, 1.0, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    assert torch.equal(backing, torch.full((120,), 7.0))
    with pytest.raises(tl.KernelRuntimeError, match="out-of-bounds store"):
        scaled_product_kernel[(1,)](a, b, backing, 4, 4, 16, -40, 1, 1.0, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    assert torch.equal(backing, torch.full((120,), 7.0))
