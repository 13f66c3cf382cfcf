"""Differential fuzzing: random kernels (`fuzzgen.kernel_cases`) run on the numba backend and on the
interpreter with the same inputs must produce the same outputs, element by element.

The default run is derandomized (the same examples every time, so CI is deterministic) and uses no
example database; each example is one numba compile (seconds cold, reused from the on-disk cache
afterwards), so `max_examples` is small.  `test_fuzz_long` (marked slow) explores many more; set
$DSL_FUZZ_EXAMPLES to change its count, $DSL_FUZZ_STATEMENTS the kernels' size, $DSL_FUZZ_RANDOM=1 to
draw new examples instead of the derandomized sequence and $DSL_FUZZ_DB to keep failures across runs.
A mismatch (or a crash of the compiled kernel, caught in a forked child) prints the kernel's source and
launch; `fuzzgen.run(case, backend)` replays it.

Reproducing a failure by hand: the failure message holds the kernel source and its launch (grid, n, R, C,
FLAG, seed, alias); build `fuzzgen.KernelCase(source, R, C, programs, n, flag, seed, 0, 0, alias)` and call
`fuzzgen.compare(case, fuzzgen.run(case, "numba", isolate=True), fuzzgen.run(case, "interpret"))`.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torch_rbln.dsl as tl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from torch_rbln import dsl as triton

from . import fuzzgen


@pytest.fixture(autouse=True, params=["both"])
def dsl_backend():
    """Each example runs both backends itself (overrides conftest's per-backend parametrisation)."""
    return "both"


def _check(case: fuzzgen.KernelCase) -> None:
    fuzzgen.compare(case, fuzzgen.run(case, "numba", isolate=True), fuzzgen.run(case, "interpret"))


def _settings(examples: int, derandomize: bool, database=None) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=derandomize,
        database=database,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def test_fuzz_numba_matches_interpreter():
    _settings(12, True)(given(fuzzgen.kernel_cases())(_check))()


# Statement lists in the generator's form whose lowering puts a loop nest that reads a buffer across
# rows (a column reduction, a transposed read, a cumulative sum down the columns) right after the nest
# that writes it, over the same extents: what a wrong fusion of the two nests (numba_backend/fusion.py)
# gets wrong. The random examples above rarely draw it.
FUSION_HAZARDS = (
    ["    f0 = tl.exp(x0 * 0.25)", "    f1 = tl.sum(f0, axis=0, keep_dims=True) + f0"],
    ["    f0 = tl.exp(x0 * 0.25)", "    f1 = f0 + tl.trans(f0) * 0.5",
     "    f2 = tl.max(f1, axis=1, keep_dims=True) + f1"],
    ["    f0 = tl.exp(x1 * 0.125) + x0",
     "    f1 = tl.cumsum(f0, axis=0) + tl.max(f0, axis=0, keep_dims=True)",
     "    f2 = tl.sum(f1, axis=1, keep_dims=True) * f0"],
)


@pytest.mark.parametrize("hazard", range(len(FUSION_HAZARDS)))
def test_cross_row_reads_after_writes_match_interpreter(hazard):
    floats = sorted({line.split()[0] for line in FUSION_HAZARDS[hazard]})
    head = [fuzzgen.SIGNATURE, "    pid = tl.program_id(0)", "    rows = tl.arange(0, R)[:, None]",
            "    cols = tl.arange(0, C)[None, :]", "    offs = rows * C + cols",
            "    base = pid * (R * C) + offs", "    x0 = tl.load(x_ptr + base)",
            "    x1 = tl.load(y_ptr + base, mask=cols < n, other=2.5)"]
    tail = [f"    tl.store(of_ptr + (pid * {fuzzgen.MAX_FLOATS} + {slot}) * (R * C) + offs, {name})"
            for slot, name in enumerate(floats)]
    body = "\n".join(head + FUSION_HAZARDS[hazard] + tail)
    source = fuzzgen.PRELUDE + "\n\n@triton.jit\n" + body + "\n"
    _check(fuzzgen.KernelCase(source, 4, 4, 2, 3, 0, hazard, len(floats), 0, -1))


@pytest.mark.slow
@pytest.mark.timeout(0)  # hundreds of numba compiles, then minutes of shrinking
def test_fuzz_long():
    examples = int(os.environ.get("DSL_FUZZ_EXAMPLES", "300"))
    # hypothesis gives up shrinking after a few minutes (each step is a numba compile): with
    # $DSL_FUZZ_DB set, a failure is saved there and the next run resumes shrinking it
    path = os.environ.get("DSL_FUZZ_DB")
    database = DirectoryBasedExampleDatabase(path) if path else None
    random = os.environ.get("DSL_FUZZ_RANDOM") is not None
    statements = int(os.environ.get("DSL_FUZZ_STATEMENTS", "10"))
    _settings(examples, not random, database)(
        given(fuzzgen.kernel_cases(max_statements=statements))(_check)
    )()


# -- scans against a sequential reference ------------------------------------------------------------
# Both backends share `tl.associative_scan`'s lowering (core.py), so comparing them cannot catch a wrong
# argument order: these examples compare with a sequential numpy scan instead.  Triton defines a reverse
# scan as the forward scan of the flipped block, flipped back (the accumulated value from the end of the
# axis is the LEFT argument).


@triton.jit
def _scan_first(a, b):
    return a


@triton.jit
def _scan_last_nonzero(a, b):
    return tl.where(b != 0, b, a)


@triton.jit
def _scan_first_nonzero(a, b):
    return tl.where(a != 0, a, b)


@triton.jit
def _scan_max_abs_left(a, b):
    # associative, not commutative: the larger magnitude, the left one on ties (-2 vs 2)
    return tl.where(tl.abs(b) > tl.abs(a), b, a)


@triton.jit
def _scan_kernel(x_ptr, o_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr, FN: tl.constexpr,
                 REVERSE: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    if FN == 0:
        y = tl.associative_scan(x, AXIS, _scan_first, reverse=REVERSE)
    elif FN == 1:
        y = tl.associative_scan(x, AXIS, _scan_last_nonzero, reverse=REVERSE)
    elif FN == 2:
        y = tl.associative_scan(x, AXIS, _scan_first_nonzero, reverse=REVERSE)
    elif FN == 3:
        y = tl.associative_scan(x, AXIS, _scan_max_abs_left, reverse=REVERSE)
    else:
        y = tl.cumsum(x, axis=AXIS, reverse=REVERSE)
    tl.store(o_ptr + offs, y)


_REFERENCE_COMBINES = [
    lambda a, b: a,
    lambda a, b: np.where(b != 0, b, a),
    lambda a, b: np.where(a != 0, a, b),
    lambda a, b: np.where(np.abs(b) > np.abs(a), b, a),
    lambda a, b: a + b,
]


def sequential_scan(x: np.ndarray, axis: int, fn, reverse: bool) -> np.ndarray:
    """out[i] = fn(out[i - 1], x[i]) along `axis`; a reverse scan scans the flipped input."""
    x = np.flip(x, axis) if reverse else x
    moved = np.moveaxis(x, axis, 0)
    out = np.empty_like(moved)
    out[0] = moved[0]
    for i in range(1, moved.shape[0]):
        out[i] = fn(out[i - 1], moved[i])
    out = np.moveaxis(out, 0, axis)
    return np.flip(out, axis) if reverse else out


@st.composite
def _scan_cases(draw):
    M, N = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2, 4, 8, 16]))
    values = draw(st.lists(st.integers(-3, 3), min_size=M * N, max_size=M * N))
    return (np.array(values, dtype=np.int32).reshape(M, N), draw(st.integers(0, 1)),
            draw(st.integers(0, len(_REFERENCE_COMBINES) - 1)), draw(st.booleans()))


def _check_scan(backend: str, case) -> None:
    x, axis, fn, reverse = case
    M, N = x.shape
    out = torch.empty(M, N, dtype=torch.int32)
    _scan_kernel[(1,)](torch.from_numpy(x), out, M=M, N=N, AXIS=axis, FN=fn, REVERSE=reverse,
                       backend=backend)
    ref = sequential_scan(x, axis, _REFERENCE_COMBINES[fn], reverse)
    assert np.array_equal(out.numpy(), ref), f"\nx={x}\naxis={axis} fn={fn} reverse={reverse}\n" \
        f"got\n{out.numpy()}\nexpected\n{ref}"


@pytest.mark.parametrize("backend, examples", [("interpret", 60), ("numba", 4)])
def test_associative_scan_matches_sequential_reference(backend, examples):
    _settings(examples, True)(given(_scan_cases())(lambda case: _check_scan(backend, case)))()
