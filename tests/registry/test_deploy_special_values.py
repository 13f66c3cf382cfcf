"""Every table entry's OpInfo samples with special values in their inputs, in deploy mode (slow).

With `TORCH_RBLN_DEPLOY=ON` no input is scanned for NaN/Inf, so each kernel meets infinities, NaN,
signed zeros and subnormals itself. For the first float32 samples of every OpInfo of the table, a fifth
of each floating input's elements are replaced by such values; the result on rbln must be the CPU's:
the same NaN positions and infinities, finite values within 1e-4. Session 38's sweep found only the
departures of torch's CPU kernels listed in `TORCH_QUIRKS` (ours keep the limit or C's value).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch_rbln.registry.table import TABLE

import torch_rbln  # noqa: F401

op_db = pytest.importorskip("torch.testing._internal.common_methods_invocations").op_db

SPECIALS = torch.tensor([math.inf, -math.inf, math.nan, -0.0, 0.0, 1e-40])
SAMPLES = 3
# torch's CPU gives NaN: gelu(+inf) in its vector code, and the mean `var_mean` / `std_mean` return for a
# row holding an infinity (its Welford update); ours: +-inf, as `gelu`'s limit and `mean` give
TORCH_QUIRKS = frozenset({"nn.functional.gelu", "var_mean", "std_mean"})
# equal values' indices are an open choice (topk's order of ties: two infinities, 0.0 and -0.0): the
# values are compared, and each index must point at its value
ORDER_OPEN = frozenset({"topk"})
OPINFOS = sorted({entry.opinfo for entry in TABLE if entry.opinfo} - TORCH_QUIRKS)


def _opinfo(spec: str):
    name, _, variant = spec.partition(":")
    return next(info for info in op_db if info.name == name and info.variant_test_name == variant)


def _with_specials(value, generator: torch.Generator):
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or not value.numel() or \
            not value.is_contiguous():
        return value
    value = value.clone()
    flat = value.view(-1)
    count = max(1, flat.numel() // 5)
    places = torch.randperm(flat.numel(), generator=generator)[:count]
    flat[places] = SPECIALS[torch.randint(len(SPECIALS), (count,), generator=generator)]
    return value


def _on_device(value):
    return value.to("rbln") if isinstance(value, torch.Tensor) else value


def _assert_same(actual, expected, where: str) -> None:
    if isinstance(expected, (tuple, list)):
        for a, e in zip(actual, expected, strict=True):
            _assert_same(a, e, where)
        return
    if not isinstance(expected, torch.Tensor):
        return
    actual = actual.cpu()
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, where
    if not expected.is_floating_point():
        assert torch.equal(actual, expected), where
        return
    assert torch.equal(actual.isnan(), expected.isnan()), where
    for sign in (1, -1):
        assert torch.equal(actual * sign == math.inf, expected * sign == math.inf), where
    torch.testing.assert_close(actual.nan_to_num(0.0, 0.0, 0.0), expected.nan_to_num(0.0, 0.0, 0.0),
                               rtol=1e-4, atol=1e-5, msg=lambda m: f"{where}: {m}")


@pytest.mark.slow
@pytest.mark.parametrize("spec", OPINFOS)
def test_an_entry_gives_the_cpus_special_values_in_deploy_mode(spec, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_DEPLOY", "ON")
    info = _opinfo(spec)
    if torch.float32 not in info.supported_dtypes("cpu"):
        pytest.skip(f"{spec} has no CPU float32")
    generator = torch.Generator().manual_seed(0)
    for number, sample in enumerate(info.sample_inputs("cpu", torch.float32, requires_grad=False)):
        if number >= SAMPLES:
            break
        sample = sample.transform(lambda value: _with_specials(value, generator))
        try:
            expected = info.op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - a sample the CPU refuses with these values is not compared
            continue
        device = sample.transform(_on_device)
        actual = info.op(device.input, *device.args, **device.kwargs)
        where = f"{spec} sample {number}"
        if spec in ORDER_OPEN:
            (values, indices), (expected_values, _) = actual, expected
            _assert_same(values, expected_values, where)
            dim = sample.args[1] if len(sample.args) > 1 else sample.kwargs.get("dim", -1)
            _assert_same(sample.input.gather(dim, indices.cpu()), expected_values, where)
        else:
            _assert_same(actual, expected, where)
