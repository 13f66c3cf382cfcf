"""`box_check.box_fault1/2`, the compiled bounds check generated kernels call for a box access, against
the lowest and highest offset of the box's lanes enumerated one by one (negative and zero strides,
empty boxes, boxes that end exactly at the memory's end or one past it), and the kernels that call it
against the interpreter on a box that runs out of its tensor."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend import box_check, codegen

from torch_rbln import dsl as triton


def _expected(base: int, strides: tuple[int, ...], counts: tuple[int, ...], n: int):
    offsets = [base + sum(i * s for i, s in zip(index, strides, strict=True))
               for index in itertools.product(*(range(max(c, 0)) for c in counts))]
    if not offsets:
        return None
    low, high = min(offsets), max(offsets)
    if low < 0:
        return low
    return high if high >= n else None


@pytest.mark.parametrize("rank", [1, 2])
def test_box_fault_matches_the_lanes_one_by_one(rank):
    rng = np.random.default_rng(0)
    checked = faults = 0
    for _ in range(400):
        strides = tuple(int(s) for s in rng.integers(-7, 8, rank))
        counts = tuple(int(c) for c in rng.integers(-1, 6, rank))
        base, n = int(rng.integers(-10, 40)), int(rng.integers(0, 40))
        err = np.zeros(4, dtype=np.int64)
        args = [a for pair in zip(strides, counts, strict=True) for a in pair]
        fault = (box_check.box_fault1 if rank == 1 else box_check.box_fault2)(err, 1, 5, 9, base, *args, n)
        expected = _expected(base, strides, counts, n)
        assert fault == (expected is not None), (base, strides, counts, n)
        if fault:
            assert err.tolist() == [1, 5, expected, 9], (base, strides, counts, n, err)
            faults += 1
        else:
            assert err.tolist() == [0, 0, 0, 0]
        checked += 1
    assert 50 < faults < checked - 50  # both outcomes exercised


def test_box_fault_at_the_edges():
    err = np.zeros(4, dtype=np.int64)
    assert not box_check.box_fault2(err, 1, 0, 0, 0, 4, 4, 1, 4, 16)  # ends on the last element
    assert box_check.box_fault2(err, 1, 0, 0, 1, 4, 4, 1, 4, 16) and err[2] == 16  # one past it
    err[:] = 0
    assert not box_check.box_fault2(err, 1, 0, 0, -100, 4, 0, 1, 4, 16)  # empty: reads nothing
    assert box_check.box_fault1(err, 1, 3, 7, 5, -3, 3, 16) and err.tolist() == [1, 3, -1, 7]


@triton.jit
def tile_kernel(x_ptr, out_ptr, rows, stride, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r[:, None] * stride + r[None, :], mask=r[:, None] < rows, other=0.0)
    tl.store(out_ptr + r[:, None] * BLOCK + r[None, :], x * 2.0)


def test_kernels_call_the_check_and_report_its_fault(monkeypatch):
    x = torch.arange(64, dtype=torch.float32)
    out = torch.zeros(64)
    source = codegen.lower(tile_kernel.warmup(x, out, 8, 8, BLOCK=8, grid=(1,)).ir).source
    assert "box_fault2(err, 1, 0, program" in source and "# Box check: " in source, source
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", "numba")
    tile_kernel[(1,)](x, out, 8, 8, BLOCK=8)
    torch.testing.assert_close(out, x * 2.0, rtol=0, atol=0)
    messages = []
    for backend in ("numba", "interpret"):  # rows of 9 elements: the box runs past the tensor
        monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", backend)
        with pytest.raises(Exception, match="out of bounds|out-of-bounds") as caught:
            tile_kernel[(1,)](x, out, 8, 9, BLOCK=8)
        messages.append(str(caught.value))
    assert "tile_kernel" in messages[0], messages
