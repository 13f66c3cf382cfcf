"""torch.profiler sees what torch-rbln does in Python: DSL kernel launches (with grid and backend),
kernel compiles, CPU fallbacks (with the reason) and compiled-graph runs."""

from __future__ import annotations

import torch
import torch_rbln.dsl as tl
from torch.profiler import ProfilerActivity, profile

from torch_rbln import dsl as triton


@triton.jit
def profiled_scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)


def _events(prof) -> list:
    return [(event.name, getattr(event, "input_shapes", None)) for event in prof.events()]


def test_kernel_launches_compiles_and_fallbacks_appear_in_the_trace():
    x = torch.arange(100.0, device="rbln")
    out = torch.empty_like(x)
    profiled_scale.clear_cache()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        profiled_scale[(4,)](x, out, 100, BLOCK=32)  # compiles, then launches
        profiled_scale[(4,)](x, out, 100, BLOCK=32)  # the cached fast path
        x.cosh()  # no rbln kernel: the CPU fallback
    names = [event.name for event in prof.events()]
    assert names.count("rbln::kernel profiled_scale") == 2
    assert any(name == "rbln::compile profiled_scale" for name in names)
    assert "rbln::cpu_fallback aten::cosh" in names
    torch.testing.assert_close(out.cpu(), torch.arange(100.0) * 2)


def test_nothing_is_recorded_outside_a_profiling_session():
    from torch_rbln import profiling

    assert not profiling.active()
