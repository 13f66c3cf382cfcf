"""addcmul, addcdiv and lerp (registry/ternary.py, `ternary_tiled_kernel`): every form (new, `out=`, in
place; lerp with a number and a tensor weight) against the CPU bit for bit in each float dtype, with
broadcasting and torch's result layout; every pair of special values (the ops are registered exact:
their inputs are not scanned); what declines to the CPU fallback, and that it is visible."""

from __future__ import annotations

import math

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def _device_calls(*names: str) -> tuple[int, int]:
    report = registry.fallback_report()
    rows = [report.get(f"aten::{name}", {"device": 0, "cpu": 0}) for name in names]
    return sum(row["device"] for row in rows), sum(row["cpu"] for row in rows)


def _same_bits(got: torch.Tensor, expected: torch.Tensor) -> None:
    got = got.cpu()
    assert got.dtype == expected.dtype and got.shape == expected.shape and got.stride() == expected.stride()
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
    finite_or_inf = ~torch.isnan(expected)
    assert torch.equal(torch.signbit(got[finite_or_inf]), torch.signbit(expected[finite_or_inf]))


def _operands(dtype: torch.dtype, *shapes: tuple[int, ...]) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    return [torch.randn(shape, generator=generator).to(dtype) for shape in shapes]


CALLS = {
    "addcmul": lambda a, b, c: torch.addcmul(a, b, c, value=0.3),
    "addcdiv": lambda a, b, c: torch.addcdiv(a, b, c, value=-0.7),
    "lerp_scalar_small": lambda a, b, c: torch.lerp(a, b, 0.3),
    "lerp_scalar_large": lambda a, b, c: torch.lerp(a, b, 0.9),
    "lerp_tensor": lambda a, b, c: torch.lerp(a, b, c * 0.8 + 0.4),  # weights on both sides of 0.5
}
# shapes of (self, tensor1/end, tensor2/weight): same shape (one flat run), broadcast rows and columns,
# a 4-d broadcast, and more elements than one tile
SHAPES = [((5, 7), (5, 7), (5, 7)), ((5, 7), (1, 7), (5, 1)), ((2, 1, 3, 4), (3, 1), (2, 3, 3, 4)),
          ((70, 130), (70, 130), (130,))]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("call", sorted(CALLS))
def test_each_op_gives_the_cpus_bits_on_device(call, dtype):
    """Every layout in float32; half types (each dtype and tile its own compile) on the first two."""
    registry.reset_fallback_report()
    shapes_tried = SHAPES if dtype is torch.float32 else SHAPES[:2]
    for shapes in shapes_tried:
        cpu = _operands(dtype, *shapes)
        expected = CALLS[call](*cpu)
        _same_bits(CALLS[call](*(t.to("rbln") for t in cpu)), expected)
    device, on_cpu = _device_calls("addcmul", "addcdiv", "lerp")
    assert on_cpu == 0 and device >= len(shapes_tried)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_in_place_and_out_forms_match_the_cpu(dtype):
    a, b, c = _operands(dtype, (6, 9), (6, 9), (1, 9))
    c = c.abs() + 0.5
    registry.reset_fallback_report()
    for _name, step in [("addcmul_", lambda x, dev: x.addcmul_(b.to(dev), c.to(dev), value=2)),
                        ("addcdiv_", lambda x, dev: x.addcdiv_(b.to(dev), c.to(dev), value=-1)),
                        ("lerp_", lambda x, dev: x.lerp_(b.to(dev), 0.1)),
                        ("lerp_", lambda x, dev: x.lerp_(b.to(dev), c.to(dev)))]:
        expected, got = a.clone(), a.to("rbln")
        pointer = got.data_ptr()
        step(expected, "cpu")
        assert step(got, "rbln") is got and got.data_ptr() == pointer
        _same_bits(got, expected)
    for function, keywords in [(torch.addcmul, {"value": 0.5}), (torch.addcdiv, {"value": 3})]:
        target = torch.empty(6, 9, dtype=dtype, device="rbln")
        assert function(a.to("rbln"), b.to("rbln"), c.to("rbln"), out=target, **keywords) is target
        _same_bits(target, function(a, b, c, **keywords))
    target = torch.empty(6, 9, dtype=dtype, device="rbln")
    torch.lerp(a.to("rbln"), b.to("rbln"), c.to("rbln"), out=target)
    _same_bits(target, torch.lerp(a, b, c))
    assert _device_calls("addcmul", "addcmul_", "addcdiv", "addcdiv_", "lerp", "lerp_")[1] == 0


def test_a_transposed_input_gives_torchs_result_layout():
    a, b, c = _operands(torch.float32, (8, 5), (8, 5), (8, 5))
    expected = torch.addcmul(a.t(), b.t(), c.t())
    got = torch.addcmul(a.to("rbln").t(), b.to("rbln").t(), c.to("rbln").t())
    assert got.stride() == expected.stride() == (1, 5)
    _same_bits(got, expected)


def _specials(dtype: torch.dtype) -> torch.Tensor:
    info = torch.finfo(dtype)
    values = [math.nan, math.inf, -math.inf, 0.0, -0.0, info.tiny / 4, -info.max, info.max, 1.0, -2.5,
              0.49999997, 0.5, -0.5]
    return torch.tensor(values, dtype=torch.float32).to(dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_every_triple_of_special_values_matches_the_cpu_on_device(dtype):
    """The ops are registered exact: NaN, +-Inf, signed zeros, subnormals and the dtype's extremes in
    every operand (and in the number) give the CPU's bits, and no call goes to the CPU."""
    s = _specials(dtype)
    n = s.numel()
    a, b, c = (s.view(*(n if d == axis else 1 for d in range(3))).expand(n, n, n).contiguous()
               for axis in range(3))
    registry.reset_fallback_report()
    cases = [lambda x, y, z: torch.addcmul(x, y, z, value=0.75),
             lambda x, y, z: torch.addcmul(x, y, z, value=math.inf),
             lambda x, y, z: torch.addcdiv(x, y, z, value=-1.5),
             lambda x, y, z: torch.lerp(x, y, z)]
    weights = (0.0, 0.3, 0.5, 1.0, -2.0, math.inf, math.nan)
    cases += [lambda x, y, z, w=w: torch.lerp(x, y, w) for w in weights]
    for case in cases:
        _same_bits(case(*(t.to("rbln") for t in (a, b, c))), case(a, b, c))
    device, on_cpu = _device_calls("addcmul", "addcdiv", "lerp")
    assert on_cpu == 0 and device == len(cases)


@pytest.mark.parametrize("case, reason", [
    ("mixed dtypes", "operands of several dtypes"),
    ("float64", "dtype float64"),
])
def test_what_the_kernel_does_not_take_runs_on_the_cpu_visibly(case, reason):
    a, b, c = _operands(torch.float32, (4, 6), (4, 6), (4, 6))
    registry.reset_fallback_report()
    if case == "mixed dtypes":
        expected = torch.addcmul(a, b.half(), c)
        got = torch.addcmul(a.to("rbln"), b.half().to("rbln"), c.to("rbln"))
    else:
        expected = torch.lerp(a.double(), b.double(), 0.25)
        got = torch.lerp(a.double().to("rbln"), b.double().to("rbln"), 0.25)
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)
    reasons = {r for row in registry.fallback_report().values() for r in row["reasons"]}
    assert any(reason in r for r in reasons), reasons


def test_torchs_errors_come_from_the_cpu():
    a, b, c = (t.to("rbln") for t in _operands(torch.float32, (3, 1), (3, 4), (3, 4)))
    with pytest.raises(RuntimeError):
        a.addcmul_(b, c)  # the result needs broadcasting of self
    with pytest.raises(RuntimeError, match="Integer division"):
        torch.addcdiv(a.long(), b.long(), c.long())
    # self and tensor1 one buffer, tensor1 one row further on: the kernel declines ("an operand
    # overlaps self") and the CPU fallback raises torch's overlap error (host views of one rbln storage
    # are separate CPU storages, so the call is replayed on copies that alias as the rbln tensors do)
    base = torch.randn(5, 6).to("rbln")
    with pytest.raises(RuntimeError, match="single memory location"):
        base[:4].addcdiv_(base[1:], c[:4] + 1)
    with pytest.raises(RuntimeError, match="single memory location"):
        base[:4].add_(base[1:])  # any in-place op (the fallback's replay is not ternary's)
    # a strided operand whose first elements lie before self but whose span reaches into it (elements
    # 1, 4, ..., 28 of a buffer whose 20..29 are self): found by its span, not its byte count, so the
    # call declines and the CPU computes it in its own element order (torch raises nothing for it: its
    # overlap check gives up on strided operands); the kernel, reading a tile before writing it, differed
    flat = torch.randn(30, generator=torch.Generator().manual_seed(13))
    expected = flat.clone()
    expected[20:].addcmul_(expected[1:30:3], torch.full((10,), 0.5))
    registry.reset_fallback_report()
    device_flat = flat.to("rbln")
    device_flat[20:].addcmul_(device_flat[1:30:3], torch.full((10,), 0.5, device="rbln"))
    assert torch.equal(device_flat.cpu(), expected)
    assert registry.fallback_report()["aten::addcmul_"]["reasons"] == {"an operand overlaps self": 1}
