"""Storage construction on rbln, which `torch.load`, `copy.deepcopy` and `Storage.rbln()` rely on.

`torch.UntypedStorage(n, device="rbln")` would reach the C++ allocator of PrivateUse1, which a
pure-Python device does not have (it crashes the process). We intercept that constructor and
build the storage from our allocator instead; every other construction is untouched.
"""

from __future__ import annotations

from typing import Any

import torch

from . import _dlpack, _memory, _structural

_base_new = torch._C.StorageBase.__new__


def _rbln_storage(args: tuple, device: torch.device) -> torch.UntypedStorage:
    index = _structural._target_index(device)
    if not args:
        return _memory.empty_strided([0], [1], torch.uint8, index).untyped_storage()
    (source,) = args
    if isinstance(source, int):
        return _memory.empty_strided([source], [1], torch.uint8, index).untyped_storage()
    host = torch.UntypedStorage(source)  # a sequence of byte values
    tensor = _memory.empty_strided([host.nbytes()], [1], torch.uint8, index)
    _dlpack.to_host_view(tensor).copy_(torch.empty(0, dtype=torch.uint8).set_(host))
    return tensor.untyped_storage()


def _untyped_storage_new(cls: type, *args: Any, device: Any = None, **kwargs: Any) -> Any:
    if device is not None and not kwargs and cls is torch.UntypedStorage:
        device = torch.device(device)
        if device.type == "rbln":
            return _rbln_storage(args, device)
    if device is not None:
        kwargs["device"] = device
    return _base_new(cls, *args, **kwargs)


def register() -> None:
    if torch.UntypedStorage.__dict__.get("__new__") is None:
        torch.UntypedStorage.__new__ = _untyped_storage_new  # type: ignore[method-assign]
