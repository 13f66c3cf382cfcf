"""Text generation with Hugging Face's `generate` on rbln: greedy decoding and beam search give the CPU's
tokens exactly, and every op call between and inside the forwards (the stopping criteria's `isin` and
`max`, the growing `cat` of token ids, beam bookkeeping's `%`, `sum` of masks, `topk`, `gather`) runs
on a device kernel: the fallback report counts no CPU call.

Default run: greedy decoding of the demo's GPT-2 configuration (its kernels are the demo's, plus the
decoding step's: ~30 more specialisations, mostly of the integer kernels). Beam search (~35 more) and
Llama (grouped-query attention, RoPE, a KV cache) and sampling (top-k/top-p, multinomial) are marked
slow like the zoo's models.
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import torch_rbln  # noqa: F401, E402
from torch_rbln import registry  # noqa: E402


def _gpt2() -> torch.nn.Module:
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64,
                                     bos_token_id=0, eos_token_id=1, attn_implementation="sdpa")
    return transformers.GPT2LMHeadModel(config)


def _llama() -> torch.nn.Module:
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=128, bos_token_id=0, eos_token_id=1)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


def _generate_on_both(make, vocab: int, **options) -> None:
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = make().eval()
    ids = torch.randint(2, vocab, (2, 8), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    expected = model.generate(ids, attention_mask=mask, pad_token_id=0, do_sample=False, **options)
    model.to("rbln")
    registry.reset_fallback_report()
    actual = model.generate(ids.to("rbln"), attention_mask=mask.to("rbln"), pad_token_id=0, do_sample=False,
                            **options)
    report = registry.fallback_report()
    assert actual.device.type == "rbln"
    assert torch.equal(actual.cpu(), expected)
    on_cpu = {op: counts["reasons"] for op, counts in report.items() if counts["cpu"]}
    assert not on_cpu, f"ops on the CPU fallback: {on_cpu}"


def test_gpt2_greedy_decoding_matches_the_cpu_on_device_kernels():
    _generate_on_both(_gpt2, 128, max_new_tokens=6)


@pytest.mark.slow
def test_gpt2_beam_search_matches_the_cpu_on_device_kernels():
    _generate_on_both(_gpt2, 128, max_new_tokens=4, num_beams=2)


@pytest.mark.slow
def test_llama_greedy_decoding_matches_the_cpu_on_device_kernels():
    _generate_on_both(_llama, 256, max_new_tokens=8)


@pytest.mark.slow
def test_gpt2_sampling_with_top_k_and_top_p_runs_on_device_kernels_and_repeats_under_a_seed():
    """Sampling draws from the device's random stream (not the CPU's), so the tokens are checked for
    repeatability under torch.manual_seed, and the ops (top-k/top-p masks of -inf, softmax, sort,
    multinomial) for running on device kernels."""
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = _gpt2().eval().to("rbln")
    ids = torch.randint(2, 128, (2, 8), generator=torch.Generator().manual_seed(1)).to("rbln")
    options = dict(attention_mask=torch.ones_like(ids), pad_token_id=0, do_sample=True, top_k=20, top_p=0.9,
                   temperature=0.8, max_new_tokens=6)
    registry.reset_fallback_report()
    torch.manual_seed(5)
    first = model.generate(ids, **options).cpu()
    torch.manual_seed(5)
    again = model.generate(ids, **options).cpu()
    assert torch.equal(first, again) and first.shape == (2, 14)
    on_cpu = {op: counts["reasons"] for op, counts in registry.fallback_report().items() if counts["cpu"]}
    assert not on_cpu, f"ops on the CPU fallback: {on_cpu}"


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_gpt2_greedy_decoding_with_a_compiled_forward_matches_the_cpu(cache):
    """`model.forward = torch.compile(model.forward, backend="rbln")` under `generate`: the CPU's tokens.
    A dynamic KV cache grows by a token per step, so every step is a new shape (a graph each: the
    backend plans static shapes); a static cache keeps two graphs, prefill and decode."""
    import torch_rbln.compiler as rbln_compiler

    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = _gpt2().eval()
    ids = torch.randint(2, 128, (2, 8), generator=torch.Generator().manual_seed(1))
    options = dict(pad_token_id=0, do_sample=False, max_new_tokens=4,
                   **({"cache_implementation": "static"} if cache == "static" else {}))
    expected = model.generate(ids, attention_mask=torch.ones_like(ids), **options)
    model.to("rbln")
    torch._dynamo.reset()
    rbln_compiler.reset_stats()
    model.forward = torch.compile(model.forward, backend="rbln")
    for _ in range(2):  # the second call runs the graphs compiled by the first
        actual = model.generate(ids.to("rbln"), attention_mask=torch.ones_like(ids).to("rbln"), **options)
        assert torch.equal(actual.cpu(), expected)
    graphs = rbln_compiler.stats()["graphs_compiled"]
    assert graphs == (2 if cache == "static" else 5), graphs  # prefill, then one per new length
