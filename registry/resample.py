"""Nearest and linear (1-3d) upsampling and reflection / replication padding, as gathers along each
resized dim, and their backwards as scatter_adds.

Why gathers: every output element of these ops is one input element, chosen per dim by an index that
depends only on the sizes (and the scale), never on the values. So the last two dims are one launch of
`kernels/resample.py`'s plane gather (a third dim before them one `index_select`), with index vectors
computed here on the host, once per geometry, and kept on the device (`_indices`). The results are the
input's values moved, bitwise the CPU's, NaN and Inf included. A diffusion UNet's
`F.interpolate(scale_factor=2)` and a CNN's `F.pad(mode="reflect")` went to the CPU fallback before.

The host computes the source index as PyTorch's CPU kernels do (aten/src/ATen/native/UpSample.h):
`nearest`: the output index itself when the size is unchanged, half of it when the size doubles, else
`min(floorf(i * scale), size - 1)` in float32 with `scale` = 1 / scale_factor when one is given, else
in_size / out_size; `nearest-exact`: `min(floorf((i + 0.5) * scale), size - 1)`, the product formed in
float64 as C++ forms `(i + 0.5) * scale` and rounded to float for `floorf`. Linear modes gather two
sources per output and dim and sum them with torch's float32 weights (`linear_sources`): not moved
values, so an ulp from the CPU's sums is possible (tolerances in the tests), and NaN/Inf are scanned.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ._base import Decline, require_float
from ._launch import launch_grid
from ._memo import BoundedMemo
from ._ops import _k, contiguous, empty, fill_floats
from .gather import index_select
from .geometry import cdiv

_indices: dict[tuple, Tensor] = BoundedMemo(256)  # (kind, sizes..., device index) -> rbln int64 indices
# kinds of sources that never decrease (`nearest_sources`, `replicated_sources`); a reflection pad's turn
# back at its edges
_ASCENDING = frozenset({"nearest", "replicate"})


@functools.lru_cache(maxsize=256)  # per geometry: calls of one shape reuse it
def nearest_sources(in_size: int, out_size: int, scale: float | None, exact: bool = False) -> np.ndarray:
    """Torch's source index of each of `out_size` outputs of a nearest-neighbour resize of `in_size`."""
    if not exact and out_size == in_size:
        return np.arange(out_size, dtype=np.int64)
    if not exact and out_size == 2 * in_size:
        return np.arange(out_size, dtype=np.int64) >> 1
    ratio = np.float32(1.0 / scale) if scale is not None and scale > 0 else \
        np.float32(in_size) / np.float32(out_size)
    if exact:
        position = np.float32((np.arange(out_size, dtype=np.float64) + 0.5) * np.float64(ratio))
    else:
        position = np.arange(out_size, dtype=np.int64).astype(np.float32) * ratio
    return np.minimum(np.floor(position).astype(np.int64), in_size - 1)


@functools.lru_cache(maxsize=256)  # per geometry: calls of one shape reuse it
def reflected_sources(size: int, before: int, after: int) -> np.ndarray:
    """The source index of each output of a reflection pad (the edge itself not repeated)."""
    source = np.abs(np.arange(-before, size + after, dtype=np.int64))
    return np.where(source >= size, 2 * (size - 1) - source, source)


@functools.lru_cache(maxsize=256)  # per geometry: calls of one shape reuse it
def replicated_sources(size: int, before: int, after: int) -> np.ndarray:
    """The source index of each output of a replication pad (the edge repeated)."""
    return np.clip(np.arange(-before, size + after, dtype=np.int64), 0, size - 1)


def _device_indices(key: tuple, sources: np.ndarray, index: int) -> Tensor:
    """`sources` (int64 indices) as a tensor on rbln:`index`, kept under `key`."""
    indices = _indices.get((*key, index))
    if indices is None:
        indices = _indices[(*key, index)] = torch.from_numpy(sources).to(f"rbln:{index}")
    return indices


def _device_weights(key: tuple, weights: np.ndarray, which: int, dtype: torch.dtype, index: int,
                    compute: torch.dtype | None = None) -> Tensor:
    """A dim's tap weights on the device, rounded to `dtype` as torch's kernel stores them (then held as
    `compute`, the kernels' float32, when given), kept per geometry."""
    memo_key = (*key, "weight", which, dtype, compute, index)
    device_weights = _indices.get(memo_key)
    if device_weights is None:
        rounded = torch.from_numpy(weights).to(dtype)
        device_weights = _indices[memo_key] = (rounded if compute is None else rounded.to(compute)).to(
            f"rbln:{index}")
    return device_weights


@functools.lru_cache(maxsize=256)  # per geometry: calls of one shape reuse it
def linear_sources(in_size: int, out_size: int, align_corners: bool, scale: float | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(first source, second source, first weight, second weight) of each of `out_size` outputs of a
    linear resize of `in_size`, as torch's CPU kernels compute them in float32
    (`compute_source_index_and_lambda`: the half-pixel source clamped at 0 without `align_corners`)."""
    outputs = np.arange(out_size, dtype=np.int64)
    if out_size == in_size:
        return outputs, outputs, np.ones(out_size, np.float32), np.zeros(out_size, np.float32)
    if align_corners:
        ratio = np.float32(in_size - 1) / np.float32(out_size - 1) if out_size > 1 else np.float32(0)
        real = ratio * outputs.astype(np.float32)
    else:
        ratio = np.float32(1.0 / scale) if scale is not None and scale > 0 else \
            np.float32(in_size) / np.float32(out_size)
        half = np.float32(0.5)
        real = np.maximum(ratio * (outputs.astype(np.float32) + half) - half, np.float32(0))
    first = np.minimum(np.floor(real).astype(np.int64), in_size - 1)
    second_weight = np.clip(real - first.astype(np.float32), np.float32(0), np.float32(1)).astype(np.float32)
    second = first + (first < in_size - 1)
    return first, second, (np.float32(1) - second_weight).astype(np.float32), second_weight


def _added_back(parts: Sequence[tuple[Tensor, Tensor]], dim: int, size: int) -> Tensor:
    """Zeros of `size` along `dim` (the parts' shape elsewhere) with each (values, sources) part's values
    added at its sources along `dim` (scatter_add: in float32, in output order). Along the last dim the
    parts are transposed first, since the scatter kernel runs one lane per element there: a 128-wide
    last dim of 1M gradients took 17 ms, against 0.6 ms along the dim before it."""
    from .conv import scatter_add

    last = dim == parts[0][0].dim() - 1 and dim > 0
    if last:
        parts = [(contiguous(values.transpose(-1, -2)), sources) for values, sources in parts]
        dim -= 1
    like = parts[0][0]
    shape = list(like.shape)
    shape[dim] = size
    view = [1] * like.dim()
    view[dim] = -1
    summed = fill_floats(empty(shape, like.dtype, like.get_device()), 0.0)
    for values, sources in parts:
        scatter_add(summed, dim, sources.view(view).expand(values.shape), values, inplace=True)
    return contiguous(summed.transpose(-1, -2)) if last else summed


def _scattered_back(grad: Tensor, sizes: Sequence[int], per_dim: Sequence[tuple[tuple, np.ndarray | None]]
                    ) -> Tensor:
    """The gradient of `_gathered` for inputs of trailing `sizes`: per resized dim, each output's
    gradient added to its source (`_added_back`)."""
    require_float(grad.dtype)
    if grad.numel() == 0:
        raise Decline("empty tensor")
    first = grad.dim() - len(per_dim)
    last = len(per_dim)
    if grad.dim() >= 2 and all(sources is None or key[0] in _ASCENDING for key, sources in per_dim[-2:]):
        grad = _run_sums(grad, per_dim[-2:], sizes[-2:])  # the last two dims at once, in torch's order
        last = max(0, len(per_dim) - 2)
    for offset in reversed(range(last)):
        key, sources = per_dim[offset]
        if sources is not None:
            grad = _added_back([(grad, _device_indices(key, sources, grad.get_device()))], first + offset,
                               sizes[offset])
    return grad if grad.is_contiguous() else contiguous(grad)


def _run_sums(grad: Tensor, last: Sequence[tuple[tuple, np.ndarray | None]], sizes: Sequence[int]) -> Tensor:
    """The gradient of the last one or two gathered dims of a plane gather whose sources never decrease
    (nearest, replication pads): each input sums its run of outputs, rows then columns, in one launch
    of `run_sum_plane_kernel` (no index of the gradient's size, no transposed copies)."""
    index = grad.get_device()
    pairs = [((), None)] * (2 - len(last)) + list(last)
    in_sizes = [grad.shape[-2], *sizes] if len(last) == 1 else list(sizes)
    tables, longest = [], []
    for (key, sources), out_size, in_size in zip(pairs, (grad.shape[-2], grad.shape[-1]), in_sizes,
                                                 strict=True):
        if sources is None:
            sources = np.arange(out_size, dtype=np.int64)
            key = ("identity", out_size)
        start, count, most = _runs(key, sources, in_size, index)
        tables += [start, count]
        longest.append(most)
    grad = contiguous(grad)
    out = empty((*grad.shape[:-2], *in_sizes), grad.dtype, index)
    rows, columns = tables[:2], tables[2:]  # (start, count) each; the unread first/w0/w1 tables alias them
    _launch_planes("run_sum_plane_kernel", grad, out, (*rows, *rows, rows[0], *columns, *columns, columns[0]),
                   extra=tuple(longest), WEIGHTED=False)
    return out


def _runs(key: tuple, sources: np.ndarray, in_size: int, index: int, reach_back: bool = False
          ) -> tuple[Tensor, Tensor, int]:
    """(first output, output count, the longest count) per input of the non-decreasing `sources` kept
    under `key`: the outputs whose source is the input (`reach_back`: the input or its predecessor, a
    linear resize's two taps); the tables on rbln:`index`, made once per geometry."""
    memo_key = (*key, "runs", in_size, reach_back, index)
    runs = _run_tables.get(memo_key)
    if runs is None:
        inputs = np.arange(in_size)
        start = np.searchsorted(sources, inputs - 1 if reach_back else inputs, side="left").astype(np.int64)
        count = np.searchsorted(sources, inputs, side="right").astype(np.int64) - start
        device = f"rbln:{index}"
        runs = _run_tables[memo_key] = (torch.from_numpy(start).to(device),
                                        torch.from_numpy(count).to(device), int(count.max(initial=0)))
    return runs


_run_tables: dict[tuple, tuple[Tensor, Tensor, int]] = BoundedMemo(256)


def _identity(size: int, index: int) -> Tensor:
    return _device_indices(("identity", size), np.arange(size, dtype=np.int64), index)


def _plane_gather(x: Tensor, rows: Tensor | None, cols: Tensor | None) -> Tensor:
    """x[..., rows, :][..., cols] (None: that dim as it is) in one launch of the plane gather kernel over
    the last two dims (every caller's x has at least two)."""
    x = contiguous(x)
    index = x.get_device()
    height, width = x.shape[-2], x.shape[-1]
    rows = _identity(height, index) if rows is None else rows
    cols = _identity(width, index) if cols is None else cols
    out_height, out_width = rows.numel(), cols.numel()
    out = empty((*x.shape[:-2], out_height, out_width), x.dtype, index)
    if out.numel():
        _launch_planes("gather_plane_kernel", x, out, (rows, cols))
    return out


def _gathered(x: Tensor, per_dim: Sequence[tuple[tuple, np.ndarray | None]]) -> Tensor:
    """`x` gathered along its last len(per_dim) dims, each by its (key, sources) (None: unchanged): a dim
    before the last two by `index_select` (whole planes per index: long copies), the last two together
    by one plane gather."""
    require_float(x.dtype)
    if x.numel() == 0:
        raise Decline("empty tensor")
    index = x.get_device()
    first = x.dim() - len(per_dim)
    result = x
    for offset, (key, sources) in enumerate(per_dim[:-2]):
        if sources is not None:
            result = index_select(result, first + offset, _device_indices(key, sources, index))
    tail = [(None, None)] * (2 - len(per_dim)) + list(per_dim[-2:])
    (row_key, row_sources), (col_key, col_sources) = tail
    if row_sources is None and col_sources is None:
        return result if result is not x else x.clone()
    rows = None if row_sources is None else _device_indices(row_key, row_sources, index)
    cols = None if col_sources is None else _device_indices(col_key, col_sources, index)
    return _plane_gather(result, rows, cols)


def _scales(scales: tuple, output_size: Sequence[int]) -> tuple:
    """One scale (or None) per resized dim: torch leaves trailing default scales out of a call."""
    if len(scales) > len(output_size) or any(int(s) <= 0 for s in output_size):
        raise Decline("sizes")  # torch's error, from the CPU
    return (*scales, *(None,) * (len(output_size) - len(scales)))


def _nearest_dims(input_size: Sequence[int], output_size: Sequence[int], scales: tuple, exact: bool
                  ) -> list[tuple[tuple, np.ndarray | None]]:
    """(key, sources) per resized dim of a nearest resize (None where the size is unchanged)."""
    scales = _scales(scales, output_size)
    per_dim = []
    for in_size, out_size, scale in zip(input_size, output_size, scales, strict=True):
        in_size, out_size = int(in_size), int(out_size)
        changed = exact or out_size != in_size
        per_dim.append((("nearest", exact, in_size, out_size, scale),
                        nearest_sources(in_size, out_size, scale, exact) if changed else None))
    return per_dim


def upsample_nearest(x: Tensor, output_size: Sequence[int], *scales: float | None, exact: bool = False
                     ) -> Tensor:
    """`upsample_nearest{1,2,3}d` (`exact`: `_upsample_nearest_exact{1,2,3}d`) of the last
    len(output_size) dims of `x` to `output_size`; `scales` are the scale factors the caller gave."""
    if x.dim() != len(output_size) + 2:
        raise Decline("sizes")  # torch's error, from the CPU
    return _gathered(x, _nearest_dims(x.shape[2:], output_size, scales, exact))


def upsample_nearest_backward(grad: Tensor, output_size: Sequence[int], input_size: Sequence[int],
                              *scales: float | None, exact: bool = False) -> Tensor:
    """The `upsample_nearest{1,2,3}d_backward` (`exact`: `_upsample_nearest_exact..._backward`) of an
    input of `input_size` (all dims) resized to `output_size`."""
    spatial = len(output_size)
    if grad.dim() != spatial + 2 or len(input_size) != grad.dim() or list(grad.shape[2:]) != \
            [int(s) for s in output_size] or list(grad.shape[:2]) != [int(s) for s in input_size[:2]]:
        raise Decline("sizes")  # torch's error, from the CPU
    per_dim = _nearest_dims(input_size[2:], output_size, scales, exact)
    return _scattered_back(grad, [int(s) for s in input_size[2:]], per_dim)


def pad(x: Tensor, padding: Sequence[int], *, reflect: bool) -> Tensor:
    """`reflection_pad{1,2,3}d` (`reflect`) or `replication_pad{1,2,3}d`: `padding` holds (before,
    after) pairs from the last dim backwards, as `F.pad`'s."""
    return _gathered(x, _pad_dims(x, padding, reflect))


def pad_backward(grad: Tensor, x: Tensor, padding: Sequence[int], *, reflect: bool) -> Tensor:
    """`reflection_pad{1,2,3}d_backward` / `replication_pad{1,2,3}d_backward` of input `x`."""
    per_dim = _pad_dims(x, padding, reflect)
    if list(grad.shape) != [x.shape[d] for d in range(x.dim() - len(per_dim))] + \
            [len(sources) if sources is not None else x.shape[d] for d, (_, sources) in
             enumerate(per_dim, x.dim() - len(per_dim))]:
        raise Decline("sizes")  # torch's error, from the CPU
    return _scattered_back(grad, list(x.shape[x.dim() - len(per_dim):]), per_dim)


def _pad_dims(x: Tensor, padding: Sequence[int], reflect: bool) -> list[tuple[tuple, np.ndarray | None]]:
    """(key, sources) per padded dim of a reflection or replication pad (None where nothing is added)."""
    padding = [int(p) for p in padding]
    dims = len(padding) // 2
    if len(padding) % 2 or x.dim() < dims + 1 or any(p < 0 for p in padding):
        raise Decline("padding")  # negative pads crop, and torch's errors come from the CPU
    per_dim = []
    for dim in range(x.dim() - dims, x.dim()):
        size = x.shape[dim]
        before, after = padding[2 * (x.dim() - 1 - dim)], padding[2 * (x.dim() - 1 - dim) + 1]
        if reflect and (before >= size or after >= size):
            raise Decline("reflection pad not smaller than the input")  # torch's error, from the CPU
        if before == after == 0:
            per_dim.append(((), None))
            continue
        sources = (reflected_sources if reflect else replicated_sources)(size, before, after)
        per_dim.append((("reflect" if reflect else "replicate", size, before, after), sources))
    return per_dim


def _linear_dims(input_size: Sequence[int], output_size: Sequence[int], align_corners: bool, scales: tuple
                 ) -> list[tuple | None]:
    """Per resized dim of a linear resize: (key, its `linear_sources`), None where the size is kept."""
    scales = _scales(scales, output_size)
    return [None if int(in_size) == int(out_size) else _linear_entry(in_size, out_size, align_corners, scale)
            for in_size, out_size, scale in zip(input_size, output_size, scales, strict=True)]


def _linear_entry(in_size: int, out_size: int, align_corners: bool, scale: float | None) -> tuple:
    """(key, `linear_sources`) of one dim of a linear resize (a kept size: taps (i, i), weights (1, 0))."""
    in_size, out_size = int(in_size), int(out_size)
    return (("linear", in_size, out_size, bool(align_corners), scale),
            linear_sources(in_size, out_size, bool(align_corners), scale))


def _weights(key: tuple, weights: np.ndarray, which: int, dim: int, like: Tensor) -> Tensor:
    """`_device_weights` in `like`'s dtype, shaped to broadcast along `dim` of `like`."""
    view = [1] * like.dim()
    view[dim] = -1
    return _device_weights(key, weights, which, like.dtype, like.get_device()).view(view)


def _tap(x: Tensor, dim: int, sources: Tensor) -> Tensor:
    """x gathered along `dim` by `sources`: a plane gather for the last two dims, else index_select."""
    if dim == x.dim() - 1:
        return _plane_gather(x, None, sources)
    if dim == x.dim() - 2:
        return _plane_gather(x, sources, None)
    return index_select(x, dim, sources)


def upsample_linear(x: Tensor, output_size: Sequence[int], align_corners: bool, *scales: float | None
                    ) -> Tensor:
    """`upsample_linear1d`, `upsample_bilinear2d`, `upsample_trilinear3d`, in the order in which torch's
    CPU kernel nests its sums: the last two dims in one launch of `linear_plane_kernel` (per output,
    the last dim's two taps, then the rows' two), then a depth's two slices gathered and summed with
    their weights on the elementwise kernels."""
    from .elementwise import binary

    if x.dim() != len(output_size) + 2:
        raise Decline("sizes")  # torch's error, from the CPU
    require_float(x.dtype)
    if x.numel() == 0:
        raise Decline("empty tensor")
    scales = _scales(scales, output_size)
    per_dim = _linear_dims(x.shape[2:], output_size, align_corners, scales)
    result = _linear_last_two(x, per_dim[-2:], output_size, align_corners, scales)
    index = x.get_device()
    for offset in reversed(range(len(per_dim) - 2)):
        if per_dim[offset] is None:
            continue
        key, (first, second, w0, w1) = per_dim[offset]
        dim = 2 + offset
        near, far = (_tap(result, dim, _device_indices((*key, which), sources, index))
                     for which, sources in ((0, first), (1, second)))
        result = binary("add", binary("mul", near, _weights(key, w0, 0, dim, x)),
                        binary("mul", far, _weights(key, w1, 1, dim, x)))
    return result if result is not x else x.clone()


def _linear_last_two(x: Tensor, last: Sequence[tuple | None], output_size: Sequence[int],
                     align_corners: bool, scales: tuple) -> Tensor:
    """The linear resize of x's last dim and, for 2-d and 3-d modes, the one before it (`last`: their
    `_linear_dims` entries) in one `linear_plane_kernel` launch. A kept size's taps are (i, i) with
    weights (1, 0), as torch's kernel computes it too."""
    if all(entry is None for entry in last):
        return x
    x = contiguous(x)
    index = x.get_device()
    height, width = x.shape[-2], x.shape[-1]
    out_width = int(output_size[-1])
    resize_rows = len(last) == 2
    out_height = int(output_size[-2]) if resize_rows else height
    dims = [(last[-1], width, out_width, scales[-1])]
    if resize_rows:
        dims.append((last[0], height, out_height, scales[-2]))
    taps = []
    for entry, size, out_size, scale in dims:
        key, sources = entry if entry is not None else _linear_entry(size, out_size, align_corners, scale)
        taps += [_device_indices((*key, which), sources[which], index) for which in (0, 1)]
        taps += [_device_weights(key, sources[2 + which], which, x.dtype, index, torch.float32)
                 for which in (0, 1)]
    columns, rows = taps[:4], taps[4:] if resize_rows else taps[:1] * 4  # (rows unread without RESIZE_ROWS)
    out = empty((*x.shape[:-2], out_height, out_width), x.dtype, index)
    _launch_planes("linear_plane_kernel", x, out, (*rows, *columns), RESIZE_ROWS=resize_rows)
    return out


def _launch_planes(name: str, x: Tensor, out: Tensor, tables: tuple, extra: tuple = (), **constexprs) -> None:
    """`kernels/resample.py`'s `name` over the planes of x (..., height, width) and out (..., out_height,
    out_width), with its index and weight `tables` (and `extra` ints after the sizes): programs of up to
    BLOCK_ELEMENTS outputs, a row block of one plane each."""
    kernels = _k("resample")
    height, width, out_height, out_width = x.shape[-2], x.shape[-1], out.shape[-2], out.shape[-1]
    block_w = max(16, min(128, 1 << (out_width - 1).bit_length()))
    block_h = max(1, min(1 << (out_height - 1).bit_length(), kernels.BLOCK_ELEMENTS // block_w))
    launch_grid(getattr(kernels, name), (cdiv(out_height, block_h), x.numel() // (height * width)),
                (x, *tables, out, height, width, out_height, out_width, *extra),
                **constexprs, BLOCK_H=block_h, BLOCK_W=block_w)


def upsample_linear_backward(grad: Tensor, output_size: Sequence[int], input_size: Sequence[int],
                             align_corners: bool, *scales: float | None) -> Tensor:
    """The backward of `upsample_linear`: a depth's gradient times its two weights added to its two
    sources (`_added_back`), then the last two dims' in one launch (`_linear_run_sums`)."""
    from .elementwise import binary

    if grad.dim() != len(output_size) + 2 or len(input_size) != grad.dim() or \
            list(grad.shape[2:]) != [int(s) for s in output_size]:
        raise Decline("sizes")  # torch's error, from the CPU
    require_float(grad.dtype)
    if grad.numel() == 0:
        raise Decline("empty tensor")
    scales = _scales(scales, output_size)
    per_dim = _linear_dims(input_size[2:], output_size, align_corners, scales)
    index = grad.get_device()
    for offset, entry in enumerate(per_dim[:-2]):  # a depth first: the forward resized it last
        if entry is None:
            continue
        key, (first, second, w0, w1) = entry
        dim = 2 + offset
        parts = [(binary("mul", grad, _weights(key, weights, which, dim, grad)),
                  _device_indices((*key, which), sources, index))
                 for which, (sources, weights) in enumerate(((first, w0), (second, w1)))]
        grad = _added_back(parts, dim, int(input_size[dim]))
    last = per_dim[-2:]
    if any(entry is not None for entry in last):
        in_sizes = [int(s) for s in input_size[-len(last):]]
        grad = _linear_run_sums(grad, last, in_sizes, align_corners, scales[-len(last):])
    return grad if grad.is_contiguous() else contiguous(grad)


def _linear_run_sums(grad: Tensor, last: Sequence[tuple | None], in_sizes: Sequence[int], align_corners: bool,
                     scales: tuple) -> Tensor:
    """The gradient of `_linear_last_two` in one launch of `run_sum_plane_kernel` (WEIGHTED): each input
    sums the outputs whose first source is it or its predecessor (a contiguous run: the sources never
    decrease) times their taps' weights. A kept size's taps are (i, i) with weights (1, 0)."""
    index = grad.get_device()
    grad = contiguous(grad)
    dims = [(None, grad.shape[-2], grad.shape[-2], None)] if len(last) == 1 else []
    dims += [(entry, in_size, out_size, scale) for entry, in_size, out_size, scale in
             zip(last, in_sizes, grad.shape[-len(last):], scales, strict=True)]
    tables, longest = [], []
    for entry, in_size, out_size, scale in dims:  # rows, then columns
        key, (first, _, w0, w1) = entry if entry is not None else _linear_entry(in_size, out_size,
                                                                                 align_corners, scale)
        start, count, most = _runs(key, first, in_size, index, reach_back=True)
        tables += [start, count, _device_indices((*key, 0), first, index),
                   *(_device_weights(key, w, which, grad.dtype, index, torch.float32)
                     for which, w in enumerate((w0, w1)))]
        longest.append(most)
    out = empty((*grad.shape[:-2], dims[0][1], dims[1][1]), grad.dtype, index)
    _launch_planes("run_sum_plane_kernel", grad, out, tuple(tables), extra=tuple(longest), WEIGHTED=True)
    return out
