"""Hugging Face models (tiny random configs, nothing downloaded) under torch.compile(backend="rbln")
against the same model eagerly on the CPU."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")


@pytest.mark.slow
def test_llama_forward_compiled_matches_cpu():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (2, 16))
    with torch.no_grad():
        expected = model(ids).logits
        compiled = torch.compile(model.to("rbln"), backend="rbln")
        got = compiled(ids.to("rbln")).logits.cpu()
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
