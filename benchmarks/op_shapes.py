"""Mid-size calls of the ops that `benchmarks/ops.py` leaves out: rbln time / CPU time, one process.

Run: python benchmarks/op_shapes.py [--threads 1] [--repeats 9] [--over 3.0]

Why: kernels whose lanes do not fit the shape (a flat block dividing each lane's index by the sizes, a
1,024-lane block over 64 columns, a padding mask that makes every load a checked one) run several times
the work they need, and only shapes between the 4-element latency rows and the 2^24 throughput rows of
`ops.py` show it. Each row is one op on (64, 64, 64)-sized operands (and a few model shapes: a
convolution, pooling, batch norm), timed as medians of wall-clock calls on operands built beforehand,
rbln and CPU alternating per row; rows over `--over` times the CPU's are marked. The host is noisy:
read the ratios, and rerun a row that looks off.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F
from run import median_ms  # benchmarks/run.py, next to this script

import torch_rbln  # noqa: F401  (the rbln device)


def _operands() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        "x": torch.randn(64, 64, 64, generator=generator),
        "index": torch.randint(0, 64, (64, 64, 64), generator=generator),
        "table": torch.randn(1000, 128, generator=generator),
        "ids": torch.randint(0, 1000, (4, 256), generator=generator),
        "image": torch.randn(8, 32, 32, 32, generator=generator),
        "weight": torch.randn(32, 32, 3, 3, generator=generator),
        "features": torch.randn(256, 512, generator=generator),
    }


def _grad(function: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad(function(*inputs).sum(), inputs)


CASES: dict[str, Callable[[dict], object]] = {
    "gather dim 1": lambda t: torch.gather(t["x"], 1, t["index"]),
    "scatter_add dim 1": lambda t: torch.zeros_like(t["x"]).scatter_add_(1, t["index"], t["x"]),
    "index_select dim 1": lambda t: torch.index_select(t["x"], 1, t["index"][0, 0]),
    "embedding (4, 256)": lambda t: F.embedding(t["ids"], t["table"]),
    "cumsum dim 1": lambda t: torch.cumsum(t["x"], 1),
    "sort, lines of 4": lambda t: torch.sort(t["x"][:, :4], -1),
    "max dim 1": lambda t: t["x"].max(1),
    "argmax dim 1": lambda t: torch.argmax(t["x"], 1),
    "var dim 2": lambda t: torch.var(t["x"], 2),
    "softmax dim 1": lambda t: torch.softmax(t["x"], 1),
    "where, broadcast": lambda t: torch.where(t["x"] > 0, t["x"], t["x"][:, :1]),
    "transpose contiguous": lambda t: t["x"].transpose(0, 2).contiguous(),
    "cat dim 1": lambda t: torch.cat([t["x"], t["x"]], 1),
    "conv2d 3x3 pad 1": lambda t: F.conv2d(t["image"], t["weight"], padding=1),
    "conv2d 3x3 pad 1 fwd+bwd": lambda t: _grad(lambda a, w: F.conv2d(a, w, padding=1), t["image_g"],
                                                 t["weight_g"]),
    "max_pool2d 2 fwd+bwd": lambda t: _grad(lambda a: F.max_pool2d(a, 2), t["image_g"]),
    "max_pool2d 3/1/1 fwd+bwd": lambda t: _grad(lambda a: F.max_pool2d(a, 3, 1, 1), t["image_g"]),
    "avg_pool2d 2 fwd+bwd": lambda t: _grad(lambda a: F.avg_pool2d(a, 2), t["image_g"]),
    "adaptive_avg_pool2d 3x3 fwd+bwd": lambda t: _grad(lambda a: F.adaptive_avg_pool2d(a, 3), t["image_g"]),
    "batch_norm2d fwd+bwd": lambda t: _grad(lambda a: F.batch_norm(a, None, None, training=True),
                                            t["image_g"]),
    "batch_norm1d fwd+bwd": lambda t: _grad(lambda a: F.batch_norm(a, None, None, training=True),
                                            t["features_g"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--over", type=float, default=3.0, help="mark rows over this rbln/CPU ratio")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    host = _operands()
    device = {name: tensor.to("rbln") for name, tensor in host.items()}
    for operands in (host, device):
        for name in ("image", "weight", "features"):
            operands[f"{name}_g"] = operands[name].clone().requires_grad_()
    print(f"mid-size op calls, {args.threads} thread(s): median us per call, rbln / CPU")
    print(f"{'op':34s} {'CPU us':>9s} {'rbln us':>9s} {'ratio':>7s}")
    for name, case in CASES.items():
        cpu = median_ms(lambda case=case: case(host), args.repeats) * 1e3
        rbln = median_ms(lambda case=case: case(device), args.repeats) * 1e3
        mark = "  <- over" if rbln / cpu > args.over else ""
        print(f"{name:34s} {cpu:9.0f} {rbln:9.0f} {rbln / cpu:6.1f}x{mark}")
    report = torch_rbln.registry.fallback_report()
    fallbacks = sum(row["cpu"] for row in report.values())
    print(f"CPU fallbacks during the run: {fallbacks}")


if __name__ == "__main__":
    main()
