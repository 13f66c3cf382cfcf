"""torch_rbln.registry: binds op-library kernels to aten overloads and custom ops for rbln.

Every registered kernel runs behind one dispatcher (`_dispatcher`): per call it checks dtypes
(float32/float16/bfloat16), NaN/Inf inputs (unless `TORCH_RBLN_DEPLOY=ON`) and the kernel's own
`accepts` predicate / `Decline`; declined calls take the CPU fallback (`fallback.run_on_cpu`), logged
at INFO with the reason and counted. Device-kernel calls are counted per op too:
`fallback_report()` says what ran where.

Kernel authors:

    from torch_rbln.registry import register_kernel

    @register_kernel("aten::relu", accepts=lambda x: x.dim() <= 4)
    def relu(x):
        out = torch.empty_like(x)
        my_relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

    # or a new custom op (also traceable by torch.compile, via register_fake):
    register_kernel("mylib::scale2", scale2_impl, reference=lambda x: x * 2)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from torch_rbln import _structural, config, fallback

from ._base import FLOATS, Decline, InvalidCall, Ref, StridedTarget, partial_overlap  # noqa: F401  (FLOATS re-exported)
from ._checks import (
    _device_counts,
    _device_notes,
    _run_device,
    check_inputs,
    defer_counts,
    fold_deferred_counts,
)
from ._memo import BoundedMemo
from .table import NAMES, TABLE, Op

__all__ = [
    "Decline", "NAMES", "TABLE", "Op", "device_counts", "fallback_report", "forget_plans", "format_report",
    "register_kernel", "register_table", "reset_fallback_report",
]

_log = logging.getLogger("torch_rbln.registry")
_lock = threading.Lock()
_libraries: list[torch.library.Library] = []
_user: dict[str, tuple[Callable, Callable | None]] = {}  # aten name -> (impl, accepts), overriding TABLE
_registered = False
_kernels: dict[str, Callable] = {}  # table overload name -> its registered dispatcher (tests, benchmarks)


def _out_overlaps_an_input(out: Any, args: tuple) -> bool:
    outs = out if isinstance(out, (list, tuple)) else (out,)
    for value in args:
        group = value if isinstance(value, (list, tuple)) else (value,)
        for tensor in group:
            if isinstance(tensor, Tensor) and not tensor.is_cpu:
                for written in outs:
                    if isinstance(written, Tensor) and partial_overlap(written, tensor):
                        return True
    return False


def _dispatcher(entry: Op, overload: torch._ops.OpOverload | None = None) -> Callable:
    """The PrivateUse1 kernel of one table entry. What it needs beyond the entry's flags (the overload,
    its fallback plan, the implementation, the family's planner, which import the
    kernel modules) is looked up on its first call: registering the ~150 entries at `import torch` must
    stay cheap.

    An entry of a migrated family (`Op.planner`, see `plan.py`) keys each call by the family's
    `signature`; the plan kept for that key runs the call (built on the key's first call, or the CPU
    fallback for a key the family declines). Whatever the plans do not take runs the checked
    implementation."""
    short = entry.name
    int_inputs = entry.int_inputs
    overwrites_first = entry.overwrites_first
    exact = entry.exact
    in_place = short.split(".")[0].endswith("_")  # aten's name of an in-place overload (add_, zero_)
    counts = _device_counts
    fallback_plan = name = default = signature = build = None
    plans: dict = BoundedMemo(1024)  # signature -> Plan
    resolved = False
    planned_calls = 0  # device calls run by a plan since the last fold into `counts` (`fold`)

    def fold() -> bool:
        """Add the plans' calls to `counts` (run when the counts are read: one integer per call here
        instead of a Counter update, ~0.1 us of a 4-element op)."""
        nonlocal planned_calls
        if planned_calls:
            calls, planned_calls = planned_calls, 0
            counts[name] += calls
        return True

    def resolve() -> None:
        nonlocal overload, fallback_plan, name, default, signature, build, resolved
        if overload is None:
            overload = _overload(short)
        fallback_plan = fallback._plan_for(overload)
        name = fallback_plan.name
        default = (entry.kernel, None)
        family = entry.planner
        if family is not None:
            signature, build = family.signature, family.plan
            defer_counts(fold)
        resolved = True

    def planned(key: tuple, operands: tuple) -> Any:
        """Build the plan of a new key (a Decline is kept as the key's reason for the CPU fallback; a
        planner that fails otherwise leaves the key to the checked implementation, with a WARNING)."""
        from .plan import NO_PLAN, Plan

        try:
            plan = build(key, operands)
        except Decline as decline:
            plan = Plan.declined(decline.reason)
        except (InvalidCall, config.ConfigError):
            raise  # the user's call or environment is wrong
        except Exception as error:  # noqa: BLE001 - a planner bug must not fail the call
            _log.warning("rbln plan for %s failed (%s: %s); calls of this signature take the checked path",
                         name, type(error).__name__, error)
            plan = NO_PLAN
        plans[key] = plan
        return plan

    def kernel(*args: Any, **kwargs: Any) -> Any:
        nonlocal planned_calls
        if not resolved:
            resolve()
        if kwargs and "out" in kwargs and _out_overlaps_an_input(kwargs["out"], args):
            # run_on_cpu replays the aliasing on CPU copies first and raises PyTorch's own error
            return fallback.run_on_cpu(overload, fallback_plan, args, kwargs, "out= overlaps an input")
        if not _user or short not in _user:
            if signature is not None:
                signed = signature(args, kwargs)
                if signed is not None:
                    key, operands = signed
                    plan = plans.get(key)
                    if plan is None:
                        plan = planned(key, operands)
                    run = plan.run
                    if run is not None:
                        result = run(operands)
                        if result is not None:
                            planned_calls += 1
                            return result
                    elif plan.reason is not None:
                        return fallback.run_on_cpu(overload, fallback_plan, args, kwargs, plan.reason)
        impl, accepts = _user.get(short, default) if _user else default
        reason = _refusal(args, kwargs, accepts, int_inputs, overwrites_first, exact)
        if reason is None:
            try:
                result = impl(*args, **kwargs)
                counts[name] += 1
                return result
            except StridedTarget as strided:
                result, reason = _staged(impl, args, kwargs, strided.reason, in_place, overwrites_first, name)
                if result is not None:
                    counts[name] += 1
                    return result
            except Decline as decline:
                reason = decline.reason
            except (InvalidCall, config.ConfigError):
                raise  # the user's call or environment is wrong: the CPU would not make it right
            except Exception as error:  # noqa: BLE001 - a kernel bug must not change results: run on CPU
                reason = _kernel_error(name, error)
        return fallback.run_on_cpu(overload, fallback_plan, args, kwargs, reason)

    kernel.__name__ = f"rbln_{short.replace('.', '_')}"
    kernel.plans = lambda: plans  # type: ignore[attr-defined]  # the memo, for tests and benchmarks
    return kernel


def _kernel_error(name: str, error: Exception) -> str:
    """The fallback reason of a kernel that failed (logged: a kernel bug must not change results)."""
    _log.warning("rbln kernel for %s failed (%s: %s); running it on the CPU", name, type(error).__name__,
                 error)
    return f"kernel error: {type(error).__name__}"


def _staged(impl: Callable, args: tuple, kwargs: dict, reason: str, in_place: bool, overwrites_first: bool,
            name: str) -> tuple[Any, str]:
    """(the result, or None with the fallback's reason) of a call whose strided target the
    implementation refused (for `reason`), run through a contiguous staging tensor (`staging.py`)."""
    from .staging import run_staged

    try:
        return run_staged(impl, args, kwargs, in_place, overwrites_first), reason
    except Decline as decline:
        return None, decline.reason
    except (InvalidCall, config.ConfigError):
        raise
    except Exception as error:  # noqa: BLE001 - as the implementation's own call
        return None, _kernel_error(name, error)


def _refusal(args: tuple, kwargs: dict, accepts: Callable | None, int_inputs: bool, overwrites_first: bool,
             exact: bool = False) -> str | None:
    """Why the checked path declines this call: `check_inputs` (dtypes, devices, NaN/Inf), then the
    user's `accepts` (False or a reason); None when the implementation runs."""
    reason = check_inputs(args, kwargs, int_inputs or accepts is not None, overwrites_first, exact)
    if reason is None and accepts is not None:
        verdict = accepts(*args, **kwargs)
        if verdict is not True:
            reason = verdict if isinstance(verdict, str) else "declined by accepts"
    return reason


def _deferred(ref: Ref) -> Callable:
    """A kernel that imports `ref` on its first call (for heavy ops, where one more Python call is
    nothing next to the op)."""
    function = None

    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal function
        if function is None:
            function = ref.get()
        return function(*args, **kwargs)

    call.__name__ = f"rbln_{ref.attr}"
    return call


def _first_device_copy(src: Tensor, dst: Tensor, *, fresh: bool = False) -> bool:
    """The runtime's device-to-device copy until the first one: imports the copy kernels' module and
    hands its `copy_on_device` to the runtime, which calls it directly from then on."""
    from . import _copy

    _structural.set_device_copy(_copy.copy_on_device)
    return _copy.copy_on_device(src, dst, fresh=fresh)


# aten overloads bound outside the table: (name, dispatch key, implementation in registry.attention)

def _arange(start, end, step=1, *, dtype=None, layout=None, device=None, pin_memory=None) -> Tensor:
    """rbln kernel of `aten::arange.start_step` (and `arange`, `arange.start`): the result allocated at
    its length (`gather.arange_result`), then the `arange.start_out` kernel into it, which takes its plan
    (torch's composite kernel allocates an empty tensor that the out= call resizes)."""
    from torch_rbln import _memory

    from . import gather

    n, dtype = gather.arange_result(start, end, step, dtype, layout, pin_memory)
    out = _memory.empty((n,), dtype, _structural._target_index(device))
    return _kernels["arange.start_out"](start, end, step, out=out)


def _arange_end(end, *, dtype=None, layout=None, device=None, pin_memory=None) -> Tensor:
    return _arange(0, end, 1, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)


# factory ops whose CompositeExplicitAutograd kernel allocates an empty tensor and resizes it in an
# out= call: ours allocate the result once
_FACTORIES = (("arange", _arange_end), ("arange.start", _arange), ("arange.start_step", _arange))

_ATTENTION = (
    ("scaled_dot_product_attention", "AutogradPrivateUse1", "scaled_dot_product_attention"),
    ("scaled_dot_product_attention", "PrivateUse1", "scaled_dot_product_attention"),
    ("_scaled_dot_product_fused_attention_overrideable", "PrivateUse1", "fused_attention_forward_kernel"),
    ("_scaled_dot_product_fused_attention_overrideable_backward", "PrivateUse1",
     "fused_attention_backward_kernel"),
)


def _overload(name: str) -> torch._ops.OpOverload:
    if name.startswith("aten::"):
        name = name[len("aten::"):]
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def _impl_name(name: str) -> str:
    return name[: -len(".default")] if name.endswith(".default") else name


def register_table(library: torch.library.Library | None = None) -> None:
    """Register every TABLE entry for PrivateUse1 (idempotent). Called by `torch_rbln` at import."""
    global _registered
    with _lock:
        if _registered:
            return
        if library is None:
            library = torch.library.Library("aten", "IMPL")
            _libraries.append(library)
        for entry in TABLE:
            _kernels[entry.name] = _dispatcher(entry)
            library.impl(_impl_name(entry.name), _kernels[entry.name], "PrivateUse1")
        for name, key, attr in _ATTENTION:
            library.impl(name, _deferred(Ref("attention", attr)), key)
        for name, factory in _FACTORIES:
            library.impl(name, factory, "PrivateUse1")
        _structural.set_device_copy(_first_device_copy)
        _registered = True
    from . import custom_ops

    custom_ops.register(_register_custom)


def _aten_name(op: Any) -> str | None:
    if isinstance(op, torch._ops.OpOverload):
        if op.namespace != "aten":
            return None
        return op._schema.name[len("aten::"):] + (f".{op._overloadname}" if op._overloadname != "default"
                                                   else ".default")
    if isinstance(op, torch._ops.OpOverloadPacket):
        return _aten_name(op.default)
    if isinstance(op, str) and (op.startswith("aten::") or "::" not in op):
        name = op[len("aten::"):] if op.startswith("aten::") else op
        return name if "." in name else f"{name}.default"
    return None


def register_kernel(op: Any, impl: Callable | None = None, *, accepts: Callable | None = None,
                    reference: Callable | None = None, fake: Callable | None = None,
                    mutates_args: tuple = ()) -> Any:
    """Make `impl` (a Python function launching DSL kernels on rbln tensors) the rbln kernel of `op`.

    `op`: an aten overload (`torch.ops.aten.relu.default`, `"aten::relu"`, `"relu.default"`) or a new
    custom op name `"namespace::name"` (then `reference`, the CPU implementation with type hints as
    `torch.library.custom_op` requires, defines the op, runs it on CPU and for declined calls, and traces
    it under torch.compile unless `fake` is given). `accepts(*args, **kwargs)` returns True to run
    `impl`, else False or a reason string; `impl` may also raise `Decline(reason)`. Declined calls, and
    inputs failing the generic checks (dtype, NaN/Inf), run on the CPU, logged with the reason.
    Usable as a decorator: `@register_kernel("aten::relu", accepts=...)`. Returns `impl` (aten) or the
    custom op.
    """
    if impl is None:
        return lambda function: register_kernel(op, function, accepts=accepts, reference=reference, fake=fake,
                                                mutates_args=mutates_args)
    name = _aten_name(op)
    if name is not None:
        return _register_aten(name, impl, accepts)
    return _register_custom(str(op), impl, accepts, reference, fake, mutates_args)


def _register_aten(name: str, impl: Callable, accepts: Callable | None) -> Callable:
    overload = _overload(name)
    entry = Op(name, impl, int_inputs=True)
    with _lock:
        already = name in _user or name in NAMES
        _user[name] = (impl, accepts)
    if not already:
        library = torch.library.Library("aten", "IMPL")
        _libraries.append(library)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # An overload already bound to the plain CPU fallback is overridden (the dispatcher keeps the
            # newest registration for a key).
            for key in _keys(name):
                torch.library._impls.discard(key)
            library.impl(_impl_name(name), _dispatcher(entry, overload), "PrivateUse1")
    return impl


def _keys(name: str) -> tuple[str, ...]:
    packet, _, overload = name.partition(".")
    short = packet if overload == "default" else name
    return (f"aten/{short}/PrivateUse1", f"aten/{name}/PrivateUse1")


def _register_custom(qualname: str, impl: Callable | Ref, accepts: Callable | None,
                     reference: Callable | None, fake: Callable | None, mutates_args: tuple,
                     fast: Callable | Ref | None = None) -> Any:
    """`register_kernel` for a new custom op. `fast(*args, **kwargs)` (the op library's own custom ops)
    is an optional shortcut for plain calls: the result `impl` gives, or None to take the checked path.
    `impl` and `fast` may be `Ref`s, imported on the op's first call."""
    if reference is None:
        raise TypeError(f"register_kernel({qualname!r}): a new custom op needs reference= (its CPU "
                        "implementation, with type hints)")
    custom = torch.library.custom_op(qualname, reference, mutates_args=mutates_args)
    custom.register_fake(fake if fake is not None else reference)
    namespace, _, opname = qualname.partition("::")
    name = qualname  # the fallback plan's name of the op (its schema name)

    def checked(*args: Any, **kwargs: Any) -> Any:
        nonlocal impl
        if impl.__class__ is Ref:
            impl = impl.get()
        reason = _refusal(args, kwargs, accepts, True, False)
        if reason is None:
            try:
                return _run_device(name, impl, args, kwargs)
            except Decline as decline:
                reason = decline.reason
        overload = getattr(getattr(torch.ops, namespace), opname).default
        return fallback.run_on_cpu(overload, fallback._plan_for(overload), args, kwargs, reason)

    kernel = checked
    if fast is not None:
        def kernel(*args: Any, **kwargs: Any) -> Any:  # also under inference_mode, which skips autograd
            nonlocal fast
            if fast.__class__ is Ref:
                fast = fast.get()
            result = fast(*args, **kwargs)
            if result is not None:
                _device_counts[name] += 1
                return result
            return checked(*args, **kwargs)

    custom.register_kernel("rbln", kernel)
    if not mutates_args:
        library = torch.library.Library(namespace, "IMPL")
        _libraries.append(library)
        library.impl(opname, _plain_call_shortcut(custom, namespace, opname, kernel), "AutogradPrivateUse1",
                     with_keyset=True)
    return custom


# The dispatch keys of a call on plain rbln tensors once it reaches the AutogradPrivateUse1 kernel: no
# dispatch mode, subclass, fake or functional tensor, nothing but the backend below autograd.
_PLAIN_CALL_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1).add(
    torch._C.DispatchKey.AutogradPrivateUse1).raw_repr()


def _plain_call_shortcut(custom: Any, namespace: str, opname: str, kernel: Callable) -> Callable:
    """The AutogradPrivateUse1 kernel of a functional custom op: a call on plain rbln tensors that records
    no gradient runs `kernel` (the PrivateUse1 kernel: its `fast` shortcut, else the checked path) right
    here.
    `torch.library.custom_op`'s own path to it (its Python autograd kernel, a redispatch, the backend
    wrapper that checks aliasing and disables dynamo) costs about 30 us, twice a small op. Every other
    call (a gradient to record, a dispatch mode, fake or functional tensors under tracing) takes
    custom_op's autograd kernel as before, so autograd, torch.compile and the aliasing checks behave
    exactly as custom_op defines them."""
    general = None  # custom_op's autograd kernel, built on the first call that needs it
    grad_enabled = torch.is_grad_enabled
    any_requires_grad = torch._C._any_requires_grad
    plain = _PLAIN_CALL_KEYS

    def autograd_kernel(keyset: torch._C.DispatchKeySet, *args: Any, **kwargs: Any) -> Any:
        nonlocal general
        if keyset.raw_repr() == plain and not (grad_enabled() and any_requires_grad(*args, **kwargs)):
            return kernel(*args, **kwargs)
        if general is None:
            from torch._library.autograd import make_autograd_impl

            # reads the backward/setup_context when it runs
            general = make_autograd_impl(getattr(getattr(torch.ops, namespace), opname).default, custom)
        return general(keyset, *args, **kwargs)

    autograd_kernel.__name__ = f"rbln_autograd_{opname}"
    return autograd_kernel


def forget_plans() -> None:
    """Drop every plan kept per call signature (the table's ops, attention's with its decode templates,
    the custom ops'), so that each signature's next call builds its plan again. Why: a decoding step
    meets new sequence lengths, each a signature of its own, so what a request of unseen lengths pays
    includes building those plans, which repeated benchmark calls of one length hide
    (`benchmarks/generate.py --fresh-plans`). Compiled kernels and their kept launches stay."""
    for kernel in list(_kernels.values()):
        kernel.plans().clear()
    from . import attention, custom

    for memo in (attention._inference_plans, attention._fused_plans, attention._backward_plans,
                 attention._decode_templates, custom._rms_norm_fast.plans, custom._rotary_fast.plans):
        memo.clear()


# ---------------------------------------------------------------- reporting

def device_counts() -> dict[str, int]:
    fold_deferred_counts()
    return dict(_device_counts)


def fallback_report() -> dict[str, dict[str, Any]]:
    """Per op: {"device": calls on device kernels, "cpu": calls on the CPU fallback, "reasons": {...}}."""
    report: dict[str, dict[str, Any]] = {}
    fold_deferred_counts()
    for name, count in list(_device_counts.items()):
        report.setdefault(name, {"device": 0, "cpu": 0, "reasons": {}})["device"] = count
    reasons = fallback.fallback_reasons()
    for name, count in fallback.fallback_counts().items():
        row = report.setdefault(name, {"device": 0, "cpu": 0, "reasons": {}})
        row["cpu"] = count
        row["reasons"] = reasons.get(name, {})
    return report


def reset_fallback_report() -> None:
    fold_deferred_counts()  # (what the compiled programs counted before the reset goes too)
    _device_counts.clear()
    _device_notes.clear()
    fallback.reset_fallback_counts()


def format_report(report: dict[str, dict[str, Any]] | None = None) -> str:
    """The fallback report as a table (op, calls on device kernels, calls on the CPU, why), most called
    first, and a total line."""
    from torch_rbln._tables import render_table

    report = fallback_report() if report is None else report
    device = sum(r["device"] for r in report.values())
    cpu = sum(r["cpu"] for r in report.values())
    total = device + cpu
    share = 100.0 * device / total if total else 100.0
    rows = []
    for name, row in sorted(report.items(), key=lambda item: -(item[1]["device"] + item[1]["cpu"])):
        reasons = ", ".join(f"{r or 'no kernel'}: {c}" for r, c in row["reasons"].items())
        if row["cpu"] and not reasons:
            reasons = "no rbln kernel"
        elif row["cpu"] and sum(row["reasons"].values()) < row["cpu"]:
            reasons += f", no rbln kernel: {row['cpu'] - sum(row['reasons'].values())}"
        rows.append((name, row["device"], row["cpu"], reasons))
    table = render_table(("op", "device", "cpu", "cpu reasons"), rows, right=("device", "cpu"))
    return f"{table}\ntotal: {device} of {total} op calls on device kernels ({share:.1f}%), {cpu} on CPU"
