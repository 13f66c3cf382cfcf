"""Module conversions to, from and on rbln keep Parameter objects (tied weights, optimizer references)."""

from __future__ import annotations

import pytest
import torch

import torch_rbln  # noqa: F401


class _Tied(torch.nn.Module):
    """An embedding and an output projection sharing one weight, like a language model's LM head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids) * self.scale)


CONVERSIONS = {
    "to(str)": lambda m: m.to("rbln"),
    "to(device=, dtype=)": lambda m: m.to(device=torch.device("rbln", 1), dtype=torch.float64),
    "rbln()": lambda m: m.rbln(),
}


@pytest.mark.parametrize("convert", CONVERSIONS.values(), ids=CONVERSIONS.keys())
def test_conversion_keeps_ties_and_parameter_identity(convert):
    model = _Tied()
    weight = model.embed.weight
    convert(model)
    assert model.head.weight is model.embed.weight is weight
    assert isinstance(weight, torch.nn.Parameter) and weight.is_leaf and weight.requires_grad
    assert weight.device.type == "rbln" and model.scale.device.type == "rbln"
    assert len(list(model.parameters())) == 1
    model.half()  # a dtype conversion on rbln tensors also stays in place
    assert model.head.weight is model.embed.weight is weight and weight.dtype == torch.float16
    model.cpu()
    assert model.head.weight is weight and weight.device.type == "cpu" and model.scale.device.type == "cpu"
    assert not torch.__future__.get_swap_module_params_on_conversion()


def test_training_updates_the_shared_weight_like_cpu():
    torch.manual_seed(0)
    cpu_model = _Tied()
    device_model = _Tied()
    device_model.load_state_dict(cpu_model.state_dict())
    optimizer = torch.optim.SGD(device_model.parameters(), lr=0.5)  # built before .to: must still apply
    device_model.to("rbln")
    cpu_optimizer = torch.optim.SGD(cpu_model.parameters(), lr=0.5)
    ids = torch.tensor([[1, 2, 3], [3, 4, 1]])
    for model, opt, inputs in ((cpu_model, cpu_optimizer, ids), (device_model, optimizer, ids.to("rbln"))):
        model(inputs).square().mean().backward()
        opt.step()
    torch.testing.assert_close(device_model.head.weight.cpu(), cpu_model.head.weight.detach())
    torch.testing.assert_close(device_model.embed.weight.cpu(), cpu_model.embed.weight.detach())


def test_gradients_move_with_their_parameters():
    layer = torch.nn.Linear(3, 2)
    layer(torch.randn(4, 3)).sum().backward()
    expected = layer.weight.grad.clone()
    layer.to("rbln")
    assert layer.weight.grad.device.type == "rbln"
    torch.testing.assert_close(layer.weight.grad.cpu(), expected)


def test_user_swap_setting_is_respected_and_restored_after_errors():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match="rbln"):
        model.to("rbln:99")
    assert not torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model.to("rbln")
        assert torch.__future__.get_swap_module_params_on_conversion()
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)


def test_cpu_only_modules_keep_the_stock_behaviour():
    model = torch.nn.Linear(2, 2)
    weight = model.weight
    model.double()
    assert model.weight is weight and weight.dtype == torch.float64  # `.data =` path, unchanged
