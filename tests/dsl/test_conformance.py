"""Conformance with Triton's language, feature by feature (following the features test_core.py covers):
each feature either runs and matches numpy/torch on both backends (the tests/dsl fixture runs every test
on numba and on the interpreter) or is refused with a located CompilationError naming the construct."""

from __future__ import annotations

import math

import pytest
import torch
import torch_rbln.dsl as tl

from torch_rbln import dsl as triton


# ------------------------------------------------------------------ early return in a runtime `if`
@triton.jit
def k_early_return(X, Y, n):
    pid = tl.program_id(0)
    if pid >= n:
        return
    tl.store(Y + pid, tl.load(X + pid) * 2)


@triton.jit
def _pick(x, t):
    if x > t:
        return x * 2, 1
    return x - 1.0, 0


@triton.jit
def k_helper_returns(X, Y, Z, t):
    pid = tl.program_id(0)
    v, k = _pick(tl.load(X + pid), t)
    tl.store(Y + pid, v)
    tl.store(Z + pid, k)


def test_early_return_skips_the_rest():
    x, y = torch.arange(8, dtype=torch.float32), torch.full((8,), -1.0)
    k_early_return[(8,)](x, y, 5)
    assert y.tolist() == [0, 2, 4, 6, 8, -1, -1, -1]


def test_helper_early_return_with_fallthrough():
    x, y, z = torch.arange(8, dtype=torch.float32), torch.zeros(8), torch.zeros(8, dtype=torch.int32)
    k_helper_returns[(8,)](x, y, z, 3.0)
    assert y.tolist() == [v * 2 if v > 3 else v - 1 for v in range(8)]
    assert z.tolist() == [int(v > 3) for v in range(8)]


@triton.jit
def _nested_returns(x, i):
    if i % 2 == 0:
        if i > 2:
            return x + 100
        return x + 1
    else:
        return x - 1


@triton.jit
def k_returns_in_loop(Y, N: tl.constexpr):
    for i in range(N):
        tl.store(Y + i, _nested_returns(tl.load(Y + i), i))


def test_nested_early_returns_in_a_helper_called_in_a_loop():
    y = torch.zeros(8)
    k_returns_in_loop[(1,)](y, N=8)
    assert y.tolist() == [(100.0 if i > 2 else 1.0) if i % 2 == 0 else -1.0 for i in range(8)]


@triton.jit
def _bad_returns(x):
    if x > 0:
        return x
    return x, x


@triton.jit
def k_bad_returns(X):
    a = _bad_returns(tl.load(X))
    tl.store(X, a)


def test_mismatched_returns_refused():
    with pytest.raises(tl.CompilationError, match="return different kinds of values") as ei:
        k_bad_returns[(1,)](torch.zeros(1))
    assert ei.value.lineno is not None and "if x > 0" in str(ei.value)


# ------------------------------------------------------------------ tuple reduce / associative_scan
@triton.jit
def _argmax_combine(a0, a1, b0, b1):
    gt = a0 > b0
    return tl.where(gt, a0, b0), tl.where(gt, a1, b1)


@triton.jit
def k_tuple_reduce(X, Out, Idx, N: tl.constexpr):
    x = tl.load(X + tl.arange(0, N))
    v, i = tl.reduce((x, tl.arange(0, N)), 0, _argmax_combine)
    tl.store(Out, v)
    tl.store(Idx, i)


@triton.jit
def _sum_prod(a0, a1, b0, b1):
    return a0 + b0, a1 * b1


@triton.jit
def k_tuple_scan(X, S, P, N: tl.constexpr, REV: tl.constexpr):
    x = tl.load(X + tl.arange(0, N))
    s, p = tl.associative_scan((x, x), 0, _sum_prod, reverse=REV)
    tl.store(S + tl.arange(0, N), s)
    tl.store(P + tl.arange(0, N), p)


def test_tuple_reduce():
    x = torch.tensor([3.0, 1.0, 9.0, 2.0, 0.0, 4.0, 5.0])  # odd length: the tree's leftover element
    o, i = torch.zeros(1), torch.zeros(1, dtype=torch.int32)
    k_tuple_reduce[(1,)](torch.cat([x, torch.tensor([-1.0])]), o, i, N=8)
    assert (o.item(), i.item()) == (9.0, 2)


@pytest.mark.parametrize("rev", [False, True])
def test_tuple_scan(rev):
    x = torch.arange(1, 9, dtype=torch.float64)
    s, p = torch.zeros(8, dtype=torch.float64), torch.zeros(8, dtype=torch.float64)
    k_tuple_scan[(1,)](x, s, p, N=8, REV=rev)
    xs = x.flip(0) if rev else x
    want_s, want_p = xs.cumsum(0), xs.cumprod(0)
    if rev:
        want_s, want_p = want_s.flip(0), want_p.flip(0)
    torch.testing.assert_close(s, want_s, rtol=0, atol=0)
    torch.testing.assert_close(p, want_p, rtol=0, atol=0)


# ------------------------------------------------------------------ PropagateNan
@triton.jit
def k_nan(A, B, C, MODE: tl.constexpr, F: tl.constexpr):
    a = tl.load(A + tl.arange(0, 4))
    b = tl.load(B + tl.arange(0, 4))
    if F == 0:
        r = tl.maximum(a, b, propagate_nan=MODE)
    elif F == 1:
        r = tl.minimum(a, b, propagate_nan=MODE)
    else:
        r = tl.clamp(a, -b, b, propagate_nan=MODE)
    tl.store(C + tl.arange(0, 4), r)


@pytest.mark.parametrize("func", [0, 1, 2])
@pytest.mark.parametrize("mode", ["NONE", "ALL"])
def test_propagate_nan(func, mode):
    nan = float("nan")
    a = torch.tensor([nan, 1.0, nan, 2.0])
    b = torch.tensor([1.0, nan, nan, 3.0])
    c = torch.zeros(4)
    k_nan[(1,)](a, b, c, MODE=getattr(tl.PropagateNan, mode), F=func)
    assert math.isnan(c[2])  # both NaN
    if func == 2:  # clamp of NaN x: the lower bound without propagation
        assert (c[0].item() == -1.0) if mode == "NONE" else math.isnan(c[0])
        assert c[3].item() == 2.0
        return
    if mode == "ALL":
        assert math.isnan(c[0]) and math.isnan(c[1])
    else:
        assert c[0].item() == 1.0 and c[1].item() == 1.0
    assert c[3].item() == (3.0 if func == 0 else 2.0)


@triton.jit
def k_nan_default(A, B, C):
    a = tl.load(A + tl.arange(0, 4))
    b = tl.load(B + tl.arange(0, 4))
    tl.store(C + tl.arange(0, 4), tl.maximum(a, b))
    tl.store(C + 4 + tl.arange(0, 4), tl.minimum(a, b))
    tl.store(C + 8 + tl.arange(0, 4), tl.clamp(a, -b, b))


def test_propagate_nan_default_is_none_as_in_triton():
    nan = float("nan")
    a = torch.tensor([nan, 1.0, nan, 2.0])
    b = torch.tensor([1.0, nan, nan, 3.0])
    c = torch.zeros(12)
    k_nan_default[(1,)](a, b, c)
    assert c[0].item() == 1.0 and c[1].item() == 1.0 and math.isnan(c[2])  # maxNum: the other operand
    assert c[4].item() == 1.0 and c[5].item() == 1.0 and math.isnan(c[6])
    assert c[8].item() == -1.0  # clamp of a NaN x keeps the lower bound


# ------------------------------------------------------------------ small language items
@triton.jit
def k_misc(X, Y, N: tl.constexpr):
    x = tl.load(X + tl.arange(0, N))
    tl.static_assert(x.shape == [N])
    one = 1
    tl.static_assert(one.dtype == tl.int32)
    tl.store(Y + tl.arange(0, N), one.to(tl.float32) + x)
    j = tl.join(1.0, 2.0)
    tl.static_assert(j.shape == [2])
    tl.store(Y + N + tl.arange(0, 2), j)
    tl.store(Y + N + 2 + tl.arange(0, 2), tl.interleave(3.0, 4.0))


def test_shape_list_literals_and_scalar_join():
    x, y = torch.arange(4, dtype=torch.float32), torch.zeros(8)
    k_misc[(1,)](x, y, N=4)
    assert y.tolist() == [1, 2, 3, 4, 1, 2, 3, 4]
    assert tl.pi32_t == tl.pointer_type(tl.int32)


@triton.jit
def k_ternary_statements(X, Y):
    pid = tl.program_id(0)
    v = tl.load(X + pid)
    tl.store(Y + pid, v) if v > 0 else tl.store(Y + pid, -v * 10)


@triton.jit
def k_ternary_lazy_load(X, Y, n):
    pid = tl.program_id(0)
    v = tl.load(X + pid) if pid < n else 0.0  # X has n elements: the load must not run beyond them
    tl.store(Y + pid, v)


def test_ternary_branches_without_value():
    x, y = torch.tensor([1.0, -2.0, 3.0, -4.0]), torch.zeros(4)
    k_ternary_statements[(4,)](x, y)
    assert y.tolist() == [1.0, 20.0, 3.0, 40.0]


def test_ternary_only_runs_the_taken_branch():
    x, y = torch.tensor([5.0, 6.0]), torch.full((4,), -1.0)
    k_ternary_lazy_load[(4,)](x, y, 2)
    assert y.tolist() == [5.0, 6.0, 0.0, 0.0]


@triton.jit
def _scale(x, F: tl.constexpr):
    return x * F


@triton.jit
def k_constexpr_param_runtime(X, Y, f):
    tl.store(Y, _scale(tl.load(X), f))  # a runtime value for a helper's constexpr-annotated parameter


def test_helper_constexpr_parameter_takes_runtime_value():
    x, y = torch.tensor([3.0]), torch.zeros(1)
    k_constexpr_param_runtime[(1,)](x, y, 2.5)
    assert y.item() == 7.5


@triton.jit
def k_where_scalar_pointer(C, A, B, Y, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ptr = tl.where(tl.load(C) != 0, A, B)  # one of two arguments, chosen at run time
    tl.store(Y + offs, tl.load(ptr + offs, mask=offs < n, other=-1.0))


@triton.jit
def k_where_block_pointer(C, A, B, Y, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ptr = offs + tl.where(tl.load(C + offs) != 0, A, B)  # per lane
    tl.store(Y + offs, tl.load(ptr))
    tl.store(ptr, tl.load(Y + offs) * 10)  # writes back through the chosen pointers


def test_where_between_pointers_into_different_arguments():
    a, b = torch.arange(8, dtype=torch.float32), 100 + torch.arange(8, dtype=torch.float32)
    for flag, src in ((1, a), (0, b)):
        y = torch.zeros(8)
        k_where_scalar_pointer[(1,)](torch.tensor([flag], dtype=torch.int32), a, b, y, 6, BLOCK=8)
        assert y.tolist() == src[:6].tolist() + [-1.0, -1.0]
    c = torch.tensor([1, 0, 0, 1, 1, 0, 1, 0], dtype=torch.int32)
    y = torch.zeros(8)
    a0, b0 = a.clone(), b.clone()
    k_where_block_pointer[(1,)](c, a, b, y, BLOCK=8)
    want = torch.where(c != 0, a0, b0)
    assert y.tolist() == want.tolist()
    assert a.tolist() == torch.where(c != 0, a0 * 10, a0).tolist()
    assert b.tolist() == torch.where(c == 0, b0 * 10, b0).tolist()


@triton.jit
def k_where_pointer_and_value(A, Y, c):
    p = tl.where(c > 0, A, 1.0)
    tl.store(Y, tl.load(p))


def test_where_between_a_pointer_and_a_value_refused():
    with pytest.raises(tl.CompilationError, match="tl.where choosing between pointers of different") as ei:
        k_where_pointer_and_value[(1,)](torch.zeros(1), torch.zeros(1), 1)
    assert "tl.where(c > 0, A, 1.0)" in str(ei.value)


@triton.jit
def k_int_to_pointer(X, Y):
    p = tl.load(X).to(tl.pi32_t)
    tl.store(Y, tl.load(p))


def test_integer_to_pointer_cast_refused():
    with pytest.raises(tl.CompilationError, match="casting between pointers and values"):
        k_int_to_pointer[(1,)](torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int32))


# ------------------------------------------------------------------ fp8
FP8 = [
    (torch.float8_e5m2, tl.float8e5),
    (torch.float8_e4m3fn, tl.float8e4nv),
    (torch.float8_e4m3fnuz, tl.float8e4b8),
    (torch.float8_e5m2fnuz, tl.float8e5b16),
]


@triton.jit
def k_fp8(X, Y, Z, W, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(Y + offs, tl.load(X + offs).to(Y.dtype.element_ty))  # round fp32 -> fp8
    tl.store(Z + offs, tl.load(Y + offs) * 2 + 0.5)  # fp8 arithmetic, rounded once to fp8
    tl.store(W + offs, tl.load(Y + offs).to(tl.float32))


@pytest.mark.parametrize("torch_dt,dt", FP8[:2])
def test_fp8_round_trip_and_arithmetic(torch_dt, dt):
    x = torch.cat([torch.randn(60) * 30, torch.tensor([0.0, -0.0, 1e6, -1e6])])
    y, z = torch.zeros(64, dtype=torch_dt), torch.zeros(64, dtype=torch_dt)
    w = torch.zeros(64)
    k_fp8[(1,)](x, y, z, w, N=64)
    ref = x.to(torch_dt)
    assert torch.equal(y.view(torch.uint8), ref.view(torch.uint8))
    ref_z = (ref.float() * 2 + 0.5).to(torch_dt)
    same = (z.view(torch.uint8) == ref_z.view(torch.uint8)) | (z.float().isnan() & ref_z.float().isnan())
    assert bool(same.all())
    torch.testing.assert_close(w, ref.float(), rtol=0, atol=0, equal_nan=True)
    assert tl.dtype("fp8e5") is tl.float8e5 and dt.is_fp8() and dt.primitive_bitwidth == 8


@pytest.mark.slow
@pytest.mark.parametrize("torch_dt,dt", FP8)
def test_fp8_all_formats(torch_dt, dt):
    test_fp8_round_trip_and_arithmetic(torch_dt, dt)


@triton.jit
def k_fp8_dot(A, B, C, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(A + r[:, None] * N + r[None, :])
    b = tl.load(B + r[:, None] * N + r[None, :])
    tl.store(C + r[:, None] * N + r[None, :], tl.dot(a, b))


def test_fp8_dot():
    a = torch.randn(16, 16).to(torch.float8_e5m2)
    b = torch.randn(16, 16).to(torch.float8_e4m3fn)
    c = torch.zeros(16, 16)
    k_fp8_dot[(1,)](a, b, c, N=16)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-5)


@triton.jit
def k_fp8e4b15(X, Y):
    tl.store(Y, tl.load(X).to(tl.float8e4b15).to(tl.float32))


def test_fp8e4b15_values_refused():
    with pytest.raises(tl.CompilationError, match="float8e4b15 values are not supported") as ei:
        k_fp8e4b15[(1,)](torch.zeros(1), torch.zeros(1))
    assert "to(tl.float8e4b15)" in str(ei.value)


# ------------------------------------------------------------------ host side: driver, testing, launch
def test_driver_active_device_is_rbln():
    drv = triton.runtime.driver.active
    assert drv.get_active_torch_device().type == "rbln"
    assert drv.get_current_target().backend == "rbln"
    props = drv.utils.get_device_properties(0)
    assert props["multiprocessor_count"] >= 1 and props["warpSize"] > 0
    with pytest.raises(NotImplementedError, match="CUDA driver utility"):
        drv.utils.fill_2d_tma_descriptor(0, 1, 1, 1, 1, 2, 0)


@triton.jit
def k_add(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < n) + 1, mask=offs < n)


def test_compiled_kernel_launch_and_metadata():
    x, y = torch.arange(10, dtype=torch.float32), torch.zeros(10)
    ck = k_add.warmup(x, y, 10, BLOCK=8, grid=(1,))
    ck._init_handles()
    assert ck.n_regs > 0 and ck.metadata.shared >= 8 * 4
    ck[(2, 1, 1)](x, y, 10, 8)
    assert y.tolist() == [v + 1 for v in range(10)]
    with pytest.raises(tl.LaunchError, match="another specialisation"):
        ck[(1,)](x, y, 10, 16)


def test_testing_do_bench_perf_report_assert_close(capsys):
    from torch_rbln.dsl import testing

    x = torch.arange(10, dtype=torch.float32)
    ms = testing.do_bench(lambda: x + 1, warmup=1, rep=2)
    assert ms > 0
    q = testing.do_bench(lambda: x + 1, warmup=1, rep=2, quantiles=[0.5, 0.2, 0.8])
    assert len(q) == 3 and q[1] <= q[0] <= q[2]

    @testing.perf_report(testing.Benchmark(x_names=["n"], x_vals=[1, 2], line_arg="p", line_vals=["a", "b"],
                                           line_names=["A", "B"], plot_name="demo", args={"k": 10}))
    def bench(n, p, k):
        return float(n * k + (p == "b")), 0.0, 1.0

    table = bench.run(print_data=True, show_plots=False, return_df=True)
    out = capsys.readouterr().out
    assert "demo:" in out and "21" in out
    assert len(table) == 2
    testing.assert_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.005]))
    with pytest.raises(AssertionError):
        testing.assert_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]))
    testing.assert_close(1.0, 1.001, atol=1e-2)


def test_autotune_accepts_tritons_keywords():
    from torch_rbln.autotune import Config, autotune

    tuned = autotune([Config({"BLOCK": 8})], key=["n"], cache_results=True, use_cuda_graph=False, warmup=1,
                     rep=1)(k_add)
    x, y = torch.arange(10, dtype=torch.float32), torch.zeros(10)
    tuned[lambda m: (triton.cdiv(10, m["BLOCK"]),)](x, y, 10)
    assert y.tolist() == [v + 1 for v in range(10)]


# ------------------------------------------------------------------ gather, topk, map_elementwise, swizzle2d
@triton.jit
def k_gather(Src, Idx, Out, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    r, c, k = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    src = tl.load(Src + r[:, None] * N + c[None, :])
    idx = tl.load(Idx + r[:, None] * K + k[None, :])
    tl.store(Out + r[:, None] * K + k[None, :], tl.gather(src, idx, 1))


def test_gather_keeps_every_value_exactly():
    src = torch.randn(4, 8)
    src[0, 3], src[1, 2] = float("nan"), -0.0
    idx = torch.randint(0, 8, (4, 4), dtype=torch.int32)
    idx[0, 0], idx[1, 1] = 3, 2
    out = torch.zeros(4, 4)
    k_gather[(1,)](src, idx, out, M=4, N=8, K=4)
    assert torch.equal(out.view(torch.int32), torch.gather(src, 1, idx.long()).view(torch.int32))


@triton.jit
def _square_plus(x, y):
    return x * x + y


@triton.jit
def k_topk_map(X, T, Out, N: tl.constexpr, K: tl.constexpr):
    x = tl.load(X + tl.arange(0, N))
    tl.store(T + tl.arange(0, K), tl.topk(x, K))
    tl.store(Out + tl.arange(0, N), tl.map_elementwise(_square_plus, x, 1.0))


def test_topk_and_map_elementwise():
    x, t, o = torch.randn(16), torch.zeros(4), torch.zeros(16)
    k_topk_map[(1,)](x, t, o, N=16, K=4)
    assert torch.equal(t, x.topk(4).values)
    torch.testing.assert_close(o, x * x + 1, rtol=1e-6, atol=0)


@triton.jit
def k_swizzle(Out, SI: tl.constexpr, SJ: tl.constexpr, G: tl.constexpr):
    i = tl.arange(0, SI)[:, None]
    j = tl.arange(0, SJ)[None, :]
    ni, nj = tl.swizzle2d(i, j, SI, SJ, G)
    tl.store(Out + i * SJ + j, ni * 100 + nj)


def _swizzle_ref(i, j, si, sj, g):
    ij = i * sj + j
    off = ij // (g * sj) * g
    rows = min(si - off, g)
    ij %= g * sj
    return off + ij % rows, ij // rows


def test_swizzle2d():
    o = torch.zeros(8, 4, dtype=torch.int32)
    k_swizzle[(1,)](o, SI=8, SJ=4, G=3)
    want = [[_swizzle_ref(i, j, 8, 4, 3)[0] * 100 + _swizzle_ref(i, j, 8, 4, 3)[1] for j in range(4)]
            for i in range(8)]
    assert o.tolist() == want


# ------------------------------------------------------------------ compile-time checks and refusals
@triton.jit
def k_no_arguments(XBLOCK: tl.constexpr):
    data = tl.arange(0, XBLOCK)
    tl.static_assert(data[None, :, None].shape == [1, XBLOCK, 1])
    scalar = tl.full([], 1, tl.int32)
    tl.static_assert(scalar[None, None].shape == [1, 1])
    tl.static_assert(tl.expand_dims(XBLOCK, -1).shape == [1])


def test_kernel_without_runtime_arguments():
    k_no_arguments[(1,)](XBLOCK=32)


@triton.jit
def k_scalar_overflow():
    huge: tl.constexpr = 0xFFFFFFFFFFFFFF
    x = tl.full((), 32, dtype=tl.int32)
    y = x + huge  # noqa: F841


def test_constant_out_of_range_refused():
    with pytest.raises(tl.CompilationError, match="out of range for tl.int32") as ei:
        k_scalar_overflow[(1,)]()
    assert "x + huge" in str(ei.value)


@triton.jit
def k_slice_with_bounds(X):
    X[10:]


def test_tensor_slice_with_bounds_refused():
    with pytest.raises(tl.CompilationError, match="unsupported tensor index"):
        k_slice_with_bounds[(1,)](torch.zeros(16))


@triton.jit
def k_inline_asm(X):
    x = tl.load(X)
    tl.store(X, tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                          pack=1))


@triton.jit
def k_dot_scaled(A, B, C):
    r = tl.arange(0, 16)
    a = tl.load(A + r[:, None] * 16 + r[None, :])
    tl.store(C + r[:, None] * 16 + r[None, :], tl.dot_scaled(a, None, "e4m3", a, None, "e4m3"))


@pytest.mark.parametrize("kernel,construct", [(k_inline_asm, "tl.inline_asm_elementwise"),
                                              (k_dot_scaled, "tl.dot_scaled")])
def test_gpu_only_constructs_refused(kernel, construct):
    args = (torch.zeros(256),) * (3 if kernel is k_dot_scaled else 1)
    with pytest.raises(tl.CompilationError, match=f"{construct} is not supported"):
        kernel[(1,)](*args)


# ------------------------------------------------------------------ fp_downcast_rounding
@triton.jit
def k_rtz(X, Y, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(Y + o, tl.load(X + o).to(Y.dtype.element_ty, fp_downcast_rounding="rtz"))


def _toward_zero_reference(x: torch.Tensor, dt: torch.dtype) -> list[float]:
    """The representable value of `dt` nearest to each x with magnitude not above |x| (brute force)."""
    codes = torch.arange(256 if dt.itemsize == 1 else 65536, dtype=torch.int64)
    table = (codes.to(torch.uint8) if dt.itemsize == 1 else codes.to(torch.int16)).view(dt).double()
    finite = table[torch.isfinite(table)]
    out = []
    for v in x.double().tolist():
        below = finite[(finite.abs() <= abs(v)) & ((finite >= 0) if v >= 0 else (finite <= 0))]
        out.append(below[below.abs().argmax()].item() if len(below) else 0.0)
    return out


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16, torch.float8_e5m2, torch.float8_e4m3fnuz])
def test_fp_downcast_rounding_toward_zero(dt):
    edges = torch.tensor([1e9, -1e9, 3e-8, -3e-8, 0.0, 1.0, -1.5, 65520.0])
    x = torch.cat([torch.randn(56) * torch.logspace(-9, 6, 56), edges])
    y = torch.zeros(64, dtype=dt)
    k_rtz[(1,)](x.float(), y, N=64)
    assert y.double().tolist() == _toward_zero_reference(x.float(), dt)


@triton.jit
def k_rounding_on_upcast(X, Y):
    tl.store(Y, tl.load(X).to(tl.float32, fp_downcast_rounding="rtz"))


def test_fp_downcast_rounding_on_a_widening_cast_refused():
    with pytest.raises(tl.CompilationError, match="only for narrowing float conversions"):
        k_rounding_on_upcast[(1,)](torch.zeros(1, dtype=torch.float16), torch.zeros(1))
