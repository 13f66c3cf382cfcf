"""Fuzzing launch arguments and kernel offsets (hypothesis): the numba backend must report an
out-of-bounds access exactly when the interpreter does, never touch memory outside its tensors, and
compute what torch computes when nothing is out of bounds.

Each kernel reads and increments `x[offset]` for every active lane; the target `x` is the middle of
one buffer between two canaries. Offsets, strides, masks and scalars are drawn from small values and
from the extremes of int32/int64 (2**31, 2**62, -2**63...). Most scalars reach the kernel through an
int64 tensor (one specialisation to compile, whatever their size); one kernel takes them as launch
arguments, typed int32 or int64 by value as in Triton. The default run is bounded (derandomized, a
few dozen examples); `-m slow` runs 5000 (about two minutes).
"""

import os

import pytest
import torch
import torch_rbln.dsl as tl
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from torch_rbln import dsl as triton

CANARY = 8
EXTREMES = [2**31 - 1, -(2**31), 2**31, -(2**31) - 1, 2**32, 2**62, -(2**62), 2**62 + 3, 2**63 - 1, -(2**63)]
R, C, BLOCK = 4, 4, 16


def _scalars():
    return st.one_of(
        st.integers(-6, 40), st.sampled_from(EXTREMES), st.integers(-(2**63), 2**63 - 1)
    )


@pytest.fixture(autouse=True)
def dsl_backend():
    """These tests launch each case on both backends themselves (overrides conftest's parametrisation)."""
    return None


def _run(launch, backend: str, n: int, dtype):
    """(raised out of bounds, target after, canaries intact) of one launch on `backend`."""
    buffer = torch.arange(n + 2 * CANARY).to(dtype).neg_()
    initial = buffer.clone()
    target = buffer[CANARY:CANARY + n]
    previous = os.environ.get("TORCH_RBLN_DSL_BACKEND")
    os.environ["TORCH_RBLN_DSL_BACKEND"] = backend
    try:
        launch(target)
        raised = False
    except tl.KernelRuntimeError as error:
        assert "out-of-bounds" in str(error) and "'x_ptr'" in str(error), str(error)
        raised = True
    finally:
        if previous is None:
            del os.environ["TORCH_RBLN_DSL_BACKEND"]
        else:
            os.environ["TORCH_RBLN_DSL_BACKEND"] = previous
    intact = torch.equal(buffer[:CANARY], initial[:CANARY]) and \
        torch.equal(buffer[CANARY + n:], initial[CANARY + n:])
    return raised, target.clone(), intact


def _check(launch, n: int, dtype, active: list[int], exact_known: bool = True) -> None:
    """Both backends agree; canaries intact; with `exact_known`, an out-of-bounds report exactly when
    an active lane's exact offset is outside [0, n), and otherwise x[active] + 1 (each lane once)."""
    numba = _run(launch, "numba", n, dtype)
    interpret = _run(launch, "interpret", n, dtype)
    assert numba[2] and interpret[2], "a canary changed"
    assert numba[0] == interpret[0], f"numba raised: {numba[0]}, interpreter raised: {interpret[0]}"
    event("out of bounds" if numba[0] else "in bounds")
    if exact_known:
        assert numba[0] == any(not 0 <= o < n for o in active)
    initial = torch.arange(n + 2 * CANARY).to(dtype).neg_()[CANARY:CANARY + n]
    if numba[0]:
        assert torch.equal(numba[1], initial) and torch.equal(interpret[1], initial)
        return
    expected = initial.clone()
    for o in set(active):
        expected[o] += 1
    assert torch.equal(numba[1], expected) and torch.equal(interpret[1], expected)


@triton.jit
def bump_2d(x_ptr, args_ptr, R: tl.constexpr, C: tl.constexpr):
    off = tl.load(args_ptr)
    s0 = tl.load(args_ptr + 1)
    s1 = tl.load(args_ptr + 2)
    m0 = tl.load(args_ptr + 3)
    m1 = tl.load(args_ptr + 4)
    rows = tl.arange(0, R)
    cols = tl.arange(0, C)
    p = x_ptr + off + rows[:, None] * s0 + cols[None, :] * s1
    mask = (rows[:, None] < m0) & (cols[None, :] < m1)
    v = tl.load(p, mask=mask, other=0)
    tl.store(p, v + 1, mask=mask)


@triton.jit
def bump_2d_direct(x_ptr, off, s0, m0, R: tl.constexpr, C: tl.constexpr):
    rows = tl.arange(0, R)
    cols = tl.arange(0, C)
    p = x_ptr + off + rows[:, None] * s0 + cols[None, :]
    mask = (rows[:, None] < m0) & (cols[None, :] < C)
    v = tl.load(p, mask=mask, other=0)
    tl.store(p, v + 1, mask=mask)


@triton.jit
def bump_gather(x_ptr, idx_ptr, mask_ptr, args_ptr, BLOCK: tl.constexpr):
    lanes = tl.arange(0, BLOCK)
    base = tl.load(args_ptr)
    p = x_ptr + base + tl.load(idx_ptr + lanes)
    mask = tl.load(mask_ptr + lanes) != 0
    v = tl.load(p, mask=mask, other=0)
    tl.store(p, v + 1, mask=mask)


@triton.jit
def bump_block(x_ptr, args_ptr, CHECK: tl.constexpr, R: tl.constexpr, C: tl.constexpr):
    a = tl.load(args_ptr)
    b = tl.load(args_ptr + 1)
    sm = tl.load(args_ptr + 2)
    sn = tl.load(args_ptr + 3)
    om = tl.load(args_ptr + 4)
    on = tl.load(args_ptr + 5)
    bp = tl.make_block_ptr(x_ptr, shape=(a, b), strides=(sm, sn), offsets=(om, on), block_shape=(R, C),
                           order=(1, 0))
    if CHECK:
        v = tl.load(bp, boundary_check=(0, 1), padding_option="zero")
        tl.store(bp, v + 1, boundary_check=(0, 1))
    else:
        v = tl.load(bp)
        tl.store(bp, v + 1)


def _box_offsets(off, s0, s1, m0, m1):
    return [off + r * s0 + c * s1 for r in range(min(max(m0, 0), R)) for c in range(min(max(m1, 0), C))]


_SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def _affine_case(data, n, dtype):
    off, s0, s1 = (data.draw(_scalars()) for _ in range(3))
    m0, m1 = data.draw(st.integers(-1, R + 1)), data.draw(st.integers(-1, C + 1))
    args = torch.tensor([off, s0, s1, m0, m1], dtype=torch.int64)
    _check(lambda x: bump_2d[(1,)](x, args, R=R, C=C), n, dtype, _box_offsets(off, s0, s1, m0, m1))


def _direct_case(data, n):
    off, s0 = data.draw(_scalars()), data.draw(_scalars())
    m0 = data.draw(st.integers(-1, R + 1))
    _check(lambda x: bump_2d_direct[(1,)](x, off, s0, m0, R=R, C=C), n, torch.float32,
           _box_offsets(off, s0, 1, m0, C))


_OFFSET_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]


def _gather_case(data, n):
    dtype = data.draw(st.sampled_from(_OFFSET_DTYPES))
    info = torch.iinfo(dtype)
    values = st.one_of(st.integers(-4, n + 4), st.integers(info.min, info.max),
                       st.sampled_from([info.min, info.max]))
    values = values.filter(lambda v: info.min <= v <= info.max)
    idx = data.draw(st.lists(values, min_size=BLOCK, max_size=BLOCK))
    mask = data.draw(st.lists(st.booleans(), min_size=BLOCK, max_size=BLOCK))
    base = data.draw(_scalars())
    idx_t = torch.tensor(idx, dtype=dtype)
    mask_t = torch.tensor(mask, dtype=torch.int8)
    args = torch.tensor([base], dtype=torch.int64)
    active = [base + i for i, m in zip(idx, mask, strict=True) if m]
    # an int64 sum that wraps is the program's own offset on both backends (the offsets are data)
    exact_known = all(-(2**63) <= o < 2**63 for o in active)
    _check(lambda x: bump_gather[(1,)](x, idx_t, mask_t, args, BLOCK=BLOCK), n, torch.float32, active,
           exact_known)


def _block_case(data, n):
    a, b = data.draw(st.integers(-1, 6)), data.draw(st.integers(-1, 6))
    sm, sn, om, on = (data.draw(_scalars()) for _ in range(4))
    check = data.draw(st.booleans())
    args = torch.tensor([a, b, sm, sn, om, on], dtype=torch.int64)
    active = [
        (om + i) * sm + (on + j) * sn
        for i in range(R)
        for j in range(C)
        if not check or (0 <= om + i < a and 0 <= on + j < b)
    ]
    _check(lambda x: bump_block[(1,)](x, args, CHECK=check, R=R, C=C), n, torch.float32, active)


def _one_case(data):
    n = data.draw(st.sampled_from([1, 16, 33]))
    kind = data.draw(st.sampled_from(["affine", "direct", "gather", "block"]))
    event(kind)
    if kind == "affine":
        _affine_case(data, n, data.draw(st.sampled_from([torch.float32, torch.int32])))
    elif kind == "direct":
        _direct_case(data, n)
    elif kind == "gather":
        _gather_case(data, n)
    else:
        _block_case(data, n)


@settings(max_examples=60, **_SETTINGS)
@given(st.data())
def test_launch_fuzz(data):
    _one_case(data)


@pytest.mark.slow
@settings(max_examples=5000, **_SETTINGS)
@given(st.data())
def test_launch_fuzz_long(data):
    _one_case(data)



@pytest.mark.parametrize("a,b,sm,sn,om,on", [
    (1, 0, 0, 1, 0, 2**63 - 1),  # what the long fuzz found: numba reported a fault, the interpreter none
    (1, 0, 0, 0, 0, 2**63 - 1),  # ... and with stride 0 wrote a lane of the empty shape
    (2, 3, 1, 0, 2**63 - 2, 0),
    (3, 2, 0, 1, -(2**63), 2**63 - 1),
])
def test_block_offsets_near_the_int64_limits_mask_their_lanes(a, b, sm, sn, om, on):
    """A boundary-checked block access whose offset plus a lane passes 2**63: every such lane is outside
    the shape. numba's int64 additions carry LLVM's no-signed-wrap flag, and `0 <= offset + lane < size`
    was folded to true on the lanes that wrap; the test is now made without forming that sum."""
    args = torch.tensor([a, b, sm, sn, om, on], dtype=torch.int64)
    active = [(om + i) * sm + (on + j) * sn for i in range(R) for j in range(C)
              if 0 <= om + i < a and 0 <= on + j < b]
    n = 16
    results = [_run(lambda x: bump_block[(1,)](x, args, CHECK=True, R=R, C=C), backend, n, torch.float32)
               for backend in ("numba", "interpret")]
    expected = torch.arange(n + 2 * CANARY).float().neg_()[CANARY:CANARY + n]
    for o in set(active):
        expected[o] += 1
    for raised, target, intact in results:
        assert intact and not raised and torch.equal(target, expected), (raised, target)
