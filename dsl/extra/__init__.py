"""`tl.extra`: vendor math libraries (`libdevice`)."""

from . import libdevice  # noqa: F401
