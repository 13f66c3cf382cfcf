"""The least any pure-Python kernel can cost for an op's schema, next to what ours costs.

Run: python benchmarks/dispatch_floor.py [--passes 4] [--json F]

For each op below, a probe op with the same schema (`rbln_floor::<name>`) gets a PrivateUse1 Python
kernel that does nothing but allocate the op's outputs (shapes and dtypes of a real call, with the
compiled allocator every kernel uses) and return them: no input check, no NaN/Inf scan, no launch. Its
cost is torch boxing the arguments into Python, the allocations, and handing fresh tensors back through
the dispatcher, i.e. a lower bound for any rbln kernel of that schema written in Python. A row whose
floor plus the kernel's own launch exceeds issue 7's 15 us cannot meet it in a pure-Python extension.
All calls go through `OpOverload` on 4-element inputs, rbln floor, rbln op and the CPU op alternating
in rounds; each row is its quietest pass (lowest rbln median), as in `registered_ops.py`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from ops import _timer_overhead_ns  # benchmarks/ops.py, next to this script
from registered_ops import TARGET_US, _per_call, _Side, add_timing_arguments


def _cases() -> dict[str, tuple[Any, tuple, tuple]]:
    """name -> (overload, rbln arguments, CPU arguments)."""
    import torch

    aten = torch.ops.aten
    x, w = torch.rand(1, 4) + 0.5, torch.rand(4) + 0.5
    target = torch.tensor([2])
    out, mean, rstd = aten.native_layer_norm.default(x, [4], w, w, 1e-5)
    q, k, v = (torch.rand(1, 1, 2, 2) for _ in range(3))
    cases: dict[str, tuple[Any, tuple]] = {
        "add.Tensor": (aten.add.Tensor, (w, w)),
        "native_layer_norm.default": (aten.native_layer_norm.default, (x, [4], w, w, 1e-5)),
        "native_layer_norm_backward.default": (aten.native_layer_norm_backward.default,
                                               (x, x, [4], mean, rstd, w, w, [True, True, True])),
        "nll_loss_forward.default": (aten.nll_loss_forward.default, (x.log(), target, None, 1, -100)),
        "max.dim": (aten.max.dim, (w, 0)),
        "rbln::rms_norm": (torch.ops.rbln.rms_norm.default, (w, w, 1e-6)),
        "scaled_dot_product_attention 1x1x2x2": (aten.scaled_dot_product_attention.default, (q, k, v)),
    }
    device_q = tuple(t.to("rbln") for t in (q, k, v))
    fused = aten._scaled_dot_product_fused_attention_overrideable.default
    result = fused(*device_q)
    backward = aten._scaled_dot_product_fused_attention_overrideable_backward.default
    rows = {}
    for name, (overload, cpu_args) in cases.items():
        rows[name] = (overload, tuple(_device(a) for a in cpu_args), cpu_args)
    rows["fused attention forward 1x1x2x2"] = (fused, device_q, None)
    rows["fused attention backward 1x1x2x2"] = (backward, (torch.ones_like(result[0]), *device_q, None,
                                                           [True, True, True, False], *result[:6], 0.0, False,
                                                           *result[6:8]), None)
    return rows


def _device(value: Any) -> Any:
    import torch

    return value.to("rbln") if isinstance(value, torch.Tensor) else value


def _probe(library: Any, overload: Any, args: tuple) -> Callable[[], object]:
    """A call of a probe op with `overload`'s schema whose kernel only allocates and returns outputs
    shaped as `overload(*args)`'s."""
    import torch

    from torch_rbln import _memory

    schema = overload._schema
    suffix = f"_{schema.overload_name}" if schema.overload_name else ""
    name = "floor_" + schema.name.split("::")[1] + suffix
    signature = str(schema)
    signature = name + signature[signature.index("("):]
    library.define(signature)
    result = overload(*args)
    outputs = result if isinstance(result, tuple) else (result,)
    # per output: a tensor to allocate (shape, dtype, device), the position of an earlier output it is
    # (the fused attention forward returns one empty tensor five times), or a non-tensor value
    layouts: list[Any] = []
    for position, output in enumerate(outputs):
        same = next((j for j in range(position) if outputs[j] is output), None)
        if same is not None:
            layouts.append(same)
        elif isinstance(output, torch.Tensor):
            layouts.append((tuple(output.shape), output.dtype, output.get_device()))
        else:
            layouts.append(("value", output))
    empty = _memory.empty
    single = not isinstance(result, tuple)

    def kernel(*call_args: Any, **call_kwargs: Any) -> Any:
        made: list[Any] = []
        for layout in layouts:
            if type(layout) is int:
                made.append(made[layout])
            elif layout[0] == "value":
                made.append(layout[1])
            else:
                made.append(empty(*layout))
        return made[0] if single else tuple(made)

    library.impl(name, kernel, "PrivateUse1")
    probe = getattr(torch.ops.rbln_floor, name).default
    return lambda: probe(*args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_timing_arguments(parser)
    options = parser.parse_args(argv)

    import torch

    import torch_rbln  # noqa: F401

    torch.set_num_threads(1)
    overhead = _timer_overhead_ns()
    library = torch.library.Library("rbln_floor", "DEF")
    cases = []
    for name, (overload, device_args, cpu_args) in _cases().items():
        floor = _probe(library, overload, device_args)
        cpu = _Side(lambda o=overload, a=cpu_args: o(*a)) if cpu_args is not None else None
        cases.append((name, _Side(floor), _Side(lambda o=overload, a=device_args: o(*a)), cpu))
    measured: dict[str, list] = {name: [] for name, *_ in cases}
    for _ in range(options.passes):
        for name, floor, op, cpu in cases:
            floor_us, op_us, _ = _per_call(floor, op, options.rounds, options.calls, overhead)
            cpu_us = _per_call(cpu, cpu, 1, options.calls, overhead)[0] if cpu is not None else float("nan")
            measured[name].append((op_us, floor_us, cpu_us))
    print(f"{'op':<40} {'rbln op':>8} {'floor':>6} {'op-floor':>8} {'torch':>6}  (us per call, quietest of "
          f"{options.passes} passes)")
    rows = []
    for name, *_ in cases:
        op_us, floor_us, cpu_us = min(measured[name])
        rows.append({"op": name, "rbln_us": op_us, "floor_us": floor_us, "cpu_us": cpu_us})
        flag = "floor > target" if floor_us > TARGET_US else (">" if op_us > TARGET_US else "")
        print(f"{name:<40} {op_us:8.1f} {floor_us:6.1f} {op_us - floor_us:8.1f} {cpu_us:6.1f}  {flag}")
    if options.json:
        with open(options.json, "w") as stream:
            json.dump(rows, stream, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
