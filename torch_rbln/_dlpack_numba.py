"""The compiled half of `_dlpack._retag`: rewrite a DLPack capsule's device in one numba call.

Why: every rbln allocation re-tags a fresh host tensor, and the two ctypes calls of the portable path
(`PyCapsule_GetPointer`, `memmove`) cost more than exporting and importing the capsule together. A
numba function reads the capsule's pointer field and writes the device in place for a fraction of
that. It relies on CPython's object layout (a PyCapsule's `pointer` follows the object header), so
`_dlpack.enable_compiled_retag` only switches to it after checking it against `PyCapsule_GetPointer`.
A module of its own so that `import torch_rbln` never imports numba.
"""

from __future__ import annotations

import numba
import numpy as np

from torch_rbln.dsl.backends.numba_backend.support import as_pointer


@numba.njit(nogil=True, cache=True, boundscheck=False)
def capsule_pointer(capsule_address, pointer_offset):
    """The `pointer` field of the PyCapsule object at `capsule_address` (read at `pointer_offset`)."""
    return numba.carray(as_pointer(capsule_address + pointer_offset, np.int64), 1)[0]


# Where the capsule keeps its pointer (after CPython's 16-byte object header) and where a DLTensor keeps
# its device (after the data pointer); constants, so the hot call passes three arguments, not five.
# `_dlpack.enable_compiled_retag` checks both against this interpreter before using them.
POINTER_OFFSET = 16
DEVICE_OFFSET = 8


@numba.njit(nogil=True, cache=True, boundscheck=False)
def set_device(capsule_address, device_type, device_id):
    """Write (device_type, device_id) into the DLTensor that the capsule at `capsule_address` holds."""
    tensor = numba.carray(as_pointer(capsule_address + POINTER_OFFSET, np.int64), 1)[0]
    device = numba.carray(as_pointer(tensor + DEVICE_OFFSET, np.int32), 2)
    device[0] = device_type
    device[1] = device_id
