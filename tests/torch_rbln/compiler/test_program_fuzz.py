"""Differential fuzzing of compiled graphs: random graphs of views (transpose, permute, step slices,
narrowing, reshapes, expands), matmuls, pointwise ops, reductions, softmax, layer norm and cats, compiled
with ``backend="rbln"`` and called five times with fresh values each time (the first two calls run the
fused graph, later ones the generated program, whose views are address arithmetic and whose kernels
launch by address), against PyTorch eager on the CPU.

Why: a program that computes a wrong address or a stale buffer gives a wrong answer silently, the worst
bug a compiler has; these graphs mix the layouts a real model's graph holds in ways no hand-written test
enumerates.
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

SIZES = (2, 3, 4, 5, 8)


def _op_choices(value: torch.Tensor) -> list[str]:
    """The ops that apply to `value` (a 3-d tensor) as it is."""
    b, m, n = value.shape
    ops = ["tanh", "sigmoid_mul", "exp_neg", "add_self_t" if m == n else "mul_const", "transpose",
           "permute", "sum_keep", "amax_keep", "softmax", "layer_norm", "matmul_self_t", "matmul_weight",
           "cat_self", "reshape_round_trip", "expand_row", "where_pos"]
    if n >= 2:
        ops += ["step_slice", "narrow"]
    if m >= 2:
        ops += ["middle_slice", "matmul_transposed"]
    return ops


def _apply(op: str, x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    b, m, n = x.shape
    if op == "tanh":
        return torch.tanh(x)
    if op == "sigmoid_mul":
        return torch.sigmoid(x) * x
    if op == "exp_neg":
        return torch.exp(-x.abs())
    if op == "add_self_t":
        return x + x.transpose(-1, -2)
    if op == "mul_const":
        return x * 1.5 - 0.25
    if op == "transpose":
        return x.transpose(-1, -2)
    if op == "permute":
        return x.permute(1, 0, 2)
    if op == "sum_keep":
        return x - x.sum(dim=-1, keepdim=True) / n
    if op == "amax_keep":
        return x - x.amax(dim=-1, keepdim=True)
    if op == "softmax":
        return F.softmax(x, dim=-1)
    if op == "layer_norm":
        return F.layer_norm(x, (n,))
    if op == "matmul_self_t":
        return x @ x.transpose(-1, -2) / n
    if op == "matmul_weight":
        return x @ weight
    if op == "cat_self":
        return torch.cat([x, torch.relu(x)], dim=-1)
    if op == "reshape_round_trip":
        return (x.reshape(b, m * n) * 2).reshape(b, m, n)
    if op == "expand_row":
        return x[:, :1, :].expand(b, m, n) + x
    if op == "where_pos":
        return torch.where(x > 0, x, x * 0.1)
    if op == "step_slice":
        return x[..., ::2]
    if op == "narrow":
        return x.narrow(-1, 1, n - 1)
    if op == "middle_slice":
        return x[:, 1:, :]
    if op == "matmul_transposed":  # a transposed operand read in place by the matmul
        return x.transpose(-1, -2) @ weight
    raise ValueError(op)


def _random_case(seed: int):
    """(function of (x, *weights), CPU inputs, its steps): 3-9 random steps, mostly chained, from one
    3-d input."""
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rng.choice(SIZES), rng.choice(SIZES), rng.choice(SIZES), generator=generator)
    steps: list[tuple[str, int, int | None]] = []  # (op, source value index, weight index)
    values, weights = [x], []
    for _ in range(rng.randint(3, 9)):
        source = len(values) - 1 if rng.random() < 0.6 else rng.randrange(len(values))  # mostly chains
        value = values[source]
        if value.numel() > 4096 or value.shape[-1] > 32:  # keep the graphs small
            source, value = 0, x
        op = rng.choice(_op_choices(value))
        weight_index = None
        if op in ("matmul_weight", "matmul_transposed"):
            rows = value.shape[-1] if op == "matmul_weight" else value.shape[-2]
            weights.append(torch.randn(rows, rng.choice(SIZES), generator=generator) * 0.5)
            weight_index = len(weights) - 1
        values.append(_apply(op, value, None if weight_index is None else weights[weight_index]))
        steps.append((op, source, weight_index))
    outputs = sorted(rng.sample(range(1, len(values)), rng.randint(1, min(3, len(values) - 1))))

    def function(x, *ws):
        computed = [x]
        for op, source, weight_index in steps:
            computed.append(_apply(op, computed[source], None if weight_index is None else ws[weight_index]))
        return tuple(computed[i] for i in outputs)

    return function, [x, *weights], steps


def check_case(compiler, seed: int) -> None:
    """Compile case `seed`, call it five times with fresh values, compare with the CPU each time."""
    function, cpu, steps = _random_case(seed)
    compiled = torch.compile(function, backend="rbln", dynamic=False)
    generator = torch.Generator().manual_seed(1000 + seed)
    for call in range(5):
        inputs = [torch.randn(t.shape, generator=generator) * (0.5 if i else 1.0) for i, t in enumerate(cpu)]
        want = function(*inputs)
        got = compiled(*(t.to("rbln") for t in inputs))
        where = f"seed {seed}, call {call}, {steps}"
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.stride() == w.stride(), where
            torch.testing.assert_close(g.cpu(), w, atol=1e-4, rtol=1e-4, msg=lambda m, at=where: f"{at}: {m}")
    stats = compiler.stats()
    assert stats["eager_graphs"] == 0 and stats.get("programs_generated", 0) >= 1, (where, stats)


@pytest.mark.parametrize("seed", range(12))
def test_random_compiled_graphs_match_the_cpu_on_every_call(fresh_compiler, seed):
    check_case(fresh_compiler, seed)


def check_training_case(compiler, seed: int) -> None:
    """Case `seed` with gradients: the input and weights require grad, the backward of a random
    weighted sum of the outputs runs through the compiled backward graph (its program from the third
    call); outputs and every gradient against the CPU's, five calls with fresh values."""
    function, cpu, steps = _random_case(seed)
    compiled = torch.compile(function, backend="rbln", dynamic=False)
    generator = torch.Generator().manual_seed(2000 + seed)
    for call in range(5):
        values = [torch.randn(t.shape, generator=generator) * (0.5 if i else 1.0) for i, t in enumerate(cpu)]
        leaves = [v.clone().requires_grad_() for v in values]
        device = [v.to("rbln").requires_grad_() for v in values]
        want, got = function(*leaves), compiled(*device)
        scales = [torch.randn(w.shape, generator=generator) for w in want]
        sum(((w * s).sum() for w, s in zip(want, scales, strict=True)), torch.zeros(())).backward()
        sum(((g * s.to("rbln")).sum() for g, s in zip(got, scales, strict=True)),
            torch.zeros((), device="rbln")).backward()
        where = f"seed {seed}, call {call}, {steps}"
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g.detach().cpu(), w.detach(), atol=1e-4, rtol=1e-4,
                                       msg=lambda m, at=where: f"{at}: {m}")
        for d, c in zip(device, leaves, strict=True):
            assert (d.grad is None) == (c.grad is None), where
            if c.grad is not None:
                torch.testing.assert_close(d.grad.cpu(), c.grad, atol=1e-3, rtol=1e-3,
                                           msg=lambda m, at=where: f"{at} (gradient): {m}")
    assert compiler.stats()["eager_graphs"] == 0, where


# seeds 4 and 5 are `slow`: each training graph compiles its own kernels (~5 s of a cold suite each)
@pytest.mark.parametrize("seed", [0, 1, 2, 3, *(pytest.param(s, marks=pytest.mark.slow) for s in (4, 5))])
def test_random_compiled_training_graphs_match_the_cpu_on_every_call(fresh_compiler, seed):
    check_training_case(fresh_compiler, seed)


SPECIALS = torch.tensor([float("inf"), -float("inf"), float("nan"), -0.0, 0.0, 1e-40])


def _with_specials(values: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """`values` with about one element in eight replaced by an infinity, NaN, a signed zero or a
    subnormal."""
    chosen = torch.rand(values.shape, generator=generator) < 0.125
    picks = SPECIALS[torch.randint(len(SPECIALS), values.shape, generator=generator)]
    return torch.where(chosen, picks, values)


@pytest.mark.parametrize("seed", range(12))
def test_random_compiled_graphs_match_the_cpu_on_special_values(fresh_compiler, seed):
    """The random graphs above (the same kernels) on inputs holding infinities, NaN, signed zeros and
    subnormals: a fused kernel has no NaN/Inf scan, so every expression must propagate them as torch
    does (softmax and layer norm of a row holding one, matmuls, reductions, where). NaN where torch
    gives NaN and the same infinities; finite values as the ordinary fuzz."""
    function, cpu, steps = _random_case(seed)
    compiled = torch.compile(function, backend="rbln", dynamic=False)
    generator = torch.Generator().manual_seed(3000 + seed)
    for call in range(3):
        inputs = [_with_specials(torch.randn(t.shape, generator=generator) * (0.5 if i else 1.0), generator)
                  for i, t in enumerate(cpu)]
        want = function(*inputs)
        got = compiled(*(t.to("rbln") for t in inputs))
        where = f"seed {seed}, call {call}, {steps}"
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g.cpu(), w, atol=1e-4, rtol=1e-4, equal_nan=True,
                                       msg=lambda m, at=where: f"{at}: {m}")
