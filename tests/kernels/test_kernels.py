"""Op-library kernels on shapes the OpInfo samples do not reach: rows longer than one block, odd
matmul tiles, strided/broadcast operands, embedding backward with repeated indices."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from torch_rbln import registry


def _on_device_only() -> None:
    report = registry.fallback_report()
    assert all(row["cpu"] == 0 for row in report.values()), registry.format_report(report)


def test_long_rows_take_several_blocks():
    x = torch.randn(3, 4500)
    w, b = torch.randn(4500), torch.randn(4500)
    d = x.to("rbln")
    registry.reset_fallback_report()
    torch.testing.assert_close(torch.softmax(d, -1).cpu(), torch.softmax(x, -1))
    torch.testing.assert_close(F.layer_norm(d, (4500,), w.to("rbln"), b.to("rbln")).cpu(),
                               F.layer_norm(x, (4500,), w, b), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(d.sum(-1).cpu(), x.sum(-1), atol=1e-3, rtol=1e-4)
    values, indices = d.max(-1)
    torch.testing.assert_close(values.cpu(), x.max(-1).values)
    assert torch.equal(indices.cpu(), x.max(-1).indices)
    _on_device_only()


def test_rows_up_to_one_block_take_the_single_load_kernels():
    """Rows of n <= 4096 run softmax_row_kernel / norm_row_kernel: each element loaded once; the
    padding lanes of a block (n=129 in a 1024 block, 4096 exactly full) must not leak into results."""
    registry.reset_fallback_report()
    generator = torch.Generator().manual_seed(0)
    for n in (129, 4096):
        x = torch.randn(5, n, generator=generator) * 4
        w, b = torch.randn(n, generator=generator), torch.randn(n, generator=generator)
        d, dw, db = x.to("rbln"), w.to("rbln"), b.to("rbln")
        # float32 exp/sum rounding: a probability near 1 may differ from the CPU's by ~1.3e-5
        torch.testing.assert_close(torch.softmax(d, -1).cpu(), torch.softmax(x, -1), atol=3e-5, rtol=3e-5)
        torch.testing.assert_close(F.layer_norm(d, (n,), dw, db).cpu(), F.layer_norm(x, (n,), w, b),
                                   atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.log_softmax(d, -1).cpu(), torch.log_softmax(x, -1), atol=1e-4, rtol=1e-5)
    y = torch.ops.rbln.rms_norm(d, dw, 1e-6)
    torch.testing.assert_close(y.cpu(), F.rms_norm(x, (4096,), w, 1e-6), atol=1e-4, rtol=1e-4)
    counts = registry.device_counts()
    assert counts.get("aten::_softmax", 0) == 2 and counts.get("aten::native_layer_norm", 0) == 2, counts
    _on_device_only()


def test_matmul_odd_shapes_transposed_operands_and_column_sums():
    a, b = torch.randn(37, 70), torch.randn(53, 70)
    bias = torch.randn(53)
    registry.reset_fallback_report()
    out = F.linear(a.to("rbln"), b.to("rbln"), bias.to("rbln"))
    torch.testing.assert_close(out.cpu(), F.linear(a, b, bias), atol=1e-4, rtol=1e-4)
    x = torch.randn(3, 5, 7)
    torch.testing.assert_close(x.to("rbln").sum((0, 1)).cpu(), x.sum((0, 1)), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(x.to("rbln").mean(0).cpu(), x.mean(0), atol=1e-5, rtol=1e-5)
    _on_device_only()


def test_broadcast_strided_and_cat():
    x = torch.randn(4, 6, 5)
    y = torch.randn(6, 1)
    registry.reset_fallback_report()
    dx, dy = x.to("rbln"), y.to("rbln")
    torch.testing.assert_close((dx.transpose(1, 2) * dy.t()).cpu(), x.transpose(1, 2) * y.t())
    torch.testing.assert_close(torch.cat([dx, dx * 2], dim=1).cpu(), torch.cat([x, x * 2], dim=1))
    torch.testing.assert_close(dx.transpose(1, 2).contiguous().cpu(), x.transpose(1, 2).contiguous())
    _on_device_only()


def test_embedding_backward_with_repeated_indices():
    weight = torch.randn(10, 6, requires_grad=True)
    device_weight = weight.detach().to("rbln").requires_grad_()
    ids = torch.tensor([[1, 1, 3], [9, 1, 0]])
    grad = torch.randn(2, 3, 6)
    F.embedding(ids, weight).backward(grad)
    F.embedding(ids.to("rbln"), device_weight).backward(grad.to("rbln"))
    torch.testing.assert_close(device_weight.grad.cpu(), weight.grad)
