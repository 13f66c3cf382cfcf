"""Compiled kernels: generated module on disk (memory cache, then disk cache, then numba compile)
and the launcher that spreads a grid over the simulated NPUs of a tensor-parallel group.

A specialisation seen by an earlier process is found through the warm index (`warm_index.py`, `warm`)
before its IR exists: the launcher then needs only the specialisation's params and the index entry, and
the front end and the code generator run only if a fault report or the interpreter tier asks for them."""

from __future__ import annotations

import builtins
import contextlib
import gc
import glob
import importlib.util
import os
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...errors import KernelRuntimeError
from ...ir import Function, format_function
from ...jit import _host_memory
from . import codegen, lazy_blas, warm_index

BACKEND_VERSION = "1"
lazy_blas.defer_numba_blas_check()  # before numba sets up its target: scipy.linalg only for tl.dot
_modules: dict[str, types.ModuleType] = {}
_modules_lock = threading.Lock()


def _log():
    from torch_rbln.log import get_logger

    return get_logger("dsl")


def _cache_root() -> str:
    from torch_rbln import cachedir

    return cachedir.cache_path("kernels", f"numba-v{BACKEND_VERSION}")


# A compile that makes a launch wait longer than this is announced, once per process at WARNING
# (`_SlowCompileNotice`), while it runs; each such compile is then listed at INFO (`_report_compile`).
SLOW_COMPILE_SECONDS = 1.0
_slow_compiles = [0, 0.0]  # this process: how many, and their seconds
_compiles = [0, 0.0]  # every numba compile of this process (not loads from its cache), and their seconds
# the same compiles one by one, (kernel name, specialisation: generated module + argument types,
# seconds): the test suite's compile log finds specialisations that several tests or processes compile
_compile_records: list[tuple[str, str, float]] = []
_announced = [False]  # whether this process said at WARNING that it compiles
_in_flight = [0]  # compiles this process is waiting for or has handed to workers
_notice_lock = threading.Lock()


def _announce(name: str, background: bool = False) -> None:
    """Say once per process, at WARNING, that kernels are being compiled and where they will be cached:
    a new user's first minute is otherwise silent."""
    with _notice_lock:
        if _announced[0]:
            return
        _announced[0] = True
        count = max(1, _in_flight[0])
    if background:
        how = "They compile in worker processes; launches run on the interpreter until each is ready"
    else:
        how = ("Each takes seconds, once; TORCH_RBLN_COMPILE=background runs launches on the interpreter "
               "meanwhile, `rbln-autotune precompile` compiles ahead of time on all cores")
    _log().warning(
        "compiling %d kernel%s with numba (first: '%s'), cached afterwards in %s: later runs load them in "
        "milliseconds. %s; TORCH_RBLN_LOG_LEVEL=INFO lists each compile",
        count, "" if count == 1 else "s", name, _cache_root(), how,
    )


class _SlowCompileNotice:
    """Announces (`_announce`) a compile that is still running after SLOW_COMPILE_SECONDS, from a timer
    thread: the message appears while the user waits, not after."""

    def __init__(self, name: str) -> None:
        self.name = name
        with _notice_lock:
            _in_flight[0] += 1
        self._timer = threading.Timer(SLOW_COMPILE_SECONDS, _announce, (name,))
        self._timer.daemon = True
        self._timer.start()

    def finish(self, seconds: float, cpu_seconds: float, compiled: bool) -> None:
        self._timer.cancel()
        with _notice_lock:
            _in_flight[0] -= 1
        if compiled:
            _report_compile(self.name, seconds, cpu_seconds)


def _report_compile(name: str, seconds: float, cpu_seconds: float) -> None:
    """List a compile that made a launch wait at INFO, with the running total (the first one of the
    process is announced at WARNING, if the timer has not done so yet). `cpu_seconds` is the compiling
    thread's CPU time: on a loaded host the wall time says little about the compile itself."""
    if seconds < SLOW_COMPILE_SECONDS:
        return
    _slow_compiles[0] += 1
    _slow_compiles[1] += seconds
    _announce(name)
    _log().info("compiled '%s' with numba in %.1f s, %.2f s CPU (%d slow compiles, %.1f s in all this run)",
                name, seconds, cpu_seconds, _slow_compiles[0], _slow_compiles[1])


# TORCH_RBLN_COMPILE=background: per kernel name, [launches run on the interpreter while a worker
# compiled it, specialisations compiled in workers, their worker seconds, compiles that failed there]
_tiers: dict[str, list] = {}
INTERPRET_MAX_PROGRAMS = 256  # a larger launch waits for its background compile instead


def compile_count() -> tuple[int, float]:
    """(numba compiles this process ran, their seconds): loads from numba's disk cache do not count."""
    return _compiles[0], _compiles[1]


_gc_pause_lock = threading.Lock()
_gc_pauses = [0]  # compiles in flight that paused the cyclic garbage collector


@contextlib.contextmanager
def _collections_paused():
    """Pause Python's cyclic garbage collector while numba compiles or loads a kernel.

    Why: a numba compile allocates millions of objects, so the collector runs thousands of times during
    it, and each of its full (oldest-generation) passes walks the whole heap, which in a real program
    holds torch, transformers and every kernel compiled so far: 5.3 s of a 69 s cold README demo went to
    19 such passes. Paused, the compile's garbage is freed by reference counting as before and its
    cycles by the first collection after it, in one pass over the young objects. Nested and concurrent
    compiles keep it paused until the last ends; a collector the program disabled itself stays off.
    """
    with _gc_pause_lock:
        paused = gc.isenabled() or _gc_pauses[0] > 0
        if paused:
            _gc_pauses[0] += 1
            gc.disable()
    try:
        yield
    finally:
        if paused:
            with _gc_pause_lock:
                _gc_pauses[0] -= 1
                if _gc_pauses[0] == 0:
                    gc.enable()


def compile_records() -> list[tuple[str, str, float]]:
    """This process's numba compiles in order: (kernel name, specialisation key, seconds)."""
    return list(_compile_records)


def _count_compile(executable: Executable, seconds: float) -> None:
    _compiles[0] += 1
    _compiles[1] += seconds
    # the generated module names the specialisation; the parameters say what it is for: dtypes and
    # constexpr values (numba's own signature is all int64 addresses and sizes)
    stem = os.path.splitext(os.path.basename(executable.module.__file__))[0]
    types_ = ",".join(f"{param.name}={param.value!r}" if param.kind == "constexpr" else str(param.type)
                      for param in executable.fn.params)
    _compile_records.append((executable.fn.name, f"{stem}({types_})", seconds))


def tier_report() -> dict[str, dict]:
    """Per kernel: how many launches ran on the `interpret` tier while a worker process compiled the
    kernel (TORCH_RBLN_COMPILE=background), how many specialisations the workers compiled and in how
    many seconds, and how many of those compiles failed (then compiled in this process). Every other
    launch ran on `numba`."""
    return {name: {"interpret_launches": row[0], "worker_compiles": row[1], "worker_seconds": row[2],
                   "worker_failures": row[3]} for name, row in sorted(_tiers.items())}


def reset_tier_report() -> None:
    _tiers.clear()


def _raised_by_numba_cache(error: BaseException) -> bool:
    """Whether `error` came out of numba's on-disk cache loader (`numba/core/caching.py`): unpickling
    random or truncated bytes raises almost anything (UnpicklingError, EOFError, UnicodeDecodeError,
    ValueError, ...), so the origin, not the type, says the cache file is damaged."""
    traceback = error.__traceback__
    while traceback is not None:
        filename = traceback.tb_frame.f_code.co_filename.replace("\\", "/")
        if filename.endswith("numba/core/caching.py"):
            return True
        traceback = traceback.tb_next
    return False


def _numba_cache_files(module_file: str) -> list[str]:
    """numba's cache files (index and data) of the kernels of one generated module."""
    directory, name = os.path.split(module_file)
    stem = os.path.splitext(name)[0]
    pattern = os.path.join(glob.escape(directory), "__pycache__", glob.escape(stem) + ".*.nb[ic]")
    return sorted(glob.glob(pattern))


def _cached_on_disk(dispatcher: object, module_file: str) -> bool:
    """Whether numba's on-disk cache holds an index for `dispatcher` (a kernel of the generated module
    `module_file`): one stat of the index file at the path numba's cache computed for it. Why not the
    directory listing `_numba_cache_files` makes: every generated module's cache files share one
    `__pycache__`, so matching a pattern reads all of them; with ~3,300 kernels cached that took 10-45 ms
    per kernel's first launch in a process (a compiled Llama's second call 46 ms of its ~280). The
    listing remains where numba's cache object is not the one this reads (another numba version)."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    index_path = getattr(cache_file, "_index_path", None)
    if isinstance(index_path, str):
        return os.path.exists(index_path)
    return bool(_numba_cache_files(module_file))


def _atomic_write(path: str, text: str) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".py")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _import_file(module_name: str, path: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def load_module(lowered: codegen.Lowered) -> types.ModuleType:
    """The generated module: from this process's memory, else the disk cache, else written now.

    A cached file whose text differs from what we generate (corrupt, truncated, edited) is replaced,
    with a WARNING; numba keeps its compiled machine code beside the file (`cache=True`)."""
    digest = lowered.digest
    module = _modules.get(digest)
    if module is not None:
        return module
    with _modules_lock:
        module = _modules.get(digest)
        if module is not None:
            return module
        path = os.path.join(_cache_root(), f"{lowered.name}_{digest}.py")
        try:
            with open(path) as stream:
                cached = stream.read()
        except OSError:
            cached = None
        if cached is not None and cached != lowered.source:
            _log().warning("kernel cache entry %s is corrupt; regenerating it", path)
        if cached != lowered.source:
            _atomic_write(path, lowered.source)
        module = _import_file(f"torch_rbln_kernel_{lowered.name}_{digest}", path)
        _modules[digest] = module
        return module


def _calls_blas(source: str) -> bool:
    """Whether a generated module calls scipy's BLAS through numba's `np.dot` (a batched `tl.dot`): numba's
    BLAS check runs and that BLAS is limited to one thread before its first launch. A 2-D `tl.dot`
    (`tile_dot`) calls the gemm `dot_support` binds, which sets up scipy's BLAS itself where it binds
    that one."""
    return "np.dot(" in source


def _load_indexed(entry: warm_index.Entry) -> types.ModuleType:
    """The generated module a warm index entry names (its text was checked against the entry's digest)."""
    module = _modules.get(entry.digest)
    if module is not None:
        return module
    with _modules_lock:
        module = _modules.get(entry.digest)
        if module is None:
            path = warm_index.module_path(_cache_root(), entry)
            module = _import_file(f"torch_rbln_kernel_{entry.name}_{entry.digest}", path)
            _modules[entry.digest] = module
        return module


# prologue codes that are no fault: the launch reruns on the variant each names (nothing ran)
_VARIANT_CODES = (codegen.ERR_ALIASED, codegen.ERR_SAME_MEMORY)


def _warm(kernel, eager_reads: bool, same_memory: bool = False) -> Executable | None:
    """The executable of a `jit.CompiledKernel` from the warm index, skipping the front end and the code
    generator; None when the kernel is ineligible, has no trusted entry, or kernels are being dumped
    (TORCH_RBLN_DUMP_KERNELS writes the IR and the lowering, which need both)."""
    from torch_rbln import config

    if config.get("TORCH_RBLN_DUMP_KERNELS"):
        return None
    try:
        key = warm_index.warm_key(kernel.function, kernel.spec, eager_reads, same_memory)
    except warm_index.Ineligible as why:
        _log().debug("kernel '%s' takes the front end on every start: it names a %s, which has no stable "
                     "cache key", kernel.function.__name__, why)
        return None
    root = _cache_root()
    entry = warm_index.read(root, key, kernel.spec)
    if entry is None:
        return None
    try:
        return Executable._from_index(kernel, entry, eager_reads, same_memory)
    except Exception as error:  # noqa: BLE001 - the front-end path rebuilds the module and raises real errors
        _log().warning("kernel '%s': loading %s through the warm index failed (%s: %s); rebuilding it",
                       kernel.function.__name__, warm_index.module_path(root, entry), type(error).__name__,
                       error)
        warm_index.forget(root, key)
        return None


def _remember(kernel, exe) -> None:
    """Record in the warm index the module of an executable built by the front-end path, so that the next
    process loads it without the front end (`_warm`)."""
    if not isinstance(exe, Executable):
        return  # the interpreter's (a kernel numba cannot lower): it needs the IR anyway
    exe._kernel_ir = kernel
    try:
        key = warm_index.warm_key(kernel.function, kernel.spec, exe.eager_reads, exe.same_memory)
    except warm_index.Ineligible:
        return
    entry = warm_index.Entry(exe._entry_name, exe._digest, exe._ptr_params, exe._scalar_params,
                             exe._uses_atomics, exe._calls_blas)
    warm_index.write(_cache_root(), key, entry)


def _forget_indexed(kernel, eager_reads: bool, same_memory: bool = False) -> None:
    if kernel is None:
        return
    try:
        warm_index.forget(_cache_root(), warm_index.warm_key(kernel.function, kernel.spec, eager_reads,
                                                             same_memory))
    except warm_index.Ineligible:
        pass


def _for_kernel(kernel, eager_reads: bool = False, same_memory: bool = False) -> Executable:
    """The executable of a `jit.CompiledKernel`: from the warm index, else built from its IR and recorded."""
    exe = _warm(kernel, eager_reads, same_memory)
    if exe is None:
        exe = Executable(kernel.ir, eager_reads, same_memory)
        _remember(kernel, exe)
    return exe


@contextlib.contextmanager
def _compile_lock(source_path: str):
    """Hold an exclusive lock on `<kernel source>.lock` (filelock, between processes and threads).

    The first launch of a specialisation compiles it (numba, seconds) and stores the machine code
    beside the source. Processes that need the same kernel at the same time (pytest-xdist workers,
    autotuning jobs, several ranks) wait for the first one and then load its result from numba's
    cache instead of compiling it again each. Where the lock file cannot be created (a read-only
    cache directory), it compiles unlocked: at worst two processes compile the same kernel."""
    import filelock

    lock = filelock.FileLock(source_path + ".lock")
    try:
        lock.acquire()
    except OSError as error:
        _log().debug("compiling %s without its lock file: %s", source_path, error)
        yield
        return
    try:
        yield
    finally:
        lock.release()


def dump(fn: Function, lowered: codegen.Lowered) -> None:
    from torch_rbln import config

    directory = config.get("TORCH_RBLN_DUMP_KERNELS")
    if not directory:
        return
    os.makedirs(directory, exist_ok=True)
    stem = os.path.join(directory, f"{lowered.name}_{lowered.digest}")
    _atomic_write(stem + ".py", lowered.source)
    _atomic_write(stem + ".ir", format_function(fn) + "\n")


def _tensor_memory(tensor) -> tuple[int, int]:
    """(host address of element 0, number of elements reachable from it) of a tensor argument."""
    if not tensor.is_cpu and not _host_memory(tensor):
        from ...runtime import host_view

        tensor = host_view(tensor)
    return tensor.data_ptr(), _reach(tensor)


def _reach(tensor) -> int:
    """The elements from a tensor's first to its last, inclusive (torch strides are never negative): what
    a kernel may address from its data pointer; its numel when it is contiguous, 0 when it is empty."""
    if tensor.is_contiguous():
        return tensor.numel()
    if tensor.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True))


# Per thread, the 4-int fault record that direct launches hand their kernel (allocating one per launch
# cost as much as a small kernel): kernels only write it on a fault, and it is zeroed after each.
_fault_records: dict[int, np.ndarray] = {}
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
# A tensor-parallel launch whose tensors span fewer elements than this runs its NPUs' shares on the
# launching thread: handing a share to another thread and waiting for it costs ~20-40 us here, about
# what an elementwise kernel takes for 64K elements (the demo model's 2-NPU forward was twice as slow
# as its 1-NPU one when every tiny launch was handed out).
INLINE_SHARES_BELOW = 1 << 16
# A launch of more programs than FIRST_CHUNK runs in ranges of about CHUNK_SECONDS each, so that a Ctrl-C
# interrupts it within that time (`Executable._run_in_chunks`).
FIRST_CHUNK = 256
CHUNK_SECONDS = 0.1
_pool_lock = threading.Lock()


def _workers(count: int) -> ThreadPoolExecutor:
    """Threads for the NPUs of a tensor-parallel launch beyond the launching thread's own, kept for the
    process: starting threads per launch costs more than a mid-sized kernel runs (the kernels release
    the GIL, so the threads run in parallel)."""
    global _pool, _pool_size
    if _pool is None or _pool_size < count:
        with _pool_lock:
            if _pool is None or _pool_size < count:
                old = _pool
                _pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix="rbln-npu")
                _pool_size = count
                if old is not None:
                    old.shutdown(wait=False)
    return _pool


class Executable:
    """A kernel compiled by numba. `launch(grid, values, tp)` runs the grid's programs on `tp` threads,
    one per simulated NPU of the launch's group, each over a contiguous range of program ids.

    Memory is passed as (address, element count) pairs that the kernel views in place, so a launch
    costs a few microseconds of Python: no array is unboxed, nothing is copied."""

    takes_tensors = True

    def __init__(self, fn: Function, eager_reads: bool = False, same_memory: bool = False) -> None:
        lowered = codegen.lower(fn, eager_reads, same_memory)
        dump(fn, lowered)
        self._fn: Function | None = fn
        self._lowered: codegen.Lowered | None = lowered
        self._kernel_ir = None  # the jit.CompiledKernel, once known (`remember`, `_from_index`)
        self._setup(fn.name, fn.params, eager_reads, load_module(lowered), lowered.name, lowered.digest,
                    lowered.uses_atomics, _calls_blas(lowered.source), same_memory)

    @classmethod
    def _from_index(cls, kernel, entry: warm_index.Entry, eager_reads: bool, same_memory: bool = False
                    ) -> Executable:
        """The executable of a `jit.CompiledKernel` whose generated module the warm index names: no
        front end, no code generator. The IR and the lowering are built only if asked for (`fn`,
        `lowered`: a fault report, the interpreter tier, the alias-safe variant's fallback)."""
        self = cls.__new__(cls)
        self._fn = None
        self._lowered = None
        self._kernel_ir = kernel
        self._setup(kernel.function.__name__, kernel.params, eager_reads, _load_indexed(entry), entry.name,
                    entry.digest, entry.uses_atomics, entry.calls_blas, same_memory)
        return self

    def _setup(self, name: str, params: list, eager_reads: bool, module: types.ModuleType, entry_name: str,
               digest: str, uses_atomics: bool, calls_blas: bool, same_memory: bool = False) -> None:
        if calls_blas:
            from .blas import limit_kernel_blas

            lazy_blas.ensure_blas()
            limit_kernel_blas()
        self.kernel_name = name
        self.params = params
        self.eager_reads = eager_reads
        self.same_memory = same_memory
        self._entry_name = entry_name
        self._digest = digest
        self._uses_atomics = uses_atomics
        self._calls_blas = calls_blas
        self._alias_variant: Executable | None = None
        self._same_memory_variant: Executable | None = None
        self._direct_kernel: Callable | None = None  # see `_variant_kernel`
        self.module = module
        self.kernel = getattr(module, entry_name)
        self.names = [p.name for p in params]
        self.tp_capable = not uses_atomics
        self._ptr_params = tuple(i for i, p in enumerate(params) if p.kind == "ptr")
        self._scalar_params = tuple(i for i, p in enumerate(params) if p.kind == "scalar")
        # fp16/bf16 scalars are rounded to float32 first, as the kernel's own float32 arithmetic would
        # (a float64 rounded straight to half precision can differ by double rounding).
        names = {i: params[i].type.dtype.name for i in self._scalar_params}
        self._scalar_types = [
            (i, np.float32 if names[i] in ("fp16", "bf16") else None) for i in self._scalar_params
        ]
        self._plain_scalars = all(convert is None for _, convert in self._scalar_types)
        self._spans: list[int] = []
        self._compiled = False  # set after the first launch (see `_compile_lock`)
        self._compiled_kinds: set[tuple] = set()  # Python types of the arguments `compile_now` compiled
        # TORCH_RBLN_COMPILE=background: the worker's compile (a Future) while it runs, False once this
        # kernel no longer uses the interpreter tier
        self._background = None
        self._interpreter = None

    @property
    def fn(self) -> Function:
        """The kernel's IR; built now (the front end) for an executable loaded through the warm index."""
        if self._fn is None:
            self._fn = self._kernel_ir.ir
        return self._fn

    @property
    def lowered(self) -> codegen.Lowered:
        """The code generator's output for this kernel (error sites for fault reports); lowered now for an
        executable loaded through the warm index, and checked against the module it runs."""
        if self._lowered is None:
            lowered = codegen.lower(self.fn, self.eager_reads, self.same_memory)
            if lowered.digest != self._digest:
                # the key missed an input: never expected, but the sidecar must not be trusted again
                _log().error("kernel '%s': its warm index entry named module %s, but its source now lowers "
                             "to %s; the entry is removed (please report this)", self.kernel_name,
                             self._digest, lowered.digest)
                _forget_indexed(self._kernel_ir, self.eager_reads, self.same_memory)
            self._lowered = lowered
        return self._lowered

    def _flat(self, values: list, memory) -> list:
        """The kernel's arguments: (address, span) per pointer, then the scalars as Python numbers (the
        generated prologue converts each to its specialised type, so no numpy scalar is built here)."""
        out = []
        spans = []
        for index in self._ptr_params:
            address, span = memory(values[index])
            out.append(address)
            out.append(span)
            spans.append(span)
        if self._plain_scalars:
            out.extend([values[index] for index in self._scalar_params])
        else:
            out.extend([values[i] if convert is None else convert(values[i])
                        for i, convert in self._scalar_types])
        self._spans = spans
        return out

    def direct_launcher(self, gather: list) -> Callable | None:
        """A launch function generated for one way of calling this kernel, for the hot path of repeated
        launches (a registered op on small tensors spends more in launch bookkeeping than in the kernel).

        `gather[i]` says where param i's value sits in a call: a position in `args`, a keyword name, or
        None (a constexpr). The result, `launch(args, kwargs, g0, g1, g2) -> bool`, reads each tensor's
        address and size, checks the launch needs one NPU, and calls the compiled kernel; it returns
        False, having done nothing, when the general launch must take the call (a tensor that is not
        contiguous or not in host memory, a grid split over a tensor-parallel group). Its attribute
        `unchecked(g0, g1, g2, *values)` takes the runtime params' values in param order and skips those
        checks: for callers that made them already. `unchecked.by_address(g0, g1, g2, *addressed)` takes
        each tensor param as two ints (its data address and element count), then the scalars, and returns
        False, having reset the fault record, when the kernel reported a fault: for fast paths that hold
        the addresses already (from their input scan) and know the counts from their plan; the caller
        lets its general path re-run such a call, which raises the fault with its full report."""
        runtime = sorted((*self._ptr_params, *self._scalar_params))
        if any(gather[index] is None for index in runtime):
            return None
        names = {index: f"v{index}" for index in runtime}
        tensors = [names[i] for i in self._ptr_params]
        converts = dict(self._scalar_types)
        arguments = [f"{t}.data_ptr(), {t}.numel()" for t in tensors]
        arguments += [
            f"float32({names[i]})" if converts[i] is not None else names[i] for i in self._scalar_params
        ]
        values = ", ".join(names.get(i, "None") for i in range(len(self.params)))
        signature = ", ".join(names[i] for i in runtime)
        spans = "".join(f"{t}.numel(), " for t in tensors)
        # by_address: each tensor as (address, element count), the scalars as in `unchecked`
        address_arguments = [f"a{i}, n{i}" for i in self._ptr_params]
        address_arguments += arguments[len(tensors):]
        address_signature = ", ".join([*(f"a{i}, n{i}" for i in self._ptr_params),
                                       *(names[i] for i in self._scalar_params)])
        flat = ", ".join(arguments)
        # a strided view (a slice of a growing id tensor) spans from its first element to its last
        reaching = ", ".join([*(f"{t}.data_ptr(), reach({t})" for t in tensors), *arguments[len(tensors):]])
        reach_spans = "".join(f"reach({t}), " for t in tensors)
        record = [  # this thread's fault record: all zero between launches
            "    error = errors.get(get_ident())",
            "    if error is None:",
            "        error = errors[get_ident()] = zeros(4, int64)",
        ]
        report = [  # a fault: the record reset, the fault raised as a launch raises it (`failed`)
            "        fault = error.copy()",
            "        error[:] = 0",
            f"        failed(fault, (g0, g1, g2), ({spans}), [{values}])",
        ]
        lines = [
            f"def unchecked(g0, g1, g2, {signature}):",
            *record,
            f"    kernel(0, g0 * g1 * g2, g0, g1, g2, {flat}, error)",
            "    if error[0]:",
            # refused for aliasing (an in-place call): the alias-safe variant, once it has run once
            # through the general launch, takes the same flat arguments directly
            f"        if error[0] == {codegen.ERR_ALIASED} and aliased() is not None:",
            "            error[:] = 0",
            f"            aliased()(0, g0 * g1 * g2, g0, g1, g2, {flat}, error)",
            "            if not error[0]:",
            "                return",
            # an in-place launch: the same-memory variant, once compiled (as the alias-safe one)
            f"        elif error[0] == {codegen.ERR_SAME_MEMORY} and same() is not None:",
            "            error[:] = 0",
            f"            same()(0, g0 * g1 * g2, g0, g1, g2, {flat}, error)",
            "            if not error[0]:",
            "                return",
            *report,
            "",
            # for callers whose arguments alias by design (an in-place op writing an input it reads
            # through other strides): the alias-safe variant directly once it is compiled
            f"def aliasing(g0, g1, g2, {signature}):",
            "    variant = aliased()",
            "    if variant is None:",
            f"        unchecked(g0, g1, g2, {signature})",
            "        return",
            *record,
            f"    variant(0, g0 * g1 * g2, g0, g1, g2, {flat}, error)",
            "    if error[0]:",
            *report,
            "",
            f"def strided(g0, g1, g2, {signature}):",
            *record,
            f"    kernel(0, g0 * g1 * g2, g0, g1, g2, {reaching}, error)",
            "    if error[0]:",
            *(line.replace(spans, reach_spans) if "failed(" in line else line for line in report),
            "",
            f"def by_address(g0, g1, g2, {address_signature}):",
            *record,
            f"    kernel(0, g0 * g1 * g2, g0, g1, g2, {', '.join(address_arguments)}, error)",
            "    if error[0]:",
            f"        if error[0] == {codegen.ERR_SAME_MEMORY}:",
            "            error[:] = 0",
            "            if same() is None:  # the variant's first launch: compiled (once) and run",
            f"                return same_by_address((g0, g1, g2), ({', '.join(address_arguments)},))",
            f"            same()(0, g0 * g1 * g2, g0, g1, g2, {', '.join(address_arguments)}, error)",
            "            if not error[0]:",
            "                return True",
            "        error[:] = 0",
            "        return False",
            "    return True",
            "",
            "def launch(args, kwargs, g0, g1, g2):",
        ]
        for index in runtime:
            where = gather[index]
            source = f"args[{where}]" if type(where) is int else f"kwargs[{where!r}]"
            lines.append(f"    v{index} = {source}")
        if tensors:
            lines += [
                f"    index = launch_device(({', '.join(tensors)},))",
                "    if index is not None and (index < 0 or (g0 * g1 * g2 > 1 and device_tp(index) > 1)):",
                "        return False",
                f"    if not ({' and '.join(f'{t}.is_contiguous()' for t in tensors)}):",
                f"        strided(g0, g1, g2, {signature})",
                "        return True",
            ]
        lines += [f"    unchecked(g0, g1, g2, {signature})", "    return True"]
        from ...jit import _device_tp, launch_device

        namespace = {"kernel": self._entry_point() or self.kernel, "zeros": np.zeros, "int64": np.int64,
                     "float32": np.float32,
                     "launch_device": launch_device, "device_tp": _device_tp, "failed": self._direct_failed,
                     "aliased": self._alias_safe_kernel, "same": self._same_memory_kernel,
                     "same_by_address": self._same_memory_by_address, "reach": _reach,
                     "errors": _fault_records, "get_ident": threading.get_ident}
        code = builtins.compile("\n".join(lines) + "\n", f"<direct launch of {self.kernel_name}>", "exec")
        exec(code, namespace)  # noqa: S102 - generated from this kernel's own parameter list
        launch = namespace["launch"]
        launch.unchecked = namespace["unchecked"]
        launch.unchecked.by_address = namespace["by_address"]
        launch.unchecked.aliasing = namespace["aliasing"]
        launch.unchecked.strided = namespace["strided"]  # for plans whose operands are strided views
        return launch

    def _entry_point(self) -> Callable | None:
        """The compiled specialisation's own entry, when one was compiled for the argument types a
        direct launch passes (int64 addresses, sizes and grid; float64 for float params, float32 for
        half-precision ones, int64 for int params), or None. Calling it skips numba's per-call typing
        of ~15 arguments; a value of another Python type is converted as the kernel's prologue would
        convert it (an int to a float param exactly, a float to an int param truncated)."""
        import numba

        scalars = []
        for index, convert in self._scalar_types:
            dtype = self.params[index].type.dtype
            if convert is not None:
                scalars.append(numba.types.float32)
            elif dtype.is_floating():
                scalars.append(numba.types.float64)
            elif dtype.is_int() and not dtype.is_bool():
                scalars.append(numba.types.int64)
            else:
                return None
        expected = (numba.types.int64,) * (5 + 2 * len(self._ptr_params)) + tuple(scalars)
        for signature, compiled in list(self.kernel.overloads.items()):
            if tuple(signature[:-1]) == expected:
                return compiled.entry_point
        return None

    @staticmethod
    def _variant_kernel(variant: Executable | None) -> Callable | None:
        """A variant's compiled kernel once that variant has been launched (and so compiled, with its
        compile notice and cache handling) through its `launch`; None before. A direct launch refused
        for aliasing (or for its same memory) reruns on it with the same flat arguments: an in-place op
        costs a second kernel call, not a general launch."""
        if variant is None or not variant._compiled:
            return None
        if variant._direct_kernel is None:
            variant._direct_kernel = variant._entry_point() or variant.kernel
        return variant._direct_kernel

    def _alias_safe_kernel(self) -> Callable | None:
        return self._variant_kernel(self._alias_variant)

    def _same_memory_kernel(self) -> Callable | None:
        return self._variant_kernel(self._same_memory_variant)

    def alias_safe(self) -> Executable:
        """This kernel lowered to read every load where it stands, for launches whose arguments alias
        (the kernel's prologue reported ERR_ALIASED before running any program): compiled on first
        need, seconds once, then cached like any other specialisation."""
        if self._alias_variant is None:
            self._alias_variant = self._variant(eager_reads=True)
            _log().info("kernel '%s': arguments alias each other; running its variant that reads loads "
                        "in place", self.kernel_name)
        return self._alias_variant

    def same_memory_variant(self) -> Executable:
        """This kernel lowered with each in-place output's array bound to its input's, for launches
        whose in-place pairs are the same memory (the prologue reported ERR_SAME_MEMORY before running
        any program: `x.mul_(y)` of 16,384 elements or more): compiled on first need, then cached."""
        if self._same_memory_variant is None:
            self._same_memory_variant = self._variant(same_memory=True)
            _log().info("kernel '%s': an in-place launch; running its variant whose outputs are their "
                        "inputs' arrays", self.kernel_name)
        return self._same_memory_variant

    def _variant(self, **flags: bool) -> Executable:
        """This kernel's executable lowered with `flags` (through the warm index when the kernel's
        specialisation is known)."""
        kernel = self._kernel_ir
        return _for_kernel(kernel, **flags) if kernel is not None else Executable(self.fn, **flags)

    def _same_memory_by_address(self, grid: tuple, arguments: tuple) -> bool:
        """A launch by address its prologue refused for its same memory, before the same-memory variant
        was compiled: the variant compiled (once) and run on the same flat arguments; False, as
        `by_address` returns, when it reports a fault (the caller's general path re-runs the call and
        raises it). Without this a compiled graph's launch would fall back on every call, since the
        graph's node-by-node rerun need not launch in place."""
        variant = self.same_memory_variant()
        variant._spans = list(arguments[1:2 * len(self._ptr_params):2])
        try:
            variant._execute(grid, list(arguments), 1)
        except KernelRuntimeError:
            return False
        return True

    def _run_variant(self, code: int, grid, arguments: list, tp: int) -> None:
        """Rerun a launch the prologue refused with `code` (nothing ran) on the variant it names."""
        variant = self.alias_safe() if code == codegen.ERR_ALIASED else self.same_memory_variant()
        variant._spans = self._spans
        variant._execute(grid, arguments, tp)

    def _direct_failed(self, error: np.ndarray, grid: tuple, spans: tuple, values: list) -> None:
        """A direct launch's kernel reported a fault: raise it as `launch` would (replayed for details);
        a launch refused for aliasing runs on the alias-safe variant instead."""
        if error[0] == codegen.ERR_ALIASED:
            self.alias_safe().launch(grid, values, 1)
            return
        if error[0] == codegen.ERR_SAME_MEMORY:
            self.same_memory_variant().launch(grid, values, 1)
            return
        self._spans = list(spans)
        try:
            self._raise_if_failed(error)
        except KernelRuntimeError as fault:
            self._explain(fault, grid, lambda: self._numpy_args(values))

    def compile_now(self, values: list) -> None:
        """Compile for these argument types without running any program (nothing to do, and no lock
        file taken, when this kernel has been compiled for arguments of the same Python types: a graph
        compiled again in this process, after `torch._dynamo.reset()` or for another shape)."""
        arguments = self._flat(values, _tensor_memory)
        kinds = tuple(map(type, arguments))
        if kinds in self._compiled_kinds:
            return
        with _compile_lock(self.module.__file__):
            misses = sum(self.kernel._cache_misses.values())
            began = time.perf_counter()
            self._first_call(lambda: self.kernel(0, 0, 1, 1, 1, *arguments, np.zeros(4, np.int64)))
            if sum(self.kernel._cache_misses.values()) > misses:
                _count_compile(self, time.perf_counter() - began)
        self._compiled_kinds.add(kinds)
        self._background = False  # compiled here: no launch of it needs the interpreter tier any more
        # (the autotuner compiles each config so before timing it: it never times the interpreter)

    def _first_call(self, call: Callable[[], None]) -> None:
        """Run `call`, the first call of the kernel, which makes numba load its on-disk cache. Cache files
        that do not unpickle (random bytes, truncated or empty: a crash mid-write, a full disk) are
        deleted with a WARNING and the call is retried, so numba compiles afresh and rewrites them."""
        try:
            with _collections_paused():
                call()
        except Exception as error:  # noqa: BLE001 - only an error raised inside numba's cache loader
            stale = _numba_cache_files(self.module.__file__)
            if not stale or isinstance(error, KernelRuntimeError) or not _raised_by_numba_cache(error):
                raise
            for path in stale:
                with contextlib.suppress(OSError):
                    os.remove(path)
            _log().warning(
                "numba cache of kernel '%s' is corrupt (%s: %s); removed %s and recompiling",
                self.kernel_name, type(error).__name__, error, ", ".join(stale),
            )
            with _collections_paused():
                call()

    def launch(self, grid, values: list, tp: int = 1) -> None:
        """Run with `values[i]` per Function param: a tensor (ptr), a number (scalar) or None."""
        if not self._compiled and self._background is not False and self._on_interpreter_tier(
                grid, lambda: self._flat(values, _tensor_memory), lambda: self._numpy_args(values)):
            return
        try:
            self._execute(grid, self._flat(values, _tensor_memory), tp)
        except KernelRuntimeError as fault:
            self._explain(fault, grid, lambda: self._numpy_args(values))

    def run(self, grid, args, tp: int = 1) -> None:
        """The backend protocol's entry: ptr params given as flat numpy views (as the interpreter)."""
        if not self._compiled and self._background is not False and self._on_interpreter_tier(
                grid, lambda: self._flat(args, lambda array: (array.ctypes.data, array.shape[0])),
                lambda: args):
            return
        try:
            self._execute(grid, self._flat(args, lambda array: (array.ctypes.data, array.shape[0])), tp)
        except KernelRuntimeError as fault:
            self._explain(fault, grid, lambda: args)

    def _on_interpreter_tier(self, grid, flat: Callable[[], list], numpy_args: Callable[[], list]) -> bool:
        """TORCH_RBLN_COMPILE=background: run this launch on the interpreter (and return True) while a
        worker process compiles the kernel, handing the compile to the workers on the first launch. A
        kernel already in numba's disk cache, a launch of more than INTERPRET_MAX_PROGRAMS programs (it
        waits for the compile) and a compile that failed in the worker (compiled here, which raises its
        error at the user's launch) return False: the launch runs compiled."""
        future = self._background
        if future is None:
            from torch_rbln import config

            if config.get("TORCH_RBLN_COMPILE") != "background" or \
                    _cached_on_disk(self.kernel, self.module.__file__):
                self._background = False
                return False
            from . import background

            with _notice_lock:
                _in_flight[0] += 1
            future = self._background = background.pool().submit(
                self.module.__file__, self.module.__name__, self._entry_name, flat())
            future.add_done_callback(self._background_done)
            _tiers.setdefault(self.kernel_name, [0, 0, 0.0, 0])
            _announce(self.kernel_name, background=True)
        g0, g1, g2 = (int(g) for g in grid)
        if not future.done() and g0 * g1 * g2 <= INTERPRET_MAX_PROGRAMS:
            if self._interpreter is None:
                from ..interpret import Executable as Interpreter

                self._interpreter = Interpreter(self.fn)
            self._interpreter.run((g0, g1, g2), numpy_args())
            _tiers[self.kernel_name][0] += 1
            return True
        self._background = False
        try:
            seconds = future.result()
        except Exception as error:  # noqa: BLE001 - compiled here instead, which raises it at this launch
            _log().warning("background compile of kernel '%s' failed (%s); compiling it in this process",
                           self.kernel_name, error)
            return False
        _log().info("kernel '%s' runs compiled from now on (compiled by a worker in %.1f s, %d launches "
                    "ran on the interpreter meanwhile)", self.kernel_name, seconds,
                    _tiers[self.kernel_name][0])
        return False

    def _background_done(self, future) -> None:
        with _notice_lock:
            _in_flight[0] -= 1
        row = _tiers.setdefault(self.kernel_name, [0, 0, 0.0, 0])
        if future.cancelled() or future.exception() is not None:
            row[3] += 1
        else:
            row[1] += 1
            row[2] += future.result()

    def _numpy_args(self, values: list) -> list:
        from ...runtime import flat_numpy_view

        return [
            flat_numpy_view(value, param.type.dtype.element_ty) if param.kind == "ptr" else value
            for value, param in zip(values, self.params, strict=True)
        ]

    def _explain(self, fault: KernelRuntimeError, grid, numpy_args) -> None:
        """Replay the faulting program on the interpreter, which names every offending offset and
        leaves memory untouched; its error replaces ours. Ours stands if the replay cannot run."""
        program = getattr(fault, "program", None)
        if program is None:
            raise fault
        g0, g1, _ = (int(g) for g in grid)
        pid = (program % g0, (program // g0) % g1, program // (g0 * g1))
        try:
            from ..interpret import Executable as Interpreter

            Interpreter(self.fn).replay(tuple(int(g) for g in grid), numpy_args(), pid)
        except KernelRuntimeError as detailed:
            raise detailed from None
        except Exception:  # noqa: BLE001 - the replay is best effort; the numba fault is still right
            pass
        raise fault

    def _execute(self, grid, arguments: list, tp: int) -> None:
        if self._compiled:
            self._run_programs(grid, arguments, tp)
            return
        from torch_rbln import profiling

        with _compile_lock(self.module.__file__):  # the first launch compiles (or loads) the code
            misses = sum(self.kernel._cache_misses.values())
            # nothing in numba's cache: this launch compiles, and says so if that takes a while
            cached = _cached_on_disk(self.kernel, self.module.__file__)
            notice = None if cached else _SlowCompileNotice(self.kernel_name)
            began, began_cpu = time.perf_counter(), time.thread_time()
            try:
                if profiling.active():
                    with profiling.region("compile", self.kernel_name, stage="numba (or its disk cache)"):
                        self._first_call(lambda: self._run_programs(grid, arguments, tp))
                else:
                    self._first_call(lambda: self._run_programs(grid, arguments, tp))
            finally:
                compiled = sum(self.kernel._cache_misses.values()) > misses
                if compiled:
                    _count_compile(self, time.perf_counter() - began)
                cpu = time.thread_time() - began_cpu
                if notice is not None:
                    notice.finish(time.perf_counter() - began, cpu, compiled)
                elif compiled:
                    _report_compile(self.kernel_name, time.perf_counter() - began, cpu)
        self._compiled = True

    def _run_programs(self, grid, arguments: list, tp: int) -> None:
        g0, g1, g2 = grid
        total = g0 * g1 * g2
        if tp <= 1:
            error = np.zeros(4, np.int64)
            if total <= FIRST_CHUNK:
                self.kernel(0, total, g0, g1, g2, *arguments, error)
            else:
                self._run_in_chunks(total, g0, g1, g2, arguments, error)
            if error[0]:
                if error[0] in _VARIANT_CODES:
                    self._run_variant(int(error[0]), grid, arguments, tp)
                    return
                self._raise_if_failed(error)
            return
        if not self.tp_capable:
            raise RuntimeError(
                f"kernel '{self.kernel_name}' uses atomics, which cannot be split across the {tp} NPUs of a "
                "tensor-parallel group; run it with tp=1 (TORCH_RBLN_USE_TP_FAILOVER=ON retries it so)"
            )
        if total < tp:
            raise RuntimeError(
                f"kernel '{self.kernel_name}' has {total} program(s), fewer than tp={tp}: it cannot use the "
                "tensor-parallel group; run it with tp=1 (TORCH_RBLN_USE_TP_FAILOVER=ON retries it so)"
            )
        errors = [np.zeros(4, np.int64) for _ in range(tp)]
        bounds = [total * k // tp for k in range(tp + 1)]
        kernel = self.kernel
        if sum(arguments[1: 2 * len(self._ptr_params): 2]) < INLINE_SHARES_BELOW:
            # Too little work to pay for handing shares to other threads: the launching thread runs
            # each NPU's share in turn (same programs per NPU, same per-NPU fault records and errors).
            for k in range(tp):
                kernel(bounds[k], bounds[k + 1], g0, g1, g2, *arguments, errors[k])
                if errors[k][0]:
                    if errors[k][0] in _VARIANT_CODES:  # found by the first share, nothing ran
                        self._run_variant(int(errors[k][0]), grid, arguments, tp)
                        return
                    self._raise_if_failed(errors[k])
            return
        futures = [
            _workers(tp - 1).submit(kernel, bounds[k], bounds[k + 1], g0, g1, g2, *arguments, errors[k])
            for k in range(1, tp)
        ]
        failure: BaseException | None = None
        try:
            kernel(bounds[0], bounds[1], g0, g1, g2, *arguments, errors[0])
        except BaseException as error:  # noqa: BLE001 - raised once the other NPUs are done
            failure = error
        for future in futures:
            error = future.exception()
            if failure is None and error is not None:
                failure = error
        if failure is not None:
            raise failure
        if errors[0][0] in _VARIANT_CODES:  # every share found it in its prologue: nothing ran
            self._run_variant(int(errors[0][0]), grid, arguments, tp)
            return
        for error in errors:
            if error[0]:
                self._raise_if_failed(error)

    def _run_in_chunks(self, total: int, g0: int, g1: int, g2: int, arguments: list,
                       error: np.ndarray) -> None:
        """Run the programs in consecutive ranges, each sized from the speed of the ones before to take
        about `CHUNK_SECONDS`, so that Python sees a Ctrl-C (KeyboardInterrupt) within that time instead
        of after the whole launch (numba's machine code does not check for signals). A launch of a few
        milliseconds runs in two calls; a program that faults stops the launch at its chunk."""
        kernel = self.kernel
        start, size = 0, FIRST_CHUNK
        while start < total and not error[0]:
            end = min(total, start + size)
            began = time.perf_counter()
            kernel(start, end, g0, g1, g2, *arguments, error)
            elapsed = time.perf_counter() - began
            per_program = elapsed / (end - start)
            size = max(1, int(CHUNK_SECONDS / per_program)) if per_program > 0 else total
            start = end

    def _raise_if_failed(self, error: np.ndarray) -> None:
        code = int(error[0])
        site = self.lowered.error_sites[int(error[1])]
        offset, program = int(error[2]), int(error[3])
        op = site.op
        loc = op.loc
        where = (
            f'File "{loc.filename}", line {loc.lineno}, in {loc.function}\n    {loc.source_line.strip()}\n'
            if loc
            else ""
        )
        if code == codegen.ERR_OUT_OF_BOUNDS:
            root = op.attrs.get("root") if "root" in op.attrs else None
            if root is None:
                root = op.operands[0].type.root
            size = self._spans[self._ptr_params.index(root)]
            message = (
                f"out-of-bounds {site.kind} of argument '{self.names[root]}' (valid element offsets "
                f"0..{size - 1}): offending offset {offset}"
            )
        elif code == codegen.ERR_ASSERT:
            message = f"device_assert failed: {op.attrs.get('msg', '')}"
        else:
            message = f"dynamic slice start {offset} out of range"
        fault = KernelRuntimeError(f"{where}kernel '{self.kernel_name}', program {program}: {message}")
        fault.program = program
        raise fault


def compile(fn: Function):  # noqa: A001 - backend factory name
    """The numba executable for `fn`; kernels this backend cannot lower run on the interpreter (WARNING),
    or raise when TORCH_RBLN_DISABLE_FALLBACK disables `compile_error` fallbacks."""
    try:
        return Executable(fn)
    except codegen.UnsupportedByNumba as error:
        from torch_rbln import config

        if config.fallback_disabled("compile_error"):
            _log().error("kernel '%s' failed to compile with numba: %s", fn.name, error)
            raise
        _log().warning("kernel '%s' runs on the interpreter backend: %s", fn.name, error)
        from ..interpret import compile as interpret_compile

        return interpret_compile(fn)


def warm(kernel) -> Executable | None:
    """`compile`'s warm start (see `jit.CompiledKernel.executable`): the executable of a CompiledKernel
    whose IR has not been built, from the warm index, or None (the caller builds the IR and calls
    `compile`, then `remember`)."""
    return _warm(kernel, False)


def remember(kernel, exe) -> None:
    """`compile`'s record of a kernel built from its IR, for the next process's `warm`."""
    _remember(kernel, exe)


compile.warm = warm
compile.remember = remember
