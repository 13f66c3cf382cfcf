"""Kernels get raw addresses: no launch argument may make one read or write outside its tensors.

Every test hands the kernel the middle slice of one buffer, `[canary_before | target | canary_after]`,
so an access that escapes the target lands in memory the test owns and checks: the canaries must
never change, and the access must be reported as the usual out-of-bounds `KernelRuntimeError`
naming the argument. Each test runs on the numba backend and on the interpreter (conftest), and the
ones marked with `device` also on rbln tensors. Offsets are checked on their exact value: an int64
offset that wraps past 2**63 (a huge scalar, an overflowing stride, a sum of huge scalars) is out of
bounds even where its wrapped value would land inside the tensor. One case differs: through a mask
that is not a box (rows 0 and 4), numba checks the exact `row * stride`, while the interpreter
computes that int64 product as numpy does (wrapping), so only numba reports it.
"""

import pytest
import torch
import torch_rbln.dsl as tl

import torch_rbln  # noqa: F401 - registers the rbln device
from torch_rbln import dsl as triton

CANARY = 16
OOB = r"out-of-bounds (load|store|atomic)[^\n]* of argument 'x_ptr'"


class Guarded:
    """A target tensor of `n` elements between two canaries of a recognisable pattern."""

    def __init__(self, n: int, device: str = "cpu", dtype=torch.float32) -> None:
        self.n = n
        buffer = torch.arange(n + 2 * CANARY, dtype=torch.float32).neg_().sub_(1).to(dtype)
        self.initial = buffer.clone()
        self.buffer = buffer.to(device)
        self.target = self.buffer[CANARY:CANARY + n]

    def canaries_intact(self) -> bool:
        now = self.buffer.cpu()
        return torch.equal(now[:CANARY], self.initial[:CANARY]) and \
            torch.equal(now[CANARY + self.n:], self.initial[CANARY + self.n:])

    def untouched(self) -> bool:
        return torch.equal(self.buffer.cpu(), self.initial)


def _expect_oob(launch, guarded: Guarded) -> None:
    with pytest.raises(tl.KernelRuntimeError, match=OOB):
        launch()
    assert guarded.canaries_intact()


@triton.jit
def store_at(x_ptr, off, BLOCK: tl.constexpr):
    offs = off + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 1.0)


@triton.jit
def copy_from(x_ptr, y_ptr, a, b, c, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + a + b + c + offs))


@triton.jit
def atomic_at(x_ptr, off, BLOCK: tl.constexpr):
    offs = off + tl.arange(0, BLOCK)
    tl.atomic_add(x_ptr + offs, 1.0)


@pytest.mark.parametrize("device", ["cpu", "rbln"])
@pytest.mark.parametrize("off", [2**62, -(2**63), 2**63 - 4, -(2**62), 2**31 - 4, 30])
def test_store_at_huge_offset(off, device):
    g = Guarded(32, device)
    _expect_oob(lambda: store_at[(1,)](g.target, off, BLOCK=8), g)
    assert g.untouched()


def test_in_bounds_offset_still_writes():
    g = Guarded(32)
    store_at[(1,)](g.target, 24, BLOCK=8)
    assert g.canaries_intact()
    assert torch.equal(g.target[24:].cpu(), torch.ones(8))


@pytest.mark.parametrize("device", ["cpu", "rbln"])
def test_load_through_offsets_whose_int64_sum_wraps_inside(device):
    # (2**63 - 1) * 2 + 2 == 2**64: its int64 value is 0, so every wrapped lane would be in bounds
    g = Guarded(32, device)
    out = torch.zeros(8, device=device)
    _expect_oob(lambda: copy_from[(1,)](g.target, out, 2**63 - 1, 2**63 - 1, 2, BLOCK=8), g)
    assert torch.equal(out.cpu(), torch.zeros(8))


def test_load_at_huge_offset_reads_nothing():
    g = Guarded(32)
    out = torch.zeros(8)
    _expect_oob(lambda: copy_from[(1,)](g.target, out, 2**62, 2**62, -(2**62) - 7, BLOCK=8), g)
    assert torch.equal(out, torch.zeros(8))


@pytest.mark.parametrize("off", [2**63 - 4, -(2**63)])
def test_atomic_at_huge_offset(off):
    g = Guarded(32)
    _expect_oob(lambda: atomic_at[(1,)](g.target, off, BLOCK=8), g)
    assert g.untouched()


@triton.jit
def store_narrow(x_ptr, KIND: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if KIND == 0:
        narrow = offs.to(tl.int8)
    elif KIND == 1:
        narrow = offs.to(tl.uint8)
    else:
        narrow = (offs * 256 + offs).to(tl.int8)
    tl.store(x_ptr + narrow, offs.to(tl.float32))


@pytest.mark.parametrize("device", ["cpu", "rbln"])
def test_int8_offsets_wrap_to_negative(device):
    # tl.arange(0, 256).to(tl.int8) is -128..127 (Triton sign-extends a signed offset): half the
    # lanes are below the tensor
    g = Guarded(256, device)
    with pytest.raises(tl.KernelRuntimeError, match=OOB + r".*offending offsets \[-128, -127"):
        store_narrow[(1,)](g.target, KIND=0, BLOCK=256)
    assert g.canaries_intact()


def test_uint8_offsets_are_zero_extended():
    g = Guarded(256)
    store_narrow[(1,)](g.target, KIND=1, BLOCK=256)
    assert g.canaries_intact()
    assert torch.equal(g.target, torch.arange(256, dtype=torch.float32))


def test_int8_of_wide_offsets_keeps_low_bits():
    # (i * 257).to(int8) == i.to(int8): the high bits of a narrowing cast are dropped, not kept
    g = Guarded(128)
    store_narrow[(1,)](g.target, KIND=2, BLOCK=128)
    assert g.canaries_intact()
    assert torch.equal(g.target, torch.arange(128, dtype=torch.float32))


@triton.jit
def store_2d(x_ptr, off, stride, n_rows, n_cols, MASK: tl.constexpr, R: tl.constexpr, C: tl.constexpr):
    rows = tl.arange(0, R)
    cols = tl.arange(0, C)
    p = x_ptr + off + rows[:, None] * stride + cols[None, :]
    if MASK == 0:
        tl.store(p, 1.0)
    elif MASK == 1:
        tl.store(p, 1.0, mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols))
    else:
        # a mask that is no box: rows 0 and 4 only, checked lane by lane
        tl.store(p, 1.0, mask=((rows[:, None] % 4) == 0) & (cols[None, :] < n_cols))


@pytest.mark.parametrize("device", ["cpu", "rbln"])
@pytest.mark.parametrize("mask, n_rows", [(0, 8), (1, 8), (1, 5)])
@pytest.mark.parametrize("stride", [2**62, 2**61, -(2**62), 2**62 + 1, 2**63 - 1, 2**31 - 1])
def test_2d_stride_overflow(stride, mask, n_rows, device):
    # with 5 rows the box spans 4 * stride, which is 0 (or 4) in int64 for stride 2**62 (or + 1)
    g = Guarded(32, device)
    _expect_oob(lambda: store_2d[(1,)](g.target, 0, stride, n_rows, 4, MASK=mask, R=8, C=4), g)


def test_2d_stride_overflow_row_mask_not_a_box(dsl_backend):
    # row 4 is at 4 * 2**62 == 2**64 exactly: its int64 value is 0, inside the tensor; row 0 is valid
    g = Guarded(32)
    launch = lambda: store_2d[(1,)](g.target, 0, 2**62, 8, 4, MASK=2, R=8, C=4)  # noqa: E731
    if dsl_backend == "interpret":
        pytest.skip("the interpreter computes int64 products as numpy does (wrapping): module docstring")
    _expect_oob(launch, g)


@triton.jit
def store_rows(x_ptr, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * stride + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 1.0)


@pytest.mark.parametrize("stride", [2**62, 2**63 - 1, -(2**63)])
def test_offsets_from_huge_runtime_scalar(stride):
    g = Guarded(32)
    _expect_oob(lambda: store_rows[(5,)](g.target, stride, BLOCK=8), g)


@triton.jit
def block_store(x_ptr, M, N, sm, sn, om, on, CHECK: tl.constexpr, R: tl.constexpr, C: tl.constexpr):
    bp = tl.make_block_ptr(x_ptr, shape=(M, N), strides=(sm, sn), offsets=(om, on), block_shape=(R, C),
                           order=(1, 0))
    if CHECK:
        tl.store(bp, tl.full((R, C), 1.0, tl.float32), boundary_check=(0, 1))
    else:
        tl.store(bp, tl.full((R, C), 1.0, tl.float32))


@triton.jit
def block_load(x_ptr, y_ptr, M, N, sm, sn, om, on, R: tl.constexpr, C: tl.constexpr):
    bp = tl.make_block_ptr(x_ptr, shape=(M, N), strides=(sm, sn), offsets=(om, on), block_shape=(R, C),
                           order=(1, 0))
    v = tl.load(bp)
    rows = tl.arange(0, R)
    cols = tl.arange(0, C)
    tl.store(y_ptr + rows[:, None] * C + cols[None, :], v)


@pytest.mark.parametrize("device", ["cpu", "rbln"])
@pytest.mark.parametrize(
    "strides, offsets",
    [
        ((2**62, 1), (0, 0)),
        ((4, 1), (2**62, 0)),
        ((1, 2**63 - 1), (0, 0)),
        ((4, 1), (2**62 - 1, -(2**62) + 4)),
    ],
)
def test_block_pointer_huge_strides_and_offsets(strides, offsets, device):
    g = Guarded(16, device)
    _expect_oob(lambda: block_store[(1,)](g.target, 4, 4, *strides, *offsets, CHECK=False, R=4, C=4), g)
    out = torch.zeros(16, device=device)
    _expect_oob(lambda: block_load[(1,)](g.target, out, 4, 4, *strides, *offsets, R=4, C=4), g)
    assert torch.equal(out.cpu(), torch.zeros(16))


def test_block_pointer_boundary_check_skips_huge_lanes():
    # rows past the shape are skipped before their (huge) address is formed: no error, row 0 written
    g = Guarded(16)
    block_store[(1,)](g.target, 1, 4, 2**62, 1, 0, 0, CHECK=True, R=4, C=4)
    assert g.canaries_intact()
    assert torch.equal(g.target[:4], torch.ones(4))
    assert torch.equal(g.target[4:], g.initial[CANARY + 4:CANARY + 16])


@triton.jit
def block_store_advanced(x_ptr, a, b, c, da, R: tl.constexpr, C: tl.constexpr):
    bp = tl.make_block_ptr(x_ptr + a + b + c, shape=(4, 4), strides=(4, 1), offsets=(0, 0),
                           block_shape=(R, C), order=(1, 0))
    bp = tl.advance(bp, (da, 0))
    bp = tl.advance(bp, (da, 0))
    tl.store(bp, tl.full((R, C), 1.0, tl.float32))


@pytest.mark.parametrize(
    "a, b, c, da",
    [
        (2**63 - 1, 2**63 - 1, 2, 0),  # base 2**64: 0 in int64
        (0, 0, 0, 2**62),  # row offset 2**63 after two advances: -2**63 in int64, times 4 is 0
    ],
)
def test_block_pointer_base_and_advance_past_int64(a, b, c, da):
    g = Guarded(16)
    _expect_oob(lambda: block_store_advanced[(1,)](g.target, a, b, c, da, R=4, C=4), g)
    assert g.untouched()


def test_block_pointer_advance_in_bounds():
    g = Guarded(16)
    block_store_advanced[(1,)](g.target, 0, 0, 0, 1, R=2, C=4)
    assert g.canaries_intact()
    assert torch.equal(g.target[8:], torch.ones(8))
    assert torch.equal(g.target[:8], g.initial[CANARY:CANARY + 8])
