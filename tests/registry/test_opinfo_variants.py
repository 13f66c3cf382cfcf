"""The in-place and `out=` overloads of table ops, driven by the same OpInfo samples as the functional
ones: results (and the mutated tensor) match CPU, and the variant really ran on its device kernel.

`test_opinfo_table.py` covers each functional overload; the table also binds `add_.Tensor`,
`add.out`, `clamp_.default`, ... whose argument handling (writing into self, checking `out`) differs.
"""

from __future__ import annotations

import pytest
import torch
from torch_rbln.registry.table import TABLE

import torch_rbln  # noqa: F401
from torch_rbln import registry

op_db = pytest.importorskip("torch.testing._internal.common_methods_invocations").op_db

MAX_SAMPLES = 6
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-2, 2e-2)}
_PACKETS = {entry.name.partition(".")[0] for entry in TABLE}
_OUT_PACKETS = {entry.name.partition(".")[0] for entry in TABLE if "out" in entry.name.partition(".")[2]}


def _opinfo(spec: str):
    name, _, variant = spec.partition(":")
    return next(info for info in op_db if info.name == name and info.variant_test_name == variant)


def _variants() -> list[tuple[str, str, str]]:
    """(opinfo spec, "inplace" | "out", aten packet) for every variant the table binds."""
    found = []
    for entry in TABLE:
        if not entry.opinfo:
            continue
        packet = entry.name.partition(".")[0]
        info = _opinfo(entry.opinfo)
        if info.inplace_variant is not None and f"{packet}_" in _PACKETS:
            found.append((entry.opinfo, "inplace", f"{packet}_"))
        if info.supports_out and packet in _OUT_PACKETS:
            found.append((entry.opinfo, "out", packet))
    return sorted(set(found))


def _rbln(value):
    return value.detach().to("rbln") if isinstance(value, torch.Tensor) else value


@pytest.mark.parametrize("dtype", list(TOL), ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("spec,variant,packet", _variants(), ids=lambda v: str(v))
def test_variant_matches_cpu_on_device_kernel(spec, variant, packet, dtype):
    info = _opinfo(spec)
    if dtype not in info.supported_dtypes("cpu"):
        pytest.skip(f"{info.name} has no CPU {dtype}")
    atol, rtol = TOL[dtype]
    on_device = 0
    for number, sample in enumerate(info.sample_inputs("cpu", dtype, requires_grad=False)):
        if number >= MAX_SAMPLES or on_device >= 2:
            break
        reference = info.op if variant == "out" else info.inplace_variant
        try:  # the reference: the same variant on CPU (in place into a copy of self)
            expected_result = reference(sample.input.clone(), *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - a sample the CPU rejects (e.g. self would need broadcasting)
            continue
        if not isinstance(expected_result, torch.Tensor):
            continue
        device = sample.transform(_rbln)
        registry.reset_fallback_report()
        if variant == "inplace":
            target = device.input
            actual = info.inplace_variant(target, *device.args, **device.kwargs)
            assert actual is target
        else:
            target = torch.empty(expected_result.shape, dtype=expected_result.dtype).to("rbln")
            actual = info.op(device.input, *device.args, **device.kwargs, out=target)
            assert actual is target
        torch.testing.assert_close(target.cpu(), expected_result, atol=atol, rtol=rtol, equal_nan=True,
                                   msg=lambda m, s=sample: f"{s}: {m}")
        row = registry.fallback_report().get(f"aten::{packet}", {"device": 0})
        on_device += row["device"] > 0
    assert on_device >= 1, f"aten::{packet} ({variant}) never ran on its device kernel"
