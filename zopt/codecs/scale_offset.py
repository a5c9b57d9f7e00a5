"""``scale_offset``: array → array, ``(x - offset) * scale`` in the array's own data type.

Spec: ``../shared/specs/scale_offset_cast_value.md`` (zarr-extensions ``codecs/scale_offset``).
Encode ``y = (x - offset) * scale``, decode ``x = y / scale + offset``; the data type is
unchanged and the arithmetic stays in it — for a float32 array ``scale: 0.1`` means
``float32(0.1)`` and every step rounds to float32. There is no promotion:

- integer types (``int2`` … ``uint64``): exact arithmetic; any intermediate or final value
  outside the type's range is an error (``int8``: ``127 - (-1)`` overflows before the multiply),
  and so is a decode whose division leaves a remainder. ``offset``/``scale`` must be JSON
  integers (``1.0`` is refused).
- ``float32``/``float64``: numpy's IEEE arithmetic in that type. ``float16``, ``bfloat16``,
  ``float8_*``, ``float6_*``, ``float4_e2m1fn``: each operation is computed in float64 and rounded
  once to the type (nearest-even) by ``zopt.codecs.exact_cast`` — the same result as native
  arithmetic, because float64 has more than twice their precision plus two bits, so the double
  rounding is innocuous. A finite value whose result overflows the type is an error; NaN and
  ±Infinity pass through.

``offset`` and ``scale`` use the data type's fill-value JSON encoding (numbers, ``"0x…"`` hex
strings); defaults 0 and 1; the configuration may be omitted (the codec is then the identity);
unknown keys are refused. ``scale`` equal to zero in any spelling, and a NaN or infinite
``offset``/``scale`` (the transform would not be invertible), are errors. The fill value is
encoded with the same formula; one that cannot be (uint16 with ``offset: 1000`` and fill 0) is an
error when the array is created (through zopt's codec pipeline) or first written.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Self, cast

import numpy as np
from zarr.abc.codec import ArrayArrayCodec

from zopt.codecs.config import codec_configuration, parse_json_scalar
from zopt.codecs.context import describe_current_chunk
from zopt.codecs.exact_cast import CastError, cast_array, cast_error
from zopt.compat.zarr_compat import nd_buffer, placeholder_fill_validation
from zopt.dtypes.numeric import NumericInfo, numeric_info
from zopt.errors import OptionError

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import NDBuffer
    from zarr.core.dtype.wrapper import ZDType

__all__ = ["ScaleOffsetCodec", "scale_offset_decode", "scale_offset_encode"]

_NATIVE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _fail(direction: str, info: NumericInfo, values: np.ndarray, bad: np.ndarray, why: str,
          where: str | None, count: int | None = None) -> None:
    flat = np.flatnonzero(bad)
    count = int(flat.size) if count is None else count
    raise cast_error(f"scale_offset {direction} {info.name}", values, int(flat[0]), why, rule=why, count=count,
                     where=where)


def _mul_range(lo: int, hi: int, s: int) -> tuple[int, int]:
    """The r with lo <= r*s <= hi (s != 0), as an inclusive range."""
    if s > 0:
        return -((-lo) // s), hi // s
    return -((-hi) // s), lo // s


def _outside(c: np.ndarray, info: NumericInfo, lo: int, hi: int) -> np.ndarray:
    """c (canonical int64/uint64) < lo or > hi, with the bounds clipped to the type."""
    lo, hi = max(lo, info.lo), min(hi, info.hi)
    if lo > hi:
        return np.ones(c.shape, bool)
    return (c < c.dtype.type(lo)) | (c > c.dtype.type(hi))


def _canonical_int(x: np.ndarray, info: NumericInfo) -> np.ndarray:
    return x.astype(np.uint64 if info.dtype == np.uint64 else np.int64)


def _round_to(info: NumericInfo, a64: np.ndarray, direction: str, values: np.ndarray, what: str,
              where: str | None) -> np.ndarray:
    """float64 results of one operation → ``info``'s type, nearest-even; overflow is an error."""
    try:
        return cast_array(a64, info.dtype)
    except CastError as exc:
        bad = np.zeros(values.shape, bool)
        bad[exc.position] = True
        _fail(direction, info, values, bad, f"overflows {info.name} in {what}", where, exc.count)
        raise  # pragma: no cover - _fail raises


def _f64(scalar: np.generic) -> float:
    return float(np.asarray(scalar).astype(np.float64))


def scale_offset_encode(x: np.ndarray, offset: np.generic, scale: np.generic, where: str | None = None) -> np.ndarray:
    """``(x - offset) * scale`` in ``x.dtype`` (any shape); see the module docstring.

    offset, scale : scalars of ``x.dtype`` (``parse_json_scalar``).
    Raises ``CastError`` (ValueError) naming the first value whose intermediate or final result
    is not representable, its index and ``where`` (the chunk).
    """
    info = numeric_info(x.dtype)
    if info.is_int:
        off, s = int(offset), int(scale)
        c = _canonical_int(x, info)
        bad = _outside(c, info, info.lo + off, info.hi + off)
        if bad.any():
            _fail("encode", info, x, bad, f"overflows {info.name} {info.describe_range()} in x - {off}", where)
        rlo, rhi = _mul_range(info.lo, info.hi, s)
        bad = _outside(c, info, rlo + off, rhi + off)
        if bad.any():
            _fail("encode", info, x, bad, f"overflows {info.name} {info.describe_range()} in (x - {off}) * {s}", where)
        with np.errstate(over="ignore"):  # wrapping arithmetic is exact once the range is checked
            return ((c - c.dtype.type(off)) * c.dtype.type(s)).astype(info.dtype)
    if info.dtype in _NATIVE_FLOATS:
        with np.errstate(over="ignore", invalid="ignore"):
            t = x - offset
            y = t * scale
        bad = np.isfinite(x) & ~np.isfinite(y)
        if bad.any():
            _fail("encode", info, x, bad, f"overflows {info.name} in (x - offset) * scale", where)
        return y
    t = _round_to(info, x.astype(np.float64) - _f64(offset), "encode", x, "x - offset", where)
    return _round_to(info, t.astype(np.float64) * _f64(scale), "encode", x, "(x - offset) * scale", where)


def scale_offset_decode(y: np.ndarray, offset: np.generic, scale: np.generic, where: str | None = None) -> np.ndarray:
    """``y / scale + offset`` in ``y.dtype``; integer division must be exact.

    Raises ``CastError`` naming the first value with a remainder or an overflow.
    """
    info = numeric_info(y.dtype)
    if info.is_int:
        off, s = int(offset), int(scale)
        c = _canonical_int(y, info)
        with np.errstate(over="ignore", divide="ignore"):
            rem = (c % c.dtype.type(s)) != 0  # s may be -2^63: no abs()
        if rem.any():
            _fail("decode", info, y, rem, f"is not a multiple of scale {s} (integer decode must be exact)", where)
        qlo, qhi = info.lo - off, info.hi - off
        ylo, yhi = (qlo * s, qhi * s) if s > 0 else (qhi * s, qlo * s)
        bad = _outside(c, info, ylo, yhi)
        if bad.any():
            _fail("decode", info, y, bad, f"overflows {info.name} {info.describe_range()} in y / {s} + {off}", where)
        with np.errstate(over="ignore", divide="ignore"):  # wrapping is exact once the range is checked
            q = c // c.dtype.type(s)  # exact: no remainder
            return (q + c.dtype.type(off)).astype(info.dtype)
    if info.dtype in _NATIVE_FLOATS:
        with np.errstate(over="ignore", invalid="ignore"):
            x = y / scale + offset
        bad = np.isfinite(y) & ~np.isfinite(x)
        if bad.any():
            _fail("decode", info, y, bad, f"overflows {info.name} in y / scale + offset", where)
        return x
    t = _round_to(info, y.astype(np.float64) / _f64(scale), "decode", y, "y / scale", where)
    return _round_to(info, t.astype(np.float64) + _f64(offset), "decode", y, "y / scale + offset", where)


@functools.lru_cache(maxsize=64)
def _parameters(offset: object, scale: object, zdtype: ZDType[Any, Any]) -> tuple[np.generic, np.generic]:
    native = zdtype.to_native_dtype()
    info = numeric_info(native)
    off = np.array(0).astype(native)[()] if offset is None else parse_json_scalar(offset, zdtype, "scale_offset offset")
    s = np.array(1).astype(native)[()] if scale is None else parse_json_scalar(scale, zdtype, "scale_offset scale")
    if not info.is_int:
        for name, v in (("offset", off), ("scale", s)):
            if not np.isfinite(np.asarray(v).astype(np.float64)):
                raise OptionError(name, label=f"scale_offset {name}", message=f"must be finite for {info.name}, got {v!r}")
    if np.asarray(s).astype(np.float64) == 0:
        raise OptionError("scale", label="scale_offset scale", message=f"must not be zero (got {scale!r} for {info.name}); "
                         "decoding divides by it")
    return cast(np.generic, off), cast(np.generic, s)  # numpy scalars (parse_json_scalar)


@dataclass(frozen=True)
class ScaleOffsetCodec(ArrayArrayCodec):
    """scale_offset (see module docstring).

    offset, scale : JSON scalars in the fill-value encoding of the array's data type, or None
        for the defaults 0 and 1. They are kept as given (a hex string stays a hex string).
    Raises ValueError for a value that is not a JSON scalar or a literal zero ``scale``; the
    rest (range, integer vs float, hex zero) is checked against the data type when the codec
    meets it.
    """

    is_fixed_size = True

    offset: Any = None
    scale: Any = None

    def __init__(self, *, offset: object = None, scale: object = None) -> None:
        for name, v in (("offset", offset), ("scale", scale)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float | str)):
                raise OptionError(name, label=f"scale_offset {name}", message=f"expected a JSON number or string in the data "
                                 f"type's fill-value encoding, got {v!r}")
        if scale is not None and not isinstance(scale, str) and scale == 0:
            raise OptionError("scale", label="scale_offset scale", message="must not be zero; decoding divides by it")
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "scale", scale)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        return cls(**codec_configuration(data, "scale_offset", {"offset", "scale"}))

    def to_dict(self) -> dict[str, Any]:
        config = {k: v for k, v in (("offset", self.offset), ("scale", self.scale)) if v is not None}
        return {"name": "scale_offset", "configuration": config} if config else {"name": "scale_offset"}

    def parameters(self, zdtype: ZDType[Any, Any]) -> tuple[np.generic, np.generic]:
        """(offset, scale) as scalars of ``zdtype``'s native dtype; ValueError if invalid for it."""
        try:
            numeric_info(zdtype.to_native_dtype())
        except ValueError as exc:
            raise OptionError("scale_offset", f"only real number data types are supported, not {zdtype}") from exc
        return _parameters(self.offset, self.scale, zdtype)

    def resolve_metadata(self, chunk_spec: ArraySpec) -> ArraySpec:
        off, s = self.parameters(chunk_spec.dtype)
        native = chunk_spec.dtype.to_native_dtype()
        fill = np.asarray(chunk_spec.fill_value).astype(native).reshape(())
        try:
            encoded = scale_offset_encode(fill, off, s)[()]
        except CastError as exc:
            if placeholder_fill_validation():  # zarr 3.4's fill 0 for a shard's inner codecs
                return chunk_spec
            raise OptionError("fill_value", f"{fill[()]!r} cannot be encoded by scale_offset: {exc}") from exc
        return replace(chunk_spec, fill_value=chunk_spec.dtype.cast_scalar(encoded))

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        return input_byte_length

    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        off, s = self.parameters(chunk_spec.dtype)
        out = scale_offset_encode(np.asarray(chunk_array.as_ndarray_like()), off, s, describe_current_chunk())
        return nd_buffer(chunk_spec, out)

    def _decode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        off, s = self.parameters(chunk_spec.dtype)
        out = scale_offset_decode(np.asarray(chunk_array.as_ndarray_like()), off, s, describe_current_chunk())
        return nd_buffer(chunk_spec, out)

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        return self._encode_sync(chunk_array, chunk_spec)

    async def _decode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        return self._decode_sync(chunk_array, chunk_spec)
