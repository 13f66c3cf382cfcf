"""Compiles in worker processes: `TORCH_RBLN_COMPILE=background` and `rbln-autotune precompile`.

A worker is a persistent `python -m ...numba_backend.compile_worker` child that compiles generated kernel
modules on request; numba writes the machine code to its on-disk cache beside the module (`cache=True`),
from which the parent then loads it in milliseconds. Workers are plain subprocesses, not
multiprocessing's: a spawned multiprocessing child re-imports the user's `__main__`, which would run an
unguarded script a second time inside the worker.

Each worker is driven by one daemon thread of this process that takes jobs from a shared queue, so the
pool never delays interpreter exit. At exit the jobs still queued are handed to the workers and their
stdin is closed: they finish those compiles on their own (filling the cache for the next run) and exit,
while the user's program has already ended. Workers run in their own session, so a Ctrl-C of the
program does not interrupt them mid-write. Requests and replies are length-prefixed pickles on the
child's stdin and stdout.
"""

from __future__ import annotations

import atexit
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from concurrent.futures import Future

WORKER_MODULE = __package__ + ".compile_worker"
_HEADER = struct.Struct("<Q")


def default_workers() -> int:
    """One worker per core but one (the program keeps running on the interpreter meanwhile), at least
    one, at most 8."""
    return max(1, min(8, (os.cpu_count() or 2) - 1))


def write_message(stream, message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_message(stream) -> object | None:
    """The next message, or None at end of stream."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)  # noqa: S301 - our own child process's replies


class WorkerError(RuntimeError):
    """A compile failed in a worker (the message carries the worker's error), or the worker died."""


class Pool:
    """`workers` compile processes fed from one queue; `submit(...)` returns a Future of the seconds the
    compile took (numba's cache then holds the kernel)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._jobs: queue.Queue = queue.Queue()
        self._processes: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._closed = False
        for index in range(workers):
            threading.Thread(target=self._serve, name=f"rbln-compile-{index}", daemon=True).start()

    def submit(self, path: str, module_name: str, function: str, arguments: list) -> Future:
        """Compile `function` of the generated module at `path` for these argument values' types."""
        future: Future = Future()
        self._jobs.put((future, (path, module_name, function, arguments)))
        return future

    def pending(self) -> int:
        return self._jobs.qsize()

    def _start_worker(self) -> subprocess.Popen:
        env = dict(os.environ, TORCH_RBLN_COMPILE="sync", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        process = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
            start_new_session=True,
        )
        with self._lock:
            self._processes.append(process)
        return process

    def _serve(self) -> None:
        process = None
        while True:
            future, request = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                if process is None or process.poll() is not None:
                    process = self._start_worker()
                write_message(process.stdin, request)
                reply = read_message(process.stdout)
            except (OSError, ValueError, pickle.PickleError) as error:
                reply = None
                detail = f"{type(error).__name__}: {error}"
            else:
                detail = f"exit status {process.poll()}"
            if reply is None:
                future.set_exception(WorkerError(f"the compile worker stopped ({detail})"))
                process = None
                continue
            error_text, seconds = reply
            if error_text is None:
                future.set_result(seconds)
            else:
                future.set_exception(WorkerError(error_text))

    def close(self) -> None:
        """Hand the jobs not yet started to the workers (started here if none is) and close their
        stdin: they finish those compiles and exit on their own. Nothing is waited for."""
        self._closed = True
        requests = []
        while True:
            try:
                future, request = self._jobs.get_nowait()
            except queue.Empty:
                break
            if future.set_running_or_notify_cancel():
                requests.append(request)
        with self._lock:
            processes = [p for p in self._processes if p.poll() is None]
        if requests and not processes:
            processes = [self._start_worker()]
        for index, request in enumerate(requests):
            try:
                write_message(processes[index % len(processes)].stdin, request)
            except (OSError, ValueError):
                continue
        for process in processes:
            try:
                process.stdin.close()
            except OSError:
                pass
        if requests:
            from torch_rbln.log import get_logger

            get_logger("dsl").info("%d kernel compile(s) continue in %d detached worker process(es) after "
                                   "exit; the next run loads them from the cache", len(requests),
                                   len(processes))

    def kill(self) -> None:
        """Stop the workers now (tests)."""
        with self._lock:
            processes, self._processes = self._processes, []
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


_pool: Pool | None = None
_pool_lock = threading.Lock()


def pool() -> Pool:
    """This process's compile pool, started on first use with `default_workers()` workers."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = Pool(default_workers())
                atexit.register(_pool.close)
    return _pool
