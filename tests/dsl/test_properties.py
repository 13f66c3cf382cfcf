"""Property-based tests (hypothesis): broadcasting, reductions and masks against torch/numpy."""

import numpy as np
import torch
import torch_rbln.dsl as tl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torch_rbln import dsl as triton

DIMS = st.sampled_from([1, 2, 4, 8])


def _settings(backend: str) -> settings:
    """Every example specialises the kernel anew (shapes are constexprs): the interpreter explores 25
    of them, the compiled backend a fixed handful (each costs a numba compile of seconds)."""
    return settings(max_examples=25 if backend == "interpret" else 5, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@triton.jit
def _idx3(D0: tl.constexpr, D1: tl.constexpr, D2: tl.constexpr):
    return (tl.arange(0, D0)[:, None, None] * (D1 * D2) + tl.arange(0, D1)[None, :, None] * D2
            + tl.arange(0, D2)[None, None, :])


@triton.jit
def bcast_kernel(a_ptr, b_ptr, o_ptr, A0: tl.constexpr, A1: tl.constexpr, A2: tl.constexpr,
                 B0: tl.constexpr, B1: tl.constexpr, B2: tl.constexpr, O0: tl.constexpr, O1: tl.constexpr,
                 O2: tl.constexpr, B_RANK: tl.constexpr):
    a = tl.load(a_ptr + _idx3(A0, A1, A2))
    b = tl.load(b_ptr + _idx3(B0, B1, B2))
    if B_RANK == 2:
        b = tl.reshape(b, (B1, B2))  # numpy-style left padding of the rank
    r = a * b + tl.maximum(a, b) - tl.where(a > b, a, 0.5)
    tl.store(o_ptr + _idx3(O0, O1, O2), r)


@st.composite
def broadcastable(draw):
    out = [draw(DIMS) for _ in range(3)]
    a = [d if draw(st.booleans()) else 1 for d in out]
    b = [d if draw(st.booleans()) else 1 for d in out]
    out = [max(x, y) for x, y in zip(a, b, strict=True)]
    rank_b = 2 if (b[0] == 1 and draw(st.booleans())) else 3
    return a, b, out, rank_b


def test_broadcasting_matches_torch(dsl_backend):
    _settings(dsl_backend)(given(broadcastable(), st.sampled_from([torch.float32, torch.float16]))(
        _check_broadcasting))()


def _check_broadcasting(shapes, dtype):
    a_shape, b_shape, out_shape, rank_b = shapes
    a = torch.randn(a_shape, dtype=dtype)
    b = torch.randn(b_shape, dtype=dtype)
    o = torch.empty(out_shape, dtype=dtype)
    bcast_kernel[(1,)](a, b, o, *a_shape, *b_shape, *out_shape, B_RANK=rank_b)
    bb = b.reshape(b_shape[1:]) if rank_b == 2 else b
    ref = a * bb + torch.maximum(a, bb) - torch.where(a > bb, a, torch.tensor(0.5, dtype=dtype))
    torch.testing.assert_close(o, ref, atol=0, rtol=0)


@triton.jit
def reduce3_kernel(x_ptr, o_ptr, D0: tl.constexpr, D1: tl.constexpr, D2: tl.constexpr, K0: tl.constexpr,
                   K1: tl.constexpr, K2: tl.constexpr, OP: tl.constexpr, AXIS: tl.constexpr,
                   KEEP: tl.constexpr):
    x = tl.load(x_ptr + _idx3(D0, D1, D2))
    if OP == "sum":
        r = tl.sum(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "max":
        r = tl.max(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "min":
        r = x.min(AXIS, keep_dims=KEEP)
    elif OP == "argmax":
        r = tl.argmax(x, axis=AXIS, keep_dims=KEEP).to(tl.float32)
    else:
        r = tl.argmin(x, axis=AXIS, keep_dims=KEEP).to(tl.float32)
    if AXIS is None:
        if KEEP:
            r = tl.reshape(r, ())
        tl.store(o_ptr, r)
    else:
        tl.store(o_ptr + _idx3(K0, K1, K2), tl.reshape(r, (K0, K1, K2)))


def test_reductions_match_torch(dsl_backend):
    _settings(dsl_backend)(given(
        st.lists(DIMS, min_size=3, max_size=3), st.sampled_from(["sum", "max", "min", "argmax", "argmin"]),
        st.sampled_from([0, 1, 2, -1, None]), st.booleans(),
    )(_check_reduction))()


def _check_reduction(shape, op, axis, keep):
    if axis is None and op in ("argmax", "argmin"):
        axis = 0
    x = torch.randn(shape)
    if axis is None:
        kshape = [1, 1, 1]
    else:
        kshape = list(shape)
        kshape[axis] = 1
    o = torch.empty(kshape)
    reduce3_kernel[(1,)](x, o, *shape, *kshape, OP=op, AXIS=axis, KEEP=keep)
    if axis is None:
        ref = {"sum": x.sum(), "max": x.max(), "min": x.min()}[op]
        torch.testing.assert_close(o.reshape(()), ref, atol=1e-5, rtol=1e-5)
        return
    ref = {"sum": lambda: x.sum(axis, keepdim=True), "max": lambda: x.amax(axis, keepdim=True),
           "min": lambda: x.amin(axis, keepdim=True),
           "argmax": lambda: x.argmax(axis, keepdim=True).float(),
           "argmin": lambda: x.argmin(axis, keepdim=True).float()}[op]()
    torch.testing.assert_close(o, ref, atol=1e-5, rtol=1e-5)


@triton.jit
def masked_copy_kernel(x_ptr, m_ptr, o_ptr, n, other, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inb = offs < n
    keep = tl.load(m_ptr + offs, mask=inb, other=0) != 0
    x = tl.load(x_ptr + offs, mask=inb & keep, other=other)
    tl.store(o_ptr + offs, x, mask=inb)


def test_masked_loads_read_other(dsl_backend):
    _settings(dsl_backend)(given(
        st.integers(1, 300), st.sampled_from([16, 64, 128]), st.floats(-10, 10, width=32), st.floats(0, 1),
    )(_check_masked_load))()


def _check_masked_load(n, block, other, density):
    x = torch.randn(n)
    keep = torch.from_numpy(np.random.default_rng(n).random(n) < density)
    o = torch.full((n,), 123.0)
    masked_copy_kernel[(triton.cdiv(n, block),)](x, keep, o, n, other, BLOCK=block)
    ref = torch.where(keep, x, torch.tensor(other, dtype=torch.float32))
    torch.testing.assert_close(o, ref, atol=0, rtol=0)
