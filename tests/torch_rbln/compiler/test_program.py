"""Compiled graphs as generated programs (torch_rbln/compiler/program.py): from the third call, views are
address arithmetic, fused kernels and planned matmuls launch by address, every other node is a counted
call. Each result is compared with the same graph run node by node (bitwise: the same kernels on the same
operands) and with PyTorch on the CPU, sizes and strides included."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from torch_rbln.compiler import backend as backend_module
from torch_rbln.compiler.program import Program

ATOL = RTOL = 1e-5


class Block(torch.nn.Module):
    """A small attention-free transformer block: every kind of node the program handles (views, split,
    permute, fused pointwise and row kernels, addmm / mm / bmm, a call) and an output that is a view."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width, bias=False)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, tokens, width = x.shape
        q, k, v = self.qkv(self.norm(x)).split(width, dim=-1)
        heads = lambda t: t.view(batch, tokens, 4, width // 4).transpose(1, 2)  # noqa: E731
        scores = torch.softmax(heads(q) @ heads(k).transpose(-1, -2) * 0.5, dim=-1)
        mixed = (scores @ heads(v)).transpose(1, 2).reshape(batch, tokens, width)
        h = x + mixed
        out = h + self.down(F.gelu(self.up(h)))
        return out, heads(k)  # the second output: a strided view of a matmul's result


def _programs(monkeypatch) -> list[Program]:
    made: list[Program] = []
    original = Program.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Program, "__init__", init)
    return made


def _twins(module: type[torch.nn.Module], seed: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """A CPU module and an rbln copy with the same weights (in eval mode), after seeding `seed`."""
    torch.manual_seed(seed)
    cpu = module().eval()
    device = module().eval()
    device.load_state_dict(cpu.state_dict())
    return cpu, device.to("rbln")


def _model() -> tuple[Block, Block, torch.Tensor]:
    cpu, device = _twins(Block, 0)
    return cpu, device, torch.randn(2, 8, 32)


def test_the_program_matches_the_node_by_node_graph_and_the_cpu(fresh_compiler, monkeypatch):
    programs = _programs(monkeypatch)
    cpu, device, x = _model()
    xr = x.to("rbln")
    compiled = torch.compile(device, backend="rbln")
    with torch.no_grad():
        expected = cpu(x)
        node_by_node = [t.cpu() for t in compiled(xr)]  # first call: the fused graph
        compiled(xr)  # second call: the fused graph, recorded; the program is generated
        assert len(programs) == 1 and programs[0].function is not None
        for _ in range(2):
            got = compiled(xr)
            for actual, nodes, reference in zip(got, node_by_node, expected, strict=True):
                assert actual.device.type == "rbln"
                assert actual.shape == reference.shape and actual.stride() == reference.stride()
                torch.testing.assert_close(actual.cpu(), nodes, atol=0, rtol=0)
                torch.testing.assert_close(actual.cpu(), reference, atol=ATOL, rtol=RTOL)
    report = programs[0].report
    assert report["fused"] >= 2 and report["planned"] >= 4 and report["views"] >= 8
    stats = fresh_compiler.stats()
    assert stats["programs_generated"] == 1
    assert stats["program_direct_nodes"] == report["fused"] + report["planned"]
    assert stats["program_call_nodes"] == sum(report["calls"].values())
    assert "addmm" not in str(report["calls"]) and "view" not in str(report["calls"])


def test_the_program_counts_its_launches_as_the_graph_did(fresh_compiler):
    from torch_rbln import registry

    _, device, x = _model()
    xr = x.to("rbln")
    compiled = torch.compile(device, backend="rbln")
    with torch.no_grad():
        counts = []
        for _ in range(3):
            fresh_compiler.reset_stats()
            registry.reset_fallback_report()
            compiled(xr)
            report = registry.fallback_report()
            counts.append((fresh_compiler.stats()["fused_launches"],
                           {name: row["device"] for name, row in report.items() if "mm" in name}))
    assert counts[2] == counts[1] and counts[2][0] > 0 and counts[2][1]


def test_program_calls_are_counted_when_read_even_after_the_program_is_gone(fresh_compiler):
    """A program counts its calls lazily (one integer per call, added to the device and launch counters
    when they are read): five calls read at once count five times one call, a reset drops what came
    before it, and calls of a program freed since (Dynamo reset) still count."""
    import gc

    from torch_rbln import registry

    _, device, x = _model()
    xr = x.to("rbln")
    compiled = torch.compile(device, backend="rbln")

    def counted(function, calls: int) -> tuple[int, dict[str, int]]:
        fresh_compiler.reset_stats()
        registry.reset_fallback_report()
        for _ in range(calls):
            function(xr)
        return fresh_compiler.stats()["fused_launches"], registry.device_counts()

    with torch.no_grad():
        for _ in range(3):
            compiled(xr)  # the third call generates the program
        launches, devices = counted(compiled, 1)
        five_launches, five_devices = counted(compiled, 5)
        assert launches > 0 and five_launches == 5 * launches
        assert devices and five_devices == {name: 5 * count for name, count in devices.items()}
        fresh_compiler.reset_stats()
        registry.reset_fallback_report()
        compiled(xr)
        compiled(xr)
        torch._dynamo.reset()
        del compiled
        gc.collect()
        assert fresh_compiler.stats()["fused_launches"] == 2 * launches
        assert registry.device_counts() == {name: 2 * count for name, count in devices.items()}


def test_a_freed_programs_counter_counts_its_last_calls_then_is_dropped(fresh_compiler):
    """The deferred counter of a program nothing holds any more adds the calls it had not counted yet on
    the next read, then leaves the list of counters (which would otherwise grow with every graph); a
    living program's counter stays."""
    import gc

    from torch.fx.experimental.proxy_tensor import make_fx
    from torch_rbln.registry import _checks

    from torch_rbln import registry

    gm = make_fx(lambda a: a + 1.0)(torch.zeros(2))
    living, freed = Program(gm, 0, "living"), Program(gm, 1, "freed")
    for program in (living, freed):
        program._deferred_counter((("test::op", 2),), 0)
    living._uncounted[0], freed._uncounted[0] = 1, 3
    before = len(_checks._deferred_counts)
    del freed, program
    gc.collect()
    assert registry.device_counts()["test::op"] == 2 * (1 + 3)
    assert len(_checks._deferred_counts) == before - 1
    living._uncounted[0] += 5
    assert registry.device_counts()["test::op"] == 2 * (1 + 3 + 5)
    registry.reset_fallback_report()


def test_inputs_with_other_strides_run_the_fused_graph(fresh_compiler, monkeypatch):
    """compile_graph used directly (no Dynamo guards): the program's guard sends a call whose input
    strides differ from the graph's to the fused graph, which handles them."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_rbln.compiler.backend import compile_graph

    def f(a, b):
        return F.gelu(a @ b + 1.0) * 2.0

    torch.manual_seed(1)
    a, b = torch.randn(6, 5), torch.randn(5, 7)
    ar, br = a.to("rbln"), b.to("rbln")
    gm = make_fx(f, tracing_mode="fake")(ar, br)
    graph = compile_graph(gm, [node.meta["val"] for node in gm.graph.nodes if node.op == "placeholder"])
    for _ in range(3):
        torch.testing.assert_close(graph(ar, br).cpu(), f(a, b), atol=ATOL, rtol=RTOL)
    program = graph.variant(graph.tp)
    assert isinstance(program, Program) and program.function is not None
    transposed = a.t().contiguous().to("rbln").t()
    torch.testing.assert_close(graph(transposed, br).cpu(), f(a, b), atol=ATOL, rtol=RTOL)
    assert program.reruns == 1


def test_a_nan_operand_of_a_planned_matmul_reruns_on_the_fused_graph(fresh_compiler):
    """As eagerly: the registry's matmul takes the CPU fallback for a NaN operand (counted as such)."""
    from torch_rbln import registry

    cpu, device, x = _model()
    compiled = torch.compile(device, backend="rbln")
    with torch.no_grad():
        for _ in range(3):
            compiled(x.to("rbln"))
        x[0, 0, 0] = float("nan")
        registry.reset_fallback_report()
        got = compiled(x.to("rbln"))
    torch.testing.assert_close(got[0].cpu(), cpu(x)[0], atol=ATOL, rtol=RTOL, equal_nan=True)
    assert any(row["reasons"].get("nan_inf") for row in registry.fallback_report().values())


class _Linears(torch.nn.Module):
    """Two linears (addmm, then mm) with nothing between them that a NaN/Inf could meet first."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 24)
        self.down = torch.nn.Linear(24, 8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.up(x))


def _linears_program(monkeypatch):
    programs = _programs(monkeypatch)
    cpu, device = _twins(_Linears, 0)
    x = torch.randn(5, 16)
    compiled = torch.compile(device, backend="rbln")
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x.to("rbln")).cpu(), cpu(x), atol=ATOL, rtol=RTOL)
    assert len(programs) == 1 and programs[0].function is not None and programs[0].reruns == 0
    return cpu, device, compiled, x, programs[0]


def test_a_planned_matmul_scans_neither_its_operands_nor_its_result(fresh_compiler, monkeypatch):
    """The matmul family is exact, so eagerly nothing scans its operands (a model's weights) or its
    result; neither does the program: no NaN/Inf check at all in a graph of two linears."""
    *_, program = _linears_program(monkeypatch)
    assert program.source.count("raise Fault(") == 2  # both matmuls are launched by address
    assert not [line for line in program.source.splitlines() if line.strip().startswith("if checked and not")]


@pytest.mark.parametrize("where, value", [("up.weight", float("inf")), ("up.bias", float("nan")),
                                          ("down.weight", float("-inf"))])
def test_a_nan_or_inf_weight_of_a_planned_matmul_gives_the_cpus_result_on_the_device(fresh_compiler,
                                                                                   monkeypatch, where, value):
    """A weight is a graph input that no per-call scan reads: mm and addmm are exact
    (tests/registry/test_exact_ops.py), so the program's launches give the CPU's NaN and Inf, with no
    rerun and no fallback, as eager rbln does. Also an Inf that only ever meets zeros (Inf * 0 = NaN)."""
    from torch_rbln import registry

    cpu, device, compiled, x, program = _linears_program(monkeypatch)
    with torch.no_grad():
        for model in (cpu, device):
            parameter = model.get_parameter(where)
            if parameter.dim() == 2:
                parameter[0, 0] = value
            else:
                parameter[0] = value
        x[:, 0] = 0.0  # up.weight[0, 0] meets zeros only
        registry.reset_fallback_report()
        got = compiled(x.to("rbln"))
    torch.testing.assert_close(got.cpu(), cpu(x), atol=ATOL, rtol=RTOL, equal_nan=True)
    assert program.reruns == 0
    assert not any(row["cpu"] for row in registry.fallback_report().values())


def test_a_finite_matmul_that_overflows_gives_what_eager_rbln_gives(fresh_compiler, monkeypatch):
    """Finite operands whose product overflows: the program computes what eager rbln does (both
    matmuls on the device, the same kernels: the order of the first's sums decides between Inf and
    NaN), with no rerun."""
    cpu, device, compiled, x, program = _linears_program(monkeypatch)
    big = torch.full((5, 16), 3e38)
    with torch.no_grad():
        got = compiled(big.to("rbln"))
        eager = device(big.to("rbln"))
    assert not torch.isfinite(eager.cpu()).all()
    torch.testing.assert_close(got.cpu(), eager.cpu(), atol=0, rtol=0, equal_nan=True)
    assert program.reruns == 0


def test_a_kernel_fault_reruns_the_call_on_the_fused_graph(fresh_compiler, monkeypatch):
    programs = _programs(monkeypatch)
    cpu, device, x = _model()
    xr = x.to("rbln")
    compiled = torch.compile(device, backend="rbln")
    with torch.no_grad():
        for _ in range(3):
            compiled(xr)
        namespace = programs[0].function.__globals__
        faulty = sorted(name for name in namespace if name.startswith("l"))[-1]
        namespace[faulty] = lambda *args: False  # the launch reports a fault
        got = compiled(xr)
    for actual, reference in zip(got, cpu(x), strict=True):
        torch.testing.assert_close(actual.cpu(), reference, atol=ATOL, rtol=RTOL)


def test_programs_can_be_switched_off(fresh_compiler, monkeypatch):
    programs = _programs(monkeypatch)
    monkeypatch.setattr(backend_module, "PROGRAMS", False)
    cpu, device, x = _model()
    compiled = torch.compile(device, backend="rbln")
    with torch.no_grad():
        for _ in range(3):
            got = compiled(x.to("rbln"))
    assert not programs
    torch.testing.assert_close(got[0].cpu(), cpu(x)[0], atol=ATOL, rtol=RTOL)


class Attention(torch.nn.Module):
    """Causal self-attention whose q, k and v are strided slices of one projection (as GPT-2's)."""

    def __init__(self, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = (t.view(batch, tokens, self.heads, -1).transpose(1, 2)
                   for t in self.qkv(x).split(width, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(batch, tokens, width)


def test_attention_on_strided_slices_is_launched_by_the_program(fresh_compiler, monkeypatch):
    programs = _programs(monkeypatch)
    cpu, device = _twins(Attention, 2)
    x = torch.randn(2, 8, 32)
    compiled = torch.compile(device, backend="rbln")
    with torch.no_grad():
        expected = cpu(x)
        results = [compiled(x.to("rbln")).cpu() for _ in range(4)]
    for got in results:
        torch.testing.assert_close(got, expected, atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(got, results[0], atol=0, rtol=0)
    report = programs[0].report
    assert not any("attention" in name for name in report["calls"]), report
    assert report["planned"] >= 2  # the projection and the attention


def test_the_memory_plan_reuses_a_dead_buffer_of_the_same_layout(fresh_compiler, monkeypatch):
    """In a chain of four products, the second product's buffer is dead when the fourth one is
    allocated: the fourth reuses it, and the results stay right call after call."""
    programs = _programs(monkeypatch)

    def chain(x, w):
        return (((x @ w) @ w) @ w) @ w

    torch.manual_seed(3)
    x, w = torch.randn(8, 8), torch.randn(8, 8) / 3
    compiled = torch.compile(chain, backend="rbln")
    xr, wr = x.to("rbln"), w.to("rbln")
    results = [compiled(xr, wr).cpu() for _ in range(4)]
    for got in results:
        torch.testing.assert_close(got, chain(x, w), atol=ATOL, rtol=RTOL)
    assert programs[0].report["reused_buffers"] >= 1, programs[0].source


def test_a_cat_onto_an_empty_cache_is_a_fused_copy(fresh_compiler, monkeypatch):
    """`cat([empty past keys, keys], dim=-2)` (a cache that starts empty) is the contiguous copy of the
    permuted keys (`lowering.clones_for_cats_of_one_tensor`): a clone that fuses with the reduction
    reading it, launched by address, with the graph's result."""
    programs = _programs(monkeypatch)

    def f(x, past):
        keys = x.view(2, 8, 4, 8).transpose(1, 2)
        cache = torch.cat([past, keys], dim=-2)
        return cache, cache.sum(-1)

    torch.manual_seed(4)
    x, past = torch.randn(2, 8, 32), torch.randn(2, 4, 0, 8)
    compiled = torch.compile(f, backend="rbln")
    xr, pr = x.to("rbln"), past.to("rbln")
    expected = f(x, past)
    for _ in range(4):
        got = compiled(xr, pr)
        for actual, reference in zip(got, expected, strict=True):
            assert actual.stride() == reference.stride()
            torch.testing.assert_close(actual.cpu(), reference, atol=ATOL, rtol=RTOL)
    report = programs[0].report
    assert report["calls"] == {}, report
    names = _kernel_names(programs[0])
    assert len(names) == 1 and names[0].startswith("fused_clone_sum_"), names


@pytest.mark.parametrize("case", ["rotate_half", "three_on_dim0", "strided_pieces"])
def test_a_cat_is_one_tiled_copy_per_input_into_its_slice(fresh_compiler, monkeypatch, case):
    """`cat` of several tensors (Llama's `rotate_half`: cat of a negated half and the other half of a
    permuted q; pieces on dim 0; pieces that are transposed views) is one tiled copy per input, launched
    by address into the slice of an output laid out as the graph records it: no `cat` call, and the
    same values and strides as the node-by-node graph and the CPU."""
    programs = _programs(monkeypatch)

    def f(x, y):
        if case == "rotate_half":
            q = x.view(2, 8, 4, 8).transpose(1, 2)
            return torch.cat((-q[..., 4:], q[..., :4]), dim=-1) * 2.0
        if case == "three_on_dim0":
            return torch.cat([x[0] + 1.0, y, x[1]], dim=0) - 1.0
        return torch.cat([x.transpose(1, 2), y.view(2, 8, 8, 4).transpose(0, 1)[0]], dim=-1) * 0.5

    torch.manual_seed(5)
    x, y = torch.randn(2, 8, 32), torch.randn(16, 32)
    if case == "strided_pieces":
        x, y = torch.randn(2, 32, 8), torch.randn(2, 8, 32)
    compiled = torch.compile(f, backend="rbln")
    xr, yr = x.to("rbln"), y.to("rbln")
    expected = f(x, y)
    with torch.no_grad():
        first = compiled(xr, yr).cpu()
        for _ in range(3):
            got = compiled(xr, yr)
            assert got.shape == expected.shape and got.stride() == expected.stride()
            torch.testing.assert_close(got.cpu(), first, atol=0, rtol=0)
            torch.testing.assert_close(got.cpu(), expected, atol=ATOL, rtol=RTOL)
    report = programs[0].report
    assert programs[0].function is not None and programs[0].reruns == 0
    assert not any("cat" in name for name in report["calls"]), report


def test_a_fused_output_recorded_permuted_is_stored_there_and_launched(fresh_compiler, monkeypatch):
    """RoPE on a permuted q: the traced graph records the pointwise result with q's permuted strides.
    The fused kernel stores it at those strides (no row-major copy afterwards), so the program launches
    it by address; the later view, valid only for that layout, works, and the strides match the CPU's."""
    programs = _programs(monkeypatch)

    def rope(x, cos, sin):
        q = x.view(2, 8, 4, 16).transpose(1, 2)
        half = torch.cat([-q[..., 8:], q[..., :8]], dim=-1)
        rotated = q * cos + half * sin
        return rotated, rotated.transpose(1, 2).reshape(2, 8, 64) * 2.0

    torch.manual_seed(5)
    x, cos, sin = torch.randn(2, 8, 64), torch.randn(8, 16), torch.randn(8, 16)
    compiled = torch.compile(rope, backend="rbln")
    args = [t.to("rbln") for t in (x, cos, sin)]
    expected = rope(x, cos, sin)
    for _ in range(4):
        got = compiled(*args)
        for actual, reference in zip(got, expected, strict=True):
            assert actual.shape == reference.shape and actual.stride() == reference.stride()
            torch.testing.assert_close(actual.cpu(), reference, atol=ATOL, rtol=RTOL)
    report = programs[0].report
    assert report["fused"] >= 1 and not any("fused" in name for name in report["calls"]), report
    assert expected[0].stride() != expected[0].contiguous().stride()  # the premise: a permuted result


class _Lookup(torch.nn.Module):
    """Token and position embeddings (a lookup of the input ids and of a constant arange) and a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = torch.nn.Embedding(50, 16)
        self.positions = torch.nn.Embedding(12, 16)
        self.out = torch.nn.Linear(16, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[-1], device=ids.device)
        return self.out(self.tokens(ids) + self.positions(positions))


def test_an_embedding_is_launched_by_address_and_range_checked_per_call(fresh_compiler, monkeypatch):
    """Both lookups are gather launches of the program (no call); an index out of range reruns the call
    on the fused graph, which raises torch's error as eager rbln does."""
    programs = _programs(monkeypatch)
    cpu, device = _twins(_Lookup, 6)
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(0))
    compiled = torch.compile(device, backend="rbln")
    with torch.no_grad():
        for _ in range(4):
            got = compiled(ids.to("rbln"))
            assert got.shape == (2, 12, 8) and got.stride() == cpu(ids).stride()
            torch.testing.assert_close(got.cpu(), cpu(ids), atol=ATOL, rtol=RTOL)
        program = programs[0]
        assert program.function is not None and program.reruns == 0
        assert not any("embedding" in name for name in program.report["calls"]), program.report
        assert program.source.count("Fault('embedding") == 2
        other = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(1))
        torch.testing.assert_close(compiled(other.to("rbln")).cpu(), cpu(other), atol=ATOL, rtol=RTOL)
        assert program.reruns == 0
        bad = other.clone()
        bad[1, 3] = 50
        with pytest.raises(IndexError):
            compiled(bad.to("rbln"))
    assert program.reruns == 1


def test_buffers_only_kernels_see_are_allocated_once_and_outputs_per_call(fresh_compiler, monkeypatch):
    """The block's intermediates live in buffers the program allocated when it was generated (their
    addresses are constants of its source); every call's outputs are fresh, so a result kept from one
    call is not overwritten by the next. A call made while another holds the buffers (the lock taken)
    runs on the fused graph, right."""
    programs = _programs(monkeypatch)
    cpu, device, x = _model()
    compiled = torch.compile(device, backend="rbln")
    with torch.no_grad():
        for _ in range(3):
            compiled(x.to("rbln"))
        program = programs[0]
        assert program.report["static_buffers"] >= 1, program.report
        assert re.search(r"\bp\d+ = \d+$", program.source, re.MULTILINE), program.source  # a constant address
        first = compiled(x.to("rbln"))
        kept = [t.cpu() for t in first]
        y = torch.randn(2, 8, 32)
        second = compiled(y.to("rbln"))
        for actual, reference in zip(first, kept, strict=True):
            torch.testing.assert_close(actual.cpu(), reference, atol=0, rtol=0)
        for actual, reference in zip(second, cpu(y), strict=True):
            torch.testing.assert_close(actual.cpu(), reference, atol=ATOL, rtol=RTOL)
        assert all(a.data_ptr() != b.data_ptr() for a, b in zip(first, second, strict=True))
        lock = program.function.__globals__["_lock"]
        assert lock.acquire(False)
        try:
            busy = compiled(y.to("rbln"))
        finally:
            lock.release()
        assert program.reruns == 1
        for actual, reference in zip(busy, cpu(y), strict=True):
            torch.testing.assert_close(actual.cpu(), reference, atol=ATOL, rtol=RTOL)


class _Deep(torch.nn.Module):
    """A linear whose K (1100) the registry's tiles take in several K steps."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(1100, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def test_a_large_matmul_runs_as_one_tile(fresh_compiler, monkeypatch):
    """1024 x 48 x 1100 (above ONE_TILE_MIN_VOLUME; the registry's tiles take 512 rows per program):
    the program launches it on a grid of one program whose tile covers the product (one gemm), and the
    result matches the CPU and the fused graph's within float32 summation-order tolerance. 16 rows
    need no such launch: the registry's own tile for float32 operands gemm reads in place spans them
    and K in one step (`kernels.matmul._IN_PLACE_MAX_K`), and the program keeps it."""
    from torch_rbln.compiler import program as program_module

    assert 1024 * 48 * 1100 >= program_module.ONE_TILE_MIN_VOLUME
    programs = _programs(monkeypatch)
    cpu, device = _twins(_Deep, 7)
    x = torch.randn(1024, 1100)
    compiled = torch.compile(device, backend="rbln")
    with torch.no_grad():
        node_by_node = compiled(x.to("rbln")).cpu()
        for _ in range(3):
            got = compiled(x.to("rbln"))
            assert got.shape == (1024, 48) and got.stride() == (48, 1)
            torch.testing.assert_close(got.cpu(), cpu(x), atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(got.cpu(), node_by_node, atol=1e-4, rtol=1e-4)
    program = programs[0]
    assert program.report["one_tile_matmuls"] == 1 and program.reruns == 0, program.report
    launch = next(line for line in program.source.splitlines() if "addmm" in line or "(1, 1, 1," in line)
    assert "(1, 1, 1," in launch, program.source


def test_a_matmul_the_registry_runs_as_one_step_keeps_its_launch(fresh_compiler, monkeypatch):
    """16 x 48 x 1100: the registry's launch is already one program of one gemm, so the program
    launches it as it is (no one-tile launch compared or counted)."""
    programs = _programs(monkeypatch)
    cpu, device = _twins(_Deep, 7)
    x = torch.randn(16, 1100)
    compiled = torch.compile(device, backend="rbln")
    with torch.no_grad():
        for _ in range(4):
            torch.testing.assert_close(compiled(x.to("rbln")).cpu(), cpu(x), atol=1e-4, rtol=1e-4)
    program = programs[0]
    assert program.report["one_tile_matmuls"] == 0 and program.reruns == 0, program.report
    assert any("(1, 1, 1," in line for line in program.source.splitlines()), program.source


class _DeepThree(torch.nn.Module):
    """Three deep linears: two of one geometry (1100 -> 48), one of another (1100 -> 64)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(1100, 48)
        self.b = torch.nn.Linear(1100, 48)
        self.c = torch.nn.Linear(1100, 64)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.a(x), self.b(x), self.c(x)


def test_one_tile_matmuls_of_one_geometry_are_compared_once(fresh_compiler, monkeypatch):
    """Generating a program compares a one-tile matmul with the registry's result once per geometry
    (kernel, tile, scalars, operand layouts) in a process; a memo whose launch is not the kernel's
    current one is not trusted (compared again). Every result matches the CPU."""
    from torch_rbln.compiler import program as program_module

    monkeypatch.setattr(program_module, "_ONE_TILE_CHECKED", {})
    compared: list[int] = []
    allclose = torch.allclose
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: (compared.append(1), allclose(*a, **k))[1])
    programs = _programs(monkeypatch)
    cpu, device = _twins(_DeepThree, 9)
    x = torch.randn(1024, 1100)

    def check(compiled) -> None:
        with torch.no_grad():
            for _ in range(4):
                for got, want in zip(compiled(x.to("rbln")), cpu(x), strict=True):
                    torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)

    check(torch.compile(device, backend="rbln"))
    assert programs[0].report["one_tile_matmuls"] == 3 and programs[0].reruns == 0, programs[0].report
    assert len(compared) == 2 and len(program_module._ONE_TILE_CHECKED) == 2
    # a new graph of the same geometries: nothing compared again
    torch._dynamo.reset()
    check(torch.compile(device, backend="rbln"))
    assert programs[1].report["one_tile_matmuls"] == 3 and len(compared) == 2
    # memo entries that are not the kernel's kept launch: compared again
    for geometry in program_module._ONE_TILE_CHECKED:
        program_module._ONE_TILE_CHECKED[geometry] = object()
    torch._dynamo.reset()
    check(torch.compile(device, backend="rbln"))
    assert programs[2].report["one_tile_matmuls"] == 3 and len(compared) == 4


def test_rotate_half_on_a_strided_q_is_one_fused_launch_with_its_cat(fresh_compiler, monkeypatch):
    """RoPE on a strided q: the neg of a slice, the cat along the last dim and the multiply-adds are one
    fused kernel launched by address (the cat's pieces computed where they land): no call, no copy."""
    programs = _programs(monkeypatch)

    def rotate(x, w):
        q = (x @ w).view(1, 8, 8, 16).transpose(1, 2)
        return q * 2.0 + torch.cat((-q[..., 8:], q[..., :8]), dim=-1) * 3.0

    torch.manual_seed(8)
    x, w = torch.randn(8, 128), torch.randn(128, 128) / 8
    compiled = torch.compile(rotate, backend="rbln")
    args = [x.to("rbln"), w.to("rbln")]
    expected = rotate(x, w)
    for _ in range(4):
        got = compiled(*args)
        assert got.shape == expected.shape and got.stride() == expected.stride()
        torch.testing.assert_close(got.cpu(), expected, atol=ATOL, rtol=RTOL)
    report = programs[0].report
    assert report["calls"] == {}, report
    fused = [name for name in _kernel_names(programs[0]) if name.startswith("fused_")]
    assert len(fused) == 1 and "_neg_cat_" in fused[0], programs[0].source


def _kernel_names(program: Program) -> list[str]:
    return [name for name, _ in program._kernels]


class RotaryAttention(torch.nn.Module):
    """Llama's attention at batch 1: rotary frequencies as a broadcast product of positions and inverse
    frequencies, RoPE, SDPA, and the output's transpose + reshape into the output projection."""

    def __init__(self, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.dim = heads, width // heads
        self.qkv = torch.nn.Linear(width, 3 * width, bias=False)
        self.out = torch.nn.Linear(width, width, bias=False)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, self.dim, 2) / self.dim))

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        freqs = positions[:, :, None] * self.inv_freq  # (1, tokens, 1) x (dim / 2,)
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos()[:, None], angles.sin()[:, None]
        q, k, v = (t.view(batch, tokens, self.heads, self.dim).transpose(1, 2)
                   for t in self.qkv(x).split(width, dim=-1))

        def rotate(t: torch.Tensor) -> torch.Tensor:
            half = torch.cat((-t[..., self.dim // 2:], t[..., :self.dim // 2]), dim=-1)
            return t * cos + half * sin

        mixed = F.scaled_dot_product_attention(rotate(q), rotate(k), v, is_causal=True)
        mixed = mixed.view(batch, self.heads, tokens, self.dim)  # as in Llama's graph: a view to its shape
        return self.out(mixed.transpose(1, 2).contiguous().reshape(batch, tokens, width))


def test_attention_at_batch_one_leaves_no_call(fresh_compiler, monkeypatch):
    """Views of the attention output whose size-1 dim has another stride than the fake tensor's are
    address arithmetic, and the broadcast product of positions and frequencies is a fused launch (as a
    call it cost ~170 us inside Llama's program): the program makes no call at all, not even the
    output view's `as_strided`."""
    programs = _programs(monkeypatch)
    cpu, device = _twins(RotaryAttention, 9)
    x, positions = torch.randn(1, 16, 64), torch.arange(16.0)[None]
    compiled = torch.compile(device, backend="rbln")
    with torch.no_grad():
        expected = cpu(x, positions)
        for _ in range(4):
            got = compiled(x.to("rbln"), positions.to("rbln"))
            torch.testing.assert_close(got.cpu(), expected, atol=1e-4, rtol=1e-4)
    report = programs[0].report
    assert report["calls"] == {}, (report, programs[0].source)
    # the output, a view of the last matmul's buffer, is that buffer allocated in the view's layout
    assert report["folded_views"] == 1 and "as_strided" not in programs[0].source, programs[0].source


def _reductions_and_pointwise(x, y, row):
    """Nodes the fuser leaves alone (reductions over leading dims, a lone unary or binary op): each one
    a registry plan that the program launches by address."""
    return ((x * y).sum(0), x.mean(dim=(0, 1)), x.sum(1) / y.sum(1),
            torch.sub(x.sum(0), y.sum(0)), torch.exp(x.sum(2)), torch.pow(y.sum(0), 3.0),
            x.sum(1) - row)


def _three_inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(4, 6, 8, generator=g), torch.randn(4, 6, 8, generator=g)
    return x, y, torch.randn(1, 8, generator=g)


def test_reductions_unary_and_binary_plans_are_launched_by_the_program(fresh_compiler, monkeypatch):
    """sum/mean, a binary op of two tensors (dense or broadcast) and a unary op with a number leave no
    dispatcher call; each value is checked for NaN/Inf once however many plans read it."""
    programs = _programs(monkeypatch)
    compiled = torch.compile(_reductions_and_pointwise, backend="rbln")
    x, y, row = _three_inputs(5)
    for _ in range(3):
        got = compiled(x.to("rbln"), y.to("rbln"), row.to("rbln"))
    for have, want in zip(got, _reductions_and_pointwise(x, y, row), strict=True):
        torch.testing.assert_close(have.cpu(), want, atol=1e-5, rtol=1e-5)
    (program,) = [p for p in programs if p.report]
    assert program.report["calls"] == {}, program.report
    assert program.report["planned"] >= 10
    # an exact add with alpha other than 1 scans its operands eagerly (`_ALPHA_SCANNED`): left a call
    scaled = torch.compile(lambda a, b: torch.add(a.sum(0), b.sum(0), alpha=0.5), backend="rbln")
    for _ in range(3):
        got = scaled(x.to("rbln"), y.to("rbln"))
    torch.testing.assert_close(got.cpu(), torch.add(x.sum(0), y.sum(0), alpha=0.5), atol=1e-5, rtol=1e-5)
    assert programs[-1].report["calls"] == {"add.Tensor": 1}, programs[-1].report
    (address,) = re.findall(r"(p\d+) = v1\.data_ptr\(\)", program.source)
    assert len(re.findall(rf"s\d+\({address}, ", program.source)) == 1, program.source  # x scanned once


@pytest.mark.parametrize("special", [float("nan"), float("inf")])
def test_a_nan_or_inf_read_by_a_planned_reduction_reruns_on_the_fused_graph(fresh_compiler, special):
    compiled = torch.compile(_reductions_and_pointwise, backend="rbln")
    x, y, row = _three_inputs(6)
    for _ in range(3):
        compiled(x.to("rbln"), y.to("rbln"), row.to("rbln"))
    x[1, 2, 3] = special
    got = compiled(x.to("rbln"), y.to("rbln"), row.to("rbln"))
    for have, want in zip(got, _reductions_and_pointwise(x, y, row), strict=True):
        torch.testing.assert_close(have.cpu(), want, atol=1e-5, rtol=1e-5, equal_nan=True)


def test_a_lone_unary_op_after_a_matmul_is_launched_by_the_program(fresh_compiler, monkeypatch):
    """The MLP's GELU between two linears: the unary plan's kept launch, not a dispatcher call."""
    programs = _programs(monkeypatch)
    compiled = torch.compile(lambda x, w: F.gelu(x @ w), backend="rbln")
    g = torch.Generator().manual_seed(7)
    x, w = torch.randn(16, 8, generator=g), torch.randn(8, 12, generator=g)
    for _ in range(3):
        got = compiled(x.to("rbln"), w.to("rbln"))
    torch.testing.assert_close(got.cpu(), F.gelu(x @ w), atol=1e-5, rtol=1e-5)
    (program,) = [p for p in programs if p.report]
    assert program.report["calls"] == {} and program.report["planned"] == 2, program.report
