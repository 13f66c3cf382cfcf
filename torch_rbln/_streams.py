"""Streams and events of `torch.rbln`, shaped like `torch.cuda`'s, for a synchronous device.

Kernels on the simulated NPUs run to completion on the calling thread before an op returns, so every
stream is always idle: `query()` is True, waiting and synchronising return at once, and an event is
complete when it is recorded. Events keep the host time of their `record()`, which is when the work
before them finished, so `elapsed_time` measures real time between two points of a program as with
CUDA events. Code written for `torch.cuda` streams (`with torch.rbln.stream(s):`,
`s.wait_stream(torch.rbln.current_stream())`, timing with events) runs unchanged.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["Stream", "Event", "current_stream", "default_stream", "set_stream", "stream"]

_state = threading.local()  # .streams: device index -> the thread's current Stream


def _index(device: Any) -> int:
    from .device_module import _index_of

    return _index_of(device)


class Stream:
    """A stream of rbln:index. `Stream(device=None, priority=0)`; the work of every stream is done
    by the time the call that issued it returns."""

    def __init__(self, device: Any = None, priority: int = 0, *, _default: bool = False) -> None:
        self.device = torch.device("rbln", _index(device))
        self.priority = int(priority)
        self.is_default = _default

    def query(self) -> bool:
        """True: all work issued to the stream is complete."""
        return True

    def synchronize(self) -> None:
        """Returns at once (the work is complete)."""

    def wait_event(self, event: Event) -> None:
        """Returns at once: the event's work is complete once it is recorded."""

    def wait_stream(self, stream: Stream) -> None:
        """Returns at once: the other stream's work is complete."""

    def record_event(self, event: Event | None = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Stream) and self.device == other.device
                and (self is other or (self.is_default and other.is_default)))

    def __hash__(self) -> int:
        return hash((self.device, self.is_default)) if self.is_default else id(self)

    def __repr__(self) -> str:
        kind = "default " if self.is_default else ""
        return f"<torch.rbln.Stream {kind}device={self.device} priority={self.priority}>"


class Event:
    """An event: complete when recorded; with `enable_timing=True` it keeps the host time of its
    record for `elapsed_time`."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.interprocess = interprocess
        self._recorded_at: float | None = None
        self.device: torch.device | None = None

    def record(self, stream: Stream | None = None) -> None:
        stream = current_stream() if stream is None else stream
        self.device = stream.device
        self._recorded_at = time.perf_counter()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Returns at once (the work before the record is complete)."""

    def wait(self, stream: Stream | None = None) -> None:
        """Returns at once."""

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between this event's record and `end_event`'s."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._recorded_at is None or end_event._recorded_at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._recorded_at - self._recorded_at) * 1000.0

    def __repr__(self) -> str:
        state = "recorded" if self._recorded_at is not None else "not recorded"
        return f"<torch.rbln.Event {state} timing={self.enable_timing}>"


_defaults: dict[int, Stream] = {}


def default_stream(device: Any = None) -> Stream:
    index = _index(device)
    found = _defaults.get(index)
    if found is None:
        found = _defaults.setdefault(index, Stream(index, _default=True))
    return found


def current_stream(device: Any = None) -> Stream:
    index = _index(device)
    streams = getattr(_state, "streams", None)
    if streams and index in streams:
        return streams[index]
    return default_stream(index)


def set_stream(stream: Stream) -> None:
    if stream is None:
        return
    streams = getattr(_state, "streams", None)
    if streams is None:
        streams = _state.streams = {}
    streams[stream.device.index] = stream


@contextlib.contextmanager
def stream(stream: Stream | None) -> Iterator[None]:
    """Make `stream` current for its device in this thread for the block (None: no change)."""
    if stream is None:
        yield
        return
    previous = current_stream(stream.device)
    set_stream(stream)
    try:
        yield
    finally:
        set_stream(previous)
