"""`@jit`, specialisation, the compile cache and kernel launch.

Specialisation key (`specialize`): the kernel's `cache_key` (a hash of its source and of every `@jit`
function and compile-time global it references, transitively), then one entry per parameter:
``c:<repr of the constexpr value>``, ``n`` (None), ``p:<element dtype>`` (tensor -> pointer) or
``s:<dtype>`` (scalar: int -> i32 if it fits else i64, float -> fp32, bool -> i1).  The IR is cached per
key on the `JITFunction`; each backend's executable is cached on the `CompiledKernel`.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import inspect
import linecache
import textwrap
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass

from torch_rbln import profiling as _profiling
from torch_rbln.profiling import state as _profiler_state

from . import backends as _backends
from . import dtypes as D
from .errors import CompilationError, LaunchError
from .ir import TensorType
from .semantic import constexpr, unwrap

__all__ = [
    "JITFunction",
    "jit",
    "CompiledKernel",
    "Specialization",
    "specialize",
    "heuristics",
    "artifact_key",
    "HostLaunch",
    "host_arguments",
]

# launch options Triton accepts that mean nothing here
_IGNORED_LAUNCH_OPTIONS = {
    "num_warps",
    "num_stages",
    "num_ctas",
    "maxnreg",
    "enable_fp_fusion",
    "enable_warp_specialization",
    "extern_libs",
    "stream",
    "debug",
    "launch_cooperative_grid",
    "sanitize_overflow",
    "device",
    "device_type",
    # AMD backend options (tutorial 03's HIP configs carry waves_per_eu in their meta-parameters)
    "waves_per_eu",
    "matrix_instr_nonkdim",
    "kpack",
    "allow_flush_denorm",
    "instruction_sched_variant",
}


@dataclass(frozen=True)
class Specialization:
    """What a compiled kernel is specialised on.  `params[i] = (name, kind, info)` where kind is
    "ptr" (info: element dtype name), "scalar" (info: dtype name), "none" or "constexpr" (info: value)."""

    params: tuple
    key: str


def _constexpr_repr(v) -> str:
    if isinstance(v, JITFunction):
        return f"jit:{v.__name__}:{v.cache_key}"
    if isinstance(v, (types.FunctionType, types.BuiltinFunctionType)):
        return f"fn:{v.__module__}.{v.__qualname__}"
    return f"{type(v).__name__}:{v!r}"


def scalar_arg_dtype(v) -> D.dtype | None:
    import numpy as np

    if isinstance(v, (bool, np.bool_)):
        return D.int1
    if isinstance(v, (int, np.integer)):
        v = int(v)
        if -(2**31) <= v < 2**31:
            return D.int32
        if -(2**63) <= v < 2**63:
            return D.int64
        return None
    if isinstance(v, (float, np.floating)):
        return D.float32
    return None


def specialize(jf: JITFunction, arguments: dict) -> Specialization:
    """Specialisation of `jf` for bound `arguments` (name -> value, defaults applied)."""
    import torch

    params, parts = [], [jf.cache_key]
    for name in jf.arg_names:
        v = arguments[name]
        if name in jf.constexpr_params or isinstance(v, constexpr):
            v = unwrap(v)
            if isinstance(v, torch.Tensor):
                raise jf.launch_error(name, f"argument '{name}' is constexpr but got a tensor")
            params.append((name, "constexpr", v))
            parts.append("c:" + _constexpr_repr(v))
        elif v is None:
            params.append((name, "none", None))
            parts.append("n")
        elif isinstance(v, torch.Tensor):
            dt = D.from_torch(v.dtype)
            if dt is None:
                raise jf.launch_error(name, f"argument '{name}' has unsupported tensor dtype {v.dtype}")
            params.append((name, "ptr", dt.name))
            parts.append("p:" + dt.name)
        else:
            dt = scalar_arg_dtype(v)
            if dt is None:
                raise jf.launch_error(
                    name,
                    f"argument '{name}' has unsupported type {type(v).__name__} "
                    f"({v!r}); expected a tensor, None, bool, int or float",
                )
            params.append((name, "scalar", dt.name))
            parts.append("s:" + dt.name)
    key = hashlib.sha256("|".join(parts).encode()).hexdigest()
    return Specialization(tuple(params), key)


def artifact_key(spec: Specialization, backend: str, extra: str = "") -> str:
    """Key for a backend artifact derived from a specialisation (e.g. an on-disk compile cache entry):
    the specialisation key plus the backend name, `extra` (e.g. a template hash) and the versions of
    torch_rbln, numpy and Python."""
    import platform

    import numpy

    try:
        from torch_rbln import __version__ as trv
    except Exception:  # pragma: no cover - partial installs
        trv = "?"
    parts = [spec.key, backend, extra, trv, numpy.__version__, platform.python_version()]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


class CompiledKernel:
    """A kernel specialised and lowered to IR; backends' executables are built on demand.

    The IR (`ir`) may be built late: a backend with a warm start (`factory.warm(kernel)`, the numba
    backend's index of generated modules) builds its executable without it, and the front end runs only
    if something asks for the IR (a fault report, the interpreter, `asm`). `params` never needs it."""

    def __init__(self, jf: JITFunction, spec: Specialization, ir_fn=None):
        self.function = jf
        self.spec = spec
        self._ir = ir_fn
        self._params = None
        self._ir_lock = threading.Lock()
        self.key = spec.key
        self._executables: dict[str, object] = {}

    @property
    def ir(self):
        """The kernel's IR, built by the front end on first need."""
        if self._ir is None:
            with self._ir_lock:
                if self._ir is None:
                    self._ir = self.function._frontend(self.spec)
                    _dump_ir(self)
        return self._ir

    @property
    def params(self) -> list:
        """The IR's params (name, kind, type) as the front end makes them from the specialisation; the
        IR's own once built. Launches read these, so a warm start never builds the IR to launch."""
        if self._ir is not None:
            return self._ir.params
        if self._params is None:
            from .ir import Param, param_type

            self._params = [
                Param(name, kind, param_type(i, kind, info), info if kind == "constexpr" else None)
                for i, (name, kind, info) in enumerate(self.spec.params)
            ]
        return self._params

    def executable(self, backend: str):
        exe = self._executables.get(backend)
        if exe is None:
            factory = _backends.get_factory(backend)
            warm = getattr(factory, "warm", None) if self._ir is None else None
            exe = warm(self) if warm is not None else None
            if exe is None:
                exe = factory(self.ir)
                remember = getattr(factory, "remember", None)
                if remember is not None:
                    remember(self, exe)
            self._executables[backend] = exe
        return exe

    @property
    def asm(self) -> dict:
        return {"ir": str(self.ir)}

    # --- Triton's CompiledKernel surface (02-fused-softmax sizes a persistent grid with it) ---
    def _init_handles(self) -> None:
        """Triton loads the binary onto the GPU here; a DSL kernel is loaded by its first launch."""

    @property
    def n_regs(self) -> int:
        """Registers per lane: host programs have none; a nominal 32 keeps occupancy formulas finite."""
        return 32

    @property
    def n_spills(self) -> int:
        return 0

    @property
    def metadata(self):
        """`name`, and `shared`: the bytes of the largest block value (the working set a GPU would keep
        in shared memory), at least 1 so that `max_shared_mem // shared` is defined."""
        import types as _types

        largest = 1
        stack = [self.ir.body]
        while stack:
            blk = stack.pop()
            for op in blk.ops:
                for r in op.results:
                    ty = r.type
                    if isinstance(ty, TensorType) and ty.shape and not ty.dtype.is_ptr():
                        largest = max(largest, ty.numel * ty.dtype.itemsize)
                stack.extend(op.regions)
        return _types.SimpleNamespace(name=self.ir.name, shared=largest, num_warps=4, num_stages=1)

    def __getitem__(self, grid):
        """`compiled[grid](*args)`: launch this specialisation with all of the kernel's arguments
        (constexprs included, as Triton's CompiledKernel takes them); other constexpr values are an error
        rather than a silent recompile."""

        def launch(*args, **kwargs):
            jf = self.function
            spec = specialize(jf, jf.bind(args, dict(kwargs)))
            if spec.key != self.key:
                raise LaunchError(
                    f"compiled kernel '{jf.__name__}' launched with arguments of another specialisation "
                    "(different constexpr values or argument dtypes); launch the @jit function instead"
                )
            return jf.run(*args, grid=grid, **kwargs)

        return launch

    def __repr__(self):
        return f"<CompiledKernel {self.function.__name__} key={self.key[:12]}>"


class JITFunction:
    """A function decorated with `@jit`.  Launch with `kernel[grid](*args, **kwargs)`."""

    def __init__(
        self, fn, backend: str | None = None, do_not_specialize=(), debug=None, noinline=None, **_ignored
    ):
        if not isinstance(fn, types.FunctionType):
            raise TypeError("@jit expects a Python function")
        self.fn = fn
        self.backend = backend
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__wrapped__ = fn
        self.signature = inspect.signature(fn)
        self.arg_names = list(self.signature.parameters)
        ann = getattr(fn, "__annotations__", {})
        self.constexpr_params = {n for n, a in ann.items() if n != "return" and _is_constexpr_annotation(a)}
        self.filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
        try:
            lines, start = inspect.getsourcelines(fn)
        except OSError as e:
            raise TypeError(
                f"@jit needs the source code of {fn.__qualname__} (define kernels in a file, not in "
                f"an interactive `python -c` / REPL string): {e}"
            ) from None
        self._lines = lines
        first = lines[0]
        self.col_offset = len(first) - len(first.lstrip())
        src = textwrap.dedent("".join(lines))
        self.src = src
        module = ast.parse(src)
        tree = next((n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
        if tree is None:
            raise TypeError(f"could not find the source of {fn.__qualname__}")
        self.tree = tree
        self.line_offset = start
        self.used_functions: set[JITFunction] = set()
        self.cache: dict[str, CompiledKernel] = {}
        self._launches: dict[tuple, tuple] = {}  # launch key -> (CompiledKernel, executable)
        # raw-call key -> [CompiledKernel, executable, gather plan, direct launch: None unbuilt, False none]
        self._fast: dict[tuple, list] = {}
        self._parameter_set = set(self.arg_names)
        self._constexpr_positions = frozenset(
            i for i, name in enumerate(self.arg_names) if name in self.constexpr_params
        )
        self._defaults = {
            name: parameter.default
            for name, parameter in self.signature.parameters.items()
            if parameter.default is not inspect.Parameter.empty
        }
        self._cache_key = None
        self._warm_token = None  # the numba backend's warm index key of this function (warm_index.py)
        functools.update_wrapper(self, fn, updated=())

    # --------------------------------------------------------------- source info
    def source_line(self, lineno: int) -> str:
        line = linecache.getline(self.filename, lineno)
        if not line:
            idx = lineno - self.line_offset
            line = self._lines[idx] if 0 <= idx < len(self._lines) else ""
        return line

    @property
    def closure_vars(self) -> dict:
        code = self.fn.__code__
        if not code.co_freevars or not self.fn.__closure__:
            return {}
        out = {}
        for name, cell in zip(code.co_freevars, self.fn.__closure__, strict=False):
            try:
                out[name] = cell.cell_contents
            except ValueError:
                pass
        return out

    @property
    def cache_key(self) -> str:
        """Hash of the source plus every @jit function / compile-time global the source references."""
        if self._cache_key is None:
            self._cache_key = "computing"
            h = hashlib.sha256(self.src.encode())
            for name, v in sorted(self._referenced_globals().items()):
                if isinstance(v, JITFunction):
                    dep = v.cache_key if v._cache_key != "computing" else "recursive"
                    h.update(f"{name}=jit:{dep}".encode())
                elif isinstance(v, constexpr) or isinstance(v, (int, float, bool, str)) or v is None:
                    h.update(f"{name}={unwrap(v)!r}".encode())
            self._cache_key = h.hexdigest()
        return self._cache_key

    def _referenced_globals(self) -> dict:
        g = dict(self.fn.__globals__)
        g.update(self.closure_vars)
        out = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute):
                chain, cur = [], node
                while isinstance(cur, ast.Attribute):
                    chain.append(cur.attr)
                    cur = cur.value
                if isinstance(cur, ast.Name) and cur.id in g:
                    obj, path = g[cur.id], cur.id
                    for attr in reversed(chain):
                        if not isinstance(obj, (types.ModuleType, type)):
                            break
                        obj = getattr(obj, attr, None)
                        path += "." + attr
                        if isinstance(obj, JITFunction):
                            out[path] = obj
                            break
            elif isinstance(node, ast.Name) and node.id in g:
                v = g[node.id]
                if isinstance(v, (JITFunction, constexpr, int, float, bool, str)) or v is None:
                    out[node.id] = v
        return out

    # --------------------------------------------------------------- errors
    def launch_error(self, param: str | None, msg: str) -> LaunchError:
        node = self.tree
        col = node.col_offset
        lineno = node.lineno
        if param is not None:
            for a in node.args.args + node.args.kwonlyargs:
                if a.arg == param:
                    lineno, col = a.lineno, a.col_offset
        lineno = self.line_offset + lineno - 1
        return LaunchError(
            f"launch of kernel '{self.__name__}': {msg}",
            self.filename,
            lineno,
            col + self.col_offset,
            self.source_line(lineno),
            self.__name__,
        )

    # --------------------------------------------------------------- compile / launch
    def bind(self, args, kwargs) -> dict:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise self.launch_error(None, f"{e} (signature: {self.__name__}{self.signature})") from None
        bound.apply_defaults()
        return dict(bound.arguments)

    def compile(self, arguments: dict, backend: str | None = None) -> CompiledKernel:
        """The specialisation of this kernel for `arguments`, its IR built by the front end; with `backend`,
        whose executable is built too, from that backend's warm start when it has one (the IR is then
        built only if asked for: see `CompiledKernel`)."""
        spec = specialize(self, arguments)
        ck = self.cache.get(spec.key)
        if ck is None:
            ck = CompiledKernel(self, spec)
            if backend is not None:
                ck.executable(backend)
            else:
                ck.ir  # noqa: B018 - compile errors surface here, as before
            self.cache[spec.key] = ck
        return ck

    def _frontend(self, spec: Specialization):
        """The IR of one specialisation (the DSL front end: the kernel's source traced into IR)."""
        from .frontend import compile_kernel

        if _profiling.active():
            with _profiling.region("compile", self.__name__, stage="frontend"):
                return compile_kernel(self, spec)
        return compile_kernel(self, spec)

    def clear_cache(self) -> None:
        """Forget compiled specialisations and launch caches (the next launch compiles afresh), here
        and in every layer that registered with `on_clear_cache` (kept direct launches)."""
        self.cache.clear()
        self._launches.clear()
        self._fast.clear()
        for listener in tuple(_clear_cache_listeners):
            listener(self)

    def _split_options(self, kwargs):
        """Pop launch options that are not kernel arguments: `backend=`, `tp=` and Triton's no-ops."""
        backend = tp = None
        if "backend" in kwargs and "backend" not in self.arg_names:
            backend = kwargs.pop("backend")
        if "tp" in kwargs and "tp" not in self.arg_names:
            tp = kwargs.pop("tp")
            from torch_rbln.tp import check_tp

            try:
                check_tp(tp)
            except ValueError as error:
                raise self.launch_error(None, str(error)) from None
        for k in list(kwargs):
            if k in _IGNORED_LAUNCH_OPTIONS and k not in self.arg_names:
                kwargs.pop(k)
        return backend, tp

    def _quick_bind(self, args, kwargs) -> dict | None:
        """`bind` without inspect: the hot path of cached launches (None when anything is unusual,
        so that `bind` reports the error precisely)."""
        names = self.arg_names
        if len(args) > len(names):
            return None
        arguments = dict(zip(names, args, strict=False))
        for name, value in kwargs.items():
            if name in arguments or name not in self._parameter_set:
                return None
            arguments[name] = value
        if len(arguments) < len(names):
            for name in names:
                if name not in arguments:
                    if name not in self._defaults:
                        return None
                    arguments[name] = self._defaults[name]
        return arguments

    def _launch_key(self, backend: str, arguments: dict):
        """What decides which compiled kernel a launch uses; None when a value is not hashable."""
        import torch

        tokens: list = [backend]
        constexprs = self.constexpr_params
        for name in self.arg_names:
            value = arguments[name]
            if name in constexprs or isinstance(value, constexpr):
                tokens.append(("c", unwrap(value)))
            elif isinstance(value, torch.Tensor):
                tokens.append(value.dtype)
            elif value is None or isinstance(value, (bool, float)):
                tokens.append(type(value))
            elif isinstance(value, int):
                tokens.append(-(2**31) <= value < 2**31)
            else:
                tokens.append(("v", value))
        key = tuple(tokens)
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def _prepare(self, backend: str, args, kwargs):
        """(compiled kernel, executable, bound arguments) for a launch, from the launch cache when the
        argument kinds were seen before."""
        arguments = self._quick_bind(args, kwargs)
        key = self._launch_key(backend, arguments) if arguments is not None else None
        entry = self._launches.get(key) if key is not None else None
        if entry is None:
            arguments = self.bind(args, kwargs)
            ck = self.compile(arguments, backend)
            entry = (ck, ck.executable(backend))
            if key is not None:
                self._launches[key] = entry
        return entry[0], entry[1], arguments

    def _fast_key(self, args, kwargs):
        """Launch-cache key built from the raw call (no binding): the backend choice, each positional
        argument's kind (tensor dtype, int width, float, None; constexprs by value) and the keyword
        arguments (constexprs, by value)."""
        constexpr_positions = self._constexpr_positions
        if constexpr_positions and len(args) > min(constexpr_positions):
            tokens = [
                value if position in constexpr_positions else _value_token(value)
                for position, value in enumerate(args)
            ]
        else:  # the usual launch: constexprs by keyword (map avoids a comprehension frame per call)
            tokens = list(map(_value_token, args))
        if kwargs:
            constexprs = self.constexpr_params
            for name, value in kwargs.items():
                tokens.append((name, value if name in constexprs else _value_token(value)))
        return (self.backend, requested_backend(), tuple(tokens))

    def _try_fast_launch(self, args, kwargs, grid) -> CompiledKernel | None:
        """The hot path of a launch seen before: a dict lookup, gathering the values, the run."""
        if type(grid) is not tuple or "backend" in kwargs or "tp" in kwargs:
            return None
        try:
            key = self._fast_key(args, kwargs)
            entry = self._fast.get(key)
        except TypeError:  # an unhashable argument value
            return None
        if entry is None:
            return None
        ck, exe, gather, direct = entry
        # the grid is checked here as `_normalize_grid` would; anything unusual takes the general path,
        # which raises the precise error
        count = len(grid)
        if count == 1:
            g = (grid[0], 1, 1)
        elif count == 2:
            g = (grid[0], grid[1], 1)
        elif count == 3:
            g = grid
        else:
            return None
        g0, g1, g2 = g
        if (type(g0) is not int or type(g1) is not int or type(g2) is not int
                or not (0 <= g0 <= _MAX_X and 0 <= g1 <= _MAX_YZ and 0 <= g2 <= _MAX_YZ)
                or g0 * g1 * g2 > MAX_PROGRAMS):
            return None
        if direct is None:
            direct = self._direct(entry)
        if direct and direct(args, kwargs, *g):
            return ck
        values = [
            None if where is None else (args[where] if type(where) is int else kwargs[where])
            for where in gather
        ]
        if g[0] * g[1] * g[2] == 0:
            return ck
        self._launch_tp(exe, g, values, launch_tp(values, None))
        return ck

    @staticmethod
    def _direct(entry: list):
        """The entry's direct launch function, built once its first launch has compiled the kernel (under
        the cross-process compile lock); False when the backend has none."""
        exe = entry[1]
        if not getattr(exe, "_compiled", False):
            return None
        if entry[3] is None:
            build = getattr(exe, "direct_launcher", None)
            entry[3] = (build(entry[2]) if build is not None else None) or False
        return entry[3]

    def launcher(self, *args, **kwargs):
        """The direct launch function for calls shaped like `kernel[grid](*args, **kwargs)` (same dtypes,
        constexprs and int widths), once such a call has run: `launch(args, kwargs, g0, g1, g2) -> bool`,
        which runs the kernel on a grid (g0, g1, g2) and returns True, or does nothing and returns False
        (launch through `kernel[grid]` then). For callers that launch one specialisation very often, such
        as registered ops on small tensors, where the launch bookkeeping costs more than the kernel. None
        when there is none (no such call yet, or a backend without direct launches). The caller keys its
        copy on `requested_backend()` too, as `kernel[grid]` does."""
        try:
            entry = self._fast.get(self._fast_key(args, kwargs))
        except TypeError:
            return None
        return (self._direct(entry) or None) if entry is not None else None

    def _launch_tp(self, exe, grid, values, tp_plan) -> None:
        """Run on the launch's tensor-parallel group; a failing tp>1 launch that was not asked for
        explicitly is retried with tp=1 on the root NPU when TORCH_RBLN_USE_TP_FAILOVER=ON."""
        tp, device_index, explicit = tp_plan
        if not explicit and tp > 1:
            # A group's NPUs share out the programs: a grid with fewer programs than the group runs on
            # as many NPUs as it has programs (an explicit tp= still asks for exactly that many).
            tp = min(tp, grid[0] * grid[1] * grid[2])
        if tp == 1:
            exe.launch(grid, values, 1)
            return
        from torch_rbln.tp import run_with_tp_failover

        run_with_tp_failover(
            self.__name__,
            lambda size: exe.launch(grid, values, size),
            device_index=device_index,
            tp=tp,
            explicit=explicit,
        )

    def _remember_fast(self, args, kwargs, grid, ck, exe) -> None:
        """Record how this call's values map to the kernel's params, for `_try_fast_launch`."""
        if not getattr(exe, "takes_tensors", False) or type(grid) is not tuple:
            return
        if not all(type(g) is int for g in grid) or not 1 <= len(grid) <= 3:
            return
        if any(k in _IGNORED_LAUNCH_OPTIONS or k in ("backend", "tp") for k in kwargs):
            return
        positions = {name: i for i, name in enumerate(self.arg_names[: len(args)])}
        gather = []
        for param in ck.params:
            if param.kind not in ("ptr", "scalar"):
                gather.append(None)
            elif param.name in positions:
                gather.append(positions[param.name])
            elif param.name in kwargs:
                gather.append(param.name)
            else:
                return  # a default value: take the general path
        try:
            self._fast[self._fast_key(args, kwargs)] = [ck, exe, gather, None]
        except TypeError:
            pass

    def run(self, *args, grid, warmup=False, **kwargs):
        if _profiler_state._is_profiler_enabled:
            with _profiling.region("kernel", self.__name__, grid=grid, backend=kwargs.get("backend")
                                   or requested_backend() or self.backend):
                return self._run(args, grid, warmup, kwargs)
        return self._run(args, grid, warmup, kwargs)

    def _run(self, args, grid, warmup, kwargs):
        if not warmup and self._fast:
            ck = self._try_fast_launch(args, kwargs, grid)
            if ck is not None:
                return ck
        call_kwargs = dict(kwargs)
        requested, tp_option = self._split_options(kwargs)
        backend = _backends.resolve(requested or self.backend)
        if backend == "rebel":
            return self._run_on_rebel(args, kwargs, grid, tp_option, warmup)
        ck, exe, arguments = self._prepare(backend, args, kwargs)
        values = [arguments[p.name] if p.kind in ("ptr", "scalar") else None for p in ck.params]
        takes_tensors = getattr(exe, "takes_tensors", False)
        if warmup:
            if takes_tensors:
                exe.compile_now(values)
            return ck
        g = _normalize_grid(self, grid, arguments)
        _check_one_device(self, ck.params, arguments)
        if g[0] * g[1] * g[2] == 0:
            return ck
        if not takes_tensors:
            exe.run(g, _runtime_args(ck.ir, arguments))
            return ck
        if tp_option is None and not getattr(_peer, "allowed", False):
            self._remember_fast(args, call_kwargs, grid, ck, exe)
        self._launch_tp(exe, g, values, launch_tp(arguments.values(), tp_option))
        return ck

    def _run_on_rebel(self, args, kwargs, grid, tp_option, warmup):
        from .backends import rebel

        arguments = self.bind(args, kwargs)
        g = _normalize_grid(self, grid, arguments)
        tp = launch_tp(arguments.values(), tp_option)[0]
        if warmup:
            return rebel.compile(self, args, kwargs, g, tp)
        return rebel.launch(self, args, kwargs, g, tp)

    def __getitem__(self, grid):
        return functools.partial(self.run, grid=grid)

    def warmup(self, *args, grid=None, host_layout=None, **kwargs):
        """Compile for these arguments (tensors or values) without running; returns the CompiledKernel.

        With `host_layout` (Rebellions' host protocol: ``kernel = fn.warmup(*args, grid=(1,),
        host_layout="1:2:3")`` then ``rblib.write_rtosa(kernel, args)``), the arguments follow that
        protocol's ABI (`host_arguments`) and the result is a `HostLaunch` that `write_rtosa` runs."""
        if host_layout is None:
            return self.run(*args, grid=grid or (1,), warmup=True, **kwargs)
        layout = _check_host_layout(self, host_layout)
        grid = grid or (1,)
        kernel = self.run(*host_arguments(args), grid=grid, warmup=True, **kwargs)
        return HostLaunch(self, kernel, grid, layout, kwargs)

    def __call__(self, *args, **kwargs):
        raise CompilationError(
            f"@jit function '{self.__name__}' cannot be called directly from Python; "
            f"launch it with {self.__name__}[grid](...)"
        )

    def __repr__(self):
        return f"JITFunction({self.__module__}:{self.__qualname__})"


def _check_host_layout(jf: JITFunction, layout) -> tuple[int, ...]:
    """`host_layout` ("1:2:3": colon-separated non-negative ints) as a tuple; a LaunchError otherwise."""
    parts = layout.split(":") if isinstance(layout, str) else []
    if not parts or not all(p.isdigit() for p in parts):
        raise jf.launch_error(
            None, f"host_layout must look like '1:2:3' (colon-separated ints), got {layout!r}"
        )
    return tuple(int(p) for p in parts)


def host_arguments(args) -> list:
    """Kernel arguments under Rebellions' host protocol: a 0-dim tensor is passed as the scalar it holds.

    vllm-rbln's kernels take ``qk_scale`` (a 0-dim fp32 tensor on the host side) and use it as a number
    (``qk * qk_scale``); the same tensor also fills a parameter documented as ``block_size,  # dummy
    (scalar)``.  Everything else passes unchanged (tensors stay pointers)."""
    import torch

    return [a.item() if isinstance(a, torch.Tensor) and a.dim() == 0 else a for a in args]


class HostLaunch:
    """A kernel compiled by ``warmup(..., host_layout=...)``, bound to its grid and launch options.

    On Rebellions' stack `write_rtosa(kernel, args)` writes this kernel as the artifact that the NPU
    runtime executes; the simulated device has no separate runtime, so `launch(args)` runs it here.
    The host layout is validated and recorded (`host_layout`) but changes nothing: the simulated NPU
    reads tensors in their torch layout.  Attributes of the CompiledKernel (`asm`, `ir`, ...) are
    available on this object."""

    def __init__(self, jf: JITFunction, kernel, grid, host_layout: tuple[int, ...], options: dict):
        self.jit_function = jf
        self.kernel = kernel
        self.grid = grid
        self.host_layout = host_layout
        self.options = dict(options)

    def launch(self, args) -> None:
        self.jit_function.run(*host_arguments(args), grid=self.grid, **self.options)

    def __getattr__(self, name):
        kernel = self.__dict__.get("kernel")
        if kernel is None:
            raise AttributeError(name)
        return getattr(kernel, name)

    def __repr__(self):
        layout = ":".join(map(str, self.host_layout))
        return f"HostLaunch({self.jit_function.__name__}, grid={self.grid}, host_layout={layout!r})"


def _dump_ir(ck: CompiledKernel) -> None:
    """With $TORCH_RBLN_DUMP_KERNELS=<dir>, write each compiled kernel's IR to <dir>/<name>-<key>.ir."""
    import os

    from torch_rbln import config

    d = config.get("TORCH_RBLN_DUMP_KERNELS")  # `~` expanded, a file there refused
    if not d:
        return
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"{ck.ir.name}-{ck.key[:16]}.ir"), "w") as f:
        f.write(str(ck.ir) + "\n")


def _is_constexpr_annotation(a) -> bool:
    if a is constexpr or (isinstance(a, type) and issubclass(a, constexpr)):
        return True
    if isinstance(a, str):
        return a.split(".")[-1].strip() == "constexpr"
    return False


# Largest grid per axis (Triton's, from CUDA's launch limits) and in total: a program id is an int32,
# and a simulated launch of more programs than this would run for hours.
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_PROGRAMS = 2**31 - 1
_MAX_X, _MAX_YZ = MAX_GRID[0], MAX_GRID[1]  # the fast path's copy of the limits (MAX_GRID[2] == [1])


def _normalize_grid(jf, grid, arguments):
    """The launch grid as three ints, or a LaunchError saying what is wrong with it: entries must be
    integers (a float or a string is refused, not truncated or parsed), non-negative, within `MAX_GRID`,
    and 1 to 3 of them."""
    if callable(grid):
        meta = dict(arguments)
        meta = {k: unwrap(v) for k, v in meta.items()}
        grid = grid(meta)
    if isinstance(grid, int) or hasattr(grid, "__index__"):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)):
        raise jf.launch_error(
            None, f"grid must be a tuple of 1 to 3 ints or a callable returning one, got {grid!r}"
        )
    if not 1 <= len(grid) <= 3:
        raise jf.launch_error(None, f"grid must have 1 to 3 dimensions, got {len(grid)}: {tuple(grid)!r}")
    g = []
    for axis, entry in enumerate(grid):
        if isinstance(entry, bool) or not hasattr(entry, "__index__"):
            raise jf.launch_error(
                None,
                f"grid[{axis}] must be an int, got {type(entry).__name__} {entry!r} (grid {tuple(grid)!r})",
            )
        value = entry.__index__()
        if not 0 <= value <= MAX_GRID[axis]:
            raise jf.launch_error(
                None, f"grid[{axis}] = {value} is out of range: it must be between 0 and {MAX_GRID[axis]}"
            )
        g.append(value)
    g += [1] * (3 - len(g))
    if g[0] * g[1] * g[2] > MAX_PROGRAMS:
        raise jf.launch_error(
            None, f"grid {tuple(grid)!r} has {g[0] * g[1] * g[2]} programs, more than {MAX_PROGRAMS}"
        )
    return tuple(g)


_peer = threading.local()


@contextlib.contextmanager
def peer_access():
    """Let launches in this block (this thread) take tensors of several devices, as a copy between two
    devices' memories does (the registry's cross-device copies: all simulated memory is host memory).
    Such launches are not kept for the cached fast path."""
    previous = getattr(_peer, "allowed", False)
    _peer.allowed = True
    try:
        yield
    finally:
        _peer.allowed = previous


def _check_one_device(jf, params, arguments) -> None:
    """All tensor arguments of a launch must live on one device (the CPU, or one rbln:i), as a Triton
    launch refuses a CPU tensor among CUDA ones: a kernel runs on one device's NPUs."""
    if getattr(_peer, "allowed", False):
        return
    first = None
    for param in params:
        if param.kind != "ptr":
            continue
        value = arguments[param.name]
        is_cpu = getattr(value, "is_cpu", None)
        if is_cpu is None:
            continue
        device = "cpu" if is_cpu else str(value.device)
        if first is None:
            first = (param.name, device)
        elif device != first[1]:
            raise jf.launch_error(
                param.name,
                f"pointer argument '{param.name}' is on {device} but '{first[0]}' is on {first[1]}: "
                "all tensors of one launch must be on the same device (move them with .to(device))",
            )


# run with the kernel by `JITFunction.clear_cache`
_clear_cache_listeners: list[Callable[[JITFunction], None]] = []


def on_clear_cache(listener: Callable[[JITFunction], None]) -> None:
    """Call `listener(kernel)` at the end of every `kernel.clear_cache()`. A layer above the DSL that
    keeps a kernel's direct launches (`JITFunction.launcher`) for its hot path registers here to drop
    them: otherwise it keeps running the code compiled before the clear. The DSL imports none of those
    layers; they come to it. Registering the same listener twice keeps one."""
    if listener not in _clear_cache_listeners:
        _clear_cache_listeners.append(listener)


def set_device_policy(device_tp, backend) -> None:
    """The device's launch policy, the DSL's one hook into it (as Triton's `driver.active` keeps the
    language apart from the device): `device_tp(device_index)` is the tensor-parallel size of a launch on
    that device without an explicit `tp=`, `backend()` the requested backend name (or None). Bound on the
    first launch to `torch_rbln.tp`'s; rebinding this module's names keeps the cached launch path free of
    any indirection."""
    global _device_tp, requested_backend, _policy_bound
    _device_tp, requested_backend, _policy_bound = device_tp, backend, True


_policy_bound = False


def _bind_device_policy() -> None:
    if not _policy_bound:
        from torch_rbln import tp

        set_device_policy(tp.device_tp, tp.requested_backend)


def requested_backend() -> str | None:  # noqa: F811  (replaced by the policy's on first use)
    _bind_device_policy()
    return requested_backend()


def _host_memory(tensor) -> bool:
    """Whether a tensor's data_ptr() is a host address (CPU and rbln tensors), without building its
    `device` object (~1 us, several times per launch): this CPU build of torch has no CUDA/XPU/MPS
    tensors, and PrivateUse1 is rbln; meta tensors have no memory."""
    return tensor.is_cpu or not (tensor.is_meta or tensor.is_cuda or tensor.is_xpu or tensor.is_mps)


def _value_token(value):
    """What about a runtime argument decides its specialisation: a tensor's dtype, an int's width,
    float or None; anything else by value."""
    kind = type(value)
    if kind is int:
        return -(2**31) <= value < 2**31
    if kind is float or value is None:
        return kind
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return value
    # a tensor's device (get_device: -1 on the CPU) is part of its token, so a launch mixing devices
    # never reaches a cached launch that was checked with other devices (`_check_one_device`)
    get_device = getattr(value, "get_device", None)
    return dtype if get_device is None else (dtype, get_device())


def launch_device(tensors) -> int | None:
    """The rbln device index a launch over `tensors` runs on: that of the first tensor not on the CPU
    (None when all are CPU tensors, -1 when that tensor's memory is not host memory, e.g. meta)."""
    for tensor in tensors:
        if not tensor.is_cpu:
            return tensor.get_device() if _host_memory(tensor) else -1
    return None


def launch_tp(values, explicit_tp: int | None = None) -> tuple[int, int | None, bool]:
    """(tensor-parallel size, logical device index, explicit?) of a launch.

    An explicit `tp=` launch option wins; otherwise tensors on an `rbln:i` device launch with
    `torch_rbln.tp.tp_size_for(i)` (1 unless TORCH_RBLN_USE_DEVICE_TP=ON), and CPU tensors with 1."""
    import torch

    device_index = None
    tensor = torch.Tensor
    for value in values:
        if isinstance(value, tensor) and not value.is_cpu and _host_memory(value):
            device_index = value.get_device()
            break
    if explicit_tp is not None:
        return explicit_tp, device_index, True
    if device_index is None:
        return 1, None, False
    return _device_tp(device_index), device_index, False


def _device_tp(device_index: int) -> int:  # replaced by the policy's on first use
    _bind_device_policy()
    return _device_tp(device_index)


def _runtime_args(fn, arguments):
    from .runtime import flat_numpy_view

    out = []
    for p in fn.params:
        v = arguments[p.name]
        if p.kind == "ptr":
            out.append(flat_numpy_view(v, p.type.dtype.element_ty))
        elif p.kind == "scalar":
            out.append(v)
        else:
            out.append(None)
    return out


def jit(
    fn=None,
    *,
    backend: str | None = None,
    do_not_specialize=(),
    debug=None,
    noinline=None,
    repr=None,
    launch_metadata=None,
    **kwargs,
):
    """Decorator: compile a Triton-style kernel.  `backend` overrides $TORCH_RBLN_DSL_BACKEND."""
    if backend is not None:
        _backends.resolve(backend)

    def deco(f):
        return JITFunction(
            f, backend=backend, do_not_specialize=do_not_specialize, debug=debug, noinline=noinline
        )

    return deco(fn) if fn is not None else deco


class Heuristics:
    """`@heuristics({"NAME": lambda args: ...})`: computes meta-parameters from the other arguments."""

    def __init__(self, fn, values: dict):
        self.fn = fn
        self.values = values
        self.arg_names = fn.arg_names

    def run(self, *args, grid, **kwargs):
        meta = dict(zip(self.arg_names, args, strict=False))
        meta.update(kwargs)
        for name, f in self.values.items():
            kwargs[name] = f(meta)
            meta[name] = kwargs[name]
        return self.fn.run(*args, grid=grid, **kwargs)

    def __getitem__(self, grid):
        return functools.partial(self.run, grid=grid)

    def warmup(self, *args, grid=None, **kwargs):
        return self.run(*args, grid=grid or (1,), warmup=True, **kwargs)


def heuristics(values: dict):
    def deco(fn):
        return Heuristics(fn, values)

    return deco
