"""End-to-end RBLN attention kernels, one per family (plain, causal, flash, flash-causal, sliding window).

Ours, written in the structure of Rebellions' vllm-rbln kernels: a `static_range` over the batch,
`make_block_ptr` views of 5-/6-D tensors, the cache block and the cached-token count read as dynamic
indices from int16 tables, the kv-cache update (`dynamic_load` -> `insert` -> `dynamic_store`), a
broadcast batched `dot`, and the family's softmax intrinsic.  Each is checked against a torch reference
of the attention and of the updated cache (tests/dsl/rbln_attention_reference.py).  A `triton_op` host
wrapper in Rebellions' style (`warmup(..., host_layout=)` + `rblib.write_rtosa`) runs eagerly on rbln
tensors and under `torch.compile(backend="rbln")`.
"""

import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl import rbln as rblib

from torch_rbln import dsl as triton

from . import rbln_attention_reference as ref

H, G, D = 2, 2, 64
# cold numba compiles of these kernels took 5-6 minutes each under a load of 5 on 2 cores
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(autouse=True, params=[pytest.param("numba", marks=pytest.mark.slow), "interpret"])
def dsl_backend(request, monkeypatch):
    """Both backends, as in conftest; a numba compile of these kernels takes minutes cold (they unroll
    the batch and partition loops), so those runs are slow tests."""
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", request.param)
    return request.param
SCALE = 0.25
TOL = dict(atol=2e-5, rtol=2e-5)


# ------------------------------------------------------------------------------------------------
# shared pieces (jit helpers)
# ------------------------------------------------------------------------------------------------
@triton.jit
def _index(table_ptr, row, col, ROWS: tl.constexpr, COLS: tl.constexpr):
    bp = tl.make_block_ptr(table_ptr, (ROWS, COLS), (COLS, 1), (row, col), (1, 1), (1, 0))
    tl.static_assert(len(bp.type.element_ty.shape) == 2)
    return rblib.to_dynamic_index(bp).cast(tl.int32)


@triton.jit
def _cache_ptr(kv_ptr, which, block, NBLK: tl.constexpr, H: tl.constexpr, P: tl.constexpr, D: tl.constexpr):
    return tl.make_block_ptr(kv_ptr, (2, NBLK, H, 1, P, D), (NBLK * H * P * D, H * P * D, P * D, P * D, D, 1),
                             (which, block, 0, 0, 0, 0), (1, 1, H, 1, P, D), (5, 4, 3, 2, 1, 0))


@triton.jit
def _new_tokens(ptr, b, NB: tl.constexpr, H: tl.constexpr, L: tl.constexpr, D: tl.constexpr):
    bp = tl.make_block_ptr(ptr, (NB, H, 1, L, D), (H * L * D, L * D, L * D, D, 1), (b, 0, 0, 0, 0),
                           (1, H, 1, L, D), (4, 3, 2, 1, 0))
    return tl.reshape(tl.load(bp), (1, 1, H, 1, L, D))


@triton.jit
def _update(cache_bp, state, cached, L: tl.constexpr):
    """The kv-cache update of Rebellions' kernels: the block's `cached` tokens, then the new ones."""
    AXIS: tl.constexpr = 4
    block = rblib.dynamic_load(cache_bp, AXIS, cached)
    block = rblib.insert(block, state, AXIS, cached)
    rblib.dynamic_store(cache_bp, block, AXIS, cached + L)
    return block


@triton.jit
def _qo_ptr(ptr, b, NB: tl.constexpr, H: tl.constexpr, G: tl.constexpr, L: tl.constexpr, D: tl.constexpr):
    return tl.make_block_ptr(ptr, (NB, H, G, L, D), (H * G * L * D, G * L * D, L * D, D, 1), (b, 0, 0, 0, 0),
                             (1, H, G, L, D), (4, 3, 2, 1, 0))


@triton.jit
def _scores(q, k_block, scale, H: tl.constexpr, G: tl.constexpr, T: tl.constexpr, D: tl.constexpr):
    k = tl.permute(tl.reshape(k_block, (1, H, 1, T, D)), (0, 1, 2, 4, 3))
    return tl.dot(q, tl.broadcast_to(k, (1, H, G, D, T))) * scale


@triton.jit
def _values(v_block, H: tl.constexpr, G: tl.constexpr, T: tl.constexpr, D: tl.constexpr):
    return tl.broadcast_to(tl.reshape(v_block, (1, H, 1, T, D)), (1, H, G, T, D))


# ------------------------------------------------------------------------------------------------
# plain (masked) and causal attention over one cache block per sequence
# ------------------------------------------------------------------------------------------------
@triton.jit
def paged_attention_kernel(q_ptr, k_ptr, v_ptr, kv_ptr, mask_ptr, out_ptr, seq_ptr, scale, table_ptr,
                           H: tl.constexpr, G: tl.constexpr, D: tl.constexpr, L: tl.constexpr,
                           P: tl.constexpr, NB: tl.constexpr, NBLK: tl.constexpr, CAUSAL: tl.constexpr):
    for b in tl.static_range(0, NB, 1):
        block = _index(table_ptr, b, 0, NB, 1)
        cached = _index(seq_ptr, b, 0, NB, 1)
        k_all = _update(_cache_ptr(kv_ptr, 0, block, NBLK, H, P, D), _new_tokens(k_ptr, b, NB, H, L, D),
                        cached, L)
        v_all = _update(_cache_ptr(kv_ptr, 1, block, NBLK, H, P, D), _new_tokens(v_ptr, b, NB, H, L, D),
                        cached, L)
        s = _scores(tl.load(_qo_ptr(q_ptr, b, NB, H, G, L, D)), k_all, scale, H, G, P, D)
        if CAUSAL:
            p = rblib.dynamic_masked_softmax(s, cached)
        else:
            m_bp = tl.make_block_ptr(mask_ptr, (NB, 1, 1, L, P), (L * P, L * P, L * P, P, 1), (b, 0, 0, 0, 0),
                                     (1, 1, 1, L, P), (4, 3, 2, 1, 0))
            p = rblib.masked_softmax(s, tl.load(m_bp))
        tl.store(_qo_ptr(out_ptr, b, NB, H, G, L, D), tl.dot(p, _values(v_all, H, G, P, D)))


def _inputs(nb, length, nblk, part):
    q = torch.randn(nb, H, G, length, D)
    k = torch.randn(nb, H, 1, length, D)
    v = torch.randn(nb, H, 1, length, D)
    return q, k, v, torch.randn(2, nblk, H, 1, part, D)


@pytest.mark.parametrize("causal", [False, True], ids=["masked", "causal"])
def test_paged_attention(causal):
    P, NBLK, L = 8, 4, 3
    cached, blocks = [2, 5], [3, 0]
    q, k, v, cache = _inputs(2, L, NBLK, P)
    keeps = [ref.causal(L, s, P) for s in cached]
    if not causal:
        keeps[0][:, 1] = False  # a hole the causal rule would keep: the mask is read
    mask = torch.stack(keeps).float()[:, None, None]
    out, work = torch.empty_like(q), cache.clone()
    paged_attention_kernel[(1,)](q, k, v, work, mask, out, torch.tensor(cached, dtype=torch.int16)[:, None],
                                 SCALE, torch.tensor(blocks, dtype=torch.int16)[:, None],
                                 H=H, G=G, D=D, L=L, P=P, NB=2, NBLK=NBLK, CAUSAL=causal)
    ref_out, ref_cache = ref.paged(q, k, v, cache, [[b] for b in blocks], cached, P,
                                   lambda b, total: keeps[b][:, :total], SCALE)
    torch.testing.assert_close(out, ref_out, **TOL)
    assert torch.equal(work, ref_cache)


# ------------------------------------------------------------------------------------------------
# flash (masked) and flash-causal attention over the partitions of a sequence
# ------------------------------------------------------------------------------------------------
@triton.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, kv_ptr, mask_ptr, out_ptr, scale, seq_ptr, table_ptr,
                           H: tl.constexpr, G: tl.constexpr, D: tl.constexpr, L: tl.constexpr,
                           NB: tl.constexpr, P: tl.constexpr, C: tl.constexpr, NBLK: tl.constexpr,
                           CAUSAL: tl.constexpr):
    NP: tl.constexpr = C // P
    for b in tl.static_range(0, NB, 1):
        q = tl.load(_qo_ptr(q_ptr, b, NB, H, G, L, D))
        k_new = _new_tokens(k_ptr, b, NB, H, L, D)
        v_new = _new_tokens(v_ptr, b, NB, H, L, D)
        m_bp = tl.make_block_ptr(mask_ptr, (NB, 1, 1, L, C), (L * C, L * C, L * C, C, 1), (b, 0, 0, 0, 0),
                                 (1, 1, 1, L, P), (4, 3, 2, 1, 0))
        out = tl.zeros([1, H, G, L, D], dtype=tl.float32)
        row_sum = tl.zeros([1, H, G, L, 1], dtype=tl.float32)
        row_max = tl.zeros([1, H, G, L, 1], dtype=tl.float32)
        for part in tl.static_range(0, NP, 1):
            block = _index(table_ptr, b, part, NB, NP)
            if CAUSAL:
                cached = rblib.to_dynamic_index(
                    tl.make_block_ptr(seq_ptr, (NB, NP), (NP, 1), (b, part), (1, 1), (1, 0)), P)
            else:
                cached = _index(seq_ptr, b, part, NB, NP)
            if rblib.partition_skip(cached) == False:  # noqa: E712  (Rebellions' spelling)
                k_all = _update(_cache_ptr(kv_ptr, 0, block, NBLK, H, P, D), k_new, cached, L)
                v_all = _update(_cache_ptr(kv_ptr, 1, block, NBLK, H, P, D), v_new, cached, L)
                s = _scores(q, k_all, scale, H, G, P, D)
                if CAUSAL:
                    if part > 0:
                        tile_max, p, tile_sum = rblib.dynamic_flash_attn_tile(s, cached, row_max)
                    else:
                        tile_max, p, tile_sum = rblib.dynamic_flash_attn_tile(s, cached)
                else:
                    if part > 0:
                        tile_max, p, tile_sum = rblib.flash_attn_tile(s, tl.load(m_bp), row_max)
                    else:
                        tile_max, p, tile_sum = rblib.flash_attn_tile(s, tl.load(m_bp))
                tile_out = tl.dot(p, _values(v_all, H, G, P, D))
                if part > 0:
                    row_sum, out = rblib.flash_attn_recompute(row_max, tile_max, row_sum, tile_sum, out,
                                                              tile_out)
                else:
                    row_sum, out = tile_sum, tile_out
                row_max = tile_max
            m_bp = tl.advance(m_bp, (0, 0, 0, 0, P))
        tl.store(_qo_ptr(out_ptr, b, NB, H, G, L, D), out / row_sum)


@pytest.mark.parametrize("causal", [False, True], ids=["masked", "causal"])
def test_flash_attention(causal):
    P, NP, NBLK, L = 8, 2, 5, 2
    table = torch.tensor([[4, 0]], dtype=torch.int16)
    # one sequence (a numba compile of this kernel grows with batch x partitions: minutes at 2 x 2).
    # vllm-rbln's counts (clamped to [0, P]) with the new tokens in the last partition, after a full
    # one: partly filled, or empty (a partition boundary); then counts marking the partition after
    # the new tokens negative, which rblib.partition_skip skips
    for cached, marked in ((P + 3, False), (P, False), (3, True)):
        q, k, v, cache = _inputs(1, L, NBLK, P)
        keep = torch.zeros(L, NP * P, dtype=torch.bool)
        keep[:, : cached + L] = ref.causal(L, cached, cached + L)
        if not causal:
            keep[:, 1] = False  # a hole the causal rule would keep: the mask is read
        out, work = torch.empty_like(q), cache.clone()
        flash_attention_kernel[(1,)](q, k, v, work, keep.float()[None, None, None], out, SCALE,
                                     ref.partition_sizes([cached], NP, P, marked), table,
                                     H=H, G=G, D=D, L=L, NB=1, P=P, C=NP * P, NBLK=NBLK, CAUSAL=causal)
        ref_out, ref_cache = ref.paged(q, k, v, cache, table, [cached], P,
                                       lambda b, total, keep=keep: keep[:, :total], SCALE)
        torch.testing.assert_close(out, ref_out, **TOL)
        assert torch.equal(work, ref_cache)


# ------------------------------------------------------------------------------------------------
# sliding-window attention
# ------------------------------------------------------------------------------------------------
@triton.jit
def sliding_window_kernel(q_ptr, k_ptr, v_ptr, kv_ptr, out_ptr, start_ptr, end_ptr, scale, table_ptr,
                          H: tl.constexpr, G: tl.constexpr, D: tl.constexpr, L: tl.constexpr,
                          W: tl.constexpr, NB: tl.constexpr, NBLK: tl.constexpr, PAD: tl.constexpr):
    AXIS: tl.constexpr = 4
    T: tl.constexpr = W + L + PAD
    for b in tl.static_range(0, NB, 1):
        start = _index(start_ptr, b, 0, NB, 1)
        end = _index(end_ptr, b, 0, NB, 1)
        block = _index(table_ptr, b, 0, NB, 1)
        k_bp = _cache_ptr(kv_ptr, 0, block, NBLK, H, W, D)
        k_all = rblib.window_insert(rblib.dynamic_load(k_bp), _new_tokens(k_ptr, b, NB, H, L, D), AXIS, start)
        rblib.dynamic_store(k_bp, rblib.window_slice(k_all, end, AXIS, W))
        v_bp = _cache_ptr(kv_ptr, 1, block, NBLK, H, W, D)
        v_all = rblib.window_insert(rblib.dynamic_load(v_bp), _new_tokens(v_ptr, b, NB, H, L, D), AXIS, start)
        rblib.dynamic_store(v_bp, rblib.window_slice(v_all, end, AXIS, W))
        k_all = rblib.nn_pad(k_all, 0.0, AXIS, (0, PAD), "constant")
        v_all = rblib.nn_pad(v_all, 0.0, AXIS, (0, PAD), "constant")
        s = _scores(tl.load(_qo_ptr(q_ptr, b, NB, H, G, L, D)), k_all, scale, H, G, T, D)
        p = rblib.window_softmax(s, start, window_size=W)
        tl.store(_qo_ptr(out_ptr, b, NB, H, G, L, D), tl.dot(p, _values(v_all, H, G, T, D)))


def test_sliding_window_attention():
    W, L, NBLK, PAD = 8, 3, 3, 5
    start, blocks = [6, 2], [2, 0]  # 6 + 3 > W: that window slides
    q, k, v, cache = _inputs(2, L, NBLK, W)
    start_t = torch.tensor(start, dtype=torch.int16)[:, None]
    out, work = torch.empty_like(q), cache.clone()
    sliding_window_kernel[(1,)](q, k, v, work, out, start_t, start_t + L, SCALE,
                                torch.tensor(blocks, dtype=torch.int16)[:, None],
                                H=H, G=G, D=D, L=L, W=W, NB=2, NBLK=NBLK, PAD=PAD)
    ref_out, ref_cache = ref.sliding(q, k, v, cache, blocks, start, W, SCALE)
    torch.testing.assert_close(out, ref_out, **TOL)
    assert torch.equal(work, ref_cache)


# ------------------------------------------------------------------------------------------------
# a triton_op host wrapper in Rebellions' style, eager on rbln tensors and under torch.compile
# ------------------------------------------------------------------------------------------------
def _host_warmup(func, *args):
    kernel = func.warmup(*args, grid=(1,), host_layout="1:2:3")
    rblib.write_rtosa(kernel, args)
    return kernel


@torch.library.triton_op("rbln_dsl_test::causal_paged_attention", mutates_args=())
def causal_paged_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           kv_cache: torch.Tensor, seq_idx: torch.Tensor, qk_scale: torch.Tensor,
                           block_table: torch.Tensor) -> torch.Tensor:
    output = torch.empty_like(query)
    query = rblib.align_tensor_last_dim_to_64(query)
    params = [query, key, value, kv_cache, query, output, seq_idx, qk_scale, block_table,
              query.shape[1], query.shape[2], query.shape[-1], query.shape[-2], kv_cache.shape[-2],
              query.shape[0], kv_cache.shape[1], True]
    _host_warmup(paged_attention_kernel, *params)
    return output


@causal_paged_attention.register_fake
def _(query, key, value, kv_cache, seq_idx, qk_scale, block_table):
    return torch.empty_like(query)


def _host_case():
    P, NBLK, L = 8, 4, 3
    cached, blocks = [2, 5], [3, 0]
    q, k, v, cache = _inputs(2, L, NBLK, P)
    seq = torch.tensor(cached, dtype=torch.int16)[:, None]
    table = torch.tensor(blocks, dtype=torch.int16)[:, None]
    expected = ref.paged(q, k, v, cache, [[b] for b in blocks], cached, P,
                         lambda b, total: ref.causal(L, cached[b], total), SCALE)
    return (q, k, v, cache, seq, torch.tensor(SCALE), table), expected


def test_triton_op_host_wrapper_on_device():
    args, (ref_out, ref_cache) = _host_case()
    dev = [a.to("rbln") for a in args]
    out = causal_paged_attention(*dev)
    assert out.device.type == "rbln"
    torch.testing.assert_close(out.cpu(), ref_out, **TOL)
    assert torch.equal(dev[3].cpu(), ref_cache)  # the kernel updated the device kv cache


@pytest.mark.slow
def test_triton_op_host_wrapper_under_torch_compile(dsl_backend):
    args, (ref_out, ref_cache) = _host_case()
    dev = [a.to("rbln") for a in args]

    def layer(q, k, v, cache, seq, scale, table):
        return torch.ops.rbln_dsl_test.causal_paged_attention(q * 1.0, k, v, cache, seq, scale, table) + 0.0

    torch._dynamo.reset()
    out = torch.compile(layer, backend="rbln")(*dev)
    torch.testing.assert_close(out.cpu(), ref_out, **TOL)
    assert torch.equal(dev[3].cpu(), ref_cache)
