"""What the value-converting codecs need to know about a real data type.

``numeric_info(dtype)`` describes a numpy dtype of zarr's real types — ``int8`` … ``uint64``,
``float16``/``float32``/``float64`` — or of zopt's ml_dtypes types (``int2``/``uint2``/``int4``/
``uint4``, ``float4_e2m1fn``, ``float6_*``, ``float8_*``, ``bfloat16``): integer range, and for
floats the sorted table of every finite value (types of at most 16 bits), which special values
exist, and the "virtual" neighbours one step beyond the largest and smallest finite value that
rounding with an unbounded exponent would reach (used to tell rounding from overflow).

``zopt.codecs.config.parse_json_scalar(value, zdtype, parameter)`` reads a scalar written in the Zarr v3
fill-value JSON encoding of a data type (``scale_offset``'s ``offset``/``scale``,
``cast_value``'s ``scalar_map``), more strictly than zarr-python: an integer type takes only a
JSON integer (``1.0`` is refused), and a finite JSON number that overflows a float type is an
error rather than infinity.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt
    from zarr.core.dtype.common import DTypeJSON
from zopt.errors import OptionError

__all__ = ["NumericInfo", "numeric_info", "zarr_dtype"]

_ML_INTS = {np.dtype(t) for t in (ml_dtypes.int2, ml_dtypes.uint2, ml_dtypes.int4, ml_dtypes.uint4)}


@dataclass(frozen=True, eq=False)
class NumericInfo:
    """A real data type as the cast kernels see it (build with ``numeric_info``).

    dtype : the numpy dtype.  name : its zarr v3 name.  bits : significant bits per element.
    is_int, signed : integer types; ``lo``/``hi`` their range (Python ints).
    Floats: ``nmant`` stored mantissa bits; ``max`` largest finite value; ``has_nan``,
    ``has_inf``, ``has_neg_zero``; for types of at most 16 bits ``values`` (float64, sorted,
    finite, one zero) with their bit patterns ``codes`` — extended at both ends by the virtual
    neighbours, whose code is ``-1`` — and ``positions``, the index in ``values`` of every bit
    pattern (−0 → the zero; NaN and ±Infinity → −1).
    """

    dtype: np.dtype
    name: str
    bits: int
    is_int: bool
    signed: bool
    lo: int = 0
    hi: int = 0
    nmant: int = 0
    max: float = 0.0
    has_nan: bool = False
    has_inf: bool = False
    has_neg_zero: bool = False
    values: np.ndarray | None = None
    codes: np.ndarray | None = None
    nan_code: int = -1
    zero_code: int = 0
    neg_zero_code: int = -1
    positions: np.ndarray | None = None

    def _table(self, name: str) -> np.ndarray:
        """``values``, ``codes`` or ``positions``; ValueError for a type without them (over 16 bits)."""
        table: np.ndarray | None = getattr(self, name)
        if table is None:
            raise ValueError(f"{self.name}: no {name} table (types of at most 16 bits have one)")
        return table

    @functools.cached_property
    def value_table(self) -> np.ndarray:
        """``values``; ValueError for a type without it (over 16 bits)."""
        return self._table("values")

    @functools.cached_property
    def position_table(self) -> np.ndarray:
        """``positions``; ValueError for a type without it (over 16 bits)."""
        return self._table("positions")

    @functools.cached_property
    def midpoints(self) -> np.ndarray:
        """``(values[i] + values[i+1]) / 2`` (exact in float64)."""
        values = self._table("values")
        return (values[:-1] + values[1:]) * 0.5

    @functools.cached_property
    def odd_codes(self) -> np.ndarray:
        """True where ``codes`` is odd (ties to even pick the other neighbour)."""
        return (self._table("codes") & 1) == 1

    @functools.cached_property
    def out_codes(self) -> np.ndarray:
        """``codes`` in the type's unsigned integer width (virtual neighbours → 0)."""
        codes = self._table("codes")
        return np.where(codes < 0, 0, codes).astype(self.code_dtype)

    @property
    def code_dtype(self) -> np.dtype:
        return np.dtype(f"u{self.dtype.itemsize}")

    def from_codes(self, codes: np.ndarray) -> np.ndarray:
        """Bit patterns (any integer array) → an array of this type."""
        return np.asarray(codes).astype(self.code_dtype).view(self.dtype)

    def describe_range(self) -> str:
        if self.is_int:
            return f"[{self.lo}, {self.hi}]"
        return f"[{-self.max if self.signed else float(self._table('values')[1])}, {self.max}]"


def _bits_of(dtype: np.dtype) -> int:
    if dtype in _ML_INTS:
        return int(ml_dtypes.iinfo(dtype).bits)
    if dtype.kind == "V" or dtype.type.__module__.startswith("ml_dtypes"):
        return int(ml_dtypes.finfo(dtype).bits)
    return dtype.itemsize * 8


@functools.cache
def numeric_info(dtype: npt.DTypeLike) -> NumericInfo:
    """Describe ``dtype`` (numpy dtype or name); ValueError if it is not a real number type."""
    dtype = np.dtype(dtype)
    name = dtype.name
    if dtype in _ML_INTS or dtype.kind in "iu":
        ii = ml_dtypes.iinfo(dtype) if dtype in _ML_INTS else np.iinfo(dtype)
        return NumericInfo(dtype, name, _bits_of(dtype), True, int(ii.min) < 0, int(ii.min), int(ii.max))
    is_ml_float = dtype.type.__module__.startswith("ml_dtypes")
    if dtype.kind != "f" and not is_ml_float:
        raise OptionError("data_type", f"{name!r} is not a real integer or floating-point type")
    bits = _bits_of(dtype)
    fi = ml_dtypes.finfo(dtype) if is_ml_float else np.finfo(dtype)
    kw: dict[str, Any] = {"nmant": int(fi.nmant), "max": float(fi.max)}
    if bits <= 16:
        codes = np.arange(1 << bits, dtype=np.int64)
        with np.errstate(invalid="ignore"):
            vals = codes.astype(np.dtype(f"u{dtype.itemsize}")).view(dtype).astype(np.float64)
        finite = np.isfinite(vals)
        neg_zero = finite & (vals == 0) & np.signbit(vals)
        keep = finite & ~neg_zero
        order = np.argsort(vals[keep], kind="stable")
        v, c = vals[keep][order], codes[keep][order]
        top_ulp = math.ldexp(1.0, math.floor(math.log2(v[-1])) - kw["nmant"])
        signed = bool(v[0] < 0)
        positions = np.full(codes.size, -1, np.int32)
        positions[c] = np.arange(1, c.size + 1)
        positions[neg_zero] = positions[c[v == 0][0]] if (v == 0).any() else -1
        low_virtual = -(v[-1] + top_ulp) if signed else v[0] / 2
        kw.update(
            values=np.concatenate([[low_virtual], v, [v[-1] + top_ulp]]),
            codes=np.concatenate([[-1], c, [-1]]),
            has_nan=bool(np.isnan(vals).any()),
            has_inf=bool(np.isinf(vals).any()),
            has_neg_zero=bool(neg_zero.any()),
            nan_code=int(codes[np.isnan(vals)][0]) if np.isnan(vals).any() else -1,
            zero_code=int(c[v == 0][0]) if (v == 0).any() else -1,
            neg_zero_code=int(codes[neg_zero][0]) if neg_zero.any() else -1,
            positions=positions,
        )
        return NumericInfo(dtype, name, bits, False, signed, **kw)
    return NumericInfo(dtype, name, bits, False, True, has_nan=True, has_inf=True, has_neg_zero=True, **kw)


def zarr_dtype(name_or_json: DTypeJSON) -> Any:
    """The zarr-python ``ZDType`` for a Zarr v3 data type name (zopt's types included)."""
    from zarr.core.dtype import get_data_type_from_json

    from zopt.dtypes import register_data_types

    register_data_types()  # zarr 3.1-3.3 do not load the zarr.data_type entry points

    try:
        return get_data_type_from_json(name_or_json, zarr_format=3)
    except (ValueError, KeyError, TypeError) as exc:
        raise OptionError("data_type", f"{name_or_json!r} is not a Zarr v3 data type zarr knows ({exc})") from exc
