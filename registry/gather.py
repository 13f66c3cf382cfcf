"""The gather family: index_select (an embedding lookup), the embedding weight's gradient, cat and
arange, and their plans (one per call signature, `plan.py`).

Each op's launch is decided once (`index_select_launch`, `embedding_backward_launch`, `cat_pair_launch`,
`arange_launch`) for both the checked implementation (any layout: strided operands are copied first)
and the plans (contiguous rbln operands of the key's dtypes and shapes), so both launch the same
specialisation with the same arguments. cat of three or more inputs copies each into its slice with
the copy kernels' own decision (`_copy`). Indices are range-checked on the host (a compiled scan): an
index out of range takes the CPU fallback, which raises torch's error.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

from torch_rbln import _memory, config
from torch_rbln.tp import device_tp, requested_backend

from . import _copy, _launch
from ._base import require_float
from ._finite_scan import PARALLEL_MIN, all_finite, contiguous_scan
from ._ops import FLOATS, Decline, _device_index, _k, contiguous, empty
from .geometry import I32, block, cdiv, few_tile_shape, row_block, row_stride
from .plan import NO_PLAN, Family, Launch, Plan, contiguous_on, contiguous_rbln

INDICES = (torch.int64, torch.int32)
_NUMBER = (int, float)


# ---------------------------------------------------------------- index_select

def index_select_launch(dtype: torch.dtype, index_dtype: torch.dtype, shape: tuple, dim: int,
                        count: int) -> Launch:
    """The gather of `count` slices along `dim` (wrapped) of a contiguous tensor of `shape`: programs
    over (index, outer block), ints (size, count, inner)."""
    size = shape[dim]
    outer, inner = math.prod(shape[:dim]), math.prod(shape[dim + 1:])
    width = row_block(inner)
    return Launch(_k("embedding").index_select_kernel,
                  (dtype, index_dtype, width, size < I32, count < I32, inner < I32), {"BLOCK": width}, count,
                  outer, (size, count, inner))


# what a gather moves exactly: values are copied, so NaN/Inf are the CPU's and nothing is scanned (an
# embedding lookup scanned the whole table on every call: GPT-2's 50,257 x 768 took 6.6 ms a token)
GATHERED = (*FLOATS, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)


def index_select(x, dim, index_tensor):
    """x.index_select(dim, index) of a float, integer or bool tensor of any rank (an embedding lookup is
    rows of a matrix): one gather launch."""
    if index_tensor.dtype not in INDICES or index_tensor.dim() > 1:
        raise Decline("index dtype/shape")
    if index_tensor.is_cpu:
        raise Decline("CPU index")
    if x.dtype not in GATHERED:
        raise Decline(f"dtype {str(x.dtype).replace('torch.', '')}")
    nd = x.dim()
    if nd == 0:
        raise Decline("zero-dim source")
    if not -nd <= dim < nd:
        raise Decline(f"dim {dim} out of range")
    dim %= nd
    count = index_tensor.numel()
    if count == 0 or x.numel() == 0:
        raise Decline("empty tensor")
    index_tensor = contiguous(index_tensor)
    if not _k("embedding").indices_in_range(index_tensor, x.shape[dim]):
        raise Decline("index out of range")
    x = contiguous(x)
    shape = list(x.shape)
    shape[dim] = count
    out = empty(shape, x.dtype, x.get_device())
    g = index_select_launch(x.dtype, index_tensor.dtype, tuple(x.shape), dim, count)
    _launch.launch(g.kernel, g.programs, g.key, (x, index_tensor, out, *g.ints), g.keywords, rows=g.rows)
    return out


def index_select_family() -> Family:
    """`index_select(x, dim, index)` with a contiguous int64/int32 index of at most one dim on x's
    device, range-checked by the compiled scan."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 3 or kwargs:
            return None
        x, dim, indices = args
        index = contiguous_rbln(x)
        if index < 0 or type(dim) is not int or not contiguous_on(indices, index) or \
                indices.dtype not in INDICES:
            return None
        return (x.dtype, x.shape, dim, indices.dtype, indices.shape, index), (x, indices)

    def plan(key: tuple, operands: tuple) -> Plan:
        dtype, shape, dim, index_dtype, index_shape, index = key
        shape = tuple(shape)
        nd = len(shape)
        count = math.prod(index_shape)
        if dtype not in GATHERED or nd == 0 or not -nd <= dim < nd or len(index_shape) > 1 or count == 0 or \
                not math.prod(shape):
            return NO_PLAN
        dim %= nd
        g = index_select_launch(dtype, index_dtype, shape, dim, count)
        out_shape = shape[:dim] + (count,) + shape[dim + 1:]
        plan = Plan.of(g, out_shape, dtype)
        Em = _k("embedding")
        in_range = Em.in_range_64 if index_dtype is torch.int64 else Em.in_range_32
        size, inner = shape[dim], g.ints[2]
        programs, rows, new = g.programs, g.rows, _memory.allocator(out_shape, dtype, index)
        split = programs * rows > 1

        def run(operands: tuple) -> Tensor | None:
            x, indices = operands
            launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
            if not in_range(indices.data_ptr(), count, size, 0):
                return None  # out of range: the implementation declines (0 stands in for "none ignored")
            out = new()
            if launcher is None or (split and device_tp(index) > 1):
                plan.launch_checked((x, indices, out, size, count, inner))
            else:
                launcher(programs, rows, 1, x, indices, out, size, count, inner)
            return out

        plan.run = run
        return plan

    return Family(signature, plan)


# ---------------------------------------------------------------- embedding backward

def embedding_backward_launch(dtype: torch.dtype, index_dtype: torch.dtype, count: int, dim: int,
                              padding_idx: int, num_weights: int) -> Launch:
    """One program per weight row, summing the grad rows whose index is that row (deterministic, no
    atomics); ints (count, dim, padding_idx)."""
    block_d = min(256, max(16, 1 << (dim - 1).bit_length()))
    ints = (count, dim, padding_idx)
    key = (dtype, index_dtype, block_d, *(abs(v) < I32 for v in ints))
    return Launch(_k("embedding").embedding_backward_kernel, key, {"BLOCK_I": 64, "BLOCK_D": block_d},
                  num_weights, 1, ints)


def embedding_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    """The embedding weight's gradient (`embedding_backward_launch`)."""
    if scale_grad_by_freq:
        raise Decline("scale_grad_by_freq")
    require_float(grad.dtype)
    if indices.dtype not in INDICES or indices.is_cpu:
        raise Decline("index dtype/device")
    dim = grad.shape[-1] if grad.dim() else 0
    count = indices.numel()
    if count == 0 or dim == 0 or num_weights == 0:
        raise Decline("empty tensor")
    if grad.numel() != count * dim:
        raise Decline("grad and indices shapes differ")
    grad, indices = contiguous(grad), contiguous(indices)
    out = empty([num_weights, dim], grad.dtype, grad.get_device())
    g = embedding_backward_launch(grad.dtype, indices.dtype, count, dim, int(padding_idx), num_weights)
    _launch.launch(g.kernel, g.programs, g.key, (grad, indices, out, *g.ints), g.keywords)
    return out


def embedding_backward_family() -> Family:
    """`embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq=False)`
    with contiguous grad and int64/int32 indices on one device."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if len(args) != 5 or kwargs:
            return None
        grad, indices, num_weights, padding_idx, scale = args
        index = contiguous_rbln(grad)
        if index < 0 or scale is not False or type(num_weights) is not int or \
                type(padding_idx) is not int or not contiguous_on(indices, index) or \
                indices.dtype not in INDICES:
            return None
        return ((grad.dtype, grad.shape, indices.dtype, indices.numel(), num_weights, padding_idx, index),
                (grad, indices))

    def plan(key: tuple, operands: tuple) -> Plan:
        dtype, shape, index_dtype, count, num_weights, padding_idx, index = key
        if dtype not in FLOATS or not shape or count == 0 or num_weights <= 0:
            return NO_PLAN
        dim = shape[-1]
        if dim == 0 or math.prod(shape) != count * dim:
            return NO_PLAN
        g = embedding_backward_launch(dtype, index_dtype, count, dim, padding_idx, num_weights)
        out_shape = (num_weights, dim)
        plan = Plan.of(g, out_shape, dtype)
        numel = count * dim
        scan, mask, small = *contiguous_scan(dtype), numel < PARALLEL_MIN  # (inline: per-call cost)
        programs, deploy_mode = g.programs, config.deploy_mode
        new = _memory.allocator(out_shape, dtype, index)

        def run(operands: tuple) -> Tensor | None:
            grad, indices = operands
            launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
            if not deploy_mode() and not (scan(grad.data_ptr(), numel, mask) if small else all_finite(grad)):
                return None
            out = new()
            if launcher is None or (programs > 1 and device_tp(index) > 1):
                plan.launch_checked((grad, indices, out, count, dim, padding_idx))
            else:
                launcher(programs, 1, 1, grad, indices, out, count, dim, padding_idx)
            return out

        plan.run = run
        return plan

    return Family(signature, plan)


# ---------------------------------------------------------------- cat

# Results up to this many elements take the pair kernel (larger ones: a tiled copy per input). A decoding
# step's `cat([cache, new], dim=-2)` of (2, 4, 40, 16) took 50 us as two copies (a view and a launch
# each) against 21 as one pair launch; from (1, 8, 1024, 64) on the copies' wider tiles are ~10% faster.
CAT_PAIR_MAX = 16384


def cat_pair_launch(dtype: torch.dtype, a_shape: tuple, b_shape: tuple, dim: int, total: int,
                    a_stride: int | None = None, b_stride: int | None = None) -> Launch:
    """cat of two inputs whose result has `total` < CAT_PAIR_MAX elements: one launch reading both (a KV
    cache, a residual, RoPE's swapped halves), in `few_tile_shape` tiles of the result's (rows, a's and
    b's elements per row) view; ints (rows, a's and b's elements per index of the dims before, the
    elements between two of a's and of b's rows: `row_stride`, their row lengths when contiguous)."""
    a_inner, b_inner = math.prod(a_shape[dim:]), math.prod(b_shape[dim:])
    width = a_inner + b_inner
    outer = total // width
    block_m, block_n = few_tile_shape(outer, width)
    keywords = {"BLOCK_M": block_m, "BLOCK_N": block_n}
    strides = (a_inner if a_stride is None else a_stride, b_inner if b_stride is None else b_stride)
    return Launch(_k("rows").cat_pair_kernel, (dtype, block_m, block_n), keywords,
                  cdiv(outer, block_m) * cdiv(width, block_n), 1, (outer, a_inner, b_inner, *strides))


def pair_rows(dtype: torch.dtype, layouts: list, dim: int, total: int) -> tuple[int, int] | None:
    """The row strides (`row_stride`) with which `cat_pair_kernel` reads two inputs of `layouts` ((shape,
    strides) each) into a result of `total` elements along `dim`, or None where it does not take them:
    not two inputs, an empty or large result (CAT_PAIR_MAX), bool masks, a view without one row stride,
    offsets beyond 32 bits. The implementation and the plans both ask it."""
    if len(layouts) != 2 or not 0 < total < CAT_PAIR_MAX or dtype is torch.bool:
        return None
    a, b = (row_stride(tuple(shape), tuple(strides), dim) for shape, strides in layouts)
    if a is None or b is None or min(a, b) < 0 or max(a, b) * total >= I32:
        return None
    return a, b


# cat moves values bit for bit (registered exact: NaN and Inf are copied as they are, so no input is
# scanned): float tensors, integer ones (a generated sequence grows by a token per step:
# `cat([input_ids, next_tokens[:, None]], -1)`) and bool masks
CAT_DTYPES = (*FLOATS, torch.int32, torch.int64, torch.bool)


def cat(tensors, dim=0):
    """Two small contiguous inputs: the pair kernel (`cat_pair_launch`; bool masks take the copies).
    Otherwise each input is copied into its slice of the result by the copy kernels (`_copy.copy_into`:
    tiled when large)."""
    tensors = [t for t in tensors if not (t.dim() == 1 and t.numel() == 0)]
    if not tensors:
        raise Decline("only empty tensors")
    ref = tensors[0]
    for t in tensors:
        if t.dtype != ref.dtype:
            raise Decline("mixed dtypes")
        if t.dim() != ref.dim():
            raise Decline("shape mismatch")
    if ref.dtype not in CAT_DTYPES:
        raise Decline(f"dtype {str(ref.dtype).replace('torch.', '')}")
    if ref.dim() == 0:
        raise Decline("zero-dim tensors")
    dim = dim % ref.dim()
    shape = list(ref.shape)
    for t in tensors:
        if [s for i, s in enumerate(t.shape) if i != dim] != [s for i, s in enumerate(shape) if i != dim]:
            raise Decline("shape mismatch")
    shape[dim] = sum(t.shape[dim] for t in tensors)
    out = empty(shape, ref.dtype, _device_index(*tensors))
    total = out.numel()
    rows = pair_rows(ref.dtype, [(tuple(t.shape), t.stride()) for t in tensors], dim, total)
    if rows is not None:
        a, b = tensors
        g = cat_pair_launch(ref.dtype, tuple(a.shape), tuple(b.shape), dim, total, *rows)
        _launch.launch(g.kernel, g.programs, g.key, (a, b, out, *g.ints), g.keywords)
        return out
    offset = 0
    for t in tensors:  # each part is a copy into its slice of the output (tiled when large)
        if t.numel():
            _copy.copy_into(t, out.narrow(dim, offset, t.shape[dim]))
        offset += t.shape[dim]
    return out


def cat_family() -> Family:
    """`cat(tensors, dim=0)` of non-empty contiguous tensors of one dtype (`CAT_DTYPES`) on one device: two
    small inputs in one pair-kernel launch; more (or larger) a copy per input into its slice, as
    `_copy` decides it."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        if kwargs or not 1 <= len(args) <= 2:
            return None
        tensors = args[0]
        dim = args[1] if len(args) == 2 else 0
        kind = type(tensors)
        if (kind is not list and kind is not tuple) or not tensors or type(dim) is not int:
            return None
        first = tensors[0]
        if not isinstance(first, Tensor):
            return None
        index = first.get_device()
        if index < 0:
            return None
        dtype = first.dtype
        shapes = []
        strided = None
        for t in tensors:  # one flat loop: cat of two small tensors is mostly this function's own time
            if not isinstance(t, Tensor) or t.dtype is not dtype or t.get_device() != index:
                return None
            if not t.is_contiguous():
                if len(tensors) != 2:
                    return None
                strided = (tensors[0].stride(), tensors[1].stride())  # (the pair kernel's row strides)
            shapes.append(t.shape)
        return (dtype, tuple(shapes), dim, index, strided), tuple(tensors)

    return Family(signature, _cat_plan)


def _cat_plan(key: tuple, operands: tuple) -> Plan:
    dtype, shapes, dim, index, strided = key
    shapes = [tuple(s) for s in shapes]
    nd = len(shapes[0])
    if dtype not in CAT_DTYPES or nd == 0 or not -nd <= dim < nd:
        return NO_PLAN
    dim %= nd
    ref = [s for i, s in enumerate(shapes[0]) if i != dim]
    for shape in shapes:
        if len(shape) != nd or [s for i, s in enumerate(shape) if i != dim] != ref or not math.prod(shape):
            return NO_PLAN  # (empty inputs: the implementation drops or rejects them)
    out_shape = list(shapes[0])
    out_shape[dim] = sum(shape[dim] for shape in shapes)
    out_shape = tuple(out_shape)
    total = math.prod(out_shape)
    new = _memory.allocator(out_shape, dtype, index)
    layouts = list(zip(shapes, strided or [_memory.contiguous_strides(s) for s in shapes], strict=True))
    rows = pair_rows(dtype, layouts, dim, total)
    if strided is not None and rows is None:
        return NO_PLAN  # a strided pair the pair kernel cannot read: the implementation
    if rows is not None:
        g = cat_pair_launch(dtype, shapes[0], shapes[1], dim, total, *rows)
        plan = Plan.of(g, out_shape, dtype, ())
        programs, ints = g.programs, g.ints
        contiguous = strided is None  # strided inputs take the checked launch, bounded over their spans

        def run_pair(operands: tuple) -> Tensor | None:
            a, b = operands
            launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
            out = new()
            if launcher is None or not contiguous or (programs > 1 and device_tp(index) > 1):
                plan.launch_checked((a, b, out, *ints))
            else:
                launcher(programs, 1, 1, a, b, out, *ints)
            return out

        plan.run = run_pair
        return plan
    out_strides = tuple(_memory.contiguous_strides(out_shape))
    parts = []
    offset = 0
    for shape in shapes:  # the copy kernels' launch of each input into its slice
        geometry = _copy._geometries[(shape, shape, tuple(_memory.contiguous_strides(shape)), out_strides)]
        if type(geometry) is str:
            return NO_PLAN
        parts.append((geometry, offset, shape[dim]))
        offset += shape[dim]
    plan = Plan(shape=out_shape, dtype=dtype, scanned=())
    run_copy = _copy._run

    def run_parts(operands: tuple) -> Tensor | None:
        out = new()
        for (geometry, start, length), t in zip(parts, operands, strict=True):
            run_copy(geometry, t, out.narrow(dim, start, length))
        return out

    plan.run = run_parts
    return plan


# ---------------------------------------------------------------- arange

# PyTorch's CPU arange runs one serial kernel up to this many elements (at::internal::GRAIN_SIZE);
# beyond, its threads' chunk boundaries (which depend on the thread count) decide the rounding.
ARANGE_ONE_CHUNK = 32768


def arange_vector_layout(dtype: torch.dtype, n: int) -> tuple[int, int]:
    """(LANES, n_vec) of `arange_kernel`: PyTorch's CPU kernel makes floating values in vectors of 32 bytes
    (its AVX2 kernel, also used on AVX512 hosts), two vectors per loop step, and the remaining elements
    one by one; integers are exact either way."""
    if not dtype.is_floating_point:
        return 1, 0
    lanes = 32 // dtype.itemsize
    return lanes, n // (2 * lanes) * (2 * lanes)


def split_double(value: float) -> tuple[float, float, float]:
    """Three float32 values whose float64 sum is `value` exactly (24 + 24 + 5 of a double's 53 bits), for
    kernels that need a double but receive float scalars as float32 (`arange_kernel`)."""
    value = float(value)
    return (value, 0.0, 0.0) if value == 0.0 else _split_nonzero(value)  # (a zero keeps its sign)


@functools.lru_cache(maxsize=1024)  # an arange's bounds repeat from call to call
def _split_nonzero(value: float) -> tuple[float, float, float]:
    import numpy as np

    hi = float(np.float32(value))
    mid = float(np.float32(value - hi))
    lo = float(np.float32(value - hi - mid))
    return hi, mid, lo


def splits_exactly(value: float) -> bool:
    """Whether `split_double(value)` sums back to `value`: true unless a part would be a float32
    subnormal (|value| far below 1e-30) or overflow (beyond 3e38)."""
    return sum(split_double(value)) == float(value) if value else True


def arange_launch(dtype: torch.dtype, n: int) -> Launch:
    """`arange_kernel` writing n values of `dtype`; ints (n, n_vec)."""
    size = block(n)
    lanes, n_vec = arange_vector_layout(dtype, n)
    return Launch(_k("elementwise").arange_kernel, (dtype, size, n < I32, lanes),
                  {"BLOCK": size, "LANES": lanes}, cdiv(n, size), 1, (n, n_vec))


def _arange_values(start: float, end: float, step: float) -> str | None:
    """Why the kernel cannot make this arange exactly as the CPU does, or None."""
    if step == 0:
        return "zero step"
    if not (math.isfinite(start) and math.isfinite(end) and math.isfinite(step)):
        return "bounds not finite"  # torch's error from the CPU
    if _inconsistent(start, end, step):
        return "bounds inconsistent with the step's sign"  # torch's error from the CPU
    if abs(start) > 2 ** 24 or abs(end) > 2 ** 24:
        return "values beyond exact float range"
    if not (splits_exactly(start) and splits_exactly(step)):
        return "bounds too small for an exact float32 split"
    return None


def arange(start, end, step=1, out=None):
    """arange into an rbln `out=`: one launch (`arange_launch`)."""
    if out is None or out.is_cpu:
        raise Decline("no rbln out=")
    if out.dtype not in (*INDICES, *FLOATS):
        raise Decline(f"dtype {str(out.dtype).replace('torch.', '')}")
    start, end, step = (v.item() if isinstance(v, Tensor) else v for v in (start, end, step))
    reason = _arange_values(start, end, step)
    if reason is not None:
        raise Decline(reason)
    n = _arange_length(start, end, step)  # (a valid range: `_arange_values` found no reason)
    if out.dtype.is_floating_point and n > ARANGE_ONE_CHUNK:
        raise Decline("float arange longer than one CPU chunk (its rounding depends on the CPU threads)")
    if list(out.shape) != [n]:
        out.resize_([n])
    if n:
        if not out.is_contiguous():
            raise Decline("non-contiguous output")
        g = arange_launch(out.dtype, n)
        _launch.launch(g.kernel, g.programs, g.key, (out, *g.ints, *split_double(start), *split_double(step)),
                       g.keywords)
    return out


def arange_result(start, end, step, dtype, layout, pin_memory) -> tuple[int, torch.dtype]:
    """(length, dtype) of `aten::arange.start_step`'s result (`torch.arange(n, device="rbln")`, every
    generation step's cache positions), so that the factory allocates it once and its `arange.start_out`
    call takes the plan (torch's composite kernel allocated an empty tensor and resized it inside that
    call: ~40 us). The dtype as torch infers it (int64 when every bound is integral, else the default
    dtype). Length 0 where this is not sure of torch's (a tensor bound, a non-strided layout, pinned
    memory, an invalid range): the out= call then resizes it, or raises torch's error."""
    kinds = (type(start), type(end), type(step))
    if dtype is None:
        integral = all(kind is int or kind is bool for kind in kinds)
        dtype = torch.int64 if integral else torch.get_default_dtype()
    n = _arange_length(start, end, step) if all(kind in _NUMBER for kind in kinds) else None
    if n is None or layout not in (None, torch.strided) or pin_memory:
        n = 0
    return n, dtype


def _arange_length(start, end, step) -> int | None:
    """The length torch gives an arange of Python-number bounds: exact for ints, ceil((end - start) / step)
    in double precision otherwise (as ATen's `compute_arange_size`); None for a zero step or a bound that
    is not finite (torch's errors)."""
    if step == 0 or not (math.isfinite(start) and math.isfinite(end) and math.isfinite(step)) or \
            _inconsistent(start, end, step):
        return None
    if type(start) is not float and type(end) is not float and type(step) is not float:
        return -((start - end) // step)
    return math.ceil((float(end) - float(start)) / float(step))


def _inconsistent(start, end, step) -> bool:
    """torch's "upper bound and lower bound inconsistent with step sign" (an empty range is fine)."""
    return (step > 0 and end < start) or (step < 0 and end > start)


def arange_family() -> Family:
    """`arange.start_out(start, end, step=1, *, out)` with Python-number bounds into a contiguous rbln
    `out` that already has the result's length (nothing is read, so nothing is scanned)."""

    def signature(args: tuple, kwargs: dict) -> tuple | None:
        count = len(args)
        if not 2 <= count <= 3 or len(kwargs) != 1:
            return None
        out = kwargs.get("out")
        start, end = args[0], args[1]
        step = args[2] if count == 3 else 1
        if type(start) not in _NUMBER or type(end) not in _NUMBER or type(step) not in _NUMBER:
            return None
        n = _arange_length(start, end, step)
        if n is None:
            return None  # a zero step, a bound not finite, an inconsistent sign: torch's error
        index = contiguous_rbln(out)
        if index < 0 or out.dim() != 1:
            return None
        if out.shape[0] != n:
            return None  # out= needs a resize: the implementation
        return (out.dtype, n, index), (start, end, step, out)

    def plan(key: tuple, operands: tuple) -> Plan:
        dtype, n, index = key
        if dtype not in (*INDICES, *FLOATS) or n <= 0 or (dtype.is_floating_point and n > ARANGE_ONE_CHUNK):
            return NO_PLAN
        g = arange_launch(dtype, n)
        plan = Plan.of(g, (n,), dtype, ())
        programs, (n_, n_vec) = g.programs, g.ints

        def run(operands: tuple) -> Tensor | None:
            start, end, step, out = operands
            if abs(start) > 2 ** 24 or abs(end) > 2 ** 24:
                return None  # the implementation declines it (as `_arange_values`)
            s0, s1, s2 = split_double(start)
            t0, t1, t2 = split_double(step)
            if (start and s0 + s1 + s2 != start) or t0 + t1 + t2 != step:
                return None  # a bound without an exact float32 split (`splits_exactly`)
            launcher = plan.launcher if plan.backend == requested_backend() else plan.kept()
            if launcher is None or (programs > 1 and device_tp(index) > 1):
                plan.launch_checked((out, n_, n_vec, s0, s1, s2, t0, t1, t2))
            else:
                launcher(programs, 1, 1, out, n_, n_vec, s0, s1, s2, t0, t1, t2)
            return out

        plan.run = run
        return plan

    return Family(signature, plan)
