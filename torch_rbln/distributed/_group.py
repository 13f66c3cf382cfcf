"""The process group an `rbln-ccl` group is: a Python `ProcessGroup` whose hot collectives reach gloo
without a trip through the dispatcher.

Why: a collective on a plain ProcessGroup runs `ProcessGroup::allreduce` (C++) -> the `c10d::allreduce_`
op -> our PrivateUse1 Python kernel (`_backend`), which must read the boxed ReduceOp (a TorchScript
method call), unbox the group, build gloo options and box the Work for the dispatcher. For a small
message that costs about as much as gloo's whole call (README, "Distributed"). Here `dist.all_reduce`
calls this class's `allreduce` directly with the caller's own options object, and C++ callers (DDP's
reducer, funcol) reach it through torch's `ProcessGroup` trampoline; the common case (plain dense
tensors of a gloo dtype, no dispatch mode active) hands host views to gloo at once.

So do reduce, gather, scatter, all_to_all_single (alltoall_base), the coalesced all_reduce, send and
recv. Every other case calls the base method (`super()`), i.e. the
dispatcher and `_backend`'s kernels, which stage, convert dtypes, validate and write back; so do the
collectives not overridden here.
"""

from __future__ import annotations

import datetime
import weakref
from functools import partial
from typing import Any

import torch
import torch.autograd.profiler as _profiler_state
from torch._C import _len_torch_dispatch_stack
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BroadcastOptions,
    GatherOptions,
    ProcessGroup,
    ProcessGroupGloo,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
    _allow_inflight_collective_as_graph_input,
)

from .. import _dlpack
from .. import profiling as _profiling
from . import _backend

_Tensor = torch.Tensor
_to_host = _dlpack.to_host_view
_plain = _backend._plain
_CUSTOM = ProcessGroup.BackendType.CUSTOM


# Host views of the rbln tensors collectives have used, by id(tensor): (weakref to the tensor, view, and
# the data pointer, sizes, strides and dtype the view was made for). A DLPack round trip costs ~1.5 us,
# a checked hit ~0.4 us; callers such as DDP's buckets and training loops pass the same tensors on every
# step. The view is made from a detached alias, so it holds the memory but not the tensor itself (a view
# of the tensor would keep its TensorImpl, and with it the Python object, alive for ever); the entry
# goes when the tensor does, or is replaced when the tensor no longer matches (set_, resize_, .data =).
# While the entry holds the memory, no other tensor can be allocated at its address, so an unchanged
# data pointer means unchanged memory.
_views: dict[int, tuple[weakref.ref, torch.Tensor, int, torch.Size, tuple[int, ...], torch.dtype]] = {}


def _host(tensor: Any) -> Any:
    """The tensor gloo can use for `tensor` as it is (itself on the CPU, the cached host view of a plain
    rbln tensor), or None when the dispatcher path must handle it (staging, dtype carriers, subclasses).
    Written out in one function: this runs for every tensor of every direct call."""
    if type(tensor) is not _Tensor:
        return None
    if tensor.is_cpu:
        return tensor
    key = id(tensor)
    entry = _views.get(key)
    # A hit needs no `_plain` check: entries are made for plain tensors only, and equal dtype, sizes and
    # strides keep a tensor plain (conj/neg bits change only through private setters).
    if (entry is not None and entry[0]() is tensor and entry[2] == tensor.data_ptr()
            and entry[3] == tensor.shape and entry[4] == tensor.stride() and entry[5] is tensor.dtype):
        return entry[1]
    if tensor.is_meta or not _plain(tensor):
        return None
    view = _to_host(tensor.detach())
    _views[key] = (weakref.ref(tensor, partial(_forget, key)), view, tensor.data_ptr(), tensor.shape,
                   tensor.stride(), tensor.dtype)
    return view


def _forget(key: int, ref: weakref.ref) -> None:
    entry = _views.get(key)
    if entry is not None and entry[0] is ref:  # not a newer tensor's entry under a reused id
        del _views[key]


def _hosts(values: Any) -> tuple[list | None, bool]:
    """The host form of each of a call's tensor arguments (a tensor, a list of tensors or a list of
    lists, as the collective takes them; None if any tensor has none), and whether any is an rbln
    tensor: only those calls are rbln-ccl's device ops (counted in the op report, marked in profiler
    traces), as with the kernels, which the dispatcher runs for rbln tensors only."""
    hosts = []
    rbln = False
    for value in values:
        if type(value) is list:
            host, inner_rbln = _hosts(value)
        else:
            host = _host(value)
            inner_rbln = host is not value
        if host is None:
            return None, False
        rbln = rbln or inner_rbln
        hosts.append(host)
    return hosts, rbln


def _direct() -> bool:
    """Whether a call may bypass the dispatcher: no TorchDispatchMode (e.g. CommDebugMode, fake
    tensors) would see the c10d op, and no in-flight-collective registration (compiled graphs) is on."""
    return not _len_torch_dispatch_stack() and not _allow_inflight_collective_as_graph_input()


class RblnCclGroup(ProcessGroup):
    """An `rbln-ccl` process group: one gloo backend for rbln and CPU tensors (see the module doc)."""

    def __init__(self, store: Any, rank: int, size: int, timeout: datetime.timedelta) -> None:
        super().__init__(rank, size)
        self._gloo = ProcessGroupGloo(store, rank, size, timeout)
        for device in ("cpu", "rbln"):
            self._register_backend(torch.device(device), _CUSTOM, self._gloo)
        self._set_default_backend(_CUSTOM)
        from torch_rbln import registry

        self._counts = registry._device_counts

    def _run(self, name: str, rbln: bool, call: Any, *args: Any) -> Any:
        """`call(*args)` (gloo's method), counted and, under the profiler, marked when on rbln tensors."""
        if not rbln:
            return call(*args)
        if _profiler_state._is_profiler_enabled:
            with _profiling.region("collective", name, backend=_backend.BACKEND):
                work = call(*args)
        else:
            work = call(*args)
        self._counts[name] += 1
        return work

    def _direct_call(self, name: str, call: Any, args: tuple, tensor_args: int, arity: int,
                     options: type | None) -> Any:
        """gloo's `call` on the host forms of the first `tensor_args` arguments and the rest as they are,
        when the call has `arity` arguments, the last of type `options` (None: not checked), and may
        bypass the dispatcher; None otherwise (the caller takes the kernel path)."""
        if len(args) != arity or (options is not None and type(args[-1]) is not options) or not _direct():
            return None
        hosts, rbln = _hosts(args[:tensor_args])
        if hosts is None:
            return None
        return self._run(name, rbln, call, *hosts, *args[tensor_args:])

    # Each method below keeps `super().<same name>(...)` in its own body: pybind finds the base method
    # that way instead of calling this override again. dist.all_gather_into_tensor / reduce_scatter_tensor
    # call the *_single names (torch 2.13); C++ callers and older code the underscored ones. gloo has the
    # underscored ones only.

    def allreduce(self, *args: Any) -> Any:
        work = self._direct_call("c10d::allreduce_", self._gloo.allreduce, args, 1, 2, AllreduceOptions)
        return super().allreduce(*args) if work is None else work

    def allreduce_coalesced(self, *args: Any) -> Any:
        work = self._direct_call("c10d::allreduce_coalesced_", self._gloo.allreduce_coalesced, args, 1, 2,
                                 AllreduceCoalescedOptions)
        return super().allreduce_coalesced(*args) if work is None else work

    def broadcast(self, *args: Any) -> Any:
        work = self._direct_call("c10d::broadcast_", self._gloo.broadcast, args, 1, 2, BroadcastOptions)
        return super().broadcast(*args) if work is None else work

    def reduce(self, *args: Any) -> Any:
        work = self._direct_call("c10d::reduce_", self._gloo.reduce, args, 1, 2, ReduceOptions)
        return super().reduce(*args) if work is None else work

    def allgather(self, *args: Any) -> Any:
        work = self._direct_call("c10d::allgather_", self._gloo.allgather, args, 2, 3, AllgatherOptions)
        return super().allgather(*args) if work is None else work

    def gather(self, *args: Any) -> Any:
        work = self._direct_call("c10d::gather_", self._gloo.gather, args, 2, 3, GatherOptions)
        return super().gather(*args) if work is None else work

    def scatter(self, *args: Any) -> Any:
        work = self._direct_call("c10d::scatter_", self._gloo.scatter, args, 2, 3, ScatterOptions)
        return super().scatter(*args) if work is None else work

    def alltoall_base(self, *args: Any) -> Any:
        work = self._direct_call("c10d::alltoall_base_", self._gloo.alltoall_base, args, 2, 5,
                                 AllToAllOptions)
        return super().alltoall_base(*args) if work is None else work

    def send(self, *args: Any) -> Any:
        work = self._direct_call("c10d::send", self._gloo.send, args, 1, 3, None)
        return super().send(*args) if work is None else work

    def recv(self, *args: Any) -> Any:
        work = self._direct_call("c10d::recv_", self._gloo.recv, args, 1, 3, None)
        return super().recv(*args) if work is None else work

    def all_gather_single(self, *args: Any) -> Any:
        work = self._direct_call("c10d::_allgather_base_", self._gloo._allgather_base, args, 2, 3,
                                 AllgatherOptions)
        return super().all_gather_single(*args) if work is None else work

    def _allgather_base(self, *args: Any) -> Any:
        work = self._direct_call("c10d::_allgather_base_", self._gloo._allgather_base, args, 2, 3,
                                 AllgatherOptions)
        return super()._allgather_base(*args) if work is None else work

    def reduce_scatter_single(self, *args: Any) -> Any:
        work = self._direct_call("c10d::_reduce_scatter_base_", self._gloo._reduce_scatter_base, args, 2, 3,
                                 ReduceScatterOptions)
        return super().reduce_scatter_single(*args) if work is None else work

    def _reduce_scatter_base(self, *args: Any) -> Any:
        work = self._direct_call("c10d::_reduce_scatter_base_", self._gloo._reduce_scatter_base, args, 2, 3,
                                 ReduceScatterOptions)
        return super()._reduce_scatter_base(*args) if work is None else work
