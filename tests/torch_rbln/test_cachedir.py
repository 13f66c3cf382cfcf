"""The cache directory is private: created 0700, refused when others could plant code in it, replaced by a
temporary one when it cannot be written, and numba cache files that do not unpickle are recompiled."""

from __future__ import annotations

import glob
import os
import stat
import subprocess
import sys

import pytest
import torch
from envutil import clean_env

from torch_rbln import cachedir, config

KERNEL_SCRIPT = """
import torch, torch_rbln
import torch_rbln.dsl as tl
from torch_rbln import dsl as triton

@triton.jit
def triple(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3.0, mask=mask)

x = torch.arange(10, dtype=torch.float32)
out = torch.empty_like(x)
triple[(1,)](x, out, 10, BLOCK=16)
print("RESULT", out.tolist() == (x * 3).tolist())
"""


@pytest.fixture
def cache_env(monkeypatch, tmp_path):
    def use(path):
        monkeypatch.setenv("TORCH_RBLN_CACHE_DIR", str(path))
        config.reset_for_tests()
        cachedir.reset_for_tests()
        return path

    yield use
    config.reset_for_tests()
    cachedir.reset_for_tests()


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_directories_are_created_private_whatever_the_umask(cache_env, tmp_path):
    root = cache_env(tmp_path / "a" / "b")
    old = os.umask(0)
    try:
        sub = cachedir.cache_path("kernels", "numba-v1")
    finally:
        os.umask(old)
    for path in (tmp_path / "a", root, root / "kernels", sub):
        assert _mode(path) == 0o700, path


def test_a_group_or_world_writable_cache_dir_is_refused(cache_env, tmp_path):
    root = cache_env(tmp_path / "shared")
    root.mkdir()
    os.chmod(root, 0o777)
    with pytest.raises(cachedir.UnsafeCacheDirError) as error:
        cachedir.cache_path("kernels")
    message = str(error.value)
    assert "TORCH_RBLN_CACHE_DIR" in message and str(root) in message and "mode 0777" in message
    assert f"chmod 700 {root}" in message
    assert not (root / "kernels").exists()


def test_a_kernel_compile_on_an_unsafe_cache_dir_raises(cache_env, tmp_path):
    import torch_rbln.dsl as tl

    from torch_rbln import dsl as triton

    root = cache_env(tmp_path / "shared")
    root.mkdir()
    os.chmod(root, 0o775)

    @triton.jit
    def negate_unsafe_cache(x_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(x_ptr + offsets, -tl.load(x_ptr + offsets))

    x = torch.ones(4)
    with pytest.raises(cachedir.UnsafeCacheDirError, match="writable by group or others"):
        negate_unsafe_cache[(1,)](x, BLOCK=4, backend="numba")
    assert x.tolist() == [1.0] * 4


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_a_cache_dir_owned_by_another_user_is_refused(cache_env, tmp_path):
    root = cache_env(tmp_path / "theirs")
    root.mkdir(mode=0o700)
    os.chown(root, 4242, -1)
    with pytest.raises(cachedir.UnsafeCacheDirError, match="owned by uid 4242"):
        cachedir.cache_path("graphs")


def test_an_unusable_cache_dir_falls_back_to_a_private_temporary_one(cache_env, tmp_path, capfd):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache_env(blocker / "cache")  # cannot be created: its parent is a file
    path = cachedir.cache_path("kernels")
    assert os.path.isdir(path) and not path.startswith(str(blocker))
    assert _mode(os.path.dirname(path)) == 0o700
    err = capfd.readouterr().err
    assert "[TORCH-RBLN][WARNING]" in err and str(blocker / "cache") in err and "removed at exit" in err
    assert cachedir.cache_path("kernels") == path  # one stand-in (and one WARNING) per process
    assert "WARNING" not in capfd.readouterr().err


def test_corrupt_numba_cache_files_are_recompiled(tmp_path):
    """Random bytes in the index, an empty data file: each run warns once, recompiles, and is right."""
    cache = tmp_path / "cache"
    script = tmp_path / "kernel.py"
    script.write_text(KERNEL_SCRIPT)

    def run_python():
        return subprocess.run([sys.executable, str(script)], env=clean_env(TORCH_RBLN_CACHE_DIR=str(cache)),
                              capture_output=True, text=True, timeout=300)

    first = run_python()
    assert "RESULT True" in first.stdout, first.stderr
    for suffix, damage in ((".nbi", os.urandom(300)), (".nbc", b"")):
        (target,) = glob.glob(str(cache / "kernels" / "*" / "__pycache__" / f"triple_*{suffix}"))
        with open(target, "wb") as f:
            f.write(damage)
        run = run_python()
        assert "RESULT True" in run.stdout, run.stderr
        assert "numba cache of kernel 'triple' is corrupt" in run.stderr and "recompiling" in run.stderr
    again = run_python()
    assert "RESULT True" in again.stdout and "corrupt" not in again.stderr
