"""Per-device memory accounting: exact sizes, peaks, frees, OutOfMemoryError."""

from __future__ import annotations

import gc
import math

import pytest
import torch
from envutil import run_python

import torch_rbln  # noqa: F401

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _frozen_heap():
    """The tests' `gc.collect()` calls free this test's cyclic garbage so that counts are exact. In a
    long-lived xdist worker the heap holds millions of objects (compiled kernels, traced graphs), and a
    full collection took seconds each, a minute per test: freezing what exists before the test (earlier
    tests' garbage included, which then cannot be freed in the middle of this one) leaves the
    collections only this test's objects to look at."""
    gc.freeze()
    yield
    gc.unfreeze()


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
    result = view.cosh()  # CPU fallback result adopted by rbln:4
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


@pytest.mark.parametrize("path", ["compiled", "retagged"])
def test_allocate_and_drop_loops_keep_peaks_and_counts_exact(path: str) -> None:
    """Outputs dropped at once: every statistic stays exact on both allocation paths, and nothing is
    left watched or queued."""
    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator()
    allocate = _memory.empty if path == "compiled" else _memory._empty_retagged
    gc.collect()
    torch.rbln.reset_peak_memory_stats(7)
    base = torch.rbln.memory_allocated(7)
    allocated = torch.rbln.memory_stats(7)["allocation.all.allocated"]
    watched = len(_memory._watched)
    for _ in range(3000):
        allocate((256,), torch.float32, 7)  # 1 KiB, dropped at once
    assert torch.rbln.memory_allocated(7) == base
    assert torch.rbln.max_memory_allocated(7) == base + 1024  # never two alive at once
    stats = torch.rbln.memory_stats(7)
    assert stats["allocation.all.allocated"] - allocated == 3000
    current, freed = stats["allocation.all.current"], stats["allocation.all.freed"]
    assert current == stats["allocation.all.allocated"] - freed
    assert len(_memory._watched) <= watched + 1 and not _memory._pending_frees


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool,
                                   torch.complex64])
@pytest.mark.parametrize("size", [(), (5,), (3, 0, 2), (2, 3, 4)])
def test_compiled_allocator_builds_the_tensor_it_counts(dtype: torch.dtype, size: tuple) -> None:
    """A kernel output from the compiled allocator is a row-major rbln tensor of the right dtype, 64-byte
    aligned, usable, counted at once and un-counted as soon as it dies (no garbage collection)."""
    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator() and dtype in _memory._dtype_words
    before = torch.rbln.memory_allocated(6)
    out = _memory.empty(size, dtype, 6)
    expected = torch.empty(size, dtype=dtype)
    assert out.device == torch.device("rbln:6") and out.dtype == dtype
    assert out.shape == expected.shape and out.stride() == expected.stride()
    assert out.data_ptr() % 64 == 0 and out.storage_offset() == 0 and out.is_contiguous()
    # empty storages have no memory, as PyTorch's own (views and out= resizes rely on it)
    assert (out.untyped_storage().data_ptr() == 0) == (expected.numel() == 0)
    assert torch.rbln.memory_allocated(6) - before == expected.numel() * dtype.itemsize
    values = torch.arange(expected.numel()).reshape(size).to(dtype)
    out.copy_(values.to("rbln"))
    assert torch.equal(out.cpu(), values)
    del out
    assert torch.rbln.memory_allocated(6) == before


def test_compiled_allocator_frees_from_other_threads_exactly() -> None:
    """Deleters run on whichever thread drops the last reference, without the GIL's protection for the
    counters: frees on worker threads racing allocations here lose no update."""
    import threading

    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator()
    gc.collect()
    before = torch.rbln.memory_stats(5)
    batches = [[_memory.empty((64,), torch.float32, 5) for _ in range(500)] for _ in range(4)]

    def drop(batch: list) -> None:
        while batch:
            batch.pop()

    workers = [threading.Thread(target=drop, args=(batch,)) for batch in batches]
    for worker in workers:
        worker.start()
    for _ in range(2000):
        _memory.empty((16,), torch.float32, 5)
    for worker in workers:
        worker.join()
    after = torch.rbln.memory_stats(5)
    assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
    assert after["allocation.all.current"] == before["allocation.all.current"]
    assert after["allocation.all.freed"] - before["allocation.all.freed"] == 4000
    freed_bytes = after["allocated_bytes.all.freed"] - before["allocated_bytes.all.freed"]
    assert freed_bytes == 4 * 500 * 256 + 2000 * 64


def test_compiled_allocator_over_capacity_raises_and_counts_nothing() -> None:
    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator()
    gc.collect()
    counters = _memory._counters_for(7)
    saved = counters.capacity
    stats = torch.rbln.memory_stats(7)
    counters.capacity = stats["allocated_bytes.all.current"] + 100
    try:
        with pytest.raises(torch.OutOfMemoryError, match=r"rbln:7: tried to allocate 400 bytes.*free of"):
            _memory.empty((10, 10), torch.float32, 7)
    finally:
        counters.capacity = saved
    after = torch.rbln.memory_stats(7)
    assert after["num_ooms"] == stats["num_ooms"] + 1
    assert after["allocation.all.allocated"] == stats["allocation.all.allocated"]
    assert after["allocated_bytes.all.current"] == stats["allocated_bytes.all.current"]


def test_compiled_allocator_undoes_a_block_pytorch_did_not_take(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator()
    before = torch.rbln.memory_allocated(6)

    def refuse(capsule: object) -> None:
        raise RuntimeError("from_dlpack refused")

    monkeypatch.setattr(_memory, "_from_dlpack", refuse)
    with pytest.raises(RuntimeError, match="refused"):
        _memory.empty((8,), torch.float32, 6)
    assert torch.rbln.memory_allocated(6) == before


def test_row_major_empty_strided_takes_the_compiled_allocator() -> None:
    """`empty_like`/`clone` of a contiguous tensor ask for row-major strides: no watched object; other
    strides get the block they span from the compiled allocator too, re-strided; negative sizes raise
    torch's error."""
    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator()
    gc.collect()
    watched = len(_memory._watched)
    row_major = _memory.empty_strided([2, 3], [3, 1], torch.float32, 6)
    assert len(_memory._watched) == watched and row_major.stride() == (3, 1)
    before = torch.rbln.memory_allocated(6)
    column_major = _memory.empty_strided([2, 3], [1, 2], torch.float32, 6)  # the same block, re-strided
    assert len(_memory._watched) == watched and column_major.stride() == (1, 2)
    assert column_major.shape == (2, 3) and column_major.device == torch.device("rbln:6")
    assert torch.rbln.memory_allocated(6) - before == column_major.untyped_storage().nbytes() == 24
    gapped = _memory.empty_strided([2, 2], [4, 1], torch.float16, 6)  # rows 4 apart: spans 6 elements
    assert gapped.stride() == (4, 1) and gapped.untyped_storage().nbytes() == 12
    assert _memory.empty_strided([0, 3], [1, 2], torch.float32, 6).untyped_storage().nbytes() == 0
    clone = torch.arange(6.0).reshape(2, 3).to("rbln:6").clone()
    assert clone.stride() == (3, 1) and clone.cpu().tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(RuntimeError, match="negative"):
        _memory.empty_strided([-1, 3], [3, 1], torch.float32, 6)


def test_large_outputs_and_unknown_dtypes_take_the_retagged_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large outputs recycle host buffers and dtypes without a known DLPack code are re-tagged: both
    are watched objects, counted exactly."""
    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator()
    monkeypatch.delitem(_memory._dtype_words, torch.float16)
    monkeypatch.setattr(_memory._counters_for(6), "contexts", {})  # drop a float16 context made before
    gc.collect()
    before = torch.rbln.memory_allocated(6)
    watched = len(_memory._watched)
    large = _memory.empty((_memory._POOL_MIN // 4,), torch.float32, 6)
    unknown = _memory.empty((3,), torch.float16, 6)
    assert large.device == unknown.device == torch.device("rbln:6") and unknown.dtype == torch.float16
    assert len(_memory._watched) == watched + 2
    assert torch.rbln.memory_allocated(6) - before == _memory._POOL_MIN + 6
    del large, unknown
    gc.collect()
    assert torch.rbln.memory_allocated(6) == before


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


# -- a plan's allocator (`_memory.allocator`: the lookups of `empty` made once per output layout)


@pytest.mark.parametrize(("size", "dtype"), [((), torch.float32), ((5,), torch.int64), ((2, 3), torch.bool),
                                             ((3, 0, 2), torch.float16)])
def test_allocator_makes_what_empty_makes_and_counts_it(size: tuple, dtype: torch.dtype) -> None:
    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator()
    new = _memory.allocator(size, dtype, 6)
    before = _counts(6)
    made, reference = new(), _memory.empty(size, dtype, 6)
    for tensor in (made, reference):
        assert tensor.device == torch.device("rbln:6") and tensor.dtype == dtype
        assert tensor.shape == size and tensor.stride() == reference.stride()
    assert made.data_ptr() != reference.data_ptr() or made.numel() == 0
    grown = _counts(6)
    assert grown["allocation.all.allocated"] - before["allocation.all.allocated"] == 2
    assert grown["allocated_bytes.all.current"] - before["allocated_bytes.all.current"] == \
        2 * math.prod(size) * dtype.itemsize
    del made, reference, tensor
    assert _counts(6)["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]


def test_allocator_applies_queued_frees_and_follows_a_rebuilt_topology(monkeypatch: pytest.MonkeyPatch
                                                                      ) -> None:
    """Frees waiting in the queue are applied before the allocation (capacity is judged exactly), and a
    rebuilt topology (a new capacity) takes `empty`, which re-derives the device's counters."""
    from torch_rbln import _memory, topology

    new = _memory.allocator((256,), torch.float32, 7)
    gc.collect()
    counters = _memory._counters_for(7)
    saved = counters.capacity
    counters.capacity = torch.rbln.memory_allocated(7) + 2 * 1024
    try:
        retagged = _memory._empty_retagged((256,), torch.float32, 7)  # a watched object: its free is queued
        del retagged
        assert _memory._pending_frees
        kept = [new(), new()]  # fits only once the queued free is applied
        assert not _memory._pending_frees
        with pytest.raises(torch.OutOfMemoryError, match=r"rbln:7: tried to allocate 1.00 KiB"):
            new()
        del kept
    finally:
        counters.capacity = saved
    calls = []
    monkeypatch.setattr(_memory, "empty", lambda *args: calls.append(args) or torch.empty(0))
    monkeypatch.setattr(topology, "_topology", object())  # as a rebuilt topology
    new()
    assert calls == [((256,), torch.float32, 7)]


def test_allocator_without_the_compiled_allocator_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_rbln import _memory

    monkeypatch.delitem(_memory._dtype_words, torch.float16)
    monkeypatch.setattr(_memory._counters_for(6), "contexts", {})
    watched = len(_memory._watched)
    tensor = _memory.allocator((3,), torch.float16, 6)()
    assert tensor.device == torch.device("rbln:6") and tensor.dtype == torch.float16
    assert len(_memory._watched) == watched + 1  # the re-tagged path's watched host tensor


# -- several outputs in one allocation (`empty_pair`/`empty_triple`: multi-output ops' fast paths)


_COUNTS = ("allocated_bytes.all.current", "allocated_bytes.all.allocated", "allocated_bytes.all.freed",
           "allocation.all.current", "allocation.all.allocated", "allocation.all.freed", "num_ooms")


def _counts(index: int) -> dict[str, int]:
    gc.collect()
    stats = torch.rbln.memory_stats(index)
    return {key: stats[key] for key in _COUNTS}


@pytest.mark.parametrize(("shapes", "dtype"), [  # few cases: each new group arity is a numba compile
    (((4,), (1,), (1,)), torch.float32),  # a layer norm's out, mean, rstd
    (((), ()), torch.float32),  # a loss and its total weight
    (((0, 5), (7,)), torch.int64),
])
def test_grouped_outputs_are_the_tensors_and_counts_of_separate_ones(shapes: tuple, dtype: torch.dtype
                                                                     ) -> None:
    """Each output of a group is the row-major rbln tensor `empty` makes, counted as its own allocation,
    and freed on its own when it dies."""
    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator()
    before = _counts(5)
    group = (_memory.empty_pair if len(shapes) == 2 else _memory.empty_triple)(*shapes, dtype, 5)
    nbytes = [math.prod(shape) * dtype.itemsize for shape in shapes]
    assert len(group) == len(shapes)
    for tensor, shape in zip(group, shapes, strict=True):
        alone = _memory.empty(shape, dtype, 5)
        assert tensor.device == torch.device("rbln:5") and tensor.dtype == dtype
        assert tensor.shape == shape and tensor.stride() == alone.stride() and tensor.is_contiguous()
        assert tensor.untyped_storage().nbytes() == alone.untyped_storage().nbytes()
        assert tensor.numel() == 0 or tensor.data_ptr() % 64 == 0
        del alone, tensor
    after = _counts(5)
    assert after["allocated_bytes.all.current"] - before["allocated_bytes.all.current"] == sum(nbytes)
    assert after["allocation.all.current"] - before["allocation.all.current"] == len(shapes)
    first, *rest = group
    del group
    del first  # the others live on
    alive = _counts(5)["allocated_bytes.all.current"] - before["allocated_bytes.all.current"]
    assert alive == sum(nbytes[1:])
    del rest
    final = _counts(5)
    assert final["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
    # every output counted as one allocation (the `empty` calls above add one each) and one free
    assert final["allocation.all.allocated"] - before["allocation.all.allocated"] == 2 * len(shapes)
    assert final["allocated_bytes.all.freed"] - before["allocated_bytes.all.freed"] == 2 * sum(nbytes)


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_grouped_outputs_over_capacity_raise_for_the_output_that_does_not_fit(failing: int) -> None:
    """A group that does not fit raises torch's OutOfMemoryError naming the output that failed; the
    outputs made before it are undone (allocated and freed), nothing stays counted, one OOM."""
    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator()
    shapes = [(25,), (25,), (25,)]
    shapes[failing] = (50,)  # 200 bytes: fits only when nothing else was made
    before = _counts(7)
    counters = _memory._counters_for(7)
    saved = counters.capacity
    counters.capacity = before["allocated_bytes.all.current"] + 100 * failing + 150
    try:
        with pytest.raises(torch.OutOfMemoryError, match=r"rbln:7: tried to allocate 200 bytes.*free of"):
            _memory.empty_triple(*shapes, torch.float32, 7)
    finally:
        counters.capacity = saved
    after = _counts(7)
    assert after["num_ooms"] == before["num_ooms"] + 1
    assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
    assert after["allocation.all.allocated"] - before["allocation.all.allocated"] == failing
    assert after["allocated_bytes.all.freed"] - before["allocated_bytes.all.freed"] == 100 * failing


def test_grouped_outputs_with_a_large_one_take_the_separate_paths() -> None:
    """A group holding an output of the recycled-buffer size is made output by output (the large one
    re-tagged and watched), with the same exact accounting."""
    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator()
    before = _counts(6)
    watched = len(_memory._watched)
    small, large = _memory.empty_pair((3,), (_memory._POOL_MIN // 4,), torch.float32, 6)
    assert len(_memory._watched) == watched + 1 and large.shape == (_memory._POOL_MIN // 4,)
    assert _counts(6)["allocated_bytes.all.current"] - before["allocated_bytes.all.current"] == \
        _memory._POOL_MIN + 12
    del small, large
    after = _counts(6)
    assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
    assert after["allocation.all.allocated"] - before["allocation.all.allocated"] == 2


def test_grouped_outputs_pytorch_did_not_take_are_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """When importing one output of a group fails, every capsule of it, imported or not, releases its
    block: nothing stays counted."""
    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator()
    before = _counts(6)
    imports = []
    real = _memory._from_dlpack

    def second_refused(capsule: object) -> torch.Tensor:
        imports.append(capsule)
        if len(imports) == 2:
            raise RuntimeError("from_dlpack refused")
        return real(capsule)

    monkeypatch.setattr(_memory, "_from_dlpack", second_refused)
    with pytest.raises(RuntimeError, match="refused"):
        _memory.empty_triple((4,), (1,), (1,), torch.float32, 6)
    imports.clear()
    after = _counts(6)
    assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
    assert after["allocation.all.allocated"] - before["allocation.all.allocated"] == 3
    assert after["allocation.all.freed"] - before["allocation.all.freed"] == 3


def test_grouped_outputs_of_an_unknown_dtype_take_the_retagged_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator()
    monkeypatch.delitem(_memory._dtype_words, torch.float16)
    monkeypatch.setattr(_memory._counters_for(6), "contexts", {})  # drop a float16 context made before
    before = _counts(6)
    a, b, c = _memory.empty_triple((2,), (), (1, 3), torch.float16, 6)
    assert (a.shape, b.shape, c.shape) == ((2,), (), (1, 3))
    assert a.dtype == b.dtype == c.dtype == torch.float16 and a.device == torch.device("rbln:6")
    assert _counts(6)["allocated_bytes.all.current"] - before["allocated_bytes.all.current"] == 12
    del a, b, c
    assert _counts(6)["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]


def test_the_compiled_allocator_reads_capacity_from_the_counters_row() -> None:
    """A device's capacity lives in its counters row (the compiled allocator reads it there), so a
    change of it (a rebuilt topology, a test) applies to the next allocation at once."""
    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator()
    counters = _memory._counters_for(7)
    saved = counters.capacity
    assert counters.row[_memory._CAPACITY] == saved == _memory.capacity(7) > 0
    gc.collect()
    counters.capacity = torch.rbln.memory_allocated(7) + 64
    try:
        kept = _memory.empty((16,), torch.float32, 7)
        with pytest.raises(torch.OutOfMemoryError, match="rbln:7"):
            _memory.empty((1,), torch.float32, 7)
        counters.capacity = saved
        assert _memory.empty((1,), torch.float32, 7).shape == (1,)
        del kept
    finally:
        counters.capacity = saved


def test_a_pair_of_two_dtypes_is_a_values_and_indices_pair() -> None:
    """`empty_pair` with a second dtype (a max's float values and int64 indices): each output of its
    dtype, counted as its own allocation; an over-capacity second output names its own byte size."""
    from torch_rbln import _memory

    assert _memory.enable_compiled_allocator()
    before = _counts(5)
    values, indices = _memory.empty_pair((3, 1), (3, 1), torch.float16, 5, torch.int64)
    assert values.dtype == torch.float16 and indices.dtype == torch.int64
    assert values.shape == indices.shape == (3, 1) and indices.device == torch.device("rbln:5")
    assert _counts(5)["allocated_bytes.all.current"] - before["allocated_bytes.all.current"] == 6 + 24
    del values, indices
    assert _counts(5)["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
    counters = _memory._counters_for(5)
    saved = counters.capacity
    counters.capacity = torch.rbln.memory_allocated(5) + 100
    try:
        with pytest.raises(torch.OutOfMemoryError, match=r"rbln:5: tried to allocate 160 bytes"):
            _memory.empty_pair((20,), (20,), torch.float32, 5, torch.int64)  # 80 bytes fit, 160 do not
    finally:
        counters.capacity = saved
    assert _counts(5)["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
