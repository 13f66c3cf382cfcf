"""Scalar element types of the DSL, named as in `triton.language`.

A `dtype` is an immutable, interned descriptor: `float32`, `float16`, `bfloat16`, `float64`, `int1`,
`int8`, `int16`, `int32`, `int64`, `uint8`, `uint16`, `uint32`, `uint64`.  `pointer_type(elem)` is the type
of a pointer into a kernel argument whose elements have type `elem`.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "dtype",
    "pointer_type",
    "int1",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "void",
    "DTYPES",
    "from_torch",
    "to_torch",
    "from_name",
    "numpy_dtype",
]


class dtype:
    """A scalar element type.  Compare with `==`; `name` is Triton's short name (`fp32`, `i32`...)."""

    _cache: dict[str, dtype] = {}
    SINT = ("int1", "int8", "int16", "int32", "int64")
    UINT = ("uint8", "uint16", "uint32", "uint64")
    FP8 = ("fp8e5", "fp8e4nv", "fp8e4b8", "fp8e5b16", "fp8e4b15")
    FP = ("fp16", "bf16", "fp32", "fp64") + FP8

    def __new__(cls, name: str):
        if name in cls._cache:
            return cls._cache[name]
        self = super().__new__(cls)
        self.name = name
        cls._cache[name] = self
        return self

    def __reduce__(self):
        return (dtype, (self.name,))

    # --- classification (Triton's names) ---
    def is_floating(self) -> bool:
        return self.name in self.FP

    def is_int(self) -> bool:
        return self.name in self.SINT or self.name in self.UINT

    def is_int_signed(self) -> bool:
        return self.name in self.SINT and self.name != "int1"

    def is_int_unsigned(self) -> bool:
        return self.name in self.UINT

    def is_bool(self) -> bool:
        return self.name == "int1"

    is_int1 = is_bool

    def is_fp16(self) -> bool:
        return self.name == "fp16"

    def is_bf16(self) -> bool:
        return self.name == "bf16"

    def is_fp32(self) -> bool:
        return self.name == "fp32"

    def is_fp64(self) -> bool:
        return self.name == "fp64"

    def is_fp8(self) -> bool:
        return self.name in self.FP8

    def is_fp8e5(self) -> bool:
        return self.name == "fp8e5"

    def is_fp8e4nv(self) -> bool:
        return self.name == "fp8e4nv"

    def is_fp8e4b8(self) -> bool:
        return self.name == "fp8e4b8"

    def is_fp8e5b16(self) -> bool:
        return self.name == "fp8e5b16"

    def is_fp8e4b15(self) -> bool:
        return self.name == "fp8e4b15"

    @property
    def fp_mantissa_width(self) -> int:
        return {"fp16": 10, "bf16": 7, "fp32": 23, "fp64": 52, "fp8e5": 2, "fp8e5b16": 2}.get(self.name, 3)

    @property
    def exponent_bias(self) -> int:
        return {"fp16": 15, "bf16": 127, "fp32": 127, "fp64": 1023, "fp8e5": 15, "fp8e4nv": 7, "fp8e4b8": 8,
                "fp8e5b16": 16, "fp8e4b15": 15}[self.name]

    def is_ptr(self) -> bool:
        return False

    def is_block(self) -> bool:
        return False

    def is_void(self) -> bool:
        return self.name == "void"

    @property
    def primitive_bitwidth(self) -> int:
        if self.name == "int1":
            return 1
        if self.is_floating():
            return {"fp16": 16, "bf16": 16, "fp32": 32, "fp64": 64}.get(self.name, 8)
        return int(self.name.lstrip("uint"))

    @property
    def int_bitwidth(self) -> int:
        return self.primitive_bitwidth

    @property
    def itemsize(self) -> int:
        return max(1, self.primitive_bitwidth // 8)

    @property
    def kind(self) -> int:
        """Promotion kind as Triton: bool < uint < int < float."""
        if self.name == "int1":
            return 0
        if self.is_int_unsigned():
            return 1
        if self.is_int():
            return 2
        return 3

    @property
    def scalar(self) -> dtype:
        return self

    def to_ir(self, builder=None):  # pragma: no cover - compatibility shim
        return self

    def __repr__(self) -> str:
        return f"tl.{_PY_NAMES.get(self.name, self.name)}"

    __str__ = __repr__


class pointer_type(dtype):
    """Pointer to elements of `element_ty` (what a tensor kernel argument is)."""

    def __new__(cls, element_ty: dtype, address_space: int = 1, const: bool = False):
        key = "ptr<" + element_ty.name + ">"
        if key in dtype._cache:
            return dtype._cache[key]
        self = object.__new__(cls)
        self.name = key
        self.element_ty = element_ty
        dtype._cache[key] = self
        return self

    def __reduce__(self):
        return (pointer_type, (self.element_ty,))

    def is_ptr(self) -> bool:
        return True

    def is_floating(self) -> bool:
        return False

    def is_int(self) -> bool:
        return False

    @property
    def primitive_bitwidth(self) -> int:
        return 64

    @property
    def kind(self) -> int:
        return 4

    def __repr__(self) -> str:
        return f"pointer<{self.element_ty!r}>"

    __str__ = __repr__


int1 = dtype("int1")
int8 = dtype("int8")
int16 = dtype("int16")
int32 = dtype("int32")
int64 = dtype("int64")
uint8 = dtype("uint8")
uint16 = dtype("uint16")
uint32 = dtype("uint32")
uint64 = dtype("uint64")
float16 = dtype("fp16")
bfloat16 = dtype("bf16")
float32 = dtype("fp32")
float64 = dtype("fp64")
void = dtype("void")
# fp8 formats under Triton's names: e5m2 (IEEE-like, with inf), e4m3 without inf ("nv", OCP e4m3fn),
# and AMD's fnuz formats (bias 8 / 16, no inf, no negative zero); fp8e4b15 is Triton's pre-Hopper e4m3
# with bias 15 (a dtype only: it has no torch or ml_dtypes counterpart, so its values are refused)
float8e5 = dtype("fp8e5")
float8e4nv = dtype("fp8e4nv")
float8e4b8 = dtype("fp8e4b8")
float8e5b16 = dtype("fp8e5b16")
float8e4b15 = dtype("fp8e4b15")
FP8_DTYPES = (float8e5, float8e4nv, float8e4b8, float8e5b16, float8e4b15)

_PY_NAMES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64", "fp8e5": "float8e5",
             "fp8e4nv": "float8e4nv", "fp8e4b8": "float8e4b8", "fp8e5b16": "float8e5b16",
             "fp8e4b15": "float8e4b15"}
DTYPES = (int1, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32, float64)

_BY_NAME = {d.name: d for d in DTYPES + FP8_DTYPES}
_BY_NAME.update(
    {
        "float16": float16,
        "bfloat16": bfloat16,
        "float32": float32,
        "float64": float64,
        "i1": int1,
        "i8": int8,
        "i16": int16,
        "i32": int32,
        "i64": int64,
        "u8": uint8,
        "bool": int1,
    }
)


def from_name(name: str) -> dtype:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown dtype name {name!r}") from None


_NP: dict[str, np.dtype] = {
    "int1": np.dtype(np.bool_),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
    "fp16": np.dtype(np.float16),
    "fp32": np.dtype(np.float32),
    "fp64": np.dtype(np.float64),
}
_ML_DTYPES = {"bf16": "bfloat16", "fp8e5": "float8_e5m2", "fp8e4nv": "float8_e4m3fn",
              "fp8e4b8": "float8_e4m3fnuz", "fp8e5b16": "float8_e5m2fnuz"}


def numpy_dtype(t: dtype) -> np.dtype:
    """The numpy dtype that stores values of `t` (ml_dtypes.bfloat16 for bf16, int64 for pointers).

    ml_dtypes is imported only for bf16 and fp8: its import costs about a second, which every process's
    first float32 kernel would otherwise pay."""
    if t.name in _ML_DTYPES and t.name not in _NP:
        import ml_dtypes

        _NP.update({name: np.dtype(getattr(ml_dtypes, attr)) for name, attr in _ML_DTYPES.items()})
    if t.is_ptr():
        return np.dtype(np.int64)
    if t.name == "fp8e4b15":
        from .errors import DSLError

        raise DSLError(
            "tl.float8e4b15 values are not supported: Triton's pre-Hopper fp8 format has no torch or "
            "ml_dtypes counterpart; use tl.float8e4nv or tl.float8e5"
        )
    return _NP[t.name]


_FP8_TABLES: dict[str, tuple] = {}


def fp8_tables(t: dtype) -> tuple[np.ndarray, np.ndarray, int]:
    """(value of each of the 256 codes as float64, the codes of the positive finite values in increasing
    order, the code of NaN) for fp8 dtype `t`: what both backends round with."""
    tab = _FP8_TABLES.get(t.name)
    if tab is None:
        values = np.arange(256, dtype=np.uint8).view(numpy_dtype(t)).astype(np.float64)
        positive = [c for c in range(128) if np.isfinite(values[c]) and values[c] >= 0]
        nan = next(c for c in (0x7F, 0xFF, 0x80, 0x7E) if np.isnan(values[c]))
        tab = (values, np.array(positive, dtype=np.uint8), nan)
        _FP8_TABLES[t.name] = tab
    return tab


def round_to_fp8_codes(x, t: dtype) -> np.ndarray:
    """Codes (uint8) of fp8 dtype `t` nearest to `x` (any real dtype), ties to the even code; beyond the
    largest finite value by half a step or more: inf for e5m2, the largest finite value for e4m3fn
    (saturating, as torch and NVIDIA's cvt.rn.satfinite), NaN for the fnuz formats (as torch converts).
    Exact from float64 (no double rounding)."""
    values, positive, nan = fp8_tables(t)
    x = np.asarray(x, dtype=np.float64)
    mag = np.abs(x)
    finite = values[positive]
    idx = np.clip(np.searchsorted(finite, mag, side="right") - 1, 0, len(finite) - 1)
    lo = finite[idx]
    top = len(finite) - 1
    step = np.where(idx < top, finite[np.minimum(idx + 1, top)] - lo, finite[top] - finite[top - 1])
    up = (mag - lo > step / 2) | ((mag - lo == step / 2) & (positive[idx] & 1 == 1))
    code = positive[idx].astype(np.int64) + up
    has_inf = bool(np.isinf(values[0x7C])) if t.name == "fp8e5" else False
    overflow = code > positive[top]
    code = np.where(overflow, 0x7C if has_inf else positive[top] if t.name == "fp8e4nv" else nan, code)
    negzero_ok = t.name in ("fp8e5", "fp8e4nv")
    neg = np.signbit(x) & (negzero_ok | (code != 0))
    code = np.where(neg & (code != nan), code | 0x80, code)
    code = np.where(np.isnan(x), nan, code)
    return code.astype(np.uint8)


_TORCH: dict = {}


def _torch_table() -> dict:
    if not _TORCH:
        import torch

        _TORCH.update(
            {
                torch.bool: int1,
                torch.int8: int8,
                torch.int16: int16,
                torch.int32: int32,
                torch.int64: int64,
                torch.uint8: uint8,
                torch.float16: float16,
                torch.bfloat16: bfloat16,
                torch.float32: float32,
                torch.float64: float64,
            }
        )
        fp8 = (("float8_e5m2", float8e5), ("float8_e4m3fn", float8e4nv), ("float8_e4m3fnuz", float8e4b8),
               ("float8_e5m2fnuz", float8e5b16))
        for name, d in fp8:
            if hasattr(torch, name):
                _TORCH[getattr(torch, name)] = d
        for name, d in (("uint16", uint16), ("uint32", uint32), ("uint64", uint64)):
            if hasattr(torch, name):
                _TORCH[getattr(torch, name)] = d
    return _TORCH


def from_torch(torch_dtype) -> dtype | None:
    """DSL dtype for a torch dtype, or None when the DSL has no equivalent."""
    return _torch_table().get(torch_dtype)


def to_torch(t: dtype):
    for k, v in _torch_table().items():
        if v is t:
            return k
    raise ValueError(f"{t!r} has no torch equivalent")
