"""The source folder `kernels/` is torch_rbln.kernels. Reached as a top-level `kernels` (a checkout's root
on sys.path), it must not shadow another top-level `kernels` such as Hugging Face's, which transformers
>= 5.25 imports at start-up; and the test suite must not import tests/kernels under that name either."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

CHECKOUT = pathlib.Path(__file__).resolve().parents[2]


def _import_kernels_from_the_checkout(extra_path: str | None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if extra_path is not None:
        env["PYTHONPATH"] = extra_path  # after sys.path[0], the checkout root (the cwd of `python -c`)
    code = "import kernels; print(kernels.__file__); print(getattr(kernels, 'MARKER', None))"
    return subprocess.run([sys.executable, "-c", code], cwd=CHECKOUT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_top_level_kernels_elsewhere_on_the_path_wins(tmp_path):
    package = tmp_path / "kernels"
    package.mkdir()
    (package / "__init__.py").write_text("MARKER = 'the real top-level kernels'\n")
    result = _import_kernels_from_the_checkout(str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [str(package / "__init__.py"), "the real top-level kernels"]


def test_no_top_level_kernels_elsewhere_raises_module_not_found(tmp_path):
    result = _import_kernels_from_the_checkout(str(tmp_path))  # an empty folder: no other `kernels`
    if result.returncode == 0:  # this environment has a real one (e.g. transformers >= 5.25 installed)
        assert not result.stdout.startswith(str(CHECKOUT / "kernels")), result.stdout
        return
    assert "ModuleNotFoundError: No module named 'kernels'" in result.stderr
    assert "torch_rbln.kernels" in result.stderr


def test_the_op_library_keeps_its_package_name():
    import torch_rbln.kernels.elementwise

    assert torch_rbln.kernels.__name__ == "torch_rbln.kernels"
    assert hasattr(torch_rbln.kernels.elementwise, "__file__")  # its modules import as usual


def test_the_test_suite_does_not_import_its_folders_as_top_level_packages():
    assert __name__ == "tests.kernels.test_package"
    for name in ("kernels", "dsl", "registry"):
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None) or ""
        assert not origin.startswith(str(CHECKOUT / "tests")), (name, origin)
