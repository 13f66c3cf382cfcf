"""A `cat` along the last dim inside a fused pointwise kernel (compiler/partition.py `cat_pieces`,
compiler/codegen.py `_pointwise_cat`): each piece computed where it lands, its own pointwise chain
included. Results are compared with PyTorch on the CPU; the partition is checked on traced graphs."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx

from torch_rbln import registry
from torch_rbln.compiler import codegen
from torch_rbln.compiler.partition import cat_pieces, partition

ATOL = RTOL = 1e-5


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Hugging Face's apply_rotary_pos_emb on a q read through a transpose (as Llama's attention reads it)."""
    q = q.transpose(1, 2)
    return q * cos + rotate_half(q) * sin


def _rope_inputs(dtype: torch.dtype = torch.float32, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    cpu = [torch.randn(2, 8, 4, 32, generator=generator).to(dtype),
           torch.randn(1, 1, 8, 32, generator=generator).to(dtype),
           torch.randn(1, 1, 8, 32, generator=generator).to(dtype)]
    return cpu, [t.to("rbln") for t in cpu]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rope_is_one_fused_launch_and_matches_the_cpu(fresh_compiler, tmp_path, monkeypatch, dtype):
    monkeypatch.setenv("TORCH_RBLN_DUMP_KERNELS", str(tmp_path))
    cpu, device = _rope_inputs(dtype)
    compiled = torch.compile(rope, backend="rbln")
    tolerance = {"atol": ATOL, "rtol": RTOL} if dtype is torch.float32 else {"atol": 2e-3, "rtol": 2e-3}
    torch.testing.assert_close(compiled(*device).cpu(), rope(*cpu), **tolerance)
    fresh_compiler.reset_stats()
    registry.reset_fallback_report()
    got = compiled(*device)
    torch.testing.assert_close(got.cpu(), rope(*cpu), **tolerance)
    stats = fresh_compiler.stats()
    (name, count), = stats["kernels"].items()
    assert count == 1 and "_neg_cat_" in name, stats["kernels"]
    report = registry.fallback_report()
    assert not {"aten::cat", "aten::neg", "aten::mul", "aten::add"} & set(report), report
    source = (tmp_path / f"{name}.py").read_text()
    # every access walks its line with unit steps written into the source (a runtime stride of 1 would
    # make each load a gather), and the pieces' lanes start at their offsets
    assert " + c," in source and "c * " not in source and "c = cp + 16" in source, source


def _traced(function, *examples: torch.Tensor) -> fx.GraphModule:
    """The aten graph of `function`, with the fake tensors the partition reads (`meta["val"]`)."""
    return make_fx(function, tracing_mode="fake")(*examples)


def _node(gm: fx.GraphModule, target) -> fx.Node:
    return next(node for node in gm.graph.nodes if node.target is target)


def test_pieces_take_the_chains_only_their_cat_uses():
    aten = torch.ops.aten

    def f(a, b, c):
        e = aten.exp.default(a)
        m = aten.mul.Tensor(e, 2.0)  # exp -> mul: the first piece's chain
        n = aten.neg.default(b)  # also an output: stays outside, computed at every column of its own
        joined = aten.cat.default([m, n, c], -1)
        return aten.add.Tensor(joined, 1.0), n

    examples = (torch.randn(3, 5), torch.randn(3, 16), torch.randn(3, 11))
    gm = _traced(f, *examples)
    pieces = cat_pieces(_node(gm, aten.cat.default))
    places = [(p.root.name, p.offset, p.size) for p in pieces]
    assert places == [("mul", 0, 5), ("neg", 5, 16), ("c_1", 21, 11)]
    assert [[n.name for n in p.chain] for p in pieces] == [["exp", "mul"], [], []]
    groups = partition(gm.graph)
    fused = [g for g in groups if g.has_cat]
    assert len(fused) == 1 and [n.name for n in fused[0].nodes] == ["exp", "mul", "cat", "add"]


def test_cats_that_do_not_fuse_say_so():
    aten = torch.ops.aten

    def first_dim(a, b):
        return aten.cat.default([aten.neg.default(a), b], 0)

    def twice(a):
        return aten.cat.default([aten.neg.default(a), aten.neg.default(a), a], -1)

    def repeated(a):
        n = aten.neg.default(a)
        return aten.cat.default([n, n], -1)

    gm = _traced(first_dim, torch.randn(2, 4), torch.randn(3, 4))
    assert cat_pieces(_node(gm, aten.cat.default)) is None
    gm = _traced(repeated, torch.randn(2, 4))
    assert [p.chain for p in cat_pieces(_node(gm, aten.cat.default))] == [(), ()]  # one node, two places
    gm = _traced(twice, torch.randn(2, 4))
    assert all(len(p.chain) <= 1 for p in cat_pieces(_node(gm, aten.cat.default)))


def uneven(a, b, c, bias):
    """Three pieces of 5, 16 and 11 columns (masks that are no power of two), a two-node chain, a
    broadcast operand inside a piece's chain and another outside the cat."""
    joined = torch.cat((torch.exp(a) * 2.0, -(b * bias), c), dim=-1)
    return torch.sigmoid(joined) + c.sum(dim=-1, keepdim=True)


@pytest.mark.parametrize("function,shapes", [
    (uneven, [(3, 4, 5), (3, 4, 16), (3, 4, 32 - 21), (16,)]),
    (lambda a: torch.cat((-a, a), dim=-1) * 2.0, [(6, 7)]),  # one tensor read by both pieces
    (lambda a, b: torch.cat((a.t() + 1.0, b), dim=-1).relu(), [(9, 6), (6, 3)]),  # a transposed piece
    (lambda a, b: torch.cat((a.exp(), b), dim=-1) + 1.0, [(5,), (9,)]),  # one line: no leading dims
    (lambda a: torch.cat((a, a), dim=-1).cos(), [(6, 7)]),  # one tensor repeated: computed once
    (lambda a, b: torch.cat((a, a), dim=-1).cos() * b, [(6, 7), (6, 14)]),  # ... unless a line is read
])
@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_fused_cats_match_the_cpu(fresh_compiler, monkeypatch, function, shapes, backend):
    """On both DSL backends (the interpreter reads the generated kernel as numpy code of its own)."""
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", backend)
    generator = torch.Generator().manual_seed(3)
    cpu = [torch.randn(shape, generator=generator) for shape in shapes]
    got = torch.compile(function, backend="rbln")(*[t.to("rbln") for t in cpu])
    torch.testing.assert_close(got.cpu(), function(*cpu), atol=ATOL, rtol=RTOL)
    assert any("_cat_" in name for name in fresh_compiler.stats()["kernels"]), fresh_compiler.stats()


def rope_table(freqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's rotary embedding: cos and sin of `cat((freqs, freqs), dim=-1)`, scaled."""
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * 1.0, emb.sin() * 1.0


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_a_repeated_piece_is_computed_once_and_stored_at_each_place(fresh_compiler, tmp_path, monkeypatch,
                                                                     backend):
    monkeypatch.setenv("TORCH_RBLN_DUMP_KERNELS", str(tmp_path))
    monkeypatch.setenv("TORCH_RBLN_DSL_BACKEND", backend)
    freqs = torch.arange(128.0)[:, None] * torch.rand(32, generator=torch.Generator().manual_seed(2))
    got = torch.compile(rope_table, backend="rbln")(freqs.to("rbln"))
    for value, expected in zip(got, rope_table(freqs), strict=True):
        torch.testing.assert_close(value.cpu(), expected, atol=ATOL, rtol=RTOL)
    (name, _), = fresh_compiler.stats()["kernels"].items()
    source = (tmp_path / f"{name}.py").read_text()
    assert source.count("tl.cos(") == source.count("tl.sin(") == 1, source
    assert source.count("tl.store(") == 4 and "c = cp + 32" in source, source


def test_rope_trains_like_the_cpu(fresh_compiler):
    cpu, device = _rope_inputs(seed=5)
    leaves_cpu = [cpu[0].clone().requires_grad_()] + cpu[1:]
    leaves_dev = [device[0].clone().requires_grad_()] + device[1:]
    rope(*leaves_cpu).pow(2).sum().backward()
    torch.compile(lambda *a: rope(*a).pow(2).sum(), backend="rbln")(*leaves_dev).backward()
    torch.testing.assert_close(leaves_dev[0].grad.cpu(), leaves_cpu[0].grad, atol=1e-4, rtol=1e-4)


def test_the_kernel_source_is_shared_across_sizes():
    """Offsets and piece sizes are part of the source, line length and leading sizes are not: RoPE at
    two sequence lengths is one source (one numba compile)."""
    sources = []
    for tokens in (8, 24):
        q = torch.randn(2, tokens, 4, 32)
        cos, sin = torch.randn(1, 1, tokens, 32), torch.randn(1, 1, tokens, 32)
        gm = _traced(lambda q, cos, sin: rope(q, cos, sin), q, cos, sin)
        group, = [g for g in partition(gm.graph) if g.has_cat]
        sources.append(codegen.generate(group).source)
    assert sources[0] == sources[1]


def test_a_cat_of_one_tensor_and_empty_ones_becomes_a_clone():
    """A key/value cache that starts empty: `cat([past, new], -2)` with an empty past is a contiguous
    clone of `new` (a pointwise node, which fuses into the kernel computing `new`); cats of two
    non-empty tensors, or that change the dtype, stay cats."""
    from torch_rbln.compiler.lowering import clones_for_cats_of_one_tensor

    aten = torch.ops.aten

    def f(past, new, other, new16):
        cache = aten.cat.default([past, new.transpose(1, 2)], -2)
        both = aten.cat.default([new, other], -2)
        promoted = aten.cat.default([past, new16.transpose(1, 2)], -2)  # float16 values into float32
        return cache, both, promoted

    inputs = [torch.randn(1, 2, 0, 4), torch.randn(1, 3, 2, 4), torch.randn(1, 3, 5, 4),
              torch.randn(1, 3, 2, 4, dtype=torch.float16)]
    gm = _traced(f, *inputs)
    assert clones_for_cats_of_one_tensor(gm) == 1
    targets = [node.target for node in gm.graph.nodes if node.op == "call_function"]
    assert targets.count(aten.clone.default) == 1 and targets.count(aten.cat.default) == 2
    clone = _node(gm, aten.clone.default)
    assert clone.kwargs == {"memory_format": torch.contiguous_format}
    out = gm(*inputs)
    assert out[0].is_contiguous() and torch.equal(out[0], inputs[1].transpose(1, 2))


def _random_cat_case(seed: int):
    """A random graph around a cat along the last dim: 2-4 pieces of 1-40 columns over 0-3 leading
    dims, each piece a plain tensor, a transposed view or a short pointwise chain (with a broadcast
    operand), the cat then scaled by a broadcast tensor and shifted, or reduced over its rows."""
    generator = torch.Generator().manual_seed(seed)

    def pick(n: int) -> int:
        return int(torch.randint(n, (1,), generator=generator))

    lead = [1 + pick(5) for _ in range(pick(4))]
    sizes = [1 + pick(40) for _ in range(2 + pick(3))]
    kinds = [pick(4) for _ in sizes]  # 0 plain, 1 transposed view, 2 neg * broadcast, 3 exp(x) - 1
    shapes = []
    for size, kind in zip(sizes, kinds, strict=True):
        if kind == 1 and lead:
            shapes.append((*lead[:-1], size, lead[-1]))
        else:
            shapes.append((*lead, size))
    cpu = [torch.randn(shape, generator=generator) for shape in shapes]
    cpu.append(torch.randn(sum(sizes), generator=generator))  # broadcast over the rows
    reduce = bool(pick(2))

    def function(*tensors):
        *pieces, scale = tensors
        parts = []
        for piece, size, kind in zip(pieces, sizes, kinds, strict=True):
            if kind == 1 and lead:
                parts.append(piece.transpose(-1, -2))
            elif kind == 2:
                parts.append(-piece * scale[:size])
            elif kind == 3:
                parts.append(torch.exp(piece) - 1.0)
            else:
                parts.append(piece)
        joined = torch.cat(parts, dim=-1)
        out = joined * scale + 0.5
        return out.sum(dim=-1) if reduce else out

    return function, cpu


# three layouts by default (a numba compile each), eight with the slow tests
@pytest.mark.parametrize("seed", [*range(3), *(pytest.param(s, marks=pytest.mark.slow) for s in range(3, 8))])
def test_random_cats_match_the_cpu(fresh_compiler, seed):
    """A differential check over random cat layouts (piece sizes that are no powers of two, one-column
    pieces, transposed pieces, chains with broadcast operands, consumers and reductions after it)."""
    function, cpu = _random_cat_case(seed)
    got = torch.compile(function, backend="rbln")(*[t.to("rbln") for t in cpu])
    torch.testing.assert_close(got.cpu(), function(*cpu), atol=1e-4, rtol=1e-4)
    assert fresh_compiler.stats()["fused_launches"] >= 1 and "aten::cat" not in registry.fallback_report()
