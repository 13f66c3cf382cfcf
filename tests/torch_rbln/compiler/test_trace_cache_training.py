"""The traced-graph cache for training graphs (`trace_cache.forward_entry`, `store_training`,
`autograd_runner`): a compiled forward + backward of the same Dynamo graph, compiled again, skips
AOTAutograd's joint trace and partition, and gives the traced compile's outputs and gradients bit for
bit; what AOTAutograd's autograd function does that the cached one must do too (non-differentiable
outputs, inputs without grad, gradients in another layout, no double backward); what is not cached.

Results are compared with PyTorch on the CPU, and cached against traced.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F

from tests.torch_rbln.compiler.test_trace_cache import forbid_aot_autograd, resign
from torch_rbln.compiler import cache, trace_cache

ATOL = RTOL = 1e-5


class Block(torch.nn.Module):
    """Linear, layer norm, GELU, a residual and a second linear: matmul, row-reduction and fused
    pointwise nodes in both graphs, and saved activations of each kind."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, 2 * width)
        self.norm = torch.nn.LayerNorm(2 * width)
        self.down = torch.nn.Linear(2 * width, width)

    def forward(self, x):
        return self.down(F.gelu(self.norm(self.up(x)))) + x


def _compile_again(fn):
    """A compile as in a 'new process': Dynamo reset, the in-memory graph cache emptied."""
    torch._dynamo.reset()
    cache.clear_memory()
    return torch.compile(fn, backend="rbln", dynamic=False)


def _train_step(model, x, steps: int = 2):
    """`steps` SGD steps of the compiled `model` on rbln: (the losses, the final gradients)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = _compile_again(model)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = compiled(x).square().mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().cpu())
    return losses, [p.grad.cpu() for p in model.parameters()]


def test_a_training_step_from_a_cached_trace_is_the_traced_one(fresh_compiler, traces, monkeypatch):
    root, keys = traces
    torch.manual_seed(0)
    reference = Block()
    x = torch.randn(4, 16)
    results = []
    for attempt in range(2):  # traced (and stored at the first backward), then from the cached entry
        if attempt:
            forbid_aot_autograd(monkeypatch)
        model = Block().to("rbln")
        model.load_state_dict({k: v.to("rbln") for k, v in reference.state_dict().items()})
        results.append(_train_step(model, x.to("rbln")))
    stats = fresh_compiler.stats()
    assert len(keys) == 1 and stats["trace_hits"] == 1 and stats["eager_graphs"] == 0
    entry = json.loads((root / f"{keys[0]}.json").read_text())["graph"]
    assert {"nodes", "backward", "autograd"} <= set(entry)
    (traced_losses, traced_grads), (cached_losses, cached_grads) = results
    assert all(torch.equal(a, b) for a, b in zip(traced_losses + traced_grads, cached_losses + cached_grads,
                                                   strict=True))
    want_losses, want_grads = [], []
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        loss = reference(x).square().mean()
        loss.backward()
        optimizer.step()
        want_losses.append(loss.detach())
    want_grads = [p.grad for p in reference.parameters()]
    torch.testing.assert_close(cached_losses, want_losses, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(cached_grads, want_grads, atol=ATOL, rtol=RTOL)


def _mixed(w, x, labels):
    """Outputs of each kind: a differentiable loss, a differentiable activation, integer indices and a
    detached tensor (non-differentiable); `x` needs no grad."""
    h = torch.tanh(x @ w)
    loss = F.cross_entropy(h, labels)
    return loss, h * 2, h.argmax(dim=-1), h.detach() + 1


def test_outputs_without_grad_and_inputs_without_grad_behave_as_traced(fresh_compiler, traces):
    generator = torch.Generator().manual_seed(1)
    w_cpu, x_cpu = torch.randn(8, 5, generator=generator), torch.randn(6, 8, generator=generator)
    labels = torch.tensor([0, 4, 2, 1, 3, 0])
    want = _mixed(w_cpu.requires_grad_(), x_cpu, labels)
    (want[0] + want[1].sum()).backward()
    for _ in range(2):
        w = w_cpu.detach().to("rbln").requires_grad_()
        x = x_cpu.to("rbln")
        got = _compile_again(_mixed)(w, x, labels.to("rbln"))
        assert [t.requires_grad for t in got] == [True, True, False, False]
        for g, e in zip(got, want, strict=True):
            torch.testing.assert_close(g.detach().cpu(), e.detach(), atol=ATOL, rtol=RTOL)
        (got[0] + got[1].sum()).backward()
        torch.testing.assert_close(w.grad.cpu(), w_cpu.grad, atol=ATOL, rtol=RTOL)
        assert x.grad is None
    assert fresh_compiler.stats()["trace_hits"] == 1


def _scaled(w, x):
    return torch.sin(x @ w) * 3


def test_a_gradient_in_another_layout_is_coerced_as_aotautograd_does(fresh_compiler, traces):
    """The backward graph was traced for a contiguous gradient; a transposed one is made contiguous
    first (AOTAutograd's `coerce_to_expected_memory_format`)."""
    generator = torch.Generator().manual_seed(2)
    w_cpu, x_cpu = torch.randn(8, 6, generator=generator), torch.randn(6, 8, generator=generator)
    gradient = torch.randn(6, 6, generator=generator).t()  # strides (1, 6)
    w_ref = w_cpu.clone().requires_grad_()
    _scaled(w_ref, x_cpu).backward(gradient)
    for _ in range(2):
        w = w_cpu.to("rbln").requires_grad_()
        _compile_again(_scaled)(w, x_cpu.to("rbln")).backward(gradient.to("rbln"))
        torch.testing.assert_close(w.grad.cpu(), w_ref.grad, atol=ATOL, rtol=RTOL)
    assert fresh_compiler.stats()["trace_hits"] == 1


def test_double_backward_raises_as_with_a_traced_compile(fresh_compiler, traces):
    for _ in range(2):
        w = torch.randn(8, 6).to("rbln").requires_grad_()
        y = _compile_again(_scaled)(w, torch.randn(6, 8).to("rbln")).sum()
        (grad,) = torch.autograd.grad(y, w, create_graph=True)
        with pytest.raises(RuntimeError, match="double backward|differentiate twice"):
            grad.sum().backward()
    assert fresh_compiler.stats()["trace_hits"] == 1


def test_a_forward_whose_backward_never_runs_stores_nothing(fresh_compiler, traces):
    """The entry needs the backward graph, which AOTAutograd compiles at the first backward."""
    root, keys = traces
    w = torch.randn(8, 6).to("rbln").requires_grad_()
    x = torch.randn(6, 8).to("rbln")
    _compile_again(_scaled)(w, x)
    assert keys == []
    _compile_again(_scaled)(w, x).sum().backward()  # traced again (nothing cached), now stored
    assert len(keys) == 1 and fresh_compiler.stats().get("trace_hits", 0) == 0


def test_a_training_graph_that_mutates_an_input_is_not_cached(fresh_compiler, traces):
    """Batch norm in training mode updates its running statistics: AOTAutograd's epilogue, not
    replayed for training graphs."""
    root, keys = traces
    torch.manual_seed(3)
    reference = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))
    x = torch.randn(5, 8)
    reference(x).sum().backward()
    for _ in range(2):
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)).to("rbln")
        model.load_state_dict({k: v.to("rbln") for k, v in reference.state_dict().items()})
        model[1].running_mean.zero_()
        model[1].running_var.fill_(1)
        _compile_again(model)(x.to("rbln")).sum().backward()
        torch.testing.assert_close(model[0].weight.grad.cpu(), reference[0].weight.grad, atol=1e-4, rtol=1e-4)
        # the running statistics of one training-mode call from the initial ones
        torch.testing.assert_close(model[1].running_mean.cpu(), 0.1 * x.mm(reference[0].weight.t()).add(
            reference[0].bias).mean(0).detach(), atol=1e-4, rtol=1e-4)
    assert keys == [] and fresh_compiler.stats()["traces_uncached"] >= 2


def _training_meta(**changes):
    """AOTAutograd's metadata of a plain two-input training trace with two outputs (the second
    non-differentiable), with `changes`."""
    from torch._functorch._aot_autograd.schemas import MemoryFormatMeta, OutputType, PlainTensorMeta

    def info(**fields):
        base = dict(mutates_data=False, mutates_metadata=False, mutates_storage_metadata=False,
                    mutation_inductor_storage_resize=False)
        return SimpleNamespace(**{**base, **fields})

    outputs = [SimpleNamespace(output_type=OutputType.non_alias, raw_type=torch.Tensor, requires_grad=True,
                               requires_grad_for_backward=True),
               SimpleNamespace(output_type=OutputType.non_alias, raw_type=torch.Tensor, requires_grad=False,
                               requires_grad_for_backward=False)]
    meta = dict(input_info=[info(), info()], output_info=outputs, num_intermediate_bases=0, tokens={},
                grad_enabled_mutation=None, num_backward_tokens=0, is_rng_op_functionalized=False,
                subclass_inp_meta=[0, 1], subclass_fw_graph_out_meta=[0, 1],
                subclass_tangent_meta=[PlainTensorMeta(0, MemoryFormatMeta(size=(4, 8), stride=(8, 1)))],
                num_symints_saved_for_bw=0, num_opaque_objects_saved_for_bw=0,
                num_tensors_saved_with_no_vc_check=0,
                indices_of_inputs_that_requires_grad_with_mutations_in_bw=[],
                num_outputs=2, num_forward_returns=2, unsafe_view_out_indices=[])
    return SimpleNamespace(**{**meta, **changes})


def test_which_training_metadata_is_cached():
    forward = fx.symbolic_trace(lambda a, b: (a + b, a * b, a - b))  # two outputs, one saved tensor
    assert trace_cache._training_autograd(_training_meta(), forward, 2) == {
        "outputs": 2, "saved": 1, "differentiable": [True, False], "tangents": [0],
        "layouts": [[None, [4, 8], [8, 1]]], "unsafe_views": []}
    from torch._functorch._aot_autograd.schemas import OutputType

    plain = _training_meta()

    def changed(item, **fields):
        return SimpleNamespace(**{**vars(item), **fields})

    refused = {
        "mutation": _training_meta(input_info=[changed(plain.input_info[0], mutates_data=True)] * 2),
        "aliased output": _training_meta(output_info=[
            changed(plain.output_info[0], output_type=OutputType.alias_of_input), plain.output_info[1]]),
        "saved sizes": _training_meta(num_symints_saved_for_bw=1),
        "no version check": _training_meta(num_tensors_saved_with_no_vc_check=1),
        "tokens": _training_meta(tokens={0: None}),
        "subclass": _training_meta(subclass_inp_meta=[0, SimpleNamespace()]),
        "gradients": _training_meta(subclass_tangent_meta=[]),
        "other inputs": _training_meta(input_info=plain.input_info[:1]),
        "returns": _training_meta(num_forward_returns=3),
    }
    for name, meta in refused.items():
        with pytest.raises(trace_cache.Uncacheable):
            trace_cache._training_autograd(meta, forward, 2)
            pytest.fail(f"{name}: cached")
    with pytest.raises(trace_cache.Uncacheable, match="no AOTAutograd metadata"):
        trace_cache._training_autograd(None, forward, 2)


def test_compiled_autograd_is_not_cached(monkeypatch):
    from torch._dynamo import compiled_autograd

    def add(a, b):
        return a * b

    gm = fx.symbolic_trace(add)
    w, x = torch.randn(4, 8, requires_grad=True), torch.randn(4, 8)
    assert trace_cache.key(gm, [w, x]) is not None
    monkeypatch.setattr(compiled_autograd, "compiled_autograd_enabled", True)
    assert trace_cache.key(gm, [w, x]) is None
    with torch.no_grad():  # not a training graph: compiled autograd has nothing to do with it
        assert trace_cache.key(gm, [w, x]) is not None


@pytest.mark.parametrize("damage", ["saved count", "tangent index", "layout", "backward node"])
def test_a_training_entry_that_does_not_connect_is_traced_again(fresh_compiler, traces, capsys, damage):
    root, keys = traces
    w_cpu, x_cpu = torch.randn(8, 6), torch.randn(6, 8)
    w = w_cpu.to("rbln").requires_grad_()
    _compile_again(_scaled)(w, x_cpu.to("rbln")).sum().backward()
    path = root / f"{keys[0]}.json"

    def edit(graph):
        if damage == "saved count":
            graph["autograd"]["saved"] += 1
        elif damage == "tangent index":
            graph["autograd"]["tangents"] = [3]
        elif damage == "layout":
            graph["autograd"]["layouts"] = [["no_such_format", [], []]]
        else:
            graph["backward"]["nodes"][0]["op"] = "call_module"

    resign(path, edit)
    capsys.readouterr()
    w_ref = w_cpu.clone().requires_grad_()
    _scaled(w_ref, x_cpu).sum().backward()
    w = w_cpu.to("rbln").requires_grad_()
    _compile_again(_scaled)(w, x_cpu.to("rbln")).sum().backward()
    torch.testing.assert_close(w.grad.cpu(), w_ref.grad, atol=ATOL, rtol=RTOL)
    assert f"[TORCH-RBLN][WARNING] traced graph cache entry {path} is corrupt" in capsys.readouterr().err
    assert fresh_compiler.stats().get("trace_hits", 0) == 0 and len(keys) == 2


def _dropped(w, x):
    return F.dropout(torch.relu(x @ w), p=0.5, training=True).sum(dim=-1)


def test_dropout_draws_the_same_masks_from_a_cached_trace(fresh_compiler, traces):
    """A training graph with dropout: same seed, same masks, traced or cached (the random ops are in the
    forward graph; the backward takes the mask as a saved tensor)."""
    w_cpu, x_cpu = torch.randn(8, 32), torch.randn(6, 8)
    results = []
    for _ in range(2):
        w = w_cpu.to("rbln").requires_grad_()
        torch.manual_seed(11)
        out = _compile_again(_dropped)(w, x_cpu.to("rbln"))
        out.sum().backward()
        results.append((out.detach().cpu(), w.grad.cpu()))
    assert fresh_compiler.stats()["trace_hits"] == 1
    (out_a, grad_a), (out_b, grad_b) = results
    assert torch.equal(out_a, out_b) and torch.equal(grad_a, grad_b)
    assert (grad_a == 0).any() and (grad_a != 0).any()  # some units dropped, some kept


def test_a_zoo_transformer_trains_identically_from_cached_traces(fresh_compiler, traces):
    """GPT-2 of the model zoo in training mode (dropout on): two SGD steps compiled from traced graphs,
    then again from the cached ones with the same seed: the same losses and weights, bit for bit."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
    from zoo import ZOO

    entry = ZOO["gpt2"]
    reference = entry.build()
    inputs = {name: value.to("rbln") for name, value in entry.inputs().items()}
    runs = []
    for _ in range(2):
        model = entry.build().to("rbln").train()
        model.load_state_dict({k: v.to("rbln") for k, v in reference.state_dict().items()})
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        compiled = _compile_again(model)
        torch.manual_seed(5)
        losses = []
        for _ in range(2):
            optimizer.zero_grad()
            loss = entry.output(compiled(**inputs)).float().square().mean()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach().cpu())
        runs.append((losses, [p.detach().cpu() for p in model.parameters()]))
    stats = fresh_compiler.stats()
    assert stats["trace_hits"] >= 1 and stats["eager_graphs"] == 0
    (losses_a, weights_a), (losses_b, weights_b) = runs
    assert all(torch.equal(a, b) for a, b in zip(losses_a + weights_a, losses_b + weights_b, strict=True))
    assert not all(torch.equal(a, b.cpu()) for a, b in zip(weights_a, reference.parameters(), strict=False))


def _random_training_case(seed: int):
    """A random differentiable function of 2-3 inputs (4 x 8, some requiring grad) built from matmul,
    pointwise, softmax, layer norm and row-sum ops, returning 1-3 of its values (one may be detached),
    and the weights of a loss over a random subset of its outputs (the others get no gradient)."""
    import random

    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    count = rng.randint(2, 3)
    inputs = [torch.randn(4, 8, generator=generator) for _ in range(count)]
    needs = [rng.random() < 0.7 for _ in range(count)]
    needs[rng.randrange(count)] = True
    steps = [(rng.randrange(7), rng.randrange(8), rng.randrange(8)) for _ in range(rng.randint(3, 6))]
    chosen = rng.sample(range(len(steps)), rng.randint(1, min(3, len(steps))))
    detached = rng.choice([None, *chosen]) if len(chosen) > 1 else None
    weights = [rng.choice([0.0, 0.5, 1.0, -2.0]) for _ in chosen]
    if all(w == 0.0 or i == detached for w, i in zip(weights, chosen, strict=True)):
        weights[0], detached = 1.0, None if chosen[0] == detached else detached

    def function(*xs):
        values = list(xs)
        for kind, i, j in steps:
            a, b = values[i % len(values)], values[j % len(values)]
            value = (a @ b.t() @ b, torch.tanh(a) * b, torch.sigmoid(a + b), F.softmax(a * 2, dim=-1),
                     F.layer_norm(a - b, (8,)), a * a.sum(dim=-1, keepdim=True),
                     torch.cat([a[:, :4], b[:, 4:]], 1))[kind]
            values.append(value)
        results = [values[count + i] for i in chosen]
        return tuple(r.detach() if i == detached else r for r, i in zip(results, chosen, strict=True))

    return function, inputs, needs, weights


# seeds 2 and 3 are `slow`: each graph compiles its own kernels (~5 s of a cold suite each)
@pytest.mark.parametrize("seed", [0, 1, *(pytest.param(seed, marks=pytest.mark.slow) for seed in (2, 3))])
def test_random_training_graphs_give_the_same_gradients_from_a_cached_trace(fresh_compiler, traces, seed):
    """Differential: random training graphs, traced then from their cached entry: the same outputs and
    gradients bit for bit, matching the CPU's."""
    function, cpu, needs, weights = _random_training_case(seed)

    def run(fn, tensors):
        leaves = [t.clone().requires_grad_(need) for t, need in zip(tensors, needs, strict=True)]
        outputs = fn(*leaves)
        loss = sum(w * o.sum() for w, o in zip(weights, outputs, strict=True) if o.requires_grad)
        if isinstance(loss, torch.Tensor):  # (0 when no output depends on an input that needs grad)
            loss.backward()
        return [o.detach().cpu() for o in outputs], [None if t.grad is None else t.grad.cpu() for t in leaves]

    want = run(function, cpu)
    device = [t.to("rbln") for t in cpu]
    traced = run(_compile_again(function), device)
    cached = run(_compile_again(function), device)
    assert fresh_compiler.stats()["trace_hits"] == 1
    for a, b, c in zip(traced[0] + traced[1], cached[0] + cached[1], want[0] + want[1], strict=True):
        assert (a is None) == (b is None) == (c is None)
        if a is not None:
            assert torch.equal(a, b)
            torch.testing.assert_close(b, c, atol=1e-4, rtol=1e-4)


def _chunks(w, x):
    """Two outputs that are views of one intermediate (a multi-output view): AOTAutograd returns them
    through `aten._unsafe_view` (`unsafe_view_alias`), as in Mistral's and Phi's training graphs."""
    a, b = torch.tanh(x @ w).chunk(2, dim=-1)
    return a, b


def test_outputs_that_are_views_of_one_intermediate_are_cached(fresh_compiler, traces):
    root, keys = traces
    generator = torch.Generator().manual_seed(4)
    w_cpu, x_cpu = torch.randn(8, 6, generator=generator), torch.randn(5, 8, generator=generator)
    w_ref = w_cpu.clone().requires_grad_()
    want = _chunks(w_ref, x_cpu)
    (want[0].sum() * 2 + want[1].square().sum()).backward()
    results = []
    for _ in range(2):
        w = w_cpu.to("rbln").requires_grad_()
        got = _compile_again(_chunks)(w, x_cpu.to("rbln"))
        assert all(t._base is None for t in got)  # (as AOTAutograd hands them out: no view of another)
        (got[0].sum() * 2 + got[1].square().sum()).backward()
        results.append([*(t.detach().cpu() for t in got), w.grad.cpu()])
    assert len(keys) == 1 and fresh_compiler.stats()["trace_hits"] == 1
    entry = json.loads((root / f"{keys[0]}.json").read_text())["graph"]
    assert entry["autograd"]["unsafe_views"] == [0, 1]
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))
    torch.testing.assert_close(results[1], [*(t.detach() for t in want), w_ref.grad], atol=ATOL, rtol=RTOL)
