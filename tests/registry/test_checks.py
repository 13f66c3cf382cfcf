"""The generic per-call checks look only at values a kernel reads (SPEC-device.md, NaN/Inf checks)."""

from __future__ import annotations

import pytest
import torch
from torch_rbln.registry import _finite_numba, _finite_scan
from torch_rbln.registry._finite_scan import all_finite

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _row(name: str) -> dict:
    return registry.fallback_report().get(name, {"device": 0, "cpu": 0, "reasons": {}})


def test_nan_in_an_input_takes_the_exact_cpu_path():
    cpu = torch.tensor([1.0, float("nan"), 3.0, 4.0])
    x = cpu.to("rbln")
    registry.reset_fallback_report()
    torch.testing.assert_close(x.exp().cpu(), cpu.exp(), equal_nan=True)  # exp is scanned
    assert _row("aten::exp")["reasons"] == {"nan_inf": 1}
    # add is registered exact (IEEE arithmetic as on the CPU): NaN stays on the device
    torch.testing.assert_close((x + 1).cpu(), torch.tensor([2.0, float("nan"), 4.0, 5.0]), equal_nan=True)
    assert _row("aten::add") == {"device": 1, "cpu": 0, "reasons": {}}


def test_out_and_overwritten_tensors_are_not_value_checked():
    garbage = torch.tensor([float("nan"), float("inf"), 0.0, 1.0])
    a, b = torch.ones(4).to("rbln"), torch.full((4,), 2.0).to("rbln")
    out = garbage.to("rbln")
    registry.reset_fallback_report()
    torch.add(a, b, out=out)
    torch.testing.assert_close(out.cpu(), torch.full((4,), 3.0))
    stale = garbage.to("rbln")
    stale.zero_()
    stale2 = garbage.to("rbln")
    stale2.fill_(5.0)
    torch.testing.assert_close(stale.cpu(), torch.zeros(4))
    torch.testing.assert_close(stale2.cpu(), torch.full((4,), 5.0))
    for name in ("aten::add", "aten::zero_", "aten::fill_"):
        assert _row(name)["cpu"] == 0 and _row(name)["device"] == 1, registry.format_report()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_finite_scan_finds_every_nan_and_inf(dtype):
    base = torch.linspace(-1e3, 1e3, 3 * _finite_numba.CHUNK + 5).to(dtype)
    assert all_finite(base) and all_finite(base.to("rbln")) and all_finite(base[:0])
    for bad in (float("nan"), float("inf"), -float("inf")):
        # the first and last word of a chunk, the last of the whole chunks and the first of the tail
        for where in (0, _finite_numba.CHUNK - 1, _finite_numba.CHUNK, 3 * _finite_numba.CHUNK - 1,
                      3 * _finite_numba.CHUNK, base.numel() - 1):
            x = base.clone()
            x[where] = bad
            assert not all_finite(x), (bad, where)
            assert not all_finite(x.to("rbln")), (bad, where)
    for size in (1, 2, 7, 33, 1000):  # tensors below the chunk size: the tail alone
        small = base[:size].clone()
        assert all_finite(small)
        for where in range(0, size, max(1, size // 9)):
            x = small.clone()
            x[where] = float("nan") if where % 2 else float("inf")
            assert not all_finite(x) and not all_finite(x.to("rbln")), (size, where)
    info = torch.finfo(dtype)
    largest = torch.tensor([info.max, -info.max, info.tiny], dtype=dtype)
    assert all_finite(largest)


def test_a_strided_view_is_checked_only_where_it_reads():
    storage = torch.randn(8, 6)
    storage[:, 5] = float("nan")
    view = storage.to("rbln")[:, :5]  # not contiguous; the NaN column is outside it
    assert not view.is_contiguous()
    assert all_finite(view)
    assert not all_finite(storage.to("rbln")[:, 3:])


def test_inf_in_a_half_precision_input_takes_the_cpu_path():
    x = torch.tensor([1.0, 2.0, float("-inf"), 4.0], dtype=torch.bfloat16).to("rbln")
    registry.reset_fallback_report()
    torch.testing.assert_close(torch.exp(x).cpu(), torch.exp(x.cpu()))
    assert _row("aten::exp")["reasons"] == {"nan_inf": 1}


def test_the_scan_of_a_large_tensor_is_split_over_a_tensor_parallel_group(monkeypatch):
    import sys

    import torch_rbln.dsl.jit  # noqa: F401 - the module (the package attribute `jit` is the decorator)

    monkeypatch.setattr(sys.modules["torch_rbln.tp"], "device_tp", lambda index: 3)
    monkeypatch.setattr(_finite_scan, "PARALLEL_MIN", 1000)
    x = torch.randn(3001)
    assert all_finite(x.to("rbln"))
    for where in (0, 1000, 1999, 2000, 3000):  # in each third, and at the split points
        y = x.clone()
        y[where] = float("inf")
        assert not all_finite(y.to("rbln")), where


def test_a_transposed_weight_is_scanned_in_place_and_exactly():
    from torch_rbln.registry._finite_scan import _dense_permutation, all_finite

    w = torch.randn(16, 8)
    w[3, 5] = float("nan")
    dw = w.to("rbln")
    assert _dense_permutation(dw.t()) and not all_finite(dw.t())
    assert all_finite(dw[:, :5].t()) and not _dense_permutation(dw[:, :5].t())  # a slice: strided path
    assert _dense_permutation(torch.randn(2, 3, 4).to("rbln").permute(2, 0, 1))
    assert not _dense_permutation(torch.randn(4, 1, 3).to("rbln").expand(4, 5, 3))


def test_dense_permutation_agrees_with_torch() -> None:
    """The NaN/Inf scan's own dense-permutation test answers as torch's is_non_overlapping_and_dense
    on permuted, narrowed and expanded views (tensors with elements)."""
    import random

    from torch._prims_common import is_non_overlapping_and_dense_or_false
    from torch_rbln.registry._finite_scan import _dense_permutation

    rng = random.Random(0)
    dense = 0
    for _ in range(500):
        shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 4))]
        order = list(range(len(shape)))
        rng.shuffle(order)
        view = torch.empty(shape).permute(order)
        dim = rng.randrange(view.dim())
        if rng.random() < 0.3 and view.shape[dim] > 1:
            view = view.narrow(dim, 0, view.shape[dim] - 1)
        if rng.random() < 0.2:
            view = view.expand(2, *view.shape)
        expected = is_non_overlapping_and_dense_or_false(view)
        assert _dense_permutation(view) == expected, (view.shape, view.stride())
        dense += _dense_permutation(view)
    assert 0 < dense < 500  # both answers occur
