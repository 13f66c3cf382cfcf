"""`torch.autocast("rbln")`: CUDA's casting policy on the AutocastPrivateUse1 key.

Without kernels on that key every op under autocast fails, so all ops fall through by default;
matmul-like ops run in the autocast dtype (bf16/fp16) and precision-sensitive ops in float32, as
`torch.autocast("cuda")` does.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet

_AUTOCAST_KEYS = DispatchKeySet(DispatchKey.AutocastPrivateUse1)

LOWER_PRECISION_OPS = (
    "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "addr", "mv", "matmul", "linear", "einsum",
    "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d.input",
    "conv_transpose3d.input", "convolution", "_convolution", "prelu", "chain_matmul", "linalg_multi_dot",
    "scaled_dot_product_attention",
)
FLOAT32_OPS = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
    "group_norm", "norm.Scalar", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss",
    "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss",
    "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm",
    "logsumexp", "softmax.int", "log_softmax.int", "cumsum", "cumprod", "prod", "sum",
)


def _cast(value: Any, dtype: torch.dtype, eligible: tuple[torch.dtype, ...]) -> Any:
    if isinstance(value, torch.Tensor):
        if value.dtype in eligible and value.device.type == "rbln":
            return value.to(dtype)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype, eligible) for v in value)
    return value


def _policy_kernel(overload: torch._ops.OpOverloadPacket | torch._ops.OpOverload, lower: bool):
    def kernel(*args: Any, **kwargs: Any) -> Any:
        if lower:
            dtype = torch.get_autocast_dtype("rbln")
            eligible: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16)
        else:
            dtype = torch.float32
            eligible = (torch.float16, torch.bfloat16)
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
            return overload(*_cast(args, dtype, eligible), **_cast(kwargs, dtype, eligible))

    return kernel


def _resolve(name: str) -> torch._ops.OpOverload | None:
    packet_name, _, overload_name = name.partition(".")
    packet = getattr(torch.ops.aten, packet_name, None)
    if packet is None:
        return None
    return getattr(packet, overload_name or "default", None)


def register() -> list[torch.library.Library]:
    catch_all = torch.library.Library("_", "IMPL")
    catch_all.fallback(torch.library.fallthrough_kernel, dispatch_key="AutocastPrivateUse1")
    policies = torch.library.Library("aten", "IMPL")
    for names, lower in ((LOWER_PRECISION_OPS, True), (FLOAT32_OPS, False)):
        for name in names:
            overload = _resolve(name)
            if overload is not None:
                policies.impl(name, _policy_kernel(overload, lower), "AutocastPrivateUse1")
    return [catch_all, policies]
