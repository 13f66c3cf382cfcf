"""Physical NPUs and the logical-device mapping (SPEC-device.md, "Physical NPUs" and "Device mapping").

A logical device ``rbln:i`` is a group of physical NPUs.  The mapping comes from, in priority order, a
non-empty ``RBLN_DEVICE_MAP``, a non-empty ``RBLN_NPUS_PER_DEVICE``, else 1:1.  It is built once, lazily,
on first use (:func:`get_topology`), never at import; later environment changes are ignored until
:func:`reset_for_tests`.  Imports only the standard library.
"""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import dataclass

from torch_rbln import config
from torch_rbln.log import get_logger

__all__ = [
    "LogicalDevice",
    "Topology",
    "DeviceConfigError",
    "MAP_FORMAT",
    "get_topology",
    "topology",
    "is_initialized",
    "device_count",
    "physical_device_count",
    "check_device_index",
    "device_summary",
    "format_summary",
    "parse_device_map",
    "reset_for_tests",
]

MAP_FORMAT = '"[0,1],[2,3]"'
_SIZES_TEXT = ", ".join(map(str, config.VALID_GROUP_SIZES))


class DeviceConfigError(config.ConfigError, RuntimeError):
    """An invalid RBLN_DEVICES or TORCH_RBLN_SIM_NPUS found while building the topology.

    Both a ConfigError (ValueError), like every invalid variable, and a RuntimeError, like every other
    error raised at first device use.
    """


@dataclass(frozen=True)
class LogicalDevice:
    """Logical device ``rbln:<index>`` backed by the physical NPUs ``npus`` (in the given order)."""

    index: int
    npus: tuple[int, ...]

    @property
    def root(self) -> int:
        """The root NPU: the first id of the group."""
        return self.npus[0]

    @property
    def aggregated(self) -> bool:
        return len(self.npus) > 1

    @property
    def size(self) -> int:
        return len(self.npus)


@dataclass(frozen=True)
class Topology:
    physical_count: int
    devices: tuple[LogicalDevice, ...]
    unused: tuple[int, ...]
    # The raw mapping variables seen when the topology was built (None = unset), for error messages.
    device_map_env: str | None = None
    npus_per_device_env: str | None = None

    def env_note(self) -> str:
        return _env_note(self.device_map_env, self.npus_per_device_env)


# ----------------------------------------------------------------------------------------------
# Physical NPUs.
# ----------------------------------------------------------------------------------------------


def _runtime_npu_count() -> int | None:
    """The Rebellions runtime's NPU count, or None when the runtime is not installed.

    Untested here (the runtime is not available on development hosts).  The runtime applies
    RBLN_DEVICES itself, so its count is already the restricted, renumbered one.
    """
    if importlib.util.find_spec("rebel") is None:
        return None
    import rebel  # noqa: PLC0415  (lazy: heavy, and absent on most hosts)

    for name in ("get_npu_count", "device_count", "npu_count"):
        fn = getattr(rebel, name, None)
        if callable(fn):
            return int(fn())
    return None


def _physical_count() -> int:
    count = _runtime_npu_count()
    if count is not None:
        return count
    total = config.get("TORCH_RBLN_SIM_NPUS")
    ids = config.get("RBLN_DEVICES")
    if ids is None:
        return total
    for i in ids:
        if i >= total:
            raise config.ConfigError(
                f"Invalid RBLN_DEVICES '{config.raw('RBLN_DEVICES')}' (NPU {i} does not exist), expected "
                f"distinct ids in 0..{total - 1} (this host has {total} physical NPU(s); "
                f"TORCH_RBLN_SIM_NPUS={total})"
            )
    return len(ids)


# ----------------------------------------------------------------------------------------------
# Mapping.
# ----------------------------------------------------------------------------------------------


def _show(value: str | None) -> str:
    if value is None:
        return "-"
    return value if len(value) <= 80 else value[:77] + "..."


def _env_note(device_map: str | None, npus_per_device: str | None) -> str:
    return f"Env RBLN_DEVICE_MAP={_show(device_map)}, RBLN_NPUS_PER_DEVICE={_show(npus_per_device)}."


class _MapSyntaxError(Exception):
    def __init__(self, pos: int, expected: str, found: str) -> None:
        super().__init__(f"Malformed RBLN_DEVICE_MAP at position {pos}: expected {expected}, found {found}.")


def parse_device_map(text: str) -> list[list[int]]:
    """Parse ``"[0,1],[2,3]"`` into ``[[0, 1], [2, 3]]``, strictly.

    Spaces are allowed around brackets and commas but not between digits of two ids (``[0 1]`` is an
    error).  Groups may be empty here (``[]``); sizes are checked by the caller.  Raises
    ``_MapSyntaxError`` naming the 0-based position of the offending character.
    """
    n = len(text)
    pos = 0

    def found(p: int) -> str:
        return "end of text" if p >= n else repr(text[p])

    def skip_ws(p: int) -> int:
        while p < n and text[p] in " \t":
            p += 1
        return p

    groups: list[list[int]] = []
    pos = skip_ws(pos)
    while True:
        if pos >= n or text[pos] != "[":
            raise _MapSyntaxError(pos, "'['", found(pos))
        pos = skip_ws(pos + 1)
        group: list[int] = []
        if pos < n and text[pos] == "]":
            pos += 1
        else:
            while True:
                start = pos
                while pos < n and text[pos].isascii() and text[pos].isdigit():
                    pos += 1
                if pos == start:
                    raise _MapSyntaxError(pos, "a non-negative integer NPU id", found(pos))
                group.append(int(text[start:pos]))
                pos = skip_ws(pos)
                if pos < n and text[pos] == ",":
                    pos = skip_ws(pos + 1)
                    continue
                if pos < n and text[pos] == "]":
                    pos += 1
                    break
                raise _MapSyntaxError(pos, "',' or ']'", found(pos))
        groups.append(group)
        pos = skip_ws(pos)
        if pos >= n:
            return groups
        if text[pos] != ",":
            raise _MapSyntaxError(pos, "',' or end of text", found(pos))
        pos = skip_ws(pos + 1)


def _build() -> Topology:
    device_map = config.raw("RBLN_DEVICE_MAP")
    npd = config.raw("RBLN_NPUS_PER_DEVICE")
    note = _env_note(device_map, npd)

    def fail(message: str) -> RuntimeError:
        return RuntimeError(f"{message} {note}")

    try:
        n = _physical_count()
    except config.ConfigError as e:
        raise DeviceConfigError(str(e)) from None
    log = None
    if device_map is not None:
        if not device_map.strip():
            raise fail("RBLN_DEVICE_MAP must contain at least one logical device mapping.")
        try:
            groups = parse_device_map(device_map)
        except _MapSyntaxError as e:
            raise fail(f"{e} Expected format: {MAP_FORMAT}.") from None
        if not any(groups):
            raise fail("RBLN_DEVICE_MAP must contain at least one logical device mapping.")
        for g in groups:
            if len(g) not in config.VALID_GROUP_SIZES:
                raise fail(
                    "Each logical device mapping in RBLN_DEVICE_MAP must contain a valid number of "
                    f"physical NPUs. Valid sizes are: {_SIZES_TEXT}. "
                    f"Mapping with {len(g)} physical NPU(s) is invalid."
                )
        owner: dict[int, int] = {}
        for index, g in enumerate(groups):
            for npu in g:
                if npu >= n:
                    raise fail(
                        f"Physical NPU {npu} out of range (this process has {n} physical NPU(s), "
                        f"valid 0..{n - 1})."
                    )
                if npu in owner:
                    raise fail(
                        f"Physical NPU {npu} is already assigned to another logical device "
                        f"(rbln:{owner[npu]}; listed again for rbln:{index})."
                    )
                owner[npu] = index
        if npd is not None:
            log = f"RBLN_NPUS_PER_DEVICE={npd} is ignored because RBLN_DEVICE_MAP is set."
    elif npd is not None:
        text = npd.strip()
        if not (text.isascii() and text.isdigit()) or int(text) <= 0:
            raise fail(f"RBLN_NPUS_PER_DEVICE must be a positive integer (got '{npd}').")
        k = int(text)
        if k not in config.VALID_GROUP_SIZES:
            raise fail(f"RBLN_NPUS_PER_DEVICE must be one of the valid sizes: {_SIZES_TEXT}. "
                       f"Got {k} which is invalid.")
        if n // k == 0:
            raise fail(f"No logical device (this process has {n} physical NPU(s), "
                       f"need {k} per logical device).")
        groups = [list(range(i * k, i * k + k)) for i in range(n // k)]
    else:
        groups = [[i] for i in range(n)]

    devices = tuple(LogicalDevice(i, tuple(g)) for i, g in enumerate(groups))
    used = {npu for g in groups for npu in g}
    unused = tuple(i for i in range(n) if i not in used)
    topo = Topology(n, devices, unused, device_map, npd)

    if log is not None or unused:
        logger = get_logger("topology")
        if log is not None:
            logger.warning(log)
        if unused:
            logger.warning(
                "%d physical NPU(s) are unused due to grouping constraints: NPU(s) %s. %s",
                len(unused), ", ".join(map(str, unused)), note,
            )
    return topo


# ----------------------------------------------------------------------------------------------
# Public API.
# ----------------------------------------------------------------------------------------------

_lock = threading.Lock()
_topology: Topology | None = None


def get_topology() -> Topology:
    """The topology, built on first call (thread-safe).  A failed build raises and is retried next time."""
    global _topology
    topo = _topology
    if topo is not None:
        return topo
    with _lock:
        if _topology is None:
            _topology = _build()
        return _topology


topology = get_topology


def is_initialized() -> bool:
    return _topology is not None


def device_count() -> int:
    """Number of logical devices."""
    return len(get_topology().devices)


def physical_device_count() -> int:
    """Number of physical NPUs this process sees (after RBLN_DEVICES)."""
    return get_topology().physical_count


def check_device_index(index: int) -> LogicalDevice:
    """The logical device ``rbln:<index>``, or RuntimeError when it is not assigned (negatives too)."""
    topo = get_topology()
    if 0 <= index < len(topo.devices):
        return topo.devices[index]
    raise RuntimeError(
        f"Logical device rbln:{index} is not assigned (this process has {len(topo.devices)} "
        f"logical device(s)). {topo.env_note()}"
    )


def format_summary(topo: Topology) -> str:
    """The device table of :func:`device_summary` for ``topo`` (no trailing newline)."""
    header = ("Logical Device", "Physical NPU IDs", "Status")
    rows = [
        (f"rbln:{d.index}", "[ " + ", ".join(map(str, d.npus)) + " ]",
         "Active (Aggregated)" if d.aggregated else "Active")
        for d in topo.devices
    ]
    if topo.unused:
        rows.append(("-", "[ " + ", ".join(map(str, topo.unused)) + " ]", "Unused"))
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(3)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(r: tuple[str, str, str]) -> str:
        return "|" + "|".join(f" {cell.ljust(w)} " for cell, w in zip(r, widths, strict=True)) + "|"

    out = ["[RBLN] Device Topology Initialized:", rule, line(header), rule, *map(line, rows), rule]
    if topo.unused:
        out.append(f"[Warning] {len(topo.unused)} physical NPU(s) are unused due to grouping constraints.")
    return "\n".join(out)


def device_summary() -> str:
    """Print the device topology table to stdout and return it."""
    text = format_summary(get_topology())
    print(text)
    return text


def reset_for_tests() -> None:
    """Forget the topology so the next use rebuilds it from the current environment."""
    global _topology
    with _lock:
        _topology = None
