"""Zero-copy re-tagging of host memory between the CPU and the rbln device.

An rbln tensor owns ordinary host memory. DLPack lets us hand the same allocation back and forth:
export a tensor as a DLPack capsule, rewrite the capsule's device field, and import it again. The
imported tensor keeps the original allocation alive, keeps dtype, sizes, strides and storage offset,
and costs about 1.5 us. DLPack has no conj/neg bits, so they are resolved lazily (as views) before
export and re-applied after import.
"""

from __future__ import annotations

import ctypes

import torch

# DLPack device types: kDLCPU = 1, kDLExtDev = 12 (what torch maps PrivateUse1 to).
DL_CPU = 1
DL_EXT_DEV = 12


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLTensorHead(ctypes.Structure):
    # Only the prefix of DLTensor up to the device is needed: data pointer, then the device.
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_to_dlpack = torch._C._to_dlpack
_from_dlpack = torch._C._from_dlpack


_DEVICE_OFFSET = _DLTensorHead.device.offset
_memmove = ctypes.memmove
_device_bytes: dict[tuple[int, int], bytes] = {}


def _retag_portable(tensor: torch.Tensor, device_type: int, device_id: int) -> torch.Tensor:
    # One memmove of the packed DLDevice (cached per device): this runs for every allocation and host
    # view, and building ctypes structure objects per call cost more than the copy itself.
    device = _device_bytes.get((device_type, device_id))
    if device is None:
        device = _device_bytes.setdefault((device_type, device_id), bytes(_DLDevice(device_type, device_id)))
    capsule = _to_dlpack(tensor)
    _memmove(_capsule_pointer(capsule, b"dltensor") + _DEVICE_OFFSET, device, len(device))
    return _from_dlpack(capsule)


_retag = _retag_portable
# Where CPython keeps a PyCapsule's `pointer`: right after the object header (refcount, type).
_CAPSULE_POINTER_OFFSET = 2 * ctypes.sizeof(ctypes.c_void_p)


def enable_compiled_retag() -> bool:
    """Switch `_retag` to the numba version (`_dlpack_numba`) when it reads capsules exactly as
    `PyCapsule_GetPointer` does here; called once the op library has loaded numba anyway. Returns
    whether the compiled version is in use."""
    global _retag
    if _retag is not _retag_portable:
        return True
    try:
        from . import _dlpack_numba

        if (_dlpack_numba.POINTER_OFFSET, _dlpack_numba.DEVICE_OFFSET) != (_CAPSULE_POINTER_OFFSET,
                                                                          _DEVICE_OFFSET):
            return False
        probe = _to_dlpack(torch.empty(1))
        if _dlpack_numba.capsule_pointer(id(probe), _CAPSULE_POINTER_OFFSET) != _capsule_pointer(
                probe, b"dltensor"):
            return False
    except Exception:  # noqa: BLE001 - numba missing or failing: the portable path stays
        return False
    set_device = _dlpack_numba.set_device

    def _retag_compiled(tensor: torch.Tensor, device_type: int, device_id: int) -> torch.Tensor:
        capsule = _to_dlpack(tensor)
        set_device(id(capsule), device_type, device_id)
        return _from_dlpack(capsule)

    _retag = _retag_compiled
    return True


def _plain(tensor: torch.Tensor) -> tuple[torch.Tensor, bool, bool]:
    """Strip the conj/neg bits as zero-copy views; return the plain tensor and the bits."""
    conj = tensor.is_conj()
    neg = tensor.is_neg()
    if conj:
        tensor = tensor.conj()
    if neg:
        tensor = torch._neg_view(tensor)
    return tensor, conj, neg


def _reapply(tensor: torch.Tensor, conj: bool, neg: bool) -> torch.Tensor:
    if neg:
        tensor = torch._neg_view(tensor)
    if conj:
        tensor = tensor.conj()
    return tensor


def to_host_view(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor that shares memory, dtype, sizes, strides and conj/neg bits with an rbln tensor.

    The view never requires grad (DLPack export detaches), which is what kernels below autograd need.
    """
    if tensor.is_conj() or tensor.is_neg():
        plain, conj, neg = _plain(tensor)
        return _reapply(_retag(plain, DL_CPU, 0), conj, neg)
    return _retag(tensor, DL_CPU, 0)


def to_device_view(tensor: torch.Tensor, index: int) -> torch.Tensor:
    """An rbln:index tensor that shares memory with a CPU tensor (no copy, no accounting)."""
    if tensor.is_conj() or tensor.is_neg():
        plain, conj, neg = _plain(tensor)
        return _reapply(_retag(plain, DL_EXT_DEV, index), conj, neg)
    return _retag(tensor, DL_EXT_DEV, index)
