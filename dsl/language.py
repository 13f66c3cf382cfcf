"""`torch_rbln.dsl.language`: the `triton.language` surface (`from torch_rbln.dsl import language as tl`)."""

from . import extra, math  # noqa: F401
from .core import *  # noqa: F401,F403
from .core import __all__  # noqa: F401
