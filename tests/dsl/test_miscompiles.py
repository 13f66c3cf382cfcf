"""Regression tests for silent wrong results (miscompiles), each checked against torch/numpy.

Every test runs on both backends (conftest's `dsl_backend` fixture).  Several launch programs that take
different branches in an order where a stale value from an earlier program would show.
"""

import numpy as np
import torch
import torch_rbln.dsl as tl

from torch_rbln import dsl as triton

# ---------------------------------------------------------------------------------------------------
# A value computed before a runtime `if` and used inside the branches (and after them).
# The numba backend used to compute such a value into a buffer inside the first branch that needed it
# and then read that buffer in the other branch too, where it held data of an earlier program.
# ---------------------------------------------------------------------------------------------------


@triton.jit
def _value_before_if_kernel(x_ptr, c_ptr, o_ptr, B: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, B)
    a = tl.load(x_ptr + pid * B + offs) + 1.0  # cheap: kept as an expression until needed
    if tl.load(c_ptr + pid) > 0:
        r = a
    else:
        r = a + 100.0
    tl.store(o_ptr + pid * B + offs, r)


def test_value_defined_before_if_used_in_else():
    x = torch.arange(16, dtype=torch.float32)
    taken = torch.tensor([1, 0, 1, 0], dtype=torch.int32)
    out = torch.zeros(16)
    _value_before_if_kernel[(4,)](x, taken, out, B=4)
    ref = torch.where(taken.repeat_interleave(4) > 0, x + 1.0, x + 101.0)
    assert torch.equal(out, ref)


def test_value_defined_before_if_else_taken_first():
    # the first program takes the else branch: nothing was ever computed into the buffer
    x = torch.arange(16, dtype=torch.float32)
    taken = torch.tensor([0, 0, 1, 0], dtype=torch.int32)
    out = torch.zeros(16)
    _value_before_if_kernel[(4,)](x, taken, out, B=4)
    ref = torch.where(taken.repeat_interleave(4) > 0, x + 1.0, x + 101.0)
    assert torch.equal(out, ref)


# A masked load inside a runtime `if` that the kernel enters before anything else, and a store under the
# same mask after it. The numba backend memoises a mask's active-lane count per region; the first region
# of a kernel took the function body's id, so the count computed in the branch was reused after it: the
# other branch's programs stored nothing (or a count left by an earlier program).


@triton.jit
def _masked_load_in_first_if_kernel(x_ptr, o_ptr, n, B: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, B)
    mask = offs < n - pid
    if pid % 2 == 0:  # nothing before the branch emits code of its own
        v = tl.load(x_ptr + offs, mask=mask, other=1.0)
    else:
        v = tl.zeros((B,), dtype=tl.float32) + tl.load(x_ptr + pid)
    tl.store(o_ptr + pid * B + offs, v, mask=mask)


def test_masked_load_in_the_first_branch_and_a_store_under_its_mask_after():
    x = torch.arange(8, dtype=torch.float32) + 1.0
    out = torch.zeros(32)
    _masked_load_in_first_if_kernel[(4,)](x, out, 6, B=8)  # each program's active lanes: 6, 5, 4, 3
    ref = torch.zeros(4, 8)
    for pid in range(4):
        active = 6 - pid
        ref[pid, :active] = x[:active] if pid % 2 == 0 else x[pid]
    assert torch.equal(out, ref.flatten())


@triton.jit
def _value_before_loop_kernel(x_ptr, n_ptr, o_ptr, B: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, B)
    a = tl.load(x_ptr + pid * B + offs) * 2.0
    r = a * 0.0
    for _ in range(tl.load(n_ptr + pid)):  # runs zero times in some programs
        r = tl.max(a, axis=0) + r
    tl.store(o_ptr + pid * B + offs, a + r)


def test_value_defined_before_zero_trip_loop_used_after():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    trips = torch.tensor([0, 2, 0], dtype=torch.int32)
    out = torch.zeros(12)
    _value_before_loop_kernel[(3,)](x, trips, out, B=4)
    a = x * 2.0
    ref = a + trips[:, None] * a.max(dim=1, keepdim=True).values
    assert torch.equal(out.reshape(3, 4), ref)


@triton.jit
def _value_before_nested_if_kernel(x_ptr, c_ptr, o_ptr, B: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, B)
    a = tl.load(x_ptr + pid * B + offs) - 3.0
    c = tl.load(c_ptr + pid)
    r = a * 0.0
    if c > 0:
        if c > 1:
            r = tl.cumsum(a, axis=0)
        else:
            r = a
    else:
        w = 0
        while w < 2:
            r = r + tl.max(a, axis=0)
            w += 1
    tl.store(o_ptr + pid * B + offs, r + a)


def test_value_defined_before_nested_if_and_while():
    x = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    c = torch.tensor([2, 0, 1, 0], dtype=torch.int32)
    out = torch.zeros(16)
    _value_before_nested_if_kernel[(4,)](x, c, out, B=4)
    a = x - 3.0
    rows = [torch.cumsum(a[0], 0), 2 * a[1].max().expand(4), a[2], 2 * a[3].max().expand(4)]
    ref = torch.stack(rows) + a
    assert torch.equal(out.reshape(4, 4), ref)


# The layer-norm backward pattern (Triton tutorial 05): each program adds its row's partial dw/db into
# one of GROUP row slots under a spin lock; the first program to take a slot stores instead of adding.
@triton.jit
def _layer_norm_bwd_partial_kernel(X, DY, W, Mean, Rstd, DX, DW_part, DB_part, Lock, N,
                                   GROUP: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < N
    x = tl.load(X + row * N + cols, mask=inside, other=0.0)
    dy = tl.load(DY + row * N + cols, mask=inside, other=0.0)
    w = tl.load(W + cols, mask=inside, other=0.0)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = tl.where(inside, (x - mean) * rstd, 0.0)
    wdy = tl.where(inside, w * dy, 0.0)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    tl.store(DX + row * N + cols, (wdy - (xhat * c1 + c2)) * rstd, mask=inside)
    slot = row % GROUP
    lock = Lock + slot
    count = Lock + GROUP + slot
    dw = dy * xhat  # partial sums, computed before the lock and the branch below
    db = dy
    while tl.atomic_cas(lock, 0, 1) == 1:
        pass
    if tl.load(count) == 0:
        tl.atomic_xchg(count, 1)
    else:
        dw += tl.load(DW_part + slot * N + cols, mask=inside)
        db += tl.load(DB_part + slot * N + cols, mask=inside)
    tl.store(DW_part + slot * N + cols, dw, mask=inside)
    tl.store(DB_part + slot * N + cols, db, mask=inside)
    tl.atomic_xchg(lock, 0)


def test_layer_norm_backward_with_lock():
    M, N, group = 10, 24, 4
    torch.manual_seed(0)
    x = torch.randn(M, N)
    w = torch.rand(N) + 0.5
    b = torch.rand(N)
    dy = 0.1 * torch.randn(M, N)
    mean = x.mean(1)
    rstd = 1.0 / torch.sqrt(x.var(1, unbiased=False) + 1e-5)
    dx = torch.empty(M, N)
    dw_part = torch.full((group, N), float("nan"))  # never read before the first store of a slot
    db_part = torch.full((group, N), float("nan"))
    locks = torch.zeros(2 * group, dtype=torch.int32)
    _layer_norm_bwd_partial_kernel[(M,)](x, dy, w, mean, rstd, dx, dw_part, db_part, locks, N,
                                         GROUP=group, BLOCK=32)
    xr = x.clone().requires_grad_(True)
    wr = w.clone().requires_grad_(True)
    br = b.clone().requires_grad_(True)
    torch.nn.functional.layer_norm(xr, (N,), wr, br, 1e-5).backward(dy)
    torch.testing.assert_close(dx, xr.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(dw_part.sum(0), wr.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(db_part.sum(0), br.grad, atol=1e-5, rtol=1e-4)
    assert locks[:group].eq(0).all() and locks[group:].eq(1).all()


# ---------------------------------------------------------------------------------------------------
# Reverse scans with a non-commutative combine function.  Triton defines a reverse scan as the forward
# scan of the flipped block, flipped back: out[i] = f(...f(f(x[n-1], x[n-2]), x[n-3])..., x[i]), so the
# left argument is the accumulated value from the END of the axis and the right one the element at i
# (Triton's test_core.py test_scan2d: `get_first_element` reversed gives x[-1] everywhere).
# ---------------------------------------------------------------------------------------------------


@triton.jit
def _keep_left(a, b):
    return a


@triton.jit
def _last_nonzero(a, b):
    # associative, not commutative: the last non-zero element seen in scan order
    return tl.where(b != 0, b, a)


@triton.jit
def _scan_kernel(x_ptr, o_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr, FN: tl.constexpr,
                 REVERSE: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    if FN == 0:
        y = tl.associative_scan(x, AXIS, _keep_left, reverse=REVERSE)
    else:
        y = tl.associative_scan(x, AXIS, _last_nonzero, reverse=REVERSE)
    tl.store(o_ptr + offs, y)


def _reference_scan(x: np.ndarray, axis: int, fn, reverse: bool) -> np.ndarray:
    """Sequential inclusive scan: a reverse scan is the forward scan of the flipped input, flipped."""
    x = np.flip(x, axis) if reverse else x
    moved = np.moveaxis(x, axis, 0)
    out = np.empty_like(moved)
    out[0] = moved[0]
    for i in range(1, moved.shape[0]):
        out[i] = fn(out[i - 1], moved[i])
    out = np.moveaxis(out, 0, axis)
    return np.flip(out, axis) if reverse else out


def test_reverse_associative_scan_argument_order():
    rng = np.random.RandomState(0)
    x = rng.randint(0, 3, size=(4, 8)).astype(np.int32)  # zeros are frequent
    functions = [lambda a, b: a, lambda a, b: np.where(b != 0, b, a)]
    for fn_index, fn in enumerate(functions):
        for axis in (0, 1):
            for reverse in (False, True):
                out = torch.empty(4, 8, dtype=torch.int32)
                _scan_kernel[(1,)](torch.from_numpy(x), out, M=4, N=8, AXIS=axis, FN=fn_index,
                                   REVERSE=reverse)
                ref = _reference_scan(x, axis, fn, reverse)
                assert np.array_equal(out.numpy(), ref), (fn_index, axis, reverse, out.numpy(), ref)


def test_reverse_keep_left_scan_broadcasts_last_element():
    # Triton's own expectation for `get_first_element` with reverse=True
    x = torch.arange(8, dtype=torch.float32).reshape(1, 8)
    out = torch.empty(1, 8)
    _scan_kernel[(1,)](x, out, M=1, N=8, AXIS=1, FN=0, REVERSE=True)
    assert torch.equal(out, torch.full((1, 8), 7.0))


# ---------------------------------------------------------------------------------------------------
# Arguments that alias each other. The numba backend reads a load from an argument the kernel never
# writes where the value is consumed (one loop instead of two). When another argument points at the
# same memory, a write in between (or the consuming store itself, at another address) changed what that
# deferred read saw. Each result is what Triton's program order means: loads read before later stores.
# ---------------------------------------------------------------------------------------------------


@triton.jit
def _write_between_kernel(x_ptr, zero_ptr, o_ptr, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    a = tl.load(x_ptr + offs)
    tl.store(zero_ptr + offs, tl.zeros([B], dtype=tl.float32))
    tl.store(o_ptr + offs, a + 1.0)


@triton.jit
def _scaled_copy_kernel(x_ptr, o_ptr, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(o_ptr + offs, tl.load(x_ptr + offs) * 2.0)


@triton.jit
def _shifted_store_kernel(x_ptr, o_ptr, B: tl.constexpr):
    offs = tl.arange(0, B)
    tl.store(o_ptr + offs + 1, tl.load(x_ptr + offs) * 2.0, mask=offs < B - 1)


@triton.jit
def _store_in_loop_kernel(x_ptr, o_ptr, n, B: tl.constexpr):
    offs = tl.arange(0, B)
    a = tl.load(x_ptr + offs)
    for i in range(n):  # the load stands before the loop: every iteration sees the original values
        tl.store(o_ptr + offs, a + i)


def test_aliased_argument_written_between_load_and_use():
    x = torch.arange(8, dtype=torch.float32)
    out = torch.empty(8)
    _write_between_kernel[(2,)](x, x, out, B=4)  # zero_ptr is x
    assert torch.equal(out, torch.arange(8, dtype=torch.float32) + 1.0)
    assert torch.equal(x, torch.zeros(8))


def test_aliased_argument_written_between_load_and_use_many_programs():
    # more programs than the first chunk of a launch (the chunked path), twice (the cached launch path)
    for _ in range(2):
        x = torch.arange(2048, dtype=torch.float32)
        out = torch.empty(2048)
        _write_between_kernel[(512,)](x, x, out, B=4)
        assert torch.equal(out, torch.arange(2048, dtype=torch.float32) + 1.0)
        assert torch.equal(x, torch.zeros(2048))


def test_same_memory_in_and_out_elementwise():
    x = torch.arange(8, dtype=torch.float32)
    _scaled_copy_kernel[(2,)](x, x, B=4)
    assert torch.equal(x, torch.arange(8, dtype=torch.float32) * 2.0)


def test_overlapping_views_in_and_out():
    base = torch.arange(9, dtype=torch.float32)
    # out is x moved one element on: a deferred read would see what the previous lane just wrote (one
    # program: across programs this overlap is a race, as on any Triton device)
    _scaled_copy_kernel[(1,)](base[:-1], base[1:], B=8)
    assert torch.equal(base, torch.cat([torch.zeros(1), torch.arange(8, dtype=torch.float32) * 2.0]))


def test_shifted_store_into_the_loaded_memory():
    x = torch.arange(8, dtype=torch.float32)
    _shifted_store_kernel[(1,)](x, x, B=8)
    assert torch.equal(x, torch.tensor([0.0, 0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0]))


def test_load_before_loop_stored_in_loop_to_aliased_memory():
    x = torch.arange(8, dtype=torch.float32)
    _store_in_loop_kernel[(1,)](x, x, 3, B=8)
    assert torch.equal(x, torch.arange(8, dtype=torch.float32) + 2.0)


def test_aliasing_launch_then_plain_launch_on_the_cached_path():
    for aliased in (False, True, False, True):
        x = torch.arange(8, dtype=torch.float32)
        zero = x if aliased else torch.empty(8)
        out = torch.empty(8)
        _write_between_kernel[(2,)](x, zero, out, B=4)
        assert torch.equal(out, torch.arange(8, dtype=torch.float32) + 1.0), aliased


class _Messages(list):
    """Messages the torch_rbln logger emits while installed (it does not propagate to caplog)."""

    def __enter__(self):
        import logging

        self.handler = logging.Handler(logging.INFO)
        self.handler.emit = lambda record: self.append(record.getMessage())
        self.logger = logging.getLogger("torch_rbln")
        self.level = self.logger.level
        self.logger.addHandler(self.handler)
        self.logger.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.level)


def test_disjoint_and_in_place_launches_keep_the_deferred_reads(dsl_backend):
    """Only a launch whose arguments overlap pays for the alias-safe variant; an in-place elementwise
    launch (same memory in and out, read just before the same lane writes it) does not."""

    @triton.jit
    def scale(x_ptr, o_ptr, B: tl.constexpr):
        offs = tl.arange(0, B)
        tl.store(o_ptr + offs, tl.load(x_ptr + offs) * 3.0)

    @triton.jit
    def shifted(x_ptr, o_ptr, B: tl.constexpr):
        offs = tl.arange(0, B)
        tl.store(o_ptr + offs + 1, tl.load(x_ptr + offs) * 3.0, mask=offs < B - 1)

    x = torch.arange(8, dtype=torch.float32)
    with _Messages() as messages:
        scale[(1,)](x, x, B=8)
        scale[(1,)](x, torch.empty(8), B=8)
        shifted[(1,)](x, torch.empty(8), B=8)
    assert not [m for m in messages if "reads loads in place" in m]
    with _Messages() as messages:
        shifted[(1,)](x, x, B=8)
    assert bool([m for m in messages if "reads loads in place" in m]) == (dsl_backend == "numba")
