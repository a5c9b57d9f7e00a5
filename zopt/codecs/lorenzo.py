"""``zopt.lorenzo``: array → array codec replacing integers by their Lorenzo prediction residuals.

The Lorenzo predictor (Ibarria, Lindstrom, Rossignac & Szymczak 2003) predicts each element of an
``n``-d grid from its ``2^n - 1`` lower neighbours; its residual is the ``n``-fold finite
difference. zopt computes it as one first difference per dimension, in order 0, 1, …, each
taking the element before the first as 0:

    r = D_{n-1}( … D_1(D_0(q)) … ),   D_k(a)[…, i, …] = a[…, i, …] − a[…, i−1, …]  (a[…, −1, …] = 0)

over the whole chunk, in the chunk's own integer type with wrap-around (modulo ``2^bits``): exact,
no float arithmetic. Decoding is the inverse, a cumulative sum per dimension in reverse order
(sums commute, any order gives the same result), also modulo ``2^bits``. The data type, shape
and byte layout are unchanged: the residuals are stored as values of the input type (a residual
of −1 in ``uint16`` is 65535), so the next codec sees an array of the same type.

Configuration: optional ``axes``, the dimensions differenced (a strictly increasing list of
dimension indices; default: all, and then the configuration is omitted:
``{"name": "zopt.lorenzo"}``). ``{"name": "zopt.lorenzo", "configuration": {"axes": [1]}}``
differences dimension 1 only, e.g. along latitude of a ``(level, lat, lon)`` field whose levels
are far apart. Input: any integer data type of 8 to 64 bits; other types, or an axis beyond
the chunk's dimensions, are a ``ValueError`` naming the codec. Smooth fields of quantisation codes
(``zopt.lossy``: ``scale_offset`` + ``cast_value``) give residuals near 0, which pcodec or zstd
store in fewer bits than the codes. Readers need zopt (``--readers``, ``zopt.planning.readers``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from zarr.abc.codec import ArrayArrayCodec
from zarr.core.common import parse_named_configuration

from zopt.compat.zarr_compat import nd_buffer
from zopt.errors import OptionError

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import NDBuffer
    from zarr.core.dtype.wrapper import ZDType

__all__ = ["NAME", "LorenzoCodec", "lorenzo_decode", "lorenzo_encode", "parse_axes"]

NAME = "zopt.lorenzo"


def _check(values: np.ndarray) -> None:
    if values.dtype.kind not in "iu":
        raise ValueError(f"{NAME}: needs an integer data type, got {values.dtype}")


def _axes(axes: Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim))
    bad = [a for a in axes if not 0 <= a < ndim]
    if bad:
        raise OptionError("axes", label=NAME, message=f"axes {list(axes)} name dimensions beyond the chunk's {ndim}")
    return tuple(axes)


def parse_axes(axes: object) -> tuple[int, ...] | None:
    """``axes`` of the configuration as a tuple (None: all). Raises ValueError naming ``axes``
    unless it is a non-empty, strictly increasing list of non-negative integers."""
    if axes is None:
        return None
    if (not isinstance(axes, list | tuple) or not axes
            or not all(isinstance(a, int | np.integer) and not isinstance(a, bool) and a >= 0 for a in axes)
            or any(b <= a for a, b in zip(axes, axes[1:], strict=False))):
        raise OptionError("axes", label=NAME, message=f"axes must be a non-empty, strictly increasing list of dimension indices, "
                         f"got {axes!r}")
    return tuple(int(a) for a in axes)


def lorenzo_encode(values: np.ndarray, axes: Sequence[int] | None = None) -> np.ndarray:
    """Residuals (same shape and integer dtype) of ``values`` over ``axes`` (None: all), modulo ``2^bits``."""
    values = np.asarray(values)
    _check(values)
    out = np.array(values, copy=True, order="C")
    for axis in _axes(axes, out.ndim):
        if out.shape[axis] > 1:  # D_axis in place: later elements first, from a copy of the earlier ones
            lead = [slice(None)] * out.ndim
            tail = list(lead)
            lead[axis], tail[axis] = slice(1, None), slice(None, -1)
            out[tuple(lead)] -= out[tuple(tail)].copy()
    return out


def lorenzo_decode(residuals: np.ndarray, axes: Sequence[int] | None = None) -> np.ndarray:
    """The values whose ``lorenzo_encode(·, axes)`` is ``residuals`` (same shape and integer dtype)."""
    residuals = np.asarray(residuals)
    _check(residuals)
    out = np.array(residuals, copy=True, order="C")
    for axis in reversed(_axes(axes, out.ndim)):
        np.cumsum(out, axis=axis, dtype=out.dtype, out=out)  # wraps modulo 2^bits, like the encode
    return out


@dataclass(frozen=True)
class LorenzoCodec(ArrayArrayCodec):
    """``zopt.lorenzo`` (see module docstring). axes : the dimensions differenced (None: all)."""

    is_fixed_size = True

    axes: tuple[int, ...] | None = None

    def __init__(self, *, axes: object = None) -> None:
        object.__setattr__(self, "axes", parse_axes(axes))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        _, found = parse_named_configuration(data, NAME, require_configuration=False)
        config = found or {}
        unknown = set(config) - {"axes"}
        if unknown:
            raise OptionError(NAME, f"the only configuration key is 'axes', got {sorted(config)}")
        return cls(axes=(config or {}).get("axes"))

    def to_dict(self) -> dict[str, Any]:
        if self.axes is None:
            return {"name": NAME}
        return {"name": NAME, "configuration": {"axes": list(self.axes)}}

    def validate(self, *, shape: tuple[int, ...], dtype: ZDType[Any, Any], chunk_grid: object) -> None:
        pass  # zarr passes the array's type, not the type reaching this codec: checked per chunk

    def resolve_metadata(self, chunk_spec: ArraySpec) -> ArraySpec:
        return chunk_spec

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        return input_byte_length

    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        out = lorenzo_encode(np.asarray(chunk_array.as_ndarray_like()), self.axes)
        return nd_buffer(chunk_spec, out)

    def _decode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        out = lorenzo_decode(np.asarray(chunk_array.as_ndarray_like()).reshape(chunk_spec.shape), self.axes)
        return nd_buffer(chunk_spec, out)

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        return self._encode_sync(chunk_array, chunk_spec)

    async def _decode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        return self._decode_sync(chunk_array, chunk_spec)


def register() -> None:
    """Register ``zopt.lorenzo`` with zarr (the ``zarr.codecs`` entry point does the same once installed)."""
    from zarr.registry import register_codec

    register_codec(NAME, LorenzoCodec)


register()
