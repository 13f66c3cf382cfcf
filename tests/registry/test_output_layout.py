"""Elementwise results are laid out as torch lays them out (TensorIterator keeps its inputs' memory
layout): a transposed, channels_last or sliced input gives the CPU's strides, so code that works on the
CPU (a `.view` of the result's transpose) and graphs traced with torch's strides (`aot_eager`) work on
rbln too."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

X = torch.randn(2, 5, 3, 4, generator=torch.Generator().manual_seed(0))
C = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))

CASES = {
    "transposed_times_broadcast": lambda x, c: x.transpose(1, 2) * c[:, None, :],
    "transposed_plus_transposed": lambda x, c: x.transpose(1, 2) + x.transpose(1, 2),
    "neg_transposed": lambda x, c: -x.transpose(1, 2),
    "sigmoid_transposed": lambda x, c: x.transpose(1, 2).sigmoid(),
    "where_transposed": lambda x, c: torch.where(x.transpose(1, 2) > 0, x.transpose(1, 2), 0.0),
    "channels_last_times_number": lambda x, c: x.contiguous(memory_format=torch.channels_last) * 2,
    "comparison_reversed_dims": lambda x, c: x.permute(3, 2, 1, 0) < 0.5,
    "slice_plus_number": lambda x, c: x[:, ::2] + 1,
    "int64_transposed": lambda x, c: (x * 10).long().transpose(1, 2) + 1,
}


@pytest.mark.parametrize("case", list(CASES), ids=str)
def test_result_strides_and_values_match_the_cpu(case):
    f = CASES[case]
    expected = f(X, C)
    registry.reset_fallback_report()
    got = f(X.to("rbln"), C.to("rbln"))
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-6, atol=1e-6)
    assert not any(row["cpu"] for row in registry.fallback_report().values())


def test_view_of_the_transposed_result_works_as_on_the_cpu():
    """`(q.transpose(1, 2) * cos).transpose(1, 2).view(...)` is valid on the CPU, whose product keeps
    q's layout; a contiguous product made the view raise."""
    q, cos = torch.randn(2, 6, 4, 8), torch.randn(6, 8)

    def f(q, cos):
        return (q.transpose(1, 2) * cos).transpose(1, 2).view(2, 6, 32)

    torch.testing.assert_close(f(q.to("rbln"), cos.to("rbln")).cpu(), f(q, cos))


def test_aot_eager_runs_a_graph_traced_with_torch_strides():
    torch._dynamo.reset()

    def f(q, cos):
        return (q.transpose(1, 2) * cos + 1).transpose(1, 2).view(2, 6, 32)

    q, cos = torch.randn(2, 6, 4, 8), torch.randn(6, 8)
    compiled = torch.compile(f, backend="aot_eager")
    torch.testing.assert_close(compiled(q.to("rbln"), cos.to("rbln")).cpu(), f(q, cos))
