"""The model zoo against the CPU: eager and ``torch.compile(backend="rbln")``, inference forward and one
training step (forward, backward, SGD), with explicit tolerances.

A training step compares the parameter updates (after - before) of every parameter, not only the loss:
a wrong gradient of one weight shows there. Dropout is switched off (p=0) so both sides compute the same
function in train mode (batch norm then uses batch statistics, as in training).

Each test prints what ran where: the share of op calls on device kernels (``registry.fallback_report()``;
for a compiled model, of the ops its graphs leave as aten calls, in a call after compilation), and when
compiled the compiler's counters and Dynamo's graph breaks. Graph breaks that the
model causes by itself (data-dependent control flow, as in Mixtral's expert loop) are measured with
Dynamo's ``"eager"`` backend on the CPU; the rbln backend must not add any.

Default run: the CNN's forward, eager and compiled (about 24 s cold, of which the CNN family's kernels
(convolution, batch norm, pooling) compile ~15 s). Everything else is marked slow: numba
compiles of the kernel specialisations dominate a cold run (GPT-2: eager forward 71 s, compiled train step
80 s cold).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from zoo import ZOO, ZooModel  # noqa: E402

from torch_rbln import registry  # noqa: E402

FAST = frozenset({"cnn"})
LR = 0.1
# Parameter updates (LR * gradient) agree to this fraction of the largest update of the same parameter.
UPDATE_TOL = 1e-3


def _params(names, fast: frozenset = frozenset()) -> list:
    return [pytest.param(name, marks=() if name in fast else pytest.mark.slow) for name in names]


def _no_dropout(model: torch.nn.Module) -> torch.nn.Module:
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        for name in ("dropout", "attention_dropout", "dropout_rate"):  # rates read by functional dropout
            if isinstance(getattr(module, name, None), float):
                setattr(module, name, 0.0)
    config = getattr(model, "config", None)
    for name in ("attention_dropout", "attn_pdrop", "dropout_rate", "attention_probs_dropout_prob"):
        if config is not None and hasattr(config, name):
            setattr(config, name, 0.0)
    return model


def _pair(entry: ZooModel, train: bool) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same model twice (same seed, same weights): one on the CPU, one on rbln."""
    cpu, device = entry.build(), entry.build()
    device.load_state_dict(cpu.state_dict())
    for model in (cpu, device):
        _no_dropout(model)
        model.train(train)
    return cpu, device.to("rbln")


def _to_rbln(inputs: dict) -> dict:
    return {key: value.to("rbln") for key, value in inputs.items()}


def _weights(output: torch.Tensor) -> torch.Tensor:
    """A fixed random weighting of the output: its weighted sum is the loss (every element gets its own
    gradient, unlike a plain sum)."""
    return torch.randn(output.shape, generator=torch.Generator().manual_seed(2))


def _device_share(report: dict) -> str:
    device = sum(entry["device"] for entry in report.values())
    cpu = sum(entry["cpu"] for entry in report.values())
    total = device + cpu
    falls = sorted(name.removeprefix("aten::") for name, entry in report.items() if entry["cpu"])
    share = 100.0 * device / total if total else 100.0
    return f"device kernels {device}/{total} op calls ({share:.0f}%), CPU fallbacks: {', '.join(falls)}"


def _graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


def _forward(entry: ZooModel, cpu: torch.nn.Module, device, inputs: dict) -> None:
    with torch.no_grad():
        expected = entry.output(cpu(**inputs))
        registry.reset_fallback_report()
        got = entry.output(device(**_to_rbln(inputs)))
    assert got.device.type == "rbln"
    torch.testing.assert_close(got.cpu(), expected, atol=entry.atol, rtol=entry.rtol)


def _train_step(entry: ZooModel, cpu: torch.nn.Module, device_model: torch.nn.Module, step_model,
                inputs: dict) -> None:
    """One SGD step on each side; the loss and every parameter's update must agree."""
    named_cpu = dict(cpu.named_parameters())
    named_device = dict(device_model.named_parameters())
    before = {name: param.detach().clone() for name, param in named_cpu.items()}
    losses = []
    for model, step, feed, on_device in ((cpu, cpu, inputs, False),
                                         (device_model, step_model, _to_rbln(inputs), True)):
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        optimizer.zero_grad()
        output = entry.output(step(**feed))
        weights = _weights(output)
        loss = (output * (weights.to("rbln") if on_device else weights)).sum()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().cpu())
    torch.testing.assert_close(losses[1], losses[0], atol=entry.atol * 100, rtol=entry.rtol)
    for name, param in named_cpu.items():
        expected = param.detach() - before[name]
        got = named_device[name].detach().cpu() - before[name]
        scale = max(expected.abs().max().item(), 1e-3)
        torch.testing.assert_close(got, expected, atol=UPDATE_TOL * scale, rtol=UPDATE_TOL,
                                   msg=lambda message, name=name: f"update of {name}: {message}")


@pytest.mark.parametrize("name", _params(ZOO, FAST))
def test_eager_forward(name):
    entry = ZOO[name]
    cpu, device = _pair(entry, train=False)
    _forward(entry, cpu, device, entry.inputs())
    print(f"\n{name} eager forward: {_device_share(registry.fallback_report())}")


@pytest.mark.parametrize("name", _params(ZOO))
def test_eager_train_step(name):
    entry = ZOO[name]
    cpu, device = _pair(entry, train=True)
    registry.reset_fallback_report()
    _train_step(entry, cpu, device, device, entry.inputs())
    print(f"\n{name} eager train step: {_device_share(registry.fallback_report())}")


def _own_breaks(entry: ZooModel, train: bool) -> int:
    """Graph breaks the model causes by itself: Dynamo's "eager" backend on the CPU."""
    import torch._dynamo

    torch._dynamo.reset()
    cpu = _no_dropout(entry.build()).train(train)
    start = _graph_breaks()
    compiled = torch.compile(cpu, backend="eager")
    with torch.set_grad_enabled(train):
        entry.output(compiled(**entry.inputs()))
    return _graph_breaks() - start


def _compiled_report(name: str, what: str, breaks: int, own: int) -> None:
    import torch_rbln.compiler as rbln_compiler

    stats = rbln_compiler.stats()
    shown = {key: value for key, value in stats.items() if key != "kernels"}
    print(f"\n{name} compiled {what}: graph breaks {breaks} (model's own {own}), compiler {shown}, "
          f"{_device_share(registry.fallback_report())}")


def _fresh_compile(entry: ZooModel, train: bool):
    """(graph breaks of the model itself, break counter now, CPU model, rbln model, its compiled form),
    with dynamo and the compiler's counters reset."""
    import torch._dynamo

    import torch_rbln.compiler as rbln_compiler

    own = _own_breaks(entry, train=train)
    torch._dynamo.reset()
    rbln_compiler.reset_stats()
    cpu, device = _pair(entry, train=train)
    return own, _graph_breaks(), cpu, device, torch.compile(device, backend="rbln")


@pytest.mark.parametrize("name", _params(ZOO, FAST))
def test_compiled_forward(name):
    entry = ZOO[name]
    own, start, cpu, device, compiled = _fresh_compile(entry, train=False)
    for _ in range(3):  # the third call runs each graph as its generated program (compiler/program.py)
        _forward(entry, cpu, compiled, entry.inputs())
    breaks = _graph_breaks() - start
    registry.reset_fallback_report()  # the share reported: a call after compilation
    with torch.no_grad():
        compiled(**_to_rbln(entry.inputs()))
    _compiled_report(name, "forward", breaks, own)
    assert breaks <= own, f"the rbln backend added graph breaks: {breaks} vs {own} with backend='eager'"


@pytest.mark.parametrize("name", _params(ZOO))
def test_compiled_train_step(name):
    entry = ZOO[name]
    own, start, cpu, device, compiled = _fresh_compile(entry, train=True)
    for _ in range(2):  # so that the compared step runs the graphs as generated programs (third call)
        output = entry.output(compiled(**_to_rbln(entry.inputs())))
        (output * _weights(output).to("rbln")).sum().backward()
        device.zero_grad()
    _train_step(entry, cpu, device, compiled, entry.inputs())
    breaks = _graph_breaks() - start
    registry.reset_fallback_report()  # the share reported: a forward and backward after compilation
    output = entry.output(compiled(**_to_rbln(entry.inputs())))
    (output * _weights(output).to("rbln")).sum().backward()
    _compiled_report(name, "train step", breaks, own)
    assert breaks <= own, f"the rbln backend added graph breaks: {breaks} vs {own} with backend='eager'"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_sdpa_attention(name):
    """attn_implementation="sdpa": scaled_dot_product_attention on rbln, eager and compiled."""
    import torch._dynamo

    entry = ZOO[name]
    cpu, device = _pair(entry, train=False)
    for model in (cpu, device):
        model.config._attn_implementation = "sdpa"
    inputs = entry.inputs()
    _forward(entry, cpu, device, inputs)
    print(f"\n{name} sdpa eager forward: {_device_share(registry.fallback_report())}")
    torch._dynamo.reset()
    _forward(entry, cpu, torch.compile(device, backend="rbln"), inputs)
