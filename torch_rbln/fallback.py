"""The boxed CPU fallback: any aten op without an rbln kernel runs its CPU kernel on host views.

rbln memory is host memory, so the fallback never copies inputs: it re-tags them as CPU tensors
(zero-copy), runs the op, and re-tags fresh results as rbln tensors that own their memory. Mutated
arguments (in-place ops, `out=`) stay the caller's rbln tensors; metadata the CPU kernel changed
(sizes, strides, conj bit, or a new storage for a too-small `out=`) is written back.

Every call is counted per op and logged at INFO: a fallback is visible, never silent.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import _dlpack, _memory, _runtime, config, log
from . import profiling as _profiling

# The same logger object log.get_logger("fallback") returns; log.configure() runs at first device use.
_log = logging.getLogger("torch_rbln.fallback")

_counts: Counter[str] = Counter()
_reasons: dict[str, Counter[str]] = {}
_count_lock = threading.Lock()


@dataclass(frozen=True)
class _OpPlan:
    """What the fallback needs to know about one overload, computed once from its schema."""

    name: str
    mutable_positions: tuple[int, ...]
    mutable_kwargs: tuple[str, ...]
    # Positions of List[Optional[Tensor]] arguments (indices of `index`), which may be CPU tensors.
    cpu_allowed_positions: frozenset[int]
    # Whether a return may alias an input (a view); otherwise results are always fresh tensors.
    returns_alias: bool
    # Positions typed `Tensor`: a boxed fallback receives wrapped numbers there as Python scalars.
    tensor_positions: frozenset[int]
    # Functional, no tensor lists, no device argument: eligible for the fast path of run_on_cpu.
    simple: bool


_plans: dict[Any, _OpPlan] = {}


def _plan_for(op: torch._ops.OpOverload) -> _OpPlan:
    plan = _plans.get(op)
    if plan is not None:
        return plan
    schema = op._schema
    positions: list[int] = []
    kwarg_names: list[str] = []
    cpu_allowed: set[int] = set()
    tensor_positions: set[int] = set()
    for position, argument in enumerate(schema.arguments):
        if str(argument.type) == "Tensor" and not argument.kwarg_only:
            tensor_positions.add(position)
        if argument.alias_info is not None and argument.alias_info.is_write:
            if argument.kwarg_only:
                kwarg_names.append(argument.name)
            else:
                positions.append(position)
        if str(argument.type) == "List[Optional[Tensor]]":
            cpu_allowed.add(position)
    returns_alias = any(
        r.alias_info is not None and not r.alias_info.is_write for r in schema.returns
    )
    simple = (
        not positions
        and not kwarg_names
        and not returns_alias
        and not any("[]" in str(a.type) and "Tensor" in str(a.type) for a in schema.arguments)
        and not any(a.name == "device" for a in schema.arguments)
    )
    plan = _OpPlan(
        schema.name, tuple(positions), tuple(kwarg_names), frozenset(cpu_allowed), returns_alias,
        frozenset(tensor_positions), simple,
    )
    _plans[op] = plan
    return plan


# Reason recorded for an op that has no rbln kernel at all (the others name why a kernel declined).
NO_KERNEL = "no rbln kernel"


def record(name: str, reason: str | None = None) -> None:
    """Count one CPU fallback of `name` and log it at INFO the first time this op falls back for this
    reason (a training loop would otherwise log a line per call); every call is counted, and
    `torch_rbln.registry.fallback_report()` gives the totals."""
    reason = reason or NO_KERNEL
    with _count_lock:
        _counts[name] += 1
        reasons = _reasons.get(name)
        if reasons is None:
            reasons = _reasons[name] = Counter()
        first = reason not in reasons
        reasons[reason] += 1
    if first and _log.isEnabledFor(logging.INFO):
        log.log_fallback(name, reason)


def fallback_counts() -> dict[str, int]:
    """Per op, how many calls ran on the CPU fallback since the last reset."""
    with _count_lock:
        return dict(_counts)


def fallback_reasons() -> dict[str, dict[str, int]]:
    with _count_lock:
        return {name: dict(reasons) for name, reasons in _reasons.items()}


def reset_fallback_counts() -> None:
    with _count_lock:
        _counts.clear()
        _reasons.clear()


def compile_tier_report() -> dict[str, dict]:
    """Per DSL kernel that was compiled in the background (``TORCH_RBLN_COMPILE=background``): how many
    launches ran on the ``interpret`` tier while a worker compiled it (all its other launches ran on
    ``numba``), how many specialisations the workers compiled, in how many seconds, and how many of
    those compiles failed (then compiled in-process). Empty in ``sync`` mode."""
    from torch_rbln.dsl.backends.numba_backend.executable import tier_report

    return tier_report()


def format_compile_tiers(tiers: dict[str, dict]) -> str:
    """One line per kernel of :func:`compile_tier_report`, for reports."""
    return "\n".join(
        f"  {name}: {row['interpret_launches']} launch(es) on the interpreter tier, "
        f"{row['worker_compiles']} specialisation(s) compiled by workers in {row['worker_seconds']:.1f} s"
        + (f", {row['worker_failures']} failed (compiled in-process)" if row["worker_failures"] else "")
        for name, row in tiers.items()
    )


def _device_mismatch(first: str, second: str) -> RuntimeError:
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"{first} and {second}!"
    )


class _Conversion:
    """Host views of one call's rbln arguments, and the device they live on."""

    __slots__ = ("index", "originals", "host_storages", "cpu_operand")

    def __init__(self) -> None:
        self.index: int | None = None
        self.originals: dict[int, torch.Tensor] = {}  # id(host view) -> rbln tensor
        self.host_storages: dict[int, int] = {}  # id(host view) -> its storage's data_ptr before the op
        self.cpu_operand = False  # a non-scalar CPU tensor among the operands

    def tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.is_cpu:
            if tensor.dim() != 0:
                self.cpu_operand = True
            return tensor
        index = tensor.get_device()
        if self.index is None:
            self.index = index
        elif index != self.index:
            raise _device_mismatch(f"rbln:{self.index}", f"rbln:{index}")
        host = _dlpack.to_host_view(tensor)
        key = id(host)
        self.originals[key] = tensor
        self.host_storages[key] = host.untyped_storage().data_ptr()
        return host

    def value(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if isinstance(value, (list, tuple)) and value and any(isinstance(v, torch.Tensor) for v in value):
            return type(value)(self.tensor(v) if isinstance(v, torch.Tensor) else v for v in value)
        return value

    def base_containing(self, pointer: int) -> torch.Tensor | None:
        """The rbln argument whose storage holds host address `pointer`, if any."""
        for original in self.originals.values():
            storage = original.untyped_storage()
            start = storage.data_ptr()
            if start <= pointer < start + storage.nbytes():
                return original
        return None


def _replace_device(kwargs: dict, conversion: _Conversion) -> dict:
    device = kwargs.get("device")
    if device is None:
        return kwargs
    device = torch.device(device)
    if device.type != "rbln":
        return kwargs
    index = _runtime.check_index(device.index if device.index is not None else _current_device())
    if conversion.index is None:
        conversion.index = index
    elif conversion.index != index:
        raise _device_mismatch(f"rbln:{conversion.index}", f"rbln:{index}")
    return {**kwargs, "device": torch.device("cpu")}


def _current_device() -> int:
    from . import device_module

    return device_module.current_device()


def _fallback_disabled_error(name: str) -> NotImplementedError:
    return NotImplementedError(
        f"The operator '{name}' is not implemented for RBLN devices, and the CPU fallback is disabled "
        "(TORCH_RBLN_DISABLE_FALLBACK contains 'unsupported_op' or 'all'). Remove that token from "
        "TORCH_RBLN_DISABLE_FALLBACK to run it on the CPU."
    )


def cpu_fallback(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    """Run `op` on the CPU on zero-copy host views of its rbln arguments; results stay on rbln."""
    plan = _plans.get(op) or _plan_for(op)
    if config.fallback_disabled("unsupported_op"):
        raise _fallback_disabled_error(plan.name)
    if op is _HISTC and _integral(args):
        return _histc_integral(op, plan, args, kwargs)
    return run_on_cpu(op, plan, args, kwargs, None)


_HISTC = torch.ops.aten.histc.default

# Reason recorded when an integer histc is counted in float64 on the CPU.
HISTC_INTEGRAL = "integer input counted in float64 (the CPU kernel takes floating inputs only)"


def _integral(args: tuple) -> bool:
    first = args[0] if args else None
    return isinstance(first, torch.Tensor) and not first.is_floating_point() and not first.is_complex()


def _histc_integral(op: Callable, plan: _OpPlan, args: tuple, kwargs: dict) -> torch.Tensor:
    """`torch.histc` of an integer tensor, which CUDA supports (counts in the input's dtype) and the CPU
    kernel rejects ("histogram_cpu not implemented for 'Int'").

    Libraries pick the dtype by device type: transformers' MoE load-balancing loss passes int32 to histc
    on any device but "cpu"/"mps" (CUDA wants integers for determinism), so on rbln it must work as on
    CUDA. The values are widened to float64 (exact for |x| < 2**53) on the device, counted by the CPU
    kernel, and the counts (exact integers) come back in the input's dtype, as CUDA returns them."""
    values = args[0]
    counts = run_on_cpu(op, plan, (values.to(torch.float64), *args[1:]), kwargs, HISTC_INTEGRAL)
    return counts.to(values.dtype)


def run_on_cpu(op: Callable, plan: _OpPlan, args: tuple, kwargs: dict, reason: str | None) -> Any:
    """Run `op` on host views and bring results back to the arguments' rbln device (counted, logged)."""
    if kwargs and "out" in kwargs and out_shares_memory(kwargs["out"], args):
        refuse_aliasing_as_cpu(op, args, kwargs)
    elif plan.mutable_positions and _written_shares_memory(plan.mutable_positions, args):
        refuse_aliasing_as_cpu(op, args, kwargs)  # `x[:4].addcdiv_(x[1:], t)`: torch's overlap error
    if _profiling.active():
        with _profiling.region("cpu_fallback", plan.name, reason=reason or NO_KERNEL):
            return _run_simple(op, plan, args, kwargs, reason) if plan.simple else \
                _run_general(op, plan, args, kwargs, reason)
    if plan.simple:
        return _run_simple(op, plan, args, kwargs, reason)
    return _run_general(op, plan, args, kwargs, reason)


def out_shares_memory(out: Any, args: tuple) -> bool:
    """Whether an rbln `out=` tensor shares a storage with an rbln input (cheap: storage addresses)."""
    outs = out if isinstance(out, (list, tuple)) else (out,)
    storages = {t.untyped_storage().data_ptr() for t in outs if isinstance(t, torch.Tensor) and not t.is_cpu}
    if not storages:
        return False
    for value in args:
        for tensor in value if isinstance(value, (list, tuple)) else (value,):
            if (isinstance(tensor, torch.Tensor) and not tensor.is_cpu
                    and tensor.untyped_storage().data_ptr() in storages):
                return True
    return False


def _written_shares_memory(positions: tuple[int, ...], args: tuple) -> bool:
    """Whether an argument an in-place op writes shares a storage with another of its rbln arguments."""
    for position in positions:
        if position < len(args):
            written = args[position]
            others = args[:position] + args[position + 1:]
            if isinstance(written, torch.Tensor) and out_shares_memory(written, others):
                return True
    return False


def refuse_aliasing_as_cpu(op: Callable, args: tuple, kwargs: dict) -> None:
    """Raise the error PyTorch's CPU kernel raises for this call's aliasing, if it raises one.

    Host views of one rbln storage are separate CPU storages, so the CPU kernel's own overlap checks
    (an output overlapping an input: "unsupported operation: ...") cannot see that they alias. The call
    is replayed on CPU copies that alias exactly as the rbln tensors do (one CPU copy per rbln storage,
    each tensor a view of it at its offset and strides); whatever that replay raises is what a CPU call
    raises. Nothing is written to the rbln tensors."""
    copies: dict[int, torch.Tensor] = {}

    def replay(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return type(value)(replay(v) for v in value)
        if not isinstance(value, torch.Tensor) or value.is_cpu:
            return value
        storage = value.untyped_storage()
        key = storage.data_ptr()
        if key not in copies:
            copies[key] = torch.empty(storage.nbytes(), dtype=torch.uint8)
        flat = copies[key]
        usable = flat[: flat.numel() - flat.numel() % value.element_size()].view(value.dtype)
        return usable.as_strided(value.shape, value.stride(), value.storage_offset())

    try:
        op(*replay(args), **{k: replay(v) for k, v in kwargs.items()})
    except RuntimeError as error:
        if "unsupported operation" in str(error):
            raise RuntimeError(str(error)) from None


def _run_simple(op: Callable, plan: _OpPlan, args: tuple, kwargs: dict, reason: str | None) -> Any:
    """The hot path: a functional op whose tensors are positional and all on one rbln device.
    Anything unusual (CPU operands, wrapped numbers, tensors in kwargs) takes the general path."""
    index = -1
    host_args = []
    to_host = _dlpack.to_host_view
    for value in args:
        if isinstance(value, torch.Tensor):
            if value.is_cpu:
                if value.dim():
                    return _run_general(op, plan, args, kwargs, reason)
                host_args.append(value)
                continue
            device_index = value.get_device()
            if device_index != index:
                if index >= 0:
                    raise _device_mismatch(f"rbln:{index}", f"rbln:{device_index}")
                index = device_index
            host_args.append(to_host(value))
        elif isinstance(value, _NUMBERS) or isinstance(value, (list, tuple)):
            return _run_general(op, plan, args, kwargs, reason)
        else:
            host_args.append(value)
    if index < 0:
        return _run_general(op, plan, args, kwargs, reason)
    for value in kwargs.values():
        if isinstance(value, torch.Tensor):
            return _run_general(op, plan, args, kwargs, reason)
    record(plan.name, reason)
    result = op(*host_args, **kwargs)
    if type(result) is torch.Tensor:
        return _memory.adopt(result, index)
    return _to_device(result, _Conversion(), index, False)


def _run_general(op: Callable, plan: _OpPlan, args: tuple, kwargs: dict, reason: str | None) -> Any:
    conversion = _Conversion()
    host_args = []
    for value in args:
        if isinstance(value, torch.Tensor):
            host_args.append(value if value.is_cpu and not value.dim() else conversion.tensor(value))
        elif isinstance(value, (list, tuple)):
            host_args.append(conversion.value(value))
        else:
            host_args.append(value)
    if plan.tensor_positions:
        for position in plan.tensor_positions:
            if position < len(host_args) and isinstance(host_args[position], _NUMBERS):
                op, host_args = _with_scalar_overload(op, host_args)
                break
    if kwargs:
        value_of = conversion.value
        host_kwargs = {name: value_of(value) for name, value in kwargs.items()}
        if "device" in host_kwargs:
            host_kwargs = _replace_device(host_kwargs, conversion)
    else:
        host_kwargs = kwargs
    index = conversion.index
    if index is None:
        # No rbln tensor and no rbln device argument: nothing of ours is involved.
        return op(*args, **kwargs)
    if conversion.cpu_operand:
        _check_cpu_operands(plan, args, kwargs, index)
    record(plan.name, reason)
    staged = _stage_strided_outs(plan, host_kwargs) if plan.mutable_kwargs else []
    try:
        result = op(*host_args, **host_kwargs)
        if staged:
            result = _unstage(staged, host_kwargs, result)
            if result is _RERUN:
                result = op(*host_args, **host_kwargs)
    except RuntimeError as error:
        if "not resizable" not in str(error) or not plan.mutable_kwargs:
            raise
        result = _retry_with_fresh_outputs(op, plan, host_args, host_kwargs, conversion)
    if plan.mutable_positions or plan.mutable_kwargs:
        _write_back_mutations(plan, host_args, host_kwargs, conversion)
    if type(result) is torch.Tensor and not plan.returns_alias and id(result) not in conversion.originals:
        return _memory.adopt(result, index)
    return _to_device(result, conversion, index, plan.returns_alias)


_NUMBERS = (bool, int, float, complex)
_scalar_overloads: dict[Any, Any] = {}


def _with_scalar_overload(op: Any, host_args: list) -> tuple[Any, list]:
    """A wrapped number (`x.remainder(2)` reaches us as `remainder.Tensor(x, 2)`): call the overload
    that takes a Scalar there, so type promotion treats it as a Python number, as PyTorch does."""
    key = (op, tuple(isinstance(a, _NUMBERS) for a in host_args))
    chosen = _scalar_overloads.get(key)
    if chosen is None:
        chosen = _find_scalar_overload(op, host_args) or _wrap_numbers
        _scalar_overloads[key] = chosen
    if chosen is _wrap_numbers:
        return op, _wrap_numbers(op, host_args)
    return chosen, host_args


def _find_scalar_overload(op: Any, host_args: list) -> Any:
    schema = op._schema
    packet = op.overloadpacket
    for name in packet.overloads():
        candidate = getattr(packet, name)
        arguments = candidate._schema.arguments
        if len(arguments) != len(schema.arguments) or len(candidate._schema.returns) != len(schema.returns):
            continue
        compatible = True
        for value, mine, theirs in zip(host_args, schema.arguments, arguments, strict=False):
            wrapped_number = isinstance(value, _NUMBERS) and str(mine.type) == "Tensor"
            expected = "number" if wrapped_number else str(mine.type)
            if str(theirs.type) != expected:
                compatible = False
                break
        for mine, theirs in zip(schema.arguments[len(host_args):], arguments[len(host_args):], strict=True):
            if str(mine.type) != str(theirs.type):
                compatible = False
        if compatible:
            return candidate
    return None


def _wrap_numbers(op: Any, host_args: list) -> list:
    """No Scalar overload: pass numbers as 0-dim tensors of the dtype a wrapped number would have."""
    schema = op._schema
    wrapped = []
    for value, argument in zip(host_args, schema.arguments, strict=False):
        if isinstance(value, _NUMBERS) and str(argument.type) == "Tensor":
            value = torch.scalar_tensor(value, dtype=_wrapped_dtype(value))
        wrapped.append(value)
    return wrapped


def _wrapped_dtype(value: bool | int | float | complex) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    if isinstance(value, float):
        return torch.float64
    return torch.complex128


def _check_cpu_operands(plan: _OpPlan, args: tuple, kwargs: dict, index: int) -> None:
    """Like CUDA, a non-scalar CPU tensor next to rbln tensors is an error (indices excepted)."""
    for position, value in enumerate(args):
        if position not in plan.cpu_allowed_positions:
            _reject_cpu(value, index)
    for value in kwargs.values():
        _reject_cpu(value, index)


def _reject_cpu(value: Any, index: int) -> None:
    values = value if isinstance(value, (list, tuple)) else (value,)
    for item in values:
        if isinstance(item, torch.Tensor) and item.is_cpu and item.dim() != 0:
            raise _device_mismatch(f"rbln:{index}", "cpu")


_RERUN = object()  # `_unstage`: run the call again on the `out=` views themselves


def _stage_strided_outs(plan: _OpPlan, host_kwargs: dict) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Replace each non-contiguous `out=` host view by a fresh contiguous CPU tensor of its shape and
    dtype, (name, view, fresh) each; `_unstage` copies the results into the views. Why: some CPU
    kernels write a non-contiguous `out=` wrongly (torch 2.13's `gelu.out` leaves it unwritten), and
    computing contiguously, then copying, is what torch's structured kernels do for such outputs."""
    staged = []
    for name in plan.mutable_kwargs:
        view = host_kwargs.get(name)
        if isinstance(view, torch.Tensor) and view.numel() and not view.is_contiguous():
            fresh = torch.empty(view.shape, dtype=view.dtype)
            host_kwargs[name] = fresh
            staged.append((name, view, fresh))
    return staged


def _unstage(staged: list, host_kwargs: dict, result: Any) -> Any:
    """Copy each staged result into its view and put the views back (the call's result then names the
    views), or `_RERUN` when the op resized a staged tensor (an `out=` of another shape: the call runs
    again on the views, for torch's own resize or error)."""
    for name, view, _fresh in staged:
        host_kwargs[name] = view
    if any(fresh.shape != view.shape for _name, view, fresh in staged):
        return _RERUN
    views = {}
    for _name, view, fresh in staged:
        view.copy_(fresh)
        views[id(fresh)] = view
    if isinstance(result, torch.Tensor):
        return views.get(id(result), result)
    if isinstance(result, (list, tuple)):
        return type(result)(views.get(id(r), r) for r in result)
    return result


def _retry_with_fresh_outputs(
    op: Callable, plan: _OpPlan, host_args: list, host_kwargs: dict, conversion: _Conversion
) -> Any:
    """An `out=` too small for the result: compute into fresh CPU tensors, then re-point the outs."""
    for name in plan.mutable_kwargs:
        value = host_kwargs.get(name)
        if isinstance(value, torch.Tensor):
            fresh = torch.empty(0, dtype=value.dtype)
            conversion.originals[id(fresh)] = conversion.originals.pop(id(value))
            host_kwargs[name] = fresh
        elif isinstance(value, (list, tuple)):
            replaced = []
            for item in value:
                fresh = torch.empty(0, dtype=item.dtype)
                conversion.originals[id(fresh)] = conversion.originals.pop(id(item))
                replaced.append(fresh)
            host_kwargs[name] = type(value)(replaced)
    return op(*host_args, **host_kwargs)


def _sync_metadata(
    original: torch.Tensor, host: torch.Tensor, storage_before: int | None, index: int
) -> None:
    """Make an rbln argument reflect what the CPU kernel did to its host view."""
    if storage_before is None or host.untyped_storage().data_ptr() != storage_before:
        with torch.no_grad():
            original.set_(_memory.adopt(host, index))
    elif (
        host.shape != original.shape
        or host.stride() != original.stride()
        or host.data_ptr() != original.data_ptr()
    ):
        _set_geometry(original, original, host)
    if host.is_conj() != original.is_conj():
        torch._C._set_conj(original, host.is_conj())


def _write_back_mutations(plan: _OpPlan, host_args: list, host_kwargs: dict, conversion: _Conversion) -> None:
    index = conversion.index
    mutated: list[torch.Tensor] = []
    for position in plan.mutable_positions:
        if position < len(host_args):
            mutated.append(host_args[position])
    for name in plan.mutable_kwargs:
        value = host_kwargs.get(name)
        if isinstance(value, (list, tuple)):
            mutated.extend(value)
        elif value is not None:
            mutated.append(value)
    for host in mutated:
        if isinstance(host, torch.Tensor):
            original = conversion.originals.get(id(host))
            if original is not None:
                _sync_metadata(original, host, conversion.host_storages.get(id(host)), index)


def _to_device(result: Any, conversion: _Conversion, index: int, may_alias: bool) -> Any:
    if isinstance(result, torch.Tensor):
        original = conversion.originals.get(id(result))
        if original is not None:
            return original
        if may_alias and result.numel():
            base = conversion.base_containing(result.data_ptr())
            if base is not None:
                return _view_of(base, result)
        return _memory.adopt(result, index)
    if isinstance(result, (tuple, list)):
        adopted: dict[int, torch.Tensor] = {}
        converted = []
        for item in result:
            if isinstance(item, torch.Tensor) and id(item) not in conversion.originals:
                # Several results may share one fresh CPU storage: adopt it once, view it after.
                pointer = item.untyped_storage().data_ptr()
                if pointer and pointer in adopted:
                    converted.append(_view_of(adopted[pointer], item))
                    continue
                device_item = _to_device(item, conversion, index, may_alias)
                if pointer:
                    adopted[pointer] = device_item
                converted.append(device_item)
            else:
                converted.append(_to_device(item, conversion, index, may_alias))
        return type(result)(converted)
    return result


def _set_geometry(target: torch.Tensor, base: torch.Tensor, host_view: torch.Tensor) -> None:
    """Point `target` at `base`'s storage with the sizes, strides and address of `host_view`."""
    storage = base.untyped_storage()
    byte_offset = host_view.data_ptr() - storage.data_ptr()
    itemsize = host_view.dtype.itemsize
    if byte_offset % itemsize:
        raise RuntimeError(f"internal error: misaligned view ({byte_offset} bytes into an rbln storage)")
    with torch.no_grad():
        target.set_(storage, byte_offset // itemsize, host_view.shape, host_view.stride())


def _view_of(base: torch.Tensor, host_view: torch.Tensor) -> torch.Tensor:
    """An rbln view on `base`'s storage with the geometry of `host_view` (which aliases it)."""
    view = torch.empty(0, dtype=host_view.dtype, device=base.device)
    _set_geometry(view, base, host_view)
    if host_view.is_conj():
        torch._C._set_conj(view, True)
    return view
