"""Every table entry on strided inputs: the OpInfo samples of `test_opinfo_table` (float32; float16 for
the half-precision subset, the rest under `-m slow`) with each tensor argument made a strided view on the
device (every other element of a wider buffer, a transposed layout, or contiguous at an offset into a
longer buffer), against the CPU op on the same values.

Why: plans key contiguous operands and leave strided ones to the checked implementations, and the
planners must recognise those keys; `x.t() ** 3` once raised a ValueError from a planner that read a
strided unary key as a binary one, which no contiguous sample reached. Here a call may still decline
(the CPU fallback, logged) but must give the CPU's result or the CPU's error.
"""

from __future__ import annotations

import pytest
import torch

from torch_rbln import registry

from .test_opinfo_table import (
    BFLOAT16_SUBSET,
    DEFAULT_TOL,
    ENTRIES,
    REFERENCES,
    _opinfo,
    _schema_name,
    _to_cpu,
)

MAX_SAMPLES = 3


def _spaced(t: torch.Tensor) -> torch.Tensor:
    """`t` on rbln as every other element of a buffer twice as wide in its last dim."""
    base = torch.empty((*t.shape[:-1], 2 * t.shape[-1]), dtype=t.dtype, device="rbln")
    view = base[..., ::2]
    view.copy_(t.to("rbln"))
    return view


def _transposed(t: torch.Tensor) -> torch.Tensor:
    """`t` on rbln with its last two dims stored the other way round (column-major)."""
    return t.transpose(-1, -2).contiguous().to("rbln").transpose(-1, -2)


def _offset(t: torch.Tensor) -> torch.Tensor:
    """`t` on rbln, contiguous, at an element offset 3 into a longer buffer (a plan reads its address)."""
    flat = torch.empty(t.numel() + 5, dtype=t.dtype, device="rbln")
    view = flat[3:3 + t.numel()].view(t.shape)
    view.copy_(t.to("rbln"))
    return view


LAYOUTS = {"spaced": _spaced, "transposed": _transposed, "offset": _offset}


def _strided(layout: str):
    make = LAYOUTS[layout]

    def to_device(value):
        if not isinstance(value, torch.Tensor):
            return value
        value = value.detach()
        if value.dim() == 0 or value.numel() < 2 or (layout == "transposed" and value.dim() < 2):
            return value.to("rbln")
        return make(value)

    return to_device


def _cases() -> list:
    """(entry, layout, dtype) for every entry, layout and dtype; outside the half-precision subset
    (`BFLOAT16_SUBSET`, the ops models call most) float16 and the spaced layout are marked slow. Why:
    the planners' keys, what this sweep guards, do not depend on the dtype, float16 on contiguous inputs
    is swept by `test_opinfo_table` for every entry, and each float16 case compiled a specialisation of
    its own (158 compiles, ~2 minutes of CPU of a cold suite); the transposed layout still gives every
    entry with a sample of two or more dims a strided key, while the spaced one compiled each op's own
    strided specialisation (93 compiles, 96 s of a cold suite on 2 cores, session 39). `-m slow` runs
    the rest of the matrix."""
    cases = []
    for entry in ENTRIES:
        for layout in LAYOUTS:
            for dtype in (torch.float32, torch.float16):
                slow = (dtype == torch.float16 or layout == "spaced") and entry.name not in BFLOAT16_SUBSET
                name = str(dtype).replace("torch.", "")
                cases.append(pytest.param(entry, layout, dtype, marks=pytest.mark.slow if slow else (),
                                          id=f"{entry.name}-{layout}-{name}"))
    return cases


@pytest.mark.parametrize("entry,layout,dtype", _cases())
def test_entry_on_strided_inputs_matches_cpu(entry, layout, dtype):
    info = _opinfo(entry.opinfo)
    if dtype not in info.supported_dtypes("cpu"):
        pytest.skip(f"{info.name} has no CPU {dtype}")
    name = str(dtype).replace("torch.", "")
    atol, rtol = entry.tol.get(name, DEFAULT_TOL[name])
    for number, sample in enumerate(info.sample_inputs("cpu", dtype, requires_grad=False)):
        if number >= MAX_SAMPLES:
            break
        device_sample = sample.transform(_strided(layout))
        try:
            info.op(sample.input, *sample.args, **sample.kwargs)
        except Exception as error:  # noqa: BLE001 - the CPU refuses the call: rbln must refuse it too
            with pytest.raises(type(error)):
                info.op(device_sample.input, *device_sample.args, **device_sample.kwargs)
            continue
        registry.reset_fallback_report()
        actual = info.op(device_sample.input, *device_sample.args, **device_sample.kwargs)
        # (a call that ran on the CPU fallback keeps the CPU op's open choices, such as the order of ties,
        # which REFERENCES fixes as our kernels do)
        on_device = registry.fallback_report().get(_schema_name(entry), {"device": 0})["device"]
        reference = REFERENCES.get(entry.name, info.op) if on_device else info.op
        expected = reference(sample.input, *sample.args, **sample.kwargs)
        torch.testing.assert_close(_to_cpu(actual), expected, atol=atol, rtol=rtol, equal_nan=True,
                                   check_device=False, msg=lambda m, s=sample: f"{s}: {m}")


SENTINEL = 123.25  # what the gaps of a spaced buffer hold (cast to its dtype): a write there changes it


def _spaced_target(shape, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(a spaced view of `shape` on rbln, the buffer's other elements, as they were)."""
    if not shape:
        base = torch.full((2,), SENTINEL, dtype=dtype, device="rbln")
        return base[0], base[1:]
    base = torch.full((*shape[:-1], 2 * shape[-1]), SENTINEL, dtype=dtype, device="rbln")
    return base[..., ::2], base[..., 1::2]


from .test_opinfo_variants import _opinfo as _variant_opinfo  # noqa: E402
from .test_opinfo_variants import _variants  # noqa: E402


@pytest.mark.parametrize("spec,variant,packet", _variants(), ids=lambda v: str(v))
def test_variant_into_a_strided_tensor_matches_cpu_and_writes_only_its_elements(spec, variant, packet):
    """In place into a spaced `self`, or `out=` a spaced tensor: the view gets the functional op's CPU
    values and the elements between them (another tensor's memory, as far as the op knows) stay
    untouched. (torch 2.13's own CPU `gelu.out` leaves a non-contiguous `out=` unwritten; our CPU
    fallback computes such outputs contiguously and copies them in, see `fallback._stage_strided_outs`.)"""
    info = _variant_opinfo(spec)
    for number, sample in enumerate(info.sample_inputs("cpu", torch.float32, requires_grad=False)):
        if number >= MAX_SAMPLES:
            break
        reference = info.op if variant == "out" else info.inplace_variant
        try:
            expected = reference(sample.input.clone(), *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - a sample the CPU rejects (self would need broadcasting)
            continue
        if not isinstance(expected, torch.Tensor):
            continue
        device = sample.transform(lambda v: v.detach().to("rbln") if isinstance(v, torch.Tensor) else v)
        if variant == "inplace":
            target, gaps = _spaced_target(tuple(sample.input.shape), sample.input.dtype)
            target.copy_(device.input)
            before = gaps.cpu()
            actual = info.inplace_variant(target, *device.args, **device.kwargs)
        else:
            target, gaps = _spaced_target(tuple(expected.shape), expected.dtype)
            before = gaps.cpu()
            actual = info.op(device.input, *device.args, **device.kwargs, out=target)
        assert actual is target
        torch.testing.assert_close(target.cpu(), expected, atol=1e-4, rtol=1e-4, equal_nan=True,
                                   msg=lambda m, s=sample: f"{s}: {m}")
        assert torch.equal(gaps.cpu(), before), f"{packet} ({variant}) wrote outside its target: {sample}"
