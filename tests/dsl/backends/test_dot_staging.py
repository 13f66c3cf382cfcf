"""`tl.dot` staging buffers: a product whose operands the direct gemm reads in place (memory of the work
dtype) gets unallocated placeholders, which `dot_support.tile_dot_into` allocates only when a call must
stage after all (operands with no unit stride, a fill in masked rows); any other product allocates them
per launch as before. Both ways match torch and the interpreter."""

from __future__ import annotations

import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend import codegen

from torch_rbln import dsl as triton


@triton.jit
def strided_product_kernel(a_ptr, b_ptr, c_ptr, m, n, k, sam, sak, sbk, sbn, FILL: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """c = a @ b of one tile, a and b read through any strides; masked lanes of a read `FILL` (a
    nonzero fill in masked rows keeps the direct gemm from reading a in place)."""
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=(rm[:, None] < m) & (rk[None, :] < k),
                other=FILL)
    b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn, mask=(rk[:, None] < k) & (rn[None, :] < n),
                other=0.0)
    tl.store(c_ptr + rm[:, None] * n + rn[None, :], tl.dot(a, b), mask=(rm[:, None] < m) & (rn[None, :] < n))


def _launch(a, b, m, n, k, fill=0.0, backend="numba", blocks=(16, 32, 32)):
    c = torch.full((m, n), 7.0)
    strided_product_kernel[(1,)](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                 FILL=fill, BLOCK_M=blocks[0], BLOCK_N=blocks[1], BLOCK_K=blocks[2],
                                 backend=backend)
    return c


def _source(a, b, m, n, k, fill=0.0, blocks=(16, 32, 32)) -> str:
    c = torch.empty(m, n, dtype=torch.float32)
    fn = strided_product_kernel.warmup(a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                       FILL=fill, BLOCK_M=blocks[0], BLOCK_N=blocks[1], BLOCK_K=blocks[2],
                                       grid=(1,))
    return codegen.lower(fn.ir).source


def _staging_lines(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if line.strip().startswith(("sc", "st"))]


def test_float32_operands_get_unallocated_placeholders_and_half_operands_real_buffers():
    a, b = torch.randn(12, 20), torch.randn(20, 24)
    lines = _staging_lines(_source(a, b, 12, 24, 20))
    placeholder = "numba.carray(as_pointer(np.int64(0), np.float32)"
    assert len(lines) == 4 and all(placeholder in line for line in lines)
    half = _staging_lines(_source(a.half(), b.half(), 12, 24, 20))
    assert len(half) == 4 and all("np.empty(" in line for line in half)


@pytest.mark.parametrize("case", ["in-place", "no-unit-stride", "fill-in-masked-rows", "both-transposed"])
def test_products_that_stage_after_all_allocate_their_buffers_and_match_torch(case):
    """Each case runs the float32 specialisation with placeholders; all but the first must stage (the
    direct gemm refuses them), which would write through a null buffer if nothing allocated it."""
    generator = torch.Generator().manual_seed(5)
    m, n, k = 12, 24, 20
    fill = 0.0
    base_a = torch.randn(2 * m, 2 * k, generator=generator)
    base_b = torch.randn(2 * k, 2 * n, generator=generator)
    if case == "in-place":
        a, b = base_a[:m, :k].contiguous(), base_b[:k, :n].contiguous()
    elif case == "no-unit-stride":
        a, b = base_a[::2, ::2], base_b[::2, ::2]
    elif case == "fill-in-masked-rows":
        a, b, fill = base_a[:m, :k].contiguous(), base_b[:k, :n].contiguous(), 1.5
    else:
        a, b = base_a[:k, :m].t(), base_b[:n, :k].t()  # column-major tiles: gemm's transpose flags
    got = _launch(a, b, m, n, k, fill)
    # with a fill, a's masked K lanes meet b's masked (zero) rows and its masked rows are not stored
    torch.testing.assert_close(got, a @ b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, _launch(a, b, m, n, k, fill, backend="interpret"), rtol=1e-5, atol=1e-5)


def test_a_wide_tile_launched_repeatedly_keeps_matching():
    """The op library's wide one-step tile (32 x 1024 accumulator, placeholders of up to 4 MB that are
    never allocated on the direct path), many launches in a row: every result matches torch."""
    x, w, bias = torch.randn(32, 64), torch.randn(192, 64), torch.randn(192)
    xr, wr, br = x.to("rbln"), w.to("rbln"), bias.to("rbln")
    expected = torch.nn.functional.linear(x, w, bias)
    for _ in range(20):
        got = torch.nn.functional.linear(xr, wr, br).cpu()
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
