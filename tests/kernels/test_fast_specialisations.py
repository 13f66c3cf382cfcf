"""Ops with an elementwise specialisation of their own (`FAST_UNARY`, `FAST_BINARY` in
kernels/elementwise.py) compute bit for bit what the generic runtime switch computes for the same op
code, in every dtype and operand layout, and match PyTorch's CPU result within float32 rounding."""

from __future__ import annotations

import pytest
import torch
from torch_rbln.kernels import elementwise as E

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
UNARY = {E.TANH: torch.tanh, E.CUBE: lambda x: x * x * x}
BLOCK = 256


def _values(n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=generator) * 3
    special = torch.tensor([0.0, -0.0, float("inf"), float("nan")])[:n]
    x[:special.numel()] = special
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", sorted(UNARY), ids=lambda op: {E.TANH: "tanh", E.CUBE: "cube"}[op])
def test_unary_fast_matches_generic(op, dtype):
    assert op in E.FAST_UNARY
    n = 1000
    x = _values(n, dtype, op)
    outputs = {}
    for fast in (op, -1):
        out = torch.empty_like(x)
        E.unary_kernel[(triton_cdiv(n, BLOCK),)](x, out, n, 0.0, op, FAST_OP=fast, BLOCK=BLOCK,
                                                 backend="numba")
        outputs[fast] = out
    assert torch.equal(outputs[op].view(torch.int16 if dtype != torch.float32 else torch.int32),
                       outputs[-1].view(torch.int16 if dtype != torch.float32 else torch.int32))
    expected = UNARY[op](x.float()).to(dtype)
    torch.testing.assert_close(outputs[op], expected, rtol=2e-6 if dtype == torch.float32 else 1e-2,
                               atol=1e-6, equal_nan=True)


# (dtype, operand modes, also run the generic switch): each generic specialisation costs seconds of
# numba, so the bitwise comparison with it runs on two of them; every case is checked against torch
CASES = [(torch.float32, (0, 0), True), (torch.bfloat16, (2, 0), True), (torch.float16, (0, 0), False),
         (torch.float32, (0, 1), False), (torch.float16, (0, 3), False), (torch.bfloat16, (0, 0), False)]


@pytest.mark.parametrize(("dtype", "modes", "generic"), CASES,
                         ids=[f"{d}-modes{m[0]}{m[1]}" for d, m, _ in CASES])
def test_tanh_backward_fast_matches_generic(dtype, modes, generic):
    """a = grad, b = tanh's output, each read as its MODE says (dense, scalar, row, column)."""
    assert E.TANH_BWD in E.FAST_BINARY and E.dense_fast_op(E.TANH_BWD, False) == E.TANH_BWD
    rows, cols = 6, 300
    sizes = {0: rows * cols, 1: 1, 2: cols, 3: rows}
    grad = _values(sizes[modes[0]], dtype, 1)
    output = torch.tanh(_values(sizes[modes[1]], torch.float32, 2)).to(dtype)
    results = {}
    for fast in (E.TANH_BWD, -1) if generic else (E.TANH_BWD,):
        out = torch.empty(rows * cols, dtype=dtype)
        E.binary_dense_kernel[(triton_cdiv(cols, BLOCK), rows)](
            grad, output, out, cols, 1.0, E.TANH_BWD, FAST_OP=fast, A_MODE=modes[0], B_MODE=modes[1],
            BLOCK=BLOCK, backend="numba")
        results[fast] = out
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    if generic:
        assert torch.equal(results[E.TANH_BWD].view(bits), results[-1].view(bits))
    index = torch.arange(rows * cols)
    pick = {0: index, 1: torch.zeros_like(index), 2: index % cols, 3: index // cols}
    a, b = grad.float()[pick[modes[0]]], output.float()[pick[modes[1]]]
    expected = torch.ops.aten.tanh_backward(a, b).to(dtype)
    torch.testing.assert_close(results[E.TANH_BWD], expected,
                               rtol=2e-6 if dtype == torch.float32 else 1e-2, atol=1e-6, equal_nan=True)


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
