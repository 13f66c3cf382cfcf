"""Every registered aten overload on 4-element tensors: rbln median us per call vs torch CPU.

Run: python benchmarks/registered_ops.py [--calls 300] [--rounds 5] [--only add,mm] [--deploy] [--json F]

Issue 7's small-op target is "registered op on 4-element tensors: <= 15 us per call median". The short
table in benchmarks/ops.py covers the common ops; this sweep covers every entry of
`torch_rbln.registry.TABLE`, plus the device copies (`copy_`, `clone`, `.contiguous()`, `.to`) that
the table does not list. Arguments come from each overload's schema (a 4-element float32 tensor for
a tensor, 0.5 for a number, dim 0, an `out=` tensor of the right shape) and, for the ops whose
arguments have a structure a schema does not say (matmuls, norms, losses, indices), from a
hand-written sample below. Each overload is called through its `OpOverload` on both sides, so both
pay the same Python-to-dispatcher cost; in-place overloads act on a fresh copy made outside the timed
region: their input is restored before each call, outside the timing.

Each op is first run once with the fallback report reset: a row that ran anything on the CPU fallback
is marked `CPU`, since it would not be timing a device kernel. The shared VM this was written on has
minutes-long phases in which everything, torch included, runs up to ~3x slower, so the sweep runs
`--passes` times and each op's row is its quietest pass (lowest rbln median), with torch's median from
the same pass and the ratio of the two. Rows over the target are marked `>`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from ops import _timer_overhead_ns  # benchmarks/ops.py, next to this script

TARGET_US = 15.0


class _Side:
    """One side (CPU or rbln) of a case: `call` runs the op once; `reset` restores the inputs an
    in-place op overwrote, so every timed call sees the same values (repeated exp_ would reach inf,
    which then takes the NaN/Inf fallback and times something else)."""

    def __init__(self, call: Callable[..., object], inputs: tuple = (),
                 fresh: Callable[[], tuple] | None = None) -> None:
        self._pairs = [(t, t.clone()) for t in inputs]
        self._fresh = fresh  # makes the call's arguments anew before each call (an op that consumes them)
        self._args: tuple = ()
        self.call = call if fresh is None else (lambda: call(*self._args))

    def reset(self) -> None:
        for tensor, saved in self._pairs:
            tensor.copy_(saved)
        if self._fresh is not None:
            self._args = self._fresh()


def _per_call(cpu: _Side, dev: _Side, rounds: int, calls: int, overhead: float
              ) -> tuple[float, float, float]:
    """(CPU median us, rbln median us, rbln 10th-percentile us): every call timed on its own, in rounds
    that alternate a block of rbln calls with a block of CPU calls (a load burst then hits both). A
    side's `reset` (restoring an in-place op's input) runs before each call, outside the timing."""
    clock = time.perf_counter_ns
    for _ in range(20):
        for side in (cpu, dev):
            side.reset()
            side.call()
    cpu_ns: list[int] = []
    dev_ns: list[int] = []
    for _ in range(rounds):
        for side, samples in ((dev, dev_ns), (cpu, cpu_ns)):
            call, reset = side.call, side.reset
            for _ in range(calls):
                reset()
                start = clock()
                call()
                samples.append(clock() - start)
    cpu, dev = cpu_ns, dev_ns
    dev.sort()
    return ((statistics.median(cpu) - overhead) / 1e3, (statistics.median(dev) - overhead) / 1e3,
            (dev[len(dev) // 10] - overhead) / 1e3)


def _samples() -> dict[str, Callable[[], tuple[tuple, dict]]]:
    """Hand-written (args, kwargs) on the CPU for overloads whose arguments a schema does not describe."""
    import torch

    x = lambda *shape: torch.rand(*shape) + 0.5  # noqa: E731 - positive: log/sqrt/pow stay finite
    m22 = lambda: x(2, 2)  # noqa: E731
    logp = lambda: torch.log_softmax(torch.randn(2, 2), 1)  # noqa: E731
    index = lambda: torch.tensor([3, 0, 1, 2])  # noqa: E731
    return {
        "_softmax.default": lambda: ((x(4), 0, False), {}),
        "_log_softmax.default": lambda: ((x(4), 0, False), {}),
        "_softmax_backward_data.default": lambda: ((x(4), torch.softmax(x(4), 0), 0, torch.float32), {}),
        "_log_softmax_backward_data.default": lambda: ((x(4), torch.log_softmax(x(4), 0), 0, torch.float32),
                                                       {}),
        "addmm.default": lambda: ((x(2), m22(), m22()), {}),
        "addmm.out": lambda: ((x(2), m22(), m22()), {"out": torch.empty(2, 2)}),
        "mm.default": lambda: ((m22(), m22()), {}),
        "mm.out": lambda: ((m22(), m22()), {"out": torch.empty(2, 2)}),
        "bmm.default": lambda: ((x(1, 2, 2), x(1, 2, 2)), {}),
        "bmm.out": lambda: ((x(1, 2, 2), x(1, 2, 2)), {"out": torch.empty(1, 2, 2)}),
        "arange.start_out": lambda: ((0, 4), {"out": torch.empty(4)}),
        "cat.default": lambda: (([x(2), x(2)],), {}),
        # an explicit range: histc's default (min == max) takes the range from the data, on the CPU
        "histc.default": lambda: ((x(4), 10, -4.0, 4.0), {}),
        "index_select.default": lambda: ((x(4), 0, torch.tensor([3, 0, 1, 2])), {}),
        "embedding_dense_backward.default": lambda: ((x(2, 2), torch.tensor([1, 0]), 2, -1, False), {}),
        "native_layer_norm.default": lambda: ((x(4), [4], x(4), x(4), 1e-5), {}),
        "native_layer_norm_backward.default": lambda: (
            (x(4), x(4), [4], x(1), x(1), x(4), x(4), [True, True, True]), {}),
        "nll_loss_forward.default": lambda: ((logp(), torch.tensor([0, 1]), None, 1, -100), {}),
        "nll_loss_backward.default": lambda: ((torch.tensor(1.0), logp(), torch.tensor([0, 1]), None, 1, -100,
                                               torch.tensor(2.0)), {}),
        "where.self": lambda: ((torch.tensor([True, False, True, False]), x(4), x(4)), {}),
        "where.self_out": lambda: ((torch.tensor([True, False, True, False]), x(4), x(4)),
                                   {"out": torch.empty(4)}),
        "masked_fill.Scalar": lambda: ((x(4), torch.tensor([True, False, True, False]), 0.5), {}),
        "masked_fill_.Scalar": lambda: ((x(4), torch.tensor([True, False, True, False]), 0.5), {}),
        "masked_fill.Tensor": lambda: ((x(4), torch.tensor([True, False, True, False]), torch.tensor(0.5)),
                                       {}),
        "masked_fill_.Tensor": lambda: ((x(4), torch.tensor([True, False, True, False]), torch.tensor(0.5)),
                                        {}),
        "threshold_backward.default": lambda: ((x(4), x(4) - 1.0, 0.0), {}),
        "div.Scalar_mode": lambda: ((x(4), 0.5), {"rounding_mode": "floor"}),
        "div_.Scalar_mode": lambda: ((x(4), 1.0), {"rounding_mode": "trunc"}),
        "div.Tensor_mode": lambda: ((x(4), x(4)), {"rounding_mode": "floor"}),
        "div_.Tensor_mode": lambda: ((x(4), x(4) + 1.0), {"rounding_mode": "trunc"}),
        "div.out_mode": lambda: ((x(4), x(4)), {"rounding_mode": "floor", "out": torch.empty(4)}),
        "clamp.Tensor": lambda: ((x(4), x(4) * 0.5, x(4) + 0.5), {}),
        "clamp_.Tensor": lambda: ((x(4), x(4) * 0.5, x(4) + 0.5), {}),
        "clamp.Tensor_out": lambda: ((x(4), x(4) * 0.5, x(4) + 0.5), {"out": torch.empty(4)}),
        "clamp.default": lambda: ((x(4), 0.6, 1.2), {}),
        "clamp_.default": lambda: ((x(4), 0.6, 1.2), {}),
        "clamp.out": lambda: ((x(4), 0.6, 1.2), {"out": torch.empty(4)}),
        "argmax.default": lambda: ((x(4),), {}),
        "argmin.default": lambda: ((x(4),), {}),
        "gelu.default": lambda: ((x(4),), {}),
        "gelu_.default": lambda: ((x(4),), {}),
        "pow.Tensor_Scalar": lambda: ((x(4), 2), {}),
        "pow.Tensor_Scalar_out": lambda: ((x(4), 2), {"out": torch.empty(4)}),
        "pow.Tensor_Tensor": lambda: ((x(4), x(4)), {}),
        "pow.Tensor_Tensor_out": lambda: ((x(4), x(4)), {"out": torch.empty(4)}),
        "floor_divide.default": lambda: ((x(4), x(4)), {}),
        "mean.default": lambda: ((x(4),), {}),
        "sum.default": lambda: ((x(4),), {}),
        "std.correction": lambda: ((x(4),), {}),
        "var.correction": lambda: ((x(4),), {}),
        "select_scatter.default": lambda: ((m22(), x(2), 0, 0), {}),
        "max_pool2d_with_indices.default": lambda: ((x(1, 1, 2, 2), [2, 2]), {}),
        "max_pool2d_with_indices_backward.default": lambda: (
            (x(1, 1, 1, 1), x(1, 1, 2, 2), [2, 2], [2, 2], [0, 0], [1, 1], False, torch.tensor([[[[3]]]])),
            {}),
        "avg_pool2d.default": lambda: ((x(1, 1, 2, 2), [2, 2]), {}),
        "gather.default": lambda: ((x(4), 0, index()), {}),
        "scatter_add.default": lambda: ((x(4), 0, index(), x(4)), {}),
        "scatter_add_.default": lambda: ((x(4), 0, index(), x(4)), {}),
        "scatter.src": lambda: ((x(4), 0, index(), x(4)), {}),
        "scatter_.src": lambda: ((x(4), 0, index(), x(4)), {}),
        "scatter.value": lambda: ((x(4), 0, index(), 0.5), {}),
        "scatter_.value": lambda: ((x(4), 0, index(), 0.5), {}),
        **_bitwise_samples(),
    }


def _bitwise_samples() -> dict[str, Callable[[], tuple[tuple, dict]]]:
    """The bitwise ops on int64 operands (a schema's float tensor is not a valid input for them)."""
    import torch

    ints = lambda: torch.tensor([1, 6, 3, 12])  # noqa: E731
    samples: dict[str, Callable[[], tuple[tuple, dict]]] = {}
    for op in ("and", "or", "xor"):
        name = f"bitwise_{op}"
        samples[f"{name}.Tensor"] = samples[f"{name}_.Tensor"] = lambda: ((ints(), ints().flip(0)), {})
        samples[f"{name}.Scalar"] = samples[f"{name}_.Scalar"] = lambda: ((ints(), 5), {})
        samples[f"{name}.Tensor_out"] = lambda: ((ints(), ints().flip(0)), {"out": ints()})
    samples["bitwise_not.default"] = samples["bitwise_not_.default"] = lambda: ((ints(),), {})
    samples["bitwise_not.out"] = lambda: ((ints(),), {"out": ints()})
    return samples


def _from_schema(overload: Any) -> tuple[tuple, dict] | None:
    """(args, kwargs) from the schema alone, or None when an argument's meaning is not evident."""
    import torch

    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for argument in overload._schema.arguments:
        kind = str(argument.type)
        if argument.name == "out":
            value: Any = torch.empty(4, dtype=torch.bool if _is_comparison(overload) else torch.float32)
        elif argument.has_default_value() and not argument.kwarg_only:
            continue
        elif argument.has_default_value():
            continue
        elif kind == "Tensor":
            value = torch.rand(4) + 0.5
        elif kind in ("Scalar", "number"):
            value = 0.5
        elif kind in ("int", "SymInt"):
            value = 0
        elif kind.startswith("List[int]") or kind.startswith("int[]") or kind == "Optional[List[int]]":
            value = [0]
        elif kind == "bool":
            value = False
        else:
            return None
        if argument.kwarg_only:
            kwargs[argument.name] = value
        else:
            args.append(value)
    return tuple(args), kwargs


def _clones(values: Any) -> Any:
    """`values` (a tuple or dict of arguments) with every tensor cloned: a trial call of an in-place
    overload must not change the inputs the timed calls use."""
    import torch

    clone = lambda v: v.clone() if isinstance(v, torch.Tensor) else v  # noqa: E731
    if isinstance(values, dict):
        return {key: clone(value) for key, value in values.items()}
    return tuple(clone(value) for value in values)


def _is_comparison(overload: Any) -> bool:
    return overload._schema.name.split("::")[1].rstrip("_") in ("eq", "ne", "lt", "le", "gt", "ge")


def _on_device(tensor: Any) -> Any:
    """`tensor` on rbln with the same sizes, strides and storage offset (a view stays a view)."""
    base = tensor._base if tensor._base is not None else tensor
    return _device_copy(base).as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())


def _device_copy(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.to("rbln")
    if isinstance(value, list):
        return [_device_copy(v) for v in value]
    return value


def _cases(only: set[str] | None) -> list[tuple[str, _Side, _Side]]:
    import torch
    from torch_rbln.registry import TABLE, _overload

    samples = _samples()
    cases = []
    for entry in TABLE:
        if only and entry.name not in only and entry.name.split(".")[0] not in only:
            continue
        overload = _overload(entry.name)
        maker = samples.get(entry.name)
        made = maker() if maker else _from_schema(overload)
        if made is None:
            print(f"no sample for {entry.name}; skipped", file=sys.stderr)
            continue
        args, kwargs = made
        try:  # a sample the CPU itself refuses would time nothing: say so and go on with the sweep
            overload(*_clones(args), **_clones(kwargs))
        except Exception as error:  # noqa: BLE001 - any refusal is reported the same way
            print(f"the sample for {entry.name} fails on the CPU ({type(error).__name__}: {error}); skipped",
                  file=sys.stderr)
            continue
        dargs = tuple(_device_copy(a) for a in args)
        dkwargs = {k: _device_copy(v) for k, v in kwargs.items()}
        inplace = overload._schema.name.endswith("_")
        cases.append((entry.name,
                      _Side(lambda o=overload, a=args, k=kwargs: o(*a, **k), args[:1] if inplace else ()),
                      _Side(lambda o=overload, a=dargs, k=dkwargs: o(*a, **k), dargs[:1] if inplace else ())))
    # Each row below times one call on operands built before the timing (the views a model would make
    # are rows of their own: `view(2, 2)`, `x[1:]`), so a row is the cost of that op alone.
    a, b = torch.rand(4), torch.rand(4)
    operands = {  # name -> (operands, call); the CPU side gets the same operands on the CPU
        "copy_ (device to device)": ((a, b), lambda x, y: x.copy_(y)),
        "clone": ((a,), lambda x: x.clone()),
        ".contiguous() of a transposed 2x2": ((a.view(2, 2).t(),), lambda x: x.contiguous()),
        "zeros_like": ((a,), lambda x: torch.zeros_like(x)),
        "empty_like": ((a,), lambda x: torch.empty_like(x)),
        ".to(torch.float16)": ((a,), lambda x: x.to(torch.float16)),
        "torch.empty(4)": ((a,), lambda x: torch.empty(4, device=x.device)),
        "empty_strided (transposed strides)": ((a,), lambda x: torch.empty_strided((2, 2), (1, 2),
                                                                                    device=x.device)),
        ".item()": ((a[:1].clone(),), lambda x: x.item()),
        "view as 2x2": ((a,), lambda x: x.view(2, 2)),
        "x[1:]": ((a,), lambda x: x[1:]),
        # our custom ops and attention (registered outside the aten table)
        "rbln::rms_norm": ((a, b), lambda x, w: torch.ops.rbln.rms_norm(x, w, 1e-6)),
        "rbln::rotary_embedding": ((a.view(1, 4), b.view(1, 4), (b * 0.5).view(1, 4)),
                                   torch.ops.rbln.rotary_embedding),
        "scaled_dot_product_attention 1x1x2x2": ((a.view(1, 1, 2, 2), b.view(1, 1, 2, 2), b.view(1, 1, 2, 2)),
                                                 torch.nn.functional.scaled_dot_product_attention),
    }
    for name, (cpu_args, call) in operands.items():
        if only and name not in only:
            continue
        device_args = tuple(_on_device(t) for t in cpu_args)
        cases.append((name, _Side(lambda c=call, xs=cpu_args: c(*xs)),
                      _Side(lambda c=call, xs=device_args: c(*xs))))
    # host <-> device copies: the CPU side is the same copy within host memory
    transfers = {
        ".to('rbln') (host to device)": (lambda: a.to("rbln"), lambda: a.clone()),
        ".cpu() (device to host)": (lambda: da.cpu(), lambda: a.clone()),
    }
    da = a.to("rbln")
    for name, (device_call, cpu_call) in transfers.items():
        if not only or name in only:
            cases.append((name, _Side(cpu_call), _Side(device_call)))
    # the fused attention ops autograd records for SDPA (training: aten::_scaled_dot_product_fused_attention_
    # overrideable and its _backward), called as autograd calls them; the
    # CPU side is torch's own pair for the CPU
    aten = torch.ops.aten
    q, k, v = (t.view(1, 1, 2, 2) for t in (a, b, b * 0.5))
    dq, dk, dv = (t.to("rbln") for t in (q, k, v))
    cpu_forward = aten._scaled_dot_product_flash_attention_for_cpu.default
    cpu_backward = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    forward = aten._scaled_dot_product_fused_attention_overrideable.default
    backward = aten._scaled_dot_product_fused_attention_overrideable_backward.default
    out, lse = cpu_forward(q, k, v)[:2]
    r = forward(dq, dk, dv)
    grad, dgrad = torch.ones_like(out), torch.ones_like(r[0])
    attention = {
        "fused attention forward 1x1x2x2": (
            lambda: cpu_forward(q, k, v), lambda: forward(dq, dk, dv)),
        "fused attention backward 1x1x2x2": (
            lambda: cpu_backward(grad, q, k, v, out, lse, 0.0, False),
            lambda: backward(dgrad, dq, dk, dv, None, [True, True, True, False], r[0], r[1], r[2], r[3], r[4],
                             r[5], 0.0, False, r[6], r[7])),
    }
    for name, (cpu_call, device_call) in attention.items():
        if not only or name in only:
            cases.append((name, _Side(cpu_call), _Side(device_call)))
    name = "resize_ (grow an empty tensor)"  # a fresh empty tensor per call, made outside the timing
    if not only or name in only:
        cases.append((name, _Side(lambda t: t.resize_(4), fresh=lambda: (a.new_empty(0),)),
                      _Side(lambda t: t.resize_(4), fresh=lambda: (da.new_empty(0),))))
    return cases


def _fallbacks(side: _Side) -> int:
    from torch_rbln import registry

    side.reset()
    registry.reset_fallback_report()
    side.call()
    return sum(row["cpu"] for row in registry.fallback_report().values())


def _quietest(passes: list[tuple[float, float, float]]) -> tuple[float, float, float, float]:
    """(rbln median, its p10, torch median, rbln/torch) of the pass whose rbln median is lowest."""
    dev_us, p10_us, cpu_us = min(passes)
    return dev_us, p10_us, cpu_us, dev_us / cpu_us


def add_timing_arguments(parser: argparse.ArgumentParser) -> None:
    """--calls, --rounds, --passes and --json (shared with dispatch_floor.py)."""
    parser.add_argument("--calls", type=int, default=200, help="calls per side and round")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per side and pass")
    parser.add_argument("--passes", type=int, default=4,
                        help="sweeps over every op; each op's row is its quietest pass")
    parser.add_argument("--json", help="also write the rows to this JSON file")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_timing_arguments(parser)
    parser.add_argument("--only", help="comma-separated overloads or op names")
    args = parser.parse_args(argv)

    import torch

    import torch_rbln  # noqa: F401

    torch.set_num_threads(1)
    only = {name.strip() for name in args.only.split(",")} if args.only else None
    overhead = _timer_overhead_ns()
    cases = _cases(only)
    fallbacks = {name: _fallbacks(dev) for name, _, dev in cases}
    # The VM has minutes-long phases in which everything, torch included, runs up to ~3x slower: each
    # op is measured once per pass, passes spread over the run, and its row is its quietest pass.
    measured: dict[str, list] = {name: [] for name, _, _ in cases}
    for _ in range(args.passes):
        for name, cpu, dev in cases:
            cpu_us, dev_us, p10_us = _per_call(cpu, dev, args.rounds, args.calls, overhead)
            measured[name].append((dev_us, p10_us, cpu_us))
    rows = []
    print(f"{'op':<40} {'rbln median':>11} {'p10':>6} {'torch':>6} {'ratio':>6}  (quietest of "
          f"{args.passes} passes, us per call)")
    for name, _, _ in cases:
        dev_us, p10_us, cpu_us, ratio = _quietest(measured[name])
        medians = [dev for dev, _, _ in measured[name]]
        rows.append({"op": name, "cpu_us": cpu_us, "rbln_us": dev_us, "rbln_p10_us": p10_us,
                     "ratio": ratio, "pass_medians_us": medians, "cpu_fallbacks": fallbacks[name]})
        flag = ("CPU " if fallbacks[name] else "") + (">" if dev_us > TARGET_US else "")
        print(f"{name:<40} {dev_us:11.1f} {p10_us:6.1f} {cpu_us:6.1f} {ratio:6.1f}  {flag}")
    over = [r for r in rows if r["rbln_us"] > TARGET_US]
    on_cpu = [r for r in rows if r["cpu_fallbacks"]]
    print(f"\n{len(rows)} ops: {len(rows) - len(over)} at or under {TARGET_US:g} us median, "
          f"{len(over)} over; {len(on_cpu)} touched the CPU fallback")
    if args.json:
        with open(args.json, "w") as stream:
            json.dump(rows, stream, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
