"""The numba backend's casts: `codegen` leaves out the ones that cannot change a value (a cast of a
value already of that type, `+ - *` and float `/` of two values of the result's exact type), and keeps
every one that rounds or wraps. Each dropped kind is held here to the interpreter bit for bit, over
mixes of float32/float64/float16/bfloat16 and narrow and wide integers at their wrapping edges, and
the generated source is checked for what it no longer says; `tl.dot` of a transposed buffer reads the
buffer with swapped strides instead of copying it."""

from __future__ import annotations

import re

import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend import codegen

from torch_rbln import dsl as triton

N = 37  # not a multiple of the block: the masked lanes' fill is part of the values


@triton.jit
def mixed_kernel(a_ptr, b_ptr, out_ptr, where_ptr, n, s, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask, other=3)
    b = tl.load(b_ptr + offsets, mask=mask, other=5)
    chain = (a + b) * a - b * s  # a promoted mix, then a chain of one dtype (the dropped casts)
    tl.store(out_ptr + offsets, chain, mask=mask)
    tl.store(where_ptr + offsets, tl.where(a > b, a, b) * a + a, mask=mask)


def _bits(t: torch.Tensor) -> torch.Tensor:
    if t.dtype.is_floating_point:
        return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def _values(dtype: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        values = torch.randn(N, generator=generator, dtype=torch.float64) * 1e3
        values[:4] = torch.tensor([0.0, -0.0, 1e-30, 3.0e38])  # ties, zeros, float32 overflow
        return values.to(dtype)
    info = torch.iinfo(dtype)
    values = torch.randint(info.min, info.max, (N,), generator=generator, dtype=torch.int64)
    values[:4] = torch.tensor([info.max, info.min, -1, info.max - 1])  # sums and products that wrap
    return values.to(dtype)


def _run(backend: str, monkeypatch, a: torch.Tensor, b: torch.Tensor, s, out_dtype: torch.dtype):
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", backend)
    out = torch.zeros(N, dtype=out_dtype)
    where = torch.zeros(N, dtype=out_dtype)
    mixed_kernel[(1,)](a, b, out, where, N, s, BLOCK=64)
    return out, where


DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64)


@pytest.mark.parametrize("a_dtype", DTYPES)
@pytest.mark.parametrize("b_dtype", (torch.float32, torch.int32, torch.int64, torch.float16))
def test_dropped_casts_agree_with_the_interpreter_bit_for_bit(a_dtype, b_dtype, monkeypatch):
    a, b = _values(a_dtype, 1), _values(b_dtype, 2)
    both_int = not a_dtype.is_floating_point and not b_dtype.is_floating_point
    s = 3 if both_int else 0.5
    out_dtype = torch.promote_types(a_dtype, b_dtype)
    compiled = _run("numba", monkeypatch, a, b, s, out_dtype)
    interpreted = _run("interpret", monkeypatch, a, b, s, out_dtype)
    for numba_out, interpret_out in zip(compiled, interpreted, strict=True):
        assert torch.equal(_bits(numba_out), _bits(interpret_out)), (a_dtype, b_dtype)


def test_int32_arithmetic_still_wraps_in_int32():
    """numba computes int32 + int32 in int64: the cast back is what wraps, so it must stay."""
    a = torch.full((N,), 2**31 - 1, dtype=torch.int32)
    b = torch.ones(N, dtype=torch.int32)
    out, where = torch.zeros(N, dtype=torch.int32), torch.zeros(N, dtype=torch.int32)
    mixed_kernel[(1,)](a, b, out, where, N, 1, BLOCK=64)
    expected = ((a.long() + b.long()) * a.long() - b.long()).to(torch.int32)  # two's complement wrap
    assert torch.equal(out, expected)


def _source(kernel, *args, **kwargs) -> str:
    return codegen.lower(kernel.warmup(*args, **kwargs).ir).source


def _nested(source: str, name: str) -> int:
    return len(re.findall(re.escape(f"{name}({name}("), source))


def test_the_source_has_no_repeated_casts_and_keeps_the_narrow_ones():
    x = torch.zeros(N)
    source = _source(mixed_kernel, x, x, x, x, N, 0.5, BLOCK=64, grid=(1,))
    assert _nested(source, "np.float32") == 0 and _nested(source, "np.int64") == 0
    # float32 (a + b) * a - b * s: one chain of float32 operations, no cast between them
    assert re.search(r"\(\(\(\S+ \+ \S+\) \* \S+\) - \(\S+ \* v\d+\)\)", source), source
    i = torch.zeros(N, dtype=torch.int32)
    narrow = _source(mixed_kernel, i, i, i, i, N, 3, BLOCK=64, grid=(1,))
    assert "np.int32((" in narrow  # int32 arithmetic keeps the cast that wraps it


@triton.jit
def dot_transposed_kernel(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    rows = tl.arange(0, BLOCK)
    offsets = rows[:, None] * BLOCK + rows[None, :]
    a = tl.load(a_ptr + offsets)
    b = tl.load(b_ptr + offsets)
    b = tl.reshape(tl.reshape(b * 2.0, (BLOCK * BLOCK,)), (BLOCK, BLOCK))  # a buffer
    product = tl.dot(a, tl.trans(b)) + tl.dot(b, a)
    tl.store(out_ptr + offsets, product)


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_dot_of_a_transposed_buffer(backend, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", backend)
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(16, 16, generator=generator) for _ in range(2))
    out = torch.empty(16, 16)
    dot_transposed_kernel[(1,)](a, b, out, BLOCK=16)
    expected = a.double() @ (2 * b.double()).T + (2 * b.double()) @ a.double()
    torch.testing.assert_close(out.double(), expected, atol=1e-4, rtol=1e-5)


def test_dot_of_a_transposed_buffer_reads_it_with_swapped_strides():
    x = torch.zeros(16, 16)
    source = _source(dot_transposed_kernel, x, x, x, BLOCK=16, grid=(1,))
    # the buffer passed flat with row stride 1 and column stride 16 (no elementwise copy `d..` of it)
    # (tile_dot's int arguments are plain literals: numba types them int64)
    transposed = r"[br]\d+(_\d+)?\.reshape\(\(256,\)\), 0, 1, 16, "
    plain = r"tile_dot(?:_store)?\(.*?\S+, 0, 16, 1, .*"  # (a stored sum of products: `tile_dot_store`)
    assert re.search(plain + transposed, source), source
    assert not re.search(r"^\s*d\d+_\d+ = np\.empty", source, re.M), source


@pytest.mark.parametrize(("expression", "closed"), [
    ("np.int64(a) + np.int64(b) * 3", True),
    ("(np.int64(a) + 1) * np.int64(2)", True),
    ("((np.int64(a)))", True),
    ("(np.int64(a) + 1) // np.int64(2)", False),  # one piece, not one group: recursed forever before
    ("(a) // b", False),
    ("np.int64(a) + b", False),
    ("-np.int64(a)", False),
])
def test_an_int64_cast_is_dropped_only_around_int64_sums_and_products(expression: str, closed: bool):
    assert codegen._int64_closed(expression) is closed
    cast = codegen._cast("np.int64", expression)
    assert (cast.startswith("np.int64(")) is not closed
