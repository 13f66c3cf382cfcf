"""`tl.math`: math functions under Triton's `triton.language.math` names."""

from .core import (  # noqa: F401
    abs,
    cdiv,
    ceil,
    clamp,
    cos,
    div_rn,
    erf,
    exp,
    exp2,
    fdiv,
    floor,
    fma,
    log,
    log2,
    maximum,
    minimum,
    rsqrt,
    sigmoid,
    sin,
    sqrt,
    sqrt_rn,
    tanh,
    umulhi,
)
from .core import exp as fast_expf  # noqa: F401  (exact here; approximate on a GPU)
from .core import fdiv as fast_dividef  # noqa: F401
from .core import maximum as max  # noqa: F401  (older Triton spelling)
from .core import minimum as min  # noqa: F401
