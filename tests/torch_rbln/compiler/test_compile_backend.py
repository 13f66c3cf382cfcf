"""torch.compile(backend="rbln"): fusion, launches, options, TP failover, fallbacks, caching.

Every test compares against PyTorch on the CPU and checks what ran where: fused-kernel launches from
`torch_rbln.compiler.stats()`, registry kernels from `registry.fallback_report()`. Shapes are shared
between tests so that the generated kernels (shape-generic sources) compile once per session.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
import torch_rbln.dsl as tl

from torch_rbln import registry
from torch_rbln.compiler import backend as backend_module
from torch_rbln.compiler import cache, fused

ATOL = 1e-5
RTOL = 1e-5
SHAPE = (8, 96)


def add_gelu_mul(x, y):
    return F.gelu(x + y) * y


def softmax_of_affine(x, w, b):
    return torch.softmax(x * w + b, dim=-1)


def inputs(*shapes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    cpu = [torch.randn(shape, generator=generator) for shape in shapes]
    return cpu, [t.to("rbln") for t in cpu]


def launches(stats: dict) -> dict:
    return stats["kernels"]


# ---------------------------------------------------------------- registration


def test_backend_is_a_lazy_entry_point():
    """The backend is found through the torch_dynamo_backends entry point, and importing torch_rbln or
    its compiler package does not import torch._dynamo (a fresh interpreter checks both)."""
    entries = [e for e in importlib.metadata.entry_points(group="torch_dynamo_backends") if e.name == "rbln"]
    assert [e.value for e in entries] == ["torch_rbln.compiler:rbln_backend"]
    code = (
        "import sys, torch, torch_rbln, torch_rbln.compiler\n"
        "print('torch._dynamo' in sys.modules)\n"
        "from torch._dynamo.backends.registry import lookup_backend\n"
        "print(lookup_backend('rbln').__module__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "torch_rbln.compiler"]


# ---------------------------------------------------------------- fusion


def test_add_gelu_mul_is_one_fused_launch(fresh_compiler, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_DUMP_KERNELS", str(tmp_path))
    (x, y), (xr, yr) = inputs(SHAPE, SHAPE)
    compiled = torch.compile(add_gelu_mul, backend="rbln")
    out = compiled(xr, yr)
    assert out.device.type == "rbln"
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    fresh_compiler.reset_stats()
    registry.reset_fallback_report()
    out = compiled(xr, yr)
    stats = fresh_compiler.stats()
    assert stats["fused_launches"] == 1
    (name, count), = launches(stats).items()
    assert count == 1 and name.startswith("fused_add_gelu_mul")
    report = registry.fallback_report()
    assert not {"aten::add", "aten::gelu", "aten::mul"} & set(report), report  # nothing else ran
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    # TORCH_RBLN_DUMP_KERNELS: the kernel source and the graph it came from
    source = (tmp_path / f"{name}.py").read_text()
    assert "@tl.jit" in source and "tl.erf" in source
    graph = (tmp_path / f"{name}.graph.txt").read_text()
    assert "aten.gelu.default" in graph and "aten.add.Tensor" in graph
    assert list(tmp_path.glob("rbln_*_graph_*.graph.py"))


def test_broadcast_and_strided_operands(fresh_compiler):
    (x, b), (xr, br) = inputs((SHAPE[1], SHAPE[0]), (SHAPE[0],), seed=1)

    def f(x, b):  # a transposed operand and a broadcast bias
        return torch.sigmoid(x.t() + b[:, None]) * 3.0 - 1.0

    out = torch.compile(f, backend="rbln")(xr, br)
    torch.testing.assert_close(out.cpu(), f(x, b), atol=ATOL, rtol=RTOL)
    assert fresh_compiler.stats()["fused_launches"] == 1


def test_fused_outputs_keep_the_strides_the_graph_recorded(fresh_compiler):
    """A pointwise group over a permuted operand has a permuted output in the traced graph; a later view
    that is valid only for that layout (as in Llama's attention after RoPE) must work on the compiled
    graph too (the fused kernel stores the output at the recorded strides)."""
    (q,), (qr,) = inputs((2, 3, 4, 5), seed=3)

    def f(q):
        rotated = q.transpose(1, 2) * 2.0 + 1.0  # torch keeps the transposed layout
        return rotated.transpose(1, 2).view(2, 3, 20).sin()

    out = torch.compile(f, backend="rbln")(qr)
    torch.testing.assert_close(out.cpu(), f(q), atol=ATOL, rtol=RTOL)
    assert fresh_compiler.stats()["fused_launches"] >= 1


def test_softmax_fuses_with_its_producers(fresh_compiler):
    (x, w, b), (xr, wr, br) = inputs(SHAPE, SHAPE[-1:], SHAPE[-1:], seed=2)
    out = torch.compile(softmax_of_affine, backend="rbln")(xr, wr, br)
    torch.testing.assert_close(out.cpu(), softmax_of_affine(x, w, b), atol=ATOL, rtol=RTOL)
    stats = fresh_compiler.stats()
    assert stats["fused_launches"] == 1, stats  # mul, add, amax, sub, exp, sum, div: one rows kernel
    (name,) = launches(stats)
    assert "amax" in name and "mul" in name


@pytest.mark.parametrize("columns,block", [(96, 128), (512, 512), (600, 1024), (3000, 1024)])
def test_a_rows_kernel_takes_rows_of_up_to_1024_columns_in_one_chunk(columns, block):
    """RMSNorm over 512 columns runs chunks of 512 lanes (in chunks of 1024 half of every pass's lanes
    were masked: Llama's norm took 78 instead of 43 us); longer rows loop over chunks of 1024."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_rbln.compiler.codegen import generate
    from torch_rbln.compiler.partition import partition

    def rms_norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    gm = make_fx(rms_norm, tracing_mode="fake")(torch.randn(4, columns), torch.randn(columns))
    group, = partition(gm.graph)
    spec = generate(group)
    assert spec.kind == "rows" and spec.block == block


def test_an_input_read_twice_by_a_pointwise_kernel_is_loaded_at_each_read(fresh_compiler):
    """SiLU x up, `x * sigmoid(x) * y`: `x` is loaded where each read needs it (the DSL then reads memory
    in the loop that consumes it; one load of two uses was copied into a buffer first), and the
    kernel still matches the CPU."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_rbln.compiler.codegen import generate
    from torch_rbln.compiler.partition import partition

    def silu_up(x, y):
        return F.silu(x) * y

    gm = make_fx(silu_up, tracing_mode="fake")(torch.randn(SHAPE), torch.randn(SHAPE))
    group, = partition(gm.graph)
    source = generate(group).source
    assert source.count("tl.load(in0_ptr") == 2 and "in0 =" not in source and "in1 =" in source, source
    (x, y), (xr, yr) = inputs(SHAPE, SHAPE, seed=6)
    torch.testing.assert_close(torch.compile(silu_up, backend="rbln")(xr, yr).cpu(), silu_up(x, y),
                               atol=ATOL, rtol=RTOL)


def test_full_reduction_fuses_with_its_producer(fresh_compiler):
    (x,), (xr,) = inputs(SHAPE, seed=3)

    def f(x):
        return (x * x - 0.5).abs().mean()

    out = torch.compile(f, backend="rbln")(xr)
    torch.testing.assert_close(out.cpu(), f(x), atol=ATOL, rtol=RTOL)
    assert fresh_compiler.stats()["fused_launches"] == 1


def test_nan_propagates_through_fused_max_and_relu(fresh_compiler):
    (x,), _ = inputs(SHAPE, seed=4)
    x[2, 5] = float("nan")
    x[3, :] = float("-inf")
    xr = x.to("rbln")

    def f(x):
        return torch.relu(x - x.amax(dim=-1, keepdim=True) + 1.0)

    out = torch.compile(f, backend="rbln")(xr)
    torch.testing.assert_close(out.cpu(), f(x), atol=ATOL, rtol=RTOL, equal_nan=True)
    assert fresh_compiler.stats()["fused_launches"] == 1


def test_training_step_matches_cpu(fresh_compiler):
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(
        torch.nn.Linear(SHAPE[1], 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 10)
    )
    model = torch.nn.Sequential(
        torch.nn.Linear(SHAPE[1], 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 10)
    )
    model.load_state_dict(cpu_model.state_dict())
    model.to("rbln")
    (x,), (xr,) = inputs(SHAPE, seed=5)
    target = torch.randint(0, 10, (SHAPE[0],))

    def step(m, data, labels):
        optimizer = torch.optim.SGD(m.parameters(), lr=0.1)
        loss = F.cross_entropy(m(data), labels)
        loss.backward()
        optimizer.step()
        return loss.detach()

    compiled = torch.compile(model, backend="rbln")
    loss = step(compiled, xr, target.to("rbln"))
    cpu_loss = step(cpu_model, x, target)
    torch.testing.assert_close(loss.cpu(), cpu_loss, atol=ATOL, rtol=RTOL)
    for (name, p), (_, q) in zip(model.named_parameters(), cpu_model.named_parameters(), strict=True):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), atol=ATOL, rtol=RTOL, msg=name)
    stats = fresh_compiler.stats()
    assert stats["graphs_compiled"] == 2  # forward and backward
    assert stats["fused_launches"] >= 2, stats  # GELU + layer norm forward in one kernel; the backward
    assert stats["eager_graphs"] == 0 and stats["compile_errors"] == 0


# ---------------------------------------------------------------- options and tensor parallelism


def test_tensor_parallel_size_option(fresh_compiler):
    (x, y), (xr, yr) = inputs(SHAPE, SHAPE, seed=6)
    compiled = torch.compile(add_gelu_mul, backend="rbln", options={"tensor_parallel_size": 2})
    out = compiled(xr, yr)
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    stats = fresh_compiler.stats()
    assert stats.get("fused_launches_tp2") == 1 and stats.get("fused_launches_tp1", 0) == 0


def test_tensor_parallel_size_defaults_to_the_group_size(fresh_compiler, rbln_env):
    rbln_env(TORCH_RBLN_SIM_NPUS="4", RBLN_NPUS_PER_DEVICE="2")
    (x, y), (xr, yr) = inputs(SHAPE, SHAPE, seed=7)
    out = torch.compile(add_gelu_mul, backend="rbln")(xr, yr)
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    assert fresh_compiler.stats().get("fused_launches_tp2") == 1


def test_invalid_tensor_parallel_size_is_an_error():
    (_, _), (xr, yr) = inputs(SHAPE, SHAPE)
    compiled = torch.compile(add_gelu_mul, backend="rbln", options={"tensor_parallel_size": 0})
    with pytest.raises(Exception, match="tensor_parallel_size must be a positive integer"):
        compiled(xr, yr)


def test_unknown_options_pass_through_with_a_warning(capsys):
    (x, y), (xr, yr) = inputs(SHAPE, SHAPE)
    compiled = torch.compile(add_gelu_mul, backend="rbln", options={"npu_arch": "rbln-ca25"})
    out = compiled(xr, yr)
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    err = capsys.readouterr().err
    assert "[TORCH-RBLN][WARNING]" in err and "'npu_arch'" in err and "passed through" in err
    assert backend_module.parse_options({"npu_arch": 1}).passthrough == {"npu_arch": 1}


def _fail_with_tp(monkeypatch):
    """Fault injection: every fused launch with tp > 1 raises like an unsupported TP configuration."""
    original = fused.FusedKernel.launch
    seen: list[int] = []

    def launch(self, args, options):
        seen.append(self.tp)
        if self.tp > 1:
            raise RuntimeError(f"simulated: kernel unsupported with tp={self.tp}")
        return original(self, args, options)

    monkeypatch.setattr(fused.FusedKernel, "launch", launch)
    return seen


def test_tp_failover_recompiles_with_tp1(fresh_compiler, rbln_env, monkeypatch, capsys):
    rbln_env(TORCH_RBLN_SIM_NPUS="4", RBLN_NPUS_PER_DEVICE="2", TORCH_RBLN_USE_TP_FAILOVER="ON")
    seen = _fail_with_tp(monkeypatch)
    (x, y), (xr, yr) = inputs(SHAPE, SHAPE, seed=8)
    compiled = torch.compile(add_gelu_mul, backend="rbln")
    out = compiled(xr, yr)
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    assert seen == [2, 1]
    err = capsys.readouterr().err
    assert "unsupported with tp=2. Retrying with tp=1 on root device (NPU 0)." in err
    compiled(xr, yr)  # stays on tp=1
    assert seen == [2, 1, 1]
    assert fresh_compiler.stats()["tp_failovers"] == 1


def test_tp_failover_off_or_explicit_propagates(fresh_compiler, rbln_env, monkeypatch):
    rbln_env(TORCH_RBLN_SIM_NPUS="4", RBLN_NPUS_PER_DEVICE="2")
    _fail_with_tp(monkeypatch)
    (_, _), (xr, yr) = inputs(SHAPE, SHAPE, seed=9)
    with pytest.raises(RuntimeError, match="unsupported with tp=2"):
        torch.compile(add_gelu_mul, backend="rbln")(xr, yr)
    torch._dynamo.reset()
    rbln_env(TORCH_RBLN_USE_TP_FAILOVER="ON")
    explicit = torch.compile(add_gelu_mul, backend="rbln", options={"tensor_parallel_size": 2})
    with pytest.raises(RuntimeError, match="unsupported with tp=2"):
        explicit(xr, yr)


# ---------------------------------------------------------------- compile errors


@tl.jit
def broken_kernel(x_ptr, y_ptr, out_ptr, numel, BLOCK: tl.constexpr):
    """Takes add_gelu_mul's fused-kernel arguments; its body does not compile."""
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.no_such_builtin(offs))


def test_kernel_compile_error_runs_the_group_eagerly(fresh_compiler, monkeypatch, capsys):
    monkeypatch.setattr(fused, "load_kernel", lambda name, source: broken_kernel)
    (x, y), (xr, yr) = inputs(SHAPE, SHAPE, seed=10)
    out = torch.compile(add_gelu_mul, backend="rbln")(xr, yr)
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    err = capsys.readouterr().err
    assert "[TORCH-RBLN][WARNING] fused kernel fused_add_gelu_mul" in err and "run eagerly" in err
    stats = fresh_compiler.stats()
    assert stats["compile_errors"] == 1 and stats["fused_launches"] == 0
    assert registry.fallback_report()["aten::gelu"]["device"] == 1  # the registry ran the group


def test_kernel_compile_error_raises_when_fallback_disabled(monkeypatch, capsys, rbln_env):
    rbln_env(TORCH_RBLN_DISABLE_FALLBACK="compile_error")
    monkeypatch.setattr(fused, "load_kernel", lambda name, source: broken_kernel)
    (_, _), (xr, yr) = inputs(SHAPE, SHAPE, seed=11)
    with pytest.raises(Exception, match="no_such_builtin"):
        torch.compile(add_gelu_mul, backend="rbln")(xr, yr)
    assert "[TORCH-RBLN][ERROR] fused kernel" in capsys.readouterr().err


def test_graph_compile_error_runs_eagerly_or_raises(fresh_compiler, monkeypatch, capsys, rbln_env):
    def boom(graph):
        raise RuntimeError("simulated partitioner failure")

    monkeypatch.setattr(backend_module, "partition", boom)
    monkeypatch.setattr(cache, "lookup", lambda key: None)
    (x, y), (xr, yr) = inputs(SHAPE, SHAPE, seed=12)
    out = torch.compile(add_gelu_mul, backend="rbln")(xr, yr)
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    assert "could not compile" in capsys.readouterr().err
    assert fresh_compiler.stats()["eager_graphs"] == 1
    torch._dynamo.reset()
    rbln_env(TORCH_RBLN_DISABLE_FALLBACK="compile_error")
    with pytest.raises(Exception, match="simulated partitioner failure"):
        torch.compile(add_gelu_mul, backend="rbln")(xr, yr)


# ---------------------------------------------------------------- recompilation and caching


def test_recompiles_per_shape_and_reuses_the_cache(fresh_compiler, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TORCH_RBLN_CACHE_DIR", str(tmp_path))
    cache.clear_memory()
    keys: list[str] = []
    store = cache.store
    monkeypatch.setattr(cache, "store", lambda key, specs: (keys.append(key), store(key, specs)))
    (x, y), (xr, yr) = inputs(SHAPE, SHAPE, seed=13)
    (x2, y2), (xr2, yr2) = inputs((4, 50), (4, 50), seed=14)
    compiled = torch.compile(add_gelu_mul, backend="rbln", dynamic=False)
    torch.testing.assert_close(compiled(xr, yr).cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(compiled(xr2, yr2).cpu(), add_gelu_mul(x2, y2), atol=ATOL, rtol=RTOL)
    stats = fresh_compiler.stats()
    assert stats["graphs_compiled"] == 2 and len(set(keys)) == 2  # one graph per shape
    assert len(launches(stats)) == 1  # ... with one shape-generic kernel source
    assert len(list((tmp_path / "graphs").glob("*.json"))) == 2
    # a new Dynamo session: the in-memory cache answers
    torch._dynamo.reset()
    torch.compile(add_gelu_mul, backend="rbln", dynamic=False)(xr, yr)
    assert fresh_compiler.stats()["memory_hits"] == 1
    # a new process (simulated: memory cache cleared): the disk cache answers
    torch._dynamo.reset()
    cache.clear_memory()
    torch.compile(add_gelu_mul, backend="rbln", dynamic=False)(xr, yr)
    stats = fresh_compiler.stats()
    assert stats["disk_hits"] == 1 and stats["kernels_generated"] == 2
    # a corrupt entry: WARNING, regenerated, rewritten
    path = tmp_path / "graphs" / f"{keys[0]}.json"
    path.write_text('{"format": 1, "key": "truncated')
    torch._dynamo.reset()
    cache.clear_memory()
    capsys.readouterr()
    out = torch.compile(add_gelu_mul, backend="rbln", dynamic=False)(xr, yr)
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    err = capsys.readouterr().err
    assert f"[TORCH-RBLN][WARNING] graph cache entry {path} is corrupt" in err
    assert fresh_compiler.stats()["kernels_generated"] == 3
    assert json.loads(path.read_text())["key"] == keys[0]


def test_bfloat16_is_rounded_once(fresh_compiler):
    (x, y), _ = inputs(SHAPE, SHAPE, seed=15)
    x, y = x.bfloat16(), y.bfloat16()
    out = torch.compile(add_gelu_mul, backend="rbln")(x.to("rbln"), y.to("rbln"))
    assert out.dtype == torch.bfloat16
    reference = add_gelu_mul(x.float(), y.float())  # the fused kernel computes in float32
    torch.testing.assert_close(out.cpu().float(), reference, atol=1e-2, rtol=1e-2)
    assert fresh_compiler.stats()["fused_launches"] == 1


def test_rebel_compiler_backend_gets_the_graph_and_options(monkeypatch):
    """Where rebel-compiler is installed its own Dynamo backend compiles, with the same options."""
    calls = []

    def rebel_backend(gm, example_inputs, options=None):
        calls.append((gm, example_inputs, options))
        return gm.forward

    class Entry:
        name, value = "rbln", "rebel.torch_compile:backend"

        def load(self):
            return rebel_backend

    monkeypatch.setattr(backend_module.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(backend_module.importlib.metadata, "entry_points", lambda group: [Entry()])
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    compiled = backend_module.rbln_backend(gm, [torch.ones(2)], options={"tensor_parallel_size": 4, "x": 1})
    (called_gm, _, options), = calls
    assert called_gm is gm and options == {"tensor_parallel_size": 4, "x": 1}
    assert compiled(torch.ones(2)).tolist() == [2.0, 2.0]


def test_symbolic_shapes_are_specialised_per_call_shape(fresh_compiler):
    (x, y), (xr, yr) = inputs(SHAPE, SHAPE, seed=16)
    (x2, y2), (xr2, yr2) = inputs((3, 40), (3, 40), seed=17)
    compiled = torch.compile(add_gelu_mul, backend="rbln", dynamic=True)
    torch.testing.assert_close(compiled(xr, yr).cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(compiled(xr2, yr2).cpu(), add_gelu_mul(x2, y2), atol=ATOL, rtol=RTOL)
    compiled(xr, yr)
    stats = fresh_compiler.stats()
    assert stats["graphs_compiled"] == 2 and stats["eager_graphs"] == 0  # one static graph per shape
    assert stats["fused_launches"] == 3 and len(launches(stats)) == 1


def test_inputs_with_unplanned_strides_run_the_group_eagerly(fresh_compiler):
    """compile_graph used directly (no Dynamo guards): a call whose input strides differ from the plan's
    runs the group's ATen nodes on the registry instead of misreading memory."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_rbln.compiler.backend import compile_graph

    (x, y), (xr, yr) = inputs(SHAPE, SHAPE, seed=18)
    gm = make_fx(add_gelu_mul, tracing_mode="fake")(xr, yr)
    example = [node.meta["val"] for node in gm.graph.nodes if node.op == "placeholder"]
    graph = compile_graph(gm, example)
    transposed = x.t().contiguous().to("rbln").t()  # same shape, column-major strides
    assert transposed.stride() != xr.stride()
    out = graph(transposed, yr)
    torch.testing.assert_close(out.cpu(), add_gelu_mul(x, y), atol=ATOL, rtol=RTOL)
    stats = fresh_compiler.stats()
    assert stats["eager_group_calls"] == 1 and stats["fused_launches"] == 0


def test_a_pointwise_branch_merges_into_the_row_kernel(fresh_compiler):
    (x, w), (xr, wr) = inputs(SHAPE, SHAPE[-1:], seed=19)

    def f(x, w):  # gelu(x) starts its own group; the add joins the softmax's and takes gelu's along
        return torch.softmax(x * w, dim=-1) + F.gelu(x)

    out = torch.compile(f, backend="rbln")(xr, wr)
    torch.testing.assert_close(out.cpu(), f(x, w), atol=ATOL, rtol=RTOL)
    assert fresh_compiler.stats()["fused_launches"] == 1


def test_format_stats_tables_every_counter_and_kernel():
    from torch_rbln import compiler

    snapshot = {"graphs_compiled": 2, "fused_launches": 7, "kernels": {"fused_add_relu": 5, "fused_mul": 2}}
    text = compiler.format_stats(snapshot)
    lines = text.splitlines()
    assert any(line.split() == ["graphs_compiled", "2"] for line in lines), text
    assert any(line.split() == ["fused_launches", "7"] for line in lines), text
    kernel_rows = [line.split() for line in lines if line.startswith("fused_") and "launches" not in line]
    assert kernel_rows[-2:] == [["fused_add_relu", "5"], ["fused_mul", "2"]], text  # most launched first
    assert "fused kernel" in text and "\x1b[" not in text  # plain text: no terminal escapes


def test_fused_tanh_is_within_a_few_ulp_over_its_whole_range(fresh_compiler):
    """Fused kernels compute tanh with `tl.tanh` (the numba backend's `tanh32`: a polynomial below |x| =
    0.625, exp above): relative error <= 4 float32 half-ulps against a float64 reference, across both
    branch boundaries, tiny and huge arguments, with inf, NaN and -0.0 kept; the tanh-form GELU
    (x * sigmoid(2u)) within 1e-6 + 2 ulp of its float64 value."""
    magnitudes = torch.logspace(-30, 1.7, 4001)
    x = torch.cat([torch.linspace(-12, 12, 20001), magnitudes, -magnitudes,
                   torch.tensor([0.625, -0.625, 0.6249999, -0.6250001, float("inf"), -float("inf"),
                                 float("nan"), -0.0])])
    compiled = torch.compile(lambda v: (torch.tanh(v), F.gelu(v * 1.0, approximate="tanh")), backend="rbln")
    got, gelu = (t.cpu() for t in compiled(x.to("rbln")))
    reference = torch.tanh(x.double())
    finite = reference.isfinite() & (reference != 0)
    relative = ((got.double() - reference).abs() / reference.abs())[finite]
    assert relative.max().item() <= 4 * 2.0 ** -24, relative.max().item()
    assert got[-4:-2].tolist() == [1.0, -1.0] and got[-2].isnan() and torch.signbit(got[-1])
    expected = F.gelu(x.double(), approximate="tanh")
    near = expected.isfinite()
    torch.testing.assert_close(gelu.double()[near], expected[near], atol=1e-6, rtol=2.0 ** -22)
    assert fresh_compiler.stats()["fused_launches"] >= 1
