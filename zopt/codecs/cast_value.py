"""``cast_value``: array → array, converts each value to another real data type.

Spec: ``../shared/specs/scale_offset_cast_value.md`` (zarr-extensions ``codecs/cast_value``).
Encode casts the array's data type to ``data_type``, decode casts back, both by the procedure
of ``zopt.codecs.exact_cast`` (scalar_map, exact, ``rounding``, ``out_of_range``, else error).
Every real type works on both sides, ``int2`` … ``uint64``, ``float4_e2m1fn``, ``float6_*``,
``float8_*``, ``bfloat16``, ``float16``/``32``/``64``.

Configuration (``rounding`` defaults to ``nearest-even``; ``out_of_range`` absent means error):

- ``data_type`` : the target Zarr v3 data type name (required).
- ``rounding`` : ``nearest-even``, ``towards-zero``, ``towards-positive``, ``towards-negative``,
  ``nearest-away``.
- ``out_of_range`` : ``clamp`` or ``wrap``; ``wrap`` needs an integer ``data_type``. On decode,
  where the target is the array's type, ``wrap`` applies only when that type is an integer;
  a decoded value out of range of a float type is an error.
- ``scalar_map`` : ``{"encode": [[in, out], …], "decode": [[in, out], …]}``, each scalar in
  the fill-value JSON encoding of its side (hex strings included). Matching: IEEE equality,
  any NaN matches a NaN key, the first matching entry wins, no chaining (as cast-value-rs;
  zarrs compares bit patterns — see docs/interop.md).

The fill value is encoded with the same rules and must decode back to itself (NaN to NaN, −0.0
to −0.0); otherwise the array is refused when zopt's codec pipeline opens or creates it, or at
the first write. One exception: zarr >= 3.4 validates a shard's inner codecs against a fill of
0 that is not the array's (``zopt.compat.zarr_compat.placeholder_fill_validation``); that 0 is
not refused, and the array's real fill is checked when the shard's inner chain is built for
its first read or write.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from zarr.abc.codec import ArrayArrayCodec

from zopt.codecs.config import codec_configuration, parse_json_scalar
from zopt.codecs.context import describe_current_chunk
from zopt.codecs.exact_cast import CastError, cast_array, check_cast_options
from zopt.compat.zarr_compat import nd_buffer, placeholder_fill_validation
from zopt.dtypes.numeric import numeric_info, zarr_dtype
from zopt.errors import OptionError

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import NDBuffer
    from zarr.core.dtype.common import DTypeJSON
    from zarr.core.dtype.wrapper import ZDType

__all__ = ["CastValueCodec"]

_KEYS = {"data_type", "rounding", "out_of_range", "scalar_map"}


def _check_scalar_map(scalar_map: object) -> dict[str, list[list[Any]]] | None:
    if scalar_map is None:
        return None
    if not isinstance(scalar_map, dict) or set(scalar_map) - {"encode", "decode"}:
        raise OptionError("scalar_map", f"expected an object with 'encode' and/or 'decode' lists, got {scalar_map!r}")
    out = {}
    for direction, entries in scalar_map.items():
        if not isinstance(entries, list | tuple) or not all(
            isinstance(e, list | tuple) and len(e) == 2 for e in entries
        ):
            raise OptionError("scalar_map", label=f"scalar_map {direction}", message=f"expected a list of [input, output] pairs, got {entries!r}")
        out[direction] = [list(e) for e in entries]
    return out


def _same_value(a: np.ndarray, b: np.ndarray) -> bool:
    a64, b64 = np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64)
    if np.isnan(a64) or np.isnan(b64):
        return bool(np.isnan(a64) and np.isnan(b64))
    return bool(a64 == b64 and np.signbit(a64) == np.signbit(b64))


@dataclass(frozen=True)
class CastValueCodec(ArrayArrayCodec):
    """cast_value (see module docstring). Raises ValueError naming the parameter at construction
    for an unknown data type, rounding, out_of_range or a malformed scalar_map."""

    is_fixed_size = True

    data_type: str
    rounding: str = "nearest-even"
    out_of_range: str | None = None
    scalar_map: dict[str, list[list[Any]]] | None = None

    def __init__(self, *, data_type: DTypeJSON, rounding: str = "nearest-even", out_of_range: str | None = None,
                 scalar_map: object = None) -> None:
        target = zarr_dtype(data_type)
        info = numeric_info(target.to_native_dtype())
        object.__setattr__(self, "target", target)  # what the cached property would compute
        check_cast_options(rounding, out_of_range, info)
        object.__setattr__(self, "data_type", data_type)
        object.__setattr__(self, "rounding", rounding)
        object.__setattr__(self, "out_of_range", out_of_range)
        object.__setattr__(self, "scalar_map", _check_scalar_map(scalar_map))
        # target-typed halves of scalar_map can be checked now
        self._map("encode", None)
        self._map("decode", None)

    def __hash__(self) -> int:
        return hash((json.dumps(self.data_type), self.rounding, self.out_of_range, json.dumps(self.scalar_map)))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        config = codec_configuration(data, "cast_value", _KEYS, required=True)
        if "data_type" not in config:
            raise OptionError("data_type", label="cast_value data_type", message="required (the target Zarr v3 data type)")
        return cls(**config)

    def to_dict(self) -> dict[str, Any]:
        config: dict[str, Any] = {"data_type": self.data_type, "rounding": self.rounding}
        if self.out_of_range is not None:
            config["out_of_range"] = self.out_of_range
        if self.scalar_map is not None:
            config["scalar_map"] = self.scalar_map
        return {"name": "cast_value", "configuration": config}

    @functools.cached_property
    def target(self) -> ZDType[Any, Any]:
        """The target data type as a zarr ``ZDType`` (made in ``__init__``, which validates it)."""
        target: ZDType[Any, Any] = zarr_dtype(self.data_type)
        return target

    def _map(self, direction: str, source: ZDType[Any, Any] | None) -> tuple[tuple[np.generic, np.generic], ...]:
        """scalar_map entries of ``direction`` as (input, output) scalars; ``source`` is the array's
        ZDType (None: check only the target-typed side)."""
        return _parsed_map(json.dumps(self.data_type), json.dumps(self.scalar_map), direction, source)

    def _decode_out_of_range(self, source: ZDType[Any, Any]) -> str | None:
        if self.out_of_range == "wrap" and not numeric_info(source.to_native_dtype()).is_int:
            return None
        return self.out_of_range

    def encode_array(self, values: np.ndarray, source: ZDType[Any, Any], where: str | None = None) -> np.ndarray:
        """Cast ``values`` (``source``'s native dtype, any shape) to the target; CastError if one cannot."""
        return cast_array(values, self.target.to_native_dtype(), rounding=self.rounding,
                          out_of_range=self.out_of_range, scalar_map=self._map("encode", source), where=where)

    def decode_array(self, values: np.ndarray, source: ZDType[Any, Any], where: str | None = None) -> np.ndarray:
        """Cast stored ``values`` (target dtype) back to ``source``'s native dtype."""
        return cast_array(values, source.to_native_dtype(), rounding=self.rounding,
                          out_of_range=self._decode_out_of_range(source),
                          scalar_map=self._map("decode", source), where=where)

    def validate(self, *, shape: tuple[int, ...], dtype: ZDType[Any, Any], chunk_grid: object) -> None:
        pass  # the input type is only known in the chain (resolve_metadata); see module docstring

    def resolve_metadata(self, chunk_spec: ArraySpec) -> ArraySpec:
        source = chunk_spec.dtype
        try:
            numeric_info(source.to_native_dtype())
        except ValueError as exc:
            raise OptionError("cast_value", f"only real number data types can be cast, not {source}") from exc
        fill = np.asarray(chunk_spec.fill_value).astype(source.to_native_dtype()).reshape(())
        target = self.target
        try:
            encoded = self.encode_array(fill, source)
            back = self.decode_array(encoded, source)
        except CastError as exc:
            if placeholder_fill_validation():  # zarr 3.4's fill 0 for a shard's inner codecs
                return replace(chunk_spec, dtype=target, fill_value=target.default_scalar())
            raise OptionError("fill_value", f"{fill[()]!r} cannot be cast by cast_value to {self.data_type}: {exc}") from exc
        if not _same_value(back, fill) and not placeholder_fill_validation():
            raise OptionError("fill_value", f"{fill[()]!r} does not survive cast_value to {self.data_type}: it encodes "
                             f"to {encoded[()]!r}, which decodes to {back[()]!r}; choose a fill value the target "
                             "represents exactly or map it with scalar_map")
        return replace(chunk_spec, dtype=target, fill_value=target.cast_scalar(encoded[()]))

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        from zarr.core.dtype.common import HasItemSize

        n = int(np.prod(chunk_spec.shape, dtype=np.int64))
        target = self.target
        if not isinstance(target, HasItemSize):
            raise NotImplementedError(f"cast_value: the target {target} has no fixed item size")
        return n * target.item_size

    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        out = self.encode_array(np.asarray(chunk_array.as_ndarray_like()), chunk_spec.dtype, describe_current_chunk())
        return nd_buffer(chunk_spec, out)

    def _decode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        out = self.decode_array(np.asarray(chunk_array.as_ndarray_like()), chunk_spec.dtype, describe_current_chunk())
        return nd_buffer(chunk_spec, out)

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        return self._encode_sync(chunk_array, chunk_spec)

    async def _decode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        return self._decode_sync(chunk_array, chunk_spec)


@functools.lru_cache(maxsize=256)
def _parsed_map(data_type_json: str, scalar_map_json: str, direction: str, source: ZDType[Any, Any] | None,
                ) -> tuple[tuple[Any, Any], ...]:
    scalar_map = json.loads(scalar_map_json)
    if not scalar_map or direction not in scalar_map:
        return ()
    target = zarr_dtype(json.loads(data_type_json))
    key_type, value_type = (source, target) if direction == "encode" else (target, source)
    out = []
    for i, (k, v) in enumerate(scalar_map[direction]):
        where = f"scalar_map {direction}[{i}]"
        key = parse_json_scalar(k, key_type, f"{where} input") if key_type is not None else None
        value = parse_json_scalar(v, value_type, f"{where} output") if value_type is not None else None
        out.append((key, value))
    return tuple(out)
