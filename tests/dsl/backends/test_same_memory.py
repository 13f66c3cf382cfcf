"""The same-memory variant (codegen `ERR_SAME_MEMORY`, `Executable.same_memory_variant`): an in-place
launch (`out` the same memory as an input read at the same element, `x.div_(y)`) of at least
SAME_MEMORY_MIN elements runs a variant whose output array *is* its input's, so LLVM vectorises the loop
its runtime overlap check sent to the scalar one. Results must equal the out-of-place launch's bit for
bit through every path (the grid launch, the kept direct launch, the launch by address); launches that
are not in place, or small, or overlap otherwise run as before."""

from __future__ import annotations

import pytest
import torch
import torch_rbln.dsl as tl
from torch_rbln.dsl.backends.numba_backend import codegen, executable

from torch_rbln import dsl as triton

N = codegen.SAME_MEMORY_MIN + 37  # not a multiple of the block: the last program is partial
BLOCK = 1024


@triton.jit
def ratio_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x / y + alpha, mask=mask)  # x read once, at the element written


def _grid(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def _operands(n: int = N) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(5)
    return torch.randn(n, generator=generator), torch.rand(n, generator=generator) + 0.5


def _expected(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    ratio_kernel[(_grid(x.numel()),)](x, y, out, x.numel(), 0.75, BLOCK=BLOCK)
    return out


def _variants(monkeypatch) -> list:
    made = []
    original = executable.Executable.same_memory_variant

    def spy(self):
        variant = original(self)
        made.append(variant)
        return variant

    monkeypatch.setattr(executable.Executable, "same_memory_variant", spy)
    return made


def test_an_in_place_launch_runs_the_same_memory_variant_with_the_out_of_place_bits(monkeypatch):
    made = _variants(monkeypatch)
    x, y = _operands()
    expected = _expected(x, y)
    ratio_kernel[(_grid(N),)](x, y, x, N, 0.75, BLOCK=BLOCK)  # out is x: the grid launch
    assert torch.equal(x, expected)
    assert made and made[0].same_memory
    source = made[0].lowered.source
    assert "m2 = m0" in source and "if not (p0 == p2 and n0 == n2):" in source
    plain = codegen.lower(made[0].fn).source
    assert "m2 = m0" not in plain and f"err[0] = {codegen.ERR_SAME_MEMORY}" in plain
    general = []
    launch = executable.Executable.launch
    monkeypatch.setattr(executable.Executable, "launch", lambda self, *a, **k: (general.append(self),
                                                                                 launch(self, *a, **k)))
    # the kept direct launch and the launch by address call the compiled variant directly
    for path in ("unchecked", "by_address"):
        x, y = _operands()
        unchecked = ratio_kernel.launcher(x, y, x, N, 0.75, BLOCK=BLOCK).unchecked
        if path == "unchecked":
            unchecked(_grid(N), 1, 1, x, y, x, N, 0.75)
        else:
            assert unchecked.by_address(_grid(N), 1, 1, x.data_ptr(), N, y.data_ptr(), N, x.data_ptr(), N,
                                        N, 0.75) is True
        assert torch.equal(x, expected), path
    assert general == []
    # the variant itself, given other memory (never done: it runs for launches its plain kernel refused)
    # refuses too (ERR_ALIASED) and the launch is computed right by the alias-safe variant
    x, y = _operands()
    out = torch.empty(N)
    launch(made[0], (_grid(N), 1, 1), [x, y, out, N, 0.75, None], 1)
    assert torch.equal(out, _expected(x, y))


def test_launches_that_are_not_the_same_memory_run_as_before(monkeypatch):
    made = _variants(monkeypatch)
    x, y = _operands()
    out = torch.empty(N)
    ratio_kernel[(_grid(N),)](x, y, out, N, 0.75, BLOCK=BLOCK)  # out of place: the plain kernel
    assert torch.equal(out, _expected(x, y)) and not made
    small_x, small_y = _operands(1000)  # in place below SAME_MEMORY_MIN: the plain kernel, no variant
    expected = _expected(small_x, small_y)
    ratio_kernel[(_grid(1000),)](small_x, small_y, small_x, 1000, 0.75, BLOCK=BLOCK)
    assert torch.equal(small_x, expected) and not made
    # out a view one element into x's buffer: an overlap that is not the same memory; the alias-safe
    # variant reads each load where it stands (the program's order), as before
    base, y = torch.randn(N + 1), _operands()[1]
    reference = base.clone()
    ratio_kernel[(_grid(N),)](base[:N], y, base[1:], N, 0.75, BLOCK=BLOCK)
    assert not made
    for start in range(0, N, BLOCK):  # one program: loads of the block first, then its stores
        stop = min(N, start + BLOCK)
        block = reference[start:stop].clone()
        reference[start + 1:stop + 1] = block / y[start:stop] + 0.75
    assert torch.equal(base, reference)


@triton.jit
def difference_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x - alpha * tl.load(y_ptr + offsets, mask=mask), mask=mask)


def test_a_launch_by_address_compiles_the_variant_on_its_first_in_place_call(monkeypatch):
    """A compiled graph launches by address only: its first in-place launch must compile and run the
    variant itself (returning True), or every call would fall back to the graph's node-by-node rerun."""
    made = _variants(monkeypatch)
    x, y = _operands()
    out = torch.empty(N)
    difference_kernel[(_grid(N),)](x, y, out, N, 0.5, BLOCK=BLOCK)
    difference_kernel[(_grid(N),)](x, y, out, N, 0.5, BLOCK=BLOCK)  # the direct launch is kept
    assert not made
    by_address = difference_kernel.launcher(x, y, out, N, 0.5, BLOCK=BLOCK).unchecked.by_address
    for _ in range(2):  # the first call compiles the variant, the second calls it directly
        x, y = _operands()
        expected = x - 0.5 * y
        assert by_address(_grid(N), 1, 1, x.data_ptr(), N, y.data_ptr(), N, x.data_ptr(), N, N, 0.5) is True
        assert torch.equal(x, expected)
    assert len(made) == 1



def test_the_variant_agrees_with_the_interpreter_in_place():
    """The differential check: the same in-place launch on the interpret backend (numpy, every load
    where it stands) and on numba's same-memory variant gives the same bits."""
    x, y = _operands()
    interpreted = x.clone()
    ratio_kernel[(_grid(N),)](interpreted, y, interpreted, N, 0.75, BLOCK=BLOCK, backend="interpret")
    ratio_kernel[(_grid(N),)](x, y, x, N, 0.75, BLOCK=BLOCK, backend="numba")
    assert torch.equal(x, interpreted)


def test_an_in_place_launch_past_its_tensor_faults_and_writes_nothing_outside():
    """Bounds stay checked in the variant: an in-place launch told of more elements than its tensors
    hold raises the out-of-bounds fault, and the memory after the tensor is untouched."""
    base, y = torch.randn(N + 64), torch.rand(N + 64) + 0.5
    x = base[:N]  # the launch reads and writes x, told n = N + 64
    after = base[N:].clone()
    with pytest.raises(Exception, match="out of bounds|out-of-bounds"):
        ratio_kernel[(_grid(N + 64),)](x, y[:N], x, N + 64, 0.75, BLOCK=BLOCK)
    assert torch.equal(base[N:], after)
