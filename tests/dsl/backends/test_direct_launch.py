"""Direct launches (`JITFunction.launcher`): the generated hot path of repeated numba launches."""

from __future__ import annotations

import pytest
import torch
import torch_rbln.dsl as tl

from torch_rbln import dsl as triton


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, alpha * x + y, mask=mask)


@triton.jit
def unmasked_kernel(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets) + 1.0)


def _launch_once(x, y, out, alpha=2.0):
    axpy_kernel[(3,)](x, y, out, x.numel(), alpha, BLOCK=16)


def test_no_launcher_before_a_launch_of_that_specialisation():
    x = torch.randn(40, dtype=torch.float16)
    assert axpy_kernel.launcher(x, x, x, 40, 1.0, BLOCK=8) is None


def test_launcher_runs_the_kernel_like_a_grid_launch():
    x, y, out = torch.randn(40), torch.randn(40), torch.empty(40)
    _launch_once(x, y, out)
    _launch_once(x, y, out)  # the direct launch is built once the kernel has compiled
    launch = axpy_kernel.launcher(x, y, out, 40, 2.0, BLOCK=16)
    assert launch is not None
    x2, y2, out2 = torch.randn(40), torch.randn(40), torch.full((40,), float("nan"))
    assert launch((x2, y2, out2, 40, -0.5), {"BLOCK": 16}, 3, 1, 1) is True
    torch.testing.assert_close(out2, -0.5 * x2 + y2, atol=1e-6, rtol=1e-6)
    out3 = torch.full((40,), float("nan"))
    launch.unchecked(3, 1, 1, x2, y2, out3, 40, 3.0)
    torch.testing.assert_close(out3, 3.0 * x2 + y2, atol=1e-6, rtol=1e-6)


def test_strided_tensors_take_the_direct_launch_over_their_span():
    """A strided view (a slice of a growing id tensor) launches directly, bounds-checked over the elements
    from its first to its last as the general launch checks it: as in Triton, a pointer argument is the
    address of element 0, so the kernel reads memory linearly."""
    x, y, out = torch.randn(40), torch.randn(40), torch.empty(40)
    _launch_once(x, y, out)
    _launch_once(x, y, out)
    launch = axpy_kernel.launcher(x, y, out, 40, 2.0, BLOCK=16)
    base = torch.randn(80)
    strided = base[::2]
    target = torch.zeros(40)
    assert launch((strided, y, target, 40, 1.0), {"BLOCK": 16}, 3, 1, 1) is True
    torch.testing.assert_close(target, base[:40] + y, atol=1e-6, rtol=1e-6)
    general = torch.zeros(40)
    axpy_kernel[(3,)](strided, y, general, 40, 1.0, BLOCK=16)
    assert torch.equal(general, target)


def test_a_fault_past_a_strided_views_span_is_reported_from_the_direct_launch():
    good = torch.zeros(16)
    unmasked_kernel[(1,)](good, BLOCK=16)
    unmasked_kernel[(1,)](good, BLOCK=16)
    launch = unmasked_kernel.launcher(good, BLOCK=16)
    base = torch.zeros(14)
    view = base[::2]  # 7 elements over a span of 13
    with pytest.raises(tl.KernelRuntimeError, match=r"out-of-bounds load of argument 'x_ptr'.*13"):
        launch((view,), {"BLOCK": 16}, 1, 1, 1)
    assert torch.equal(base, torch.zeros(14))  # the bounds check runs before any store


def test_a_fault_in_a_direct_launch_is_reported_like_any_launch():
    good = torch.zeros(16)
    unmasked_kernel[(1,)](good, BLOCK=16)
    unmasked_kernel[(1,)](good, BLOCK=16)  # compiled: later launches take the direct path
    assert unmasked_kernel.launcher(good, BLOCK=16) is not None
    short = torch.zeros(10)
    with pytest.raises(tl.KernelRuntimeError, match=r"out-of-bounds load of argument 'x_ptr'.*10, 11"):
        unmasked_kernel[(1,)](short, BLOCK=16)
    assert torch.equal(short, torch.zeros(10))  # the bounds check runs before any store
    assert torch.equal(good, torch.full((16,), 2.0))


def test_a_launch_by_address_runs_the_kernel_on_the_given_addresses():
    x, y, out = torch.randn(40), torch.randn(40), torch.empty(40)
    _launch_once(x, y, out)
    _launch_once(x, y, out)
    by_address = axpy_kernel.launcher(x, y, out, 40, 2.0, BLOCK=16).unchecked.by_address
    x2, y2, out2 = torch.randn(40), torch.randn(40), torch.full((40,), float("nan"))
    assert by_address(3, 1, 1, x2.data_ptr(), 40, y2.data_ptr(), 40, out2.data_ptr(), 40, 40, 0.25) is True
    torch.testing.assert_close(out2, 0.25 * x2 + y2, atol=1e-6, rtol=1e-6)


def test_a_fault_in_a_launch_by_address_returns_false_and_clears_the_fault_record():
    good = torch.zeros(16)
    unmasked_kernel[(1,)](good, BLOCK=16)
    unmasked_kernel[(1,)](good, BLOCK=16)
    by_address = unmasked_kernel.launcher(good, BLOCK=16).unchecked.by_address
    short = torch.zeros(10)
    assert by_address(1, 1, 1, short.data_ptr(), 10) is False  # a 10-element span: the load of 16 faults
    assert torch.equal(short, torch.zeros(10))
    assert by_address(1, 1, 1, good.data_ptr(), 16) is True  # the record was reset: the next launch runs
    assert torch.equal(good, torch.full((16,), 3.0))


@triton.jit
def write_between_kernel(x_ptr, zero_ptr, o_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    a = tl.load(x_ptr + offsets)
    tl.store(zero_ptr + offsets, tl.zeros([BLOCK], dtype=tl.float32))
    tl.store(o_ptr + offsets, a + 1.0)


def test_a_direct_launch_refused_for_aliasing_reruns_on_the_alias_safe_kernel(monkeypatch):
    from torch_rbln.dsl.backends.numba_backend import executable

    x, zero, out = torch.arange(16, dtype=torch.float32), torch.empty(16), torch.empty(16)
    write_between_kernel[(1,)](x, zero, out, BLOCK=16)
    write_between_kernel[(1,)](x, zero, out, BLOCK=16)
    unchecked = write_between_kernel.launcher(x, zero, out, BLOCK=16).unchecked
    expected = torch.arange(16, dtype=torch.float32) + 1.0
    # zero_ptr is x: the load must be a snapshot taken before the store of zeros (Triton's program
    # order); the first aliased call compiles the alias-safe variant through the general launch
    aliased = torch.arange(16, dtype=torch.float32)
    unchecked(1, 1, 1, aliased, aliased, out)
    assert torch.equal(out, expected) and torch.equal(aliased, torch.zeros(16))
    general = []
    launch = executable.Executable.launch
    monkeypatch.setattr(executable.Executable, "launch", lambda self, *a, **k: (general.append(self),
                                                                                 launch(self, *a, **k)))
    for _ in range(2):  # later aliased calls: the variant's kernel, called directly
        aliased, out = torch.arange(16, dtype=torch.float32), torch.empty(16)
        unchecked(1, 1, 1, aliased, aliased, out)
        assert torch.equal(out, expected) and torch.equal(aliased, torch.zeros(16))
    aliased, out = torch.arange(16, dtype=torch.float32), torch.empty(16)
    unchecked.aliasing(1, 1, 1, aliased, aliased, out)  # a caller that knows its call aliases: one call
    assert torch.equal(out, expected) and torch.equal(aliased, torch.zeros(16))
    assert general == []
    out = torch.empty(16)  # and a call whose arguments do not alias still runs the plain kernel
    unchecked(1, 1, 1, torch.arange(16, dtype=torch.float32), torch.empty(16), out)
    assert torch.equal(out, expected)
