"""The CPU fallback: counted, logged, disableable, and exact for tricky argument kinds."""

from __future__ import annotations

import logging

import pytest
import torch
from envutil import run_python

import torch_rbln
from torch_rbln import log


@pytest.fixture()
def info_logs(monkeypatch: pytest.MonkeyPatch):
    """Capture records of the torch_rbln logger at INFO."""
    log.configure()
    logger = logging.getLogger("torch_rbln")
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect(level=logging.INFO)
    previous = logger.level
    logger.setLevel(logging.INFO)  # setLevel also clears logging's isEnabledFor cache
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(previous)


def test_fallback_is_counted_and_logged(info_logs: list[logging.LogRecord]) -> None:
    x = torch.randn(4).to("rbln:0")
    torch_rbln.reset_fallback_counts()
    x.cosh()
    x.cosh()
    assert torch_rbln.fallback_counts()["aten::cosh"] == 2
    messages = [r.getMessage() for r in info_logs]
    assert len(messages) == 1  # once per op and reason; both calls are counted
    assert messages[0].startswith("`aten::cosh` op ran on CPU instead of RBLN (no rbln kernel)")
    torch_rbln.reset_fallback_counts()
    assert torch_rbln.fallback_counts() == {}


def test_fallback_info_line_format_on_stderr() -> None:
    result = run_python(
        "import torch, torch_rbln\ntorch.ones(2).to('rbln:0').cosh()\n",
        bare=False, TORCH_RBLN_LOG_LEVEL="INFO",
    )
    assert result.returncode == 0, result.stderr
    assert "[TORCH-RBLN][INFO] `aten::cosh` op ran on CPU instead of RBLN" in result.stderr


def test_disabled_unsupported_op_fallback_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(3).to("rbln:0")
    monkeypatch.setenv("TORCH_RBLN_DISABLE_FALLBACK", "unsupported_op")
    with pytest.raises(NotImplementedError) as error:
        x.cosh()
    message = str(error.value)
    assert "The operator 'aten::cosh' is not implemented for RBLN devices" in message
    assert "TORCH_RBLN_DISABLE_FALLBACK" in message
    monkeypatch.setenv("TORCH_RBLN_DISABLE_FALLBACK", " compile_error , all ")
    with pytest.raises(NotImplementedError):
        x.sinh()
    monkeypatch.setenv("TORCH_RBLN_DISABLE_FALLBACK", "compile_error")
    x.sinh()  # other categories leave op fallback on


def test_disabled_non_blocking_copy_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_RBLN_DISABLE_FALLBACK", "non_blocking_copy")
    with pytest.raises(RuntimeError, match="non_blocking=True copies"):
        torch.ones(2).to("rbln:0", non_blocking=True)
    torch.ones(2).to("rbln:0")


def test_unknown_fallback_token_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(3).to("rbln:0")
    monkeypatch.setenv("TORCH_RBLN_DISABLE_FALLBACK", "everything")
    with pytest.raises(ValueError, match="TORCH_RBLN_DISABLE_FALLBACK"):
        x.cosh()


def test_tensor_list_outputs_and_inputs() -> None:
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    joined = torch.cat([a.to("rbln:1"), b.to("rbln:1")])
    assert joined.device == torch.device("rbln:1")
    torch.testing.assert_close(joined.cpu(), torch.cat([a, b]))
    params = [torch.zeros(3).to("rbln:1"), torch.ones(3).to("rbln:1")]
    torch._foreach_add_(params, 1.0)
    assert [p.cpu().tolist() for p in params] == [[1.0] * 3, [2.0] * 3]
    sums = torch._foreach_mul(params, 2.0)
    assert all(s.device == torch.device("rbln:1") for s in sums)


def test_metadata_written_back_for_in_place_metadata_ops() -> None:
    x = torch.randn(2, 3).to("rbln:0")
    y = x.clone()
    y.t_()
    assert y.shape == (3, 2)
    torch.testing.assert_close(y.cpu(), x.cpu().t())
    z = x.clone()
    z.unsqueeze_(0)
    assert z.shape == (1, 2, 3)


def test_python_scalars_keep_pytorch_type_promotion() -> None:
    half = torch.tensor([1.5, 2.5], dtype=torch.float16).to("rbln:0")
    assert half.remainder(2).dtype == torch.float16
    zero_dim = torch.tensor(1.5, dtype=torch.float16).to("rbln:0")
    assert zero_dim.remainder(2.0).dtype == torch.float16
    integers = torch.tensor([1, 2], dtype=torch.int32).to("rbln:0")
    assert (integers * 2).dtype == torch.int32
    assert (integers * 2.5).dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_histc_of_integers_counts_as_cuda_does(dtype):
    """transformers' MoE aux loss passes int32 to histc off the CPU; the CPU kernel alone rejects it."""
    values = torch.tensor([0, 1, 1, 3, 4, 7, -1], dtype=dtype)
    counts = torch.histc(values.to("rbln"), bins=4, min=0, max=4)
    assert counts.device.type == "rbln" and counts.dtype == dtype
    expected = torch.histc(values.double(), bins=4, min=0, max=4).to(dtype)
    torch.testing.assert_close(counts.cpu(), expected, rtol=0, atol=0)
