"""Shared machinery of the OpInfo sweep: run an OpInfo's first samples on CPU and on rbln, compare."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils._pytree import tree_map

DEVICE = "rbln:0"


def _to(value: Any, device: str) -> Any:
    def move(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            moved = x.detach().to(device)
            return moved.requires_grad_(x.requires_grad) if x.is_leaf and x.requires_grad else moved
        return x

    return tree_map(move, value)


def _to_cpu(value: Any) -> Any:
    return tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, value)


def compare(expected: Any, actual: Any, values: bool = True) -> None:
    """Results must match in structure, dtype, shape and (with `values`) values; rbln results stay on rbln."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"expected a tensor, got {type(actual)}"
        assert actual.device.type == "rbln", f"result on {actual.device}"
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        if values:
            torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, rtol=1.3e-6, atol=1e-5,
                                       check_stride=False)
    elif isinstance(expected, (list, tuple)):
        assert len(expected) == len(actual)
        for e, a in zip(expected, actual, strict=True):
            compare(e, a, values)
    elif values:
        assert expected == actual or (expected != expected and actual != actual), (expected, actual)


def run_opinfo(opinfo: Any, samples: int = 2) -> str:
    """'ok', 'skip: <why>' or raises AssertionError/Exception describing the mismatch."""
    if torch.float32 not in opinfo.supported_dtypes("cpu"):
        return "skip: no float32"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inputs = list(opinfo.sample_inputs("cpu", torch.float32, requires_grad=False))[:samples]
        if not inputs:
            return "skip: no samples"
        for sample in inputs:
            torch.manual_seed(0)
            try:
                expected = opinfo(sample.input, *sample.args, **sample.kwargs)
            except Exception:  # noqa: BLE001 - a sample CPU rejects says nothing about rbln
                continue
            device_input, device_args, device_kwargs = _to((sample.input, sample.args, sample.kwargs), DEVICE)
            if "device" in device_kwargs:  # factories: create on rbln instead of the sample's CPU
                device_kwargs = {**device_kwargs, "device": DEVICE}
            torch.manual_seed(0)
            actual = opinfo(device_input, *device_args, **device_kwargs)
            compare(_to_cpu(expected), actual, values=opinfo.name not in NONDETERMINISTIC)
    return "ok"


# Random or uninitialised outputs differ by construction: for these only the structure, dtype,
# shape and device of the results are compared.
NONDETERMINISTIC = {
    "bernoulli", "normal", "rand_like", "randint_like", "randn_like", "uniform", "multinomial",
    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "cauchy", "exponential",
    "geometric", "log_normal", "randint", "randn", "rand", "normal.number_mean", "nn.functional.rrelu",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d", "empty", "empty_like",
    "new_empty", "new_empty_strided", "empty_strided", "empty_permuted", "torch.empty",
    "nn.functional.multi_head_attention_forward",
}
