"""RBLN-style kernels and each `torch_rbln.dsl.rbln` intrinsic against a torch reference."""

import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl import rbln as rblib

from torch_rbln import dsl as triton

from .conftest import DTYPES, assert_close


def _ref_masked_softmax(x, keep):
    xf = x.float().masked_fill(~keep, float("-inf"))
    p = torch.softmax(xf, dim=-1)
    return torch.nan_to_num(p, nan=0.0) * keep


# ------------------------------------------------------------------------------------------------
# single-program RBLN attention: constexpr shapes, 5-D block pointers, static_range over partitions,
# batched dot, reshape/permute/broadcast_to, rbln.masked_softmax
# ------------------------------------------------------------------------------------------------
@triton.jit
def rbln_attention_kernel(q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, scale,
                          B: tl.constexpr, H: tl.constexpr, G: tl.constexpr, S: tl.constexpr,
                          D: tl.constexpr, T: tl.constexpr, P: tl.constexpr):
    NP: tl.constexpr = T // P
    tl.static_assert(NP * P == T, "T must be a multiple of the partition size")
    q_bp = tl.make_block_ptr(q_ptr, (B, H, G, S, D), (H * G * S * D, G * S * D, S * D, D, 1),
                             (0, 0, 0, 0, 0), (B, H, G, S, D), (4, 3, 2, 1, 0))
    k_bp = tl.make_block_ptr(k_ptr, (B, H, 1, T, D), (H * T * D, T * D, T * D, D, 1),
                             (0, 0, 0, 0, 0), (B, H, 1, P, D), (4, 3, 2, 1, 0))
    v_bp = tl.make_block_ptr(v_ptr, (B, H, 1, T, D), (H * T * D, T * D, T * D, D, 1),
                             (0, 0, 0, 0, 0), (B, H, 1, P, D), (4, 3, 2, 1, 0))
    m_bp = tl.make_block_ptr(mask_ptr, (B, 1, 1, S, T), (S * T, S * T, S * T, T, 1),
                             (0, 0, 0, 0, 0), (B, 1, 1, S, T), (4, 3, 2, 1, 0))
    q = tl.reshape(tl.load(q_bp), (B * H, G * S, D))
    scores = tl.zeros((B * H, G * S, T), dtype=tl.float32)
    for p in tl.static_range(NP):
        k = tl.load(k_bp)                                   # (B, H, 1, P, D)
        kt = tl.reshape(tl.permute(k, (0, 1, 2, 4, 3)), (B * H, D, P))
        s = tl.dot(q, kt) * scale                           # (B*H, G*S, P)
        scores = rblib.window_insert(scores, s, p * P, axis=2)
        k_bp = tl.advance(k_bp, (0, 0, 0, P, 0))
    mask = tl.load(m_bp)                                    # (B, 1, 1, S, T)
    mask = tl.reshape(tl.broadcast_to(mask, (B, H, G, S, T)), (B * H, G * S, T))
    probs = rblib.masked_softmax(scores, mask)
    acc = tl.zeros((B * H, G * S, D), dtype=tl.float32)
    for p in tl.static_range(NP):
        v = tl.reshape(tl.load(v_bp), (B * H, P, D))
        pp = rblib.window_slice(probs, p * P, P, axis=2)
        acc = tl.dot(pp.to(v.dtype), v, acc=acc)
        v_bp = tl.advance(v_bp, (0, 0, 0, P, 0))
    # out is laid out (B, S, H, G, D)
    out = tl.permute(tl.reshape(acc, (B, H, G, S, D)), (0, 3, 1, 2, 4))
    o_bp = tl.make_block_ptr(out_ptr, (B, S, H, G, D), (S * H * G * D, H * G * D, G * D, D, 1),
                             (0, 0, 0, 0, 0), (B, S, H, G, D), (4, 3, 2, 1, 0))
    tl.store(o_bp, out.to(out_ptr.dtype.element_ty))


def _attention_inputs(dtype, B=2, H=2, G=2, S=4, D=16, T=32):
    q = torch.randn(B, H, G, S, D, dtype=dtype)
    k = torch.randn(B, H, T, D, dtype=dtype)
    v = torch.randn(B, H, T, D, dtype=dtype)
    # causal-style mask over a prefix: position s may see t < T - S + s + 1 (never all masked)
    t = torch.arange(T)
    s = torch.arange(S)
    keep = (t[None, :] <= (T - S + s[:, None])).expand(B, S, T).clone()
    keep[1, :, :3] = False  # a padded prefix in batch 1
    mask = keep[:, None, None].to(torch.uint8)  # (B, 1, 1, S, T)
    return q, k, v, mask, keep


def _attention_ref(q, k, v, keep, scale):
    s = torch.einsum("bhgsd,bhtd->bhgst", q.float(), k.float()) * scale
    p = _ref_masked_softmax(s, keep[:, None, None])
    o = torch.einsum("bhgst,bhtd->bhgsd", p.to(v.dtype).float(), v.float())
    return o.permute(0, 3, 1, 2, 4)


def _float32_only_when_compiled(backend: str, dtype: torch.dtype) -> None:
    """The two attention intrinsics unroll into the largest kernels of this suite (a numba compile takes
    35-70 s each); their half-precision rounding is checked on the interpreter, and the compiled
    backend's half-precision paths by the op-library attention tests (tests/kernels)."""
    if backend == "numba" and dtype != torch.float32:
        pytest.skip("half precision of this intrinsic is checked on the interpreter (compile time)")


@pytest.mark.parametrize("dtype", DTYPES)
def test_rbln_attention(dtype, dsl_backend):
    _float32_only_when_compiled(dsl_backend, dtype)
    B, H, G, S, D, T, P = 2, 2, 2, 4, 16, 32, 8
    q, k, v, mask, keep = _attention_inputs(dtype, B, H, G, S, D, T)
    out = torch.empty(B, S, H, G, D, dtype=dtype)
    scale = D ** -0.5
    rbln_attention_kernel[(1,)](q, k, v, mask, out, scale, B=B, H=H, G=G, S=S, D=D, T=T, P=P)
    assert_close(out, _attention_ref(q, k, v, keep, scale), dtype, scale=2)


@triton.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, scale,
                           BH: tl.constexpr, S: tl.constexpr, D: tl.constexpr, T: tl.constexpr,
                           P: tl.constexpr):
    q_bp = tl.make_block_ptr(q_ptr, (BH, S, D), (S * D, D, 1), (0, 0, 0), (BH, S, D), (2, 1, 0))
    k_bp = tl.make_block_ptr(k_ptr, (BH, T, D), (T * D, D, 1), (0, 0, 0), (BH, P, D), (2, 1, 0))
    v_bp = tl.make_block_ptr(v_ptr, (BH, T, D), (T * D, D, 1), (0, 0, 0), (BH, P, D), (2, 1, 0))
    mk_bp = tl.make_block_ptr(mask_ptr, (BH, S, T), (S * T, T, 1), (0, 0, 0), (BH, S, P), (2, 1, 0))
    q = tl.load(q_bp)
    m = tl.full((BH, S), float("-inf"), tl.float32)
    lsum = tl.zeros((BH, S), dtype=tl.float32)
    acc = tl.zeros((BH, S, D), dtype=tl.float32)
    for _ in tl.static_range(T // P):
        k = tl.load(k_bp)
        v = tl.load(v_bp)
        mk = tl.load(mk_bp)
        m, lsum, acc = rblib.flash_attn_tile(q, k, v, m, lsum, acc, scale, mk)
        k_bp = tl.advance(k_bp, (0, P, 0))
        v_bp = tl.advance(v_bp, (0, P, 0))
        mk_bp = tl.advance(mk_bp, (0, 0, P))
    out = acc / lsum[:, :, None]
    o_bp = tl.make_block_ptr(out_ptr, (BH, S, D), (S * D, D, 1), (0, 0, 0), (BH, S, D), (2, 1, 0))
    tl.store(o_bp, out.to(out_ptr.dtype.element_ty))


@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attn_tile(dtype, dsl_backend):
    _float32_only_when_compiled(dsl_backend, dtype)
    BH, S, D, T, P = 3, 8, 16, 64, 16
    q = torch.randn(BH, S, D, dtype=dtype)
    k = torch.randn(BH, T, D, dtype=dtype) * 2
    v = torch.randn(BH, T, D, dtype=dtype)
    keep = torch.rand(BH, S, T) > 0.3
    keep[:, :, 0] = True
    keep[0, :, :P] = False  # a whole first tile masked for head 0
    keep[0, :, P] = True
    out = torch.empty(BH, S, D, dtype=dtype)
    flash_attention_kernel[(1,)](q, k, v, keep, out, 0.25, BH=BH, S=S, D=D, T=T, P=P)
    s = (q.float() @ k.float().transpose(1, 2)) * 0.25
    ref = _ref_masked_softmax(s, keep) @ v.float()
    # p is rounded to v's dtype before the PV product, as in Triton kernels
    assert_close(out, ref.to(dtype), dtype, scale=3)


# ------------------------------------------------------------------------------------------------
# one kernel per intrinsic
# ------------------------------------------------------------------------------------------------
@triton.jit
def masked_softmax_kernel(x_ptr, m_ptr, o_ptr, R: tl.constexpr, C: tl.constexpr):
    idx = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + idx)
    m = tl.load(m_ptr + idx)
    tl.store(o_ptr + idx, rblib.masked_softmax(x, m))


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_softmax(dtype):
    x = torch.randn(8, 32, dtype=dtype) * 4
    keep = torch.rand(8, 32) > 0.5
    keep[3] = False  # a fully masked row is all zeros
    out = torch.empty_like(x)
    masked_softmax_kernel[(1,)](x, keep, out, R=8, C=32)
    ref = _ref_masked_softmax(x, keep).to(dtype)
    assert_close(out, ref, dtype)
    assert torch.all(out[~keep] == 0) and torch.all(out[3] == 0)


@triton.jit
def recompute_kernel(mp_ptr, mn_ptr, l_ptr, acc_ptr, lo_ptr, acco_ptr, M: tl.constexpr, N: tl.constexpr):
    r = tl.arange(0, M)
    mp = tl.load(mp_ptr + r)
    mn = tl.load(mn_ptr + r)
    ls = tl.load(l_ptr + r)
    idx = r[:, None] * N + tl.arange(0, N)[None, :]
    acc = tl.load(acc_ptr + idx)
    l2, acc2 = rblib.flash_attn_recompute(mp, mn, ls, acc)
    tl.store(lo_ptr + r, l2)
    tl.store(acco_ptr + idx, acc2)


def test_flash_attn_recompute():
    mp = torch.randn(8)
    mp[2] = float("-inf")
    mn = torch.maximum(mp, torch.randn(8))
    ls, acc = torch.rand(8), torch.randn(8, 16)
    lo, acco = torch.empty(8), torch.empty(8, 16)
    recompute_kernel[(1,)](mp, mn, ls, acc, lo, acco, M=8, N=16)
    alpha = torch.exp(mp - mn)
    torch.testing.assert_close(lo, ls * alpha)
    torch.testing.assert_close(acco, acc * alpha[:, None])


@triton.jit
def dynamic_kernel(src_ptr, dst_ptr, pos_ptr, n_valid, ROWS: tl.constexpr, COLS: tl.constexpr,
                   BR: tl.constexpr):
    pos = rblib.to_dynamic_index(tl.load(pos_ptr))
    s_bp = tl.make_block_ptr(src_ptr, (ROWS, COLS), (COLS, 1), (0, 0), (BR, COLS), (1, 0))
    d_bp = tl.make_block_ptr(dst_ptr, (ROWS, COLS), (COLS, 1), (0, 0), (BR, COLS), (1, 0))
    tile = rblib.dynamic_load(s_bp, 0, pos, size=n_valid)
    rblib.dynamic_store(d_bp, tile * 2, 0, pos + 1, size=n_valid)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dynamic_load_store_and_index(dtype):
    src = torch.randn(20, 8, dtype=dtype)
    for pos, n_valid in ((3, 4), (15, 8)):
        dst = torch.full((20, 8), -1.0, dtype=dtype)
        dynamic_kernel[(1,)](src, dst, torch.tensor([float(pos)]), n_valid, ROWS=20, COLS=8, BR=8)
        ref = torch.full((20, 8), -1.0, dtype=dtype)
        rows = [r for r in range(pos, pos + n_valid) if r < 20 and r + 1 < 20]
        for r in rows:
            ref[r + 1] = src[r] * 2
        assert torch.equal(dst, ref), (pos, n_valid)


@triton.jit
def insert_kernel(x_ptr, v_ptr, o_ptr, idx, R: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + offs)
    v = tl.load(v_ptr + tl.arange(0, R))
    tl.store(o_ptr + offs, rblib.insert(x, v, idx, axis=1))


def test_insert():
    x, v = torch.randn(4, 16), torch.randn(4)
    for idx in (0, 7, 15, 16):
        out = torch.empty_like(x)
        insert_kernel[(1,)](x, v, out, idx, R=4, C=16)
        ref = x.clone()
        if idx < 16:
            ref[:, idx] = v
        assert torch.equal(out, ref)


@triton.jit
def partition_kernel(o_ptr, seq_len, P: tl.constexpr, NP: tl.constexpr):
    for p in tl.static_range(NP):
        skip = rblib.partition_skip(p, P, seq_len)
        tl.store(o_ptr + p, skip.to(tl.int32))


def test_partition_skip():
    out = torch.empty(6, dtype=torch.int32)
    partition_kernel[(1,)](out, 37, P=16, NP=6)
    assert out.tolist() == [int(p * 16 >= 37) for p in range(6)]


@triton.jit
def pad_kernel(x_ptr, o_ptr, R: tl.constexpr, C: tl.constexpr, OR: tl.constexpr, OC: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    y = rblib.nn_pad(x, (1, 3, 2, 0), value=-5.0)
    o_bp = tl.make_block_ptr(o_ptr, (OR, OC), (OC, 1), (0, 0), (OR, OC), (1, 0))
    tl.store(o_bp, y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nn_pad(dtype):
    x = torch.randn(4, 8, dtype=dtype)
    out = torch.empty(6, 12, dtype=dtype)
    pad_kernel[(1,)](x, out, R=4, C=8, OR=6, OC=12)
    assert torch.equal(out, torch.nn.functional.pad(x, (1, 3, 2, 0), value=-5.0))


@triton.jit
def window_kernel(x_ptr, o_slice_ptr, o_ins_ptr, o_sm_ptr, start, size, R: tl.constexpr, C: tl.constexpr,
                  W: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + offs)
    w = rblib.window_slice(x, start, W, axis=1)
    tl.store(o_slice_ptr + tl.arange(0, R)[:, None] * W + tl.arange(0, W)[None, :], w)
    tl.store(o_ins_ptr + offs, rblib.window_insert(tl.zeros((R, C), tl.float32), w * 2, start, axis=1))
    tl.store(o_sm_ptr + offs, rblib.window_softmax(x, start, size, axis=1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_window_ops(dtype):
    R, C, W = 4, 32, 8
    x = torch.randn(R, C, dtype=dtype)
    start, size = 5, 11
    o_slice = torch.empty(R, W, dtype=dtype)
    o_ins = torch.empty(R, C)
    o_sm = torch.empty(R, C, dtype=dtype)
    window_kernel[(1,)](x, o_slice, o_ins, o_sm, start, size, R=R, C=C, W=W)
    assert torch.equal(o_slice, x[:, start:start + W])
    ref_ins = torch.zeros(R, C)
    ref_ins[:, start:start + W] = x[:, start:start + W].float() * 2
    assert torch.equal(o_ins, ref_ins)
    keep = torch.zeros(R, C, dtype=torch.bool)
    keep[:, start:start + size] = True
    assert_close(o_sm, _ref_masked_softmax(x, keep).to(dtype), dtype)


def test_window_slice_out_of_range_is_runtime_error():
    x = torch.randn(4, 32)
    with pytest.raises(tl.KernelRuntimeError, match="out of range"):
        window_kernel[(1,)](x, torch.empty(4, 8), torch.empty(4, 32), torch.empty(4, 32), 30, 2,
                            R=4, C=32, W=8)
