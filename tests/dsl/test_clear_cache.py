"""`JITFunction.clear_cache()`: the kernel forgets its compiled specialisations and launch caches, and
the layers that keep its direct launches (registered with `on_clear_cache`) are told to forget theirs."""

from __future__ import annotations

import sys

import torch

from ..sample_kernels import double, double_kernel

jit_module = sys.modules["torch_rbln.dsl.jit"]  # `torch_rbln.dsl.jit` the attribute is the decorator


def _launch(x: torch.Tensor) -> torch.Tensor:
    return double(x, block=8)


def test_listeners_run_once_each_after_the_kernel_forgot_its_caches(monkeypatch, dsl_backend):
    monkeypatch.setattr(jit_module, "_clear_cache_listeners", [])
    x = torch.randn(5)
    _launch(x)
    direct = double_kernel.launcher(x, torch.empty(5), 5, BLOCK=8)  # the interpreter has none
    assert double_kernel.cache and (direct is not None or dsl_backend == "interpret")
    seen = []

    def listener(kernel) -> None:
        seen.append((kernel, len(kernel.cache), len(kernel._launches), len(kernel._fast)))

    jit_module.on_clear_cache(listener)
    jit_module.on_clear_cache(listener)  # a second registration keeps one
    double_kernel.clear_cache()
    assert seen == [(double_kernel, 0, 0, 0)]
    assert double_kernel.launcher(x, torch.empty(5), 5, BLOCK=8) is None  # no launch since the clear


def test_the_next_launch_after_a_clear_compiles_afresh_with_the_same_results():
    x = torch.randn(5)
    before = _launch(x)
    compiled = double_kernel.warmup(x, torch.empty(5), 5, BLOCK=8)
    double_kernel.clear_cache()
    after = _launch(x)
    assert double_kernel.warmup(x, torch.empty(5), 5, BLOCK=8) is not compiled
    torch.testing.assert_close(after, before, atol=0, rtol=0)
    torch.testing.assert_close(after, x * 2.0, atol=0, rtol=0)
