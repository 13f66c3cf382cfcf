"""Indexing by an integer tensor (`x[idx]`) and the scatters (`index_put_`, `slice_scatter`,
`select_scatter`): rbln against the CPU, which cases run on device kernels, which decline to the CPU
fallback with a reason, and that nothing is written outside the destination."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _row(op: str) -> dict:
    return registry.fallback_report().get(op, {"device": 0, "cpu": 0, "reasons": {}})


@pytest.fixture(autouse=True)
def _fresh_report():
    registry.reset_fallback_report()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_matches_cpu_with_repeated_indices(dtype, accumulate):
    torch.manual_seed(0)
    x = torch.randn(9, 33, dtype=dtype)  # rows longer than one block of 16: the kernel loops
    index = torch.tensor([0, 4, 4, 8, 0, 4])
    values = torch.randn(6, 33, dtype=dtype)
    expected = x.clone().index_put_((index,), values, accumulate=accumulate)
    actual = x.to("rbln").index_put_((index.to("rbln"),), values.to("rbln"), accumulate=accumulate)
    # repeated indices: the last write wins, or every value is added in index order (as on the CPU)
    torch.testing.assert_close(actual.cpu(), expected, atol=0, rtol=0)
    assert _row("aten::_index_put_impl_") == {"device": 1, "cpu": 0, "reasons": {}}


def test_index_put_on_an_inner_dim_with_a_2d_index_and_broadcast_values():
    torch.manual_seed(1)
    x = torch.randn(3, 7, 4)
    index = torch.tensor([[1, 6], [2, 2]])
    values = torch.randn(2, 4)  # broadcast over the leading dims of the indexed shape (3, 2, 2, 4)
    expected = x.clone()
    expected[:, index] += values
    actual = x.to("rbln")
    actual[:, index.to("rbln")] += values.to("rbln")
    torch.testing.assert_close(actual.cpu(), expected, atol=1e-6, rtol=1e-6)
    assert _row("aten::_index_put_impl_")["device"] == 1
    assert _row("aten::index")["device"] == 1  # the read of x[:, index] for the +=


def test_index_put_writes_only_the_indexed_rows():
    storage = torch.zeros(5, 4).to("rbln")
    rows = storage[1:4]  # a view in the middle of a larger storage
    rows.index_put_((torch.tensor([2, 0]).to("rbln"),), torch.full((2, 4), 7.0).to("rbln"))
    expected = torch.zeros(5, 4)
    expected[1] = expected[3] = 7.0
    torch.testing.assert_close(storage.cpu(), expected, atol=0, rtol=0)


def test_index_put_values_aliasing_the_destination_are_read_first():
    x = torch.arange(12.0).reshape(6, 2)
    expected = x.clone().index_put_((torch.tensor([1, 2, 3, 4, 5, 0]),), x.clone())
    device = x.to("rbln")
    device.index_put_((torch.tensor([1, 2, 3, 4, 5, 0]).to("rbln"),), device)  # shifts every row down
    torch.testing.assert_close(device.cpu(), expected, atol=0, rtol=0)


@pytest.mark.parametrize("case,reason", [
    ("bool mask", "boolean masks run on the CPU"),
    ("negative index", "negative or out-of-range index"),
    ("two index tensors", "2 index tensors"),
    ("bool accumulation", "dtype bool"),
])
def test_index_put_declines_what_its_kernel_does_not_express(case, reason):
    x = torch.randn(4, 3)
    values = torch.ones(3)
    if case == "bool mask":
        indices = (torch.tensor([True, False, True, False]),)
    elif case == "negative index":
        indices = (torch.tensor([-1]),)
    elif case == "two index tensors":
        indices = (torch.tensor([0, 1]), torch.tensor([2, 0]))
        values = torch.ones(2)
    else:
        x = torch.zeros(4, 3, dtype=torch.bool)
        indices = (torch.tensor([1]),)
        values = torch.ones(3, dtype=torch.bool)
    expected = x.clone().index_put_(indices, values, accumulate=True)
    actual = x.to("rbln").index_put_(tuple(i.to("rbln") for i in indices), values.to("rbln"),
                                     accumulate=True)
    torch.testing.assert_close(actual.cpu(), expected, atol=0, rtol=0)
    row = _row("aten::_index_put_impl_")
    assert row["device"] == 0 and row["cpu"] == 1
    assert any(reason in text for text in row["reasons"]), row


def test_index_put_of_integers_is_exact():
    # MoE routing inverts its sort permutation with `inv_perm[perm] = arange(n)` (int64, assignment)
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(3))
    inverse = torch.empty(64, dtype=torch.int64).to("rbln")
    inverse[perm.to("rbln")] = torch.arange(64).to("rbln")
    torch.testing.assert_close(inverse.cpu(), torch.argsort(perm), atol=0, rtol=0)
    # repeated indices accumulate exactly, beyond float32's integers
    big = torch.full((3,), 2**40 + 1, dtype=torch.int64)
    index = torch.tensor([2, 0, 2, 2])
    values = torch.tensor([1, 2**33, 3, -5], dtype=torch.int64)
    expected = big.clone().index_put_((index,), values, accumulate=True)
    actual = big.to("rbln").index_put_((index.to("rbln"),), values.to("rbln"), accumulate=True)
    torch.testing.assert_close(actual.cpu(), expected, atol=0, rtol=0)
    assert _row("aten::_index_put_impl_") == {"device": 2, "cpu": 0, "reasons": {}}


def test_index_put_out_of_range_raises_torchs_error():
    x = torch.zeros(3, 2).to("rbln")
    with pytest.raises(IndexError, match="out of bounds"):
        x.index_put_((torch.tensor([3]).to("rbln"),), torch.ones(2).to("rbln"))
    torch.testing.assert_close(x.cpu(), torch.zeros(3, 2), atol=0, rtol=0)


def test_index_gathers_rows_in_the_index_shape():
    torch.manual_seed(2)
    x = torch.randn(5, 3, 6, dtype=torch.float16)
    index = torch.tensor([[4, 0, 4], [1, 1, 2]])
    torch.testing.assert_close(x.to("rbln")[index.to("rbln")].cpu(), x[index], atol=0, rtol=0)
    torch.testing.assert_close(x.to("rbln")[:, :, index.to("rbln")].cpu(), x[:, :, index], atol=0, rtol=0)
    assert _row("aten::index") == {"device": 2, "cpu": 0, "reasons": {}}


@pytest.mark.parametrize("dim,start,end,step", [(0, 1, 4, 1), (1, 0, 6, 2), (-1, 2, None, 3)])
def test_slice_scatter_matches_cpu(dim, start, end, step):
    torch.manual_seed(3)
    x = torch.randn(5, 7)
    src = torch.randn_like(x[(slice(None),) * (dim % 2) + (slice(start, end, step),)])
    expected = torch.slice_scatter(x, src, dim, start, end, step)
    actual = torch.slice_scatter(x.to("rbln"), src.to("rbln"), dim, start, end, step)
    torch.testing.assert_close(actual.cpu(), expected, atol=0, rtol=0)
    assert _row("aten::slice_scatter") == {"device": 1, "cpu": 0, "reasons": {}}


def test_select_scatter_matches_cpu_and_bad_shapes_raise_torchs_error():
    x, src = torch.randn(4, 5), torch.randn(4)
    expected = torch.select_scatter(x, src, 1, -2)
    torch.testing.assert_close(torch.select_scatter(x.to("rbln"), src.to("rbln"), 1, -2).cpu(), expected,
                               atol=0, rtol=0)
    with pytest.raises(RuntimeError):
        torch.select_scatter(x.to("rbln"), torch.randn(3).to("rbln"), 1, 0)


def test_compiled_embedding_backward_runs_on_device_kernels():
    torch.manual_seed(4)
    emb = torch.nn.Embedding(50, 8)
    ids = torch.randint(0, 50, (2, 7))
    reference = torch.nn.Embedding(50, 8)
    reference.load_state_dict(emb.state_dict())
    emb = emb.to("rbln")
    step = torch.compile(lambda i: emb(i).square().sum(), backend="rbln")
    step(ids.to("rbln")).backward()
    reference(ids).square().sum().backward()
    torch.testing.assert_close(emb.weight.grad.cpu(), reference.weight.grad, atol=1e-5, rtol=1e-5)
    assert _row("aten::_index_put_impl_") == {"device": 1, "cpu": 0, "reasons": {}}
