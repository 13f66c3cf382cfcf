"""Per-device memory accounting: exact sizes, peaks, frees, OutOfMemoryError."""

from __future__ import annotations

import gc

import pytest
import torch
from envutil import run_python

import torch_rbln  # noqa: F401

MiB = 1 << 20


def test_one_mebibyte_grows_and_shrinks_exactly() -> None:
    gc.collect()
    before = torch.rbln.memory_allocated(3)
    x = torch.empty(MiB // 4, dtype=torch.float32, device="rbln:3")
    assert torch.rbln.memory_allocated(3) - before == MiB
    assert torch.rbln.memory_stats(3)["allocated_bytes.all.current"] - before == MiB
    del x
    gc.collect()
    assert torch.rbln.memory_allocated(3) == before


def test_views_do_not_allocate_and_results_are_counted() -> None:
    gc.collect()
    base = torch.zeros(1024, device="rbln:4")  # 4 KiB
    start = torch.rbln.memory_allocated(4)
    view = base.view(32, 32)[3:]
    assert torch.rbln.memory_allocated(4) == start
    result = view.cos()  # CPU fallback result adopted by rbln:4
    assert torch.rbln.memory_allocated(4) == start + result.untyped_storage().nbytes()
    del result, view, base
    gc.collect()
    assert torch.rbln.memory_allocated(4) == start - 4096


def test_kernel_outputs_are_counted_exactly() -> None:
    """`_memory.empty` (every device kernel's output) accounts like empty_strided, half types too."""
    from torch_rbln import _memory

    gc.collect()
    before = torch.rbln.memory_allocated(5)
    out = _memory.empty((3, 5), torch.bfloat16, 5)
    assert out.device == torch.device("rbln:5") and out.shape == (3, 5) and out.stride() == (5, 1)
    assert out.dtype == torch.bfloat16 and not out.is_conj() and not out.is_neg()
    assert torch.rbln.memory_allocated(5) - before == 30
    empty = _memory.empty((0, 7), torch.float32, 5)
    assert empty.shape == (0, 7) and torch.rbln.memory_allocated(5) - before == 30
    del out, empty
    gc.collect()
    assert torch.rbln.memory_allocated(5) == before


def test_large_output_buffers_are_recycled_with_exact_accounting() -> None:
    """A large kernel output's host buffer backs the next output of that size (no fresh page faults);
    the counters still follow the rbln tensors exactly."""
    from torch_rbln import _memory

    gc.collect()
    before = torch.rbln.memory_allocated(6)
    first = _memory.empty((512, 1024), torch.float32, 6)  # 2 MiB
    first.fill_(3.0)
    address = first.data_ptr()
    assert torch.rbln.memory_allocated(6) - before == 2 * MiB
    del first
    gc.collect()
    assert torch.rbln.memory_allocated(6) == before
    second = _memory.empty((1024, 1024), torch.float16, 6)  # same byte size, another dtype and shape
    assert second.data_ptr() == address and second.shape == (1024, 1024) and second.dtype == torch.float16
    assert torch.rbln.memory_allocated(6) - before == 2 * MiB
    third = _memory.empty((512, 1024), torch.float32, 6)  # the buffer is taken: fresh memory
    assert third.data_ptr() != address
    second.fill_(1.0)
    assert float(third.fill_(2.0).cpu().sum()) == 2.0 * 512 * 1024
    assert float(second.cpu().float().sum()) == MiB  # the two share nothing
    del second, third
    gc.collect()
    assert torch.rbln.memory_allocated(6) == before


def test_peak_and_reset() -> None:
    gc.collect()
    torch.rbln.reset_peak_memory_stats(5)
    base = torch.rbln.memory_allocated(5)
    x = torch.empty(2 * MiB, dtype=torch.uint8, device="rbln:5")
    del x
    gc.collect()
    assert torch.rbln.max_memory_allocated(5) == base + 2 * MiB
    assert torch.rbln.max_memory_reserved(5) == base + 2 * MiB
    torch.rbln.reset_peak_memory_stats(5)
    assert torch.rbln.max_memory_allocated(5) == torch.rbln.memory_allocated(5) == base
    stats = torch.rbln.memory_stats(5)
    assert stats["allocation.all.allocated"] >= 1 and stats["allocation.all.freed"] >= 1


def test_mem_get_info_reports_capacity() -> None:
    free, total = torch.rbln.mem_get_info(0)
    assert total == 16 * (1 << 30)
    assert free == total - torch.rbln.memory_allocated(0)
    torch.rbln.empty_cache()  # nothing cached: a no-op that must exist


def test_out_of_memory_names_device_request_and_free_space() -> None:
    result = run_python(
        "import torch, torch_rbln\n"
        "x = torch.empty(3 << 20, dtype=torch.uint8, device='rbln:1')\n"
        "try:\n"
        "    torch.empty(2 << 20, dtype=torch.uint8, device='rbln:1')\n"
        "except torch.OutOfMemoryError as e:\n"
        "    print('OOM', e)\n"
        "print('stats', torch.rbln.memory_stats(1)['num_ooms'])\n",
        bare=False,
        TORCH_RBLN_SIM_MEMORY_GB="0.0044",  # ~4.5 MiB per NPU
    )
    assert result.returncode == 0, result.stderr
    assert "OOM RBLN out of memory on rbln:1: tried to allocate 2.00 MiB" in result.stdout
    assert "free of" in result.stdout and "TORCH_RBLN_SIM_MEMORY_GB" in result.stdout
    assert "stats 1" in result.stdout


def test_logical_device_memory_is_the_sum_of_its_group() -> None:
    result = run_python(
        "import torch, torch_rbln\nprint(torch.rbln.mem_get_info(0)[1])\n",
        bare=False, TORCH_RBLN_SIM_NPUS="4", RBLN_NPUS_PER_DEVICE="2", TORCH_RBLN_SIM_MEMORY_GB="1",
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-1]) == 2 * (1 << 30)


def test_unassigned_device_is_rejected_by_memory_stats() -> None:
    with pytest.raises(RuntimeError, match=r"Logical device rbln:99 is not assigned"):
        torch.rbln.memory_allocated(99)


def test_frees_settled_in_batches_keep_peaks_and_counts_exact() -> None:
    """Frees queued by an allocate-and-drop loop are applied lazily; every statistic is still exact."""
    from torch_rbln import _memory

    gc.collect()
    torch.rbln.reset_peak_memory_stats(7)
    base = torch.rbln.memory_allocated(7)
    allocated = torch.rbln.memory_stats(7)["allocation.all.allocated"]
    for _ in range(3000):  # more than the pending-free limit
        _memory.empty((256,), torch.float32, 7)  # 1 KiB, dropped at once
    assert torch.rbln.memory_allocated(7) == base
    assert torch.rbln.max_memory_allocated(7) == base + 1024  # never two alive at once
    stats = torch.rbln.memory_stats(7)
    assert stats["allocation.all.allocated"] - allocated == 3000
    current, freed = stats["allocation.all.current"], stats["allocation.all.freed"]
    assert current == stats["allocation.all.allocated"] - freed
    assert len(_memory._watched) < 2 * _memory._PENDING_LIMIT  # the queue is bounded


def test_out_of_memory_is_judged_after_queued_frees() -> None:
    """Memory freed but not yet settled does not cause a spurious OutOfMemoryError."""
    from torch_rbln import _memory

    gc.collect()
    counters = _memory._counters_for(7)
    saved = counters.capacity
    counters.capacity = torch.rbln.memory_allocated(7) + 3 * 1024  # room for three 1 KiB tensors
    try:
        for _ in range(50):  # each dies at once: never more than one alive
            _memory.empty((256,), torch.float32, 7)
        kept = [_memory.empty((256,), torch.float32, 7) for _ in range(3)]
        with pytest.raises(torch.OutOfMemoryError, match="rbln:7"):
            _memory.empty((256,), torch.float32, 7)
        del kept
    finally:
        counters.capacity = saved
