"""One test per error class: message, line number and caret."""

import inspect

import pytest
import torch
import torch_rbln.dsl as tl

from torch_rbln import dsl as triton


def _line_of(fn, needle):
    lines, start = inspect.getsourcelines(fn.fn if hasattr(fn, "fn") else fn)
    for i, line in enumerate(lines):
        if needle in line:
            return start + i, line
    raise AssertionError(needle)


def _check(err, fn, needle, msg, caret_at=None):
    lineno, line = _line_of(fn, needle)
    assert err.lineno == lineno, (err.lineno, lineno, str(err))
    assert msg in err.msg, err.msg
    assert err.filename == __file__
    text = str(err)
    assert f"line {lineno}" in text
    assert line.strip() in text
    # the caret sits under the reported column
    src_line, caret_line = text.splitlines()[1:3]
    indent = len(line) - len(line.lstrip())
    assert caret_line.index("^") - 4 == err.col - indent
    if caret_at is not None:
        assert line[err.col:].startswith(caret_at), (line, err.col)
    return text


@triton.jit
def k_unsupported(x_ptr):
    y = [i for i in range(3)]  # noqa: F841
    tl.store(x_ptr, 1.0)


def test_unsupported_syntax():
    with pytest.raises(tl.CompilationError) as ei:
        k_unsupported[(1,)](torch.zeros(1))
    _check(ei.value, k_unsupported, "y = [i for", "unsupported syntax: ListComp", caret_at="[i for")


@triton.jit
def k_undefined(x_ptr):
    tl.store(x_ptr, undefined_name + 1)  # noqa: F821


def test_undefined_name():
    with pytest.raises(tl.CompilationError) as ei:
        k_undefined[(1,)](torch.zeros(1))
    _check(ei.value, k_undefined, "undefined_name + 1", "name 'undefined_name' is not defined",
           caret_at="undefined_name")


@triton.jit
def k_broadcast(x_ptr):
    a = tl.arange(0, 8)
    b = tl.arange(0, 4)
    tl.store(x_ptr + a, a + b)


def test_broadcast_shape_mismatch():
    with pytest.raises(tl.CompilationError) as ei:
        k_broadcast[(1,)](torch.zeros(8))
    _check(ei.value, k_broadcast, "a + b", "cannot broadcast shapes [8] and [4]", caret_at="a + b")


@triton.jit
def k_dot(x_ptr):
    a = tl.zeros((16, 8), tl.float32)
    b = tl.zeros((16, 16), tl.float32)
    c = tl.dot(a, b)
    tl.store(x_ptr + tl.arange(0, 16), tl.sum(c, 1))


def test_dot_shape_mismatch():
    with pytest.raises(tl.CompilationError) as ei:
        k_dot[(1,)](torch.zeros(16))
    _check(ei.value, k_dot, "c = tl.dot", "tl.dot shape mismatch", caret_at="tl.dot(a, b)")


@triton.jit
def k_arange(x_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(x_ptr + offs, 1.0)


def test_arange_not_power_of_two():
    with pytest.raises(tl.CompilationError) as ei:
        k_arange[(1,)](torch.zeros(12), N=12)
    _check(ei.value, k_arange, "offs = tl.arange", "arange's range must be a power of 2, got 12",
           caret_at="tl.arange")


@triton.jit
def k_constexpr(x_ptr, n):
    offs = tl.arange(0, n)
    tl.store(x_ptr + offs, 1.0)


def test_non_constexpr_where_constexpr_required():
    with pytest.raises(tl.CompilationError) as ei:
        k_constexpr[(1,)](torch.zeros(8), 8)
    _check(ei.value, k_constexpr, "offs = tl.arange", "must be compile-time integers (constexpr)")


@triton.jit
def k_static_assert(x_ptr, N: tl.constexpr):
    tl.static_assert(N % 2 == 0, "N must be even")
    tl.store(x_ptr, 1.0)


def test_static_assert():
    with pytest.raises(tl.CompilationError) as ei:
        k_static_assert[(1,)](torch.zeros(1), N=3)
    _check(ei.value, k_static_assert, "tl.static_assert", "static_assert failed: N must be even")


@triton.jit
def k_launch(x_ptr, n, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0, mask=tl.arange(0, BLOCK) < n)


def test_wrong_argument_count_at_launch():
    with pytest.raises(tl.CompilationError) as ei:
        k_launch[(1,)](torch.zeros(8), BLOCK=8)
    assert isinstance(ei.value, TypeError)
    _check(ei.value, k_launch, "def k_launch", "missing a required argument: 'n'", caret_at="def k_launch")
    with pytest.raises(tl.CompilationError, match="too many positional arguments"):
        k_launch[(1,)](torch.zeros(8), 8, 8, 8)


def test_wrong_argument_type_at_launch():
    with pytest.raises(tl.CompilationError) as ei:
        k_launch[(1,)](torch.zeros(8), "eight", BLOCK=8)
    _check(ei.value, k_launch, "def k_launch", "argument 'n' has unsupported type str", caret_at="n,")
    with pytest.raises(tl.CompilationError, match="unsupported tensor dtype"):
        k_launch[(1,)](torch.zeros(8, dtype=torch.complex64), 8, BLOCK=8)


@triton.jit
def helper_bad(x):
    return x + tl.arange(0, 3)


@triton.jit
def k_calls_helper(x_ptr):
    y = helper_bad(tl.load(x_ptr))
    tl.store(x_ptr, y)


def test_error_inside_helper_points_at_helper():
    with pytest.raises(tl.CompilationError) as ei:
        k_calls_helper[(1,)](torch.zeros(4))
    _check(ei.value, helper_bad, "return x + tl.arange", "power of 2")


@triton.jit
def k_oob(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(x_ptr + offs, x + 1, mask=offs < n)


def test_out_of_bounds_load_is_reported_not_corrupting():
    x = torch.zeros(10)
    with pytest.raises(tl.KernelRuntimeError) as ei:
        k_oob[(1,)](x, 10, BLOCK=16)
    msg = str(ei.value)
    lineno, _ = _line_of(k_oob, "x = tl.load(x_ptr + offs)")
    assert f"line {lineno}" in msg
    assert "out-of-bounds load of argument 'x_ptr'" in msg
    assert "offending offsets [10, 11, 12, 13, 14, 15]" in msg
    assert torch.equal(x, torch.zeros(10))


@triton.jit
def k_oob_store(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK) - 2
    tl.store(x_ptr + offs, 1.0)


def test_out_of_bounds_store():
    x = torch.zeros(16)
    with pytest.raises(tl.KernelRuntimeError, match=r"out-of-bounds store of argument 'x_ptr'.*\[-2, -1\]"):
        k_oob_store[(1,)](x, BLOCK=16)
    assert torch.equal(x, torch.zeros(16))


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown DSL backend.*valid backends: interpret"):
        k_launch[(1,)](torch.zeros(8), 8, BLOCK=8, backend="cuda")


def test_unknown_backend_env(monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", "nope")
    with pytest.raises(ValueError, match="TORCH_RBLN_DSL_BACKEND='nope'.*interpret"):
        k_launch[(1,)](torch.zeros(8), 8, BLOCK=8)


@triton.jit
def k_runtime_if_return(x_ptr):
    v = tl.load(x_ptr)
    if v > 0:
        return
    tl.store(x_ptr, 1.0)


def test_return_in_runtime_if():
    """An early return in a runtime `if` is supported (as in Triton): the rest of the kernel is skipped."""
    x = torch.zeros(1)
    k_runtime_if_return[(1,)](x)
    assert x.item() == 1.0
    x = torch.full((1,), 2.0)
    k_runtime_if_return[(1,)](x)
    assert x.item() == 2.0


@triton.jit
def k_tensor_bool(x_ptr):
    v = tl.load(x_ptr + tl.arange(0, 4))
    if v > 0:
        tl.store(x_ptr, 1.0)


def test_block_condition():
    with pytest.raises(tl.CompilationError, match="condition of a runtime `if` must be a scalar"):
        k_tensor_bool[(1,)](torch.zeros(4))


def test_direct_call_is_an_error():
    with pytest.raises(tl.CompilationError, match="cannot be called directly"):
        k_launch(torch.zeros(8), 8, 8)


@triton.jit
def k_branch_only(x_ptr):
    v = tl.load(x_ptr)
    if v > 0:
        w = v * 2
    tl.store(x_ptr, w)


def test_variable_defined_in_one_branch():
    with pytest.raises(tl.CompilationError) as ei:
        k_branch_only[(1,)](torch.zeros(1))
    _check(ei.value, k_branch_only, "tl.store(x_ptr, w)", "variable 'w' is not defined here: it is assigned "
           "in only one branch", caret_at="w)")
