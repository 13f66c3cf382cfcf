"""Every collective on rbln tensors against the same collective on CPU tensors, bit for bit.

Each test spawns one group and runs many checks in it (spawning is the slow part). CPU tensors in an
`rbln-ccl` group go to the same gloo backend directly, so the reference is gloo on plain CPU memory.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from distutil import assert_same, spawn

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.int64, torch.uint8,
          torch.int8, torch.bool]


def _data(rank: int, shape: tuple[int, ...], dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * rank + salt)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(0, 7, shape, generator=g).to(dtype)


def _both(fn, *cpu_args):
    """Run `fn` on CPU tensors and on rbln copies of them; (rbln args, cpu args) after the call."""
    rbln_args = [[t.to("rbln") for t in a] if isinstance(a, list) else a.to("rbln") for a in cpu_args]
    fn(*cpu_args)
    fn(*rbln_args)
    return rbln_args, list(cpu_args)


def _check_all(rank: int, world: int) -> None:
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.AVG]
    for dtype in DTYPES:
        x = _data(rank, (5, 3), dtype)
        for op in ops:
            if dtype is torch.bool and op in (dist.ReduceOp.PRODUCT, dist.ReduceOp.AVG):
                continue
            if op == dist.ReduceOp.AVG and not dtype.is_floating_point:
                continue
            r, c = _both(lambda t, op=op: dist.all_reduce(t, op=op), x.clone())
            assert_same(r, c, f"all_reduce {op} {dtype}")
        if not dtype.is_floating_point:
            for op in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR):
                r, c = _both(lambda t, op=op: dist.all_reduce(t, op=op), x.clone())
                assert_same(r, c, f"all_reduce {op} {dtype}")
        r, c = _both(lambda t: dist.broadcast(t, src=world - 1), x.clone())
        assert_same(r, c, f"broadcast {dtype}")
        r, c = _both(lambda t: dist.reduce(t, dst=1), x.clone())
        if rank == 1:
            assert_same(r, c, f"reduce {dtype}")
        out = [torch.empty_like(x) for _ in range(world)]
        r, c = _both(lambda o, t: dist.all_gather(o, t), out, x)
        assert_same(r[0], c[0], f"all_gather {dtype}")
        flat = torch.empty(world * 5, 3, dtype=dtype)
        r, c = _both(lambda o, t: dist.all_gather_into_tensor(o, t), flat, x)
        assert_same(r[0], c[0], f"all_gather_into_tensor {dtype}")
        if dtype is not torch.bool:
            big = _data(rank, (world * 2, 3), dtype, salt=1)
            r, c = _both(lambda o, t: dist.reduce_scatter_tensor(o, t), torch.empty(2, 3, dtype=dtype), big)
            assert_same(r[0], c[0], f"reduce_scatter_tensor {dtype}")
    # async_op, Work objects, non-contiguous tensors (staged in a contiguous buffer and written back).
    # gloo itself gives wrong sums for a strided CPU tensor (torch 2.13: rows past the first few keep
    # their local values), so the CPU reference runs on a contiguous copy.
    base = _data(rank, (6, 8), torch.float32)
    r = base.to("rbln")[:, ::2]
    c = base[:, ::2].contiguous()
    works = [dist.all_reduce(r, async_op=True), dist.all_reduce(c, async_op=True)]
    for w in works:
        assert isinstance(w, dist.Work)
        w.wait()
    assert_same(r, c, "async all_reduce, non-contiguous")
    rb = base.to("rbln")
    dist.all_reduce(rb.t()[1:5])
    part = base.t()[1:5].contiguous()
    dist.all_reduce(part)
    expect = base.clone()
    expect.t()[1:5] = part
    assert_same(rb, expect, "all_reduce of a transposed slice writes back into that slice only")
    # all_to_all_single with uneven splits, and the list form (packed by rbln-ccl).
    in_splits = [rank + 1 + j for j in range(world)]
    out_splits = [j + 1 + rank for j in range(world)]
    x = _data(rank, (sum(in_splits), 2), torch.float32)
    r, c = _both(lambda o, t: dist.all_to_all_single(o, t, out_splits, in_splits),
                 torch.empty(sum(out_splits), 2), x)
    assert_same(r[0], c[0], "all_to_all_single uneven")
    ins = [_data(rank, (j + 1, 2), torch.float32, salt=j) for j in range(world)]
    outs = [torch.empty(rank + 1, 2) for _ in range(world)]
    rins, routs = [t.to("rbln") for t in ins], [t.to("rbln") for t in outs]
    dist.all_to_all(routs, rins)
    expect = [_data(j, (rank + 1, 2), torch.float32, salt=rank) for j in range(world)]
    assert_same(routs, expect, "all_to_all lists")
    # gather / scatter.
    x = _data(rank, (4,), torch.bfloat16)
    gl = [torch.empty(4, dtype=torch.bfloat16) for _ in range(world)] if rank == 0 else None
    r, c = _both(lambda o, t: dist.gather(t, o, dst=0), gl if gl else [], x) if rank == 0 else \
        _both(lambda o, t: dist.gather(t, None, dst=0), [], x)
    if rank == 0:
        assert_same(r[0], c[0], "gather")
    src = [_data(j, (3,), torch.float16, salt=9) for j in range(world)]
    rs = torch.empty(3, dtype=torch.float16, device="rbln")
    dist.scatter(rs, [t.to("rbln") for t in src] if rank == 0 else None, src=0)
    assert_same(rs, _data(rank, (3,), torch.float16, salt=9), "scatter")
    # reduce_scatter (lists), coalesced all_reduce and the coalescing manager FSDP/DDP use.
    lists = [_data(rank, (3,), torch.float32, salt=j) for j in range(world)]
    r, c = _both(lambda o, ts: dist.reduce_scatter(o, ts), torch.empty(3), lists)
    assert_same(r[0], c[0], "reduce_scatter lists")
    ts = [_data(rank, (n,), torch.float32, salt=n) for n in (3, 5)]
    r, c = _both(lambda *a: dist.all_reduce_coalesced(list(a)), *[t.clone() for t in ts])
    assert_same(r, c, "all_reduce_coalesced")
    # The coalesced forms funcol issues (DTensor, compiled graphs; gloo has no coalescing manager),
    # and a staged output of a gloo Work without a future (reduce_scatter_tensor into a strided view).
    from torch.distributed import _functional_collectives as funcol

    a, b = _data(rank, (world * 2,), torch.float32, salt=5), _data(rank, (world * 3,), torch.bfloat16, salt=6)
    group = dist.group.WORLD
    coalesced = {
        "all_gather_into_tensor_coalesced": lambda ts: funcol.all_gather_into_tensor_coalesced(ts, group),
        "reduce_scatter_tensor_coalesced":
            lambda ts: funcol.reduce_scatter_tensor_coalesced(ts, "sum", [0, 0], group),
        # gloo's all_reduce_coalesced takes one dtype (CPU tensors too)
        "all_reduce_coalesced": lambda ts: funcol.all_reduce_coalesced([ts[0], ts[1].float()], "sum", group),
    }
    for name, call in coalesced.items():
        got = [funcol.wait_tensor(t) for t in call([a.to("rbln"), b.to("rbln")])]
        assert_same(got, [funcol.wait_tensor(t) for t in call([a, b])], name)
    strided = torch.zeros(4, device="rbln")[::2]
    work = dist.reduce_scatter_tensor(strided, _data(rank, (2 * world,), torch.float32, salt=7).to("rbln"),
                                      async_op=True)
    work.wait()
    want = torch.empty(2)
    dist.reduce_scatter_tensor(want, _data(rank, (2 * world,), torch.float32, salt=7))
    assert_same(strided, want, "reduce_scatter_tensor into a strided view")
    # send / recv / isend / irecv in a ring.
    x = _data(rank, (7,), torch.float32).to("rbln")
    got = torch.empty(7, device="rbln")
    ops = [dist.P2POp(dist.isend, x, (rank + 1) % world), dist.P2POp(dist.irecv, got, (rank - 1) % world)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert_same(got, _data((rank - 1) % world, (7,), torch.float32), "batch_isend_irecv ring")
    if rank == 0:
        dist.send(x, 1)
    elif rank == 1:
        dist.recv(got, 0)
        assert_same(got, _data(0, (7,), torch.float32), "send/recv")
    dist.barrier()


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_collectives_match_cpu(world):
    spawn(_check_all, world)


def _check_four(rank: int, world: int) -> None:
    """Default init (rbln is the accelerator), env://, LOCAL_RANK -> rbln:LOCAL_RANK; a gloo group on
    CPU tensors is the reference."""
    assert dist.get_backend_config() == "rbln:rbln-ccl"
    assert torch.rbln.current_device() == rank
    cpu_group = dist.new_group(backend="gloo")
    for dtype in (torch.bfloat16, torch.float32):
        x = _data(rank, (4, 4), dtype)
        r, c = x.to("rbln"), x.clone()
        assert r.device.index == rank
        dist.all_reduce(r)
        dist.all_reduce(c, group=cpu_group)
        assert_same(r, c, f"all_reduce 4 ranks {dtype}")
        out_r = torch.empty(world * 4, 4, dtype=dtype, device="rbln")
        out_c = torch.empty(world * 4, 4, dtype=dtype)
        dist.all_gather_into_tensor(out_r, r)
        dist.all_gather_into_tensor(out_c, c, group=cpu_group)
        assert_same(out_r, out_c, f"all_gather_into_tensor 4 ranks {dtype}")
        dist.broadcast(r, src=2)
        dist.broadcast(c, src=2, group=cpu_group)
        assert_same(r, c, f"broadcast 4 ranks {dtype}")


@pytest.mark.slow
def test_four_ranks_default_backend_env_init():
    spawn(_check_four, 4, backend=None, env=True)
