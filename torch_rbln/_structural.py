"""Kernels every PyTorch device must supply itself: allocation, copies, views, resize, scalars.

View-like ops are the CPU kernels re-dispatched with our tensors: they only manipulate metadata
(sizes, strides, storage offset) and keep the storage, so rbln views share the base's storage
exactly as CUDA views do.
"""

from __future__ import annotations

import ctypes
import math
import threading
import warnings
from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet
from torch._prims_common import is_non_overlapping_and_dense_or_false

from . import _dlpack, _memory, _runtime, config, fallback

_CPU_KEYS = DispatchKeySet(DispatchKey.CPU)
aten = torch.ops.aten


def _target_index(device: Any) -> int:
    if device is None:
        from .device_module import current_device

        return current_device()
    device = torch.device(device)
    if device.index is None:
        from .device_module import current_device

        return current_device()
    return _runtime.check_index(device.index)


def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return _memory.empty_strided(size, stride, dtype or torch.get_default_dtype(), _target_index(device))


def new_empty_strided(self, size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    """`x.new_empty_strided(...)` (SDPA's math decomposition calls it): self's dtype and device unless
    given."""
    index = self.get_device() if device is None else _target_index(device)
    return _memory.empty_strided(size, stride, dtype or self.dtype, index)


def empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    if memory_format in (None, torch.contiguous_format, torch.preserve_format):
        if all(s >= 0 for s in size):  # negative sizes: empty_strided raises torch's error
            return _memory.empty(size, dtype or torch.get_default_dtype(), _target_index(device))
        strides = _memory.contiguous_strides(size)
    else:
        strides = torch.empty(size, device="meta", memory_format=memory_format).stride()
    return _memory.empty_strided(size, strides, dtype or torch.get_default_dtype(), _target_index(device))


_non_blocking_warned = threading.Event()


def _check_non_blocking() -> None:
    if config.fallback_disabled("non_blocking_copy"):
        raise RuntimeError(
            "non_blocking=True copies to or from RBLN are disabled (TORCH_RBLN_DISABLE_FALLBACK contains "
            "'non_blocking_copy' or 'all'). Use non_blocking=False, or remove that token."
        )
    if not _non_blocking_warned.is_set():
        _non_blocking_warned.set()
        warnings.warn(
            "torch_rbln: non_blocking=True copies run synchronously on RBLN devices "
            "(execution is synchronous; the copy has completed when the call returns).",
            UserWarning,
            stacklevel=3,
        )


def _host(tensor: torch.Tensor) -> torch.Tensor:
    return tensor if tensor.is_cpu else _dlpack.to_host_view(tensor)


def copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """Copies in every direction (cpu<->rbln, rbln:i->rbln:j), with dtype conversion and broadcasting."""
    if non_blocking:
        _check_non_blocking()
    if not (self.is_cpu or dst.is_cpu):
        if _device_copy(self, dst):  # device-to-device: the strided copy kernel
            return dst
    elif _same_layout_transfer(self, dst):
        return dst
    _host(dst).copy_(_host(self))
    return dst


_memmove = ctypes.memmove


def _same_layout_transfer(src: torch.Tensor, dst: torch.Tensor) -> bool:
    """A host<->rbln copy between contiguous tensors of one dtype and shape as one memmove (the bytes
    the host-view copy would move, without building two host views, ~2 us on a small tensor). False,
    having done nothing, for any other copy (a cast, a broadcast, strides, conj/neg bits)."""
    if src.dtype is not dst.dtype or src.shape != dst.shape or not src.is_contiguous() or \
            not dst.is_contiguous():
        return False
    if src.is_neg() or src.is_conj() or dst.is_neg() or dst.is_conj() or src._is_zerotensor():
        return False
    nbytes = src.nbytes
    if nbytes:
        _memmove(dst.data_ptr(), src.data_ptr(), nbytes)
    return True


def clone(self: torch.Tensor, *, memory_format=None) -> torch.Tensor:
    """`aten::clone` for rbln, bound directly: torch's composite clone reaches a device as two Python
    calls (`empty_strided`, then `copy_` -> `_copy_from`), three for `.contiguous()`. Here the result is
    allocated as torch's composite would (the source's strides for a dense source and the preserve
    format, else the asked format) and filled by one device copy."""
    if self.is_neg() or self.is_conj() or self._is_zerotensor():
        result = torch.empty_like(self, memory_format=memory_format or torch.preserve_format)
        return result.zero_() if self._is_zerotensor() else result.copy_(self)
    if memory_format is torch.contiguous_format:
        result = _memory.empty(self.shape, self.dtype, self.get_device())
    elif (memory_format is None or memory_format is torch.preserve_format) and \
            (self.is_contiguous() or is_non_overlapping_and_dense_or_false(self)):
        # row-major strides (the common case) take the plain allocation inside
        result = _memory.empty_strided(self.shape, self.stride(), self.dtype, self.get_device())
    else:
        result = torch.empty_like(self, memory_format=memory_format or torch.preserve_format)
    if not _device_copy(self, result, fresh=True):
        _host(result).copy_(_host(self))
    return result


def lift_fresh_copy(self: torch.Tensor) -> torch.Tensor:
    """`aten::lift_fresh_copy`, a copy of a constant made in a compiled forward (`torch.tensor(...)`):
    fake-tensor tracing runs it on the real constant, which had it on the CPU fallback at every compile
    of a Llama (compiled graphs rewrite it as `clone` themselves, `lowering.copies_for_lifted_constants`)."""
    return clone(self)


def _no_device_copy(src: torch.Tensor, dst: torch.Tensor, *, fresh: bool = False) -> bool:
    """Until the op library registers its copy kernels: no device copy (the host copy runs)."""
    return False


# `copy_on_device(src, dst, *, fresh=False) -> bool`: the op library's device-to-device copy, True when
# it copied. The registry sets it (`set_device_copy`), so this runtime module never imports the registry.
_device_copy = _no_device_copy


def set_device_copy(function) -> None:
    global _device_copy
    _device_copy = function
_to_copy_composite = aten._to_copy.default._handle.redispatch_boxed  # the CPU slot: torch's composite


def to_copy(self: torch.Tensor, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
            memory_format=None) -> torch.Tensor:
    """`aten::_to_copy` (`.to(dtype)`, `.to("rbln")`, `.cpu()`, `.float()`) with an rbln source or target
    (the device argument takes part in its dispatch), bound directly: torch's composite reaches a device
    as two Python calls (`empty_strided`, then `_copy_from`). A contiguous source copied to a contiguous
    result on its own device (the copy kernel casts), from the CPU to rbln or back (one memmove, or a
    host cast) is one call here; every other case (another rbln device, a layout or memory format,
    pinned memory, non_blocking, conj/neg bits, meta tensors) runs torch's composite unchanged."""
    if layout in (None, torch.strided) and not pin_memory and not non_blocking and \
            memory_format in (None, torch.preserve_format, torch.contiguous_format) and self.is_contiguous() \
            and not (self.is_neg() or self.is_conj() or self._is_zerotensor() or self.is_meta):
        dtype = self.dtype if dtype is None else dtype
        source = self.get_device()  # -1: a CPU tensor with an rbln device argument
        target = _target_device(device, source)
        if target is not None and target >= 0:
            result = _memory.empty(self.shape, dtype, target)
            if source == target:
                if not _device_copy(self, result, fresh=True):
                    _host(result).copy_(_host(self))
                return result
            if source == -1:
                if not _same_layout_transfer(self, result):
                    _host(result).copy_(self)
                return result
        elif target == -1 and source >= 0:
            result = torch.empty(self.shape, dtype=dtype)
            if not _same_layout_transfer(self, result):
                result.copy_(_host(self))
            return result
    return _to_copy_composite(_CPU_KEYS, self, dtype=dtype, layout=layout, device=device,
                              pin_memory=pin_memory, non_blocking=non_blocking, memory_format=memory_format)


def _target_device(device: Any, index: int) -> int | None:
    """`_to_copy`'s target: an rbln device index, -1 (the CPU) or None (anything else); no `device`
    means the source's own (`index`)."""
    if device is None:
        return index
    device = torch.device(device)
    if device.type == "cpu":
        return -1
    if device.type != "rbln":
        return None
    return _target_index(device)


def copy_from_and_resize(self: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if dst.shape != self.shape:
        dst.resize_(self.shape)
    _host(dst).copy_(_host(self))
    return dst


_set_storage = aten.set_.source_Storage_storage_offset._handle.redispatch_boxed
_resize_cpu = aten.resize_.default._handle.redispatch_boxed


def resize_(self: torch.Tensor, size, memory_format=None) -> torch.Tensor:
    """Resize in place; growing past the storage allocates a new rbln storage and keeps the old bytes.
    Metadata changes are the CPU kernels' (`set_`, `resize_`), called below autograd as this kernel is."""
    strides = _memory._row_major(tuple(size))
    if strides is None:  # a negative size: the CPU kernel raises torch's error
        return _resize_cpu(_CPU_KEYS, self, size, memory_format=memory_format)
    offset = self.storage_offset()
    needed = (math.prod(size) + offset) * self.dtype.itemsize
    storage = self.untyped_storage()
    old = storage.nbytes()
    if needed > old:
        grown = _memory.empty((needed,), torch.uint8, self.get_device())
        if old:
            old_bytes = torch.empty(0, dtype=torch.uint8, device=self.device).set_(storage)
            _dlpack.to_host_view(grown)[:old].copy_(_dlpack.to_host_view(old_bytes))
        _set_storage(_CPU_KEYS, self, grown.untyped_storage(), offset, size, strides)
    else:
        _resize_cpu(_CPU_KEYS, self, size, memory_format=memory_format)
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        strides = torch.empty(size, device="meta", memory_format=memory_format).stride()
        _set_storage(_CPU_KEYS, self, self.untyped_storage(), offset, size, strides)
    return self


def local_scalar_dense(self: torch.Tensor):
    return _dlpack.to_host_view(self).item()


def efficient_zero_tensor(size, dtype=None, layout=None, device=None, pin_memory=None):
    tensor = _memory.empty_strided(size, _memory.contiguous_strides(size), dtype or torch.get_default_dtype(),
                                   _target_index(device))
    _dlpack.to_host_view(tensor).zero_()
    return tensor


def _redispatch_to_cpu(overload: torch._ops.OpOverload):
    # the handle's boxed redispatch itself: `OpOverload.redispatch` is one more Python frame around it,
    # a measurable share of a view op
    redispatch = overload._handle.redispatch_boxed
    keys = _CPU_KEYS

    def kernel(*args, **kwargs):
        return redispatch(keys, *args, **kwargs)

    kernel.__name__ = f"rbln_{overload.__name__.replace('.', '_')}"
    return kernel


# Metadata-only ops: the CPU kernels touch sizes/strides/storage pointers, never the data.
METADATA_OPS = (
    "view",
    "as_strided",
    "_reshape_alias",
    "unfold",
    "view_as_real",
    "view_as_complex",
    "set_.source_Storage_storage_offset",
    "set_.source_Storage",
    "set_.source_Tensor",
    "set_",
    "alias",
    "_unsafe_view",
)


def _convolution_plan():
    return fallback._plan_for(aten.convolution.default)


def convolution_overrideable(
    input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
):
    """No device convolution kernel yet: run the CPU convolution on host views (counted as fallback)."""
    plan = _convolution_plan()
    args = (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    return fallback.run_on_cpu(aten.convolution.default, plan, args, {}, reason=None)


def convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation, transposed,
                                      output_padding, groups, output_mask):
    bias_sizes = [weight.shape[1] * groups if transposed else weight.shape[0]]
    args = (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
            groups, output_mask)
    plan = fallback._plan_for(aten.convolution_backward.default)
    return fallback.run_on_cpu(aten.convolution_backward.default, plan, args, {}, reason=None)


# aten overload -> this module's PrivateUse1 kernel (the registration binds no fallback over them)
KERNELS = {
    "empty_strided": empty_strided,
    "new_empty_strided": new_empty_strided,
    "empty.memory_format": empty_memory_format,
    "_copy_from": copy_from,
    "clone": clone,
    "lift_fresh_copy": lift_fresh_copy,
    "_to_copy": to_copy,
    "_copy_from_and_resize": copy_from_and_resize,
    "resize_": resize_,
    "_local_scalar_dense": local_scalar_dense,
    "_efficientzerotensor": efficient_zero_tensor,
    "convolution_overrideable": convolution_overrideable,
    "convolution_backward_overrideable": convolution_backward_overrideable,
}


def register(library: torch.library.Library) -> None:
    for name, kernel in KERNELS.items():
        library.impl(name, kernel, "PrivateUse1")
    # Our copies honour conj/neg bits themselves (host views carry them). Without these
    # fallthroughs the Conjugate/Negative fallback resolves the source with clone(), which copies
    # through _copy_from again: infinite recursion.
    for name in ("_copy_from", "_copy_from_and_resize"):
        for key in ("Conjugate", "Negative"):
            library.impl(name, torch.library.fallthrough_kernel, key)
    for name in METADATA_OPS:
        packet_name, _, overload_name = name.partition(".")
        overload = getattr(getattr(aten, packet_name), overload_name or "default")
        library.impl(name, _redispatch_to_cpu(overload), "PrivateUse1")
