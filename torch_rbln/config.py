"""Every torch-rbln environment variable, parsed and validated in one place.

This module is imported while ``import torch`` runs (autoload entry point), so it imports only the
standard library and parses nothing at import time.  Values are parsed on first use:

* :func:`settings` returns a cached, typed snapshot (:class:`Settings`) of every variable except the
  device-mapping ones (``RBLN_NPUS_PER_DEVICE``, ``RBLN_DEVICE_MAP``), which are kept raw here and
  validated by :mod:`torch_rbln.topology` at first device use (with the SPEC's RuntimeError texts).
* :func:`get` returns the current value of one variable, re-read from ``os.environ`` on each call and
  cached on the raw string, so a change of the environment takes effect.
* :func:`deploy_mode` and :func:`fallback_disabled` are per-call, cheap views used on hot paths.
* :func:`describe` lists every variable with its value and its source (``env`` or ``default``), for
  ``diagnose``.

An invalid value raises :class:`ConfigError` (a ``ValueError``) whose message names the variable, the
value and the accepted values, e.g. ``Invalid TORCH_RBLN_LOG_LEVEL 'x', expected one of: DEBUG, INFO,
WARNING, ERROR``.  For every variable an empty string counts as unset.
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ConfigError",
    "Settings",
    "VarSpec",
    "SPECS",
    "FALLBACK_CATEGORIES",
    "LOG_LEVELS",
    "VALID_GROUP_SIZES",
    "parse_bool",
    "raw",
    "get",
    "settings",
    "describe",
    "deploy_mode",
    "fallback_disabled",
    "reset_for_tests",
]


class ConfigError(ValueError):
    """An environment variable holds a value torch-rbln does not accept."""


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
BUILD_TYPES = ("Release", "Debug")
DSL_BACKENDS = ("numba", "interpret", "rebel")
COMPILE_MODES = ("sync", "background")
FALLBACK_CATEGORIES = ("all", "compile_error", "unsupported_op", "non_blocking_copy")
VALID_GROUP_SIZES = (1, 2, 4, 8, 16, 32)

_TRUE = frozenset({"on", "1", "true", "yes"})
_FALSE = frozenset({"off", "0", "false", "no"})
BOOL_ACCEPTED = "one of: ON, OFF, 1, 0, true, false, yes, no (any case)"


def _invalid(name: str, value: str, expected: str, detail: str = "") -> ConfigError:
    detail = f" ({detail})" if detail else ""
    return ConfigError(f"Invalid {name} '{value}'{detail}, expected {expected}")


# ----------------------------------------------------------------------------------------------
# Parsers.  Each takes (variable name, raw non-empty string) and returns the typed value.
# ----------------------------------------------------------------------------------------------


def parse_bool(name: str, value: str) -> bool:
    """ON/OFF, 1/0, true/false, yes/no in any case (surrounding spaces ignored); anything else fails."""
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise _invalid(name, value, BOOL_ACCEPTED)


def _choice(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    """Case-insensitive choice; returns the canonical spelling from ``choices``."""
    lookup = {c.lower(): c for c in choices}

    def parse(name: str, value: str) -> str:
        got = lookup.get(value.strip().lower())
        if got is None:
            raise _invalid(name, value, "one of: " + ", ".join(choices))
        return got

    return parse


_PLAIN_INT = re.compile(r"[0-9]+")


def _bounded_int(low: int, high: int) -> Callable[[str, str], int]:
    """An integer in [low, high]; the bound keeps a 40-digit value from becoming a MemoryError later."""
    expected = f"an integer from {low} to {high}"

    def parse(name: str, value: str) -> int:
        v = value.strip()
        if not _PLAIN_INT.fullmatch(v) or len(v) > 12 or not low <= int(v) <= high:
            raise _invalid(name, value, expected)
        return int(v)

    return parse


# Simulated NPU memory in GiB: at least one KiB, at most 1 PiB (so the byte count stays far inside int64).
MIN_SIM_MEMORY_GB = 2.0**-20
MAX_SIM_MEMORY_GB = 2.0**20
SIM_MEMORY_ACCEPTED = "a number of GiB from 0.00000095367431640625 (1 KiB) to 1048576 (1 PiB)"


def _sim_memory_gb(name: str, value: str) -> float:
    expected = SIM_MEMORY_ACCEPTED
    try:
        f = float(value.strip())
    except ValueError:
        f = math.nan
    if not math.isfinite(f) or not MIN_SIM_MEMORY_GB <= f <= MAX_SIM_MEMORY_GB:
        raise _invalid(name, value, expected)
    return f


def _path(name: str, value: str) -> str:
    return os.path.expanduser(value)


def _directory(name: str, value: str) -> str:
    """A directory path (`~` expanded); an existing non-directory there is refused up front instead of
    failing later with a raw OSError deep inside a kernel launch."""
    path = os.path.expanduser(value)
    if os.path.exists(path) and not os.path.isdir(path):
        raise _invalid(name, value, "a directory", "it names an existing file")
    return path


def _file_path(name: str, value: str) -> str:
    """A file path (`~` expanded); an existing directory there is refused."""
    path = os.path.expanduser(value)
    if os.path.isdir(path):
        raise _invalid(name, value, "a file path", "it names an existing directory")
    return path


def _device_ids(name: str, value: str) -> tuple[int, ...]:
    """``RBLN_DEVICES``: distinct non-negative integer NPU ids, comma-separated."""
    expected = "a comma-separated list of distinct non-negative integer NPU ids such as '0,1'"
    ids: list[int] = []
    for token in value.split(","):
        t = token.strip()
        if not _PLAIN_INT.fullmatch(t):
            raise _invalid(name, value, expected, f"'{t}' is not a non-negative integer")
        i = int(t)
        if i in ids:
            raise _invalid(name, value, expected, f"duplicate NPU id {i}")
        ids.append(i)
    return tuple(ids)


def _fallback_tokens(name: str, value: str) -> frozenset[str]:
    """``TORCH_RBLN_DISABLE_FALLBACK``: comma list of categories; spaces trimmed; empty items skipped."""
    out = set()
    for token in value.split(","):
        t = token.strip().lower()
        if not t:
            continue
        if t not in FALLBACK_CATEGORIES:
            raise _invalid(
                name,
                value,
                "a comma-separated list of: " + ", ".join(FALLBACK_CATEGORIES),
                f"unknown token '{token.strip()}'",
            )
        out.add(t)
    return frozenset(out)


def _raw_text(name: str, value: str) -> str:
    return value


# ----------------------------------------------------------------------------------------------
# The registry.
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VarSpec:
    """One environment variable: how it is parsed and what it means."""

    name: str
    field: str  # attribute of Settings
    default: Any  # typed default, or a callable (dict of already-parsed fields) -> default
    default_text: str  # the default as documented
    accepted: str  # the accepted values, in words
    parse: Callable[[str, str], Any]
    doc: str
    validated_by_settings: bool = True  # False: kept raw, validated by topology at first device use

    def default_value(self, parsed: dict[str, Any]) -> Any:
        return self.default(parsed) if callable(self.default) else self.default


def _default_cache_dir(_: dict[str, Any]) -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "torch_rbln")


def _default_autotune_db(parsed: dict[str, Any]) -> str:
    cache_dir = parsed.get("cache_dir") or _default_cache_dir(parsed)
    return os.path.join(cache_dir, "autotune.db")


_bool = parse_bool

SPECS: tuple[VarSpec, ...] = (
    VarSpec("TORCH_RBLN_LOG_LEVEL", "log_level", "WARNING", "WARNING", "one of: " + ", ".join(LOG_LEVELS),
            _choice(LOG_LEVELS), "Log verbosity of the torch_rbln logger (any case)."),
    VarSpec("TORCH_RBLN_LOG_PATH", "log_path", "./torch_rbln.log", "./torch_rbln.log", "a file path",
            _file_path, "Log file, written in debug mode (RBLN_BUILD_TYPE=Debug) only."),
    VarSpec("RBLN_BUILD_TYPE", "build_type", "Release", "Release", "one of: " + ", ".join(BUILD_TYPES),
            _choice(BUILD_TYPES), "Debug enables DEBUG logs and the log file with source locations "
            "and thread ids."),
    VarSpec("TORCH_RBLN_DEPLOY", "deploy", False, "OFF", BOOL_ACCEPTED, _bool,
            "ON skips the NaN/Inf input checks of device kernels, for speed."),
    VarSpec("RBLN_DEVICES", "devices", None, "all NPUs", "a comma-separated list of distinct NPU ids",
            _device_ids, "Restricts the visible physical NPUs to these ids, renumbered 0..len-1."),
    VarSpec("RBLN_NPUS_PER_DEVICE", "npus_per_device", None, "1 (1:1 mapping)",
            "one of: " + ", ".join(map(str, VALID_GROUP_SIZES)), _raw_text,
            "Physical NPUs grouped into each logical device.", validated_by_settings=False),
    VarSpec("RBLN_DEVICE_MAP", "device_map", None, "unset", 'groups of NPU ids such as "[0,1],[2,3]"',
            _raw_text, "Explicit logical device -> physical NPU groups; wins over RBLN_NPUS_PER_DEVICE.",
            validated_by_settings=False),
    VarSpec("TORCH_RBLN_USE_TP_FAILOVER", "use_tp_failover", False, "OFF", BOOL_ACCEPTED, _bool,
            "ON retries a model that fails with tp>1 with tp=1 on the root NPU."),
    VarSpec("TORCH_RBLN_USE_DEVICE_TP", "use_device_tp", False, "OFF", BOOL_ACCEPTED, _bool,
            "ON makes eager ops and DSL kernels use the logical device's group size as tp."),
    VarSpec("TORCH_RBLN_DISABLE_FALLBACK", "disable_fallback", frozenset(), "none",
            "a comma-separated list of: " + ", ".join(FALLBACK_CATEGORIES), _fallback_tokens,
            "CPU fallback categories that raise instead of falling back."),
    VarSpec("TORCH_RBLN_SIM_NPUS", "sim_npus", 8, "8", "an integer from 1 to 1024",
            _bounded_int(1, 1024),
            "Number of simulated physical NPUs when the Rebellions runtime is not installed."),
    VarSpec("TORCH_RBLN_SIM_MEMORY_GB", "sim_memory_gb", 16.0, "16", SIM_MEMORY_ACCEPTED,
            _sim_memory_gb, "Memory of each simulated NPU, in GiB."),
    VarSpec("TORCH_RBLN_DSL_BACKEND", "dsl_backend", "numba", "numba", "one of: " + ", ".join(DSL_BACKENDS),
            _choice(DSL_BACKENDS), "How DSL kernels execute."),
    VarSpec("TORCH_RBLN_COMPILE", "compile_mode", "sync", "sync", "one of: " + ", ".join(COMPILE_MODES),
            _choice(COMPILE_MODES), "sync: a numba kernel's first launch waits for its compile; background: "
            "it runs on the interpreter while a worker process compiles it, later launches use the "
            "compiled kernel."),
    VarSpec("TORCH_RBLN_CACHE_DIR", "cache_dir", _default_cache_dir, "~/.cache/torch_rbln", "a directory",
            _directory, "Cache directory (compiled kernels, autotune database)."),
    VarSpec("TORCH_RBLN_DUMP_KERNELS", "dump_kernels", None, "unset (no dump)", "a directory", _directory,
            "When set, generated kernel sources are written to this directory."),
    VarSpec("TORCH_RBLN_AUTOTUNE_DB", "autotune_db", _default_autotune_db,
            "<TORCH_RBLN_CACHE_DIR>/autotune.db", "a file path", _file_path,
            "SQLite database of autotuning results."),
)

_BY_NAME: dict[str, VarSpec] = {s.name: s for s in SPECS}


@dataclass(frozen=True)
class Settings:
    """Typed snapshot of the environment (see :data:`SPECS` for meanings and defaults)."""

    log_level: str
    log_path: str
    build_type: str
    deploy: bool
    devices: tuple[int, ...] | None
    npus_per_device: str | None  # raw; validated by torch_rbln.topology
    device_map: str | None  # raw; validated by torch_rbln.topology
    use_tp_failover: bool
    use_device_tp: bool
    disable_fallback: frozenset[str]
    sim_npus: int
    sim_memory_gb: float
    dsl_backend: str
    compile_mode: str
    cache_dir: str
    dump_kernels: str | None
    autotune_db: str

    @property
    def debug(self) -> bool:
        return self.build_type == "Debug"


# ----------------------------------------------------------------------------------------------
# Access.
# ----------------------------------------------------------------------------------------------

_lock = threading.Lock()
_settings: Settings | None = None
_live: dict[str, tuple[str | None, Any]] = {}  # name -> (raw string, parsed value)


_ENV_KEYS: dict[str, Any] = {}


def _environ_get(name: str) -> str | None:
    """``os.environ.get(name)`` without its ~1 us KeyError path for missing keys.

    On CPython ``os.environ`` keeps its values in ``os.environ._data`` (encoded keys and values), updated
    by ``os.environ[...] = ...`` and ``del os.environ[...]``; a plain dict lookup there is ~10x cheaper.
    """
    try:
        key = _ENV_KEYS[name]
    except KeyError:
        key = _ENV_KEYS[name] = os.environ.encodekey(name)  # type: ignore[attr-defined]
    try:
        value = os.environ._data.get(key)  # type: ignore[attr-defined]
    except AttributeError:  # pragma: no cover - non-CPython os.environ
        return os.environ.get(name)
    return None if value is None else os.environ.decodevalue(value)  # type: ignore[attr-defined]


def environ_reader(name: str) -> Callable[[], str | None]:
    """`read()`: ``os.environ.get(name)`` for a variable read on every call of a hot path (a kernel
    launch's requested backend), bound once: one C-level dict lookup in ``os.environ._data`` where
    `_environ_get` also looks up the encoded key (CPython; elsewhere ``os.environ.get``)."""
    data = getattr(os.environ, "_data", None)
    if not isinstance(data, dict):  # pragma: no cover - non-CPython os.environ
        return lambda: os.environ.get(name)
    get, key, decode = data.get, os.environ.encodekey(name), os.environ.decodevalue  # type: ignore[attr-defined]

    def read() -> str | None:
        value = get(key)
        return None if value is None else decode(value)

    return read


def raw(name: str) -> str | None:
    """The raw value of a known variable; ``None`` when unset or empty."""
    if name not in _BY_NAME:
        raise KeyError(f"unknown torch-rbln environment variable {name!r}")
    return _environ_get(name) or None


def _parse(spec: VarSpec, value: str | None, parsed: dict[str, Any]) -> Any:
    if value is None:
        return spec.default_value(parsed)
    return spec.parse(spec.name, value)


def get(name: str) -> Any:
    """Current typed value of one variable (re-read each call, parsed once per distinct raw value).

    For ``TORCH_RBLN_AUTOTUNE_DB`` the default follows the current ``TORCH_RBLN_CACHE_DIR``.
    """
    value = raw(name)
    hit = _live.get(name)
    if hit is not None and hit[0] == value and name != "TORCH_RBLN_AUTOTUNE_DB":
        return hit[1]
    spec = _BY_NAME[name]
    parsed = {"cache_dir": get("TORCH_RBLN_CACHE_DIR")} if name == "TORCH_RBLN_AUTOTUNE_DB" else {}
    result = _parse(spec, value, parsed)
    _live[name] = (value, result)
    return result


def settings() -> Settings:
    """The typed snapshot of all variables, parsed on first call and cached (see reset_for_tests)."""
    global _settings
    s = _settings
    if s is not None:
        return s
    with _lock:
        if _settings is None:
            parsed: dict[str, Any] = {}
            for spec in SPECS:
                parsed[spec.field] = _parse(spec, raw(spec.name), parsed)
            _settings = Settings(**parsed)
        return _settings


def describe() -> list[tuple[str, Any, str, str]]:
    """``(name, value, source, doc)`` for every variable, reading the current environment.

    ``source`` is ``"env"`` or ``"default"``.  Never raises: an invalid value is reported with its raw
    text as value and ``"env (invalid: <message>)"`` as source.  Device-mapping variables are shown raw.
    """
    rows: list[tuple[str, Any, str, str]] = []
    parsed: dict[str, Any] = {}
    for spec in SPECS:
        value = raw(spec.name)
        source = "default" if value is None else "env"
        try:
            typed = _parse(spec, value, parsed)
        except ConfigError as e:
            typed, source = value, f"env (invalid: {e})"
        parsed[spec.field] = typed
        rows.append((spec.name, typed, source, spec.doc))
    return rows


# Hot path: consulted on every eager op.  Keyed on the raw environment value so that changing the
# environment takes effect immediately, while parsing happens once per distinct value.  os.environ.get
# costs ~1 us for a missing key (it goes through KeyError), so on CPython we look the key up in the
# environment's own dict (``os.environ._data``, kept in sync by ``os.environ[...] = ...``), with a
# portable fallback.
_DEPLOY = "TORCH_RBLN_DEPLOY"
try:
    _DEPLOY_KEY: Any = os.environ.encodekey(_DEPLOY)  # type: ignore[attr-defined]
    _decode: Callable[[Any], str] = os.environ.decodevalue  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - non-CPython os.environ
    _DEPLOY_KEY, _decode = None, str
_UNPARSED = object()
_deploy_cache: tuple[Any, bool] = (_UNPARSED, False)


def deploy_mode() -> bool:
    """``TORCH_RBLN_DEPLOY`` (default OFF), re-read on every call; costs well under a microsecond."""
    global _deploy_cache
    try:
        value = os.environ._data.get(_DEPLOY_KEY)  # type: ignore[attr-defined]
    except AttributeError:  # pragma: no cover - non-CPython os.environ
        value = os.environ.get(_DEPLOY)
    cached = _deploy_cache
    if value == cached[0]:
        return cached[1]
    text = _decode(value) if value is not None else ""
    result = parse_bool(_DEPLOY, text) if text else False
    _deploy_cache = (value, result)
    return result


def fallback_disabled(category: str) -> bool:
    """Whether CPU fallback of ``category`` is disabled by ``TORCH_RBLN_DISABLE_FALLBACK``.

    ``category`` is one of ``compile_error``, ``unsupported_op``, ``non_blocking_copy`` (or ``all``);
    the token ``all`` in the variable disables every category.  Re-read on every call.
    """
    if category not in FALLBACK_CATEGORIES:
        raise ValueError(
            f"unknown fallback category {category!r}, expected one of: " + ", ".join(FALLBACK_CATEGORIES)
        )
    disabled = get("TORCH_RBLN_DISABLE_FALLBACK")
    return "all" in disabled or category in disabled


def reset_for_tests() -> None:
    """Forget every cached value so the next access re-reads the environment."""
    global _settings, _deploy_cache
    with _lock:
        _settings = None
        _live.clear()
        _deploy_cache = (_UNPARSED, False)


# ----------------------------------------------------------------------------------------------
# Variables set by a launcher (torchrun, SLURM wrappers): not ours to document, but read here too, so a
# malformed value gets the same precise message as ours instead of a bare int() ValueError.
# ----------------------------------------------------------------------------------------------

_RANK_INDEX = _bounded_int(0, 1 << 20)
_RANK_COUNT = _bounded_int(1, 1 << 20)


@dataclass(frozen=True)
class LauncherRanks:
    """Where this process sits in a job, as the launcher told it (torchrun's variables)."""

    rank: int  # RANK: global rank, 0 when unset
    world_size: int  # WORLD_SIZE: 1 when unset
    local_rank: int | None  # LOCAL_RANK: None when unset (not started by a launcher)
    local_world_size: int | None  # LOCAL_WORLD_SIZE: None when unset


# Variables other programs own that torch-rbln only reads: listed so that every environment read of
# the package goes through this module (and `tests/torch_rbln/test_config.py` can check that none
# bypasses it), without showing them among torch-rbln's own settings.
EXTERNAL = frozenset({"OPENBLAS_NUM_THREADS", "HOSTNAME"})


def external(name: str) -> str | None:
    """The value of a variable another program owns (`EXTERNAL`); ``None`` when unset or empty."""
    if name not in EXTERNAL:
        raise KeyError(f"{name!r} is not an external variable torch-rbln reads; add it to config.EXTERNAL")
    return _environ_get(name) or None


def launcher_ranks() -> LauncherRanks:
    """The launcher's rank variables, re-read on each call (a job sets them before the first use).

    ConfigError names the variable and its value when one is not a non-negative integer (a positive one
    for the sizes), or when a rank is not below its size."""

    def read(name: str, parse: Callable[[str, str], int]) -> int | None:
        value = _environ_get(name)
        return None if value is None or value == "" else parse(name, value)

    rank, world = read("RANK", _RANK_INDEX), read("WORLD_SIZE", _RANK_COUNT)
    local, local_world = read("LOCAL_RANK", _RANK_INDEX), read("LOCAL_WORLD_SIZE", _RANK_COUNT)
    ranks = LauncherRanks(rank or 0, world or 1, local, local_world)
    if ranks.rank >= ranks.world_size and world is not None:
        raise _invalid("RANK", str(ranks.rank), f"an integer below WORLD_SIZE={ranks.world_size}")
    if local is not None and local_world is not None and local >= local_world:
        raise _invalid("LOCAL_RANK", str(local), f"an integer below LOCAL_WORLD_SIZE={local_world}")
    return ranks
