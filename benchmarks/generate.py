"""Text generation with Hugging Face's `generate`, eager: rbln time / CPU time for the same tokens.

Run: python benchmarks/generate.py [--tokens 32] [--repeats 7] [--threads 1] [--batch 2] [--fresh-plans]

Why: a decoding step is ~70 small op calls (one query row of attention over a cache that grows every
step, the logits processors' masks, the stopping criteria's `isin`, the id bookkeeping), so what it
costs is per-call overhead and the kernels' handling of one-row shapes, which the 4-element and 2^24
rows of `ops.py` do not show. Models: the README demo's GPT-2 configuration and a Llama-style one
(grouped-query attention, RoPE), random weights, nothing downloaded. Cases: greedy decoding, and greedy
with `min_new_tokens` (its processor sets the end-of-sequence logit to -inf every step, which the argmax
then reads). Each case checks that rbln gives the CPU's tokens, then times whole `generate` calls, rbln
and CPU alternating, and prints the medians and their ratio. The host is noisy: read the ratios.
Repeated calls of one prompt length meet the sequence lengths of the first call, whose plans (one per
call signature) the registry keeps; `--fresh-plans` forgets them before each rbln call, as a request
with lengths no earlier call had meets them.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch

import torch_rbln  # noqa: F401  (the rbln device)
from torch_rbln import registry


def _models() -> dict[str, Callable[[], torch.nn.Module]]:
    import transformers

    transformers.utils.logging.set_verbosity_error()
    gpt2 = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=128,
                                   bos_token_id=0, eos_token_id=1)
    llama = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                     max_position_embeddings=128, bos_token_id=0, eos_token_id=1)
    return {
        "gpt2": lambda: transformers.GPT2LMHeadModel._from_config(gpt2, attn_implementation="sdpa"),
        "llama": lambda: transformers.LlamaForCausalLM._from_config(llama, attn_implementation="sdpa"),
    }


def _generate(model: torch.nn.Module, ids: torch.Tensor, tokens: int, options: dict) -> torch.Tensor:
    device = next(model.parameters()).device
    return model.generate(ids.to(device), attention_mask=torch.ones_like(ids).to(device), pad_token_id=0,
                          do_sample=False, max_new_tokens=tokens, **options)


def _milliseconds(model: torch.nn.Module, ids: torch.Tensor, tokens: int, options: dict) -> float:
    start = time.perf_counter()
    _generate(model, ids, tokens, options)
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--fresh-plans", action="store_true",
                        help="forget the registry's per-signature plans before each rbln call, as a "
                             "request whose sequence lengths no earlier call had meets them")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{'model':7s} {'case':16s} {'CPU ms':>8s} {'rbln ms':>8s} {'rbln/CPU':>9s} {'rbln ms/token':>14s}")
    for name, build in _models().items():
        torch.manual_seed(0)
        cpu_model = build().eval()
        rbln_model = copy.deepcopy(cpu_model).to("rbln")
        ids = torch.randint(2, cpu_model.config.vocab_size, (args.batch, 8),
                            generator=torch.Generator().manual_seed(1))
        for case, options in (("greedy", {}), ("min_new_tokens", {"min_new_tokens": args.tokens})):
            expected = _generate(cpu_model, ids, args.tokens, options)
            got = _generate(rbln_model, ids, args.tokens, options)  # (also the first call's compiles)
            if not torch.equal(got.cpu(), expected):
                raise SystemExit(f"{name} {case}: rbln's tokens differ from the CPU's")
            cpu, rbln = [], []
            for _ in range(args.repeats):
                cpu.append(_milliseconds(cpu_model, ids, args.tokens, options))
                if args.fresh_plans:
                    registry.forget_plans()
                rbln.append(_milliseconds(rbln_model, ids, args.tokens, options))
            c, r = statistics.median(cpu), statistics.median(rbln)
            print(f"{name:7s} {case:16s} {c:8.1f} {r:8.1f} {r / c:8.2f}x {r / args.tokens:14.2f}")


if __name__ == "__main__":
    main()
