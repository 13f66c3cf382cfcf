"""Device-to-device copies (`clone`, `.contiguous()`, `.to(dtype)`, `copy_` into views) on the strided copy
kernel, counted as `aten::_copy_from` in the fallback report.

Host<->rbln transfers stay host memcpy (that is the DMA of a simulated NPU). A copy between two rbln
tensors is device work: it runs on `kernels/elementwise.strided_copy_kernel`, which reads the source
and writes the destination through their own strides (up to four collapsed dims) and converts the
dtype on the way. Copies it cannot express take the host path, recorded with the reason.
"""

from __future__ import annotations

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false

from torch_rbln import fallback

from . import _launch
from ._ops import _I32, InvalidCall, _block, _cdiv, _collapse, _expanded_strides, _k

NAME = "aten::_copy_from"
_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool})


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    """[first byte, last byte + 1) that `tensor`'s elements can touch."""
    extent = sum((size - 1) * abs(stride) for size, stride in zip(tensor.shape, tensor.stride(), strict=True))
    start = tensor.data_ptr()
    return start, start + (extent + 1) * tensor.element_size()


def _overlap(src: torch.Tensor, dst: torch.Tensor) -> str | None:
    """None when the copy may run as is; "same" for a copy onto itself; else why the host must do it.

    Mirrors torch's `assert_no_overlap` for copy_: two dense tensors whose memory intersects are an
    error (raised here with torch's message, since our host views hide the aliasing from torch); for
    strided views that merely span each other (x[::2] vs x[1::2]) torch cannot tell either, and the
    host copy keeps its element order."""
    if src.untyped_storage().data_ptr() != dst.untyped_storage().data_ptr():
        return None
    (s0, s1), (d0, d1) = _span(src), _span(dst)
    if s1 <= d0 or d1 <= s0:
        return None
    if (s0, s1) == (d0, d1) and src.dtype == dst.dtype and src.stride() == dst.stride() \
            and src.shape == dst.shape:
        return "same"
    if is_non_overlapping_and_dense_or_false(src) and is_non_overlapping_and_dense_or_false(dst):
        raise InvalidCall(
            "unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
            "single memory location. Please clone() the tensor before performing the operation."
        )
    return "source and destination overlap"


def _unsupported(src: torch.Tensor, dst: torch.Tensor) -> str | None:
    for tensor in (src, dst):
        if tensor.dtype not in _DTYPES:
            return f"dtype {str(tensor.dtype).replace('torch.', '')}"
    return _overlap(src, dst)


def copy_on_device(src: torch.Tensor, dst: torch.Tensor) -> bool:
    """Copy `src` (broadcastable to `dst`) into `dst`, both rbln; False when the host must do it."""
    if dst.numel() == 0:
        return False
    reason = _unsupported(src, dst)
    if reason == "same":
        return True  # copying a tensor onto itself changes nothing
    if reason is None:
        shape = list(dst.shape)
        sizes, (src_strides, dst_strides) = _collapse(shape, [_expanded_strides(src, shape),
                                                              list(dst.stride())])
        if len(sizes) > 4:
            reason = f"more than 4 non-mergeable dims ({len(sizes)})"
    if reason is not None:
        fallback.record(NAME, reason)
        return False
    if not sizes:  # a single element
        sizes, src_strides, dst_strides = [1], [0], [0]
    pad = 4 - len(sizes)
    sizes = [1] * pad + sizes
    src_strides, dst_strides = [0] * pad + src_strides, [0] * pad + dst_strides
    n = dst.numel()
    block = _block(n)
    kernel = _k("elementwise").strided_copy_kernel
    args = (src, dst, 0, n, *sizes[1:], *src_strides, *dst_strides)
    programs = _cdiv(n, block)
    if max(n, *map(abs, src_strides), *map(abs, dst_strides)) < _I32:
        # every int argument fits in 32 bits, so dtypes and block determine the specialisation: the
        # launch kept under that key skips the general launch's per-argument key (a clone's copy)
        key = (src.dtype, dst.dtype, block)
        run = _launch.dense_unchecked(kernel, key, (src, dst), programs)
        if run is not None:
            run(programs, 1, 1, *args)  # `.contiguous()` of a transpose: a dense source, not contiguous
        else:
            _launch.launch(kernel, programs, key, args, {"BLOCK": block})
    else:
        kernel[(_cdiv(n, block),)](*args, BLOCK=block)
    from . import _device_counts

    _device_counts[NAME] += 1
    return True
