"""Logging (SPEC-device.md, "Logging").

Logger ``torch_rbln`` (children ``torch_rbln.<part>`` via :func:`get_logger`), on stderr with the format
``[TORCH-RBLN][LEVEL] message``, not propagated to the root logger.

* ``TORCH_RBLN_LOG_LEVEL``: DEBUG, INFO, WARNING (default), ERROR, any case.
* Release mode (default): the lowest effective level is INFO (DEBUG acts as INFO); no log file.
* Debug mode (``RBLN_BUILD_TYPE=Debug``): DEBUG is available and every record also goes to
  ``TORCH_RBLN_LOG_PATH`` (default ``./torch_rbln.log``) with timestamp, source file:line and thread id.

Configured lazily on the first :func:`get_logger` call (idempotent); imports only the standard library.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

from torch_rbln import config

__all__ = ["LOGGER_NAME", "get_logger", "configure", "is_configured", "log_fallback", "reset_for_tests"]

LOGGER_NAME = "torch_rbln"
STDERR_FORMAT = "[TORCH-RBLN][%(levelname)s] %(message)s"
FILE_FORMAT = (
    "%(asctime)s [TORCH-RBLN][%(levelname)s] [%(filename)s:%(lineno)d] [thread %(thread)d] %(message)s"
)

_lock = threading.Lock()
_configured = False
_handlers: list[logging.Handler] = []


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at emit time (so pytest's capsys/capfd see the records)."""

    terminator = "\n"

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stderr
            if stream is None:  # pythonw and friends
                return
            stream.write(self.format(record) + self.terminator)
            stream.flush()
        except RecursionError:  # pragma: no cover - as logging.StreamHandler
            raise
        except Exception:  # pragma: no cover
            self.handleError(record)


def configure() -> logging.Logger:
    """Configure the ``torch_rbln`` logger from the environment, once.  Returns it.

    Raises ConfigError for an invalid TORCH_RBLN_LOG_LEVEL or RBLN_BUILD_TYPE (and stays unconfigured,
    so every later call raises again until the environment is fixed).
    """
    global _configured
    logger = logging.getLogger(LOGGER_NAME)
    if _configured:
        return logger
    with _lock:
        if _configured:
            return logger
        level_name = config.get("TORCH_RBLN_LOG_LEVEL")
        debug = config.get("RBLN_BUILD_TYPE") == "Debug"
        level = getattr(logging, level_name)
        if logger.level != logging.NOTSET:
            # the program chose a level (`logging.getLogger("torch_rbln").setLevel(...)`) before our
            # first log call: its choice is more specific than the environment's, so it stays
            level = logger.level
        if not debug:
            level = max(level, logging.INFO)  # release mode: DEBUG acts as INFO
        handlers: list[logging.Handler] = []
        stderr = _StderrHandler()
        stderr.setFormatter(logging.Formatter(STDERR_FORMAT))
        handlers.append(stderr)
        if debug:
            path = config.get("TORCH_RBLN_LOG_PATH")
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            file_handler = logging.FileHandler(path, mode="a", encoding="utf-8")
            file_handler.setFormatter(logging.Formatter(FILE_FORMAT))
            handlers.append(file_handler)
        for h in handlers:
            logger.addHandler(h)
        _handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = False
        _configured = True
    return logger


def is_configured() -> bool:
    return _configured


def get_logger(part: str | None = None) -> logging.Logger:
    """The ``torch_rbln`` logger, or its child ``torch_rbln.<part>``; configures logging on first call."""
    logger = configure()
    return logger.getChild(part) if part else logger


def log_fallback(op_name: str, reason: str | None = None) -> None:
    """INFO ``\\`aten::cos\\` op ran on CPU instead of RBLN (reason)``; logged once per op and reason
    (see `torch_rbln.fallback.record`), so it says where the later calls are counted. The record's
    file:line (debug log) is the code that took the fallback, not this helper."""
    suffix = f" ({reason})" if reason else ""
    get_logger("fallback").info(
        "`%s` op ran on CPU instead of RBLN%s; later calls for this reason are counted, not logged "
        "(torch_rbln.registry.fallback_report())", op_name, suffix, stacklevel=3,
    )


def reset_for_tests() -> None:
    """Remove the handlers this module installed (closing the log file) and forget the configuration."""
    global _configured
    with _lock:
        logger = logging.getLogger(LOGGER_NAME)
        for h in _handlers:
            logger.removeHandler(h)
            h.close()
        _handlers.clear()
        logger.setLevel(logging.NOTSET)
        logger.propagate = True
        _configured = False
