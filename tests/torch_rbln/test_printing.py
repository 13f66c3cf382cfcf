"""Printing rbln tensors: the same text as torch's own formatter on the tensor, from one host copy."""

from __future__ import annotations

import re

import pytest
import torch
import torch._tensor_str as tensor_str

import torch_rbln  # noqa: F401
from torch_rbln import registry

TORCH_STR = tensor_str._str.__wrapped__  # torch's own `_str`, which formats on the device

CASES = {
    "float32 matrix": lambda: torch.randn(3, 4),
    "int64": lambda: torch.arange(-5, 5),
    "nan and inf": lambda: torch.tensor([1.5, float("nan"), float("inf"), -float("inf")]),
    "summarised (more than 1000 elements)": lambda: torch.randn(200, 300),
    "float16 (dtype suffix)": lambda: torch.randn(2, 3).half(),
    "bfloat16": lambda: torch.randn(5).bfloat16(),
    "bool": lambda: torch.tensor([True, False]),
    "empty (size suffix)": lambda: torch.empty(0, 3),
    "0-dim": lambda: torch.tensor(2.5),
    "strided view": lambda: torch.randn(4, 6)[:, ::2],
    "large and small values (scientific)": lambda: torch.tensor([1e-8, 1e10, 3.0]),
}


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_repr_is_the_host_text_plus_the_device(make):
    torch.manual_seed(0)
    host = make()
    x = host.to("rbln")
    registry.reset_fallback_report()
    text = repr(x)
    assert registry.fallback_report() == {}  # no kernel and no CPU fallback: one copy to the host
    assert "device='rbln:0'" in text
    # suffixes start a new line where the last line would pass the line width, so compare the words
    assert _words(re.sub(r",\s*device='rbln:0'", "", text)) == _words(repr(host))


def test_repr_matches_torch_formatting_on_the_device():
    """Differential: torch's own formatter run on the rbln tensor (twenty-odd device ops and fallbacks)
    writes the same text."""
    torch.manual_seed(0)
    for host in (torch.randn(40, 30) * 1e3, torch.tensor([1e-8, float("nan"), -float("inf"), 3.0])):
        x = host.to("rbln")
        assert repr(x) == TORCH_STR(x)


def test_autograd_suffixes_and_parameters_come_from_the_device_tensor():
    leaf = torch.ones(3, device="rbln", requires_grad=True)
    assert repr(leaf) == "tensor([1., 1., 1.], device='rbln:0', requires_grad=True)"
    assert repr(leaf * 2) == "tensor([2., 2., 2.], device='rbln:0', grad_fn=<MulBackward0>)"
    parameter = torch.nn.Parameter(torch.zeros(2, device="rbln"))
    assert repr(parameter) == "Parameter containing:\ntensor([0., 0.], device='rbln:0', requires_grad=True)"
    assert str(parameter.data) == "tensor([0., 0.], device='rbln:0')"


def test_other_devices_and_custom_contents_keep_torch_path():
    assert repr(torch.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    x = torch.ones(2, device="rbln")
    assert x.__repr__(tensor_contents="[custom]") == "tensor([custom], device='rbln:0')"
    assert "size=(2,)" in repr(torch.empty(2, device="meta"))
