"""Re-tagging host memory as rbln (torch_rbln._dlpack): the compiled device rewrite agrees with ctypes."""

from __future__ import annotations

import torch

import torch_rbln  # noqa: F401
from torch_rbln import _dlpack


def test_compiled_retag_is_used_only_after_checking_it_reads_capsules_like_cpython():
    assert _dlpack.enable_compiled_retag() is True  # CPython + numba here
    assert _dlpack._retag is not _dlpack._retag_portable
    host = torch.arange(6, dtype=torch.float32).reshape(2, 3)[:, 1:]
    for retag in (_dlpack._retag, _dlpack._retag_portable):
        device = retag(host, _dlpack.DL_EXT_DEV, 0)
        assert device.device == torch.device("rbln:0")
        assert device.data_ptr() == host.data_ptr() and device.stride() == host.stride()
        back = retag(device, _dlpack.DL_CPU, 0)
        assert back.device.type == "cpu" and torch.equal(back, host)


def test_conj_and_neg_bits_survive_the_round_trip():
    z = torch.tensor([1 + 2j, -3j], dtype=torch.complex64).conj()
    device = _dlpack.to_device_view(z, 0)
    assert device.is_conj()
    torch.testing.assert_close(_dlpack.to_host_view(device).resolve_conj(), z.resolve_conj())
