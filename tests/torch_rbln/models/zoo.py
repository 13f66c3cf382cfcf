"""The model zoo: tiny random configurations of the architectures users bring to `rbln` (nothing is
downloaded), each with an input maker and the tolerance its outputs are compared to CPU with.

Every entry builds the same weights for a seed, so a model built twice (once for the CPU reference,
once for rbln) is the same model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[], dict]  # keyword arguments of forward, on the CPU
    output: Callable[[object], torch.Tensor]  # the tensor compared (and summed for backward)
    atol: float = 1e-4
    rtol: float = 1e-4


def _ids(vocab: int = 128, batch: int = 2, length: int = 16) -> dict:
    generator = torch.Generator().manual_seed(1)
    return {"input_ids": torch.randint(0, vocab, (batch, length), generator=generator)}


def _logits(output) -> torch.Tensor:
    return output.logits


def _hidden(output) -> torch.Tensor:
    return output.last_hidden_state


def _causal_lm(config_name: str, **config) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import transformers

        torch.manual_seed(0)
        cfg = getattr(transformers, config_name)(**config)
        return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")

    return build


_DECODER = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": 64}


def _bert() -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64)
    return transformers.BertModel(config, add_pooling_layer=False)


def _t5() -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                   num_decoder_layers=2, num_heads=4)
    return transformers.T5ForConditionalGeneration(config)


def _t5_inputs() -> dict:
    generator = torch.Generator().manual_seed(1)
    return {"input_ids": torch.randint(0, 128, (2, 12), generator=generator),
            "decoder_input_ids": torch.randint(0, 128, (2, 8), generator=generator)}


def _vit() -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    config = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64,
                                    intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    return transformers.ViTModel(config, add_pooling_layer=False)


def _pixels() -> dict:
    generator = torch.Generator().manual_seed(1)
    return {"pixel_values": torch.randn(2, 3, 32, 32, generator=generator)}


class SmallCNN(torch.nn.Module):
    """Convolutions, batch norm, pooling and a linear head: what a vision user's first model has."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
        )
        self.head = torch.nn.Linear(16, 10)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(pixel_values).flatten(1))


def _cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    return SmallCNN()


ZOO: dict[str, ZooModel] = {
    model.name: model
    for model in [
        ZooModel("gpt2", _causal_lm("GPT2Config", vocab_size=128, n_embd=64, n_layer=2, n_head=4,
                                     n_positions=64), _ids, _logits),
        ZooModel("llama", _causal_lm("LlamaConfig", num_key_value_heads=2, **_DECODER), _ids, _logits),
        ZooModel("mistral", _causal_lm("MistralConfig", num_key_value_heads=2, sliding_window=8, **_DECODER),
                 _ids, _logits),
        ZooModel("qwen2", _causal_lm("Qwen2Config", num_key_value_heads=2, **_DECODER), _ids, _logits),
        ZooModel("phi", _causal_lm("PhiConfig", **_DECODER), _ids, _logits),
        ZooModel("gemma", _causal_lm("GemmaConfig", num_key_value_heads=2, head_dim=16, **_DECODER), _ids,
                 _logits),
        ZooModel("mixtral", _causal_lm("MixtralConfig", num_key_value_heads=2, num_local_experts=4,
                                        num_experts_per_tok=2, **_DECODER), _ids, _logits),
        ZooModel("bert", _bert, _ids, _hidden),
        ZooModel("t5", _t5, _t5_inputs, _logits),
        ZooModel("vit", _vit, _pixels, _hidden),
        ZooModel("cnn", _cnn, _pixels, lambda output: output),
    ]
}
