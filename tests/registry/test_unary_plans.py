"""Unary ops on strided views through plans (registry/elementwise.py `_strided_unary_plan`,
`_permuted_unary_plan`): RoPE's `-x[..., d:]` on every decoding step, a function of a transpose. Each is
planned once per signature, gives the checked implementation's bits and torch's result strides, and
leaves NaN/Inf inputs and views the copy kernel cannot express to the implementation."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

from .planned import general_path

X = torch.randn(2, 4, 3, 16, generator=torch.Generator().manual_seed(0))

VIEWS = {
    "last_dim_half": lambda x: x[..., 8:],  # rotate_half's second half: rows with a stride
    "step_slice": lambda x: x[:, ::2],
    "narrowed_middle": lambda x: x[:, 1:3, 1:],
    # torch's result strides differ from the input's on the size-1 dim
    "transpose_with_a_unit_dim": lambda x: x.reshape(2, 1, 4, 48).transpose(1, 3),
    "reversed_dims": lambda x: x.permute(3, 2, 1, 0),
}
OPS = {"neg": torch.neg, "exp": torch.exp, "sigmoid": torch.sigmoid}


def _memo(op: str) -> dict:
    return registry._kernels[f"{op}.default"].plans()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("view", list(VIEWS))
def test_a_unary_op_on_a_strided_view_is_planned_once_with_the_implementations_bits(view, op, dtype):
    x = X.to(dtype)
    source = x.to("rbln")
    with general_path():  # the reference: the checked implementation
        reference = OPS[op](VIEWS[view](source))
    memo = _memo(op)
    memo.clear()
    registry.reset_fallback_report()
    for _ in range(3):
        got = OPS[op](VIEWS[view](source))
        assert got.stride() == OPS[op](VIEWS[view](x)).stride()  # torch's layout
        assert torch.equal(got.cpu(), reference.cpu())
    plans = [plan for key, plan in memo.items() if key[0] == "strided"]
    assert len(plans) == 1 and plans[0].run is not None  # built once, then hit
    torch.testing.assert_close(got.cpu().float(), OPS[op](VIEWS[view](x)).float(), atol=2e-3, rtol=2e-3)
    assert registry.fallback_report()[f"aten::{op}"] == {"device": 3, "cpu": 0, "reasons": {}}


def test_neg_of_a_strided_view_is_exact_to_the_bit():
    x = torch.tensor([[0.0, -0.0, float("inf"), float("nan"), 1e-40, -3.5] * 2]).reshape(2, 6)
    got = -(x.to("rbln")[:, 1::2])
    assert torch.equal(got.cpu().view(torch.int32), (-(x[:, 1::2])).view(torch.int32))


def test_a_nan_or_inf_in_a_strided_view_goes_to_the_implementation():
    x = X.clone()
    x[0, 0, 0, 9] = float("nan")
    x[1, 2, 1, 12] = float("inf")
    memo = _memo("exp")
    memo.clear()
    got = torch.exp(x.to("rbln")[..., 8:])
    torch.testing.assert_close(got.cpu(), torch.exp(x[..., 8:]), equal_nan=True)
    assert len(memo) == 1  # the plan is kept; its run left this call to the implementation


def test_a_view_the_copy_kernel_cannot_express_keeps_no_plan():
    x = torch.randn(3, 3, 3, 3, 3, 4, generator=torch.Generator().manual_seed(2))
    view = lambda t: t[::2, :, ::2, :, ::2, ::3]  # noqa: E731 - five non-mergeable strided dims
    memo = _memo("neg")
    memo.clear()
    got = -view(x.to("rbln"))
    assert torch.equal(got.cpu(), -view(x))
    assert all(plan.run is None for plan in memo.values())


@pytest.mark.parametrize("exponent", [3, 0.5, 1, -1, 2.5, 2])
@pytest.mark.parametrize("view", ["step_slice", "reversed_dims"])
def test_pow_of_a_strided_view_with_a_number_exponent(view, exponent):
    """`pow(view, number)` keys a strided view by the unary plan's "strided" key (the square: by mul's,
    which leaves a strided view to the implementation); it once crashed the plan builder (a ValueError
    from the binary plan reading a unary key), so `x.t() ** 3` raised."""
    positive = X.abs() + 0.25  # (a fractional power of a negative number is NaN: an input the scan refuses)
    source = positive.to("rbln")
    with general_path():
        reference = torch.pow(VIEWS[view](source), exponent)
    registry.reset_fallback_report()
    for _ in range(2):
        got = torch.pow(VIEWS[view](source), exponent)
        assert torch.equal(got.cpu(), reference.cpu())
    torch.testing.assert_close(got.cpu(), torch.pow(VIEWS[view](positive), exponent), atol=1e-5, rtol=1e-5)
    assert registry.fallback_report()["aten::pow"]["cpu"] == 0


def _operand_cases() -> list:
    """Operands of the families' inline keys and of every way they hand the call back to the helpers."""
    dense = torch.randn(2, 3).to("rbln")
    return [dense, dense.t(), dense[:, :2], torch.randn(2, 3), dense.to(torch.float16), 2.0, 3, True]


def test_the_inline_keys_are_the_helpers_keys():
    """The common binary and unary calls build their key inline (`binary_family` / `unary_family`); each
    must be the key `_binary_key` / `_unary_key` give (a different key would plan a call wrongly)."""
    from torch_rbln.registry import elementwise

    binary, unary = elementwise.binary_family("add"), elementwise.unary_family("exp")
    cases = _operand_cases()
    for a in cases:
        if isinstance(a, torch.Tensor):
            assert unary.signature((a,), {}) == elementwise._unary_key("exp", a, 0.0, None)
        for b in cases:
            assert binary.signature((a, b), {}) == elementwise._binary_key("add", a, b, 1, None), (a, b)
