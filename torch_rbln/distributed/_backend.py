"""The `rbln-ccl` process-group backend: torch.distributed collectives on rbln tensors, run by gloo.

rbln memory is host memory, so a collective needs no transport of its own: each rbln tensor is handed
to a gloo process group as a zero-copy CPU view (`_dlpack.to_host_view`) and gloo reads and writes the
rbln memory directly. A group is an `_group.RblnCclGroup` whose backend for rbln and CPU tensors is a
`ProcessGroupGloo`. Its hot collectives on plain tensors call gloo directly (`_group`); everything else
reaches gloo through a PrivateUse1 kernel for each `c10d::` op, defined here (torch's own PrivateUse1
kernels pass device tensors to the backend unchanged, and gloo refuses them). Every caller of a
collective ends in the group's methods or those ops (`dist.*`, `_functional_collectives`, DDP's reducer,
FSDP2, DTensor), so the two serve them all.

A copy is made only where gloo cannot use the view (each is written back when the collective
completes, before its Work reports completion):

* a non-contiguous tensor is staged in a contiguous host buffer;
* dtypes gloo has no type for: data-movement ops (broadcast, gathers, scatters, all_to_all, send/recv)
  reinterpret them bit for bit as a gloo type of the same size (a view, no copy); reductions widen
  int16/uint16 to int32 and uint32 to int64 (exact: wrap-around matches the narrow type's) and refuse
  float8 and uint64 with a TypeError;
* `all_to_all` with tensor lists, which gloo lacks, is packed into one `all_to_all_single` call.
"""

from __future__ import annotations

import datetime
import importlib.abc
import importlib.util
import sys
import threading
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.autograd.profiler as _profiler_state
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
    _create_work_from_future,
)

from .. import _dlpack
from .. import profiling as _profiling

BACKEND = "rbln-ccl"
_RBLN = torch.device("rbln")
_to_host = _dlpack.to_host_view
_lock = threading.Lock()
_libraries: list[torch.library.Library] = []

# Dtypes gloo has a type for (others raise "Invalid scalar type" in gloo).
_GLOO_DTYPES = frozenset({
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
    torch.int64, torch.bool, torch.complex64, torch.complex128,
})
# Carriers for data movement: a gloo dtype of each item size, moved bit for bit.
_MOVE_AS = {1: torch.uint8, 2: torch.float16, 4: torch.int32, 8: torch.int64, 16: torch.complex128}
# Carriers for reductions: a wider integer type whose wrap-around agrees with the narrow type's.
_REDUCE_AS = {torch.int16: torch.int32, torch.uint16: torch.int32, torch.uint32: torch.int64}


def _plain(tensor: torch.Tensor) -> bool:
    """Whether gloo can use `tensor`'s host view as it is: a gloo dtype, contiguous, and no lazy
    conj/neg bit (gloo reads raw memory, so such a view is staged through `resolve_conj/neg`)."""
    return tensor.dtype in _GLOO_DTYPES and tensor.is_contiguous() and not tensor.is_conj() and \
        not tensor.is_neg()


# -- group creation ------------------------------------------------------------------------------


def create(store: dist.Store, rank: int, size: int, timeout: datetime.timedelta) -> dist.ProcessGroup:
    """The creator `Backend.register_backend` calls for each group that uses rbln-ccl. It returns the
    whole process group (`_group.RblnCclGroup`, one gloo backend for rbln and CPU tensors), which
    torch.distributed uses in place of the one it made; so in `"cpu:gloo,rbln:rbln-ccl"` CPU tensors
    are served by rbln-ccl's gloo too."""
    bind_local_device()
    install_kernels()
    _keep_fsdp_storage_on_rbln()
    from . import _consensus  # noqa: F401  (the autotuner finds it in sys.modules)
    from ._group import RblnCclGroup

    return RblnCclGroup(store, rank, size, timeout)


_FSDP_PARAM = "torch.distributed.fsdp._fully_shard._fsdp_param"


def _keep_fsdp_storage_on_rbln() -> None:
    """FSDP2 frees an unsharded parameter with `storage.resize_(0)`, which PyTorch routes to a C++
    PrivateUse1 hook a Python device cannot provide (NotImplementedError). For rbln parameters the
    storage is kept instead: FSDP2 computes the same results (the all-gather refills that storage), but
    the memory of resharded parameters is not returned between uses. Importing FSDP costs seconds, so
    a module that is not loaded yet is patched when it loads."""
    module = sys.modules.get(_FSDP_PARAM)
    if module is not None:
        _patch_free_storage(module)
    elif not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def _patch_free_storage(module: types.ModuleType) -> None:
    free = module.free_storage
    if getattr(free, "_rbln_keeps", False):
        return

    def free_storage(tensor: torch.Tensor) -> None:
        if tensor.device.type != "rbln":
            free(tensor)

    free_storage._rbln_keeps = True  # type: ignore[attr-defined]
    module.free_storage = free_storage


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches FSDP2's `free_storage` right after its module executes, then leaves sys.meta_path."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _FSDP_PARAM:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            _patch_free_storage(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def bind_local_device() -> int | None:
    """Make `rbln:LOCAL_RANK` the current device of a process started by torchrun (or anything else that
    sets LOCAL_RANK), as with CUDA; the index, or None when LOCAL_RANK is unset.

    RuntimeError when this host runs more ranks (LOCAL_WORLD_SIZE, or LOCAL_RANK + 1) than it has
    logical rbln devices: two ranks on one device would share its memory and streams."""
    from .. import config

    ranks = config.launcher_ranks()
    if ranks.local_rank is None:
        return None
    from .. import device_module, topology

    index = ranks.local_rank
    ranks_here = max(ranks.local_world_size or 0, index + 1)
    count = device_module.device_count()
    if ranks_here > count:
        raise RuntimeError(
            f"rbln-ccl: this host runs {ranks_here} ranks (LOCAL_RANK={index}, LOCAL_WORLD_SIZE="
            f"{ranks.local_world_size or '-'}) but has {count} logical rbln device(s), one per "
            f"rank is needed. Start at most {count} processes per host (torchrun --nproc-per-node={count}) "
            f"or assign more devices. {topology.get_topology().env_note()}"
        )
    device_module.set_device(index)
    return index


def install_kernels() -> None:
    """Bind the PrivateUse1 kernels of the c10d ops (once per process)."""
    if _libraries:
        return
    with _lock:
        if _libraries:
            return
        library = torch.library.Library("c10d", "IMPL")
        with warnings.catch_warnings():
            # torch registers pass-through PrivateUse1 kernels for these ops; replacing them is the point.
            warnings.simplefilter("ignore")
            for name, kernel in _KERNELS.items():
                library.impl(name, _counted(name, kernel), "PrivateUse1")
        _libraries.append(library)


def _counted(name: str, kernel: Callable) -> Callable:
    """`kernel`, counted as a device call in the op report and shown as a range in profiler traces."""
    from torch_rbln import registry

    counts = registry._device_counts
    qualified = f"c10d::{name}"

    def run(*args: Any) -> Any:
        counts[qualified] += 1
        if _profiler_state._is_profiler_enabled:  # what _profiling.active() reads, without the call
            with _profiling.region("collective", qualified, backend=BACKEND):
                return kernel(*args)
        return kernel(*args)

    return run


# -- staging -------------------------------------------------------------------------------------


class _Staging:
    """Host operands of one collective, and the buffers to write back into rbln tensors when it ends."""

    __slots__ = ("reduce", "copies")

    def __init__(self, reduce: bool) -> None:
        self.reduce = reduce
        self.copies: list[tuple[torch.Tensor, torch.Tensor]] = []  # (gloo's buffer, rbln tensor's view)

    def host(self, tensor: torch.Tensor, written: bool) -> torch.Tensor:
        """What gloo gets for `tensor`: its host view, or a staged buffer (then written back if
        `written`, i.e. the collective stores results in it)."""
        if tensor.is_cpu:
            return tensor
        if _plain(tensor):  # the usual case, decided on the rbln tensor: the view itself
            return _to_host(tensor)
        return self._staged(_to_host(tensor), written)

    def _staged(self, view: torch.Tensor, written: bool) -> torch.Tensor:
        carrier = view
        if view.dtype not in _GLOO_DTYPES:
            if self.reduce:
                wide = _REDUCE_AS.get(view.dtype)
                if wide is None:
                    raise TypeError(
                        f"rbln-ccl: reductions on {view.dtype} are not supported (gloo has no such type and "
                        "no exact wider type exists); cast to float32/bfloat16 or int64 first"
                    )
                carrier = view.to(wide, memory_format=torch.contiguous_format)
            else:
                carrier = view.view(_MOVE_AS[view.element_size()])
        if not carrier.is_contiguous() or carrier.is_neg() or carrier.is_conj():
            carrier = carrier.resolve_conj().resolve_neg().contiguous()
        if carrier is view:
            return view
        if written:
            target = view if carrier.dtype is view.dtype or self.reduce else view.view(carrier.dtype)
            if carrier.data_ptr() != target.data_ptr() or carrier.stride() != target.stride():
                self.copies.append((carrier, target))
        return carrier

    def hosts(self, tensors: Sequence[torch.Tensor], written: bool) -> list[torch.Tensor]:
        return [self.host(t, written) for t in tensors]

    def nested(self, lists: Sequence[Sequence[torch.Tensor]], written: bool) -> list[list[torch.Tensor]]:
        return [self.hosts(tensors, written) for tensors in lists]

    def finish(self, work: dist.Work) -> Any:
        """The Work to return (boxed for the dispatcher): gloo's own, or one that completes after the
        staged results are written back."""
        if not self.copies:
            return work.boxed()
        return _after([work], self.copies).boxed()


def _write_back(copies: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    for staged, target in copies:
        target.copy_(staged)
    return [target for _, target in copies]


def _after(works: list[dist.Work], copies: list[tuple[torch.Tensor, torch.Tensor]]) -> dist.Work:
    """One Work that completes when all `works` have and `copies` are written back. Some gloo Works
    have no future (`_reduce_scatter_base`'s): then this waits for them here and returns a completed
    Work, so such a call with staging or coalescing is synchronous even with async_op=True."""
    try:
        futures = [work.get_future() for work in works]
    except RuntimeError:  # "Work::getFuture not implemented"
        for work in works:
            work.wait()
        done = torch.futures.Future()
        done.set_result(_write_back(copies))
        return _create_work_from_future(done)
    joined = futures[0] if len(futures) == 1 else torch.futures.collect_all(futures)

    def complete(finished: torch.futures.Future) -> list[torch.Tensor]:
        for future in finished.wait() if len(futures) > 1 else (finished,):
            future.wait()  # re-raises a collective's error
        return _write_back(copies)

    return _create_work_from_future(joined.then(complete))


def _all_of(works: list[dist.Work], staging: _Staging) -> Any:
    """One Work for several gloo Works (the coalesced ops), completing when all have."""
    if len(works) == 1:
        return staging.finish(works[0])
    return _after(works, staging.copies).boxed()


# -- options -------------------------------------------------------------------------------------


_unbox_group = dist.ProcessGroup.unbox


def _gloo(group: Any) -> Any:
    """The backend the (boxed) process group holds for rbln tensors."""
    return _unbox_group(group)._get_backend(_RBLN)


_reduce_ops: dict[int, dist.ReduceOp] = {}


def _reduce_op(op: Any) -> dist.ReduceOp:
    """The pybind ReduceOp gloo's options take, for the dispatcher's (boxed) one; one per kind."""
    kind = op.op()
    reduce_op = _reduce_ops.get(kind)
    if reduce_op is None:
        red_op_type = dist.ReduceOp.RedOpType(kind)
        if red_op_type == dist.ReduceOp.RedOpType.PREMUL_SUM:
            raise ValueError("rbln-ccl: ReduceOp.PREMUL_SUM is not supported (gloo has no premultiplied sum)")
        reduce_op = _reduce_ops[kind] = dist.ReduceOp(red_op_type)
    return reduce_op


_shared_options: dict[tuple, Any] = {}


def _shared(kind: type, timeout: int, async_op: bool, *fields: tuple[str, Any]) -> Any:
    """An options object of `kind` for these settings, built once and shared by every call with them
    (building one costs about as much as a small collective's own Python work). Shared objects are
    never modified after they are built, and gloo copies what it needs when a call starts."""
    key = (kind, timeout, async_op, *fields)
    options = _shared_options.get(key)
    if options is None:
        options = _options(kind(), timeout, async_op, **dict(fields))
        options = _shared_options.setdefault(key, options)
    return options


def _options(options: Any, timeout: int, async_op: bool | None = None, **fields: Any) -> Any:
    for name, value in fields.items():
        setattr(options, name, value)
    if async_op is not None:
        options.asyncOp = async_op
    if timeout >= 0:
        options.timeout = datetime.timedelta(milliseconds=timeout)
    return options


# -- kernels (argument order and defaults as in the c10d op schemas) -----------------------------


def _allreduce(tensors, group, op, sparse_indices, async_op=True, timeout=-1):
    if sparse_indices is not None:
        raise NotImplementedError("rbln-ccl: sparse all_reduce is not supported")
    staging = _Staging(reduce=True)
    opts = _shared(AllreduceOptions, timeout, async_op, ("reduceOp", _reduce_op(op)))
    work = _gloo(group).allreduce(staging.hosts(tensors, True), opts)
    return tensors, staging.finish(work)


def _allreduce_coalesced(tensors, group, op, async_op=True, timeout=-1):
    staging = _Staging(reduce=True)
    opts = _options(AllreduceCoalescedOptions(), timeout, async_op, reduceOp=_reduce_op(op))
    return staging.finish(_gloo(group).allreduce_coalesced(staging.hosts(tensors, True), opts))


def _broadcast(tensors, group, root_rank, root_tensor, async_op=True, timeout=-1):
    staging = _Staging(reduce=False)
    opts = _shared(BroadcastOptions, timeout, async_op, ("rootRank", root_rank), ("rootTensor", root_tensor))
    work = _gloo(group).broadcast(staging.hosts(tensors, True), opts)
    return tensors, staging.finish(work)


def _reduce(tensors, group, op, root_rank, root_tensor, async_op=True, timeout=-1):
    staging = _Staging(reduce=True)
    opts = _options(ReduceOptions(), timeout, async_op, reduceOp=_reduce_op(op), rootRank=root_rank,
                    rootTensor=root_tensor)
    return staging.finish(_gloo(group).reduce(staging.hosts(tensors, True), opts))


def _allgather(outputs, inputs, group, async_op=True, timeout=-1):
    staging = _Staging(reduce=False)
    opts = _shared(AllgatherOptions, timeout, async_op)
    work = _gloo(group).allgather(staging.nested(outputs, True), staging.hosts(inputs, False), opts)
    return outputs, staging.finish(work)


def _allgather_base(output, input, group, async_op=True, timeout=-1):
    staging = _Staging(reduce=False)
    opts = _shared(AllgatherOptions, timeout, async_op)
    work = _gloo(group)._allgather_base(staging.host(output, True), staging.host(input, False), opts)
    return output, staging.finish(work)


def _allgather_coalesced(output_lists, inputs, group, async_op=True):
    staging = _Staging(reduce=False)
    opts = _options(AllgatherOptions(), -1, async_op)
    work = _gloo(group).allgather_coalesced(staging.nested(output_lists, True), staging.hosts(inputs, False),
                                            opts)
    return staging.finish(work)


def _allgather_into_tensor_coalesced(outputs, inputs, group, async_op=True):
    staging = _Staging(reduce=False)
    gloo = _gloo(group)
    works = [gloo._allgather_base(staging.host(o, True), staging.host(i, False),
                                  _options(AllgatherOptions(), -1, async_op))
             for o, i in zip(outputs, inputs, strict=True)]
    return _all_of(works, staging)


def _reduce_scatter(outputs, input_lists, group, op, async_op=True, timeout=-1):
    staging = _Staging(reduce=True)
    opts = _options(ReduceScatterOptions(), timeout, async_op, reduceOp=_reduce_op(op))
    work = _gloo(group).reduce_scatter(staging.hosts(outputs, True), staging.nested(input_lists, False), opts)
    return outputs, staging.finish(work)


def _reduce_scatter_base(output, input, group, op, async_op=True, timeout=-1):
    staging = _Staging(reduce=True)
    opts = _shared(ReduceScatterOptions, timeout, async_op, ("reduceOp", _reduce_op(op)))
    work = _gloo(group)._reduce_scatter_base(staging.host(output, True), staging.host(input, False), opts)
    return output, staging.finish(work)


def _reduce_scatter_tensor_coalesced(outputs, inputs, group, op, async_op=True, timeout=-1):
    staging = _Staging(reduce=True)
    gloo = _gloo(group)
    kind = _reduce_op(op)
    works = [gloo._reduce_scatter_base(staging.host(o, True), staging.host(i, False),
                                       _options(ReduceScatterOptions(), timeout, async_op, reduceOp=kind))
             for o, i in zip(outputs, inputs, strict=True)]
    return _all_of(works, staging)


def _alltoall(outputs, inputs, group, async_op=True, timeout=-1):
    """gloo has no list all_to_all: one packed all_to_all_single, unpacked into `outputs` on completion."""
    dtypes = {t.dtype for t in (*outputs, *inputs)}
    if len(dtypes) != 1:
        names = sorted(map(str, dtypes))
        raise TypeError(f"rbln-ccl: all_to_all needs one dtype for all tensors, got {names}")
    staging = _Staging(reduce=False)
    sent = torch.cat([staging.host(t, False).reshape(-1) for t in inputs])
    received = torch.empty(sum(t.numel() for t in outputs), dtype=sent.dtype)
    targets = [staging.host(t, True) for t in outputs]
    opts = _options(AllToAllOptions(), timeout, async_op)
    work = _gloo(group).alltoall_base(received, sent, [t.numel() for t in outputs],
                                      [t.numel() for t in inputs], opts)
    pieces = received.split([t.numel() for t in outputs])
    unpack = [(piece.view(target.shape), target) for piece, target in zip(pieces, targets, strict=True)]
    return outputs, _after([work], unpack + staging.copies).boxed()  # staged outputs after the unpack


def _alltoall_base(output, input, group, output_splits, input_splits, async_op=True, timeout=-1):
    staging = _Staging(reduce=False)
    opts = _options(AllToAllOptions(), timeout, async_op)
    work = _gloo(group).alltoall_base(staging.host(output, True), staging.host(input, False),
                                      list(output_splits), list(input_splits), opts)
    return staging.finish(work)


def _gather(output_lists, inputs, group, root_rank, async_op=True, timeout=-1):
    staging = _Staging(reduce=False)
    opts = _options(GatherOptions(), timeout, async_op, rootRank=root_rank)
    work = _gloo(group).gather(staging.nested(output_lists, True), staging.hosts(inputs, False), opts)
    return staging.finish(work)


def _scatter(outputs, input_lists, group, root_rank, async_op=True, timeout=-1):
    staging = _Staging(reduce=False)
    opts = _options(ScatterOptions(), timeout, async_op, rootRank=root_rank)
    work = _gloo(group).scatter(staging.hosts(outputs, True), staging.nested(input_lists, False), opts)
    return outputs, staging.finish(work)


def _send(tensors, group, dst, tag):
    staging = _Staging(reduce=False)
    return staging.finish(_gloo(group).send(staging.hosts(tensors, False), dst, tag))


def _recv(tensors, group, src, tag):
    staging = _Staging(reduce=False)
    return staging.finish(_gloo(group).recv(staging.hosts(tensors, True), src, tag))


def _recv_any_source(tensors, group, tag):
    staging = _Staging(reduce=False)
    return staging.finish(_gloo(group).recv_anysource(staging.hosts(tensors, True), tag))


def _barrier(tensor, group, device_ids, async_op=True, timeout=-1):
    opts = _options(BarrierOptions(), timeout, async_op, device_ids=list(device_ids))
    return _gloo(group).barrier(opts).boxed()


_KERNELS: dict[str, Callable] = {
    "allreduce_": _allreduce,
    "allreduce_coalesced_": _allreduce_coalesced,
    "broadcast_": _broadcast,
    "reduce_": _reduce,
    "allgather_": _allgather,
    "_allgather_base_": _allgather_base,
    "allgather_coalesced_": _allgather_coalesced,
    "allgather_into_tensor_coalesced_": _allgather_into_tensor_coalesced,
    "reduce_scatter_": _reduce_scatter,
    "_reduce_scatter_base_": _reduce_scatter_base,
    "reduce_scatter_tensor_coalesced_": _reduce_scatter_tensor_coalesced,
    "alltoall_": _alltoall,
    "alltoall_base_": _alltoall_base,
    "gather_": _gather,
    "scatter_": _scatter,
    "send": _send,
    "recv_": _recv,
    "recv_any_source_": _recv_any_source,
    "barrier": _barrier,
}
