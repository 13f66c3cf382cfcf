"""Scaled dot-product attention on rbln: the flash kernels of `torch_rbln.kernels.attention` bound to aten.

How SDPA dispatches for PrivateUse1 (torch 2.13): `aten::scaled_dot_product_attention` is
CompositeImplicitAutograd; it asks the C++ `_fused_sdp_choice_stub` for a backend, and a stub entry for
PrivateUse1 can only be registered from C++. A pure-Python device therefore always lands in the math
decomposition (bmm, softmax, masking ops). We bind one level higher instead:

* `aten::scaled_dot_product_attention` gets rbln kernels for AutogradPrivateUse1 and PrivateUse1 (so
  the composite decomposition is no longer used for rbln tensors). It validates the call and, when our
  kernels support it, calls `aten::_scaled_dot_product_fused_attention_overrideable`, which is what the
  C++ code calls for the `overrideable` backend. That op has a derivative formula in PyTorch
  (`..._overrideable_backward`), so autograd records the native `ScaledDotProductFused...Backward0` node.
* `aten::_scaled_dot_product_fused_attention_overrideable` (+ `_backward`) get the flash forward and
  backward kernels for PrivateUse1. Both are counted in `torch_rbln.registry.device_counts()`.

Calls with dropout_p > 0 or an attn_mask that needs a gradient (T5's position bias), and otherwise
supported, run PyTorch's math decomposition on the device: its matmuls, softmax, masking and dropout are
op-library kernels that autograd differentiates (INFO once per reason; counted as device calls of
`aten::scaled_dot_product_attention`). Other calls the kernels do not support (unsupported
dtypes/shapes, NaN/Inf inputs unless `TORCH_RBLN_DEPLOY=ON`, ...) are declined: they run PyTorch's CPU
SDPA, logged at INFO and counted under `aten::scaled_dot_product_attention` with the reason. Invalid
calls are declined too, so the CPU implementation raises PyTorch's own error message.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from threading import get_ident
from typing import Any

import torch

from torch_rbln import _dlpack, _memory, config, fallback
from torch_rbln.tp import device_tp, requested_backend

from . import _launch
from . import _ops as O
from ._checks import _device_counts, _device_notes, _run_device, check_inputs
from ._finite_scan import PARALLEL_MIN, all_finite, contiguous_scan, is_dense_permutation
from ._memo import BoundedMemo
from .plan import Direct, Family, Plan, write_only_buffer

SDPA = "aten::scaled_dot_product_attention"
DROPOUT = "dropout_p > 0 (the rbln attention kernels have no dropout)"
MASK_GRAD = "attn_mask requires grad"
FORWARD = "aten::_scaled_dot_product_fused_attention_overrideable"
BACKWARD = "aten::_scaled_dot_product_fused_attention_overrideable_backward"
MAX_HEAD_DIM = 256
_INT32_MAX = 2**31 - 1



@dataclass(frozen=True)
class Geometry:
    """One attention call in kernel terms: 4-D (B, H, L, D) views and the mask's broadcast strides."""

    batch: int
    heads: int  # query heads
    q_len: int
    kv_len: int
    head_dim: int
    group: int  # query heads per key/value head
    has_mask: bool
    bool_mask: bool  # a boolean mask (keep where True); otherwise an additive bias
    mask_strides: tuple[int, int, int, int]

    @property
    def block_d(self) -> int:
        """BLOCK_D of this problem's forward and backward launches (`kernels.attention.block_d`): product
        tiles for problems that fit one, `tl.dot` tiles otherwise."""
        return O._k("attention").block_d(self.head_dim, self.q_len, self.kv_len)


def _is_plain(t: Any) -> bool:
    return t is None or type(t) is torch.Tensor


def tracing(*tensors: torch.Tensor | None) -> bool:
    """Whether this call is being traced (fake/functional tensors, or a dispatch mode such as make_fx's
    is active): values cannot be inspected, and the call must decompose into traceable aten ops."""
    return torch._C._len_torch_dispatch_stack() > 0 or not all(_is_plain(t) for t in tensors)


def mask_strides(mask: torch.Tensor, shape: tuple[int, int, int, int],
                 query_dim: int) -> tuple[int, ...] | None:
    """Strides that read `mask` broadcast to (B, H, M, N) (0 on broadcast dims), or None when `mask` does
    not broadcast. For 3-D queries the target is (B, M, N) with H = 1."""
    target = shape if query_dim == 4 else (shape[0], shape[2], shape[3])
    if mask.dim() > len(target):
        return None
    strides = [0] * len(target)
    offset = len(target) - mask.dim()
    for i, (size, stride) in enumerate(zip(mask.shape, mask.stride(), strict=True)):
        if size != 1 and size != target[offset + i]:
            return None
        strides[offset + i] = stride if size != 1 else 0
    if query_dim == 3:
        strides.insert(1, 0)
    return tuple(strides)


def unsupported(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
                dropout_p: float, is_causal: bool, enable_gqa: bool,
                inspect_values: bool = True) -> str | None:
    """Why this call cannot run on the flash kernels (None when it can). Invalid calls also get a reason:
    the CPU implementation then raises PyTorch's error for them. `inspect_values=False` (tracing) skips
    the checks that read tensor data (NaN/Inf)."""
    if dropout_p > 0.0:
        return DROPOUT
    if any(t is not None and t.is_nested for t in (query, key, value, attn_mask)):
        return "nested tensor operand"
    reason = check_inputs((query, key, value), {}) if inspect_values else _operand_problem(query, key, value)
    if reason is not None:
        return reason
    if not query.dtype == key.dtype == value.dtype:
        return "query, key and value dtypes differ"
    if query.dim() not in (3, 4) or key.dim() != query.dim() or value.dim() != query.dim():
        return "query/key/value must all be 3-D or 4-D"
    head_dim = query.shape[-1]
    if key.shape[-1] != head_dim or value.shape[-1] != head_dim:
        return "key/value head dim differs from the query's"
    if head_dim > MAX_HEAD_DIM:
        return f"head dim {head_dim} > {MAX_HEAD_DIM}"
    if query.shape[0] != key.shape[0] or key.shape[:-1] != value.shape[:-1]:
        return "batch or key/value shapes differ"
    if query.dim() == 4 and query.shape[1] != key.shape[1]:
        if not enable_gqa:
            return "query and key/value head counts differ without enable_gqa"
        if key.shape[1] == 0 or query.shape[1] % key.shape[1]:
            return "query heads are not a multiple of key/value heads"
    if query.numel() == 0 or key.numel() == 0:
        return "empty tensor"
    if any(_last_offset(t) > _INT32_MAX for t in (query, key, value, attn_mask) if t is not None):
        return "tensor too large for 32-bit offsets"
    if attn_mask is not None:
        if is_causal:
            return "attn_mask together with is_causal"
        return _mask_problem(query, key, attn_mask, inspect_values)
    return None


def _operand_problem(*tensors: torch.Tensor) -> str | None:
    """check_inputs without reading values: dtype and device only."""
    devices = {t.device for t in tensors}
    if len(devices) != 1 or next(iter(devices)).type != "rbln":
        return "operands not all on one rbln device"
    dtype = tensors[0].dtype
    return None if dtype in O.FLOATS else f"dtype {str(dtype).replace('torch.', '')}"


def _last_offset(t: torch.Tensor) -> int:
    return sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True)) + t.numel()


def _mask_problem(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor,
                  inspect_values: bool) -> str | None:
    if mask.dtype != torch.bool and mask.dtype not in O.FLOATS:
        return f"attn_mask dtype {str(mask.dtype).replace('torch.', '')}"
    if mask.is_cpu or mask.get_device() != query.get_device():
        return "attn_mask on another device"
    shape = _shape4(query, key)
    if mask_strides(mask, shape, query.dim()) is None:
        return "attn_mask does not broadcast to (B, H, L, S)"
    if inspect_values and mask.dtype != torch.bool and mask.numel():
        from torch_rbln import _dlpack

        if torch.isnan(_dlpack.to_host_view(mask)).any():
            return "NaN in attn_mask"
    if mask.requires_grad and torch.is_grad_enabled():
        return MASK_GRAD  # checked last: every other property of the call is fine
    return None


def _shape4(query: torch.Tensor, key: torch.Tensor) -> tuple[int, int, int, int]:
    if query.dim() == 3:
        return query.shape[0], 1, query.shape[1], key.shape[1]
    return query.shape[0], query.shape[1], query.shape[2], key.shape[2]


def geometry(query: torch.Tensor, key: torch.Tensor, attn_mask: torch.Tensor | None) -> Geometry:
    """The kernel view of 4-D q/k (and the mask); raises ValueError for what the kernels cannot run."""
    if query.dim() != 4 or key.dim() != 4:
        raise ValueError(f"rbln flash attention expects 4-D (B, H, L, D) query/key, got {query.dim()}-D")
    batch, heads, q_len, head_dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"rbln flash attention: {heads} query heads are not a multiple of {kv_heads} "
                         "key/value heads")
    strides = (0, 0, 0, 0)
    if attn_mask is not None:
        found = mask_strides(attn_mask, (batch, heads, q_len, kv_len), 4)
        if found is None:
            raise ValueError(f"rbln flash attention: attn_mask of shape {tuple(attn_mask.shape)} does not "
                             f"broadcast to {(batch, heads, q_len, kv_len)}")
        strides = found
    return Geometry(batch, heads, q_len, kv_len, head_dim, heads // kv_heads, attn_mask is not None,
                    attn_mask is not None and attn_mask.dtype == torch.bool, strides)


def empty_like_layout(t: torch.Tensor, shape: Sequence[int], index: int) -> torch.Tensor:
    """A dense rbln tensor of `shape` whose dims are ordered in memory like `t`'s (`empty_like`'s
    preserve_format; the same strides as `t` when `t` is dense)."""
    if t.is_contiguous() and t.shape == shape:
        return _memory.empty(shape, t.dtype, index)
    return _memory.empty_strided(list(shape), layout_strides(t.stride(), shape), t.dtype, index)


def layout_strides(strides: Sequence[int], shape: Sequence[int]) -> list[int]:
    """Dense strides of `shape` with its dims ordered in memory as `strides` orders them."""
    order = sorted(range(len(shape)), key=lambda i: strides[i], reverse=True)
    dense = [0] * len(shape)
    step = 1
    for i in reversed(order):
        dense[i] = step
        step *= max(shape[i], 1)
    return dense


def _grid(rows: int, programs: int):
    return lambda meta: (-(-rows // meta["BLOCK_M"]), programs)


def _kv_grid(keys: int, programs: int):
    return lambda meta: (-(-keys // meta["BLOCK_N"]), programs)


def _default_scale(scale: float | None, head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


# ---------------------------------------------------------------- the overrideable fused op

def _forward_arguments(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attn_bias: torch.Tensor | None, out_strides: Sequence[int], out_dtype: torch.dtype,
                       g: Geometry, scale: float, is_causal: bool, index: int) -> tuple:
    """(int/float arguments after the six tensors, their dtypes, the tuner's shape key, constexprs, grid,
    whether every int fits in 32 bits) of the flash forward launch: everything but the tensors, so a
    plan can keep it."""
    mask = attn_bias if attn_bias is not None else query
    strides = (*query.stride(), *key.stride(), *value.stride(), *g.mask_strides, *out_strides)
    sizes = (g.heads, g.q_len, g.kv_len, g.head_dim)
    block_d = g.block_d
    tail = (*strides, *sizes, scale, g.group, int(is_causal))
    dtypes = (query.dtype, key.dtype, value.dtype, mask.dtype, out_dtype, torch.float32)
    rows = g.batch * g.heads
    shape_key = (*dtypes, *sizes, g.has_mask, g.bool_mask, block_d, rows, device_tp(index),
                 requested_backend())
    fits = max(max(map(abs, strides)), rows * g.q_len) <= _INT32_MAX
    constexprs = {"HAS_MASK": g.has_mask, "BOOL_MASK": g.bool_mask, "BLOCK_D": block_d}
    return tail, dtypes, shape_key, constexprs, _grid(g.q_len, rows), fits


def _forward_launch(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attn_bias: torch.Tensor | None, out: torch.Tensor, lse: torch.Tensor, g: Geometry,
                    scale: float, is_causal: bool) -> None:
    """One launch of the flash forward kernel, its tile config kept per launch shape (`_launch.tuned`)."""
    tail, dtypes, shape_key, constexprs, grid, fits = _forward_arguments(
        query, key, value, attn_bias, out.stride(), out.dtype, g, scale, is_causal, out.get_device())
    mask = attn_bias if attn_bias is not None else query
    tensors = (query, key, value, mask, out, lse)
    _launch.tuned(O._k("attention").attention_forward_kernel, shape_key, (*tensors, *tail), constexprs, grid,
                  dtypes, tensors, fits)


def fused_attention_forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attn_bias: torch.Tensor | None = None, dropout_p: float = 0.0,
                            is_causal: bool = False, return_debug_mask: bool = False, *,
                            scale: float | None = None) -> tuple:
    """rbln kernel of `aten::_scaled_dot_product_fused_attention_overrideable`: (output, logsumexp, ...).

    `attn_bias` may be boolean (keep where True) or additive. The output has the query's memory layout
    (as PyTorch's meta function says): for the usual (B, L, H, D) -> transpose(1, 2) query of a model, the
    `out.transpose(1, 2).reshape(...)` that follows is free."""
    if dropout_p > 0.0 or return_debug_mask:
        raise NotImplementedError("rbln flash attention has no dropout and no debug mask; call "
                                  "torch.nn.functional.scaled_dot_product_attention, which runs such calls "
                                  "on the CPU")
    g = geometry(query, key, attn_bias)
    index = query.get_device()
    out = empty_like_layout(query, query.shape, index)
    lse = O.empty([g.batch, g.heads, g.q_len], torch.float32, index)
    _forward_launch(query, key, value, attn_bias, out, lse, g, _default_scale(scale, g.head_dim), is_causal)
    empty = _unused_output(index)
    return out, lse, empty, empty, g.q_len, g.kv_len, empty, empty, empty


def fused_attention_backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                             value: torch.Tensor, attn_bias: torch.Tensor | None, grad_input_mask: list[bool],
                             out: torch.Tensor, logsumexp: torch.Tensor, cum_seq_q: torch.Tensor,
                             cum_seq_k: torch.Tensor, max_q: int, max_k: int, dropout_p: float,
                             is_causal: bool,
                             philox_seed: torch.Tensor, philox_offset: torch.Tensor, *,
                             scale: float | None = None) -> tuple:
    """rbln kernel of `..._overrideable_backward`: (grad_query, grad_key, grad_value, grad_attn_bias)."""
    if dropout_p > 0.0:
        raise NotImplementedError("rbln flash attention backward has no dropout")
    if len(grad_input_mask) > 3 and grad_input_mask[3]:
        raise NotImplementedError("rbln flash attention does not compute the gradient of attn_bias; "
                                  "scaled_dot_product_attention runs such calls on the CPU")
    g = geometry(query, key, attn_bias)
    B, H, M = g.batch, g.heads, g.q_len
    if (logsumexp.dtype != torch.float32 or tuple(logsumexp.shape) != (B, H, M)
            or not logsumexp.is_contiguous()):
        raise ValueError("rbln flash attention backward needs the float32 (B, H, L) logsumexp saved by its "
                         f"forward, got {logsumexp.dtype} {tuple(logsumexp.shape)}")
    index = query.get_device()
    grads = (empty_like_layout(query, query.shape, index), empty_like_layout(key, key.shape, index),
             empty_like_layout(value, value.shape, index))
    delta = None if _one_tile(g) else O.empty([B, H, M], torch.float32, index)
    for tuner, grid_of, tensors, scalars, constexprs in _backward_calls(
            grad_out, query, key, value, attn_bias, out, logsumexp, delta, grads, g, scale, is_causal):
        shape_key, dtypes, fits = _backward_key(g, index, tensors, scalars, constexprs)
        _launch.tuned(tuner, shape_key, (*tensors, *scalars), constexprs, grid_of, dtypes, tensors, fits)
    return (*grads, None)


def _one_tile(g: Geometry) -> bool:
    """Whether the problem fits one tile (`kernels.attention.one_launch_backward`): its backward is one
    launch of `attention_backward_tiny_kernel` (no delta buffer)."""
    return O._k("attention").one_launch_backward(g.q_len, g.kv_len, g.block_d)


def _backward_calls(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attn_bias: torch.Tensor | None, out: torch.Tensor, logsumexp: torch.Tensor,
                    delta: torch.Tensor | None, grads: Sequence[torch.Tensor], g: Geometry,
                    scale: float | None, is_causal: bool) -> tuple[tuple, ...]:
    """The backward's launches, each as (autotuner, grid callback, tensor arguments, int/float
    arguments, constexprs): what the general path launches and a backward plan keeps. A problem that
    fits one tile (`_one_tile`) is one launch of the tiny kernel; any other is the dQ kernel
    (which writes `delta`) then the dK/dV kernel."""
    K = O._k("attention")
    grad_query, grad_key, grad_value = grads
    mask = attn_bias if attn_bias is not None else query
    shared = (g.heads, g.q_len, g.kv_len, g.head_dim, _default_scale(scale, g.head_dim), g.group,
              int(is_causal))
    inputs = (*query.stride(), *key.stride(), *value.stride(), *g.mask_strides)
    exact = query.dtype != torch.float32
    kv_programs = g.batch * (g.heads // g.group)
    if _one_tile(g):
        return ((K.attention_backward_tiny_kernel, lambda meta: (1, kv_programs),
                 (query, key, value, mask, out, grad_out, logsumexp, grad_query, grad_key, grad_value),
                 (*inputs, *out.stride(), *grad_out.stride(), *grad_query.stride(), *grad_key.stride(),
                  *grad_value.stride(), *shared),
                 {"HAS_MASK": g.has_mask, "BOOL_MASK": g.bool_mask, "EXACT_DELTA": exact,
                  "BLOCK_D": g.block_d}),)
    dq = (K.attention_backward_dq_kernel, _grid(g.q_len, g.batch * g.heads),
          (query, key, value, mask, out, grad_out, logsumexp, delta, grad_query),
          (*inputs, *out.stride(), *grad_out.stride(), *grad_query.stride(), *shared),
          {"HAS_MASK": g.has_mask, "BOOL_MASK": g.bool_mask, "EXACT_DELTA": exact, "BLOCK_D": g.block_d})
    dkdv = (K.attention_backward_dkdv_kernel, _kv_grid(g.kv_len, kv_programs),
            (query, key, value, mask, grad_out, logsumexp, delta, grad_key, grad_value),
            (*inputs, *grad_out.stride(), *grad_key.stride(), *grad_value.stride(), *shared),
            {"HAS_MASK": g.has_mask, "BOOL_MASK": g.bool_mask, "BLOCK_D": g.block_d})
    return dq, dkdv


def _backward_key(g: Geometry, index: int, tensors: tuple, scalars: tuple, constexprs: dict) -> tuple:
    """(shape key, tensor dtypes, whether every int fits in 32 bits) of a backward launch kept by
    `_launch.tuned` (as the forward's): the tuner's per-call key and grid callback cost more than a small
    backward computes. The shape key holds what the tuner's decision depends on (dtypes, sizes,
    constexprs, rows, the device's tensor-parallel size, the requested backend)."""
    dtypes = tuple(t.dtype for t in tensors)
    rows = g.batch * g.heads
    shape_key = (*dtypes, g.heads, g.q_len, g.kv_len, g.head_dim, *constexprs.values(), rows,
                 device_tp(index), requested_backend())
    fits = max(max(map(abs, scalars)), rows * g.q_len) <= _INT32_MAX  # (the float scale too: harmless)
    return shape_key, dtypes, fits


# ---------------------------------------------------------------- aten::scaled_dot_product_attention

def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, *, scale: float | None = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """rbln kernel (AutogradPrivateUse1 and PrivateUse1) of `aten::scaled_dot_product_attention`."""
    signed = None
    # an inference call (no gradient needed; written inline: on a few elements each call counts)
    if type(query) is torch.Tensor and query.dim() == 4 and dropout_p == 0.0 and not (
            torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad
                                         or (attn_mask is not None and attn_mask.requires_grad))):
        signed = _INFERENCE.signature((query, key, value, attn_mask, is_causal, scale, enable_gqa), _NONE)
        plan = _inference_plans.get(signed[0])
        if plan is None:
            plan = _derived_decode_plan(signed[1])  # a decoding step's new cache length
            if plan is not None:
                _inference_plans[signed[0]] = plan
        if plan is not None:
            out = (plan if plan.programs else _retuned(_inference_plans, _INFERENCE, signed)).run(signed[1])
            if out is not None:
                return out
    traced = tracing(query, key, value, attn_mask)
    if signed is not None and not traced and \
            unsupported(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa, False) is None:
        # a structure the kernels take: its plan, kept; a decode plan (no tuning) runs this first call
        # too, its own value checks (NaN/Inf) included, so they are not read twice (a decoding step is a
        # new structure every step)
        plan = _inference_plans[signed[0]] = _INFERENCE.plan(*signed)
        if plan.decode:
            template = _decode_template_key(*signed[1][:6])
            if template is not None:
                _decode_templates[template] = plan
            out = plan.run(signed[1])
            if out is not None:
                return out
    reason = unsupported(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa, not traced)
    if reason is not None:
        decomposed = traced or _decomposes_on_device(reason, query, key, value, attn_mask, is_causal,
                                                     enable_gqa)
        if not decomposed:
            return _on_cpu(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, reason)
        if not traced:
            _record_decomposed(reason)
        # what PyTorch itself runs for PrivateUse1: the math decomposition (traceable; its matmuls,
        # softmax, masking and dropout are op-library kernels, and autograd differentiates them)
        return torch.ops.aten._scaled_dot_product_attention_math(
            query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale,
            enable_gqa=enable_gqa)[0]
    three_d = query.dim() == 3
    if three_d:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if attn_mask is not None and attn_mask.dim() == 3:
            attn_mask = attn_mask.unsqueeze(1)
    out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        query, key, value, attn_mask, 0.0, is_causal, False, scale=scale)[0]
    return out.squeeze(1) if three_d else out


def forward_family(*, fused: bool) -> Family:
    """The flash forward of one call structure: SDPA's inference calls (`_inference`: the values
    scanned, the logsumexp written to scratch) or the fused op's (`fused`: `_fused_forward`). Its
    signature takes (q, k, v, mask, is_causal, scale, flag) (`flag`: enable_gqa for SDPA, False for the
    fused op) and keys q/k/v shapes, strides and dtypes, is_causal, scale, flag and the mask's shape,
    strides and dtype. A plan is built for a structure the general path accepted (`_new_plan`)."""
    planned = _fused_forward if fused else _inference

    def signature(args: tuple, kwargs: dict) -> tuple:
        query, key, value, mask, is_causal, scale, flag = args
        structure = (query.shape, query.stride(), key.shape, key.stride(), value.shape, value.stride(),
                     query.dtype, key.dtype, value.dtype, is_causal, scale, flag)
        if mask is not None:
            structure = (*structure, mask.shape, mask.stride(), mask.dtype)
        return structure, args

    def plan(key: tuple, operands: tuple) -> _InferencePlan:
        built = _new_plan(*operands[:6], decode=not fused)
        built.run = partial(planned, built)
        return built

    return Family(signature, plan)


def _retuned(memo: dict, family: Family, signed: tuple) -> _InferencePlan:
    """The plan of a structure accepted before the autotuner had chosen its tile (grid (0, 0)), built
    again with the tile now (and kept in `memo`)."""
    plan = memo[signed[0]] = family.plan(*signed)
    return plan


# (q/k/v shapes, strides and dtypes, is_causal, scale, enable_gqa, mask's) -> (geometry, scale) of a
# call `unsupported` accepted once: later inference calls of that structure check only the values
_inference_plans: dict[tuple, _InferencePlan] = BoundedMemo(1024)


class _InferencePlan(Plan):
    """An accepted forward structure (`_inference_plans`, `_fused_plans`): its geometry and scale, the
    output's strides, and once the general path has launched it, the kept launch of the tile the autotuner
    chose (`Plan.kept`, reset by `clear_cache`) with the arguments after the six tensors (`tail`) and the
    grid (`Plan.programs`, `Plan.rows`; (0, 0) until the tuner has chosen). `dense`: every operand covers
    exactly its elements (what the kept launch may read unchecked, and what `scan_all` scans as one block
    each). The kernel also writes each row's logsumexp, which an inference call never reads: up to
    `_SCRATCH_ROWS` rows it goes to a buffer the plan keeps per device (`scratch`) instead of a fresh
    allocation per call. Concurrent calls may write it at once: nothing reads it, so that is harmless."""

    __slots__ = ("g", "scale", "out_strides", "contiguous_out", "lse_shape", "tail", "dense", "scratch",
                 "scan_all", "counts", "mask", "wide", "spans", "decode")

    @property
    def grid(self) -> tuple[int, int]:
        return self.programs, self.rows


_SCRATCH_ROWS = 1 << 12  # at most 16 KiB of kept logsumexp scratch per plan and device (larger: the
# kernel outweighs an allocation)


def _new_plan(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
              is_causal: bool, scale: float | None, decode: bool = False) -> _InferencePlan:
    """The plan of an accepted structure. `decode` (inference calls, whose logsumexp no backward reads):
    a call of at most DECODE_ROWS query rows takes `attention_decode_kernel`, one program per query row
    and head, whose specialisation does not depend on the sequence lengths (a decoding loop's growing
    cache makes a new structure every step: its plan is then built without the autotuner)."""
    g = geometry(query, key, attn_mask)
    scale = _default_scale(scale, g.head_dim)
    out_strides = layout_strides(query.stride(), query.shape)
    tail, dtypes, shape_key, constexprs, grid_of, fits = _forward_arguments(
        query, key, value, attn_mask, out_strides, query.dtype, g, scale, is_causal, query.get_device())
    kernels = O._k("attention")
    decode = decode and fits and g.q_len <= kernels.DECODE_ROWS
    if decode:
        keywords = {"HAS_MASK": g.has_mask, "BOOL_MASK": g.bool_mask, "BLOCK_N": kernels.DECODE_BLOCK_N,
                    "BLOCK_D": kernels.decode_block_d(g.head_dim)}
        kernel, kept, grid = kernels.attention_decode_kernel, True, (g.q_len, g.batch * g.heads)
        launch_key = ("decode", *dtypes, *keywords.values())
    else:
        tuner = kernels.attention_forward_kernel
        kernel, kept = tuner.fn, (_launch.tuned_config(tuner, shape_key) if fits else None)
        # grid (0, 0): the tuner has not launched this shape yet, ask again next call; (-1, -1): 64-bit
        # arguments, never a kept launch
        grid, keywords = kept if kept is not None else (((0, 0) if fits else (-1, -1)), {})
        launch_key = (*dtypes, *keywords.values())
    plan = _InferencePlan(kernel, launch_key, keywords, grid[0], grid[1], tuple(query.shape), query.dtype,
                          (0, 1, 2))
    plan.decode = decode
    plan.g, plan.scale, plan.out_strides, plan.tail = g, scale, out_strides, tail
    plan.mask = contiguous_scan(query.dtype)[1]
    plan.contiguous_out = out_strides == _memory.contiguous_strides(query.shape)
    plan.lse_shape = (g.batch, g.heads, g.q_len)
    plan.scratch = {}
    operands = [query, key, value] + ([attn_mask] if attn_mask is not None else [])
    plan.dense = kept is not None and all(is_dense_permutation(t.shape, t.stride()) for t in operands)
    plan.counts = (query.numel(), key.numel(), value.numel())
    # the element counts of the launch by address: q, k, v, the mask (q stands in for none), out, lse
    plan.spans = (*plan.counts, query.numel() if attn_mask is None else attn_mask.numel(), query.numel(),
                  g.batch * g.heads * g.q_len)
    plan.scan_all = (O._k("rows").inputs_finite_entry(3)
                     if plan.dense and sum(plan.counts) < PARALLEL_MIN else None)
    plan.wide = int(query.dtype == torch.float32)
    return plan


# Decode plans by structure with the key/value length left out (`_decode_template_key`) -> the plan of one
# length, from which a call of another length derives its own (`_derived_decode_plan`).
_decode_templates: dict[tuple, _InferencePlan] = BoundedMemo(256)


def _decode_template_key(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attn_mask: torch.Tensor | None, is_causal: bool, scale: float | None
                         ) -> tuple | None:
    """The structure of a decode call without its key/value length: q's shape, strides and dtype, the
    other sizes of contiguous k and v, and a contiguous mask's shape but its last dim (which must be
    that length), is_causal and scale; None for any other layout (each length then builds its plan)."""
    if not (key.is_contiguous() and value.is_contiguous()) or key.dim() != 4 or value.dim() != 4:
        return None
    mask = None
    if attn_mask is not None:
        if attn_mask.dim() != 4 or not attn_mask.is_contiguous() or attn_mask.shape[3] != key.shape[2]:
            return None
        mask = (tuple(attn_mask.shape[:3]), attn_mask.dtype)
    return (tuple(query.shape), query.stride(), query.dtype, key.shape[0], key.shape[1], key.shape[3],
            key.dtype, value.shape[0], value.shape[1], value.shape[3], value.dtype, mask, is_causal, scale)


def _derived_decode_plan(operands: tuple) -> _InferencePlan | None:
    """The decode plan of a call whose structure differs from a planned one (`_decode_templates`) only in
    the key/value length: a decoding loop's cache grows by a row per step, and each step's structural
    checks (`unsupported`) and plan (`_new_plan`) took ~70 of its ~100 us. What depends on the length is
    computed again here (the geometry, the launch's strides and sizes, the element counts, the 32-bit
    bounds); the kernel, its specialisation and its kept launch are the template's, so the first call
    runs the kept launch. None where no template applies (the general path then decides)."""
    query, key, value, attn_mask, is_causal, scale, flag = operands
    kv_len = key.shape[2]
    if value.shape[2] != kv_len or not kv_len:
        return None
    template_key = _decode_template_key(query, key, value, attn_mask, is_causal, scale)
    template = None if template_key is None else _decode_templates.get(template_key)
    if template is None or (query.shape[1] != key.shape[1] and not flag):
        return None
    mask_numel = 0 if attn_mask is None else attn_mask.numel()
    if 2 * max(key.numel(), value.numel(), mask_numel) > _INT32_MAX:  # `_last_offset` of contiguous ones
        return None
    g = template.g
    strides = (0, 0, 0, 0)
    if attn_mask is not None:
        strides = mask_strides(attn_mask, (g.batch, g.heads, g.q_len, kv_len), 4)
        if strides is None:
            return None
    g = Geometry(g.batch, g.heads, g.q_len, kv_len, g.head_dim, g.group, g.has_mask, g.bool_mask, strides)
    index = query.get_device()
    tail, _, _, _, _, fits = _forward_arguments(query, key, value, attn_mask, template.out_strides,
                                                query.dtype, g, template.scale, is_causal, index)
    if not fits:
        return None
    plan = _InferencePlan(template.kernel, template.key, template.keywords, template.programs, template.rows,
                          template.shape, template.dtype, template.scanned)
    for name in ("decode", "scale", "out_strides", "mask", "contiguous_out", "lse_shape", "scratch", "dense",
                 "wide", "launcher", "by_address", "backend"):
        setattr(plan, name, getattr(template, name))
    plan.g, plan.tail = g, tail
    plan.counts = (query.numel(), key.numel(), value.numel())
    plan.spans = (*plan.counts, query.numel() if attn_mask is None else attn_mask.numel(), query.numel(),
                  g.batch * g.heads * g.q_len)
    plan.scan_all = (O._k("rows").inputs_finite_entry(3)
                     if plan.dense and sum(plan.counts) < PARALLEL_MIN else None)
    plan.run = partial(_inference, plan)
    return plan


def _planned_device(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attn_mask: torch.Tensor | None) -> int:
    """The rbln device index of a planned forward call, or -1 when the general path must take it: a
    dispatch mode, subclass tensors, or operands on several devices (or on the CPU)."""
    if torch._C._len_torch_dispatch_stack() or type(key) is not torch.Tensor or \
            type(value) is not torch.Tensor or not (attn_mask is None or type(attn_mask) is torch.Tensor):
        return -1
    index = query.get_device()
    if index < 0 or key.get_device() != index or value.get_device() != index or (
            attn_mask is not None and attn_mask.get_device() != index):
        return -1
    return index


def _inference(plan: _InferencePlan, operands: tuple) -> torch.Tensor | None:
    """(q, k, v, mask, is_causal, scale, flag) = `operands`: the forward launch of an inference call whose
    structure was accepted before (`plan`), without the dispatch of the fused op and its structural
    checks: the result `fused_attention_forward` gives, counted as it. None when the values or devices
    need the general path (NaN/Inf outside deploy mode, a NaN in a float mask, operands on several
    devices, a dispatch mode or subclass tensors). It shares its device check and launch with the fused
    op's planned forward (`_planned_device`, `_planned_launch`)."""
    query, key, value, attn_mask, is_causal, _, _ = operands
    index = _planned_device(query, key, value, attn_mask)
    if index < 0:
        return None
    if not config.deploy_mode():
        scan_all = plan.scan_all
        if scan_all is not None:  # dense operands: one compiled scan of the three blocks
            if not scan_all((query.data_ptr(), key.data_ptr(), value.data_ptr()), plan.counts, plan.mask,
                            plan.wide):
                return None
        elif not (all_finite(query) and all_finite(key) and all_finite(value)):
            return None
        if attn_mask is not None and attn_mask.dtype != torch.bool and \
                torch.isnan(_dlpack.to_host_view(attn_mask)).any():
            return None
    if plan.contiguous_out:
        out = _memory.empty(query.shape, query.dtype, index)
    else:
        out = _memory.empty_strided(query.shape, plan.out_strides, query.dtype, index)
    _planned_launch(plan, index, query, key, value, attn_mask, out,
                    write_only_buffer(plan.scratch, index, plan.lse_shape, _SCRATCH_ROWS), is_causal)
    return out


def _planned_launch(plan: _InferencePlan, index: int, query: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor, attn_mask: torch.Tensor | None, out: torch.Tensor, lse: torch.Tensor,
                    is_causal: bool) -> None:
    """The forward launch of `plan` into `out` and `lse`, counted as the fused op's: its kept launch when
    there is one and one NPU runs the grid (dense operands: each covers exactly its elements, so the
    launch by address takes the plan's element counts), else the general (tuned) launch. A kept launch
    by address that reports a fault leaves the call to the general launch, which raises it with its
    full report."""
    run = None
    grid = plan.programs, plan.rows
    if plan.dense and (grid[0] * grid[1] == 1 or device_tp(index) == 1):
        run = plan.launcher
        if run is None or plan.backend != requested_backend():
            run = plan.kept()
    if run is None:
        _general_launch(plan, query, key, value, attn_mask, out, lse, is_causal)
    elif plan.by_address is None:
        run(grid[0], grid[1], 1, query, key, value, query if attn_mask is None else attn_mask, out, lse,
            *plan.tail)
    else:
        sq, sk, sv, sm, so, sl = plan.spans
        mask = query if attn_mask is None else attn_mask
        if not plan.by_address(grid[0], grid[1], 1, query.data_ptr(), sq, key.data_ptr(), sk,
                               value.data_ptr(), sv, mask.data_ptr(), sm, out.data_ptr(), so, lse.data_ptr(),
                               sl, *plan.tail):
            _general_launch(plan, query, key, value, attn_mask, out, lse, is_causal)
    _device_counts[FORWARD] += 1


def _general_launch(plan: _InferencePlan, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attn_mask: torch.Tensor | None, out: torch.Tensor, lse: torch.Tensor,
                    is_causal: bool) -> None:
    """The checked launch of `plan`'s kernel (tensor-parallel groups included; a fault raised with its full
    report): the decode kernel's own, which keeps its direct launch for later runs, or the tuned flash
    forward."""
    if plan.decode:
        mask = query if attn_mask is None else attn_mask
        plan.launch_checked((query, key, value, mask, out, lse, *plan.tail))
    else:
        _forward_launch(query, key, value, attn_mask, out, lse, plan.g, plan.scale, is_causal)


def _decomposes_on_device(reason: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attn_mask: torch.Tensor | None, is_causal: bool, enable_gqa: bool) -> bool:
    """Whether a call the flash kernels decline is one whose math decomposition runs on our kernels:
    an attn_mask that needs its gradient (T5's position bias), or dropout (the op library has dropout),
    on a call that is otherwise supported. Anything else (a dtype without kernels, NaN/Inf values that
    take the exact CPU path, an invalid call whose error torch's CPU SDPA raises) stays on the CPU."""
    if reason == DROPOUT:
        reason = unsupported(query, key, value, attn_mask, 0.0, is_causal, enable_gqa) or ""
        return reason in ("", MASK_GRAD)
    return reason == MASK_GRAD


def _record_decomposed(reason: str) -> None:
    """Count a decomposed call as a device call of SDPA (its ops ran on device kernels, each counted
    too) and say once per reason at INFO why it did not take the flash kernels."""
    _device_counts[SDPA] += 1
    if (SDPA, reason) not in _device_notes:
        _device_notes.add((SDPA, reason))
        from torch_rbln import log

        log.get_logger("fallback").info(
            "`%s` ran as its math decomposition on rbln kernels, not the flash kernels (%s); later "
            "calls for this reason are counted, not logged", SDPA, reason)


def _on_cpu(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
            dropout_p: float, is_causal: bool, scale: float | None, enable_gqa: bool, reason: str) -> Any:
    """PyTorch's CPU SDPA for a declined call (logged and counted under `SDPA` with `reason`). Without
    autograd it runs on zero-copy host views; when a gradient is needed, on differentiable copies."""
    overload = torch.ops.aten.scaled_dot_product_attention.default
    args = (query, key, value, attn_mask, dropout_p, is_causal)
    kwargs = {"scale": scale, "enable_gqa": enable_gqa}
    tensors = [t for t in (query, key, value, attn_mask) if isinstance(t, torch.Tensor)]
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    if not needs_grad:
        return fallback.run_on_cpu(overload, fallback._plan_for(overload), args, kwargs, reason)
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        first, second = sorted(str(d) for d in devices)[:2]
        raise fallback._device_mismatch(first, second)
    (device,) = devices
    fallback.record(SDPA, reason)
    cpu = [t.cpu() if isinstance(t, torch.Tensor) else t for t in args[:4]]
    result = torch.nn.functional.scaled_dot_product_attention(
        *cpu, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    return result.to(device)


# ---------------------------------------------------------------- registration

# (q/k/v shapes, strides and dtypes, is_causal, scale, mask's) -> the plan of a fused-op call (autograd's
# SDPA forward) that ran on the device once: later calls of that structure take its launch
_fused_plans: dict[tuple, _InferencePlan] = BoundedMemo(1024)


def fused_attention_forward_kernel(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                   attn_bias: torch.Tensor | None = None, dropout_p: float = 0.0,
                                   is_causal: bool = False, return_debug_mask: bool = False, *,
                                   scale: float | None = None) -> tuple:
    """The PrivateUse1 kernel of the fused op: a call whose structure ran on the device before takes
    that structure's plan (`_fused_forward`: the same launch, without the geometry, layout and tuner
    work of `fused_attention_forward`); any other call runs `fused_attention_forward`."""
    signed = None
    if dropout_p == 0.0 and not return_debug_mask and type(query) is torch.Tensor and query.dim() == 4:
        signed = _FUSED.signature((query, key, value, attn_bias, is_causal, scale, False), _NONE)
        plan = _fused_plans.get(signed[0])
        if plan is not None:
            result = (plan if plan.programs else _retuned(_fused_plans, _FUSED, signed)).run(signed[1])
            if result is not None:
                return result
    arguments = (query, key, value, attn_bias, dropout_p, is_causal, return_debug_mask)
    result = _run_device(FORWARD, fused_attention_forward, arguments, {"scale": scale})
    if signed is not None and not tracing(query, key, value, attn_bias):
        _fused_plans[signed[0]] = _FUSED.plan(*signed)
    return result


def fused_forward_direct(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attn_bias: torch.Tensor | None = None, dropout_p: float = 0.0,
                         is_causal: bool = False, return_debug_mask: bool = False, *,
                         scale: float | None = None) -> Direct | None:
    """The fused op's kept forward launch for a call of this structure (`_fused_plans`), as a compiled
    graph launches it by address (`plan.Direct`): q, k, v and the mask (q stands in for none), the output
    and the logsumexp, then the plan's int and float arguments; the op's other results (the unused
    zero-size tensor, the sequence lengths) as `extra`. Operands need not be dense (q, k and v are often
    slices of one projection): the caller passes each one's address and the span of elements its strides
    reach, which the kernel's bounds checks take. None while there is no kept launch by address (the
    structure has not run on the device twice, 64-bit arguments, a grid split over a tensor-parallel
    group)."""
    if dropout_p != 0.0 or return_debug_mask or type(query) is not torch.Tensor or query.dim() != 4:
        return None
    plan = _fused_plans.get(_FUSED.signature((query, key, value, attn_bias, is_causal, scale, False), {})[0])
    index = _planned_device(query, key, value, attn_bias)
    if plan is None or index < 0 or plan.programs <= 0 or \
            (plan.programs * plan.rows > 1 and device_tp(index) != 1) or plan.kept() is None or \
            plan.by_address is None:
        return None
    g = plan.g
    args = (("tensor", 0), ("tensor", 1), ("tensor", 2), ("tensor", 0 if attn_bias is None else 3),
            ("out", 0), ("out", 1), *(("value", v) for v in plan.tail))
    outputs = ((tuple(query.shape), tuple(plan.out_strides), query.dtype),
               (plan.lse_shape, tuple(_memory.contiguous_strides(plan.lse_shape)), torch.float32))
    empty = _unused_output(index)
    return Direct(plan.by_address, (plan.grid[0], plan.grid[1], 1), args, outputs,
                  (empty, empty, g.q_len, g.kv_len, empty, empty, empty))


def _fused_forward(plan: _InferencePlan, operands: tuple) -> tuple | None:
    """(q, k, v, mask, is_causal, scale, flag) = `operands`: `fused_attention_forward`'s result for a call
    of `plan`'s structure, counted as it; None when the call needs the general path (operands on several
    devices, a dispatch mode or subclass tensors). Unlike `_inference` it scans no value: the fused op's
    general path runs NaN/Inf operands on the device too (only `scaled_dot_product_attention` sends them
    to the CPU, before calling this op)."""
    query, key, value, attn_bias, is_causal, _, _ = operands
    index = _planned_device(query, key, value, attn_bias)
    if index < 0:
        return None
    if plan.contiguous_out:  # the output and the logsumexp in one allocating call
        out, lse = _memory.empty_pair(query.shape, plan.lse_shape, query.dtype, index, torch.float32)
    else:
        out = _memory.empty_strided(query.shape, plan.out_strides, query.dtype, index)
        lse = _memory.empty(plan.lse_shape, torch.float32, index)
    _planned_launch(plan, index, query, key, value, attn_bias, out, lse, is_causal)
    empty = _unused_output(index)
    g = plan.g
    return out, lse, empty, empty, g.q_len, g.kv_len, empty, empty, empty


# device index -> the zero-size float32 tensor the fused forward returns for the outputs rbln does not
# produce (cum_seq_q/k, philox seed/offset, debug mask)
_unused_outputs: dict[int, torch.Tensor] = {}


def _unused_output(index: int) -> torch.Tensor:
    """The zero-size tensor every fused forward on device `index` returns for its unused outputs: one
    per device instead of an allocation per call. Nothing reads them (the backward ignores them) and a
    zero-size tensor has no element to write. Autograd saves them for the backward, so one that someone
    changed in place or resized (its version moved) or made require grad is replaced for later calls.
    (A backward whose forward saved it before such a change would then report the in-place change, as
    for any saved tensor changed in place.) It is made outside inference mode even in a call under it: an
    inference tensor has no version counter to read, and a later call outside the mode read it."""
    empty = _unused_outputs.get(index)
    if empty is None or empty.is_inference() or empty._version or empty.requires_grad or empty.numel() \
            or empty.dim() != 1:
        with torch.inference_mode(False):
            empty = _unused_outputs[index] = _memory.empty((0,), torch.float32, index)
    return empty


# (grad_out, q, k, v, out and logsumexp shapes, strides and dtypes, is_causal, scale, mask's) -> the kept
# launches of a fused backward that ran on the device once (`_BackwardPlan`); later calls of that
# structure run them directly
_backward_plans: dict[tuple, _BackwardPlan] = BoundedMemo(1024)
_DELTA_ROWS = 1 << 12  # delta scratch kept per plan, device and thread up to this many rows (16 KiB)
_DELTA_THREADS = 8  # threads per plan that get a kept delta scratch (the rest allocate per call)


class _BackwardPlan(Plan):
    """A fused backward structure whose launches the general path has made (`_backward_calls`: the tiny
    kernel alone, or dQ then dK/dV): the kept launches of the tiles the tuner chose (`first`, `second`
    (None for the tiny kernel): `Plan`s, so `clear_cache` resets them), their grids and arguments after
    the tensors (`*_grid`, `*_tail`), and the gradients' layouts (`triple`: `_memory.triple_layout` when
    all three are contiguous, else their strides in `strides`). The dQ kernel writes each row's
    delta = rowsum(dO * O) for the dK/dV kernel of the same call: it goes to a buffer kept per device
    and thread (`scratch`), since a thread's two launches run one after the other and no other call
    writes that buffer in between. The tiny kernel launches by address, with the element counts in
    `spans`."""

    __slots__ = ("first", "second", "first_grid", "second_grid", "first_tail", "second_tail", "triple",
                 "strides", "delta_shape", "scratch", "spans")  # (`run`: `_planned_backward`)


def fused_attention_backward_kernel(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                                    value: torch.Tensor, attn_bias: torch.Tensor | None,
                                    grad_input_mask: list[bool], out: torch.Tensor, logsumexp: torch.Tensor,
                                    cum_seq_q: torch.Tensor, cum_seq_k: torch.Tensor, max_q: int, max_k: int,
                                    dropout_p: float, is_causal: bool, philox_seed: torch.Tensor,
                                    philox_offset: torch.Tensor, *, scale: float | None = None) -> tuple:
    """The PrivateUse1 kernel of the fused backward: a call whose structure ran on the device before
    runs that structure's kept launches (`_BackwardPlan`); any other call runs
    `fused_attention_backward` (which raises for what it cannot compute), after which its launches are
    kept for the next call of that structure."""
    signed = _BACKWARD.signature((grad_out, query, key, value, attn_bias, out, logsumexp, is_causal, scale,
                                  dropout_p, grad_input_mask), {})
    if signed is not None:
        plan = _backward_plans.get(signed[0])
        if plan is not None:
            grads = plan.run(signed[1])
            if grads is not None:
                _device_counts[BACKWARD] += 1
                return grads
    arguments = (grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
                 cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset)
    result = _run_device(BACKWARD, fused_attention_backward, arguments, {"scale": scale})
    if signed is not None:
        plan = _BACKWARD.plan(signed[0], (*signed[1], result[:3]))
        if plan is not None:
            _backward_plans[signed[0]] = plan
    return result


def backward_family() -> Family:
    """The fused backward of one call structure. Its signature takes (dO, q, k, v, mask, out, lse,
    is_causal, scale, dropout_p, grad_input_mask) and keys every tensor's shape, strides and dtype,
    is_causal and scale (None for a call no plan takes: dropout, a mask gradient, a dispatch mode or
    subclass tensors). Its plan is built from the general path's first run of the structure (operands
    followed by the gradients it returned: their layouts, the tuner's kept tiles): `_new_backward_plan`,
    or None where its launches cannot be kept."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        grad_out, query, key, value, attn_bias, out, logsumexp, is_causal, scale, dropout_p, mask = args
        tensor = torch.Tensor
        if type(grad_out) is not tensor or type(query) is not tensor or type(key) is not tensor or \
                type(value) is not tensor or type(out) is not tensor or type(logsumexp) is not tensor or \
                not (attn_bias is None or type(attn_bias) is tensor) or dropout_p != 0.0 or \
                (len(mask) > 3 and mask[3]) or torch._C._len_torch_dispatch_stack():
            return None
        structure = (grad_out.shape, grad_out.stride(), grad_out.dtype, query.shape, query.stride(),
                     query.dtype, key.shape, key.stride(), key.dtype, value.shape, value.stride(),
                     value.dtype, out.shape, out.stride(), out.dtype, logsumexp.shape, logsumexp.stride(),
                     logsumexp.dtype, is_causal, scale)
        if attn_bias is not None:
            structure = (*structure, attn_bias.shape, attn_bias.stride(), attn_bias.dtype)
        return structure, args[:7]

    def plan(key: tuple, operands: tuple) -> _BackwardPlan | None:
        grad_out, query, key_, value, attn_bias, out, logsumexp, grads = operands
        built = _new_backward_plan(grad_out, query, key_, value, attn_bias, out, logsumexp, grads, key[18],
                                   key[19])
        if built is not None:
            built.run = partial(_planned_backward, built)
        return built

    return Family(signature, plan)


def _new_backward_plan(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attn_bias: torch.Tensor | None, out: torch.Tensor, logsumexp: torch.Tensor,
                       grads: Sequence[torch.Tensor], is_causal: bool, scale: float | None
                       ) -> _BackwardPlan | None:
    """The plan of a backward structure the general path just ran (its gradients `grads`), or None when
    its launches cannot be kept: 64-bit arguments, operands that do not each cover exactly their
    elements, or a tuner config that `_launch.tuned` does not keep."""
    g = geometry(query, key, attn_bias)
    index = query.get_device()
    operands = (grad_out, query, key, value, out, logsumexp, *grads) + ((attn_bias,) if attn_bias is not None
                                                                        else ())
    if not all(is_dense_permutation(t.shape, t.stride()) for t in operands):
        return None
    # the delta buffer has the logsumexp's dtype, shape and strides: it stands in for it here
    kept = []
    for tuner, _, tensors, scalars, constexprs in _backward_calls(
            grad_out, query, key, value, attn_bias, out, logsumexp, logsumexp, grads, g, scale, is_causal):
        shape_key, dtypes, fits = _backward_key(g, index, tensors, scalars, constexprs)
        config = _launch.tuned_config(tuner, shape_key)
        if not fits or config is None or config[0][2] != 1:
            return None
        grid, keywords = config
        launch = Plan(tuner.fn, (*dtypes, *keywords.values()), keywords, grid[0], grid[1])
        kept.append((launch, grid[:2], scalars))
    plan = _BackwardPlan()
    plan.first, plan.first_grid, plan.first_tail = kept[0]
    plan.second, plan.second_grid, plan.second_tail = kept[1] if len(kept) > 1 else (None, None, None)
    if all(t.is_contiguous() for t in (query, key, value)):
        plan.triple, plan.strides = _memory.triple_layout(query.shape, key.shape, value.shape), None
    else:
        plan.triple, plan.strides = None, tuple(t.stride() for t in grads)
    plan.delta_shape = tuple(logsumexp.shape)
    plan.scratch = {}
    # the element counts of the tiny kernel's launch by address (every operand is dense: its count is its
    # span), in its tensor order: q, k, v, the mask (q's without one), out, dO, lse, dQ, dK, dV
    q, k, v = query.numel(), key.numel(), value.numel()
    plan.spans = (q, k, v, q if attn_bias is None else attn_bias.numel(), out.numel(), grad_out.numel(),
                  logsumexp.numel(), q, k, v)
    return plan


def _kept(launch: Plan, index: int) -> Callable | None:
    """`launch`'s kept launch, or None for a grid split over a tensor-parallel group (the general path
    splits it) or before one is kept."""
    if launch.programs * launch.rows > 1 and device_tp(index) > 1:
        return None
    run = launch.launcher
    return run if run is not None and launch.backend == requested_backend() else launch.kept()


def _planned_backward(plan: _BackwardPlan, operands: tuple) -> tuple | None:
    """(dO, q, k, v, mask, out, lse) = `operands`: `fused_attention_backward`'s result through `plan`'s
    kept launches, or None when the general path must take the call (operands on several devices, a grid
    split over a tensor-parallel group, no kept launch for the requested backend yet). Written flat: on a
    few elements each Python call on the way to the launches is a measurable share."""
    grad_out, query, key, value, attn_bias, out, logsumexp = operands
    index = query.get_device()
    if index < 0 or key.get_device() != index or value.get_device() != index or \
            grad_out.get_device() != index or out.get_device() != index or \
            logsumexp.get_device() != index or (attn_bias is not None and attn_bias.get_device() != index):
        return None
    first = _kept(plan.first, index)
    second = None if plan.second is None else _kept(plan.second, index)
    if first is None or (second is None and plan.second is not None):
        return None
    dtype = query.dtype
    if plan.triple is not None:
        grad_query, grad_key, grad_value = _memory.empty_triple_of(plan.triple, dtype, index)
    else:
        strides = plan.strides
        grad_query = _memory.empty_strided(query.shape, strides[0], dtype, index)
        grad_key = _memory.empty_strided(key.shape, strides[1], dtype, index)
        grad_value = _memory.empty_strided(value.shape, strides[2], dtype, index)
    mask = query if attn_bias is None else attn_bias
    grid = plan.first_grid
    if second is None:  # the tiny kernel
        by_address = plan.first.by_address
        if by_address is None:
            first(grid[0], grid[1], 1, query, key, value, mask, out, grad_out, logsumexp, grad_query,
                  grad_key, grad_value, *plan.first_tail)
            return grad_query, grad_key, grad_value, None
        sq, sk, sv, sm, so, sg, sl, sdq, sdk, sdv = plan.spans
        if not by_address(grid[0], grid[1], 1, query.data_ptr(), sq, key.data_ptr(), sk, value.data_ptr(), sv,
                          mask.data_ptr(), sm, out.data_ptr(), so, grad_out.data_ptr(), sg,
                          logsumexp.data_ptr(), sl, grad_query.data_ptr(), sdq, grad_key.data_ptr(), sdk,
                          grad_value.data_ptr(), sdv, *plan.first_tail):
            return None  # a fault: the general path re-runs the call and reports it
        return grad_query, grad_key, grad_value, None
    slot = (index, get_ident())
    delta = plan.scratch.get(slot)
    if delta is None:
        delta = _memory.empty(plan.delta_shape, torch.float32, index)
        if len(plan.scratch) < _DELTA_THREADS and delta.numel() <= _DELTA_ROWS:
            plan.scratch[slot] = delta
    first(grid[0], grid[1], 1, query, key, value, mask, out, grad_out, logsumexp, delta, grad_query,
          *plan.first_tail)
    grid = plan.second_grid
    second(grid[0], grid[1], 1, query, key, value, mask, grad_out, logsumexp, delta, grad_key, grad_value,
           *plan.second_tail)
    return grad_query, grad_key, grad_value, None


_NONE: dict = {}  # the keyword arguments the kernels' signature calls pass (never written)
_INFERENCE = forward_family(fused=False)
_FUSED = forward_family(fused=True)
_BACKWARD = backward_family()
