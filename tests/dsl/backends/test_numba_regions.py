"""The numba backend's buffers inside loops and branches, and the box checks it proves while lowering.

`codegen` allocates a loop body's (or a branch's) buffers once per launch, in the prologue, unless the
region's yield carries them out (`_Lowering._close_region`): a carried value must not share its buffer
with the next iteration's value. A buffer a loop yields alternates between two prologue arrays, each
iteration taking one that no carried variable holds (`_Lowering._alternate`), or a fresh one when both
are held; a branch's yielded buffer is allocated where it stands. The kernel here carries out, through
reshape views, an inner loop that may run zero times and a branch, exactly the buffers that must stay
apart from the carried ones, and reads the carried value after the next iteration has rewritten its
own; it is held to torch and to the interpreter. The box checks of offsets built from 32-bit values
(`_bound_derived`) carry no run-time float64 twin of the offset, while one over an int64 scalar still
does."""

from __future__ import annotations

import re

import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend import codegen

from torch_rbln import dsl as triton

BLOCK = 8


@triton.jit
def carried_kernel(x_ptr, out_ptr, last_ptr, n_iter, inner, flag, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    offsets = r[:, None] * BLOCK + r[None, :]
    x = tl.load(x_ptr + offsets)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    last = x
    for i in range(0, n_iter):
        t = tl.exp(x * (0.01 * (i + 1)))  # a body buffer (read twice), never carried out
        u = tl.reshape(tl.reshape(t * 2.0 + tl.trans(t), (BLOCK * BLOCK,)), (BLOCK, BLOCK))
        inner_acc = u  # carried out of the body through the inner loop when it runs zero times
        for _ in range(0, inner):
            inner_acc = tl.reshape(tl.reshape(inner_acc * 0.5 + tl.trans(inner_acc), (BLOCK * BLOCK,)),
                                   (BLOCK, BLOCK))
        if flag != 0:  # a branch that yields a buffer of its own
            v = tl.reshape(tl.reshape(inner_acc - last, (BLOCK * BLOCK,)), (BLOCK, BLOCK))
        else:
            v = inner_acc + last
        acc = acc + v
        last = inner_acc  # read above, after this iteration's `u` was written
    tl.store(out_ptr + offsets, acc)
    tl.store(last_ptr + offsets, last)


def _reference(x: torch.Tensor, n_iter: int, inner: int, flag: int) -> tuple[torch.Tensor, torch.Tensor]:
    acc = torch.zeros_like(x)
    last = x
    for i in range(n_iter):
        t = torch.exp(x * (0.01 * (i + 1)))
        inner_acc = t * 2.0 + t.T
        for _ in range(inner):
            inner_acc = inner_acc * 0.5 + inner_acc.T
        acc = acc + (inner_acc - last if flag else inner_acc + last)
        last = inner_acc
    return acc, last


def _run(backend: str, monkeypatch, x: torch.Tensor, n_iter: int, inner: int, flag: int):
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", backend)
    out, last = torch.zeros_like(x), torch.zeros_like(x)
    carried_kernel[(1,)](x, out, last, n_iter, inner, flag, BLOCK=BLOCK)
    return out, last


@pytest.mark.parametrize("inner", [0, 2])
@pytest.mark.parametrize("flag", [0, 1])
@pytest.mark.parametrize("n_iter", [0, 3])
def test_carried_buffers_are_not_shared_with_the_next_iteration(n_iter, inner, flag, monkeypatch):
    x = torch.randn(BLOCK, BLOCK, generator=torch.Generator().manual_seed(0))
    expected = _reference(x, n_iter, inner, flag)
    for backend in ("numba", "interpret"):
        for got, want in zip(_run(backend, monkeypatch, x, n_iter, inner, flag), expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"{backend} {inner} {flag}")


def _source(kernel, *args, **kwargs) -> str:
    return codegen.lower(kernel.warmup(*args, **kwargs).ir).source


def _carried_out(name: str, programs: str) -> bool:
    """Whether buffer `name` (or a reshape view of it) is assigned to a variable: carried out."""
    views = re.findall(rf"^\s*(r\d+) = {name}\.reshape", programs, re.M)
    names = "|".join([name, *views])
    return re.search(rf"^\s*[\w, ]+ = (?:[\w, ]+, )?(?:{names})\b(?! if)", programs, re.M) is not None


def test_only_carried_out_buffers_are_allocated_per_iteration():
    x = torch.zeros(BLOCK, BLOCK)
    source = _source(carried_kernel, x, x, x, 3, 2, 1, BLOCK=BLOCK, grid=(1,))
    prologue, programs = source.split("for program in range", 1)
    inside = re.findall(r"^\s*(\w+) = np\.empty", programs, re.M)
    hoisted = re.findall(r"^\s*(\w+) = np\.empty", prologue, re.M)
    alternating = re.findall(r"^\s*(\w+) = (\w+)_a if not \(holds\(\2_a, [\w, ()]+\) else "
                             r"\(\2_b if not \(holds\(\2_b, .*\) else np\.empty", programs, re.M)
    # the branch's yield stays one allocation per execution; the loops' yields alternate between two
    # prologue arrays each (the body's exp tile is hoisted too)
    assert len(inside) >= 1 and len(alternating) >= 2, source
    assert len(hoisted) >= 3 + 2 * len(alternating), source
    for name, same in alternating:
        assert name == same and f"{name}_a = np.empty" in prologue and f"{name}_b = np.empty" in prologue
    for name in inside + [name for name, _ in alternating]:
        assert _carried_out(name, programs), (name, source)


@triton.jit
def swap_kernel(x_ptr, out_ptr, n_iter, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    offsets = r[:, None] * BLOCK + r[None, :]
    a = tl.load(x_ptr + offsets)
    b = a * 0.25
    for _ in range(0, n_iter):
        c = tl.reshape(tl.reshape(a * 0.5 + tl.trans(b), (BLOCK * BLOCK,)), (BLOCK, BLOCK))
        a, b = c, a  # both carried variables may hold the body's buffer: neither may be overwritten
    tl.store(out_ptr + offsets, a - tl.trans(b))


@pytest.mark.parametrize("n_iter", [0, 1, 2, 3, 7])
def test_a_buffer_both_carried_variables_may_hold_is_never_overwritten(n_iter, monkeypatch):
    """`a, b = f(a, b), a`: the second iteration's buffer must avoid the first's (held by `a`) and the
    third must avoid both alternates (held by `a` and `b`), so it takes a fresh allocation."""
    x = torch.randn(BLOCK, BLOCK, generator=torch.Generator().manual_seed(1))
    a, b = x, x * 0.25
    for _ in range(n_iter):
        a, b = a * 0.5 + b.T, a
    expected = a - b.T
    source = _source(swap_kernel, x, x, n_iter, BLOCK=BLOCK, grid=(1,))
    assert re.search(r"= (\w+)_a if not \(holds\(\1_a, \w+\) or holds\(\1_a, \w+\)\)", source), source
    for backend in ("numba", "interpret"):
        monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", backend)
        out = torch.zeros_like(x)
        swap_kernel[(1,)](x, out, n_iter, BLOCK=BLOCK)
        torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6, msg=backend)


@triton.jit
def strided_kernel(x_ptr, out_ptr, sb, sh, sm, b_count, BLOCK: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // b_count
    h = bh % b_count
    rm = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + b * sb + h * sh + rm[:, None] * sm + rm[None, :], mask=rm[:, None] < sm)
    tl.store(out_ptr + bh * BLOCK * BLOCK + rm[:, None] * BLOCK + rm[None, :], x + 1.0)


@triton.jit
def wide_offset_kernel(x_ptr, out_ptr, base, BLOCK: tl.constexpr):
    rm = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + base + rm)
    tl.store(out_ptr + rm, x)


def test_box_checks_over_32_bit_products_prove_no_wrap_while_lowering(monkeypatch):
    x = torch.arange(2 * 3 * BLOCK * BLOCK, dtype=torch.float32)
    out = torch.zeros(6 * BLOCK * BLOCK)
    source = _source(strided_kernel, x, out, 3 * BLOCK * BLOCK, BLOCK * BLOCK, BLOCK, 3, BLOCK=BLOCK,
                     grid=(6,))
    assert "mg" not in source and "4.611686018427388e18" not in source, source
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", "numba")
    strided_kernel[(6,)](x, out, 3 * BLOCK * BLOCK, BLOCK * BLOCK, BLOCK, 3, BLOCK=BLOCK)
    torch.testing.assert_close(out, x + 1.0, rtol=0, atol=0)
    # an int64 scalar's offset is still checked for wrapping at run time
    wide = _source(wide_offset_kernel, x, out, 2**40, BLOCK=BLOCK, grid=(1,))
    assert "4.611686018427388e18" in wide, wide
