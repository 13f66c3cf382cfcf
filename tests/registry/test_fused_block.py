"""`geometry.fused_block`: the fused op specialisations of `unary_kernel` and `binary_dense_kernel`
take one BLOCK for every size (one compile where `block`'s buckets made up to three), the others keep
`block`'s buckets; results against the CPU at the sizes around the old buckets' edges, with each
operand layout, and no write outside the result."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch_rbln.registry import elementwise
from torch_rbln.registry.geometry import FUSED_BLOCK, block, fused_block

import torch_rbln  # noqa: F401

SIZES = [1, 5, 16, 17, 1000, 1024, 1025, 4096, 4097, 9000]  # block()'s edges, one and several programs


def test_fused_launches_take_one_block_and_generic_ones_keep_the_buckets():
    assert {fused_block(n, True) for n in SIZES} == {FUSED_BLOCK}
    assert [fused_block(n, False) for n in SIZES] == [block(n) for n in SIZES]
    f32 = (torch.float32,) * 3

    def binary_blocks(name: str) -> set:
        launch = elementwise.dense_binary_launch
        return {launch(name, (torch.empty(n),) * 2, f32, [n], n)[1]["BLOCK"] for n in (4, 100, 3000)}

    for name in ("add", "mul", "sub", "div"):
        assert binary_blocks(name) == {FUSED_BLOCK}, name
    assert binary_blocks("maximum") == {16, 1024, 4096}  # a and b read twice: buffers, small blocks
    assert {elementwise.unary_launch("exp", f32[:2], n)[1]["BLOCK"] for n in (4, 100, 3000)} == {FUSED_BLOCK}
    assert elementwise.unary_launch("sqrt", f32[:2], 4)[1]["BLOCK"] == FUSED_BLOCK
    assert elementwise.unary_launch("relu", f32[:2], 4)[1]["BLOCK"] == 16  # x read twice: materialised


@pytest.mark.parametrize("n", SIZES)
def test_fused_binary_ops_match_the_cpu_and_write_only_the_result(n: int):
    torch.manual_seed(n)
    a, b = torch.randn(n), torch.rand(n) + 0.5
    for op in (torch.add, torch.sub, torch.mul, torch.div):
        got = op(a.to("rbln"), b.to("rbln"))
        torch.testing.assert_close(got.cpu(), op(a, b), atol=1e-6, rtol=1e-6)
    buffer = torch.full((n + 64,), 7.0).to("rbln")
    torch.add(a.to("rbln"), b.to("rbln"), alpha=2.0, out=buffer[32:32 + n])
    host = buffer.cpu()
    torch.testing.assert_close(host[32:32 + n], a + 2.0 * b)
    assert bool((host[:32] == 7.0).all()) and bool((host[32 + n:] == 7.0).all())  # nothing else written


@pytest.mark.parametrize("rows,cols", [(3, 5), (40, 17), (2, 1025), (9, 1000)])
def test_fused_binary_ops_over_rows_match_the_cpu(rows: int, cols: int):
    torch.manual_seed(rows * cols)
    x, bias, column = torch.randn(rows, cols), torch.randn(cols), torch.rand(rows, 1) + 0.5
    xd = x.to("rbln")
    torch.testing.assert_close((xd + bias.to("rbln")).cpu(), x + bias)  # a row repeated over rows
    torch.testing.assert_close((xd / column.to("rbln")).cpu(), x / column)  # one value per row
    torch.testing.assert_close((xd * 3.0).cpu(), x * 3.0)  # a scalar


@pytest.mark.parametrize("n", SIZES)
def test_fused_unary_ops_and_fills_match_the_cpu_and_write_only_the_result(n: int):
    torch.manual_seed(n)
    x = torch.randn(n)
    xd = x.to("rbln")
    torch.testing.assert_close(torch.exp(xd).cpu(), torch.exp(x))
    torch.testing.assert_close(torch.relu(xd).cpu(), torch.relu(x))
    torch.testing.assert_close(F.gelu(xd, approximate="tanh").cpu(), F.gelu(x, approximate="tanh"))
    buffer = torch.full((n + 64,), 7.0).to("rbln")
    buffer[32:32 + n].fill_(-2.5)
    host = buffer.cpu()
    assert bool((host[32:32 + n] == -2.5).all())
    assert bool((host[:32] == 7.0).all()) and bool((host[32 + n:] == 7.0).all())
