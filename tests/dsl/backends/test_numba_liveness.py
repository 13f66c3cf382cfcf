"""The numba backend's liveness analysis on bit sets (`numba_backend/liveness.py`) must return exactly
what numba's own `compute_live_map` returns: every call numba makes while compiling is checked against
numba's function, on random generated kernels (the differential fuzzer's) and on plain numba
functions with awkward control flow (loops with break/continue, dead code, variables defined on one
branch only)."""

from __future__ import annotations

import dataclasses

import numba
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from numba.core import analysis, ir_utils
from torch_rbln.dsl.backends.numba_backend import liveness

from .. import fuzzgen


@pytest.fixture(autouse=True, params=["both"])
def dsl_backend():
    """The fuzz cases run both backends themselves."""
    return "both"


@pytest.fixture
def compared(monkeypatch):
    """Route numba's liveness calls through a wrapper that runs numba's function and ours on the same
    arguments and fails on any difference (values or block order); yields the list of compared calls."""
    original = liveness.original_compute_live_map()
    calls: list[int] = []

    def both(cfg, blocks, var_use_map, var_def_map):
        expected = original(cfg, blocks, var_use_map, var_def_map)
        ours = liveness.compute_live_map(cfg, blocks, var_use_map, var_def_map)
        assert list(ours) == list(expected)
        for offset, names in expected.items():
            assert ours[offset] == names, f"block {offset}: {sorted(ours[offset] ^ names)}"
        calls.append(len(blocks))
        return expected

    monkeypatch.setattr(analysis, "compute_live_map", both)
    monkeypatch.setattr(ir_utils, "compute_live_map", both)
    return calls


def test_installed_on_the_numba_it_was_written_for():
    """On the numba whose function it reproduces, the backend uses it; on another, numba's own."""
    original = liveness.original_compute_live_map()
    if liveness._source_digest(original) != liveness._EXPECTED_SOURCE:
        assert analysis.compute_live_map is original
        pytest.skip(f"numba {numba.__version__}: its compute_live_map differs; numba's own is used")
    assert analysis.compute_live_map is liveness.compute_live_map
    assert ir_utils.compute_live_map is liveness.compute_live_map


@settings(max_examples=2, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(case=fuzzgen.kernel_cases(max_statements=5))
def test_random_kernels_same_liveness_and_results(case, compared, fresh_cache):
    # a marker comment gives the kernel a file (and numba cache entry) of its own: it compiles here
    case = dataclasses.replace(case, source=case.source + "\n# liveness differential\n")
    before = len(compared)
    fuzzgen.compare(case, fuzzgen.run(case, "numba"), fuzzgen.run(case, "interpret"))
    assert len(compared) > before  # numba compiled the kernel, every liveness call compared


def _awkward(n, flags):
    total = 0.0
    unused = 0
    i = 0
    while i < n:
        i += 1
        if flags[i % flags.shape[0]] == 0:
            continue
        for j in range(i):
            if j > 5:
                break
            if flags[j % flags.shape[0]] < 0:
                late = j * 2.0  # defined on this branch only
                total += late
            else:
                total -= j
        else:
            unused += 1
        if total > 1e9:
            return total
    k = n
    while True:
        k -= 1
        if k <= 0:
            break
    return total + unused + k


def test_plain_numba_control_flow(compared):
    compiled = numba.njit(cache=False)(_awkward)
    flags = np.array([1, 0, -1, 2, -3], dtype=np.int64)
    assert compiled(40, flags) == _awkward(40, flags)
    assert compiled(0, flags) == _awkward(0, flags)
    assert len(compared) > 3 and max(compared) > 10


def test_attention_forward_kernel(compared, fresh_cache):
    """The largest kernel family (hundreds of blocks): compiled and checked, and its output against
    torch's attention. 40 tokens: more keys than the 32-key block, so the launch takes the online
    softmax's loop (a launch whose one block holds every key compiles a smaller kernel)."""
    from torch_rbln.kernels import attention

    attention.attention_forward_kernel.fn.clear_cache()  # compiled afresh (here, into the empty cache)
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
    out = torch.nn.functional.scaled_dot_product_attention(
        q.to("rbln"), k.to("rbln"), v.to("rbln"), is_causal=True)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    assert max(compared) > 100
