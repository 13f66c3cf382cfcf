"""The integer plans (registry/elementwise.py `integer_plan`): int32/int64 arithmetic, comparisons and
bitwise ops on bools and integers keyed per signature like the float ops, compared bit for bit (and
dtype for dtype) with torch's CPU kernels, from the first call and with the checked implementation
forbidden after it; and the number operands torch wraps to the tensor's dtype."""

from __future__ import annotations

import pytest
import torch
from torch_rbln.registry import elementwise, integer

import torch_rbln  # noqa: F401
from torch_rbln import registry

from .planned import planned


def _operands(dtype: torch.dtype, b_shape: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(len(b_shape) + dtype.itemsize)
    if dtype is torch.bool:
        return torch.rand(3, 5, generator=generator) > 0.5, torch.rand(b_shape, generator=generator) > 0.5
    return (torch.randint(-100, 100, (3, 5), dtype=dtype, generator=generator),
            torch.randint(-100, 100, b_shape, dtype=dtype, generator=generator))


# (dtype, op, b's shape: None for a number): every op kind, dtype and layout at least once; each is a
# kernel specialisation of its own, compiled once per fresh cache, so not their full product
SAME, ROW, COLUMN, NUMBER = (3, 5), (5,), (3, 1), None
CASES = [
    (torch.bool, "bitwise_and", SAME), (torch.bool, "bitwise_or", NUMBER), (torch.int32, "bitwise_xor", ROW),
    (torch.int64, "bitwise_and", COLUMN), (torch.int64, "add", SAME), (torch.int32, "add", NUMBER),
    (torch.int64, "sub", ROW), (torch.int32, "mul", COLUMN), (torch.int32, "lt", NUMBER),
    (torch.int64, "eq", SAME),
]


@pytest.fixture
def forbid_checked(monkeypatch):
    """After `forbid()`, a call that reaches the integer implementation fails (a counted CPU call)."""

    def refuse(*args, **kwargs):
        raise AssertionError("checked implementation reached")

    modules = (elementwise, integer)
    return lambda: [monkeypatch.setattr(module, "integer_binary", refuse) for module in modules]


IDS = [f"{op}-{str(dtype)[6:]}-{shape}" for dtype, op, shape in CASES]


@pytest.mark.parametrize(("dtype", "op", "b_shape"), CASES, ids=IDS)
def test_integer_calls_take_their_plan_with_torchs_results(dtype, op, b_shape, forbid_checked):
    a, b = _operands(dtype, b_shape or ())
    b = 7 if b_shape is None else b
    da, db = a.to("rbln"), b if b_shape is None else b.to("rbln")
    fn = getattr(torch, op)
    fn(da, db)  # the checked implementation launches it once and keeps its launch
    forbid_checked()
    registry.reset_fallback_report()
    for _ in range(2):  # the plan's first run (its checked launch), then its kept direct launch
        result = fn(da, db)
        expected = fn(a, b)
        assert result.dtype == expected.dtype and torch.equal(result.cpu(), expected)
    assert registry.fallback_report()[f"aten::{op}"]["cpu"] == 0


@pytest.mark.parametrize("op", ["add", "bitwise_xor"])
def test_in_place_and_out_forms_are_planned(op, forbid_checked):
    a, b = _operands(torch.int64, (5,))
    da, db = a.to("rbln"), b.to("rbln")
    out = torch.empty(3, 5, dtype=torch.int64, device="rbln")
    getattr(da.clone(), f"{op}_")(db)
    getattr(torch, op)(da, db, out=out)
    forbid_checked()
    in_place = da.clone()
    getattr(in_place, f"{op}_")(db)
    assert torch.equal(in_place.cpu(), getattr(torch, op)(a, b))
    getattr(torch, op)(da, db, out=out)
    assert torch.equal(out.cpu(), getattr(torch, op)(a, b))
    assert planned(f"{op}_.Tensor")((da.clone(), db), {}) is not None


def test_calls_the_plans_leave_to_the_implementation():
    a = torch.arange(6, dtype=torch.int32).to("rbln")
    torch.add(a, a)
    assert planned("add.Tensor")((a, 2**40), {}) is None  # a number needing 64 bits
    assert planned("add.Tensor")((a, 2.5), {}) is None  # a float number promotes to float
    assert planned("add.Tensor")((a, a), {"alpha": 1.5}) is None  # torch's error, from the CPU kernel
    assert planned("bitwise_and.Tensor")((a.float(), a.float()), {}) is None  # floats: declined
    assert planned("floor_divide.default")((a, 2), {}) is None  # the divisor's value is checked
    assert torch.equal(torch.add(a, 2.5).cpu(), torch.arange(6, dtype=torch.int32) + 2.5)
    with pytest.raises(RuntimeError, match="alpha"):
        torch.add(a, a, alpha=1.5)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32])
def test_numbers_beyond_the_dtype_wrap_as_torch_converts_them(dtype):
    """torch converts a number operand to the tensor's dtype (int32: 2**40 is 0, 2**33 + 5 is 5)."""
    a = torch.tensor([5, 44, 0, 127], dtype=dtype)
    da = a.to("rbln")
    ops = [torch.bitwise_and, torch.bitwise_or]
    if dtype is torch.int32:
        ops += [torch.lt, torch.eq, torch.ge, torch.add, torch.mul]
    for value in (300, -1, 2**33 + 5, -(2**35)):
        for op in ops:
            assert torch.equal(op(da, value).cpu(), op(a, value)), (op.__name__, value)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64])
def test_bitwise_not_is_planned_in_its_dtype(dtype, forbid_checked):
    x = (torch.arange(-6, 6) % 3).to(dtype)
    device = x.to("rbln")
    out = torch.empty_like(device)
    torch.bitwise_not(device)
    device.clone().bitwise_not_()
    torch.bitwise_not(device, out=out)
    forbid_checked()
    registry.reset_fallback_report()
    got = torch.bitwise_not(device)
    assert got.dtype == dtype and torch.equal(got.cpu(), torch.bitwise_not(x))
    in_place = device.clone()
    in_place.bitwise_not_()
    assert torch.equal(in_place.cpu(), torch.bitwise_not(x))
    torch.bitwise_not(device, out=out)
    assert torch.equal(out.cpu(), torch.bitwise_not(x))
    assert registry.fallback_report()["aten::bitwise_not"]["cpu"] == 0


@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.int64])
def test_fills_of_masks_and_ids_are_planned(dtype, forbid_checked):
    """`torch.full`/`ones`/`zeros_` of bool and integer tensors (generate's masks and counters, every
    step) take the integer kernel's fill plan, an integral float value (`ones` fills with 1.0) included;
    values the dtype does not hold, and int64 values beyond 32 bits, are the implementation's."""
    torch.ones(2, device="rbln").add(1)  # a kernel module is loaded: fills run on the device
    values = [0, 1, True, 1.0] + ([] if dtype is torch.bool else [-7, 2**31 - 1])
    for value in values:
        torch.full((3, 5), value, dtype=dtype, device="rbln")  # the plan's first (checked) launch
    forbid_checked()
    registry.reset_fallback_report()
    for value in values:
        got = torch.full((3, 5), value, dtype=dtype, device="rbln")
        assert got.dtype == dtype and torch.equal(got.cpu(), torch.full((3, 5), value, dtype=dtype)), value
    got = torch.ones(4, dtype=dtype, device="rbln")
    assert torch.equal(got.cpu(), torch.ones(4, dtype=dtype))
    got.zero_()
    assert torch.equal(got.cpu(), torch.zeros(4, dtype=dtype))
    assert registry.fallback_report()["aten::fill_"]["cpu"] == 0
    x = torch.zeros(3, dtype=dtype, device="rbln")
    assert planned("fill_.Scalar")((x, 2.5), {}) is None
    if dtype is torch.int64:
        assert planned("fill_.Scalar")((x, 2**40), {}) is None  # a number needing 64 bits
    if dtype is torch.bool:
        assert planned("fill_.Scalar")((x, 2), {}) is None  # the CPU decides what 2 means for a bool


@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "add", "mul", "eq", "maximum"])
def test_an_int_tensor_with_a_bool_tensor_is_planned_in_the_ints_dtype(op, forbid_checked):
    """`unfinished_sequences & ~finished` (every generation step): an int32/int64 tensor with a bool one,
    same shape or broadcast, takes the integer plan reading the bool as it is; torch's promotion (the
    int's dtype, bool for a comparison) and values, from the first call on."""
    ints = torch.tensor([[1, -2, 3], [0, 5, -7]])
    masks = torch.tensor([[True, False, True], [False, True, True]])
    fn = getattr(torch, op)
    for dtype in (torch.int64, torch.int32):
        a = ints.to(dtype)
        for mask in (masks, masks[0], masks[:, :1]):
            fn(a.to("rbln"), mask.to("rbln"))
    forbid_checked()
    for dtype in (torch.int64, torch.int32):
        a = ints.to(dtype)
        for mask in (masks, masks[0], masks[:, :1]):
            got, want = fn(a.to("rbln"), mask.to("rbln")), fn(a, mask)
            assert got.dtype == want.dtype and torch.equal(got.cpu(), want), (dtype, mask.shape)


@pytest.mark.parametrize(("a", "b"), [("int", "bool"), ("bool", "int"), ("bool", "bool"), ("float", "bool"),
                                      ("int", True)])
def test_subtracting_a_bool_raises_torchs_error(a, b):
    """torch refuses `-` with a bool operand ("use ~ or logical_not()"); the kernels would subtract, so
    the call takes the CPU, which raises that error."""
    tensors = {"int": torch.tensor([1, 2]), "bool": torch.tensor([True, False]),
               "float": torch.tensor([1.0, 2.0])}
    x = tensors[a]
    y = tensors[b] if isinstance(b, str) else b
    with pytest.raises(RuntimeError) as cpu:
        x - y
    with pytest.raises(RuntimeError) as rbln:
        x.to("rbln") - (y.to("rbln") if isinstance(y, torch.Tensor) else y)
    assert str(rbln.value) == str(cpu.value)
