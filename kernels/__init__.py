"""torch_rbln.kernels: the op library, written in the DSL.

This folder is installed as `torch_rbln.kernels` (setuptools `package-dir`). It is also reachable as a
top-level `kernels` when the root of a checkout is on `sys.path` (`python -m ...` or pytest started
there), and then it would shadow Hugging Face's `kernels` package, which transformers >= 5.25 imports
at start-up: every model import would fail. Imported under that name, the module below therefore
loads the real top-level `kernels` from the rest of `sys.path` in its own place. Where there is none,
it leaves a placeholder with no `__file__` and no `__version__`, which is how transformers recognises a
namespace folder that merely shadows a missing package (so it runs without Hugging Face's kernels, as
it does outside the checkout); any other use of the placeholder raises ModuleNotFoundError. Raising at
import instead would not help: transformers finds this folder with `importlib.util.find_spec` first,
takes it for the installed package and then fails every model import on the error.
"""

if __name__ != "torch_rbln.kernels":
    import importlib.machinery
    import importlib.util
    import os
    import sys
    import types

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

    def _placeholder_for_a_missing_package() -> types.ModuleType:
        """A module that says 'not installed' the way a shadowing namespace folder does (no __file__, no
        __version__) and raises ModuleNotFoundError on any other attribute."""
        folder = os.path.dirname(os.path.realpath(__file__))
        message = (f"No module named {__name__!r}: {folder} is torch-rbln's op library (import it as "
                   f"torch_rbln.kernels), found as a top-level {__name__!r} only because the checkout's root "
                   f"is on sys.path; no other top-level {__name__!r} is installed")
        placeholder = types.ModuleType(__name__, message)
        placeholder.__file__ = None
        # a spec with no loader and no origin, as a namespace folder has: importlib.util.find_spec(name)
        # returns sys.modules[name].__spec__ once the module is imported, and raises on None
        placeholder.__spec__ = importlib.machinery.ModuleSpec(__name__, None, is_package=True)

        def __getattr__(name: str) -> object:
            if name.startswith("__") and name.endswith("__"):  # getattr(module, "__version__", default)
                raise AttributeError(f"module {__name__!r} has no attribute {name!r} ({message})")
            raise ModuleNotFoundError(message, name=__name__)

        placeholder.__getattr__ = __getattr__  # type: ignore[method-assign]
        return placeholder

    def _load_real_top_level_package() -> None:
        spec = _find_real_top_level_spec()
        if spec is None:
            sys.modules[__name__] = _placeholder_for_a_missing_package()
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules[__name__] = module  # the import statement returns what sys.modules holds now
        spec.loader.exec_module(module)

    _load_real_top_level_package()
