"""numba compiles run with Python's cyclic collector paused (executable._collections_paused): its full
passes over a large heap cost a cold README demo ~3 s of CPU. The pause must always end, nest, survive
concurrent compiles and errors, and never re-enable a collector that the program disabled itself."""

from __future__ import annotations

import gc
import threading

import pytest
from torch_rbln.dsl.backends.numba_backend import executable
from torch_rbln.dsl.backends.numba_backend.executable import Executable, _collections_paused


@pytest.fixture(autouse=True)
def _collector_enabled_around_each_test():
    was_enabled = gc.isenabled()
    gc.enable()
    yield
    assert executable._gc_pauses[0] == 0
    (gc.enable if was_enabled else gc.disable)()


def test_a_kernels_first_call_runs_with_the_collector_paused_and_it_resumes():
    seen = []
    Executable._first_call(None, lambda: seen.append(gc.isenabled()))  # `self` is read only on errors
    assert seen == [False]
    assert gc.isenabled()


def test_the_pause_ends_when_the_compile_raises():
    with pytest.raises(ZeroDivisionError), _collections_paused():
        1 / 0  # noqa: B018
    assert gc.isenabled()


def test_nested_pauses_resume_only_at_the_outermost_end():
    with _collections_paused():
        with _collections_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_the_program_disabled_stays_disabled():
    gc.disable()
    with _collections_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_concurrent_compiles_keep_it_paused_until_the_last_ends():
    inside, release = threading.Barrier(3), threading.Event()
    states = []

    def compile_in_thread():
        with _collections_paused():
            inside.wait()
            release.wait()
        states.append(gc.isenabled())

    threads = [threading.Thread(target=compile_in_thread) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait()
    assert not gc.isenabled()
    release.set()
    for thread in threads:
        thread.join()
    assert gc.isenabled()
    assert len(states) == 2
