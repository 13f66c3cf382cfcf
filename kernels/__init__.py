"""torch_rbln.kernels: the op library, written in the DSL.

This folder is installed as `torch_rbln.kernels` (setuptools `package-dir`). It is also reachable as a
top-level `kernels` when the root of a checkout is on `sys.path` (`python -m ...` or pytest started
there), and then it would shadow Hugging Face's `kernels` package, which transformers >= 5.25 imports
at start-up: every model import would fail. Imported under that name, the module below therefore
loads the real top-level `kernels` from the rest of `sys.path` in its own place, or raises the
ModuleNotFoundError a plain `import kernels` would raise.
"""

if __name__ != "torch_rbln.kernels":
    import importlib.machinery
    import importlib.util
    import os
    import sys

    def _find_real_top_level_spec() -> importlib.machinery.ModuleSpec | None:
        """The spec `import kernels` would find if this checkout's root were not on sys.path."""
        checkout_root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
        elsewhere = [entry for entry in sys.path if os.path.realpath(entry or os.curdir) != checkout_root]
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(__name__, elsewhere if finder is importlib.machinery.PathFinder else None)
            if spec is not None and spec.loader is not None:
                return spec
        return None

    def _load_real_top_level_package() -> None:
        spec = _find_real_top_level_spec()
        if spec is None:
            raise ModuleNotFoundError(
                f"No module named {__name__!r}: {os.path.dirname(__file__)} is torch-rbln's op library "
                f"(import it as torch_rbln.kernels), not a top-level package", name=__name__)
        module = importlib.util.module_from_spec(spec)
        sys.modules[__name__] = module  # the import statement returns what sys.modules holds now
        spec.loader.exec_module(module)

    _load_real_top_level_package()
