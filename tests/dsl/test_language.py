"""Language features: control flow, helpers, constexpr patterns, dtypes and rounding, integer semantics,
block pointers and tensor descriptors, printing, caching and launch plumbing."""

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl import language as tl2
from torch_rbln.dsl import rbln as rblib  # noqa: F401
from torch_rbln.dsl.extra import libdevice

from torch_rbln import dsl as triton


def test_module_aliases():
    assert tl2.load is tl.load and tl2.constexpr is tl.constexpr and tl2.float32 is tl.float32
    assert tl.math.exp is tl.exp and tl2.extra.libdevice is libdevice
    assert triton.cdiv(10, 4) == 3 and triton.next_power_of_2(33) == 64 and triton.next_power_of_2(1) == 1


# ------------------------------------------------------------------------------------------------
# control flow
# ------------------------------------------------------------------------------------------------
@triton.jit
def collatz_kernel(x_ptr, out_ptr):
    pid = tl.program_id(0)
    n = tl.load(x_ptr + pid)
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    tl.store(out_ptr + pid, steps)


def test_while_and_runtime_if():
    x = torch.tensor([1, 2, 3, 6, 7, 27], dtype=torch.int32)
    out = torch.empty(6, dtype=torch.int32)
    collatz_kernel[(6,)](x, out)

    def steps(n):
        s = 0
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            s += 1
        return s

    assert out.tolist() == [steps(int(v)) for v in x]


@triton.jit
def loop_kinds_kernel(out_ptr, n, STEP: tl.constexpr):
    acc = 0  # promoted to float by the loop body
    for i in tl.range(0, n, STEP, num_stages=2):
        acc += i * 0.5
    total = 0
    for j in tl.static_range(1, 4):
        total += j
    for k in range(n):
        for _m in range(k):
            total += 1
    tl.store(out_ptr, acc)
    tl.store(out_ptr + 1, total)


def test_loops_and_loop_carried_promotion():
    out = torch.zeros(2)
    loop_kinds_kernel[(1,)](out, 7, STEP=2)
    assert out.tolist() == [sum(i * 0.5 for i in range(0, 7, 2)), 6 + 21]


@triton.jit
def _helper_pair(x, SCALE: tl.constexpr):
    return x * SCALE, x + SCALE


@triton.jit
def helper_kernel(x_ptr, y_ptr, b_ptr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr, ACT: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    a, b = _helper_pair(x, SCALE=3)
    y = a + b
    if HAS_BIAS:
        y += tl.load(b_ptr + offs)
    if b_ptr is not None:
        y += 1000.0
    if ACT == "relu":
        y = tl.maximum(y, 0.0)
    tl.store(y_ptr + offs, y)


def test_helpers_and_constexpr_patterns():
    x = torch.randn(16)
    y = torch.empty(16)
    helper_kernel[(1,)](x, y, None, HAS_BIAS=False, BLOCK=16, ACT="none")
    torch.testing.assert_close(y, x * 3 + x + 3)
    b = torch.randn(16)
    helper_kernel[(1,)](x, y, b, HAS_BIAS=True, BLOCK=16, ACT="relu")
    torch.testing.assert_close(y, torch.relu(x * 3 + x + 3 + b + 1000.0))


# ------------------------------------------------------------------------------------------------
# dtypes, promotion and exact rounding
# ------------------------------------------------------------------------------------------------
@triton.jit
def cast_kernel(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs).to(y_ptr.dtype.element_ty))


@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.int32])
def test_bf16_round_to_nearest_even(src):
    # exact halfway cases, and a halfway case + tiny epsilon that fp32 would lose (double rounding)
    vals = [1.00390625, 1.01171875, -1.00390625, 3.0e38, 1e-3, 0.1, 65535.0, 2 ** 24 + 1]
    if src == torch.float64:
        vals.append(1.00390625 + 2.0 ** -40)
    x = torch.tensor(vals, dtype=src) if src != torch.int32 else torch.tensor([1, 257, 65535, 2 ** 24 + 1,
                                                                                -383, 0, 7, 12345])
    n = 16
    xp = torch.zeros(n, dtype=src)
    xp[: len(x)] = x
    y = torch.empty(n, dtype=torch.bfloat16)
    cast_kernel[(1,)](xp, y, N=n)
    # reference: exact RNE from the float64 value via integer arithmetic on the significand
    ref = []
    for v in xp.double().tolist():
        m, e = np.frexp(v)
        scaled = m * 2.0 ** 8  # 8 significant bits
        r = np.round(scaled)  # numpy rounds half to even
        ref.append(float(r * 2.0 ** (e - 8)))
    assert y.float().tolist() == [float(np.float32(v)) for v in ref]
    if src == torch.float64:
        assert y[len(vals) - 1].item() == 1.0078125


@triton.jit
def arith_kernel(a_ptr, b_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    tl.store(o_ptr + offs, a * b + a)
    tl.store(o_ptr + N + offs, tl.exp(a))
    tl.store(o_ptr + 2 * N + offs, tl.sqrt(tl.abs(b)))
    tl.store(o_ptr + 3 * N + offs, (a / b).to(a.dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_arithmetic_rounds_each_op(dtype):
    n = 256
    a, b = torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)
    o = torch.empty(4 * n, dtype=dtype)
    arith_kernel[(1,)](a, b, o, N=n)
    # per-op rounding to the declared dtype, like torch's CPU kernels for these dtypes
    assert torch.equal(o[:n], a * b + a)
    assert torch.equal(o[2 * n: 3 * n], torch.sqrt(b.abs()))
    assert torch.equal(o[3 * n:], (a.float() / b.float()).to(dtype))  # fp16/bf16 '/' is computed in fp32
    torch.testing.assert_close(o[n: 2 * n], torch.exp(a), atol=0, rtol=2 ** -7)


@triton.jit
def promo_kernel(o_ptr, x_ptr):
    x = tl.load(x_ptr)
    tl.static_assert((x * 2.0).dtype == x.dtype)  # python scalars are weakly typed
    tl.static_assert((x / 2).dtype == tl.float32)  # fp16 division promotes to fp32
    tl.static_assert((tl.arange(0, 4) + 1.5).dtype == tl.float32)
    tl.static_assert((tl.arange(0, 4).to(tl.int8) + 1).dtype == tl.int8)
    tl.static_assert((tl.arange(0, 4).to(tl.int64) + tl.arange(0, 4)).dtype == tl.int64)
    tl.static_assert(tl.sum(tl.arange(0, 4).to(tl.int8), 0).dtype == tl.int32)
    tl.static_assert((tl.arange(0, 4) < 2).dtype == tl.int1)
    tl.store(o_ptr, x)


def test_type_promotion_rules():
    promo_kernel[(1,)](torch.zeros(1, dtype=torch.float16), torch.ones(1, dtype=torch.float16))


@triton.jit
def int_kernel(a_ptr, b_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    tl.store(o_ptr + offs, a // b)
    tl.store(o_ptr + N + offs, a % b)
    tl.store(o_ptr + 2 * N + offs, (a << 3) >> 1)
    tl.store(o_ptr + 3 * N + offs, (a * 1000003) ^ b)
    tl.store(o_ptr + 4 * N + offs, tl.where(a > b, a, b) & 0xFF)


def test_integer_semantics_c_style():
    a = torch.tensor([-7, 7, -7, 7, 2 ** 30, -1, 0, 5], dtype=torch.int32)
    b = torch.tensor([2, -2, -2, 2, 3, 7, 9, -5], dtype=torch.int32)
    o = torch.empty(5 * 8, dtype=torch.int32)
    int_kernel[(1,)](a, b, o, N=8)
    an, bn = a.numpy().astype(np.int64), b.numpy().astype(np.int64)
    assert o[:8].tolist() == [int(x / y) for x, y in zip(an, bn, strict=False)]  # truncation toward zero
    assert o[8:16].tolist() == list(np.fmod(an, bn))
    assert o[16:24].tolist() == list((a.numpy() << 3) >> 1)
    assert o[24:32].tolist() == list((a.numpy() * np.int32(1000003)) ^ b.numpy())  # int32 wraps
    assert o[32:].tolist() == list(np.maximum(an, bn) & 0xFF)


# ------------------------------------------------------------------------------------------------
# shapes, dot, reductions
# ------------------------------------------------------------------------------------------------
@triton.jit
def shape_kernel(x_ptr, o_ptr, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr):
    offs = (tl.arange(0, A)[:, None, None] * B * C + tl.arange(0, B)[None, :, None] * C
            + tl.arange(0, C)[None, None, :])
    x = tl.load(x_ptr + offs)                      # (A, B, C)
    y = tl.permute(x, (2, 0, 1))                    # (C, A, B)
    y = tl.reshape(y, (C, A * B))
    z = tl.trans(y)                                 # (A*B, C)
    w = tl.view(z, A * B * C)
    e = tl.expand_dims(tl.sum(x, axis=2), 2)        # (A, B, 1)
    f = tl.broadcast_to(e, (A, B, C))
    tl.store(o_ptr + tl.arange(0, A * B * C), w)
    tl.store(o_ptr + A * B * C + offs, f + tl.trans(x, 2, 1, 0).permute(2, 1, 0))


def test_shape_ops():
    A, B, C = 2, 4, 8
    x = torch.randn(A, B, C)
    o = torch.empty(2 * A * B * C)
    shape_kernel[(1,)](x, o, A=A, B=B, C=C)
    torch.testing.assert_close(o[: A * B * C], x.permute(2, 0, 1).reshape(C, A * B).t().reshape(-1))
    torch.testing.assert_close(o[A * B * C:], (x.sum(2, keepdim=True) + x).reshape(-1))


@triton.jit
def bdot_kernel(a_ptr, b_ptr, c_ptr, o_ptr, Bt: tl.constexpr, M: tl.constexpr, K: tl.constexpr,
                N: tl.constexpr):
    a_bp = tl.make_block_ptr(a_ptr, (Bt, M, K), (M * K, K, 1), (0, 0, 0), (Bt, M, K), (2, 1, 0))
    b_bp = tl.make_block_ptr(b_ptr, (Bt, K, N), (K * N, N, 1), (0, 0, 0), (Bt, K, N), (2, 1, 0))
    c_bp = tl.make_block_ptr(c_ptr, (Bt, M, N), (M * N, N, 1), (0, 0, 0), (Bt, M, N), (2, 1, 0))
    o_bp = tl.make_block_ptr(o_ptr, (Bt, M, N), (M * N, N, 1), (0, 0, 0), (Bt, M, N), (2, 1, 0))
    r = tl.dot(tl.load(a_bp), tl.load(b_bp), acc=tl.load(c_bp), out_dtype=tl.float32)
    tl.store(o_bp, r)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_batched_dot_with_acc(dtype):
    a, b = torch.randn(3, 8, 16, dtype=dtype), torch.randn(3, 16, 4, dtype=dtype)
    c = torch.randn(3, 8, 4)
    o = torch.empty(3, 8, 4)
    bdot_kernel[(1,)](a, b, c, o, Bt=3, M=8, K=16, N=4)
    torch.testing.assert_close(o, a.float() @ b.float() + c, atol=1e-4, rtol=1e-4)


@triton.jit
def reduce_kernel(x_ptr, o_ptr, i_ptr, R: tl.constexpr, C: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    tl.store(o_ptr + tl.arange(0, R), tl.max(x, axis=1))
    tl.store(o_ptr + R + tl.arange(0, C), tl.min(x, axis=0))
    tl.store(o_ptr + R + C, tl.sum(x))
    tl.store(o_ptr + R + C + 1 + tl.arange(0, R)[:, None], tl.sum(x, axis=1, keep_dims=True))
    tl.store(i_ptr + tl.arange(0, R), tl.argmax(x, axis=1))
    v, i = tl.min(x, axis=0, return_indices=True)
    tl.store(i_ptr + R + tl.arange(0, C), i)
    tl.store(i_ptr + R + C, tl.argmax(tl.ravel(x), 0))


def test_reductions():
    R, C = 4, 8
    x = torch.randn(R, C)
    o = torch.empty(2 * R + C + 1)
    i = torch.empty(R + C + 1, dtype=torch.int32)
    reduce_kernel[(1,)](x, o, i, R=R, C=C)
    torch.testing.assert_close(o[:R], x.max(1).values)
    torch.testing.assert_close(o[R:R + C], x.min(0).values)
    torch.testing.assert_close(o[R + C], x.sum(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(o[R + C + 1:], x.sum(1))
    assert i[:R].tolist() == x.argmax(1).tolist()
    assert i[R:R + C].tolist() == x.argmin(0).tolist()
    assert i[R + C].item() == x.argmax().item()


@triton.jit
def math_kernel(x_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    outs = (tl.exp(x), tl.exp2(x), tl.log(tl.abs(x) + 1), tl.log2(tl.abs(x) + 1), tl.sqrt(tl.abs(x)),
            tl.rsqrt(tl.abs(x) + 1), tl.sigmoid(x), tl.erf(x), tl.cos(x), tl.sin(x), tl.math.tanh(x),
            libdevice.tanh(x), tl.fma(x, x, x), tl.clamp(x, -0.5, 0.5), tl.math.floor(x), tl.ceil(x),
            libdevice.log1p(tl.abs(x)), libdevice.pow(tl.abs(x), 1.5), tl.minimum(x, 0.0), libdevice.rint(x))
    for k in tl.static_range(len(outs)):
        tl.store(o_ptr + k * N + offs, outs[k])


def test_math_functions():
    n = 64
    x = torch.randn(n) * 2
    o = torch.empty(20 * n)
    math_kernel[(1,)](x, o, N=n)
    ax = x.abs()
    refs = [x.exp(), torch.exp2(x), (ax + 1).log(), (ax + 1).log2(), ax.sqrt(), (ax + 1).rsqrt(), x.sigmoid(),
            torch.erf(x), x.cos(), x.sin(), x.tanh(), x.tanh(), x * x + x, x.clamp(-0.5, 0.5), x.floor(),
            x.ceil(), torch.log1p(ax), ax ** 1.5, torch.minimum(x, torch.zeros(())), torch.round(x)]
    for k, ref in enumerate(refs):
        torch.testing.assert_close(o[k * n:(k + 1) * n], ref, atol=1e-5, rtol=1e-5, msg=f"function {k}")


@triton.jit
def math_int_kernel(o_ptr):
    tl.store(o_ptr, tl.exp(tl.arange(0, 4)))


def test_math_on_ints_is_an_error():
    with pytest.raises(tl.CompilationError, match="exp expects a floating point tensor"):
        math_int_kernel[(1,)](torch.empty(4))


# ------------------------------------------------------------------------------------------------
# block pointers and tensor descriptors
# ------------------------------------------------------------------------------------------------
@triton.jit
def bp_pad_kernel(x_ptr, o_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    bp = tl.make_block_ptr(x_ptr, (M, N), (N, 1), (M - 2, N - 3), (BM, BN), (1, 0))
    v = tl.load(bp, boundary_check=(0, 1), padding_option="nan")
    o_bp = tl.make_block_ptr(o_ptr, (BM, BN), (BN, 1), (0, 0), (BM, BN), (1, 0))
    tl.store(o_bp, v)


def test_block_ptr_padding_nan():
    x = torch.randn(5, 7)
    o = torch.empty(4, 4)
    bp_pad_kernel[(1,)](x, o, 5, 7, BM=4, BN=4)
    ref = torch.full((4, 4), float("nan"))
    ref[:2, :3] = x[3:, 4:]
    torch.testing.assert_close(o, ref, equal_nan=True)


@triton.jit
def desc_kernel(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    yd = tl.make_tensor_descriptor(y_ptr, shape=[N, M], strides=[M, 1], block_shape=[BN, BM])
    tile = xd.load([pid_m * BM, pid_n * BN])
    yd.store([pid_n * BN, pid_m * BM], tl.trans(tile) * 2)


def test_tensor_descriptor_transpose():
    M, N = 10, 13
    x = torch.randn(M, N)
    y = torch.empty(N, M)
    desc_kernel[(triton.cdiv(M, 4), triton.cdiv(N, 8))](x, y, M, N, BM=4, BN=8)
    torch.testing.assert_close(y, x.t() * 2)


# ------------------------------------------------------------------------------------------------
# printing, launch plumbing, caching
# ------------------------------------------------------------------------------------------------
@triton.jit
def print_kernel(x_ptr):
    pid = tl.program_id(0)
    tl.static_print("compiling print_kernel")
    tl.device_print("x=", tl.load(x_ptr + pid))


def test_device_and_static_print(capsys):
    print_kernel.clear_cache()  # static_print runs when the kernel compiles: compile it again
    print_kernel[(2,)](torch.tensor([1.5, 2.5]))
    out = capsys.readouterr().out
    assert "compiling print_kernel" in out
    assert "pid (0, 0, 0) x=1.5" in out and "pid (1, 0, 0) x=2.5" in out


@triton.jit
def grid_kernel(o_ptr, NX: tl.constexpr):
    x = tl.program_id(0)
    y = tl.program_id(1)
    z = tl.program_id(2)
    n = tl.num_programs(0) * tl.num_programs(1) * tl.num_programs(2)
    tl.store(o_ptr + (z * tl.num_programs(1) + y) * NX + x, n)


def test_3d_grid_and_num_programs():
    o = torch.zeros(2 * 3 * 4, dtype=torch.int32)
    grid_kernel[(4, 3, 2)](o, NX=4)
    assert o.tolist() == [24] * 24


def test_specialization_and_cache():
    x, y, out = torch.randn(8), torch.randn(8), torch.zeros(8)
    from .test_kernels import add_kernel

    ck1 = add_kernel.warmup(x, y, out, 8, BLOCK_SIZE=8, grid=(1,))
    assert torch.equal(out, torch.zeros(8))  # warmup does not run
    ck2 = add_kernel[(1,)](x, y, out, 8, BLOCK_SIZE=8)
    assert ck1 is ck2 and torch.equal(out, x + y)
    args = add_kernel.bind((x, y, out, 8), {"BLOCK_SIZE": 8})
    spec = tl.specialize(add_kernel, args)
    assert spec.key == ck1.key
    assert [p[1] for p in spec.params] == ["ptr", "ptr", "ptr", "scalar", "constexpr"]
    keys = {spec.key}
    for variant in ((x.half(), y.half(), out.half(), 8, 8), (x, y, out, 2 ** 40, 8), (x, y, out, 8, 16)):
        a = add_kernel.bind(variant[:4], {"BLOCK_SIZE": variant[4]})
        keys.add(tl.specialize(add_kernel, a).key)
    assert len(keys) == 4
    from torch_rbln.dsl.jit import artifact_key

    assert artifact_key(spec, "interpret") != artifact_key(spec, "numba") == artifact_key(spec, "numba")
    a64 = add_kernel.bind((x, y, out, 2 ** 40), {"BLOCK_SIZE": 8})
    assert dict((p[0], p[2]) for p in tl.specialize(add_kernel, a64).params)["n_elements"] == "int64"
    # the IR has static shapes and dtypes on every value
    for op in ck1.ir.walk():
        for r in op.results:
            assert r.type.dtype is not None and isinstance(r.type.shape, tuple)


def test_heuristics_and_grid_callable():
    from .test_kernels import add_kernel

    kern = triton.heuristics({"BLOCK_SIZE": lambda args: triton.next_power_of_2(args["n_elements"]) // 4})(
        add_kernel)
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    seen = {}

    def grid(meta):
        seen.update(meta)
        return (triton.cdiv(meta["n_elements"], meta["BLOCK_SIZE"]),)

    kern[grid](x, y, out, 100, num_warps=4)
    assert seen["BLOCK_SIZE"] == 32 and torch.equal(out, x + y)


def test_host_view_registry():
    from torch_rbln.dsl import runtime

    class FakeDev:
        type = "fakedev"

    class Fake:
        device = FakeDev()

    with pytest.raises(ValueError, match="no host view is registered for device type 'fakedev'"):
        runtime.host_view(Fake())
    backing = torch.arange(4.0)
    runtime.register_host_view("fakedev", lambda t: backing)
    try:
        assert runtime.host_view(Fake()) is backing
    finally:
        runtime.unregister_host_view("fakedev")


def test_strided_and_offset_views():
    from .test_kernels import add_kernel

    base = torch.randn(10, 8)
    x = base[2:, 3]  # storage offset and stride 8
    y = torch.randn(8)
    out = torch.empty(8)
    add_kernel[(1,)](x.contiguous(), y, out, 8, BLOCK_SIZE=8)
    torch.testing.assert_close(out, x + y)
    col = base[:, 1:]  # offset view: pointer 0 is base[0, 1]
    o2 = torch.empty(7)
    add_kernel[(1,)](col, col, o2, 7, BLOCK_SIZE=8)
    torch.testing.assert_close(o2, base[0, 1:] * 2)


def test_runs_under_a_tracer():
    from .test_kernels import add_kernel

    calls = []

    def tracer(frame, event, arg):
        calls.append(event)
        return None

    x = torch.randn(8)
    out = torch.empty(8)
    sys.settrace(tracer)
    try:
        add_kernel[(1,)](x, x, out, 8, BLOCK_SIZE=8)
    finally:
        sys.settrace(None)
    assert calls and torch.equal(out, x + x)


# Importing the DSL does not depend on the backend a launch would use: the parametrisation overrides the
# autouse `dsl_backend` fixture, so its three fresh interpreters (~11 s of CPU) run once, not per backend.
@pytest.mark.parametrize("dsl_backend", ["any"])
def test_import_is_cheap_and_lazy(tmp_path, dsl_backend):
    import os

    # bytecode caching on (this environment may disable it); the first run only populates the cache
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path)
    # a full cyclic-GC pass over torch's heap takes ~90 ms and runs wherever the allocation counter
    # crosses its threshold: collect first, so the timing is the DSL import's own work
    # CPU time, not wall: on a loaded machine the wall clock also counts other processes' turns. The
    # bound is far below what importing numba or jinja2 with it would cost (~0.3-0.6 s).
    code = ("import gc, time, sys, torch, torch_rbln; gc.collect(); t = time.process_time(); "
            "import torch_rbln.dsl; "
            "dt = time.process_time() - t; print(dt, 'numba' in sys.modules, 'jinja2' in sys.modules, "
            "'torch_rbln.dsl.frontend' in sys.modules)")
    runs = []
    for _ in range(3):  # the first run populates the bytecode cache; the best of the others is measured
        runs.append(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                   env=env).stdout.split())
    out = min(runs[1:], key=lambda r: float(r[0]))
    assert float(out[0]) < 0.1, runs
    assert out[3] == "False"  # the frontend loads on first compile


def test_bf16_numpy_view_roundtrip():
    x = torch.randn(8).to(torch.bfloat16)
    from torch_rbln.dsl.runtime import flat_numpy_view

    v = flat_numpy_view(x, tl.bfloat16)
    assert v.dtype == ml_dtypes.bfloat16 and np.array_equal(v.astype(np.float32), x.float().numpy())


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def _add_combine(a, b):
    return a + b


@triton.jit
def custom_reduce_kernel(x_ptr, o_ptr, R: tl.constexpr, C: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    tl.store(o_ptr + tl.arange(0, R), tl.reduce(x, 1, _max_combine))
    tl.store(o_ptr + R + tl.arange(0, C), tl.reduce(x, 0, _add_combine))
    tl.store(o_ptr + R + C, tl.reduce(x, None, _add_combine))
    s = tl.associative_scan(x, 1, _add_combine)
    tl.store(o_ptr + R + C + 1 + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :], s)
    s = tl.associative_scan(x, 1, _add_combine, reverse=True)
    tl.store(o_ptr + R + C + 1 + R * C + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :], s)


def test_reduce_and_associative_scan_with_combine_fn():
    R, C = 4, 8
    x = torch.randn(R, C)
    o = torch.empty(R + C + 1 + 2 * R * C)
    custom_reduce_kernel[(1,)](x, o, R=R, C=C)
    torch.testing.assert_close(o[:R], x.amax(1))
    torch.testing.assert_close(o[R:R + C], x.sum(0))
    torch.testing.assert_close(o[R + C], x.sum(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(o[R + C + 1:R + C + 1 + R * C].reshape(R, C), x.cumsum(1))
    torch.testing.assert_close(o[R + C + 1 + R * C:].reshape(R, C), x.flip(1).cumsum(1).flip(1))


@triton.jit
def join_split_kernel(a_ptr, b_ptr, o_ptr, h_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    j = tl.join(a, b)                                  # (N, 2)
    x, y = tl.split(j)
    tl.store(o_ptr + tl.arange(0, 2 * N), tl.interleave(a, b))
    tl.store(o_ptr + 2 * N + tl.arange(0, 2 * N), tl.cat(x, y))
    tl.store(h_ptr + tl.arange(0, 8), tl.histogram((tl.abs(a) * 3).to(tl.int32), 8))


def test_join_split_interleave_cat_histogram():
    n = 16
    a, b = torch.randn(n), torch.randn(n)
    o = torch.empty(4 * n)
    h = torch.empty(8, dtype=torch.int32)
    join_split_kernel[(1,)](a, b, o, h, N=n)
    assert torch.equal(o[:2 * n], torch.stack([a, b], 1).reshape(-1))
    assert torch.equal(o[2 * n:], torch.cat([a, b]))
    bins = (a.abs() * 3).to(torch.int32)
    assert h.tolist() == [int((bins == k).sum()) for k in range(8)]


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_rbln_device_tensors(backend):
    import torch_rbln  # noqa: F401  (the device offers torch.rbln.host_view)

    from .test_kernels import add_kernel

    x = torch.arange(8.0).to("rbln:1")
    out = torch.empty(8, device="rbln:1")
    add_kernel[(1,)](x, x, out, 8, BLOCK_SIZE=8, backend=backend)
    assert out.cpu().tolist() == [2.0 * i for i in range(8)]


def test_tensors_on_a_device_without_host_memory_are_refused():
    from torch_rbln.dsl.runtime import host_view

    with pytest.raises(ValueError, match="no host view is registered for device type 'meta'"):
        host_view(torch.empty(2, device="meta"))


@triton.jit
def breakpoint_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = x * 2
    breakpoint()
    tl.store(x_ptr + offs, y)


def test_breakpoint_stops_with_kernel_variables(monkeypatch):
    seen = []

    def hook(*a, **k):
        f = sys._getframe(1)
        seen.append(dict(f.f_locals))

    monkeypatch.setattr(sys, "breakpointhook", hook)
    x = torch.arange(4.0)
    breakpoint_kernel[(2,)](x, BLOCK=4)
    assert len(seen) == 2 and seen[1]["pid"] == (1, 0, 0)
    np.testing.assert_array_equal(seen[0]["y"], np.arange(4.0) * 2)
    assert "offs" in seen[0] and "x_ptr" in seen[0]


def test_ir_dump(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_RBLN_DUMP_KERNELS", str(tmp_path))
    from .test_kernels import add_kernel

    add_kernel.clear_cache()  # kernels are dumped when they compile: compile afresh
    x = torch.randn(4)
    add_kernel[(1,)](x, x, torch.empty(4), 4, BLOCK_SIZE=4)
    files = list(tmp_path.glob("add_kernel-*.ir"))
    assert files and "func add_kernel(" in files[0].read_text() and "load(" in files[0].read_text()


def test_autotune_and_config_are_forwarded():
    try:
        import torch_rbln.autotune as at
    except Exception as e:  # built concurrently by another package
        pytest.skip(f"torch_rbln.autotune unavailable: {e}")
    assert triton.autotune is at.autotune and triton.Config is at.Config


@triton.jit
def philox_kernel(o_ptr, u_ptr, n_ptr, seed, N: tl.constexpr):
    a, b, c, d = tl.randint4x(seed, 0)
    tl.store(o_ptr, a.to(tl.int64))
    tl.store(o_ptr + 1, b.to(tl.int64))
    tl.store(o_ptr + 2, c.to(tl.int64))
    tl.store(o_ptr + 3, d.to(tl.int64))
    offs = tl.arange(0, N)
    tl.store(u_ptr + offs, tl.rand(seed, offs))
    tl.store(n_ptr + offs, tl.randn(seed, offs))


def test_philox_random_numbers(monkeypatch):
    # numba compiles the philox rounds (umulhi) itself: a compile error would raise here instead of
    # running dropout's generator on the interpreter tier
    monkeypatch.setenv("TORCH_RBLN_DISABLE_FALLBACK", "compile_error")
    philox_kernel.clear_cache()
    o = torch.empty(4, dtype=torch.int64)
    u, z = torch.empty(4096), torch.empty(4096)
    philox_kernel[(1,)](o, u, z, 0, N=4096)
    # Random123 known-answer vector for Philox4x32-10, counter 0 and key 0
    assert o.tolist() == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean().item() - 0.5) < 0.02
    assert abs(z.mean().item()) < 0.06 and abs(z.std().item() - 1) < 0.05
    u2 = torch.empty(4096)
    philox_kernel[(1,)](o, u2, z, 0, N=4096)
    assert torch.equal(u, u2)  # deterministic in (seed, offset)
    philox_kernel[(1,)](o, u2, z, 1234, N=4096)
    assert not torch.equal(u, u2)


@triton.jit
def flip_sort_kernel(x_ptr, o_ptr, R: tl.constexpr, C: tl.constexpr):
    idx = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + idx)
    tl.store(o_ptr + idx, tl.flip(x, 1))
    tl.store(o_ptr + R * C + idx, tl.sort(x))
    tl.store(o_ptr + 2 * R * C + idx, x.sort(0, descending=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flip_and_sort(dtype):
    x = torch.randn(4, 8, dtype=dtype)
    o = torch.empty(3 * 32, dtype=dtype)
    flip_sort_kernel[(1,)](x, o, R=4, C=8)
    assert torch.equal(o[:32].reshape(4, 8), x.flip(1))
    assert torch.equal(o[32:64].reshape(4, 8), x.sort(1).values)
    assert torch.equal(o[64:].reshape(4, 8), x.sort(0, descending=True).values)
