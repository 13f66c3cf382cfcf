"""The source folder `kernels/` is torch_rbln.kernels. Reached as a top-level `kernels` (a checkout's root
on sys.path), it must not shadow another top-level `kernels` such as Hugging Face's, which transformers
>= 5.25 imports at start-up; and the test suite must not import tests/kernels under that name either."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

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


def _site_packages_without_hf_kernels(tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy (by symlinks) of this interpreter's site-packages without Hugging Face's `kernels`: an
    environment where transformers is installed and `kernels` is not, as a resolver may leave it."""
    import torch

    source = pathlib.Path(torch.__file__).parents[1]  # where torch, transformers and the rest are installed
    target = tmp_path / "site-packages"
    target.mkdir()
    for entry in source.iterdir():
        if entry.name == "kernels" or entry.name.startswith("kernels-"):
            continue
        (target / entry.name).symlink_to(entry)
    return target


def _run_without_hf_kernels(tmp_path: pathlib.Path, code: str) -> subprocess.CompletedProcess:
    site_dir = _site_packages_without_hf_kernels(tmp_path)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    prologue = f"import site, sys; site.addsitedir({str(site_dir)!r}); "
    # -S: not this interpreter's own site-packages; the checkout's root is sys.path[0] (the cwd of -c)
    return subprocess.run([sys.executable, "-S", "-c", prologue + code], cwd=CHECKOUT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_without_hf_kernels_the_folder_reads_as_not_installed(tmp_path):
    code = ("import importlib.util, kernels\n"
            "print(kernels.__file__); print(getattr(kernels, '__version__', 'N/A'))\n"
            "spec = importlib.util.find_spec('kernels'); print(spec.origin, spec.loader)\n"
            "try:\n    kernels.get_kernel\nexcept ModuleNotFoundError as error:\n    print(error)")
    result = _run_without_hf_kernels(tmp_path, code)
    assert result.returncode == 0, result.stderr
    file, version, spec, error = result.stdout.splitlines()
    assert (file, version, spec) == ("None", "N/A", "None None")  # find_spec after the import too
    assert error.startswith("No module named 'kernels'") and "torch_rbln.kernels" in error


def test_without_hf_kernels_transformers_models_import_from_the_checkout(tmp_path):
    """The CI failure this guards against: transformers finds the checkout's `kernels/` folder, takes it
    for Hugging Face's package and fails every model import (`Could not import module ...`)."""
    pytest.importorskip("transformers")
    code = ("import importlib.util; assert importlib.util.find_spec('kernels') is not None\n"
            "from transformers import GPT2LMHeadModel; print(GPT2LMHeadModel.__name__)\n"
            "from transformers.utils import is_kernels_available; print(is_kernels_available())")
    result = _run_without_hf_kernels(tmp_path, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["GPT2LMHeadModel", "False"]


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
