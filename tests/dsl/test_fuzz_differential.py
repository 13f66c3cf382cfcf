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
FLAG, seed); build `fuzzgen.KernelCase(source, R, C, programs, n, flag, seed, 0, 0)` and call
`fuzzgen.compare(case, fuzzgen.run(case, "numba", isolate=True), fuzzgen.run(case, "interpret"))`.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.database import DirectoryBasedExampleDatabase

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

