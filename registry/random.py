"""Random ops: `native_dropout` and `native_dropout_backward`, `uniform_` and `normal_` (what
`torch.rand` / `torch.randn` on rbln call) on device (`kernels/random.py`).

Each call draws one seed from PyTorch's default generator (which rbln's random ops use; see
`torch.rbln.manual_seed`), so seeded runs repeat exactly; the mask itself comes from the kernel's
Philox generator, not from the CPU's, so it differs from what the same seed gives on the CPU (as on
CUDA). Everything else follows torch's CPU kernels: `scale = 1 / (1 - p)` (0 for p = 1), values
computed as `(x * mask) * scale`, `train=False` keeps everything. What the kernels do not cover
(non-floating dtypes, empty tensors, p outside [0, 1], a negative std, an explicit `generator=`, whose
own stream only the CPU can draw from) declines, so the CPU runs it and raises torch's own errors.
"""

from __future__ import annotations

import torch

from ._base import FLOATS, Decline, StridedTarget, require_float
from ._launch import kernel_module as _k
from ._launch import launch_grid
from ._ops import contiguous, empty
from .geometry import block, cdiv

_SEEDS = 2**31 - 1


def _scale(p: float) -> float:
    return 0.0 if p == 1 else 1.0 / (1.0 - p)


def native_dropout(x: torch.Tensor, p: float, train: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
    """`aten::native_dropout`: (output, bool mask)."""
    require_float(x.dtype)
    if not 0 <= p <= 1:
        raise Decline("p outside [0, 1]")  # torch's error from the CPU fallback
    if x.numel() == 0:
        raise Decline("empty tensor")
    if train is False:
        p = 0.0
    # one draw from the default generator per call, as the CPU kernel's bernoulli_ draws from it
    seed = int(torch.randint(0, _SEEDS, ()).item())
    index = x.get_device()
    out = empty(x.shape, x.dtype, index)
    mask = empty(x.shape, torch.bool, index)
    kernels = _k("random")
    n = x.numel()
    size = _block(n)
    launch_grid(kernels.dropout_kernel, (cdiv(n, size), 1),
                (contiguous(x), out, mask, n, float(p), _scale(p), seed), BLOCK=size)
    return out, mask


def native_dropout_backward(grad: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """`aten::native_dropout_backward`: (grad * mask) * scale."""
    if grad.dtype not in FLOATS or mask.dtype is not torch.bool:
        raise Decline("dtypes")
    if grad.shape != mask.shape or grad.numel() == 0:
        raise Decline("shapes differ, or an empty tensor")  # torch's error / result from the CPU
    out = empty(grad.shape, grad.dtype, grad.get_device())
    kernels = _k("random")
    n = grad.numel()
    size = _block(n)
    launch_grid(kernels.dropout_backward_kernel, (cdiv(n, size), 1),
                (contiguous(grad), contiguous(mask), out, n, float(scale)), BLOCK=size)
    return out


def _block(n: int) -> int:
    """The random kernels' block: `geometry.block`'s (16 lanes for at most 16 elements), at most
    `kernels.random.BLOCK`. Every
    lane computes its draw before the store's mask, so a 4-element `uniform_` paid for 1024 draws
    (~13 us); each element's value depends on the seed and its index only, not on the block."""
    return min(block(n), _k("random").BLOCK)


def _fill_random(kernel_name: str, x: torch.Tensor, a: float, b: float, generator, **constexprs
                 ) -> torch.Tensor:
    """`x` overwritten in place by `kernel_name(out, n, a, b, seed)`, one seed drawn per call."""
    require_float(x.dtype)
    if generator is not None:
        raise Decline("explicit generator")  # its stream is the CPU's: the fallback draws from it
    if not x.is_contiguous():
        raise StridedTarget("non-contiguous in-place")
    n = x.numel()
    if n == 0:
        return x
    seed = int(torch.randint(0, _SEEDS, ()).item())
    kernels = _k("random")
    size = _block(n)
    launch_grid(getattr(kernels, kernel_name), (cdiv(n, size), 1), (x, n, float(a), float(b), seed),
                BLOCK=size, **constexprs)
    return x


def uniform_(x: torch.Tensor, low: float = 0.0, high: float = 1.0, *, generator=None) -> torch.Tensor:
    """`aten::uniform_`: values in [low, high) (torch's own check of the bounds runs on the CPU)."""
    if not (isinstance(low, (int, float)) and isinstance(high, (int, float))) or not low <= high:
        raise Decline("bounds")  # torch's error from the CPU fallback
    digits = {torch.float16: 11, torch.bfloat16: 8}.get(x.dtype, 24)  # significand bits, as torch's
    return _fill_random("uniform_kernel", x, low, high, generator, STEPS=float(2**digits))


def normal_(x: torch.Tensor, mean: float = 0.0, std: float = 1.0, *, generator=None) -> torch.Tensor:
    """`aten::normal_`: mean + std * a standard normal draw."""
    if not (isinstance(mean, (int, float)) and isinstance(std, (int, float))) or std < 0:
        raise Decline("negative or non-real std")  # torch's error from the CPU fallback
    return _fill_random("normal_kernel", x, mean, std, generator)


RACES_LIMIT = 1 << 24  # quotients materialised by one multinomial call with replacement


def multinomial(probs: torch.Tensor, num_samples: int, replacement: bool = False, *,
                generator=None) -> torch.Tensor:
    """`aten::multinomial`: every category's weight divided by an exponential draw (`-log(u)`, u uniform
    in [0, 1)) and the index of the largest quotient, which picks category i with probability
    w_i / sum(w) (an exponential race). Without replacement, the indices of the `num_samples` largest
    quotients of one race (`topk`), as torch's CPU kernel draws them; with replacement, one race per
    sample (each an independent draw), while the races hold at most `RACES_LIMIT` quotients. Sampled
    text generation (`do_sample=True`) calls it once per token. The draws come from the device's uniform
    kernel (one seed from the default generator, as `uniform_`), not the CPU's stream, so seeded runs
    repeat but differ from the CPU's picks. torch's checks run first, on the device: a negative weight
    or a row summing to 0 declines, so the CPU raises torch's error (NaN/Inf weights are declined by
    the dispatcher's scan)."""
    require_float(probs.dtype)
    if generator is not None:
        raise Decline("explicit generator")  # its stream is the CPU's: the fallback draws from it
    if probs.dim() not in (1, 2) or probs.numel() == 0:
        raise Decline("probabilities of neither 1 nor 2 dims, or empty")  # torch's error from the CPU
    if isinstance(num_samples, bool) or not isinstance(num_samples, int):
        raise Decline("num_samples not an int")
    if num_samples <= 0 or (not replacement and num_samples > probs.shape[-1]):
        raise Decline("num_samples out of range")
    races = num_samples if replacement and num_samples > 1 else 1
    if races * probs.numel() > RACES_LIMIT:
        raise Decline(f"{races} races over {probs.numel()} weights (above {RACES_LIMIT} quotients)")
    if bool(((probs.amin() < 0) | (probs.sum(-1) <= 0).any()).item()):
        raise Decline("a negative weight or a row summing to 0")  # torch's error from the CPU
    # -p / log(u): u = 0 gives 0 (that category loses this draw), never NaN (log(u) < 0 for u in [0, 1))
    if races > 1:  # (rows, races, n): one race per sample
        weights = probs.unsqueeze(-2).expand(*probs.shape[:-1], races, probs.shape[-1])
        scores = weights.neg() / torch.log(torch.rand(weights.shape, dtype=probs.dtype, device=probs.device))
        return scores.argmax(-1)
    scores = probs.neg() / torch.log(torch.rand_like(probs))
    if num_samples == 1:
        return scores.argmax(-1, keepdim=True)
    return scores.topk(num_samples, -1).indices
