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
    FP = ("fp16", "bf16", "fp32", "fp64")

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
            return {"fp16": 16, "bf16": 16, "fp32": 32, "fp64": 64}[self.name]
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

_PY_NAMES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}
DTYPES = (int1, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32, float64)

_BY_NAME = {d.name: d for d in DTYPES}
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


_NP: dict[str, np.dtype] = {}


def numpy_dtype(t: dtype) -> np.dtype:
    """The numpy dtype that stores values of `t` (ml_dtypes.bfloat16 for bf16, int64 for pointers)."""
    if not _NP:
        import ml_dtypes

        _NP.update(
            {
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
                "bf16": np.dtype(ml_dtypes.bfloat16),
                "fp32": np.dtype(np.float32),
                "fp64": np.dtype(np.float64),
            }
        )
    if t.is_ptr():
        return np.dtype(np.int64)
    return _NP[t.name]


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
