"""Warm-start index: from a kernel specialisation straight to its generated numba module.

Why: in a fresh process each kernel specialisation used to run the DSL front end (parse and trace the
kernel's Python source into IR) and the code generator (IR -> module source, through jinja2) only to find
that the generated module, and numba's machine code beside it, were on disk already: about half a second
of a warm README demo. One small JSON sidecar per specialisation, keyed by everything the front end and
the code generator read, names that module and carries what the launcher needs without the IR; a hit skips
both. The IR is still built on demand (a fault report, the interpreter tier, `CompiledKernel.ir`).

A stale sidecar would run the machine code of another kernel: a miscompile. So the key (`warm_key`) takes:

- the kernel: its source text, file, first line and indentation (the generated source names them), and a
  token for every global or closure value its body names, through attribute chains (`cfg.BLOCK`), and the
  same for each @jit function it calls, transitively. A value without a stable token (an arbitrary object,
  a Python function outside the DSL, whose body could change under the same name) makes the kernel
  ineligible: it always takes the front end;
- the specialisation: per parameter its kind and dtype, or its constexpr value's token; the alias-safe
  variant flag (`eager_reads`);
- the tool chain (`toolchain_fingerprint`): every source file of the DSL package (front end, semantics, IR,
  code generator, template, support helpers) and the versions of numba, llvmlite, numpy, jinja2, Python.

A sidecar is trusted only if it parses, has this format, names this very key, lists the pointer and scalar
parameters this specialisation has, and its module file exists with text hashing to the recorded digest.
Anything else is ignored (a WARNING when the sidecar itself is damaged or foreign) and rewritten by the
front-end path. Writes are atomic (temporary file + rename), so concurrent writers cannot tear a file.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import platform
import sys
import tempfile
import threading
import types
from dataclasses import dataclass
from pathlib import Path

FORMAT = 1
_DSL_PACKAGE = "torch_rbln.dsl"
_DSL_ROOT = Path(__file__).resolve().parents[2]  # the `dsl` folder (torch_rbln.dsl)
_STABLE_MODULES = frozenset({"builtins", "math"})  # their contents change only with the Python version
_tokens_lock = threading.RLock()
_COMPUTING = "computing"
_INELIGIBLE = "ineligible"


class Ineligible(Exception):
    """The kernel names a value without a stable token: it cannot be keyed before its front end runs."""


def _log():
    from torch_rbln.log import get_logger

    return get_logger("dsl")


# --------------------------------------------------------------------------- the tool chain


def _versions() -> list[tuple[str, str]]:
    """Versions of what turns IR into machine code: a change of any of them changes every key."""
    import llvmlite
    import numba
    import numpy

    try:
        from importlib.metadata import version

        jinja = version("jinja2")
    except Exception:  # noqa: BLE001 - an unusual install: its absence is part of the key
        jinja = "?"
    from .executable import BACKEND_VERSION

    return [("numba", numba.__version__), ("llvmlite", llvmlite.__version__), ("numpy", numpy.__version__),
            ("jinja2", jinja), ("python", sys.version), ("machine", platform.machine()),
            ("backend", BACKEND_VERSION), ("index", str(FORMAT))]


def source_fingerprint(root: Path = _DSL_ROOT) -> str:
    """Hash of every .py and .j2 file under `root` (path and bytes): the front end, semantics, IR,
    code generator and its template and helpers. Over-inclusive on purpose: an edit anywhere in the DSL
    invalidates every sidecar (the next run rebuilds them) rather than risk one stale kernel."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".py", ".j2") or "__pycache__" in path.parts or not path.is_file():
            continue
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


@functools.cache
def toolchain_fingerprint() -> str:
    """`source_fingerprint()` and `_versions()`, once per process (~a few ms)."""
    parts = [source_fingerprint()] + [f"{name}={value}" for name, value in _versions()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


# --------------------------------------------------------------------------- tokens of values


def _in_dsl(module_name: str | None) -> bool:
    return module_name is not None and (
        module_name == _DSL_PACKAGE or module_name.startswith(_DSL_PACKAGE + "."))


def value_token(value) -> str:
    """A string that stands for `value` as the front end sees it, equal across processes exactly when the
    front end would compile the same thing; raises Ineligible when there is none."""
    from ... import dtypes as D
    from ...jit import JITFunction
    from ...semantic import constexpr

    if isinstance(value, constexpr):
        value = value.value
    if isinstance(value, JITFunction):
        return "jit:" + kernel_token(value)
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return f"{type(value).__module__}.{type(value).__qualname__}:{value!r}"
    if isinstance(value, D.dtype):
        return f"dtype:{value.name}"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}(" + ",".join(value_token(v) for v in value) + ")"
    if isinstance(value, types.ModuleType):
        if _in_dsl(value.__name__) or value.__name__ in _STABLE_MODULES:
            return f"module:{value.__name__}"
        raise Ineligible(f"module {value.__name__}")
    module = getattr(value, "__module__", None)
    if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)) or callable(value):
        if _in_dsl(module) or module in _STABLE_MODULES:
            return f"callable:{module}.{getattr(value, '__qualname__', type(value).__qualname__)}"
        raise Ineligible(f"callable {module}.{getattr(value, '__qualname__', value)!s}")
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":  # `torch.float16`: its name
        return f"torch.dtype:{value}"
    if type(value).__module__ == "numpy" and hasattr(value, "dtype") and getattr(value, "shape", None) == ():
        return f"numpy:{value.dtype}:{value!r}"
    if _in_dsl(type(value).__module__):  # a DSL object with a value repr (e.g. a dtype-like)
        text = repr(value)
        if " at 0x" not in text:
            return f"dsl:{type(value).__qualname__}:{text}"
    raise Ineligible(f"{type(value).__qualname__} value")


def _resolve(jf, name: str):
    """What the front end finds for a name that is not a parameter (`FunctionCompiler.lookup`); a
    sentinel when it is a local or a builtin (nothing to key)."""
    closure = jf.closure_vars
    if name in closure:
        return closure[name]
    g = jf.fn.__globals__
    if name in g:
        return g[name]
    return _LOCAL


_LOCAL = object()


def _chain_token(root, chain: list[str]) -> str:
    """Token of `root.a.b...`: down through modules and classes outside the DSL (a user's `cfg.BLOCK`),
    stopping at a DSL module (its whole content is in the tool-chain fingerprint) or the first value."""
    obj = root
    for attr in chain:
        if isinstance(obj, types.ModuleType) and (_in_dsl(obj.__name__) or obj.__name__ in _STABLE_MODULES):
            break
        if not isinstance(obj, (types.ModuleType, type)):
            break
        if not hasattr(obj, attr):
            return "missing"
        obj = getattr(obj, attr)
    return value_token(obj)


def kernel_token(jf) -> str:
    """Hash of a @jit function as the front end reads it (see the module docstring); raises Ineligible.
    Computed once per function and process, like its `cache_key`."""
    with _tokens_lock:
        token = getattr(jf, "_warm_token", None)
        if token == _INELIGIBLE:
            raise Ineligible(f"@jit function {jf.__name__}")
        if token == _COMPUTING:
            return f"recursive:{jf.__module__}.{jf.__qualname__}"
        if token is not None:
            return token
        jf._warm_token = _COMPUTING
        try:
            token = _compute_kernel_token(jf)
        except Ineligible:
            jf._warm_token = _INELIGIBLE
            raise
        except BaseException:
            jf._warm_token = None
            raise
        jf._warm_token = token
        return token


def _compute_kernel_token(jf) -> str:
    parameters = set(jf.arg_names)
    roots: set[int] = set()
    tokens: dict[str, str] = {}
    # the body only: the front end never evaluates decorators (an @autotune's configs) or the signature,
    # whose annotations and defaults reach it through the specialisation
    nodes = (node for statement in jf.tree.body for node in ast.walk(statement))
    for node in nodes:
        if isinstance(node, ast.Attribute) and id(node) not in roots:
            chain, current = [], node
            while isinstance(current, ast.Attribute):
                roots.add(id(current))
                chain.append(current.attr)
                current = current.value
            if isinstance(current, ast.Name):
                roots.add(id(current))
                if current.id in parameters:
                    continue
                value = _resolve(jf, current.id)
                if value is _LOCAL:
                    continue
                chain.reverse()
                tokens[".".join([current.id, *chain])] = _chain_token(value, chain)
        elif isinstance(node, ast.Name) and id(node) not in roots and node.id not in parameters:
            value = _resolve(jf, node.id)
            if value is not _LOCAL:
                tokens[node.id] = value_token(value)
    digest = hashlib.sha256()
    for part in (jf.src, jf.filename, str(jf.line_offset), str(jf.col_offset), jf.__name__):
        digest.update(part.encode() + b"\0")
    for name in sorted(tokens):
        digest.update(f"{name}={tokens[name]}\0".encode())
    return digest.hexdigest()


def warm_key(jf, spec, eager_reads: bool = False, same_memory: bool = False) -> str:
    """The pre-front-end key of one specialisation of `jf` for the numba backend (of its alias-safe or
    same-memory variant: `eager_reads`, `same_memory`); raises Ineligible."""
    parts = [f"format={FORMAT}", "backend=numba", f"eager_reads={bool(eager_reads)}",
             *(["same_memory=True"] if same_memory else []),
             "toolchain=" + toolchain_fingerprint(), "kernel=" + kernel_token(jf)]
    for name, kind, info in spec.params:
        parts.append(f"{name}:{kind}:" + (value_token(info) if kind == "constexpr" else str(info)))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


# --------------------------------------------------------------------------- the sidecars


@dataclass(frozen=True)
class Entry:
    """What a hit needs: the generated module (`name`_`digest`.py) and the launcher's facts about it."""

    name: str
    digest: str
    ptr_params: tuple[int, ...]
    scalar_params: tuple[int, ...]
    uses_atomics: bool
    calls_blas: bool


def sidecar_path(root: str, key: str) -> str:
    return os.path.join(root, "warm", key + ".json")


def expected_params(spec) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(pointer, scalar) parameter indices of a specialisation, as the code generator lists them."""
    kinds = [kind for _, kind, _ in spec.params]
    return (tuple(i for i, k in enumerate(kinds) if k == "ptr"),
            tuple(i for i, k in enumerate(kinds) if k == "scalar"))


def _is_index_list(value) -> bool:
    return isinstance(value, list) and all(type(v) is int for v in value)


def read(root: str, key: str, spec) -> Entry | None:
    """The sidecar of `key` if it exists and can be trusted, else None (logged when it was damaged,
    foreign or stale: the caller's front-end path then rewrites it)."""
    path = sidecar_path(root, key)
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except FileNotFoundError:
        return None
    except OSError as error:
        _log().debug("warm index entry %s unreadable (%s); compiling from the kernel source", path, error)
        return None
    try:
        record = json.loads(data)
    except ValueError as error:
        _log().warning("warm index entry %s is corrupt (%s); rebuilding it from the kernel source",
                       path, error)
        return None
    problem = _check(record, key, spec)
    if problem is not None:
        _log().warning("warm index entry %s is %s; rebuilding it from the kernel source", path, problem)
        return None
    entry = Entry(record["name"], record["digest"], tuple(record["ptr_params"]),
                  tuple(record["scalar_params"]), record["uses_atomics"], record["calls_blas"])
    module = module_path(root, entry)
    try:
        with open(module, "rb") as stream:
            text = stream.read()
    except OSError:
        _log().debug("warm index entry %s names %s, which is gone; compiling from the kernel source",
                     path, module)
        return None
    if hashlib.sha256(text).hexdigest()[:24] != entry.digest:
        _log().warning("kernel cache entry %s does not match its warm index entry %s; regenerating it",
                       module, path)
        return None
    return entry


def _check(record, key: str, spec) -> str | None:
    """Why `record` cannot be the sidecar of `key` for `spec` (None when it can)."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if record.get("format") != FORMAT:
        return f"of another format ({record.get('format')!r})"
    if record.get("key") != key:
        return "foreign (it names another key)"
    name, digest = record.get("name"), record.get("digest")
    if not isinstance(name, str) or not name.isidentifier():
        return "missing its kernel name"
    if not isinstance(digest, str) or len(digest) != 24 or any(c not in "0123456789abcdef" for c in digest):
        return "missing its module digest"
    if not (_is_index_list(record.get("ptr_params")) and _is_index_list(record.get("scalar_params"))):
        return "missing its parameter lists"
    if (tuple(record["ptr_params"]), tuple(record["scalar_params"])) != expected_params(spec):
        return "foreign (its parameters differ from this specialisation's)"
    if type(record.get("uses_atomics")) is not bool or type(record.get("calls_blas")) is not bool:
        return "missing its flags"
    return None


def module_path(root: str, entry: Entry) -> str:
    return os.path.join(root, f"{entry.name}_{entry.digest}.py")


def write(root: str, key: str, entry: Entry) -> None:
    """Write the sidecar atomically (temporary file in the same folder, then rename): a reader sees the
    old file or the new one, never a torn one, whatever other processes write at the same time. A
    failure (read-only or full cache) is logged at DEBUG and otherwise ignored: the index is an
    optimisation, the next run takes the front end again."""
    path = sidecar_path(root, key)
    record = {"format": FORMAT, "key": key, "name": entry.name, "digest": entry.digest,
              "ptr_params": list(entry.ptr_params), "scalar_params": list(entry.scalar_params),
              "uses_atomics": entry.uses_atomics, "calls_blas": entry.calls_blas}
    temporary = None
    try:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
        with os.fdopen(handle, "w") as stream:
            json.dump(record, stream)
        os.replace(temporary, path)
        temporary = None
    except OSError as error:
        _log().debug("warm index entry %s not written: %s", path, error)
    finally:
        if temporary is not None:
            try:
                os.unlink(temporary)
            except OSError:
                pass


def forget(root: str, key: str) -> None:
    """Remove a sidecar that proved wrong."""
    try:
        os.remove(sidecar_path(root, key))
    except OSError:
        pass


__all__ = ["Entry", "Ineligible", "forget", "kernel_token", "read", "source_fingerprint",
           "toolchain_fingerprint", "value_token", "warm_key", "write"]
