"""Sorting, scanning and scattering for MoE routing (`sort`, `topk`, `cumsum`, `scatter`): rbln against
the CPU (exact where the CPU's order is defined), which calls run on device kernels, which decline to
the CPU fallback with a reason, and that nothing is written outside the destination."""

from __future__ import annotations

import pytest
import torch
from torch_rbln.registry import sorting

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _row(op: str) -> dict:
    return registry.fallback_report().get(op, {"device": 0, "cpu": 0, "reasons": {}})


@pytest.fixture(autouse=True)
def _fresh_report():
    registry.reset_fallback_report()


def _exact(actual, expected) -> None:
    torch.testing.assert_close(actual.cpu() if isinstance(actual, torch.Tensor) else
                               tuple(t.cpu() for t in actual), expected, atol=0, rtol=0, equal_nan=True)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_stable_along_any_dim(dim, descending):
    torch.manual_seed(0)
    x = torch.randint(0, 5, (6, 300, 3)).float()  # many ties; 300 > one block of ranked elements
    actual = torch.sort(x.to("rbln"), dim=dim, descending=descending)
    _exact(actual, torch.sort(x, stable=True, dim=dim, descending=descending))
    assert _row("aten::sort") == {"device": 1, "cpu": 0, "reasons": {}}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float16, torch.bfloat16])
def test_sort_of_expert_ids_matches_the_stable_cpu_sort(dtype):
    torch.manual_seed(1)
    ids = torch.randint(0, 8, (2048,)).to(dtype)  # as a router's flattened top-k choices
    values, order = torch.sort(ids.to("rbln"), stable=True)
    _exact((values, order), torch.sort(ids, stable=True))
    assert order.dtype == torch.int64
    assert _row("aten::sort")["device"] == 1


SPECIALS = [1.0, float("nan"), -0.0, 0.0, -2.0, float("nan"), float("inf"), -float("inf"), 0.0, -float("inf")]


def test_sort_orders_nan_last_and_keeps_signed_zeros_in_index_order():
    # sort is registered exact: NaN and infinities reach the kernel through the dispatcher
    x = torch.tensor(SPECIALS)
    for descending in (False, True):
        values, order = torch.sort(x.to("rbln"), dim=0, descending=descending, stable=True)
        expected = torch.sort(x, stable=True, descending=descending)
        _exact((values, order), expected)
        assert torch.equal(torch.signbit(values.cpu()), torch.signbit(expected.values))
    assert _row("aten::sort") == {"device": 2, "cpu": 0, "reasons": {}}


@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_scores_with_nan_and_infinities_stays_on_device(largest):
    # top-k sampling masks scores with -inf, then takes topk of them again: exact, so not scanned
    x = torch.tensor([SPECIALS, SPECIALS[::-1]])
    for k in (1, 3, 6):
        values, indices = torch.topk(x.to("rbln"), k, largest=largest)
        expected = torch.sort(x, stable=True, descending=largest)
        _exact((values, indices), (expected.values[:, :k], expected.indices[:, :k]))
    assert _row("aten::topk") == {"device": 3, "cpu": 0, "reasons": {}}


def test_sort_of_a_transposed_view_and_of_an_empty_dim():
    torch.manual_seed(2)
    x = torch.randn(5, 7)
    _exact(torch.sort(x.to("rbln").t(), dim=1), torch.sort(x.t(), stable=True, dim=1))
    empty = torch.sort(torch.empty(3, 0).to("rbln"), dim=1)
    assert empty.values.shape == (3, 0) and empty.indices.dtype == torch.int64


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [1, 2, 8])
def test_topk_of_router_scores(largest, k):
    torch.manual_seed(3)
    scores = torch.randn(32, 8).softmax(-1)
    actual = torch.topk(scores.to("rbln"), k, dim=-1, largest=largest)
    _exact(actual, torch.topk(scores, k, dim=-1, largest=largest))
    assert _row("aten::topk") == {"device": 1, "cpu": 0, "reasons": {}}


def test_topk_over_a_vocabulary_sized_row():
    torch.manual_seed(10)
    logits = torch.randn(4, 20000)  # longer than the rank kernel takes: select_kernel's threshold
    _exact(torch.topk(logits.to("rbln"), 50), torch.topk(logits, 50))
    _exact(torch.topk(logits.to("rbln"), 3, largest=False), torch.topk(logits, 3, largest=False))
    assert _row("aten::topk") == {"device": 2, "cpu": 0, "reasons": {}}


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("n", [8, 100, 1500])  # one line per CHUNK bucket of select_kernel (16, 128, 512)
def test_topk_threshold_ties_across_chunks_and_integer_extremes(largest, n):
    """select_kernel's threshold (the k-th key, found by bisection) with many elements equal to it: the
    first of them in index order complete the k, across the 512-element steps of a long line; int64's
    extremes (the largest key, whose successor wraps) and the threshold at a key exactly k reach."""
    torch.manual_seed(n)
    few_values = torch.randint(-2, 3, (3, n)).float()  # every threshold is tied many times over
    for k in (1, 5, min(n - 1, 64)):
        _exact(torch.topk(few_values.to("rbln"), k, largest=largest),
               tuple(t[:, :k] for t in torch.sort(few_values, stable=True, descending=largest)))
    info = torch.iinfo(torch.int64)
    extremes = torch.tensor([info.max, info.min, 0, -1, info.max, info.min, 1] * (n // 7 + 1))[:n]
    for k in (1, 2, 3):
        _exact(torch.topk(extremes.to("rbln"), k, largest=largest),
               tuple(t[:k] for t in torch.sort(extremes, stable=True, descending=largest)))
    assert _row("aten::topk")["cpu"] == 0


def test_topk_ties_take_the_lower_index_first_and_k_zero_is_empty():
    x = torch.tensor([[3.0, 1.0, 3.0, 2.0, 3.0]])
    values, indices = torch.topk(x.to("rbln"), 2)
    _exact((values, indices), (torch.tensor([[3.0, 3.0]]), torch.tensor([[0, 2]])))
    values, indices = torch.topk(x.to("rbln"), 0)
    assert values.shape == (1, 0) and indices.shape == (1, 0)


def test_topk_backward_scatters_on_device():
    torch.manual_seed(4)
    x = torch.randn(16, 8)
    weights = torch.randn(16, 2)
    expected_grad = torch.autograd.grad((torch.topk(x.requires_grad_(), 2).values * weights).sum(), x)[0]
    device_x = x.detach().to("rbln").requires_grad_()
    grad = torch.autograd.grad((torch.topk(device_x, 2).values * weights.to("rbln")).sum(), device_x)[0]
    _exact(grad, expected_grad)
    assert _row("aten::scatter_")["device"] + _row("aten::scatter")["device"] >= 1
    assert _row("aten::scatter_")["cpu"] == 0 and _row("aten::scatter")["cpu"] == 0


@pytest.mark.parametrize("dim", [0, 1])
def test_cumsum_float32_matches_the_cpu_exactly(dim):
    torch.manual_seed(5)
    x = torch.randn(700, 3) if dim == 0 else torch.randn(3, 700)  # 700: the scan carries over 3 blocks
    # torch's CPU cumsum accumulates float32 in double; so does the kernel, so the sums are the same
    _exact(torch.cumsum(x.to("rbln"), dim), torch.cumsum(x, dim))
    assert _row("aten::cumsum") == {"device": 1, "cpu": 0, "reasons": {}}


def test_cumsum_of_half_precision_within_its_rounding():
    torch.manual_seed(6)
    x = torch.rand(4, 513, dtype=torch.float16)
    torch.testing.assert_close(torch.cumsum(x.to("rbln"), 1).cpu(), torch.cumsum(x, 1), atol=0.25, rtol=2e-3)


def test_cumsum_integer_dtypes_and_in_place():
    counts = torch.tensor([3, 0, 5, 2], dtype=torch.int32)  # tokens per expert -> group offsets
    assert torch.cumsum(counts.to("rbln"), 0).dtype == torch.int64
    _exact(torch.cumsum(counts.to("rbln"), 0, dtype=torch.int32), torch.cumsum(counts, 0, dtype=torch.int32))
    _exact(torch.cumsum(torch.tensor([True, False, True]).to("rbln"), 0), torch.tensor([1, 1, 2]))
    wraps = torch.full((3,), 2**31 - 1, dtype=torch.int32)
    _exact(torch.cumsum(wraps.to("rbln"), 0, dtype=torch.int32), torch.cumsum(wraps, 0, dtype=torch.int32))
    x = torch.arange(10.0).to("rbln")
    x.cumsum_(0)
    _exact(x, torch.arange(10.0).cumsum(0))
    assert _row("aten::cumsum_")["device"] == 1


def test_scatter_last_write_wins_and_one_hot_runs_on_device():
    x = torch.zeros(2, 5)
    index = torch.tensor([[1, 1, 4], [0, 2, 0]])
    src = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    _exact(x.to("rbln").scatter(1, index.to("rbln"), src.to("rbln")), x.scatter(1, index, src))
    assert _row("aten::scatter")["device"] == 1
    labels = torch.tensor([3, 0, 2, 3])
    _exact(torch.nn.functional.one_hot(labels.to("rbln"), 5), torch.nn.functional.one_hot(labels, 5))
    assert _row("aten::scatter_")["cpu"] == 0


def test_scatter_with_src_larger_than_index_and_a_value():
    torch.manual_seed(7)
    x = torch.randn(3, 6)
    index = torch.tensor([[5], [0], [2]])
    src = torch.randn(3, 4)  # only src[:, :1] is read
    _exact(x.to("rbln").scatter_(1, index.to("rbln"), src.to("rbln")), x.clone().scatter_(1, index, src))
    _exact(x.to("rbln").scatter(1, index.to("rbln"), 2.5), x.scatter(1, index, 2.5))
    assert _row("aten::scatter")["cpu"] == 0 and _row("aten::scatter_")["cpu"] == 0


def test_declines_carry_reasons_and_keep_torch_errors():
    long_line = torch.randn(sorting._k("sorting").RANK_LIMIT + 1)
    _exact(torch.sort(long_line.to("rbln")), torch.sort(long_line))
    assert "rank kernel" in next(iter(_row("aten::sort")["reasons"]))
    ints = torch.tensor([5, 7], dtype=torch.int64)
    _exact(torch.zeros(3, dtype=torch.int64).to("rbln").scatter_add(0, torch.tensor([0, 0]).to("rbln"),
                                                                  ints.to("rbln")),
           torch.tensor([12, 0, 0]))
    assert "float32" in next(iter(_row("aten::scatter_add")["reasons"]))  # exact int sums on the CPU
    with pytest.raises(RuntimeError):
        torch.topk(torch.randn(4).to("rbln"), 5)
    with pytest.raises((RuntimeError, IndexError)):
        torch.zeros(4).to("rbln").scatter_(0, torch.tensor([4]).to("rbln"), 1.0)


def test_scatter_writes_only_its_destination():
    storage = torch.zeros(4, 6).to("rbln")
    middle = storage[1:3]  # a view inside a larger storage
    middle.scatter_(1, torch.tensor([[5], [0]]).to("rbln"), torch.ones(2, 1).to("rbln"))
    expected = torch.zeros(4, 6)
    expected[1, 5] = expected[2, 0] = 1.0
    _exact(storage, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_histc_puts_edge_values_where_the_cpu_does(dtype):
    torch.manual_seed(8)
    # up to ~230 per bin: bfloat16's own counts stop growing at 256 on the CPU (ours count in float32)
    x = torch.cat([torch.rand(1300) * 3 - 1, torch.linspace(-1, 2, 301), torch.tensor([-1.5, 2.5])]).to(dtype)
    for bins, low, high in ((7, -1.0, 2.0), (100, -0.3, 1.7), (3, 0.1, 0.2)):
        _exact(torch.histc(x.to("rbln"), bins, low, high), torch.histc(x, bins, low, high))
    assert _row("aten::histc") == {"device": 3, "cpu": 0, "reasons": {}}
    many = torch.full((3000,), 0.5, dtype=dtype)
    rounded = float(torch.tensor(3000.0).to(dtype))  # 3000 as the dtype holds it
    assert torch.histc(many.to("rbln"), 2, 0.0, 1.0).cpu().tolist() == [0.0, rounded]
    # NaN and infinities (which the dispatcher's NaN/Inf check sends to the CPU) are not counted
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.5, 2.0])
    _exact(sorting.histc(special.to("rbln"), 4, 0.0, 2.0), torch.histc(special, 4, 0.0, 2.0))


def test_histc_of_integers_counts_as_cuda_does():
    # transformers' MoE load-balancing loss: int32 expert ids, bins = experts, range [0, experts - 1]
    ids = torch.randint(0, 4, (64,), generator=torch.Generator().manual_seed(9), dtype=torch.int32)
    counts = torch.histc(ids.to("rbln"), bins=4, min=0, max=3)
    assert counts.dtype == torch.int32
    _exact(counts, torch.bincount(ids, minlength=4).to(torch.int32))
    assert _row("aten::histc") == {"device": 1, "cpu": 0, "reasons": {}}
    # no float64 staging copies on the CPU (the old fallback's path): everything ran on device
    assert all(row["cpu"] == 0 for row in registry.fallback_report().values())


def test_histc_with_the_range_from_the_data_declines():
    x = torch.tensor([1.0, 2.0, 2.0, 5.0])
    _exact(torch.histc(x.to("rbln"), bins=4), torch.histc(x, bins=4))
    assert "min >= max" in next(iter(_row("aten::histc")["reasons"]))


def _fuzz_line(generator: torch.Generator, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
    """Random values with many ties and, for floats, NaN, +-Inf and signed zeros; for integers the
    dtype's ends."""
    if dtype.is_floating_point:
        pool = torch.tensor([0.0, -0.0, 1.0, -1.0, float("inf"), -float("inf"), float("nan"), 2.5, 65504.0])
        x = (torch.randn(shape, generator=generator) * 3).round()
        picks = torch.rand(shape, generator=generator) < 0.3
        return torch.where(picks, pool[torch.randint(0, len(pool), shape, generator=generator)], x).to(dtype)
    info = torch.iinfo(dtype)
    x = torch.randint(max(info.min, -5), min(info.max, 5) + 1, shape, generator=generator)
    ends = torch.tensor([info.min, info.max])[torch.randint(0, 2, shape, generator=generator)]
    return torch.where(torch.rand(shape, generator=generator) < 0.2, ends, x).to(dtype)


@pytest.mark.slow
def test_fuzz_topk_against_the_stable_cpu_sort():
    """300 random topk calls (seeded): seven dtypes, 1-3 dims, lines of 2-3,000 (each of select_kernel's
    step sizes, one or several steps), k up to 64, either order, transposed layouts: values and indices
    equal torch's stable sort bit for bit (NaN and signed zeros included), and no call falls back."""
    generator = torch.Generator().manual_seed(2026)
    dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8, torch.int8]
    lengths = [2, 3, 7, 16, 17, 128, 129, 513, 1100, 3000]
    for case in range(300):
        pick = torch.randint(0, 1 << 30, (6,), generator=generator).tolist()
        dtype = dtypes[pick[0] % len(dtypes)]
        rank = 1 + pick[1] % 3
        dim = pick[2] % rank
        shape = [1 + (pick[3] >> (4 * d)) % 4 for d in range(rank)]
        shape[dim] = lengths[pick[4] % len(lengths)]
        k = 1 + pick[5] % min(64, shape[dim] - 1)
        largest = bool(pick[5] & 1 << 20)
        x = _fuzz_line(generator, dtype, shape)
        if rank > 1 and pick[0] & 1 << 25:
            x = x.transpose(0, rank - 1).contiguous().transpose(0, rank - 1)
        registry.reset_fallback_report()
        values, indices = torch.topk(x.to("rbln"), k, dim=dim, largest=largest)
        expected = torch.sort(x.float() if dtype in (torch.float16, torch.bfloat16) else x, dim=dim,
                              descending=largest, stable=True).indices.narrow(dim, 0, k)
        assert torch.equal(indices.cpu(), expected), (case, dtype, shape, dim, k, largest)
        taken = torch.gather(x, dim, expected)
        bits = {4: torch.int32, 2: torch.int16}.get(x.element_size()) if dtype.is_floating_point else None
        got = values.cpu()
        assert torch.equal(got.view(bits), taken.view(bits)) if bits else torch.equal(got, taken), case
        assert _row("aten::topk")["cpu"] == 0, case
