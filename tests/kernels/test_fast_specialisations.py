"""Elementwise specialisations: every float unary and binary op compiles alone (its op code a
constexpr), and those launches, hot activations and tanh backward in every dtype and operand layout,
give the interpreter's bits (a differential check of the numba backend) and PyTorch's CPU result
within float32 rounding; the integer kernel's own and shared specialisations against its generic
switch and torch."""

from __future__ import annotations

import pytest
import torch
from torch_rbln.kernels import elementwise as E
from torch_rbln.kernels import integer as I

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
UNARY = {E.TANH: torch.tanh, E.CUBE: lambda x: x * x * x, E.NEG: torch.neg, E.SQRT: torch.sqrt}
UNARY_NAMES = {E.TANH: "tanh", E.CUBE: "cube", E.NEG: "neg", E.SQRT: "sqrt"}
BLOCK = 256


def _values(n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=generator) * 3
    special = torch.tensor([0.0, -0.0, float("inf"), float("nan")])[:n]
    x[:special.numel()] = special
    return x.to(dtype)


def _same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    """x and y hold the same values bit for bit (signed zeros included), NaN where the other has NaN.
    NaN payloads are not compared: torch's own bfloat16 conversions disagree on them (its scalar path
    makes 0x7FC0, its vectorised one 0xFFFF)."""
    bits = torch.int32 if x.dtype == torch.float32 else torch.int16
    nan = torch.isnan(x)
    return torch.equal(nan, torch.isnan(y)) and torch.equal(x.view(bits)[~nan], y.view(bits)[~nan])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", sorted(UNARY), ids=lambda op: UNARY_NAMES[op])
def test_unary_specialisations_match_the_interpreter_and_torch(op, dtype):
    """Each op's own specialisation over 1,000 elements (the last block partly masked), zeros, infs
    and NaN included. tanh's float32 result may differ from the interpreter's numpy tanh by rounding,
    so its comparison is to torch alone; the others are exact operations, bit for bit on both."""
    n = 1000
    x = _values(n, dtype, op)
    outputs = {}
    for backend in ("numba", "interpret"):
        out = torch.empty_like(x)
        E.unary_kernel[(triton_cdiv(n, BLOCK),)](x, out, n, 0.0, OP=op, BLOCK=BLOCK, backend=backend)
        outputs[backend] = out
    if op != E.TANH:
        assert _same_bits(outputs["numba"], outputs["interpret"])
    expected = UNARY[op](x.float()).to(dtype)
    torch.testing.assert_close(outputs["numba"], expected, rtol=2e-6 if dtype == torch.float32 else 1e-2,
                               atol=1e-6, equal_nan=True)


CASES = [(torch.float32, (0, 0)), (torch.bfloat16, (2, 0)), (torch.float16, (0, 0)), (torch.float32, (0, 1)),
         (torch.float16, (0, 3)), (torch.bfloat16, (0, 0))]


@pytest.mark.parametrize(("dtype", "modes"), CASES, ids=[f"{d}-modes{m[0]}{m[1]}" for d, m in CASES])
def test_tanh_backward_matches_torch_in_every_operand_layout(dtype, modes):
    """a = grad, b = tanh's output, each read as its MODE says (dense, scalar, row, column)."""
    rows, cols = 6, 300
    sizes = {0: rows * cols, 1: 1, 2: cols, 3: rows}
    grad = _values(sizes[modes[0]], dtype, 1)
    output = torch.tanh(_values(sizes[modes[1]], torch.float32, 2)).to(dtype)
    out = torch.empty(rows * cols, dtype=dtype)
    E.binary_dense_kernel[(triton_cdiv(cols, BLOCK), rows)](
        grad, output, out, cols, 1.0, OP=E.TANH_BWD, A_MODE=modes[0], B_MODE=modes[1], BLOCK=BLOCK,
        backend="numba")
    index = torch.arange(rows * cols)
    pick = {0: index, 1: torch.zeros_like(index), 2: index % cols, 3: index // cols}
    a, b = grad.float()[pick[modes[0]]], output.float()[pick[modes[1]]]
    expected = torch.ops.aten.tanh_backward(a, b).to(dtype)
    torch.testing.assert_close(out, expected, rtol=2e-6 if dtype == torch.float32 else 1e-2, atol=1e-6,
                               equal_nan=True)


def test_the_op_code_is_a_constexpr_of_every_float_elementwise_kernel():
    """One specialisation per op: the op code is among each kernel's constexprs, not a runtime
    argument (a runtime switch over every op compiled in 2.4-14 s; see elementwise's FUSED_BINARY)."""
    for kernel in (E.unary_kernel, E.binary_kernel, E.binary_dense_kernel, E.binary_tiled_kernel):
        assert "OP" in kernel.constexpr_params, kernel.__name__


def _numba_source(kernel, *args, grid, **constexprs) -> str:
    """The numba backend's generated source of `kernel`'s specialisation for these arguments (lowered
    from the IR that the interpreter's warmup builds: nothing is compiled)."""
    from torch_rbln.dsl.backends.numba_backend import codegen

    return codegen.lower(kernel.warmup(*args, grid=grid, backend="interpret", **constexprs).ir).source


def test_the_fused_op_lists_are_the_specialisations_without_block_buffers():
    """`FUSED_UNARY` / `FUSED_BINARY` decide BLOCK (`geometry.fused_block`: one BLOCK for every size,
    safe only where the backend fuses the whole op into one loop over the lanes that exist). Each listed
    op fuses in every float dtype and (binary) operand layout; each unlisted one materialises a buffer
    in float32, so the lists are neither too long (slow masked launches) nor too short (extra compiles)."""
    x = torch.randn(100)
    for name, op in E.UNARY.items():
        fused = [("np.empty(" not in _numba_source(E.unary_kernel, x.to(dtype), torch.empty(100, dtype=dtype),
                                                   100, 2.0, grid=(1,), OP=op, BLOCK=4096))
                 for dtype in (DTYPES if op in E.FUSED_UNARY else DTYPES[:1])]
        assert all(fused) if op in E.FUSED_UNARY else not any(fused), name
    layouts = [(0, 0), (0, 1), (1, 0), (0, 2), (3, 0)]
    for name, op in E.BINARY.items():
        cases = [(dtype, modes) for dtype in DTYPES for modes in layouts] if op in E.FUSED_BINARY else \
            [(torch.float32, (0, 0))]
        fused = []
        for dtype, (a_mode, b_mode) in cases:
            out = torch.empty(100, dtype=torch.bool if op in E.COMPARISONS else dtype)
            source = _numba_source(E.binary_dense_kernel, x.to(dtype), x.to(dtype), out, 100, 1.0,
                                   grid=(1, 1), OP=op, A_MODE=a_mode, B_MODE=b_mode, BLOCK=4096)
            fused.append("np.empty(" not in source)
        assert all(fused) if op in E.FUSED_BINARY else not any(fused), name


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------- integer specialisations
INTEGER_OPS = {I.ADD: lambda a, b, alpha: torch.add(a, b, alpha=alpha),
               I.SUB: lambda a, b, alpha: torch.sub(a, b, alpha=alpha),
               I.MUL: lambda a, b, alpha: a * b,
               I.LT: lambda a, b, alpha: a < b,
               I.GE: lambda a, b, alpha: a >= b,
               I.MAXIMUM: lambda a, b, alpha: torch.maximum(a, b),
               I.MINIMUM: lambda a, b, alpha: torch.minimum(a, b),
               I.FILL: lambda a, b, alpha: torch.full_like(a, b) if not isinstance(b, torch.Tensor) else b}


def _integers(n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    info = torch.iinfo(dtype)
    values = torch.randint(info.min, info.max, (n,), generator=torch.Generator().manual_seed(seed),
                           dtype=torch.int64 if dtype != torch.uint8 else torch.int64).to(dtype)
    values[:3] = torch.tensor([info.min, info.max, 0]).to(dtype)  # wrap at both ends, as torch does
    return values


def _int_launch(a, b, scalar, op: int, fast: int, alpha: int, block: int) -> torch.Tensor:
    out = torch.empty(a.shape, dtype=torch.bool if op in E.COMPARISONS else a.dtype)
    n = a.numel()
    I.int_binary_kernel[(triton_cdiv(n, block),)](
        a, a if b is None else b, 0 if scalar is None else scalar, out, n, alpha, OP=op, FAST_OP=fast,
        B_SCALAR=scalar is not None, BLOCK=block, backend="numba")
    return out


# (dtype, second operand a scalar, also run the generic switch)
INTEGER_CASES = [(torch.int64, False, True), (torch.int32, True, False), (torch.uint8, False, False)]


@pytest.mark.parametrize(("dtype", "scalar", "generic"), INTEGER_CASES,
                         ids=[f"{d}-{'scalar' if s else 'tensor'}" for d, s, _ in INTEGER_CASES])
def test_integer_fast_ops_match_generic_and_torch(dtype, scalar, generic):
    """add/sub with alpha, mul, maximum, minimum and fill (own specialisations) and the comparisons
    (their shared one) wrap and compare as torch's CPU kernels do and, where the generic switch runs
    too, bit for bit as it does; a fused specialisation's BLOCK of 4096 over 5000 elements (two
    programs, the second partial) and over 3 elements (one partial program)."""
    for n in (5000, 3):
        a = _integers(n, dtype, 1)
        b = 7 if scalar else _integers(n, dtype, 2)
        for op, reference in INTEGER_OPS.items():
            fast = I.integer_fast_op(op)
            assert fast == (op if op in I.FAST_INTEGER else I.COMPARE_OPS)
            alpha = -3 if op == I.SUB else 5
            got = _int_launch(a, None if scalar else b, b if scalar else None, op, fast, alpha, 4096)
            expected = reference(a, torch.tensor(b, dtype=dtype) if scalar and op != I.FILL else b, alpha)
            assert torch.equal(got, expected.to(got.dtype)), (op, n)
            if generic:
                assert torch.equal(_int_launch(a, None if scalar else b, b if scalar else None, op, -1, alpha,
                                               1024), got), (op, n)


def test_the_registry_gives_fused_integer_ops_one_block_for_every_size(monkeypatch):
    """add of a scalar and of a same-shaped tensor launch BLOCK=4096 at every size (one compile each);
    a broadcast second operand takes the tiled kernel in one of `small_tile_shape`'s tiles."""
    from torch_rbln.registry import elementwise, integer

    launches = []
    real = integer.integer_launch

    def recording(*args, **kwargs):  # the launch decision of both the implementation and the plans
        decided = real(*args, **kwargs)
        tiled = decided.kernel is I.int_binary_tiled_kernel
        keywords = decided.keywords
        block = (keywords["BLOCK_M"], keywords["BLOCK_N"]) if tiled else keywords["BLOCK"]
        launches.append((decided.ints[-1], tiled, block))
        return decided

    for module in (elementwise, integer):
        monkeypatch.setattr(module, "integer_launch", recording)
    for n in (5, 300, 5000):
        x = torch.arange(n).to("rbln")
        assert torch.equal((x + 2).cpu(), torch.arange(n) + 2)
        assert torch.equal((x - x).cpu(), torch.zeros(n, dtype=torch.int64))
    rows = torch.arange(10).view(2, 5)
    assert torch.equal((rows.to("rbln") + torch.arange(5).to("rbln")).cpu(), rows + torch.arange(5))
    assert launches == [(I.ADD, False, 4096), (I.SUB, False, 4096)] * 3 + [(I.ADD, True, (64, 16))]


BITWISE_REFERENCES = {I.BITWISE_AND: torch.bitwise_and, I.BITWISE_OR: torch.bitwise_or,
                      I.BITWISE_XOR: torch.bitwise_xor}


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_bitwise_ops_share_a_specialisation_that_matches_generic_and_torch(dtype):
    """and/or/xor take BITWISE_OPS (one specialisation with their own switch) and give the generic
    switch's bits and torch's, for every bit pattern class (both ends of int64, zero, bools)."""
    a = _integers(300, torch.int64, 3) if dtype == torch.int64 else torch.rand(300) < 0.5
    b = _integers(300, torch.int64, 4) if dtype == torch.int64 else torch.rand(300) < 0.5
    for op, reference in BITWISE_REFERENCES.items():
        assert I.integer_fast_op(op) == I.integer_fast_op(op, bcast=True) == I.BITWISE_OPS
        grouped = _int_launch(a, b, None, op, I.BITWISE_OPS, 1, 16)
        assert torch.equal(grouped, _int_launch(a, b, None, op, -1, 1, 16)), op
        assert torch.equal(grouped, reference(a, b)), op


def test_broadcast_integer_arithmetic_shares_one_specialisation():
    """add/sub with alpha and mul with a broadcast operand take ARITHMETIC_OPS through the registry
    (the tiled kernel: nothing fuses there, so one switch serves the three), wrapping as torch does; without
    broadcasting each keeps its own fused specialisation."""
    from torch_rbln.registry import elementwise, integer

    launches = []
    real = integer.integer_launch

    def recording(*args, **kwargs):
        decided = real(*args, **kwargs)
        launches.append((decided.ints[-1], decided.keywords["FAST_OP"],
                         decided.kernel is I.int_binary_tiled_kernel))
        return decided

    rows = _integers(40, torch.int64, 5).view(8, 5)
    column = _integers(8, torch.int64, 6).view(8, 1)
    with pytest.MonkeyPatch.context() as patch:
        for module in (elementwise, integer):
            patch.setattr(module, "integer_launch", recording)
        device_rows, device_column = rows.to("rbln"), column.to("rbln")
        assert torch.equal(torch.add(device_rows, device_column, alpha=3).cpu(),
                           torch.add(rows, column, alpha=3))
        assert torch.equal(torch.sub(device_rows, device_column, alpha=-2).cpu(),
                           torch.sub(rows, column, alpha=-2))
        assert torch.equal((device_rows * device_column).cpu(), rows * column)
        assert torch.equal((device_rows * device_rows).cpu(), rows * rows)
    assert launches == [(I.ADD, I.ARITHMETIC_OPS, True), (I.SUB, I.ARITHMETIC_OPS, True),
                        (I.MUL, I.ARITHMETIC_OPS, True), (I.MUL, I.MUL, False)]


@pytest.mark.parametrize("divisor", [-7, -1, 3])
def test_floor_division_and_remainder_share_a_specialisation_that_matches_generic_and_torch(divisor):
    """`//` and `%` by a number take DIVISION_OPS (beam search's token // vocab and token % vocab) and
    give the generic switch's bits and torch's at int64's ends, with -1 (wrapping negation) included."""
    a = _integers(300, torch.int64, 7)
    for op, reference in ((I.FLOOR_DIVIDE, torch.floor_divide), (I.REMAINDER, torch.remainder)):
        assert I.integer_fast_op(op) == I.DIVISION_OPS
        grouped = _int_launch(a, None, divisor, op, I.DIVISION_OPS, 1, 16)
        assert torch.equal(grouped, _int_launch(a, None, divisor, op, -1, 1, 16)), op
        assert torch.equal(grouped, reference(a, divisor)), op
