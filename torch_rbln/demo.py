"""`python -m torch_rbln.demo`: a Hugging Face GPT-2 (small random config, no download) runs a forward
pass and one training step eagerly on rbln:0, checked against the same model on the CPU.

Prints the largest differences from the CPU run and the per-op table of what ran where (op-library
device kernels vs CPU fallback, with the reasons), so a user sees at once that the device works and how
much of it runs on our kernels. Without `transformers` installed (`pip install -e ".[demo]"`), a GPT-2
block written with torch.nn stands in.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import torch

import torch_rbln
from torch_rbln import fallback, registry


class TinyTransformerBlock(torch.nn.Module):
    """Stand-in when transformers is missing: embeddings, pre-norm causal attention + GELU MLP, LM head."""

    def __init__(self, vocab: int = 128, width: int = 64, heads: int = 4, positions: int = 64) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, width)
        self.wpe = torch.nn.Embedding(positions, width)
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.norm2 = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width),
            torch.nn.GELU(approximate="tanh"),
            torch.nn.Linear(4 * width, width),
        )
        self.norm_f = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        batch, length = ids.shape
        x = self.wte(ids) + self.wpe(torch.arange(length, device=ids.device))
        q, k, v = self.qkv(self.norm1(x)).split(x.shape[-1], dim=-1)
        shape = (batch, length, self.heads, -1)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5)
        causal = torch.ones(length, length, dtype=torch.bool, device=ids.device).tril()
        scores = torch.where(causal, scores, -1e9)
        attention = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, -1)
        x = x + self.proj(attention)
        x = x + self.mlp(self.norm2(x))
        return self.head(self.norm_f(x))


def _error_chain(error: BaseException) -> str:
    """`Type: message` of an error and of each error it was raised from: transformers' lazy modules
    re-raise every import failure as "Could not import module ..." and keep the real reason as the cause."""
    parts = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return " <- ".join(parts)


def _build(vocab: int, width: int, layers: int, heads: int, positions: int):
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
        from transformers.utils import logging as hf_logging
    except ImportError as error:
        # Without transformers (installed by the `demo` extra) the stand-in is the documented choice; a
        # transformers that is installed but fails to import is a broken environment the user must hear of.
        if not (isinstance(error, ModuleNotFoundError) and error.name == "transformers"):
            logging.getLogger("torch_rbln.demo").warning(
                "transformers is installed but importing GPT2LMHeadModel failed (%s); the demo runs its "
                "torch.nn stand-in instead. Reinstall with `pip install -e \".[demo]\"` to run GPT-2.",
                _error_chain(error))
        return (lambda: TinyTransformerBlock(vocab, width, heads, positions)), "GPT-2 block (torch.nn)"
    hf_logging.set_verbosity_error()
    config = GPT2Config(
        n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=positions,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
        attn_implementation="sdpa",
    )
    return (lambda: GPT2LMHeadModel(config)), f"transformers GPT2LMHeadModel ({layers} layers, width {width})"


def _loss(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out = model(ids)
    logits = out.logits if hasattr(out, "logits") else out
    shift = logits[:, :-1].reshape(-1, logits.shape[-1])
    loss = torch.nn.functional.cross_entropy(shift, ids[:, 1:].reshape(-1))
    return logits, loss


def _step(model: torch.nn.Module, ids: torch.Tensor, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    optimizer.zero_grad()
    logits, loss = _loss(model, ids)
    loss.backward()
    optimizer.step()
    return logits.detach(), loss.detach()


def _forward_ms(model: torch.nn.Module, ids: torch.Tensor, repeat: int) -> float:
    """Median wall time of an inference forward pass, in ms (kernels are compiled by then)."""
    times = []
    with torch.no_grad():
        for _ in range(repeat):
            start = time.perf_counter()
            model(ids)
            times.append(time.perf_counter() - start)
    return 1e3 * sorted(times)[len(times) // 2]


def run(device: str = "rbln:0", batch: int = 2, seq: int = 16, layers: int = 2, width: int = 64,
        heads: int = 4, vocab: int = 128, quiet: bool = False) -> dict:
    make, description = _build(vocab, width, layers, heads, max(64, seq))
    torch.manual_seed(0)
    cpu_model = make()
    device_model = make()
    device_model.load_state_dict(cpu_model.state_dict())
    device_model.to(device)  # in place: GPT-2's tied embedding / LM-head weight stays one Parameter
    ids = torch.randint(0, vocab, (batch, seq))

    cpu_logits, cpu_loss = _step(cpu_model, ids, lr=0.1)
    registry.reset_fallback_report()
    start = time.perf_counter()
    device_logits, device_loss = _step(device_model, ids.to(device), lr=0.1)
    elapsed = time.perf_counter() - start
    report = registry.fallback_report()
    repeat = 5
    device_ms = _forward_ms(device_model, ids.to(device), repeat)
    cpu_ms = _forward_ms(cpu_model, ids, repeat)

    logits_error = (device_logits.cpu() - cpu_logits).abs().max().item()
    loss_error = abs(device_loss.item() - cpu_loss.item())
    cpu_state = cpu_model.state_dict()
    param_error = max((value.cpu().float() - cpu_state[name].float()).abs().max().item()
                      for name, value in device_model.state_dict().items()
                      if name in cpu_state and value.is_floating_point())
    device_calls = sum(r["device"] for r in report.values())
    total = sum(r["device"] + r["cpu"] for r in report.values())
    share = device_calls / total if total else 1.0
    ok = logits_error < 1e-4 and loss_error < 1e-4 and param_error < 1e-4
    if not quiet:
        print(f"torch_rbln {torch_rbln.__version__}: {torch.rbln.device_count()} logical device(s), "
              f"{torch.rbln.physical_device_count()} simulated NPU(s)")
        print(f"model: {description} on {device}, input ids {tuple(ids.shape)}; forward + backward + SGD "
              f"step in {elapsed * 1e3:.1f} ms (first call includes kernel compilation)")
        print(f"steady-state forward (median of {repeat}): rbln {device_ms:.1f} ms, CPU torch "
              f"{cpu_ms:.1f} ms ({device_ms / cpu_ms:.1f}x CPU time; {torch.get_num_threads()} thread(s))")
        print(f"max |rbln - cpu|: logits {logits_error:.2e}, loss {loss_error:.2e}, "
              f"parameters after the step {param_error:.2e}")
        print("what ran where (per op):")
        print(registry.format_report(report))
        tiers = fallback.compile_tier_report()
        if tiers:
            print("kernels compiled in the background (TORCH_RBLN_COMPILE=background), their launches "
                  "meanwhile ran on the interpreter:")
            print(fallback.format_compile_tiers(tiers))
        print(f"PASS: rbln matches CPU, {100 * share:.1f}% of op calls on device kernels" if ok
              else "FAIL: rbln differs from CPU")
    return {"ok": ok, "share": share, "logits_error": logits_error, "loss_error": loss_error,
            "param_error": param_error, "report": report, "model": description,
            "forward_ms": device_ms, "cpu_forward_ms": cpu_ms}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="rbln:0")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args(argv)
    result = run(args.device, args.batch, args.seq, args.layers)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
