"""The cache directory: private to the user, checked before anything in it is trusted.

Files under ``TORCH_RBLN_CACHE_DIR`` are executed or unpickled: generated kernel modules are imported,
numba loads its pickled index and machine code, the graph cache's entries become kernels.  Whoever can
write there can run code in our process, so the directory must be the user's alone:

* directories we create get mode 0700 whatever the umask (so ``umask 000`` does not make them
  world-writable);
* an existing cache directory owned by another user, or writable by group or others, is refused with
  :class:`UnsafeCacheDirError` naming ``TORCH_RBLN_CACHE_DIR`` and the fix (the check pip and numba's
  cache guidance describe), instead of being used silently;
* a cache directory that cannot be created or written (a read-only file system, no permission) does not
  stop kernels from running: this process then caches in a private temporary directory, removed at
  exit, with one WARNING.

Only the root is checked: everything below a private root is out of other users' reach.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
import threading

from . import config

__all__ = ["UnsafeCacheDirError", "cache_path", "reset_for_tests"]


class UnsafeCacheDirError(config.ConfigError):
    """The cache directory could be written by someone else: its files are not safe to execute."""


_checked: dict[str, str] = {}  # configured root -> root actually used (itself or a temporary stand-in)
_lock = threading.Lock()


def _log():
    from .log import get_logger

    return get_logger("cache")


def _make_private(path: str) -> None:
    """Create `path` and its missing parents with mode 0700 (an explicit chmod: makedirs honours umask)."""
    missing = []
    current = os.path.abspath(path)
    while not os.path.exists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue
        os.chmod(directory, 0o700)


def _check_owner_and_mode(root: str) -> None:
    info = os.stat(root)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeCacheDirError(
            f"Invalid TORCH_RBLN_CACHE_DIR '{root}' (it is not a directory), expected a directory"
        )
    problems = []
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        problems.append(f"it is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problems.append(f"it is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})")
    if problems:
        raise UnsafeCacheDirError(
            f"Unsafe TORCH_RBLN_CACHE_DIR '{root}': {' and '.join(problems)}. Compiled kernels there are "
            "executed, so a file someone else plants in it would run as code in this process. Use a "
            f"directory only you can write: `chmod 700 {root}` if it is yours, or set "
            "TORCH_RBLN_CACHE_DIR to a private directory."
        )


def _stand_in(root: str, reason: str) -> str:
    temporary = tempfile.mkdtemp(prefix="torch_rbln-cache-")  # mode 0700
    atexit.register(shutil.rmtree, temporary, ignore_errors=True)
    _log().warning(
        "cache directory %s cannot be used (%s); this process caches compiled kernels in %s, removed at "
        "exit (set TORCH_RBLN_CACHE_DIR to a writable directory to keep them)", root, reason, temporary,
    )
    return temporary


def _resolve(root: str) -> str:
    try:
        _make_private(root)
    except OSError as error:
        return _stand_in(root, f"cannot create it: {error.strerror or error}")
    _check_owner_and_mode(root)
    if not os.access(root, os.W_OK | os.X_OK):
        return _stand_in(root, "it is not writable")
    return root


def root() -> str:
    """The checked cache root for the current ``TORCH_RBLN_CACHE_DIR`` (checked once per value)."""
    configured = config.get("TORCH_RBLN_CACHE_DIR")
    used = _checked.get(configured)
    if used is None:
        with _lock:
            used = _checked.get(configured)
            if used is None:
                used = _checked[configured] = _resolve(configured)
    return used


def cache_path(*parts: str) -> str:
    """``<checked cache root>/<parts...>``, created with mode 0700."""
    path = os.path.join(root(), *parts)
    if not os.path.isdir(path):
        _make_private(path)
    return path


def reset_for_tests() -> None:
    """Forget which roots were checked (tests that change TORCH_RBLN_CACHE_DIR or its mode)."""
    with _lock:
        _checked.clear()
