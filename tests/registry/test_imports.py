"""The registry's import structure: no import cycles between its modules (an import inside a function
counts too: it is a cycle all the same, only deferred), and registering the device (what the
`torch.backends` autoload runs on every `import torch`) imports no kernel, DSL or numba module."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import torch_rbln.registry as registry_package

REGISTRY = pathlib.Path(registry_package.__file__).parent
PACKAGE = "torch_rbln.registry"


def _imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The registry modules `path` imports anywhere (`__init__` for names taken from the package)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 1:
            base = node.module
        elif node.level == 0 and node.module and (node.module + ".").startswith(PACKAGE + "."):
            base = node.module[len(PACKAGE) + 1:] or None
        else:
            continue
        if base:
            found.add(base.split(".")[0])
        else:
            found.update(alias.name if alias.name in modules else "__init__" for alias in node.names)
    return found - {path.stem}


def _graph() -> dict[str, set[str]]:
    modules = {path.stem for path in REGISTRY.glob("*.py")}
    return {path.stem: _imports(path, modules) & modules for path in REGISTRY.glob("*.py")}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for successor in sorted(graph[node]):
            if state.get(successor) == 1:
                return path[path.index(successor):] + [successor]
            if successor not in state:
                found = visit(successor)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_registry_modules_import_without_cycles():
    graph = _graph()
    assert {"_ops", "_copy", "table", "__init__"} <= set(graph)  # the walk sees the modules
    assert "_base" in graph["table"]  # ... and their imports
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_registration_imports_no_kernel_module():
    """`import torch_rbln` registers every table entry; kernels, the DSL and numba load on first call."""
    probe = ("import sys, torch, torch_rbln; import torch_rbln.registry as r; assert r.TABLE; "
             "heavy = [m for m in sys.modules if m.startswith(('torch_rbln.dsl', 'torch_rbln.kernels', "
             "'numba', 'torch_rbln.registry._ops', 'torch_rbln.registry._fast', "
             "'torch_rbln.registry.attention'))]; print(heavy)")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
