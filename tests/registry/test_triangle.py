"""tril / triu (+ in place) on device: exact for every dtype, -inf causal masks included (the ops are
`exact`: no NaN/Inf scan), batched and strided inputs, any diagonal."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

INPUTS = {
    "float32 wide": lambda: torch.randn(5, 7),
    "batched 3-d": lambda: torch.randn(3, 6, 4),
    "batched 4-d": lambda: torch.randn(2, 3, 5, 5),
    "-inf causal mask": lambda: torch.full((6, 6), float("-inf")),
    "bool mask": lambda: torch.ones(4, 4, dtype=torch.bool),
    "int64": lambda: torch.arange(20).reshape(4, 5),
    "several tiles": lambda: torch.randn(40, 130),
    "transposed view": lambda: torch.randn(6, 5).t(),
    "float16 with nan": lambda: torch.tensor([[1.0, float("nan")], [3.0, 4.0]], dtype=torch.float16),
}


@pytest.mark.parametrize("make", INPUTS.values(), ids=INPUTS.keys())
def test_tril_triu_equal_the_cpu_on_device(make):
    x = make()
    device = x.to("rbln")
    registry.reset_fallback_report()
    for diagonal in (0, 1, -2, 100, -100):
        for op in (torch.tril, torch.triu):
            got = op(device, diagonal)
            assert got.is_contiguous() and got.dtype == x.dtype
            torch.testing.assert_close(got.cpu(), op(x, diagonal), atol=0, rtol=0, equal_nan=True)
    report = registry.fallback_report()
    for name in ("aten::tril", "aten::triu"):
        assert report[name] == {"device": 5, "cpu": 0, "reasons": {}}, registry.format_report(report)


def test_in_place_forms_and_what_declines():
    x = torch.randn(2, 5, 6)
    device = x.to("rbln")
    registry.reset_fallback_report()
    device.triu_(1)
    assert torch.equal(device.cpu(), x.triu(1))
    host = torch.randn(6, 5)
    strided = host.to("rbln").t()
    strided.tril_()  # not contiguous: computed on a contiguous copy, written back by the copy kernel
    assert torch.equal(strided.cpu(), host.t().tril())
    assert registry.fallback_report()["aten::tril_"] == {"device": 1, "cpu": 0, "reasons": {}}
    with pytest.raises(RuntimeError):  # torch's own error for a 1-d input, from the CPU
        torch.tril(torch.ones(3, device="rbln"))
