"""What users of torch.cuda expect of torch.rbln: the current device is honoured by `.to("rbln")`,
`torch.accelerator` works, device properties read as attributes, streams and events exist, and an
rbln module converts back to the CPU while one of its outputs is alive."""

from __future__ import annotations

import threading

import pytest
import torch

import torch_rbln  # noqa: F401


@pytest.fixture(autouse=True)
def back_to_device_zero():
    yield
    torch.rbln.set_device(0)


def test_to_rbln_lands_on_the_current_device():
    torch.rbln.set_device(1)
    assert torch.ones(2).to("rbln").device == torch.device("rbln:1")
    assert torch.ones(2).to(torch.device("rbln")).device == torch.device("rbln:1")
    assert torch.ones(2).to(device="rbln", dtype=torch.float16).device == torch.device("rbln:1")
    assert torch.ones(2).to("rbln:0").device == torch.device("rbln:0")  # an explicit index wins
    module = torch.nn.Linear(2, 2).to("rbln")
    assert {p.device for p in module.parameters()} == {torch.device("rbln:1")}
    with torch.rbln.device(2):
        assert torch.ones(2).to("rbln").device == torch.device("rbln:2")
        assert torch.ones(2).rbln().device == torch.device("rbln:2")
    assert torch.ones(2).to("rbln").device == torch.device("rbln:1")


def test_the_current_device_is_per_thread():
    torch.rbln.set_device(1)
    seen = []
    worker = threading.Thread(target=lambda: seen.append(torch.ones(1).to("rbln").device))
    worker.start()
    worker.join()
    assert seen == [torch.device("rbln:0")]


def test_torch_accelerator_calls_work():
    x = torch.ones(1024, device="rbln")
    torch.accelerator.synchronize()
    assert torch.accelerator.memory_allocated() >= x.numel() * 4
    assert torch.accelerator.max_memory_allocated() >= torch.accelerator.memory_allocated()
    assert torch.accelerator.memory_stats()["allocated_bytes.all.current"] == torch.rbln.memory_allocated()
    torch.accelerator.reset_peak_memory_stats()
    free, total = torch.accelerator.get_memory_info()
    assert 0 < free <= total
    torch.accelerator.empty_cache()
    torch.accelerator.set_device_index(2)
    assert torch.accelerator.current_device_index() == 2 == torch.rbln.current_device()


def test_device_properties_read_as_attributes_and_keys():
    props = torch.rbln.get_device_properties(0)
    assert props.total_memory == torch.rbln.mem_get_info(0)[1] == props["total_memory"]
    assert props.name == torch.rbln.get_device_name(0) and props.npu_count == len(props.npus) >= 1
    assert "total_memory=" in repr(props)


def test_streams_and_events_of_a_synchronous_device():
    stream = torch.rbln.Stream()
    assert torch.rbln.current_stream() == torch.rbln.default_stream()
    with torch.rbln.stream(stream):
        assert torch.rbln.current_stream() is stream
        y = torch.ones(4, device="rbln") * 2
    assert torch.rbln.current_stream() == torch.rbln.default_stream()
    stream.wait_stream(torch.rbln.current_stream())
    assert stream.query() and y.sum().item() == 8
    start, end = torch.rbln.Event(enable_timing=True), torch.rbln.Event(enable_timing=True)
    start.record()
    torch.ones(256, device="rbln").exp()
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0 and end.query()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        torch.rbln.Event().elapsed_time(end)


def test_memory_summary_and_bf16():
    torch.ones(8, device="rbln")
    summary = torch.rbln.memory_summary()
    assert "rbln:0" in summary and "allocated now" in summary and "capacity" in summary
    assert torch.rbln.is_bf16_supported()


def test_module_returns_to_the_cpu_while_an_output_is_alive(capfd):
    torch.manual_seed(0)
    shared = torch.nn.Linear(4, 4, bias=False)
    model = torch.nn.Sequential(torch.nn.LayerNorm(4), shared, torch.nn.Sequential(shared)).to("rbln")
    x = torch.randn(2, 4)
    out = model(x.to("rbln"))  # keeps an autograd graph over the parameters
    model.cpu()
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    assert model[1].weight is model[2][0].weight  # the shared module's parameter stays one parameter
    torch.testing.assert_close(model(x), out.detach().cpu(), rtol=1e-5, atol=1e-5)
    assert "rebuild it" in capfd.readouterr().err
