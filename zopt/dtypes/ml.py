"""Zarr v3 data types for the sub-byte and ML types of zarr-extensions, backed by ml_dtypes.

Each class wraps one ``ml_dtypes`` scalar type as a zarr-python ``ZDType`` and is registered
through the ``zarr.data_type`` entry point group, so ``zarr.open`` finds it without
``import zopt``.

Fill values follow zarr-extensions ``data-types/<name>/README.md``:

- integer types (``int2``, ``uint2``, ``int4``, ``uint4``): a JSON integer in range;
- float types: a JSON number, ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, or a hex string
  ``"0x…"`` of the bit pattern (sign bit first, independent of endianness). ``"NaN"`` and
  ``"±Infinity"`` are refused for types that cannot represent them (float4, float6, and the
  ``fn``/``fnu`` types for infinity). On write, a canonical NaN is ``"NaN"``, any other NaN
  payload is written as hex so the bit pattern survives.

The element bit patterns (``to_bits``/``from_bits``) are what the ``bytes`` and ``packbits``
codecs store: ``bits`` significant bits per element, least significant first.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypeAlias, TypeGuard, cast

import ml_dtypes
import numpy as np
from zarr.core.dtype.common import HasEndianness, HasItemSize
from zarr.core.dtype.wrapper import ZDType

from zopt.compat.zarr_compat import DataTypeValidationError
from zopt.errors import OptionError

if TYPE_CHECKING:
    from zarr.core.common import JSON
    from zarr.core.dtype.common import DTypeJSON

__all__ = [
    "MLDType",
    "MLFloat",
    "MLInt",
    "ML_DTYPES",
    "Int2",
    "UInt2",
    "Int4",
    "UInt4",
    "Float4E2M1FN",
    "Float6E2M3FN",
    "Float6E3M2FN",
    "BFloat16",
    "Float8E3M4",
    "Float8E4M3",
    "Float8E4M3B11FNUZ",
    "Float8E4M3FNUZ",
    "Float8E5M2",
    "Float8E5M2FNUZ",
    "Float8E8M0FNU",
]

_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
#: a number cast_scalar takes (a numpy scalar of the type itself passes as one)
_Number: TypeAlias = "float | np.number[Any] | np.bool_"
_UINT_FOR_ITEMSIZE: dict[int, type[np.unsignedinteger]] = {1: np.uint8, 2: np.uint16}


@dataclass(frozen=True, kw_only=True)
class MLDType(ZDType[np.dtype, np.generic], HasItemSize):
    """Base class: one ml_dtypes type as a Zarr v3 data type.

    Class attributes
    ----------------
    ml_type : the ml_dtypes scalar type.
    bits : number of significant bits per element (2, 4, 6, 8 or 16).
    signed : True for two's-complement integer types (bytes writes them sign-extended).
    """

    ml_type: ClassVar[type]
    bits: ClassVar[int]
    signed: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "ml_type" in cls.__dict__:
            cls.dtype_cls = type(np.dtype(cls.ml_type))

    # -- native dtype ------------------------------------------------------------------------
    @classmethod
    def _check_native_dtype(cls, dtype: np.dtype) -> TypeGuard[np.dtype]:
        return isinstance(dtype, np.dtype) and type(dtype) is cls.dtype_cls

    @classmethod
    def _made(cls, ok: bool, message: str) -> Self:
        """The type (default parameters) if ``ok``, else DataTypeValidationError(message)."""
        if ok:
            return cls()
        raise DataTypeValidationError(message)

    @classmethod
    def from_native_dtype(cls, dtype: np.dtype) -> Self:
        return cls._made(cls._check_native_dtype(dtype),
                         f"Invalid data type: {dtype!r}. Expected the ml_dtypes type {cls.ml_type.__name__}.")

    def to_native_dtype(self) -> np.dtype:
        return np.dtype(self.ml_type)

    @property
    def item_size(self) -> int:
        return np.dtype(self.ml_type).itemsize

    # -- JSON for the data type ------------------------------------------------------------
    @classmethod
    def _check_json_v3(cls, data: DTypeJSON) -> bool:
        return data == cls._zarr_v3_name or (
            isinstance(data, dict)
            and data.get("name") == cls._zarr_v3_name
            and not data.get("configuration")
            and set(data) <= {"name", "configuration"}
        )

    @classmethod
    def _from_json_v3(cls, data: DTypeJSON) -> Self:
        return cls._made(cls._check_json_v3(data),
                         f"Invalid JSON for data type {cls._zarr_v3_name}: {data!r}. Expected {cls._zarr_v3_name!r}.")

    @classmethod
    def _from_json_v2(cls, data: DTypeJSON) -> Self:
        raise DataTypeValidationError(
            f"{cls._zarr_v3_name} is a Zarr v3 extension data type; Zarr v2 has no JSON for it."
        )

    def to_json(self, zarr_format: Literal[2, 3]) -> Any:
        if zarr_format == 3:
            return self._zarr_v3_name
        raise OptionError("zarr_format",
            f"{self._zarr_v3_name} can only be stored in Zarr format 3, got {zarr_format}"
        )

    # -- element bit patterns ----------------------------------------------------------------
    @property
    def _uint(self) -> type[np.unsignedinteger]:
        return _UINT_FOR_ITEMSIZE[self.item_size]

    def to_bits(self, values: np.ndarray) -> np.ndarray:
        """Bit pattern of each element, zero-extended: ``bits`` low bits, higher bits 0.

        values: array of this dtype, any shape. Returns an unsigned integer array of the
        same shape (uint8 for 1-byte types, uint16 for bfloat16).
        """
        values = np.asarray(values)
        raw = np.ascontiguousarray(values).view(self._uint).reshape(values.shape)
        if self.bits == 8 * self.item_size:
            return raw
        return raw & self._uint((1 << self.bits) - 1)

    def from_bits(self, bits: np.ndarray) -> np.ndarray:
        """Inverse of ``to_bits``: bits above ``bits`` are ignored. Same shape, this dtype."""
        bits = np.asarray(bits)
        raw = np.ascontiguousarray(bits, dtype=self._uint).reshape(bits.shape)
        if self.bits != 8 * self.item_size:
            raw = raw & self._uint((1 << self.bits) - 1)
        return raw.view(self.to_native_dtype()).reshape(bits.shape)

    def to_stored_bytes(self, values: np.ndarray) -> np.ndarray:
        """One stored unit per element as the ``bytes`` codec writes it (native byte order).

        Sub-byte signed integers are sign-extended to the full byte (int4 -8 → 0xF8), as
        zarrs and tensorstore write them; other types are zero-extended.
        """
        pattern = self.to_bits(values)
        if self.signed and self.bits < 8:
            shift = 8 - self.bits
            return ((pattern.view(np.int8) << shift) >> shift).view(np.uint8)
        return pattern

    # -- scalars -----------------------------------------------------------------------------
    def default_scalar(self) -> np.generic:
        return self.ml_type(0)

    def _check_scalar(self, data: object) -> TypeGuard[_Number]:
        return isinstance(data, int | float | np.integer | np.floating | np.bool_) or (
            isinstance(data, np.generic) and data.dtype == self.to_native_dtype()
        )

    def cast_scalar(self, data: object) -> np.generic:
        if isinstance(data, np.generic) and data.dtype == self.to_native_dtype():
            return data
        if isinstance(data, str):
            return self.from_json_scalar(data, zarr_format=3)
        if not self._check_scalar(data):
            raise TypeError(f"Cannot convert {data!r} to a scalar of data type {self._zarr_v3_name}")
        return self._from_number(data)

    def _from_number(self, data: _Number) -> np.generic:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class MLInt(MLDType):
    """Sub-byte two's-complement or unsigned integers (int2, uint2, int4, uint4)."""

    @property
    def min(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def max(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    def _from_number(self, data: _Number) -> np.generic:
        if isinstance(data, float | np.floating):
            if not float(data).is_integer():
                raise OptionError("fill_value", f"{data!r} is not an integer ({self._zarr_v3_name})")
            data = int(data)
        value = int(data)
        if not self.min <= value <= self.max:
            raise OptionError("fill_value",
                f"{value} is out of range for {self._zarr_v3_name} "
                f"(allowed {self.min}..{self.max})"
            )
        return self.ml_type(value)

    def from_json_scalar(self, data: JSON, *, zarr_format: int) -> np.generic:
        if isinstance(data, bool) or not isinstance(data, int):
            raise TypeError(
                f"fill_value: {self._zarr_v3_name} takes a JSON integer in "
                f"{self.min}..{self.max}, got {data!r}"
            )
        return self._from_number(data)

    def to_json_scalar(self, data: object, *, zarr_format: int) -> int:
        return int(self.cast_scalar(data))


@dataclass(frozen=True, kw_only=True)
class MLFloat(MLDType):
    """Floating-point ML types (float4/6/8, bfloat16)."""

    has_nan: ClassVar[bool] = True
    has_inf: ClassVar[bool] = True

    @property
    def canonical_nan_bits(self) -> int | None:
        """Bit pattern of ml_dtypes' NaN, which is the one zarr-extensions names "NaN"."""
        if not self.has_nan:
            return None
        return int(np.array(np.nan, self.ml_type).view(self._uint))

    def _bits_of(self, value: np.generic) -> int:
        return int(np.array(value, self.to_native_dtype()).view(self._uint))

    def _from_bits_int(self, pattern: int) -> np.generic:
        if pattern >> self.bits:
            raise OptionError("fill_value",
                f"hex bit pattern {pattern:#x} has more than {self.bits} bits "
                f"({self._zarr_v3_name})"
            )
        return cast(np.generic, self.from_bits(np.array(pattern, self._uint))[()])  # a 0-d array's scalar

    def _from_number(self, data: _Number) -> np.generic:
        x = float(data)
        if math.isnan(x):
            if not self.has_nan:
                raise OptionError("fill_value", f"{self._zarr_v3_name} has no NaN")
            return self.ml_type(np.nan)
        if math.isinf(x):
            if not self.has_inf:
                raise OptionError("fill_value", f"{self._zarr_v3_name} has no infinity")
            return self.ml_type(x)
        finfo = ml_dtypes.finfo(self.ml_type)
        if abs(x) > float(finfo.max) and self.to_native_dtype().type(x) != x:
            # ml_dtypes saturates or turns overflow into NaN/inf: refuse instead
            raise OptionError("fill_value",
                f"{x!r} is out of range for {self._zarr_v3_name} "
                f"(largest finite value {float(finfo.max)!r})"
            )
        value = self.ml_type(x)
        if math.isnan(float(value)):
            raise OptionError("fill_value", f"{x!r} is not representable in {self._zarr_v3_name}")
        return value

    def from_json_scalar(self, data: JSON, *, zarr_format: int) -> np.generic:
        if isinstance(data, str):
            if data == "NaN":
                return self._from_number(math.nan)
            if data == "Infinity":
                return self._from_number(math.inf)
            if data == "-Infinity":
                return self._from_number(-math.inf)
            if _HEX.match(data):
                return self._from_bits_int(int(data, 16))
            raise OptionError("fill_value",
                f"{data!r} is not valid for {self._zarr_v3_name}; allowed: a number, "
                '"NaN", "Infinity", "-Infinity" or a hex bit pattern such as "0x3f80"'
            )
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise TypeError(f"fill_value: {data!r} is not valid for {self._zarr_v3_name}")
        return self._from_number(data)

    def to_json_scalar(self, data: object, *, zarr_format: int) -> float | str:
        value = self.cast_scalar(data)
        x = float(value)
        if math.isnan(x):
            pattern = self._bits_of(value)
            if pattern == self.canonical_nan_bits:
                return "NaN"
            width = max(1, math.ceil(self.bits / 4))
            return f"0x{pattern:0{width}x}"
        if math.isinf(x):
            return "Infinity" if x > 0 else "-Infinity"
        return x


# -- the concrete types ------------------------------------------------------------------------


def _concrete(cls_name: str, base: type[MLDType], name: str, bits: int, **flags: bool) -> Any:
    """The concrete type ``cls_name``: zarr's ``name``, ``ml_dtypes.<name>`` in memory, ``bits``
    wide, ``flags`` (``signed``, ``has_nan``, ``has_inf``) set; a frozen dataclass of ``base`` with
    no fields of its own, made here so that the entry points and pickles find it in this module."""
    namespace = {"__module__": __name__, "__qualname__": cls_name, "_zarr_v3_name": name,
                 "ml_type": getattr(ml_dtypes, name), "bits": bits, **flags}
    return dataclass(frozen=True, kw_only=True)(type(cls_name, (base,), namespace))


Int2 = _concrete("Int2", MLInt, "int2", 2, signed=True)
UInt2 = _concrete("UInt2", MLInt, "uint2", 2)
Int4 = _concrete("Int4", MLInt, "int4", 4, signed=True)
UInt4 = _concrete("UInt4", MLInt, "uint4", 4)
Float4E2M1FN = _concrete("Float4E2M1FN", MLFloat, "float4_e2m1fn", 4, has_nan=False, has_inf=False)
Float6E2M3FN = _concrete("Float6E2M3FN", MLFloat, "float6_e2m3fn", 6, has_nan=False, has_inf=False)
Float6E3M2FN = _concrete("Float6E3M2FN", MLFloat, "float6_e3m2fn", 6, has_nan=False, has_inf=False)
Float8E3M4 = _concrete("Float8E3M4", MLFloat, "float8_e3m4", 8)
Float8E4M3 = _concrete("Float8E4M3", MLFloat, "float8_e4m3", 8)
Float8E4M3B11FNUZ = _concrete("Float8E4M3B11FNUZ", MLFloat, "float8_e4m3b11fnuz", 8, has_inf=False)
Float8E4M3FNUZ = _concrete("Float8E4M3FNUZ", MLFloat, "float8_e4m3fnuz", 8, has_inf=False)
Float8E5M2 = _concrete("Float8E5M2", MLFloat, "float8_e5m2", 8)
Float8E5M2FNUZ = _concrete("Float8E5M2FNUZ", MLFloat, "float8_e5m2fnuz", 8, has_inf=False)


@dataclass(frozen=True, kw_only=True)
class BFloat16(MLFloat, HasEndianness):
    """bfloat16: 2 bytes, so the ``bytes`` codec's ``endian`` applies.

    numpy has no byte-swapped bfloat16 dtype; the in-memory type is always native and the
    ``bytes`` codec swaps through a uint16 view.
    """

    _zarr_v3_name: ClassVar[str] = "bfloat16"
    ml_type = ml_dtypes.bfloat16
    bits = 16

    @classmethod
    def from_native_dtype(cls, dtype: np.dtype) -> Self:
        # little-endian whatever the host (zarr 3.4's default is the host's byte order)
        return replace(super().from_native_dtype(dtype), endianness="little")


@dataclass(frozen=True, kw_only=True)
class Float8E8M0FNU(MLFloat):
    """Powers of two only: no zero, no sign, no infinity; 0xFF is NaN."""

    _zarr_v3_name: ClassVar[str] = "float8_e8m0fnu"
    ml_type = ml_dtypes.float8_e8m0fnu
    bits = 8
    has_inf = False

    def default_scalar(self) -> np.generic:
        # the type has no zero; 1.0 (0x7f) is the neutral choice
        return self.ml_type(1.0)

    def _from_number(self, data: _Number) -> np.generic:
        x = float(data)
        if not math.isnan(x) and (x <= 0 or math.isinf(x)):
            raise OptionError("fill_value",
                f"{x!r} is not representable in float8_e8m0fnu (positive powers of two only)"
            )
        return super()._from_number(x)


ML_DTYPES: dict[str, type[MLDType]] = {
    cls._zarr_v3_name: cls
    for cls in (
        Int2,
        UInt2,
        Int4,
        UInt4,
        Float4E2M1FN,
        Float6E2M3FN,
        Float6E3M2FN,
        BFloat16,
        Float8E3M4,
        Float8E4M3,
        Float8E4M3B11FNUZ,
        Float8E4M3FNUZ,
        Float8E5M2,
        Float8E5M2FNUZ,
        Float8E8M0FNU,
    )
}
