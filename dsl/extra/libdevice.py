"""libdevice-style math functions (`from torch_rbln.dsl.extra import libdevice`).

f16/bf16 inputs are computed in fp32 and rounded back to the input dtype."""

from .. import semantic as S
from ..core import (  # noqa: F401
    abs,
    ceil,
    cos,
    erf,
    exp,
    exp2,
    floor,
    fma,
    log,
    log2,
    rsqrt,
    sin,
    sqrt,
    tanh,
)
from ..core import builtin as _builtin


def _u(name, doc=""):
    def f(x):
        return S.unary(name, x)

    f.__name__ = name
    f.__doc__ = doc or f"libdevice {name}"
    return _builtin(f)


tan = _u("tan")
asin = _u("asin")
acos = _u("acos")
atan = _u("atan")
sinh = _u("sinh")
cosh = _u("cosh")
log10 = _u("log10")
log1p = _u("log1p")
expm1 = _u("expm1")
rint = _u("rint", "Round to nearest, ties to even.")
nearbyint = rint
trunc = _u("trunc")
isnan = _u("isnan", "int1: x is NaN.")
isinf = _u("isinf", "int1: x is +-inf.")
signbit = _u("signbit")
sqrt_rn = sqrt
fabs = abs


@_builtin
def round(x):
    """Round half away from zero."""
    x = S.to_tensor(x)
    return S.where(S.compare("ge", x, 0.0), S.unary("floor", x + 0.5), S.unary("ceil", x - 0.5))


@_builtin
def pow(x, y):
    return S.binary("pow", x, y)


@_builtin
def atan2(y, x):
    a, b = S._prepare(y, x)
    return S.current().emit1("binary", [a.handle, b.handle], a.type, {"op": "atan2"})


@_builtin
def div_rn(x, y):
    return S.truediv(x, y)


@_builtin
def fmod(x, y):
    return S.mod(x, y)


@_builtin
def isfinited(x):
    return S.logical_not(S.logical("or", S.unary("isnan", x), S.unary("isinf", x)))


finitef = isfinited


@_builtin
def fast_expf(x):
    return S.unary("exp", x)


@_builtin
def fast_logf(x):
    return S.unary("log", x)


@_builtin
def fast_dividef(x, y):
    return S.truediv(x, y)
