"""`rbln-autotune precompile`: compiles the op library's kernels and a manifest's configs into the
kernel cache ahead of time (numba, whatever TORCH_RBLN_DSL_BACKEND says), and a second run finds
everything cached."""

from __future__ import annotations

import json
import os

import pytest
from atutil import add_launch, manifest
from torch_rbln.autotune.cli import main
from torch_rbln.dsl.backends.numba_backend import executable

from torch_rbln import cachedir, config


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_RBLN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(executable, "_modules", {})
    config.reset_for_tests()
    cachedir.reset_for_tests()
    yield tmp_path / "cache"
    config.reset_for_tests()
    cachedir.reset_for_tests()


def _precompile(capsys, *argv) -> tuple[int, dict]:
    code = main(["precompile", "--jobs", "1", "--json", *map(str, argv)])
    return code, json.loads(capsys.readouterr().out)


def test_manifest_configs_compile_once_each(tmp_path, fresh_cache, capsys):
    m = manifest(tmp_path / "m.json",
                 [{"kernel": "atutil:add_tuned", "launches": [add_launch((1000, 3000))]}])
    code, result = _precompile(capsys, "--no-ops", "--manifest", m)
    assert code == 0, result
    # 2 launches x 3 configs; both sizes are int32 scalars, so the second launch's configs are cached
    assert result["summary"]["items"] == 6 and result["summary"]["compiles"] == 3
    assert result["summary"]["cache"].startswith(str(fresh_cache))
    assert os.environ.get("TORCH_RBLN_DSL_BACKEND") == "interpret"  # the CLI restored the environment
    executable._modules.clear()
    from atutil import add_tuned

    add_tuned.fn.clear_cache()
    code, result = _precompile(capsys, "--no-ops", "--manifest", m)
    assert code == 0 and result["summary"]["compiles"] == 0  # all in numba's cache now


@pytest.mark.slow  # imports torch's op_db and compiles add.Tensor's kernels cold: ~35 s on 2 loaded cores
def test_op_library_entries_compile_for_the_given_dtypes(fresh_cache, capsys):
    pytest.importorskip("torch.testing._internal.common_methods_invocations")
    code, result = _precompile(capsys, "--ops", "add.Tensor", "--dtypes", "float32")
    assert code == 0, result
    assert [r["item"] for r in result["results"]] == ["add.Tensor [float32]"]
    assert result["summary"]["compiles"] >= 1


@pytest.mark.parametrize("argv, message", [
    (["--dtypes", "float33"], "unknown dtype 'float33' in --dtypes"),
    (["--ops", "no_such.op"], "no op-library entry 'no_such.op'"),
    (["--no-ops"], "nothing to compile"),
])
def test_bad_arguments_are_errors(fresh_cache, capsys, argv, message):
    assert main(["precompile", *argv]) == 2
    assert message in capsys.readouterr().err
