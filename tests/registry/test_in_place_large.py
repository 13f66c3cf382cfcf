"""In-place ops on tensors of at least SAME_MEMORY_MIN elements run their kernels' same-memory variant
(`dsl/backends/numba_backend/codegen.py`: the output's array bound to self's, so the loop vectorises):
each gives the out-of-place op's bits, on its first call and from its kept plan."""

from __future__ import annotations

import gc

import pytest
import torch
from torch_rbln.dsl.backends.numba_backend import codegen, executable

import torch_rbln  # noqa: F401

N = codegen.SAME_MEMORY_MIN + 5

CASES = {
    "add_": (lambda x, y: x.add_(y), lambda x, y: x + y),
    "div_": (lambda x, y: x.div_(y), lambda x, y: x / y),
    "sqrt_": (lambda x, y: x.abs_().sqrt_(), lambda x, y: x.abs().sqrt()),
    "addcmul_": (lambda x, y: x.addcmul_(y, y, value=0.5), lambda x, y: torch.addcmul(x, y, y, value=0.5)),
    "addcdiv_": (lambda x, y: x.addcdiv_(y, y + 2, value=-1),
                 lambda x, y: torch.addcdiv(x, y, y + 2, value=-1)),
}


def _forget_same_memory_variants(monkeypatch) -> None:
    """An earlier test in this process (a large in-place op of an optimizer, a gradient accumulation) may
    have made a kernel's same-memory variant already; launches then take it without asking for it.
    Forget every variant made so far (for this test only), so the first large in-place call asks."""
    for made in gc.get_objects():
        if type(made) is executable.Executable and made._same_memory_variant is not None:
            monkeypatch.setattr(made, "_same_memory_variant", None)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_large_in_place_op_gives_the_out_of_place_bits(name, monkeypatch):
    _forget_same_memory_variants(monkeypatch)
    variants = []
    original = executable.Executable.same_memory_variant
    monkeypatch.setattr(executable.Executable, "same_memory_variant",
                        lambda self: variants.append(self) or original(self))
    in_place, functional = CASES[name]
    generator = torch.Generator().manual_seed(11)
    for _ in range(3):  # the first call, then the kept plan's direct launch
        x, y = (torch.rand(N, generator=generator) + 0.25 for _ in range(2))
        expected = functional(x.to("rbln"), y.to("rbln")).cpu()
        target = x.to("rbln")
        pointer = target.data_ptr()
        assert in_place(target, y.to("rbln")) is target and target.data_ptr() == pointer
        assert torch.equal(target.cpu(), expected)
    assert variants  # the launch ran the same-memory variant at least once through the general path
