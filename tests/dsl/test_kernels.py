"""Triton-style kernels checked against torch on f32, f16 and bf16."""

import pytest
import torch
import torch_rbln.dsl as tl

from torch_rbln import dsl as triton

from .conftest import DTYPES, assert_close


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@pytest.mark.parametrize("dtype", DTYPES)
def test_vector_add(dtype):
    n = 3001
    x, y = torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)
    out = torch.empty_like(x)
    add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, out, n, BLOCK_SIZE=256)
    # one rounding of an exact sum: bit-exact against torch
    assert torch.equal(out, x + y)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    col = tl.arange(0, BLOCK_SIZE)
    mask = col < n_cols
    x = tl.load(in_ptr + row * in_row_stride + col, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    y = num / den
    tl.store(out_ptr + row * out_row_stride + col, y, mask=mask)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_softmax(dtype):
    x = torch.randn(23, 100, dtype=dtype) * 3
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](out, x, x.stride(0), out.stride(0), x.shape[1],
                                  BLOCK_SIZE=triton.next_power_of_2(x.shape[1]))
    ref = torch.softmax(x.float(), dim=-1).to(dtype)
    assert_close(out, ref, dtype)


@triton.jit
def matmul_block_ptr_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                            stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_bp = tl.make_block_ptr(a_ptr, (M, K), (stride_am, stride_ak), (pid_m * BLOCK_M, 0), (BLOCK_M, BLOCK_K),
                             (1, 0))
    b_bp = tl.make_block_ptr(b_ptr, (K, N), (stride_bk, stride_bn), (0, pid_n * BLOCK_N), (BLOCK_K, BLOCK_N),
                             (1, 0))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_bp, boundary_check=(0, 1))
        b = tl.load(b_bp, boundary_check=(0, 1))
        acc = tl.dot(a, b, acc)
        a_bp = tl.advance(a_bp, (0, BLOCK_K))
        b_bp = tl.advance(b_bp, (BLOCK_K, 0))
    c_bp = tl.make_block_ptr(c_ptr, (M, N), (stride_cm, stride_cn), (pid_m * BLOCK_M, pid_n * BLOCK_N),
                             (BLOCK_M, BLOCK_N), (1, 0))
    tl.store(c_bp, acc.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))


@triton.jit
def matmul_mask_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                       stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@pytest.mark.parametrize("kernel", [matmul_block_ptr_kernel, matmul_mask_kernel], ids=["block_ptr", "mask"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul(kernel, dtype):
    M, N, K = 70, 45, 83  # not multiples of the blocks
    a, b = torch.randn(M, K, dtype=dtype), torch.randn(K, N, dtype=dtype)
    c = torch.empty(M, N, dtype=dtype)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 16))
    kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BLOCK_M=32, BLOCK_N=16, BLOCK_K=16)
    ref = (a.float() @ b.float()).to(dtype)
    assert_close(c, ref, dtype, scale=10 if dtype == torch.float32 else 1)


@triton.jit
def layer_norm_fwd(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    if Mean is not None:
        tl.store(Mean + row, mean)
    if Rstd is not None:
        tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        tl.store(Y + cols, y, mask=mask)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm(dtype):
    M, N = 9, 300
    x = torch.randn(M, N, dtype=dtype)
    w, b = torch.rand(N, dtype=dtype), torch.randn(N, dtype=dtype)
    y = torch.empty_like(x)
    mean, rstd = torch.empty(M), torch.empty(M)
    layer_norm_fwd[(M,)](x, y, w, b, mean, rstd, x.stride(0), N, 1e-5, BLOCK_SIZE=128)
    ref = torch.nn.functional.layer_norm(x.float(), (N,), w.float(), b.float(), 1e-5).to(dtype)
    assert_close(y, ref, dtype, scale=4)
    torch.testing.assert_close(mean, x.float().mean(1), atol=1e-5, rtol=1e-5)
    # the optional outputs can be None
    layer_norm_fwd[(M,)](x, y, w, b, None, None, x.stride(0), N, 1e-5, BLOCK_SIZE=128)
    assert_close(y, ref, dtype, scale=4)


@triton.jit
def cumsum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, REVERSE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0)
    y = tl.cumsum(x.to(tl.float32), axis=0, reverse=REVERSE)
    tl.store(out_ptr + row * n_cols + cols, y, mask=mask)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cumsum(dtype, reverse):
    x = torch.randn(5, 50, dtype=dtype)
    out = torch.empty_like(x)
    cumsum_kernel[(5,)](x, out, 50, BLOCK=64, REVERSE=reverse)
    xf = x.float()
    ref = xf.flip(1).cumsum(1).flip(1) if reverse else xf.cumsum(1)
    assert_close(out, ref.to(dtype), dtype, scale=4)


@triton.jit
def int_cumsum_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.cumsum(x, 0))


def test_int_cumsum_promotes_to_int32():
    x = torch.randint(0, 100, (64,), dtype=torch.int8)
    out = torch.empty(64, dtype=torch.int32)
    int_cumsum_kernel[(1,)](x, out, BLOCK=64)
    assert torch.equal(out, x.to(torch.int32).cumsum(0).to(torch.int32))


@triton.jit
def histogram_kernel(x_ptr, hist_ptr, n, lo, hi, NUM_BINS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = ((x - lo) / (hi - lo) * NUM_BINS).to(tl.int32)
    b = tl.minimum(tl.maximum(b, 0), NUM_BINS - 1)
    tl.atomic_add(hist_ptr + b, 1, mask=mask)


@pytest.mark.parametrize("dtype", DTYPES)
def test_atomic_histogram(dtype):
    n = 5000
    x = (torch.rand(n) * 10).to(dtype)
    hist = torch.zeros(16, dtype=torch.int32)
    histogram_kernel[(triton.cdiv(n, 512),)](x, hist, n, 0.0, 10.0, NUM_BINS=16, BLOCK=512)
    ref = torch.histc(x.float().clamp(0, 10 - 1e-6), bins=16, min=0, max=10).to(torch.int32)
    # binning of values on a bin edge may differ by rounding: compare totals and closeness
    assert int(hist.sum()) == n
    assert (hist - ref).abs().max() <= 2


@triton.jit
def atomic_float_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(x, axis=0))


def test_atomic_add_scalar_float():
    x = torch.randn(1000)
    out = torch.zeros(1)
    atomic_float_kernel[(8,)](x, out, 1000, BLOCK=128)
    torch.testing.assert_close(out[0], x.sum(), atol=1e-4, rtol=1e-5)


@triton.jit
def matmul_grouped_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                          stride_cm, stride_cn, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                          BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, ACTIVATION: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if ACTIVATION == "leaky_relu":
        accumulator = tl.where(accumulator >= 0, accumulator, 0.01 * accumulator)
    c = accumulator.to(tl.float16)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


def test_tutorial_grouped_matmul_fp16():
    M, N, K = 96, 80, 72
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    c = torch.empty(M, N, dtype=torch.float16)

    def grid(META):
        return (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)

    matmul_grouped_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                c.stride(0), c.stride(1), BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32,
                                GROUP_SIZE_M=2, ACTIVATION="leaky_relu")
    ref = torch.nn.functional.leaky_relu(a.float() @ b.float(), 0.01).half()
    assert_close(c, ref, torch.float16, scale=5)


@triton.jit
def softmax_loop_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                        BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float("inf"))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        tl.store(output_row_start_ptr + col_offsets, softmax_output, mask=mask)


def test_tutorial_persistent_softmax():
    x = torch.randn(37, 70)
    y = torch.empty_like(x)
    softmax_loop_kernel[(4, 1, 1)](y, x, x.stride(0), y.stride(0), 37, 70, BLOCK_SIZE=128, num_stages=2)
    torch.testing.assert_close(y, torch.softmax(x, -1))


@triton.jit
def locked_accumulate_kernel(x_ptr, acc_ptr, lock_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid * BLOCK + tl.arange(0, BLOCK))
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    acc = tl.load(acc_ptr + tl.arange(0, BLOCK))
    tl.store(acc_ptr + tl.arange(0, BLOCK), acc + x)
    tl.atomic_xchg(lock_ptr, 0)


def test_spin_lock_pattern():
    x = torch.randn(6, 16)
    acc = torch.zeros(16)
    lock = torch.zeros(1, dtype=torch.int32)
    locked_accumulate_kernel[(6,)](x, acc, lock, BLOCK=16)
    torch.testing.assert_close(acc, x.sum(0), atol=1e-5, rtol=1e-5)
    assert lock.item() == 0


@triton.jit
def ticket_kernel(counter_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    # every lane takes a ticket from the same counter: old values must be distinct
    old = tl.atomic_add(counter_ptr + tl.zeros([BLOCK], tl.int32), 1)
    tl.store(out_ptr + offs, old)


def test_atomic_add_returns_distinct_old_values_for_duplicate_addresses():
    counter = torch.zeros(1, dtype=torch.int32)
    out = torch.empty(4 * 8, dtype=torch.int32)
    ticket_kernel[(4,)](counter, out, BLOCK=8)
    assert counter.item() == 32
    assert sorted(out.tolist()) == list(range(32))


@triton.jit
def inplace_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x * 0.0)  # out may alias x: the loaded x must not change
    y = tl.load(y_ptr + offs)
    tl.store(out_ptr + offs, x + y)


def test_loads_are_snapshots_even_when_arguments_alias():
    x, y = torch.randn(16), torch.randn(16)
    ref = x + y
    inplace_kernel[(1,)](x, y, x, BLOCK=16)
    assert torch.equal(x, ref)


@triton.jit
def strided_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * (2 * BLOCK) + tl.arange(0, BLOCK)  # programs skip every other block
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x * tl.arange(0, BLOCK).to(tl.float32) + pid, mask=offs < n)


@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, s_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    s = tl.load(s_ptr)
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    y = tl.where(x > 0, x * s, tl.exp(x)) + offs.to(tl.float32) / n
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask & (offs % 3 != 0))


def test_program_grouping_is_exact():
    from torch_rbln.dsl.backends.interpret import groupable_block

    n = 70_001  # grid not a multiple of the group size, last block partial
    x = torch.randn(n)
    s = torch.tensor([1.5])
    out = torch.zeros(n, dtype=torch.float16)
    # the interpreter's grouped execution against its own program-by-program execution
    ck = scale_shift_kernel[(triton.cdiv(n, 64),)](x, out, s, n, BLOCK=64, backend="interpret")
    assert groupable_block(ck.ir) == 64
    idx = torch.arange(n)
    ref = (torch.where(x > 0, x * 1.5, torch.exp(x)) + idx.float() / n).half()
    ref[idx % 3 == 0] = 0
    assert_close(out, ref, torch.float16)
    # bit-identical to running every program on its own
    from torch_rbln.dsl.backends.interpret import Executable
    from torch_rbln.dsl.jit import _runtime_args

    solo = Executable(ck.ir)
    solo.group_n = None
    out_solo = torch.zeros(n, dtype=torch.float16)
    solo.run((triton.cdiv(n, 64), 1, 1), _runtime_args(ck.ir, dict(x_ptr=x, out_ptr=out_solo, s_ptr=s, n=n,
                                                                    BLOCK=64)))
    assert torch.equal(out, out_solo)
    out2 = torch.zeros(n)
    ck2 = strided_kernel[(triton.cdiv(n, 128),)](x, out2, n, BLOCK=64)
    assert groupable_block(ck2.ir) is None
    ref2 = torch.zeros(n)
    for p in range(triton.cdiv(n, 128)):
        lo, hi = p * 128, min(p * 128 + 64, n)
        ref2[lo:hi] = x[lo:hi] * torch.arange(hi - lo).float() + p
    assert torch.equal(out2, ref2)


def test_grouped_out_of_bounds_is_reported():
    x = torch.zeros(1000)
    out = torch.zeros(1000)
    with pytest.raises(tl.KernelRuntimeError, match="out-of-bounds load of argument 'x_ptr'"):
        scale_shift_kernel[(20,)](x, out, torch.ones(1), 1280, BLOCK=64)  # mask allows lanes past 1000


@triton.jit
def float_mod_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=1.0)
    y = tl.load(y_ptr + offsets, mask=mask, other=1.0)
    tl.store(out_ptr + offsets, x % y, mask=mask)


def test_float_remainder_has_the_sign_of_the_dividend():
    """`%` on floats is C fmod (Triton's semantics), not Python's floored modulo; a zero divisor is NaN."""
    x = torch.tensor([5.5, -5.5, 5.5, -5.5, 3.0, 1.0, 0.0])
    y = torch.tensor([2.0, 2.0, -2.0, -2.0, 0.0, 3.0, 2.0])
    out = torch.empty_like(x)
    float_mod_kernel[(1,)](x, y, out, x.numel(), BLOCK=8)
    torch.testing.assert_close(out, torch.fmod(x, y), equal_nan=True)


@triton.jit
def scaled_add_kernel(x_ptr, scale, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * scale + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def test_scalar_parameters_between_pointers():
    """Parameter order is the kernel's own: a scalar between pointers must not shift the others."""
    x, y = torch.randn(37), torch.randn(37)
    out = torch.empty_like(x)
    scaled_add_kernel[(triton.cdiv(37, 16),)](x, 3.0, y, out, 37, BLOCK=16)
    torch.testing.assert_close(out, x * 3.0 + y)
