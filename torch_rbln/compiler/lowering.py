"""ATen -> DSL expressions: which FX nodes a fused kernel can compute, and how.

Every fused value is computed in float32 (or as a block of booleans for comparisons) and rounded once,
when a kernel stores it, to the output's dtype, as TorchInductor does. Operands are variable names of
the generated kernel (one assignment per FX node) or Python scalars from the graph, written as float
literals. The expressions propagate NaN like PyTorch (maximum/minimum/relu/clamp/amax are written so
that a NaN operand wins), so fused kernels need no NaN/Inf pre-check.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

__all__ = [
    "FUSABLE_DTYPES", "Unsupported", "PointwiseRule", "ReductionRule", "pointwise_rule", "reduction_rule",
    "literal", "clones_for_cats_of_one_tensor", "copies_for_lifted_constants",
]

aten = torch.ops.aten

FUSABLE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class Unsupported(Exception):
    """This node cannot be computed inside a fused kernel (the reason is for DEBUG logs)."""


def literal(value: Any) -> str:
    """A graph scalar as a DSL float literal (inf and NaN spelled so that the frontend parses them)."""
    if isinstance(value, bool):
        return "1.0" if value else "0.0"
    if not isinstance(value, (int, float)):
        raise Unsupported(f"non-scalar constant {value!r}")
    value = float(value)
    if math.isnan(value):
        return 'float("nan")'
    if math.isinf(value):
        return 'float("inf")' if value > 0 else '-float("inf")'
    return repr(value)


# An emitter gets the node's positional args, its kwargs, and `operand(value, kind)`, which turns an arg
# (an fx.Node or a Python scalar) into an expression of `kind` "f" (float32) or "b" (boolean).
Operand = Callable[[Any, str], str]
Emitter = Callable[[Sequence[Any], dict, Operand], str]


@dataclass(frozen=True)
class PointwiseRule:
    """How one pointwise ATen overload becomes an expression; `boolean`: the result is a comparison."""

    emit: Emitter
    tensor_args: tuple[int, ...]  # positions of the arguments that may be tensors
    boolean: bool = False


@dataclass(frozen=True)
class ReductionRule:
    """A reduction over a suffix of dims: `combine` is sum/max/min; `mean` divides by the row length."""

    combine: str
    mean: bool = False


def _alpha(args: Sequence[Any], kwargs: dict) -> Any:
    """add/sub/rsub's alpha: keyword-only in the Tensor overloads, the third positional argument of the
    Scalar ones."""
    return kwargs.get("alpha", args[2] if len(args) > 2 else 1)


def _binary(symbol: str) -> Emitter:
    def emit(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
        alpha = _alpha(args, kwargs)
        b = operand(args[1], "f")
        if alpha != 1:
            b = f"{literal(alpha)} * {b}"
        return f"{operand(args[0], 'f')} {symbol} {b}"

    return emit


def _plain(symbol: str) -> Emitter:
    def emit(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
        return f"{operand(args[0], 'f')} {symbol} {operand(args[1], 'f')}"

    return emit


def _div(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
    if kwargs.get("rounding_mode") is not None:
        raise Unsupported(f"div rounding_mode={kwargs['rounding_mode']!r}")
    return f"{operand(args[0], 'f')} / {operand(args[1], 'f')}"


def _rsub(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
    alpha = _alpha(args, kwargs)
    a = operand(args[0], "f")
    if alpha != 1:
        a = f"{literal(alpha)} * {a}"
    return f"{operand(args[1], 'f')} - {a}"


def _unary(template: str) -> Emitter:
    def emit(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
        return template.format(x=operand(args[0], "f"))

    return emit


def _compare(symbol: str) -> Emitter:
    def emit(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
        return f"{operand(args[0], 'f')} {symbol} {operand(args[1], 'f')}"

    return emit


def _tanh(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
    """`tl.tanh`: the numba backend lowers it to `tanh32`, float32 arithmetic that vectorises (the
    Taylor/exp expression this emitted while it was libm's scalar tanhf is no longer needed)."""
    return f"tl.tanh({operand(args[0], 'f')})"


def _gelu(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
    x = operand(args[0], "f")
    approximate = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
    if approximate == "tanh":
        # 0.5 * (1 + tanh(u)) == sigmoid(2u): one vectorisable exp, no cancellation
        return f"{x} * tl.sigmoid(1.5957691216057308 * ({x} + 0.044715 * {x} * {x} * {x}))"
    if approximate != "none":
        raise Unsupported(f"gelu approximate={approximate!r}")
    return f"0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476))"


def _pow(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
    x = operand(args[0], "f")
    exponent = args[1]
    if isinstance(exponent, bool) or not isinstance(exponent, (int, float)):
        raise Unsupported("pow with a tensor exponent")
    forms = {
        0.5: f"tl.sqrt({x})", -0.5: f"tl.rsqrt({x})", -1.0: f"1.0 / {x}", 1.0: x,
        0.0: f"tl.where({x} == {x}, 1.0, 1.0)",  # 1 for every x, inf and NaN too (x * 0 + 1 was NaN there)
        2.0: f"{x} * {x}", 3.0: f"{x} * {x} * {x}", 4.0: f"({x} * {x}) * ({x} * {x})",
        -2.0: f"1.0 / ({x} * {x})",
    }
    form = forms.get(float(exponent))
    if form is None:
        raise Unsupported(f"pow exponent {exponent!r}")
    return form


def _where(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
    return f"tl.where({operand(args[0], 'b')}, {operand(args[1], 'f')}, {operand(args[2], 'f')})"


def _extremum(symbol: str) -> Emitter:
    def emit(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
        a, b = operand(args[0], "f"), operand(args[1], "f")
        return f"tl.where(({a} {symbol} {b}) | ({a} != {a}), {a}, {b})"

    return emit


def _clamp(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
    x = operand(args[0], "f")
    low = kwargs.get("min", args[1] if len(args) > 1 else None)
    high = kwargs.get("max", args[2] if len(args) > 2 else None)
    if isinstance(low, fx.Node) or isinstance(high, fx.Node):
        raise Unsupported("clamp with tensor bounds")
    # as the eager kernel: min(max(x, low), high) keeping a NaN x; min > max gives max everywhere
    low, high = -math.inf if low is None else low, math.inf if high is None else high
    nan = "propagate_nan=tl.PropagateNan.ALL"
    return f"tl.minimum(tl.maximum({x}, {literal(low)}, {nan}), {literal(high)}, {nan})"


def _identity(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
    return operand(args[0], "f")


def _to_copy(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
    """A cast inside a fused chain: values stay float32, so a cast to a half type is rounded to it here
    (`x.half().float()` is not `x`); float32 (or no dtype) is the value itself."""
    extra = set(kwargs) - {"dtype", "memory_format", "layout", "device", "pin_memory"}
    if extra:
        raise Unsupported(f"_to_copy with {sorted(extra)}")
    dtype, x = kwargs.get("dtype"), operand(args[0], "f")
    if dtype in (None, torch.float32):
        return x
    if dtype in (torch.float16, torch.bfloat16):
        return f"{x}.to(tl.{str(dtype).removeprefix('torch.')}).to(tl.float32)"
    raise Unsupported(f"_to_copy to {dtype}")


def _logical_not(args: Sequence[Any], kwargs: dict, operand: Operand) -> str:
    return f"{operand(args[0], 'f')} == 0.0"


_T0, _T01, _T012 = (0,), (0, 1), (0, 1, 2)

POINTWISE: dict[Any, PointwiseRule] = {
    aten.add.Tensor: PointwiseRule(_binary("+"), _T01),
    aten.add.Scalar: PointwiseRule(_binary("+"), _T0),
    aten.sub.Tensor: PointwiseRule(_binary("-"), _T01),
    aten.sub.Scalar: PointwiseRule(_binary("-"), _T0),
    aten.rsub.Scalar: PointwiseRule(_rsub, _T0),
    aten.rsub.Tensor: PointwiseRule(_rsub, _T01),
    aten.mul.Tensor: PointwiseRule(_plain("*"), _T01),
    aten.mul.Scalar: PointwiseRule(_plain("*"), _T0),
    aten.div.Tensor: PointwiseRule(_div, _T01),
    aten.div.Scalar: PointwiseRule(_div, _T0),
    aten.div.Tensor_mode: PointwiseRule(_div, _T01),
    aten.neg.default: PointwiseRule(_unary("-{x}"), _T0),
    aten.exp.default: PointwiseRule(_unary("tl.exp({x})"), _T0),
    aten.log.default: PointwiseRule(_unary("tl.log({x})"), _T0),
    aten.sqrt.default: PointwiseRule(_unary("tl.sqrt({x})"), _T0),
    aten.rsqrt.default: PointwiseRule(_unary("tl.rsqrt({x})"), _T0),
    aten.sigmoid.default: PointwiseRule(_unary("tl.sigmoid({x})"), _T0),
    aten.tanh.default: PointwiseRule(_tanh, _T0),
    aten.erf.default: PointwiseRule(_unary("tl.erf({x})"), _T0),
    aten.sin.default: PointwiseRule(_unary("tl.sin({x})"), _T0),
    aten.cos.default: PointwiseRule(_unary("tl.cos({x})"), _T0),
    aten.abs.default: PointwiseRule(_unary("tl.abs({x})"), _T0),
    aten.reciprocal.default: PointwiseRule(_unary("1.0 / {x}"), _T0),
    aten.relu.default: PointwiseRule(_unary("tl.where({x} < 0.0, 0.0, {x})"), _T0),
    aten.silu.default: PointwiseRule(_unary("{x} * tl.sigmoid({x})"), _T0),
    aten.gelu.default: PointwiseRule(_gelu, _T0),
    aten.pow.Tensor_Scalar: PointwiseRule(_pow, _T0),
    aten.where.self: PointwiseRule(_where, _T012),
    aten.maximum.default: PointwiseRule(_extremum(">"), _T01),
    aten.minimum.default: PointwiseRule(_extremum("<"), _T01),
    aten.clamp.default: PointwiseRule(_clamp, _T0),
    aten.clone.default: PointwiseRule(_identity, _T0),
    aten._to_copy.default: PointwiseRule(_to_copy, _T0),
    aten.logical_not.default: PointwiseRule(_logical_not, _T0, boolean=True),
    aten.gt.Tensor: PointwiseRule(_compare(">"), _T01, boolean=True),
    aten.gt.Scalar: PointwiseRule(_compare(">"), _T0, boolean=True),
    aten.ge.Tensor: PointwiseRule(_compare(">="), _T01, boolean=True),
    aten.ge.Scalar: PointwiseRule(_compare(">="), _T0, boolean=True),
    aten.lt.Tensor: PointwiseRule(_compare("<"), _T01, boolean=True),
    aten.lt.Scalar: PointwiseRule(_compare("<"), _T0, boolean=True),
    aten.le.Tensor: PointwiseRule(_compare("<="), _T01, boolean=True),
    aten.le.Scalar: PointwiseRule(_compare("<="), _T0, boolean=True),
    aten.eq.Tensor: PointwiseRule(_compare("=="), _T01, boolean=True),
    aten.eq.Scalar: PointwiseRule(_compare("=="), _T0, boolean=True),
    aten.ne.Tensor: PointwiseRule(_compare("!="), _T01, boolean=True),
    aten.ne.Scalar: PointwiseRule(_compare("!="), _T0, boolean=True),
}

REDUCTIONS: dict[Any, ReductionRule] = {
    aten.sum.dim_IntList: ReductionRule("sum"),
    aten.sum.default: ReductionRule("sum"),
    aten.mean.dim: ReductionRule("sum", mean=True),
    aten.mean.default: ReductionRule("sum", mean=True),
    aten.amax.default: ReductionRule("max"),
    aten.amin.default: ReductionRule("min"),
}


def pointwise_rule(node: fx.Node) -> PointwiseRule | None:
    return POINTWISE.get(node.target) if node.op == "call_function" else None


def reduction_rule(node: fx.Node) -> ReductionRule | None:
    return REDUCTIONS.get(node.target) if node.op == "call_function" else None


def reduction_dims(node: fx.Node, rank: int) -> tuple[tuple[int, ...], bool]:
    """(reduced dims, normalised and sorted; keepdim) of a reduction node (all dims when none given)."""
    args, kwargs = node.args, node.kwargs
    if node.target in (aten.sum.default, aten.mean.default):
        dims: Any = None
        keepdim = False
    else:
        dims = kwargs.get("dim", args[1] if len(args) > 1 else None)
        keepdim = bool(kwargs.get("keepdim", args[2] if len(args) > 2 else False))
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank)), keepdim
    if isinstance(dims, int):
        dims = [dims]
    if rank == 0:
        return (), keepdim
    return tuple(sorted({d % rank for d in dims})), keepdim


def _reduced_count(x: torch.Tensor, dim: Any) -> int:
    if dim is None:
        return x.numel()
    dims = [dim] if isinstance(dim, int) else list(dim)
    count = 1
    for d in dims:
        count *= x.shape[d]
    return count


def _var_mean(x: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False):
    """var_mean as two row reductions (mean, then the sum of squared deviations), so that it fuses with
    its producers and consumers (layer norm)."""
    dims = list(range(x.dim())) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    correction = 1 if correction is None else correction
    mean_kept = aten.mean.dim(x, dims, True)
    deviation = aten.sub.Tensor(x, mean_kept)
    squares = aten.mul.Tensor(deviation, deviation)
    divisor = max(_reduced_count(x, dims) - correction, 0)
    var = aten.div.Tensor(aten.sum.dim_IntList(squares, dims, keepdim), divisor)
    mean = mean_kept if keepdim else aten.mean.dim(x, dims, False)
    return var, mean


def _var(x: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False):
    return _var_mean(x, dim, correction=correction, keepdim=keepdim)[0]


def decompositions() -> dict:
    """AOTAutograd's decomposition table: PyTorch's core ATen set, plus layer norm and (log-)softmax
    (forward and backward) down to reductions and pointwise ops, so they fuse with their neighbours
    (a residual add with the layer norm after it, an attention mask with its softmax). Built once per
    process (it took ~0.15 s of every graph's compile) and copied per caller."""
    return dict(_decompositions())


@functools.cache
def _decompositions() -> dict:
    from torch._decomp import core_aten_decompositions, get_decompositions

    table = dict(core_aten_decompositions())
    table.update(get_decompositions([
        aten.native_layer_norm, aten.native_layer_norm_backward, aten._softmax, aten._log_softmax,
        aten._softmax_backward_data, aten._log_softmax_backward_data,
    ]))
    table[aten.var_mean.correction] = _var_mean
    table[aten.var.correction] = _var
    return table


def copies_for_lifted_constants(gm: fx.GraphModule) -> int:
    """Rewrite ``lift_fresh_copy`` nodes as ``clone``; returns how many.

    A constant tensor built in the model's forward (``torch.tensor(...)``) enters the traced graph as
    ``lift_fresh_copy(_tensor_constant)``: the proxy tracer keeps that op (no decomposition applies to it),
    and it has no rbln kernel, so every call ran it on the CPU fallback. It is a plain copy."""
    replaced = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is aten.lift_fresh_copy.default:
            node.target = aten.clone.default
            replaced += 1
    if replaced:
        gm.recompile()
    return replaced


def clones_for_cats_of_one_tensor(gm: fx.GraphModule) -> int:
    """Rewrite ``cat`` nodes of one non-empty tensor and empty ones as a contiguous ``clone`` of that
    tensor; returns how many.

    A key/value cache that starts empty makes one per layer and cache (Hugging Face's DynamicCache:
    ``cat([past, new], dim=-2)`` with an empty ``past``). As a clone it is a pointwise node: it fuses
    into the kernel that computes the new keys (RoPE), which then stores them where the cache's result
    lives, instead of a kernel storing them and a copy moving them there."""
    replaced = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not aten.cat.default:
            continue
        tensors, meta = node.args[0], node.meta.get("val")
        values = [t.meta.get("val") if isinstance(t, fx.Node) else None for t in tensors]
        if not isinstance(meta, torch.Tensor) or not meta.is_contiguous() or \
                not all(isinstance(v, torch.Tensor) for v in values):
            continue
        full = [(t, v) for t, v in zip(tensors, values, strict=True) if v.numel()]
        if len(full) != 1 or full[0][1].dtype != meta.dtype or tuple(full[0][1].shape) != tuple(meta.shape):
            continue
        node.target = aten.clone.default
        node.args = (full[0][0],)
        node.kwargs = {"memory_format": torch.contiguous_format}
        replaced += 1
    if replaced:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return replaced
