"""The per-call NaN/Inf check of device-kernel inputs (SPEC-device.md, "NaN/Inf checks and deploy mode").

Why a compiled scan: the check runs on every registered-op call outside deploy mode, so it must cost
next to nothing on a 4-element tensor (a DLPack host view plus `tolist()` took ~10 us) and stay one
memory pass on a large one (`torch.aminmax` made two result tensors and two `.item()` calls). A value
is NaN or Inf exactly when its exponent bits are all ones, so the scan reads the raw bits (float32,
float16 and bfloat16 alike) at the tensor's host address: no copy, no float compare, and a branch-free
inner loop that LLVM vectorises. Tensors that are not contiguous are checked through a host view
(only the elements the view reaches count: a NaN elsewhere in the storage must not matter).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

# (unsigned view width, exponent mask) per floating dtype the device kernels take.
_EXPONENT = {
    torch.float32: (32, 0x7F800000),
    torch.float16: (16, 0x7C00),
    torch.bfloat16: (16, 0x7F80),
}
_scans: list = []  # [all_finite_32, all_finite_16] once loaded


def _scan(width: int):
    if not _scans:
        from . import _finite_numba

        _scans.extend(_finite_numba.entry_points())
    return _scans[0] if width == 32 else _scans[1]


def all_finite(tensor: torch.Tensor) -> bool:
    """True when no element of `tensor` (rbln or CPU, float32/float16/bfloat16) is NaN or +-Inf."""
    numel = tensor.numel()
    if numel == 0:
        return True
    exponent = _EXPONENT.get(tensor.dtype)
    if exponent is not None and (tensor.is_contiguous() or _dense_permutation(tensor)):
        # An rbln tensor's data_ptr() is its host address (rbln memory is host memory, see _memory).
        width, mask = exponent
        if numel >= PARALLEL_MIN and not tensor.is_cpu:
            return _parallel(tensor, width, mask, numel)
        return _scan(width)(tensor.data_ptr(), numel, mask)
    return _finite_strided(tensor)


def contiguous_scan(dtype: torch.dtype) -> tuple[Callable[[int, int, int], bool], int]:
    """`(scan, mask)`: `scan(tensor.data_ptr(), numel, mask)` is `all_finite(tensor)` for a contiguous
    tensor of `dtype` (float32/float16/bfloat16) with fewer than PARALLEL_MIN elements. For callers that
    have made those checks already (the registry's fast paths): the check is then one compiled call."""
    width, mask = _EXPONENT[dtype]
    return _scan(width), mask


def _dense_permutation(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is a permutation of a contiguous block (a transpose, such as `linear`'s
    `weight.t()`): its `numel` elements are then exactly the block at its data pointer, which the scan
    may read in memory order. torch's `is_non_overlapping_and_dense_or_false` answers the same for a
    tensor with elements, but through symbolic-shape guards: a fifth of a small `linear` call."""
    return is_dense_permutation(tensor.shape, tensor.stride())


def is_dense_permutation(sizes, strides) -> bool:
    """Whether a tensor of `sizes` (no zero) and `strides` covers a contiguous block exactly once: its
    dims sorted by stride (size-1 dims aside) are row-major."""
    expected = 1
    dims = sorted((stride, size) for size, stride in zip(sizes, strides, strict=True) if size != 1)
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


PARALLEL_MIN = 1 << 20  # elements from which the scan is split over a tensor-parallel group's NPUs


def _parallel(tensor: torch.Tensor, width: int, mask: int, numel: int) -> bool:
    """The scan of a large tensor split over the NPUs its kernels would use (the tensor-parallel size of
    its device), so that the check keeps pace with a kernel that is split the same way."""
    from torch_rbln.dsl.backends.numba_backend.executable import _workers

    from torch_rbln.tp import device_tp as _device_tp

    scan = _scan(width)
    address = tensor.data_ptr()
    tp = _device_tp(tensor.get_device())
    if tp <= 1:
        return scan(address, numel, mask)
    itemsize = width // 8
    bounds = [numel * k // tp for k in range(tp + 1)]
    futures = [_workers(tp - 1).submit(scan, address + bounds[k] * itemsize, bounds[k + 1] - bounds[k], mask)
               for k in range(1, tp)]
    first = scan(address, bounds[1], mask)
    return all([future.result() for future in futures]) and first


def _finite_strided(tensor: torch.Tensor) -> bool:
    from torch_rbln import _dlpack

    host = tensor if tensor.is_cpu else _dlpack.to_host_view(tensor)
    low, high = torch.aminmax(host.float() if host.dtype not in _EXPONENT else host)
    return math.isfinite(low.item()) and math.isfinite(high.item())
