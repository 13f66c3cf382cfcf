"""Each `torch_rbln.dsl.rbln` intrinsic, in every call form Rebellions' kernels use, against torch.

The call forms are those of vllm-rbln's `vllm_rbln/triton_kernels/*.py` (see each intrinsic's docstring);
the kernels here are ours.  Every test runs on the numba backend and on the interpreter (conftest).
"""

import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl import rbln as rblib
from torch_rbln.dsl.jit import HostLaunch

from torch_rbln import dsl as triton

from .conftest import assert_close

NEG_INF = float("-inf")


def _softmax_over(x, keep):
    """Reference: softmax of x over the kept positions (0 elsewhere; all-masked rows are 0)."""
    p = torch.softmax(x.float().masked_fill(~keep, NEG_INF), dim=-1)
    return torch.nan_to_num(p, nan=0.0)


def _causal_keep(rows, cols, offset, window=None):
    i = torch.arange(rows)[:, None]
    j = torch.arange(cols)[None, :]
    keep = j <= offset + i
    if window is not None:
        keep &= j > offset + i - window
    return keep


def _rc(R, C):
    return tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]


def _block(ptr, R, C):
    """A block pointer to a whole contiguous (R, C) tensor (any R, C)."""
    return tl.make_block_ptr(ptr, (R, C), (C, 1), (0, 0), (R, C), (1, 0))


# ------------------------------------------------------------------------------------------------
# softmax family: masked_softmax(x, mask), dynamic_masked_softmax(x, off), window_softmax(x, start,
# window_size=)
# ------------------------------------------------------------------------------------------------
@triton.jit
def softmax_family_kernel(x_ptr, m_ptr, masked_ptr, causal_ptr, window_ptr, off_ptr,
                          R: tl.constexpr, C: tl.constexpr, W: tl.constexpr):
    x = tl.load(x_ptr + _rc(R, C))
    off = rblib.to_dynamic_index(tl.load(off_ptr))
    tl.store(masked_ptr + _rc(R, C), rblib.masked_softmax(x, tl.load(m_ptr + _rc(R, C))))
    tl.store(causal_ptr + _rc(R, C), rblib.dynamic_masked_softmax(x, off))
    tl.store(window_ptr + _rc(R, C), rblib.window_softmax(x, off, window_size=W))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_family(dtype):
    R, C, W = 4, 16, 5
    x = (torch.randn(R, C) * 3).to(dtype)
    mask = torch.randint(0, 2, (R, C)).float()
    mask[1, 3] = -1.0  # kept only where > 0, as the references' where(mask > 0, 0, -inf)
    mask[2] = 0.0  # a fully masked row is all zeros
    for off in (0, 6):
        outs = [torch.empty(R, C, dtype=dtype) for _ in range(3)]
        softmax_family_kernel[(1,)](x, mask, *outs, torch.tensor([off], dtype=torch.int16), R=R, C=C, W=W)
        assert_close(outs[0], _softmax_over(x, mask > 0), dtype)
        assert torch.all(outs[0][2] == 0)
        assert_close(outs[1], _softmax_over(x, _causal_keep(R, C, off)), dtype)
        assert_close(outs[2], _softmax_over(x, _causal_keep(R, C, off, W)), dtype)


# ------------------------------------------------------------------------------------------------
# flash attention: flash_attn_tile (2 and 3 arguments), dynamic_flash_attn_tile (2 and 3),
# flash_attn_recompute (6) -- an online softmax over two tiles equals the softmax over both
# ------------------------------------------------------------------------------------------------
@triton.jit
def flash_tiles_kernel(s_ptr, m_ptr, v_ptr, out_ptr, causal_out_ptr, stats_ptr, off0, off1,
                       L: tl.constexpr, P: tl.constexpr, D: tl.constexpr):
    s_bp = tl.make_block_ptr(s_ptr, (L, 2 * P), (2 * P, 1), (0, 0), (L, P), (1, 0))
    m_bp = tl.make_block_ptr(m_ptr, (L, 2 * P), (2 * P, 1), (0, 0), (L, P), (1, 0))
    v_bp = tl.make_block_ptr(v_ptr, (2 * P, D), (D, 1), (0, 0), (P, D), (1, 0))
    s0, m0, v0 = tl.load(s_bp), tl.load(m_bp), tl.load(v_bp)
    s_bp, m_bp, v_bp = tl.advance(s_bp, (0, P)), tl.advance(m_bp, (0, P)), tl.advance(v_bp, (P, 0))
    s1, m1, v1 = tl.load(s_bp), tl.load(m_bp), tl.load(v_bp)
    # masked
    row_max, p, row_sum = rblib.flash_attn_tile(s0, m0)
    out = tl.dot(p, v0)
    row_max_new, p, row_sum_cur = rblib.flash_attn_tile(s1, m1, row_max)
    row_sum, out = rblib.flash_attn_recompute(row_max, row_max_new, row_sum, row_sum_cur, out, tl.dot(p, v1))
    tl.store(out_ptr + _rc(L, D), out / row_sum)
    tl.store(stats_ptr + tl.arange(0, L)[:, None], row_max_new)
    # causal, with the cached-token count of each tile
    row_max, p, row_sum = rblib.dynamic_flash_attn_tile(s0, off0)
    out = tl.dot(p, v0)
    row_max_new, p, row_sum_cur = rblib.dynamic_flash_attn_tile(s1, off1, row_max)
    row_sum, out = rblib.flash_attn_recompute(row_max, row_max_new, row_sum, row_sum_cur, out, tl.dot(p, v1))
    tl.store(causal_out_ptr + _rc(L, D), out / row_sum)


def test_flash_tiles_and_recompute():
    L, P, D = 4, 8, 16
    s = torch.randn(L, 2 * P) * 3
    s[:, P:] += 4  # the second tile raises the row maxima: the recompute rescales
    v = torch.randn(2 * P, D)
    keep = torch.rand(L, 2 * P) > 0.4
    keep[:, 0] = True
    keep[1, :P] = False  # row 1 sees nothing in the first tile (its running max is -inf)
    keep[1, P] = True
    out, causal, stats = torch.empty(L, D), torch.empty(L, D), torch.empty(L, 1)
    off0, off1 = P, 2  # tile 0 full (every row sees it all), tile 1 holds 2 cached tokens
    flash_tiles_kernel[(1,)](s, keep.float(), v, out, causal, stats, off0, off1, L=L, P=P, D=D)
    torch.testing.assert_close(out, _softmax_over(s, keep) @ v, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(stats[:, 0], s.masked_fill(~keep, NEG_INF).amax(-1))
    causal_keep = torch.cat([_causal_keep(L, P, off0), _causal_keep(L, P, off1)], dim=1)
    torch.testing.assert_close(causal, _softmax_over(s, causal_keep) @ v, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# to_dynamic_index: from (1,) and (1, 1) block pointers (int16 tables, as vllm-rbln passes them),
# with a bound, from a loaded scalar; `.cast(tl.int32)`; `type.element_ty` of block and plain pointers
# ------------------------------------------------------------------------------------------------
@triton.jit
def dynamic_index_kernel(table_ptr, seq_ptr, out_ptr, row, NB: tl.constexpr, NP: tl.constexpr,
                         BOUND: tl.constexpr, DIM_TABLE: tl.constexpr):
    t_bp = tl.make_block_ptr(table_ptr, (NP,), (1,), (1,), (1,), (0,))
    tl.static_assert(len(t_bp.type.element_ty.shape) == DIM_TABLE)
    tl.static_assert(t_bp.type.element_ty.element_ty == tl.int16)
    tl.static_assert(seq_ptr.type.element_ty == tl.int16)
    s_bp = tl.make_block_ptr(seq_ptr, (NB, NP), (NP, 1), (row, 0), (1, 1), (1, 0))
    tl.static_assert(len(s_bp.type.element_ty.shape) == 2)
    block = rblib.to_dynamic_index(t_bp).cast(tl.int32)
    for p in tl.static_range(NP):
        tl.store(out_ptr + p, rblib.to_dynamic_index(s_bp, BOUND))
        tl.store(out_ptr + NP + p, rblib.to_dynamic_index(s_bp))
        s_bp = tl.advance(s_bp, (0, 1))
    tl.store(out_ptr + 2 * NP, block + rblib.to_dynamic_index(tl.load(seq_ptr + 1)))


def test_to_dynamic_index():
    NB, NP, BOUND = 2, 3, 8
    table = torch.tensor([5, 9, 4], dtype=torch.int16)
    seq = torch.tensor([[8, 3, 0], [-2, 11, 7]], dtype=torch.int16)
    for row in (0, 1):
        out = torch.empty(2 * NP + 1, dtype=torch.int32)
        dynamic_index_kernel[(1,)](table, seq, out, row, NB=NB, NP=NP, BOUND=BOUND, DIM_TABLE=1)
        raw = seq[row].int()
        assert out[:NP].tolist() == raw.clamp(max=BOUND).tolist()  # negative counts are kept
        assert out[NP:2 * NP].tolist() == raw.tolist()
        assert out[2 * NP].item() == 9 + 3


def test_to_dynamic_index_needs_one_element():
    @triton.jit
    def k(t_ptr, o_ptr):
        bp = tl.make_block_ptr(t_ptr, (4,), (1,), (0,), (2,), (0,))
        tl.store(o_ptr, rblib.to_dynamic_index(bp))

    with pytest.raises(triton.CompilationError, match="one element"):
        k[(1,)](torch.zeros(4, dtype=torch.int32), torch.empty(1, dtype=torch.int32))


# ------------------------------------------------------------------------------------------------
# dynamic_load(ptr) / (ptr, axis, size), dynamic_store(ptr, v) / (ptr, v, axis, size),
# insert(x, v, axis, idx): the kv-cache update of the attention kernels
# ------------------------------------------------------------------------------------------------
@triton.jit
def cache_update_kernel(cache_ptr, new_ptr, whole_ptr, seq_ptr, H: tl.constexpr, P: tl.constexpr,
                        L: tl.constexpr, D: tl.constexpr):
    AXIS: tl.constexpr = 1
    cached = rblib.to_dynamic_index(tl.make_block_ptr(seq_ptr, (1,), (1,), (0,), (1,), (0,)))
    c_bp = tl.make_block_ptr(cache_ptr, (H, P, D), (P * D, D, 1), (0, 0, 0), (H, P, D), (2, 1, 0))
    n_bp = tl.make_block_ptr(new_ptr, (H, L, D), (L * D, D, 1), (0, 0, 0), (H, L, D), (2, 1, 0))
    base = rblib.dynamic_load(c_bp, AXIS, cached)          # positions >= cached read 0
    updated = rblib.insert(base, tl.load(n_bp), AXIS, cached)
    rblib.dynamic_store(c_bp, updated, AXIS, cached + L)   # only the first cached + L positions
    w_bp = tl.make_block_ptr(whole_ptr, (H, P, D), (P * D, D, 1), (0, 0, 0), (H, P, D), (2, 1, 0))
    rblib.dynamic_store(w_bp, rblib.dynamic_load(c_bp) + updated)


def test_dynamic_load_store_insert():
    H, P, L, D = 2, 8, 3, 4
    new = torch.randn(H, L, D)
    for cached in (0, 2, 6, 8):  # 6: the window is clipped at the end; 8: a full block takes nothing
        cache = torch.randn(H, P, D)
        whole = torch.empty(H, P, D)
        ref = cache.clone()
        ref[:, cached:cached + L] = new[:, : max(0, P - cached)]
        updated = torch.zeros(H, P, D)
        updated[:, : min(P, cached + L)] = ref[:, : min(P, cached + L)]
        cache_update_kernel[(1,)](cache, new, whole, torch.tensor([cached], dtype=torch.int16),
                                  H=H, P=P, L=L, D=D)
        assert torch.equal(cache, ref), cached
        torch.testing.assert_close(whole, ref + updated)


@triton.jit
def insert_kernel(x_ptr, v_ptr, o_ptr, idx, R: tl.constexpr, C: tl.constexpr, K: tl.constexpr):
    x = tl.load(_block(x_ptr, R, C))
    v = tl.load(_block(v_ptr, 1, K))  # (1, K): broadcast over the rows
    tl.store(_block(o_ptr, R, C), rblib.insert(x, v, 1, idx))


def test_insert_clips_the_window():
    R, C, K = 3, 8, 3
    x, v = torch.randn(R, C), torch.randn(1, K)
    for idx in (-2, 0, 4, 6, 8, 11):
        out = torch.empty(R, C)
        insert_kernel[(1,)](x, v, out, idx, R=R, C=C, K=K)
        ref = x.clone()
        for j in range(K):
            if 0 <= idx + j < C:
                ref[:, idx + j] = v[0, j]
        assert torch.equal(out, ref), idx


# ------------------------------------------------------------------------------------------------
# partition_skip(off), used as `if rblib.partition_skip(off) == False:`
# ------------------------------------------------------------------------------------------------
@triton.jit
def partition_kernel(seq_ptr, o_ptr, NP: tl.constexpr):
    for p in tl.static_range(NP):
        off = rblib.to_dynamic_index(tl.make_block_ptr(seq_ptr, (NP,), (1,), (p,), (1,), (0,)))
        ran = 0
        if rblib.partition_skip(off) == False:  # noqa: E712  (the upstream spelling)
            ran = 1
        tl.store(o_ptr + p, ran)


def test_partition_skip():
    seq = torch.tensor([8, 3, 0, -1], dtype=torch.int16)
    out = torch.empty(4, dtype=torch.int32)
    partition_kernel[(1,)](seq, out, NP=4)
    # a count of 0 is not skipped: it may be the partition that receives the new tokens
    assert out.tolist() == [1, 1, 1, 0]


# ------------------------------------------------------------------------------------------------
# nn_pad(x, value, axis, (before, after), "constant"), window_insert(base, x, axis, start),
# window_slice(x, end, axis, size): the sliding-window cache update
# ------------------------------------------------------------------------------------------------
@triton.jit
def window_kernel(cache_ptr, new_ptr, cat_ptr, kept_ptr, padded_ptr, start, end, H: tl.constexpr,
                  W: tl.constexpr, L: tl.constexpr, PAD: tl.constexpr):
    AXIS: tl.constexpr = 1
    c_bp = tl.make_block_ptr(cache_ptr, (H, W), (W, 1), (0, 0), (H, W), (1, 0))
    n_bp = tl.make_block_ptr(new_ptr, (H, L), (L, 1), (0, 0), (H, L), (1, 0))
    cat = rblib.window_insert(rblib.dynamic_load(c_bp), tl.load(n_bp), AXIS, start)
    tl.store(_block(cat_ptr, H, W + L), cat)
    tl.store(_block(kept_ptr, H, W), rblib.window_slice(cat, end, AXIS, W))
    padded = rblib.nn_pad(cat, -1.0, (AXIS), ((0, PAD)), "constant")
    tl.store(_block(padded_ptr, H, W + L + PAD), padded)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_window_insert_slice_and_pad(dtype):
    H, W, L, PAD = 2, 8, 3, 5
    cache, new = torch.randn(H, W).to(dtype), torch.randn(H, L).to(dtype)
    for start in (0, 4, 8):
        end = start + L
        cat, kept = torch.empty(H, W + L, dtype=dtype), torch.empty(H, W, dtype=dtype)
        padded = torch.empty(H, W + L + PAD, dtype=dtype)
        window_kernel[(1,)](cache, new, cat, kept, padded, start, end, H=H, W=W, L=L, PAD=PAD)
        ref_cat = torch.nn.functional.pad(torch.cat([cache[:, :start], new], 1), (0, W - start))
        assert torch.equal(cat, ref_cat), start
        ref_kept = ref_cat[:, max(0, end - W):end]
        assert torch.equal(kept, torch.nn.functional.pad(ref_kept, (0, W - ref_kept.shape[1]))), start
        assert torch.equal(padded, torch.nn.functional.pad(ref_cat, (0, PAD), value=-1.0))


def test_nn_pad_only_constant():
    @triton.jit
    def k(x_ptr, o_ptr):
        x = tl.load(x_ptr + _rc(2, 4))
        tl.store(_block(o_ptr, 2, 6), rblib.nn_pad(x, 0.0, 1, (1, 1), "reflect"))

    with pytest.raises(triton.CompilationError, match="constant"):
        k[(1,)](torch.zeros(2, 4), torch.empty(2, 6))


# ------------------------------------------------------------------------------------------------
# block accesses outside the tensor raise (the block pointers' shapes are constexpr: a launch with
# smaller tensors must not read or write beyond them)
# ------------------------------------------------------------------------------------------------
@triton.jit
def cache_copy_kernel(src_ptr, dst_ptr, blk, N: tl.constexpr):
    s_bp = tl.make_block_ptr(src_ptr, (4, N), (N, 1), (blk, 0), (1, N), (1, 0))
    d_bp = tl.make_block_ptr(dst_ptr, (4, N), (N, 1), (blk, 0), (1, N), (1, 0))
    rblib.dynamic_store(d_bp, rblib.dynamic_load(s_bp) + 1)


def test_block_access_outside_the_tensor_raises():
    src, dst = torch.randn(4, 8), torch.zeros(4, 8)
    cache_copy_kernel[(1,)](src, dst, 3, N=8)
    assert torch.equal(dst[3], src[3] + 1)
    small = torch.zeros(2, 8)
    with pytest.raises(tl.KernelRuntimeError, match="out-of-bounds load"):
        cache_copy_kernel[(1,)](src[:2].clone(), small, 3, N=8)
    with pytest.raises(tl.KernelRuntimeError, match="out-of-bounds store"):
        cache_copy_kernel[(1,)](src, small, 2, N=8)
    assert torch.equal(small, torch.zeros(2, 8))


# ------------------------------------------------------------------------------------------------
# host side: align_tensor_last_dim_to_64, warmup(..., host_layout=), write_rtosa
# ------------------------------------------------------------------------------------------------
def test_align_tensor_last_dim_to_64():
    x = torch.randn(2, 3, 80)
    y = rblib.align_tensor_last_dim_to_64(x)
    assert y.shape == (2, 3, 128)
    assert torch.equal(y[..., :80], x) and torch.all(y[..., 80:] == 0)
    z = torch.randn(3, 64)
    assert rblib.align_tensor_last_dim_to_64(z) is z


@triton.jit
def scaled_copy_kernel(x_ptr, o_ptr, scale, dummy, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + offs, tl.load(x_ptr + offs) * scale)


def test_warmup_host_layout_and_write_rtosa():
    x, out = torch.randn(16), torch.zeros(16)
    scale = torch.tensor(0.5)  # a 0-dim tensor is a scalar argument under the host protocol
    args = (x, out, scale, scale, 16)
    kernel = scaled_copy_kernel.warmup(*args, grid=(1,), host_layout="1:2:3")
    assert isinstance(kernel, HostLaunch) and kernel.host_layout == (1, 2, 3)
    assert torch.all(out == 0)  # warmup compiles only
    assert kernel.ir is not None  # the CompiledKernel's attributes are reachable
    rblib.write_rtosa(kernel, args)
    torch.testing.assert_close(out, x * 0.5)


def test_host_protocol_errors():
    x = torch.randn(16)
    with pytest.raises(triton.LaunchError, match="host_layout"):
        scaled_copy_kernel.warmup(x, x, 1.0, 1.0, 16, grid=(1,), host_layout="1;2")
    compiled = scaled_copy_kernel.warmup(x, x, 1.0, 1.0, 16, grid=(1,))
    with pytest.raises(TypeError, match="host_layout"):
        rblib.write_rtosa(compiled, (x, x, 1.0, 1.0, 16))
