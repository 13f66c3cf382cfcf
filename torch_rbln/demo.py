"""`python -m torch_rbln.demo`: a small transformer block, forward and backward on rbln:0 vs CPU.

Prints the largest differences from the CPU run and what ran where (device kernels vs CPU
fallback, per op), so a user sees at once that the device works and how much of it is native.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

import torch_rbln
from torch_rbln import fallback


class TinyTransformerBlock(torch.nn.Module):
    """Pre-norm attention + MLP, as in GPT-style models, from plain torch.nn parts."""

    def __init__(self, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(width)
        self.attention = torch.nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        length = x.shape[1]
        causal = torch.triu(torch.ones(length, length, dtype=torch.bool, device=x.device), diagonal=1)
        x = x + self.attention(h, h, h, attn_mask=causal, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def _run(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    out = model(x)
    out.square().mean().backward()
    return out, {name: p.grad for name, p in model.named_parameters()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="rbln:0")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=16)
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    cpu_model = TinyTransformerBlock()
    device_model = TinyTransformerBlock().to(args.device)
    device_model.load_state_dict(cpu_model.state_dict())
    x = torch.randn(args.batch, args.seq, 64)

    cpu_out, cpu_grads = _run(cpu_model, x)
    fallback.reset_fallback_counts()
    start = time.perf_counter()
    device_out, device_grads = _run(device_model, x.to(args.device))
    elapsed = time.perf_counter() - start

    print(f"torch_rbln {torch_rbln.__version__}: {torch.rbln.device_count()} logical device(s), "
          f"{torch.rbln.physical_device_count()} simulated NPU(s)")
    print(f"model: TinyTransformerBlock on {device_out.device}, input {tuple(x.shape)}, "
          f"forward+backward {elapsed * 1e3:.1f} ms")
    output_error = (device_out.detach().cpu() - cpu_out.detach()).abs().max().item()
    grad_error = max((device_grads[n].cpu() - g).abs().max().item() for n, g in cpu_grads.items())
    print(f"max |rbln - cpu|: output {output_error:.2e}, gradients {grad_error:.2e}")
    counts = fallback.fallback_counts()
    total = sum(counts.values())
    print(f"what ran where: 0 op calls on device kernels, {total} on the CPU fallback")
    for name, count in sorted(counts.items(), key=lambda item: -item[1]):
        print(f"  {count:4d}  {name}  (CPU fallback)")
    ok = output_error < 1e-4 and grad_error < 1e-4
    print("PASS: rbln matches CPU" if ok else "FAIL: rbln differs from CPU")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
