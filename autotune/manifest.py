"""Warm-up manifests for ``rbln-autotune warm``: which autotuned kernels to tune for which launches.

A manifest is a JSON file::

    {
      "kernels": [
        {
          "kernel": "my_package.kernels:add_kernel",        # module:attribute of an @autotune kernel
          "launches": [
            {
              "sizes": {"n": [1024, 4096, 65536]},          # optional: one launch per combination,
                                                            #   "$n" below is replaced by each value
              "args": [
                {"shape": ["$n"], "dtype": "float32"},      # a tensor (init: randn by default)
                {"shape": ["$n"], "dtype": "float32", "init": "ones"},
                {"shape": ["$n"], "dtype": "float32", "init": "zeros"},
                "$n"                                        # a scalar (number, bool or null)
              ],
              "kwargs": {"ALPHA": 0.5},                     # keyword arguments / constexprs
              "grid": ["cdiv(n_elements, BLOCK_SIZE)"],     # ints or expressions over the arguments
                                                            #   and the config's meta-parameters
              "device": "cpu",                              # optional: cpu (default), rbln, rbln:1, ...
              "tp": 1                                       # optional: the launch's TP size
            }
          ]
        }
      ]
    }

Tensor fields: ``shape`` (list of non-negative ints), ``dtype`` (a torch dtype name such as ``float16``),
optional ``init`` (``randn``, ``rand``, ``zeros``, ``ones``, ``arange``) and ``device``.  Grid
expressions may use ``cdiv``, ``next_power_of_2``, ``min``, ``max``, ``abs``, ``int`` and arithmetic.

Every problem is reported as ``FILE:LINE: FIELD: message`` (e.g. ``warm.json:14:
kernels[0].launches[1].args[2].dtype: unknown dtype 'float33'``).
"""

from __future__ import annotations

import ast
import bisect
import importlib
import itertools
import json
import re

__all__ = ["ManifestError", "Manifest", "Launch", "load_manifest", "resolve_kernel"]

DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
INITS = ("randn", "rand", "zeros", "ones", "arange")
_GRID_FUNCS = {"cdiv", "next_power_of_2", "min", "max", "abs", "int"}


class ManifestError(ValueError):
    """A manifest problem, with ``file``, ``line`` and ``field``."""

    def __init__(self, file: str, line: int | None, field: str | None, msg: str):
        self.file, self.line, self.field, self.msg = file, line, field, msg
        where = file + (f":{line}" if line else "")
        super().__init__(f"{where}: {field + ': ' if field else ''}{msg}")


# ------------------------------------------------------------------------------------ JSON positions
_WS = re.compile(r"[ \t\n\r]*")


def _positions(text: str) -> dict[tuple, int]:
    """Line (1-based) of every value of an already valid JSON document, by path."""
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    dec = json.JSONDecoder()
    scanstring = json.decoder.scanstring
    out: dict[tuple, int] = {}

    def skip(i):
        return _WS.match(text, i).end()

    def value(i, path):
        i = skip(i)
        out.setdefault(path, bisect.bisect_right(starts, i))
        c = text[i]
        if c == "{":
            i = skip(i + 1)
            if text[i] == "}":
                return i + 1
            while True:
                i = skip(i)
                line = bisect.bisect_right(starts, i)
                key, i = scanstring(text, i + 1)
                out[path + (key,)] = line
                i = skip(i)
                i = value(i + 1, path + (key,))  # after ':'
                i = skip(i)
                if text[i] == ",":
                    i += 1
                    continue
                return i + 1
        if c == "[":
            i = skip(i + 1)
            if text[i] == "]":
                return i + 1
            n = 0
            while True:
                i = value(i, path + (n,))
                n += 1
                i = skip(i)
                if text[i] == ",":
                    i += 1
                    continue
                return i + 1
        _, end = dec.raw_decode(text, i)
        return end

    value(0, ())
    return out


def _field(path: tuple) -> str:
    s = ""
    for p in path:
        s += f"[{p}]" if isinstance(p, int) else (f".{p}" if s else p)
    return s


# ------------------------------------------------------------------------------------ model
class Launch:
    """One concrete launch of a kernel (after `sizes` expansion)."""

    def __init__(self, kernel_ref, kernel_index, launch_index, variant, args, kwargs, grid, device, tp,
                 label):
        self.kernel_ref = kernel_ref
        self.kernel_index = kernel_index
        self.launch_index = launch_index
        self.variant = variant
        self.args = args
        self.kwargs = kwargs
        self.grid = grid
        self.device = device
        self.tp = tp
        self.label = label

    @property
    def id(self) -> tuple[int, int, int]:
        return (self.kernel_index, self.launch_index, self.variant)

    def build(self):
        """`(args, kwargs, grid)` ready for ``kernel[grid](*args, **kwargs)``."""
        import torch

        def make(v):
            if isinstance(v, dict):
                dtype = getattr(torch, v["dtype"])
                shape = tuple(v["shape"])
                device = v.get("device") or self.device
                init = v.get("init") or ("randn" if dtype.is_floating_point else "zeros")
                if init == "randn":
                    t = torch.randn(shape, dtype=torch.float32).to(dtype)
                elif init == "rand":
                    t = torch.rand(shape, dtype=torch.float32).to(dtype)
                elif init == "zeros":
                    t = torch.zeros(shape, dtype=dtype)
                elif init == "ones":
                    t = torch.ones(shape, dtype=dtype)
                else:
                    t = torch.arange(int(torch.tensor(shape).prod()) if shape else 1).reshape(shape).to(dtype)
                return t.to(device) if device != "cpu" else t
            return v

        args = [make(a) for a in self.args]
        kwargs = {k: make(v) for k, v in self.kwargs.items()}
        if self.tp is not None:
            kwargs["tp"] = self.tp
        return args, kwargs, self._grid_fn()

    def _grid_fn(self):
        spec = self.grid
        if isinstance(spec, str):
            spec = [spec]
        exprs = [_parse_grid_expr(e) if isinstance(e, str) else e for e in spec]

        def grid(meta):
            from torch_rbln import dsl

            env = {"cdiv": dsl.cdiv, "next_power_of_2": dsl.next_power_of_2, "min": min, "max": max,
                   "abs": abs, "int": int}
            env.update({k: (v.value if hasattr(v, "value") and not isinstance(v, (int, float)) else v)
                        for k, v in meta.items()})
            out = []
            for e in exprs:
                v = _evaluate(e, env) if not isinstance(e, int) else e
                if isinstance(v, tuple):
                    out.extend(int(x) for x in v)
                else:
                    out.append(int(v))
            return tuple(out)

        return grid


class Manifest:
    def __init__(self, path: str, kernels: list[str], launches: list[Launch]):
        self.path = path
        self.kernels = kernels
        self.launches = launches


_MAX_DEPTH = 32  # JSON nesting of a manifest (kernels -> launches -> args are a handful of levels)
_MAX_GRID_TEXT = 1000  # characters of one grid expression
_MAX_BITS = 64  # every intermediate value of a grid expression fits in 64 bits


def _depth(value, limit: int = _MAX_DEPTH + 1) -> int:
    """Nesting depth of a JSON value, counting no further than `limit`."""
    if limit <= 0 or not isinstance(value, (dict, list)):
        return 0
    items = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(item, limit - 1) for item in items), default=0)


def _parse_grid_expr(text: str):
    """The checked AST of a grid expression: numbers, the kernel's argument names, arithmetic,
    comparisons, conditionals and the `_GRID_FUNCS`; no strings, attributes or other calls."""
    if len(text) > _MAX_GRID_TEXT:
        raise ValueError(f"grid expression longer than {_MAX_GRID_TEXT} characters")
    tree = ast.parse(text, mode="eval").body
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _GRID_FUNCS or node.keywords:
                raise ValueError(f"only {', '.join(sorted(_GRID_FUNCS))} may be called")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise ValueError(f"{node.value!r}: only numbers are allowed in a grid expression")
        elif not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Load,
                                   ast.operator, ast.unaryop, ast.Tuple, ast.IfExp, ast.Compare, ast.cmpop)):
            raise ValueError(f"{type(node).__name__} is not allowed in a grid expression")
    return tree


_BINARY = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b, ast.Div: lambda a, b: a / b, ast.Mod: lambda a, b: a % b,
    ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b,
}
_COMPARE = {
    ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
}


def _bounded(value):
    """`value`, or a ValueError when it is an int wider than 64 bits (so `9**9**9**9` or a shift by
    10**10 stops at once instead of running for hours)."""
    if isinstance(value, int) and value.bit_length() > _MAX_BITS:
        raise ValueError(f"grid expression value needs more than {_MAX_BITS} bits")
    return value


def _evaluate(node, env: dict):
    """Evaluate a checked grid-expression AST with every intermediate value bounded."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ValueError(f"unknown name {node.id!r} in grid expression")
        return env[node.id]
    if isinstance(node, ast.Tuple):
        return tuple(_evaluate(e, env) for e in node.elts)
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand, env)
        if isinstance(node.op, ast.USub):
            return _bounded(-value)
        if isinstance(node.op, ast.UAdd):
            return value
        if isinstance(node.op, ast.Not):
            return not value
        return _bounded(~value)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, env), _evaluate(node.right, env)
        if isinstance(node.op, ast.Pow):
            if isinstance(right, int) and right > _MAX_BITS and abs(left) > 1:
                raise ValueError(f"grid expression value needs more than {_MAX_BITS} bits")
            return _bounded(left**right)
        if isinstance(node.op, (ast.LShift, ast.RShift)):
            if not 0 <= right <= _MAX_BITS:
                raise ValueError(f"shift by {right} in grid expression (0..{_MAX_BITS} allowed)")
            return _bounded(left << right if isinstance(node.op, ast.LShift) else left >> right)
        operation = _BINARY.get(type(node.op))
        if operation is None:
            raise ValueError(f"operator {type(node.op).__name__} is not allowed in a grid expression")
        return _bounded(operation(left, right))
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, env)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _evaluate(comparator, env)
            if op.__class__ not in _COMPARE or not _COMPARE[op.__class__](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _evaluate(node.body if _evaluate(node.test, env) else node.orelse, env)
    if isinstance(node, ast.Call):
        return _bounded(env[node.func.id](*(_evaluate(a, env) for a in node.args)))
    raise ValueError(f"{type(node).__name__} is not allowed in a grid expression")


def resolve_kernel(ref: str):
    """Import ``module:attribute`` and return the object (must wrap an `Autotuner`)."""
    from .tuner import Autotuner

    if not isinstance(ref, str) or ref.count(":") != 1:
        raise ValueError(f"expected 'module:attribute', got {ref!r}")
    mod_name, attr = ref.split(":")
    try:
        obj = importlib.import_module(mod_name)
    except Exception as e:
        raise ValueError(f"cannot import module '{mod_name}': {type(e).__name__}: {e}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module '{mod_name}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    cur, depth = obj, 0
    while not isinstance(cur, Autotuner) and hasattr(cur, "fn") and depth < 8:
        cur, depth = cur.fn, depth + 1
    if not isinstance(cur, Autotuner):
        raise ValueError(f"'{ref}' is not an @autotune kernel (got {type(obj).__name__})")
    return obj


def load_manifest(path: str, *, import_kernels: bool = True) -> Manifest:
    """Parse and validate a manifest; raises ManifestError with file, line and field."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ManifestError(path, None, None, f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ManifestError(path, None, None, f"not UTF-8 text (invalid byte at offset {e.start})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ManifestError(path, e.lineno, None, f"invalid JSON (column {e.colno}): {e.msg}") from None
    except RecursionError:
        raise ManifestError(path, None, None, "JSON nested too deeply for a manifest") from None
    if _depth(doc) > _MAX_DEPTH:
        raise ManifestError(path, None, None, f"JSON nested more than {_MAX_DEPTH} levels deep; a manifest "
                            "is kernels -> launches -> arguments") from None
    pos = _positions(text)

    def err(p, msg):
        line = None
        q = tuple(p)
        while q and line is None:
            line = pos.get(q)
            q = q[:-1]
        raise ManifestError(path, line or pos.get(()), _field(p) or None, msg)

    def expect(p, v, types, what):
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in _tuple(types)):
            err(p, f"expected {what}, got {_describe(v)}")

    expect((), doc, dict, "an object with a 'kernels' list")
    _no_unknown(doc, (), {"kernels", "comment"}, err)
    if "kernels" not in doc:
        err((), "missing field 'kernels'")
    expect(("kernels",), doc["kernels"], list, "a list")
    refs, launches = [], []
    for ki, k in enumerate(doc["kernels"]):
        kp = ("kernels", ki)
        expect(kp, k, dict, "an object with 'kernel' and 'launches'")
        _no_unknown(k, kp, {"kernel", "launches", "comment"}, err)
        for f in ("kernel", "launches"):
            if f not in k:
                err(kp, f"missing field '{f}'")
        expect(kp + ("kernel",), k["kernel"], str, "'module:attribute'")
        if import_kernels:
            try:
                kernel = resolve_kernel(k["kernel"])
            except ValueError as e:
                err(kp + ("kernel",), str(e))
            arg_names = set(getattr(kernel, "arg_names", []))
        else:
            arg_names = None
        refs.append(k["kernel"])
        expect(kp + ("launches",), k["launches"], list, "a list of launch specs")
        if not k["launches"]:
            err(kp + ("launches",), "needs at least one launch spec")
        for li, spec in enumerate(k["launches"]):
            lp = kp + ("launches", li)
            launches.extend(_launches(spec, lp, k["kernel"], ki, li, arg_names, err, expect))
    return Manifest(path, refs, launches)


def _tuple(t):
    return t if isinstance(t, tuple) else (t,)


def _describe(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean {str(v).lower()}"
    if isinstance(v, (int, float)):
        return f"number {v}"
    if isinstance(v, str):
        return f"string {v!r}"
    return "a list" if isinstance(v, list) else "an object"


def _no_unknown(obj, p, allowed, err):
    for key in obj:
        if key not in allowed:
            err(p + (key,), f"unknown field '{key}' (expected one of: {', '.join(sorted(allowed))})")


def _launches(spec, lp, ref, ki, li, arg_names, err, expect):
    expect(lp, spec, dict, "a launch spec object")
    _no_unknown(spec, lp, {"args", "kwargs", "grid", "device", "tp", "sizes", "comment"}, err)
    for f in ("args", "grid"):
        if f not in spec:
            err(lp, f"missing field '{f}'")
    expect(lp + ("args",), spec["args"], list, "a list of arguments")
    kwargs = spec.get("kwargs", {})
    expect(lp + ("kwargs",), kwargs, dict, "an object")
    if arg_names is not None:
        for name in kwargs:
            if name not in arg_names and name not in ("backend",):
                err(lp + ("kwargs", name), f"the kernel has no argument '{name}' "
                                           f"(arguments: {', '.join(sorted(arg_names))})")
        if len(spec["args"]) > len(arg_names):
            err(lp + ("args",), f"{len(spec['args'])} arguments given, the kernel takes {len(arg_names)}")
    device = spec.get("device", "cpu")
    expect(lp + ("device",), device, str, "a device string")
    if not re.fullmatch(r"cpu|rbln(:\d+)?", device):
        err(lp + ("device",), f"unknown device {device!r} (expected cpu, rbln or rbln:N)")
    tp = spec.get("tp")
    if tp is not None and (isinstance(tp, bool) or not isinstance(tp, int) or tp <= 0):
        err(lp + ("tp",), f"expected a positive integer, got {_describe(tp)}")
    grid = spec["grid"]
    if isinstance(grid, (str, int)) and not isinstance(grid, bool):
        grid = [grid]
    if not isinstance(grid, list) or not 1 <= len(grid) <= 3:
        err(lp + ("grid",), "expected a list of 1 to 3 ints or expressions")
    for gi, g in enumerate(grid):
        gp = lp + ("grid", gi) if isinstance(spec["grid"], list) else lp + ("grid",)
        if isinstance(g, bool) or not isinstance(g, (int, str)):
            err(gp, f"expected an int or an expression string, got {_describe(g)}")
        if isinstance(g, str):
            try:
                tree = _parse_grid_expr(g)
                if not any(isinstance(node, ast.Name) for node in ast.walk(tree)):
                    _evaluate(tree, {})  # a constant: its value is checked now, not at tuning time
            except SyntaxError as e:
                err(gp, f"invalid expression {g!r}: {e.msg}")
            except (ValueError, ArithmeticError, RecursionError, MemoryError) as e:
                err(gp, f"invalid expression {g[:80]!r}: {e or type(e).__name__}")
    sizes = spec.get("sizes", {})
    expect(lp + ("sizes",), sizes, dict, "an object of name -> list of values")
    for name, values in sizes.items():
        if not isinstance(values, list) or not values:
            err(lp + ("sizes", name), f"expected a non-empty list of values, got {_describe(values)}")
    names = list(sizes)
    combos = list(itertools.product(*(sizes[n] for n in names))) if names else [()]
    out = []
    for vi, combo in enumerate(combos):
        env = dict(zip(names, combo, strict=True))

        def subst(v, p, env=env):
            if isinstance(v, str) and v.startswith("$"):
                if v[1:] not in env:
                    err(p, f"unknown size variable {v!r} (defined in 'sizes': {', '.join(names) or 'none'})")
                return env[v[1:]]
            return v

        args = [_arg(a, lp + ("args", ai), subst, err) for ai, a in enumerate(spec["args"])]
        kw = {k: _arg(v, lp + ("kwargs", k), subst, err) for k, v in kwargs.items()}
        label = ", ".join(f"{k}={v}" for k, v in env.items()) or f"launch {li}"
        out.append(Launch(ref, ki, li, vi, args, kw, grid, device, tp, label))
    return out


def _arg(a, p, subst, err):
    if isinstance(a, dict):
        _no_unknown(a, p, {"shape", "dtype", "init", "device"}, err)
        if "shape" not in a or "dtype" not in a:
            err(p, "a tensor needs 'shape' and 'dtype'")
        shape = a["shape"]
        if not isinstance(shape, list):
            err(p + ("shape",), f"expected a list of non-negative ints, got {_describe(shape)}")
        shape = [subst(d, p + ("shape", i)) for i, d in enumerate(shape)]
        for i, d in enumerate(shape):
            if isinstance(d, bool) or not isinstance(d, int) or d < 0:
                err(p + ("shape", i), f"expected a non-negative int, got {_describe(d)}")
        if a["dtype"] not in DTYPES:
            err(p + ("dtype",), f"unknown dtype {a['dtype']!r} (expected one of: {', '.join(DTYPES)})")
        if "init" in a and a["init"] not in INITS:
            err(p + ("init",), f"unknown init {a['init']!r} (expected one of: {', '.join(INITS)})")
        dev = a.get("device", "cpu")
        if not (isinstance(dev, str) and re.fullmatch(r"cpu|rbln(:\d+)?", dev)):
            err(p + ("device",), f"unknown device {a['device']!r} (expected cpu, rbln or rbln:N)")
        return {**a, "shape": shape}
    if isinstance(a, list):
        err(p, "expected a tensor object, a number, a string, a boolean or null, got a list")
    return subst(a, p)  # numbers, booleans, null and strings (e.g. constexpr names) pass as they are
