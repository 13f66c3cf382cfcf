"""The traced-graph cache (`torch_rbln.compiler.trace_cache`): a Dynamo graph compiled again (another
process, or after `torch._dynamo.reset()`) skips AOTAutograd's trace, and gives what the traced
compile gives; what the key covers; graphs it must not cache; entries it must not trust.

Each test has its own directory of traces and compares compiled results with PyTorch on the CPU.
"""

from __future__ import annotations

import hashlib
import json
import math

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F

from torch_rbln.compiler import backend, cache, trace_cache

ATOL = RTOL = 1e-5


def norm_mlp(x, w, b):
    """Nodes of several kinds: a fused pointwise chain, matmul, a row reduction with two outputs
    (layer norm's getitems), a constant made in the forward, keyword and float arguments."""
    h = F.layer_norm(x, (x.shape[-1],), eps=1e-6) @ w + b
    scale = torch.tensor([0.5, 2.0], device=x.device).sum()
    return F.gelu(h, approximate="tanh") * scale, torch.clamp(h, min=-math.inf, max=3.0).amax(dim=-1)


def _inputs(seed: int):
    generator = torch.Generator().manual_seed(seed)
    cpu = (torch.randn(4, 16, generator=generator), torch.randn(16, 8, generator=generator),
           torch.randn(8, generator=generator))
    return cpu, tuple(t.to("rbln") for t in cpu)


def _compile_again(fn, *args):
    """Compile in a 'new process': Dynamo reset, the in-memory graph cache emptied."""
    torch._dynamo.reset()
    cache.clear_memory()
    return torch.compile(fn, backend="rbln", dynamic=False)(*args)


def _assert_matches(got, want):
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), w, atol=ATOL, rtol=RTOL)


def forbid_aot_autograd(monkeypatch) -> None:
    """Make AOTAutograd's trace fail the test: a compile from a cached trace must not reach it."""
    import torch._functorch.aot_autograd as aot

    def no_trace(*args, **kwargs):
        raise AssertionError("AOTAutograd traced a graph whose trace is cached")

    monkeypatch.setattr(aot, "aot_module_simplified", no_trace)
    monkeypatch.setattr("torch._dynamo.backends.common.aot_module_simplified", no_trace)


def resign(path, edit) -> None:
    """Apply `edit` to a trace entry's graph and sign it again (a damaged entry whose checksum holds)."""
    data = json.loads(path.read_text())
    edit(data["graph"])
    data["digest"] = hashlib.sha256(json.dumps(data["graph"], sort_keys=True).encode()).hexdigest()
    path.write_text(json.dumps(data))


def test_a_second_compile_skips_the_trace_and_matches(fresh_compiler, traces, monkeypatch):
    root, keys = traces
    cpu, device = _inputs(0)
    _assert_matches(_compile_again(norm_mlp, *device), norm_mlp(*cpu))
    assert len(keys) == 1 and (root / f"{keys[0]}.json").exists()
    assert fresh_compiler.stats()["traces_stored"] == 1

    forbid_aot_autograd(monkeypatch)
    _assert_matches(_compile_again(norm_mlp, *device), norm_mlp(*cpu))
    stats = fresh_compiler.stats()
    assert stats["trace_hits"] == 1 and stats["eager_graphs"] == 0 and stats["graphs_compiled"] == 2
    # a cached trace's program runs from the third call like a traced one, and with other values
    cpu, device = _inputs(1)
    compiled = torch.compile(norm_mlp, backend="rbln", dynamic=False)
    for _ in range(3):
        _assert_matches(compiled(*device), norm_mlp(*cpu))


def test_under_grad_mode_an_inference_graph_is_cached_and_its_outputs_need_no_grad(fresh_compiler, traces):
    cpu, device = _inputs(2)
    _compile_again(norm_mlp, *device)
    out = _compile_again(norm_mlp, *device)
    assert fresh_compiler.stats()["trace_hits"] == 1
    assert not any(t.requires_grad for t in out)
    _assert_matches(out, norm_mlp(*cpu))


def test_the_decoded_graph_is_the_traced_graph(fresh_compiler, traces, monkeypatch):
    """encode/decode keep node names, targets, arguments (floats exactly, inf included), recorded
    sizes, strides and offsets, and constants' values."""
    seen: list[tuple[str, list]] = []
    compile_graph = backend.compile_graph

    def spy(gm, inputs, *args):
        seen.append((gm.code, [(tuple(node.meta["val"].shape), node.meta["val"].stride(),
                                node.meta["val"].storage_offset(), node.meta["val"].dtype)
                               for node in gm.graph.nodes if isinstance(node.meta.get("val"), torch.Tensor)]))
        return compile_graph(gm, inputs, *args)

    monkeypatch.setattr("torch_rbln.compiler.backend.compile_graph", spy)
    cpu, device = _inputs(3)
    _compile_again(norm_mlp, *device)
    _assert_matches(_compile_again(norm_mlp, *device), norm_mlp(*cpu))
    assert len(seen) == 2 and fresh_compiler.stats()["trace_hits"] == 1
    (traced_code, traced_values), (cached_code, cached_values) = seen
    assert "inf" in traced_code and "_tensor_constant0" in traced_code
    assert cached_code == traced_code and cached_values == traced_values


def test_encoding_round_trips_values_exactly():
    graph = fx.Graph()
    x = graph.placeholder("x")
    parts = graph.call_function(torch.ops.aten.split.Tensor, (x, 2), {"dim": -1})
    first = graph.call_function(__import__("operator").getitem, (parts, 0))
    filled = graph.call_function(torch.ops.aten.full.default, ([2], -0.0),
                                 {"dtype": torch.bfloat16, "device": torch.device("cpu"),
                                  "layout": torch.strided, "pin_memory": False})
    clamp = graph.call_function(torch.ops.aten.clamp.default, (first, float("-inf"), 1 / 3))
    graph.output((clamp, filled))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    example = torch.empty(3, 4).t()[1:]  # an offset and strides that are not contiguous
    x.meta["val"] = example
    data = json.loads(json.dumps(trace_cache.encode(gm)))
    decoded, inputs, mutated = trace_cache.decode(data)
    assert mutated == []
    assert decoded.code == gm.code
    (value,) = inputs
    assert (value.shape, value.stride(), value.storage_offset()) == ((3, 3), (1, 4), 1)
    nodes = {node.name: node for node in decoded.graph.nodes}
    clamp_args = nodes[clamp.name].args
    assert clamp_args[1] == float("-inf") and clamp_args[2] == 1 / 3
    fill = nodes[filled.name]
    assert math.copysign(1.0, fill.args[1]) == -1.0 and fill.kwargs["dtype"] is torch.bfloat16


def _key(fn, *inputs):
    return trace_cache.key(fx.symbolic_trace(fn), list(inputs))


def test_the_key_covers_inputs_modes_versions_and_environment(monkeypatch):
    x, y = torch.randn(4, 8), torch.randn(4, 8)

    def add_relu(a, b):
        return torch.relu(a + b)

    key = _key(add_relu, x, y)
    assert key is not None and key == _key(add_relu, torch.zeros(4, 8), torch.ones(4, 8))
    others = {
        "shape": _key(add_relu, torch.randn(4, 9), torch.randn(4, 9)),
        "strides": _key(add_relu, torch.randn(8, 4).t(), y),
        "offset": _key(add_relu, torch.randn(5, 8)[1:], y),
        "dtype": _key(add_relu, x.double(), y.double()),
        "device": _key(add_relu, x.to("rbln"), y.to("rbln")),
        "graph": _key(lambda a, b: torch.relu(a - b), x, y),
    }
    with torch.no_grad():
        others["requires_grad under no_grad"] = _key(add_relu, torch.randn(4, 8, requires_grad=True), y)
        others["no_grad"] = _key(add_relu, x, y)
    with torch.inference_mode():
        others["inference_mode"] = _key(add_relu, torch.randn(4, 8), torch.randn(4, 8))
    monkeypatch.setenv("TORCH_RBLN_DEPLOY", "1")
    others["environment"] = _key(add_relu, x, y)
    monkeypatch.delenv("TORCH_RBLN_DEPLOY")
    monkeypatch.setattr(torch, "__version__", torch.__version__ + "+other")
    others["torch"] = _key(add_relu, x, y)
    monkeypatch.undo()
    monkeypatch.setattr(trace_cache, "_sources_digest", lambda: "other sources")
    others["sources"] = _key(add_relu, x, y)
    monkeypatch.undo()
    monkeypatch.setattr(trace_cache, "ENTRY_FORMAT", trace_cache.ENTRY_FORMAT + 1)
    others["entry format"] = _key(add_relu, x, y)
    monkeypatch.undo()
    flipped = not torch._functorch.config.view_replay_for_aliased_outputs
    with torch._functorch.config.patch(view_replay_for_aliased_outputs=flipped):  # (not monkeypatch:
        others["functorch config"] = _key(add_relu, x, y)  # undoing it deletes a config entry)
    assert None not in others.values()
    assert key not in others.values() and len(set(others.values())) == len(others), others


def test_what_is_not_cached(monkeypatch):
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    assert _key(lambda a, b: a + b, x, x[1:]) is None  # inputs sharing memory
    assert _key(lambda a, b: a + b, x, y.to_sparse()) is None  # not a strided tensor

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(8))

        def forward(self, a):
            return a * self.weight

    assert trace_cache.key(fx.symbolic_trace(Scaled()), [x]) is None  # a graph holding parameters

    def user_function(a):
        return a * 2

    gm = fx.symbolic_trace(lambda a: a + 1)
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    node.target = user_function
    gm.recompile()
    assert trace_cache.key(gm, [x]) is None  # a call no version pins
    with torch._functorch.config.patch(enable_autograd_cache=False):
        assert _key(lambda a, b: a + b, x, y) is None  # torch's switches
    with torch.compiler.config.patch(force_disable_caches=True):
        assert _key(lambda a, b: a + b, x, y) is None


def test_a_trace_whose_output_is_a_view_of_an_input_is_not_stored(fresh_compiler, traces):
    root, keys = traces

    def view_of_input(a, b):
        return a.t(), a + b

    cpu = [torch.randn(4, 8), torch.randn(4, 8)]
    for _ in range(2):
        device = [t.to("rbln") for t in cpu]
        _assert_matches(_compile_again(view_of_input, *device), view_of_input(*cpu))
    assert keys == [] and fresh_compiler.stats().get("trace_hits", 0) == 0
    assert fresh_compiler.stats()["traces_uncached"] >= 2


def _meta(**changes):
    """AOTAutograd's metadata of a plain two-input trace that mutates input 0's data, with `changes`."""
    from types import SimpleNamespace

    from torch._functorch._aot_autograd.schemas import OutputType

    def info(**fields):
        base = dict(mutates_data=False, mutates_metadata=False, mutates_storage_metadata=False,
                    mutation_inductor_storage_resize=False)
        return SimpleNamespace(**{**base, **fields})

    meta = dict(input_info=[info(mutates_data=True), info()], mutated_inp_runtime_indices=[0],
                keep_input_mutations=False, output_info=[SimpleNamespace(output_type=OutputType.non_alias)],
                num_intermediate_bases=0, tokens={}, grad_enabled_mutation=None,
                is_rng_op_functionalized=False, subclass_inp_meta=[0, 1])
    return SimpleNamespace(**{**meta, **changes})


def test_which_aotautograd_metadata_is_replayed():
    """Data mutations returned as outputs are replayed (copied back); metadata, storage and in-graph
    mutations, aliased outputs, tokens and grad-mode changes are not cached."""
    graph = fx.symbolic_trace(lambda a, b: (a + b, a * b))
    assert trace_cache._plainness(_meta(), graph, 2) == (None, [0])
    from types import SimpleNamespace

    from torch._functorch._aot_autograd.schemas import OutputType

    refused = {
        "metadata": _meta(input_info=[SimpleNamespace(mutates_data=False, mutates_metadata=True,
                                                      mutates_storage_metadata=False,
                                                      mutation_inductor_storage_resize=False)] * 2),
        "in graph": _meta(keep_input_mutations=True),
        "aliased output": _meta(output_info=[SimpleNamespace(output_type=OutputType.alias_of_input)]),
        "tokens": _meta(tokens={0: None}),
        "grad mode": _meta(grad_enabled_mutation=False),
        "other inputs": _meta(mutated_inp_runtime_indices=[0], input_info=_meta().input_info[:1]),
    }
    for name, meta in refused.items():
        reason, mutated = trace_cache._plainness(meta, graph, 2)
        assert reason is not None and mutated == [], name
    assert trace_cache._plainness(None, graph, 2)[0] == "no AOTAutograd metadata"


def _mutates_two(cache, rows, new):
    """A static key/value cache's update: rows of `cache` written in place, and another input grown;
    the graph returns their new values first, AOTAutograd's epilogue copies them back."""
    cache.index_copy_(0, rows, new)
    new.mul_(2)
    return cache.sum(dim=0), new + 1


def test_a_trace_that_mutates_inputs_is_cached_and_writes_them_back(fresh_compiler, traces):
    root, keys = traces
    generator = torch.Generator().manual_seed(7)
    cpu = [torch.zeros(6, 8), torch.tensor([4, 1]), torch.randn(2, 8, generator=generator)]
    results = []
    for _ in range(2):  # traced, then from the cached entry
        device = [t.to("rbln") for t in cpu]
        want_inputs = [t.clone() for t in cpu]
        results.append(_compile_again(_mutates_two, *device))
        want = _mutates_two(*want_inputs)
        _assert_matches(results[-1], want)
        _assert_matches(device, want_inputs)  # the mutations reached the caller's tensors
    stats = fresh_compiler.stats()
    assert len(keys) == 1 and stats["trace_hits"] == 1
    assert json.loads((root / f"{keys[0]}.json").read_text())["graph"]["mutated"] == [0, 2]
    assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(*results, strict=True))
    with torch.no_grad():  # under no_grad, with an input that requires grad: traced, then cached
        for _ in range(2):
            device = [t.to("rbln") for t in cpu]
            device[0].requires_grad_()
            want_inputs = [t.clone() for t in cpu]
            _assert_matches(_compile_again(_mutates_two, *device), _mutates_two(*want_inputs))
            _assert_matches([device[0].detach(), *device[1:]], want_inputs)
    assert fresh_compiler.stats()["trace_hits"] == 2


def _stored_entry(root, keys):
    assert len(keys) == 1
    return root / f"{keys[0]}.json"


def _rename_op(graph):
    node = next(n for n in graph["nodes"] if n["target"].startswith("op:aten"))
    node["target"] = "op:aten.no_such_op_in_this_torch.default"


def _bad_node_kind(graph):
    graph["nodes"][0]["op"] = "call_module"


def _dangling_argument(graph):
    node = next(n for n in graph["nodes"] if n["op"] == "call_function")
    node["args"] = {"t": [{"n": "a_node_of_another_graph"}]}


@pytest.mark.parametrize("damage", ["not json", "nested too deeply", "checksum", "bad node kind",
                                    "dangling argument", "unknown op"])
def test_an_entry_that_cannot_be_trusted_is_traced_again(fresh_compiler, traces, capsys, damage):
    root, keys = traces
    cpu, device = _inputs(4)
    _compile_again(norm_mlp, *device)
    path = _stored_entry(root, keys)
    if damage == "not json":
        path.write_text("{not json")
    elif damage == "nested too deeply":
        path.write_text('{"graph": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif damage == "checksum":
        data = json.loads(path.read_text())
        data["graph"]["nodes"][1]["name"] = "renamed"
        path.write_text(json.dumps(data))
    else:
        resign(path, {"bad node kind": _bad_node_kind, "dangling argument": _dangling_argument,
                       "unknown op": _rename_op}[damage])
    capsys.readouterr()
    _assert_matches(_compile_again(norm_mlp, *device), norm_mlp(*cpu))
    err = capsys.readouterr().err
    stats = fresh_compiler.stats()
    assert stats.get("trace_hits", 0) == 0 and stats["eager_graphs"] == 0
    if damage == "unknown op":
        assert "WARNING" not in err  # another torch's entry: a miss (logged at INFO)
    else:
        assert f"[TORCH-RBLN][WARNING] traced graph cache entry {path} is corrupt" in err
    # the entry was traced and written again: the next compile hits it
    assert len(keys) == 2
    _assert_matches(_compile_again(norm_mlp, *device), norm_mlp(*cpu))
    assert fresh_compiler.stats()["trace_hits"] == 1


@torch.library.custom_op("tracecachescript::double", mutates_args=())
def _script_double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@torch.library.custom_op("numba::tracecache_test_double", mutates_args=())
def _distributed_double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_a_custom_op_is_cached_when_an_installed_distribution_owns_its_namespace(monkeypatch):
    """A script's own op cannot be pinned (not cached); an op in the namespace of an installed
    distribution (here numba's, as transformers' ops are in Mixtral) is pinned by its version."""
    x = torch.randn(4, 8)
    assert _key(lambda a: torch.ops.tracecachescript.double(a) + 1, x) is None
    key = _key(lambda a: torch.ops.numba.tracecache_test_double(a) + 1, x)
    assert key is not None
    monkeypatch.setattr(trace_cache, "_distribution_version", lambda namespace: "0.0.0-other")
    assert _key(lambda a: torch.ops.numba.tracecache_test_double(a) + 1, x) not in (None, key)


def test_a_cached_trace_compiles_with_this_compiles_options(fresh_compiler, traces):
    """The trace does not depend on `options=`; the graph compiled from a cached trace does: a trace
    stored by a tp=1 compile serves a tensor_parallel_size=2 compile, which launches on 2 NPUs."""
    cpu, device = _inputs(5)
    _compile_again(norm_mlp, *device)
    torch._dynamo.reset()
    cache.clear_memory()
    fresh_compiler.reset_stats()
    compiled = torch.compile(norm_mlp, backend="rbln", dynamic=False, options={"tensor_parallel_size": 2})
    _assert_matches(compiled(*device), norm_mlp(*cpu))
    stats = fresh_compiler.stats()
    assert stats["trace_hits"] == 1 and stats.get("fused_launches_tp2", 0) >= 1
    assert stats.get("fused_launches_tp1", 0) == 0


def test_a_cpu_graph_is_cached_too(fresh_compiler, traces):
    """backend="rbln" on CPU tensors (fused kernels on host memory): cached and matching."""
    cpu, _ = _inputs(6)
    _compile_again(norm_mlp, *cpu)
    _assert_matches(_compile_again(norm_mlp, *cpu), norm_mlp(*cpu))
    assert fresh_compiler.stats()["trace_hits"] == 1


@pytest.mark.parametrize("seed", range(3))
def test_random_graphs_give_the_same_result_from_a_cached_trace(fresh_compiler, traces, seed):
    """Differential: random cat/pointwise/reduction graphs (test_fused_cat's layouts, whose kernels the
    suite compiles anyway) compiled with a trace, then from its cached entry, give bit-identical results
    that match the CPU; so does a call whose first input is a transposed view (other strides: its own
    key and trace)."""
    from tests.torch_rbln.compiler.test_fused_cat import _random_cat_case

    function, cpu = _random_cat_case(seed)
    device = [t.to("rbln") for t in cpu]
    traced = _compile_again(function, *device)
    cached = _compile_again(function, *device)
    assert fresh_compiler.stats()["trace_hits"] == 1
    assert torch.equal(traced.cpu(), cached.cpu())
    torch.testing.assert_close(cached.cpu(), function(*cpu), atol=1e-4, rtol=1e-4)
    first = cpu[0]
    if first.dim() >= 2:
        strided = first.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values, other strides
        again = _compile_again(function, strided.to("rbln"), *device[1:])
        torch.testing.assert_close(again.cpu(), function(*cpu), atol=1e-4, rtol=1e-4)
        assert fresh_compiler.stats()["traces_stored"] == 2 and fresh_compiler.stats()["trace_hits"] == 1


def test_a_cached_trace_is_compiled_without_generating_its_code(fresh_compiler, traces, monkeypatch):
    """The graph cache keys a traced graph by its trace key and phase (`cache.graph_key`'s identity),
    on the traced compile as on a hit: the decoded graph's Python code is not generated to key it."""
    cpu, device = _inputs(8)
    _compile_again(norm_mlp, *device)
    seen = []
    graph_key = cache.graph_key

    def spy(gm, inputs, tp, identity=None):
        seen.append(identity)
        return graph_key(gm, inputs, tp, identity)

    monkeypatch.setattr(cache, "graph_key", spy)
    fresh_compiler.reset_stats()
    _assert_matches(_compile_again(norm_mlp, *device), norm_mlp(*cpu))
    # (the traced compile keyed it so too: its kernels come from the graph cache)
    assert fresh_compiler.stats()["trace_hits"] == 1 and fresh_compiler.stats()["disk_hits"] == 1
    assert len(seen) == 1 and seen[0].endswith("/inference")
