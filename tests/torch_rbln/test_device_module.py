"""`torch.rbln`: the device module API."""

from __future__ import annotations

import threading

import pytest
import torch

import torch_rbln  # noqa: F401


def test_counts_and_availability() -> None:
    assert torch.rbln.is_available()
    assert torch.rbln.device_count() == 8
    assert torch.rbln.physical_device_count() == 8
    torch.ones(1, device="rbln:0")
    assert torch.rbln.is_initialized()
    assert "RBLN" in torch.rbln.get_device_name(0)
    assert torch.rbln.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    torch.rbln.synchronize()
    torch.rbln.synchronize("rbln:1")


def test_current_device_set_device_and_context_managers() -> None:
    assert torch.rbln.current_device() == 0
    torch.rbln.set_device(2)
    try:
        assert torch.rbln.current_device() == 2
        assert torch.empty(2, device="rbln").device == torch.device("rbln:2")
        with torch.rbln.device(5):
            assert torch.rbln.current_device() == 5
            assert torch.zeros(1, device="rbln").device.index == 5
        assert torch.rbln.current_device() == 2
        with torch.rbln.device_of(torch.ones(1, device="rbln:3")):
            assert torch.rbln.current_device() == 3
        with torch.rbln.device_of(torch.ones(1)):
            assert torch.rbln.current_device() == 2
    finally:
        torch.rbln.set_device(0)


def test_current_device_is_per_thread() -> None:
    torch.rbln.set_device(1)
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.append(torch.rbln.current_device()))
    thread.start()
    thread.join()
    torch.rbln.set_device(0)
    assert seen == [0]


@pytest.mark.parametrize("bad", [8, -1, "rbln:42"])
def test_set_device_rejects_unassigned(bad: object) -> None:
    with pytest.raises(RuntimeError, match="is not assigned"):
        torch.rbln.set_device(bad)


def test_set_device_rejects_other_device_types() -> None:
    with pytest.raises(ValueError, match="Expected an rbln device"):
        torch.rbln.set_device("cpu")


def test_tensor_creation_and_to_reject_unassigned_device() -> None:
    with pytest.raises(RuntimeError, match=r"Logical device rbln:8 is not assigned \(this process has 8"):
        torch.empty(2, device="rbln:8")
    with pytest.raises(RuntimeError, match="is not assigned"):
        torch.ones(2).to("rbln:12")


def test_rng_is_the_cpu_generator() -> None:
    torch.rbln.manual_seed(123)
    first = torch.randn(4, device="rbln:0").cpu()
    state = torch.rbln.get_rng_state()
    second = torch.randn(4, device="rbln:0").cpu()
    torch.rbln.set_rng_state(state)
    assert torch.equal(torch.randn(4, device="rbln:0").cpu(), second)
    torch.rbln.manual_seed_all(123)
    assert torch.equal(torch.randn(4, device="rbln:0").cpu(), first)
    assert torch.rbln.initial_seed() == 123


def test_topology_and_summary(capsys: pytest.CaptureFixture[str]) -> None:
    topology = torch.rbln.topology()
    assert len(topology.devices) == 8 and topology.unused == ()
    assert topology.devices[3].npus == (3,)
    text = torch.rbln.device_summary()
    assert "| rbln:7         | [ 7 ]            | Active |" in text
    assert text in capsys.readouterr().out
