"""add, sub, mul, div (true division), the comparisons, neg and abs, cat (and sigmoid, tanh, silu, mm, bmm,
addmm, with finite values within their tolerances) are registered `exact`: their
kernels compute torch's CPU results for every input, NaN and Inf included, so their inputs are not
scanned for NaN/Inf and such calls stay on the device. These tests are what makes that claim safe:
every pair of special values (NaN, +-Inf, +-0, subnormal, the dtype's largest value) in each float
dtype, tensor-tensor with broadcasting, tensor-scalar, alpha, in place and out=, must equal the CPU
result exactly (NaN where the CPU has NaN, the sign of zero and of Inf included)."""

from __future__ import annotations

import math
import operator

import pytest
import torch

import torch_rbln  # noqa: F401
from torch_rbln import registry

FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def _specials(dtype: torch.dtype) -> torch.Tensor:
    info = torch.finfo(dtype)
    values = [math.nan, math.inf, -math.inf, 0.0, -0.0, info.tiny / 4, -info.max, info.max, 1.0, -2.5, 3.0]
    return torch.tensor(values, dtype=torch.float32).to(dtype)


def _same(got: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal values, NaN where the CPU has NaN, and the same sign bits on zeros and Infs."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if got.dtype.is_floating_point:
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
        finite_or_inf = ~torch.isnan(expected)
        assert torch.equal(torch.signbit(got[finite_or_inf]), torch.signbit(expected[finite_or_inf]))
    else:
        assert torch.equal(got, expected)


def _row(op: str) -> dict:
    return registry.fallback_report().get(op, {"device": 0, "cpu": 0, "reasons": {}})


def _rows(name: str) -> dict:
    """The op's and its in-place form's rows together (`aten::add` and `aten::add_`)."""
    rows = [_row(f"aten::{name}"), _row(f"aten::{name}_")]
    reasons: dict = {}
    for row in rows:
        for reason, count in row["reasons"].items():
            reasons[reason] = reasons.get(reason, 0) + count
    return {"device": sum(r["device"] for r in rows), "cpu": sum(r["cpu"] for r in rows), "reasons": reasons}


ARITHMETIC = [torch.add, torch.sub, torch.mul, torch.div]
COMPARISONS = [torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge]


# Each (op, half dtype) is a compiled specialisation or more, and compiling is most of the suite's cold
# time: by default float16/bfloat16 run one fast-path arithmetic op, true division and one comparison
# (the rounding on store is the same code for every op); `-m slow` runs the whole matrix.
HALF_SUBSET = frozenset({"add", "div", "lt"})


def _matrix() -> list:
    cases = []
    for op in ARITHMETIC + COMPARISONS:
        for dtype in FLOATS:
            slow = dtype != torch.float32 and op.__name__ not in HALF_SUBSET
            cases.append(pytest.param(op, dtype, marks=pytest.mark.slow if slow else (),
                                      id=f"{op.__name__}-{str(dtype).replace('torch.', '')}"))
    return cases


@pytest.mark.parametrize(("op", "dtype"), _matrix())
def test_every_pair_of_special_values_matches_the_cpu_on_device(op, dtype):
    values = _specials(dtype)
    a, b = values[:, None], values[None, :]  # every pair, through broadcasting
    registry.reset_fallback_report()
    _same(op(a.to("rbln"), b.to("rbln")).cpu(), op(a, b))
    grid_a, grid_b = a.expand(-1, len(values)).contiguous(), b.expand(len(values), -1).contiguous()
    _same(op(grid_a.to("rbln"), grid_b.to("rbln")).cpu(), op(grid_a, grid_b))  # same-shape operands
    for scalar in (math.nan, math.inf, -math.inf, 0.0, -0.0, 2.0):
        _same(op(values.to("rbln"), scalar).cpu(), op(values, scalar))
    row = _row(f"aten::{op.__name__}")
    assert row["cpu"] == 0 and row["device"] == 8, row


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("name", ["add", "sub"])
def test_alpha_in_place_and_out_on_special_values(name, dtype):
    """alpha 1 is exact on the device; another alpha's `alpha * b` can overflow where torch's fused
    multiply-add does not (Inf + 2 * -max: Inf on the CPU, Inf - Inf = NaN unfused), so those calls
    still scan and send NaN/Inf to the CPU."""
    values = _specials(dtype)
    a, b = values[:, None].expand(-1, len(values)).contiguous(), values[None, :].expand(len(values), -1)
    b = b.contiguous()
    op, op_ = getattr(torch, name), f"{name}_"
    registry.reset_fallback_report()
    _same(op(a.to("rbln"), b.to("rbln"), alpha=1).cpu(), op(a, b, alpha=1))
    target = a.clone().to("rbln")
    getattr(target, op_)(b.to("rbln"))
    _same(target.cpu(), getattr(a.clone(), op_)(b))
    out = torch.empty_like(a).to("rbln")
    op(a.to("rbln"), b.to("rbln"), out=out)
    _same(out.cpu(), op(a, b))
    assert _rows(name) == {"device": 3, "cpu": 0, "reasons": {}}
    for alpha in (2.0, -0.5, 0):  # alpha 0 times Inf is NaN, as on the CPU
        _same(op(a.to("rbln"), b.to("rbln"), alpha=alpha).cpu(), op(a, b, alpha=alpha))
    target = a.clone().to("rbln")
    getattr(target, op_)(b.to("rbln"), alpha=3.0)
    _same(target.cpu(), getattr(a.clone(), op_)(b, alpha=3.0))
    assert _rows(name)["reasons"] == {"nan_inf": 4}
    # finite values with alpha 2 stay on the device (away from the float max, where alpha * b alone
    # overflows: torch's fused multiply-add does not, a known difference of the unfused kernel)
    finite = a.nan_to_num(0.0, 1.0, -1.0).clamp(-1e4, 1e4)
    _same(op(finite.to("rbln"), finite.to("rbln"), alpha=2.0).cpu(), op(finite, finite, alpha=2.0))
    assert _rows(name)["device"] == 4


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", ["neg", "abs", "relu"])
def test_unary_special_values_match_the_cpu_on_device(name, dtype):
    """neg, abs and relu (which keeps NaN and -0.0, as torch's does)."""
    values = _specials(dtype)
    registry.reset_fallback_report()
    _same(getattr(torch, name)(values.to("rbln")).cpu(), getattr(torch, name)(values))
    target = values.clone().to("rbln")
    getattr(target, f"{name}_")()
    _same(target.cpu(), getattr(values.clone(), f"{name}_")())
    calls = 2
    if name != "relu":  # relu has no out= overload
        out = torch.empty_like(values).to("rbln")
        getattr(torch, name)(values.to("rbln"), out=out)
        _same(out.cpu(), getattr(torch, name)(values))
        calls = 3
    assert _rows(name) == {"device": calls, "cpu": 0, "reasons": {}}


def _same_specials(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float,
                   signed_zeros: bool = False) -> None:
    """For the exact ops whose finite values differ from the CPU's by rounding: NaN exactly where the CPU
    has NaN, the same signed Inf where it has Inf (with `signed_zeros`, the sign of every number too),
    finite values within atol/rtol."""
    got, expected = got.cpu().float(), expected.float()
    assert torch.equal(torch.isnan(got), torch.isnan(expected))
    assert torch.equal(got[torch.isinf(expected)], expected[torch.isinf(expected)])
    if signed_zeros:
        number = ~torch.isnan(expected)
        assert torch.equal(torch.signbit(got[number]), torch.signbit(expected[number]))
    finite = torch.isfinite(expected)
    torch.testing.assert_close(got[finite], expected[finite], atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", ["sigmoid", "tanh", "silu"])
def test_activations_give_the_cpus_nan_inf_and_signed_zeros_on_device(name, dtype):
    """sigmoid, tanh and silu: NaN, the limits at +-Inf (silu(-inf) is -inf * 0 = NaN, as torch's) and
    the sign of every zero exactly; finite values within a few float32 ulps (rounded to the dtype), also
    near float32's exp overflow and past the switch points of the kernels' formulas. In place and out=."""
    finite = [88.0, -88.0, 88.72, -88.72, 89.0, -89.0, 1e4, -1e4, 0.625, -0.625, 1e-8, -1e-8, 17.0, -44.0]
    values = torch.cat([_specials(dtype), torch.tensor(finite).to(dtype),
                        (torch.randn(500, generator=torch.Generator().manual_seed(0)) * 30).to(dtype)])
    function = torch.nn.functional.silu if name == "silu" else getattr(torch, name)
    expected = function(values)
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-3}

    def check(got: torch.Tensor) -> None:
        _same_specials(got, expected, **tolerance, signed_zeros=True)

    registry.reset_fallback_report()
    check(function(values.to("rbln")))
    target = values.clone().to("rbln")
    if name == "silu":
        torch.nn.functional.silu(target, inplace=True)
    else:
        getattr(target, f"{name}_")()
    check(target)
    out = torch.empty_like(values).to("rbln")
    out_form = torch.ops.aten.silu.out if name == "silu" else getattr(torch, name)
    out_form(values.to("rbln"), out=out)
    check(out)
    assert _rows(name) == {"device": 3, "cpu": 0, "reasons": {}}


def test_inplace_div_and_mul_by_special_scalars_stay_on_device():
    values = _specials(torch.float32)
    registry.reset_fallback_report()
    for op in (operator.imul, operator.itruediv):
        for scalar in (math.inf, -0.0, math.nan):
            device = values.clone().to("rbln")
            op(device, scalar)
            _same(device.cpu(), op(values.clone(), scalar))
    assert _rows("mul")["cpu"] == 0 and _rows("div")["cpu"] == 0
    assert _rows("mul")["device"] == 3 and _rows("div")["device"] == 3


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_where_and_masked_fill_move_special_values_on_device(dtype):
    """where and masked_fill select: NaN, infinities and signed zeros pass through, from the tensor and
    from the fill value (a top-k sampler masks scores with -inf), on the plan's path (first call and
    later ones) and the checked one (a CPU scalar operand, in place)."""
    values = _specials(dtype)
    mask = torch.arange(values.numel()) % 3 == 0
    other = values.flip(0)
    registry.reset_fallback_report()
    for _ in range(2):  # the first call builds the plan, the second runs it
        _same(torch.where(mask.to("rbln"), values.to("rbln"), other.to("rbln")).cpu(),
              torch.where(mask, values, other))
    for fill in (-math.inf, math.nan, -0.0, torch.tensor(math.inf, dtype=dtype)):
        device_fill = fill.to("rbln") if isinstance(fill, torch.Tensor) else fill
        _same(values.to("rbln").masked_fill(mask.to("rbln"), device_fill).cpu(),
              values.masked_fill(mask, fill))
        target = values.clone().to("rbln")
        target.masked_fill_(mask.to("rbln"), device_fill)
        _same(target.cpu(), values.clone().masked_fill_(mask, fill))
    _same(torch.where(mask.to("rbln"), values.to("rbln"), -math.inf).cpu(),
          torch.where(mask, values, -math.inf))
    assert _rows("where") == {"device": 3, "cpu": 0, "reasons": {}}
    assert _rows("masked_fill") == {"device": 8, "cpu": 0, "reasons": {}}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_cat_copies_special_values_bit_for_bit_on_device(dtype):
    """cat moves values: NaN, infinities, signed zeros and subnormals come out as they went in, through
    the pair kernel (two small inputs, plan and implementation), the per-input copies (three inputs;
    a non-contiguous one) and a large cat, with no input scanned and every call on the device."""
    values = _specials(dtype).repeat(3, 1)
    wide = values.repeat(1, 200)  # 3 x 2,200: past TILED_MIN, each input copied into its slice
    cases = [([values, values.flip(1)], 1), ([values, values], 0), ([values, values.t().contiguous().t(),
                                                                     values], 1),
             ([wide, wide], 0)]
    registry.reset_fallback_report()
    for tensors, dim in cases:
        for _ in range(2):  # the first call builds the plan, the second runs it
            _same(torch.cat([t.to("rbln") for t in tensors], dim).cpu(), torch.cat(tensors, dim))
    assert _row("aten::cat") == {"device": 2 * len(cases), "cpu": 0, "reasons": {}}


def test_ops_not_marked_exact_still_send_nan_to_the_cpu():
    """The scan stays where a kernel's formula differs from torch's on NaN/Inf (exp's, a reduction's)."""
    x = torch.tensor([1.0, math.nan, math.inf])
    registry.reset_fallback_report()
    torch.exp(x.to("rbln"))
    torch.sum(x.to("rbln"))
    assert _row("aten::exp")["reasons"] == {"nan_inf": 1}
    assert _row("aten::sum")["reasons"] == {"nan_inf": 1}


# (M, N, K) reaching each matmul path: the product tiles (every side <= 16), a fitted one-step tile of
# a decoding step's rows (gemm on the counted rows), a tile with several K steps, a listed dot tile
MATMUL_SHAPES = [(2, 3, 5), (1, 40, 300), (20, 24, 1100), (17, 33, 31)]


def _matmul_tolerance(k: int) -> dict:
    """The finite values' tolerance of a product over k terms (sums in another order than the CPU's)."""
    return {"atol": 2e-2 * math.sqrt(k), "rtol": 2e-2}


def _with_specials(shape: tuple, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random values with NaN, +-Inf and zeros at a few places (no huge finite values: an overflow's
    place depends on the summation order, for finite operands as much as for these)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator)
    flat = x.view(-1)
    picks = torch.randint(0, flat.numel(), (max(2, flat.numel() // 200),), generator=generator)
    flat[picks] = torch.tensor([math.nan, math.inf, -math.inf, 0.0])[torch.arange(len(picks)) % 4]
    return x.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("m", "n", "k"), MATMUL_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in MATMUL_SHAPES])
def test_matmul_family_gives_the_cpus_nan_and_inf_on_device(m, n, k, dtype):
    """mm, bmm, addmm (alpha/beta 1 and not) and linear over a transposed weight are exact: NaN and Inf
    in any operand give the CPU's NaN and signed Inf (inf * 0, inf - inf and NaN terms make NaN in any
    order), on the device. alpha or beta 0, where torch skips an operand, go to the CPU."""
    a, b = _with_specials((m, k), dtype, 1), _with_specials((k, n), dtype, 2)
    bias = _with_specials((n,), dtype, 3)
    weight, batch_a, batch_b = (_with_specials((n, k), dtype, 4), _with_specials((2, m, k), dtype, 5),
                                _with_specials((2, k, n), dtype, 6))
    reference = (lambda *ts: tuple(t.float() for t in ts)) if dtype != torch.float32 else (lambda *ts: ts)
    registry.reset_fallback_report()
    on = lambda *ts: tuple(t.to("rbln") for t in ts)  # noqa: E731
    close = _matmul_tolerance(k)
    _same_specials(torch.mm(*on(a, b)), torch.mm(*reference(a, b)), **close)
    _same_specials(torch.bmm(*on(batch_a, batch_b)), torch.bmm(*reference(batch_a, batch_b)), **close)
    _same_specials(torch.addmm(*on(bias, a, b)), torch.addmm(*reference(bias, a, b)), **close)
    _same_specials(torch.addmm(*on(bias, a, b), beta=0.5, alpha=2.0),
                   torch.addmm(*reference(bias, a, b), beta=0.5, alpha=2.0), **close)
    _same_specials(torch.nn.functional.linear(*on(a, weight, bias)),
                   torch.nn.functional.linear(*reference(a, weight, bias)), **close)
    for name in ("mm", "bmm", "addmm"):
        assert _row(f"aten::{name}")["cpu"] == 0, name
    for alpha, beta in ((0.0, 1.0), (1.0, 0.0)):  # the CPU fallback: torch's own result in `dtype`
        torch.testing.assert_close(torch.addmm(*on(bias, a, b), alpha=alpha, beta=beta).cpu(),
                                   torch.addmm(bias, a, b, alpha=alpha, beta=beta), atol=0, rtol=0,
                                   equal_nan=True)
    assert _row("aten::addmm")["reasons"] == {"alpha or beta 0": 2}


@pytest.mark.slow
def test_fuzz_matmul_family_with_nan_and_inf_against_the_cpu():
    """200 random mm / bmm / addmm (alpha and beta 1 or not) / linear calls (seeded) with NaN, +-Inf
    and zeros at up to a tenth of the operands, three dtypes, M 1-128, K 1-600: NaN and Inf exactly
    where the CPU has them, finite values within the matmul tolerance, nothing on the CPU."""
    generator = torch.Generator().manual_seed(26)
    specials = torch.tensor([math.nan, math.inf, -math.inf, 0.0])

    def operand(shape: tuple, share: float, dtype: torch.dtype) -> torch.Tensor:
        x = torch.randn(shape, generator=generator)
        picks = torch.rand(shape, generator=generator) < share
        return torch.where(picks, specials[torch.randint(0, 4, shape, generator=generator)], x).to(dtype)

    for case in range(200):
        pick = torch.randint(0, 1 << 30, (5,), generator=generator).tolist()
        dtype = FLOATS[pick[0] % 3]
        m, n, k = ([1, 2, 3, 15, 16, 17, 40, 128][pick[1] % 8], [1, 5, 16, 33, 300][pick[2] % 5],
                   [1, 4, 31, 64, 300, 600][pick[3] % 6])
        share = [0.0, 0.001, 0.01, 0.1][pick[4] % 4]
        kind = ("mm", "bmm", "addmm", "addmm scaled", "linear")[(pick[4] >> 4) % 5]
        if kind == "bmm":
            operands = (operand((2, m, k), share, dtype), operand((2, k, n), share, dtype))
            function = torch.bmm
        elif kind == "linear":
            operands = tuple(operand(shape, share, dtype) for shape in ((m, k), (n, k), (n,)))
            function = torch.nn.functional.linear
        elif kind == "mm":
            operands = (operand((m, k), share, dtype), operand((k, n), share, dtype))
            function = torch.mm
        else:
            operands = tuple(operand(shape, share, dtype) for shape in ((n,), (m, k), (k, n)))
            scaled = {"alpha": 2.0, "beta": 0.5} if kind == "addmm scaled" else {}
            function = lambda c, a, b, scaled=scaled: torch.addmm(c, a, b, **scaled)  # noqa: E731
        registry.reset_fallback_report()
        got = function(*(t.to("rbln") for t in operands))
        expected = function(*(t.float() for t in operands))
        _same_specials(got, expected, **_matmul_tolerance(k))
        assert not any(row["cpu"] for row in registry.fallback_report().values()), (case, kind)
