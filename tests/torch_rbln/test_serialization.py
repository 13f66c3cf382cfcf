"""save/load (with map_location), deepcopy and storage construction on rbln."""

from __future__ import annotations

import copy
import io

import torch

import torch_rbln  # noqa: F401


def _reload(obj: object, **kwargs: object) -> object:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **kwargs)


def test_save_load_keeps_device_and_values() -> None:
    x = torch.randn(3, 4).to("rbln:1")
    loaded = _reload({"x": x, "view": x[1:]})
    assert loaded["x"].device == torch.device("rbln:1")
    assert torch.equal(loaded["x"].cpu(), x.cpu())
    assert torch.equal(loaded["view"].cpu(), x[1:].cpu())


def test_map_location_in_both_directions() -> None:
    x = torch.randn(5).to("rbln:2")
    assert _reload(x, map_location="cpu").is_cpu
    assert _reload(x, map_location="rbln:0").device == torch.device("rbln:0")
    assert _reload(torch.arange(3), map_location="rbln:3").device == torch.device("rbln:3")


def test_state_dict_round_trip() -> None:
    model = torch.nn.Linear(4, 3).to("rbln:1")
    state = _reload(model.state_dict())
    fresh = torch.nn.Linear(4, 3).to("rbln:1")
    fresh.load_state_dict(state)
    assert torch.equal(fresh.weight.detach().cpu(), model.weight.detach().cpu())


def test_deepcopy_tensor_and_module() -> None:
    x = torch.randn(3).to("rbln:1")
    y = copy.deepcopy(x)
    assert y.device == x.device and y.data_ptr() != x.data_ptr() and torch.equal(y.cpu(), x.cpu())
    module = copy.deepcopy(torch.nn.Linear(3, 2).to("rbln:1"))
    assert module.weight.device == torch.device("rbln:1")


def test_untyped_storage_constructor_on_rbln() -> None:
    storage = torch.UntypedStorage(16, device="rbln:2")
    assert storage.device == torch.device("rbln:2") and storage.nbytes() == 16
    from_bytes = torch.UntypedStorage([1, 2, 3], device="rbln:0")
    assert from_bytes.nbytes() == 3 and from_bytes.cpu().tolist() == [1, 2, 3]
    moved = torch.UntypedStorage([7, 8]).rbln(1)
    assert moved.device == torch.device("rbln:1") and moved.cpu().tolist() == [7, 8]
