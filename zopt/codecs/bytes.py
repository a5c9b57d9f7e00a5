"""The core ``bytes`` array→bytes codec (``../shared/specs/bytes.md``), extended to zopt's types.

zopt registers this class under the name ``bytes``. It is a subclass of zarr-python's
``BytesCodec`` and defers to it for every core data type, so arrays that do not use zopt's
types read and write exactly as before. For the ml_dtypes types (``zopt.dtypes``):

- sub-byte types take one byte per element; signed integers are written sign-extended
  (int4 -8 → ``0xF8``, as zarrs and tensorstore write them), unsigned and float types
  zero-extended;
- on read the bits above the type's width are ignored (``0x08`` and ``0xF8`` both read as
  int4 -8; float4 ``0x11`` reads as 0.5): they are masked before the bytes are viewed,
  because ml_dtypes' float4/float6 do not ignore them;
- bfloat16 takes 2 bytes in the configured ``endian`` (1.0 little-endian is ``80 3f``);
- the ``complex_*`` types (``zopt.dtypes.complex``) store the real then the imaginary component
  of each element, each as its component type is stored.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from zarr.codecs.bytes import BytesCodec as _ZarrBytesCodec

from zopt.compat.zarr_compat import endian_text, nd_buffer
from zopt.dtypes.complex import MLComplex
from zopt.dtypes.ml import MLDType

if TYPE_CHECKING:
    from zarr.abc.codec import Codec
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer

__all__ = ["BytesCodec", "as_zopt_bytes", "encode_ml_bytes", "decode_ml_bytes"]


def _swap(endian: object, itemsize: int) -> bool:
    """Whether ``itemsize``-byte units stored in ``endian`` (``"little"``/``"big"``, zarr's
    ``Endian`` enum, or None) need a byte swap on this machine."""
    text = endian_text(endian)
    return itemsize > 1 and text is not None and text != sys.byteorder


def encode_ml_bytes(dtype: MLDType, values: np.ndarray, endian: object) -> np.ndarray:
    """Encode an array of an ml_dtypes type as the ``bytes`` codec stores it.

    values: any shape, dtype ``dtype.to_native_dtype()``. Returns a 1-D uint8 array of
    ``values.size * dtype.item_size`` bytes in C order.
    """
    stored = dtype.to_stored_bytes(values).ravel()
    if _swap(endian, dtype.item_size):
        stored = stored.byteswap()
    return stored.view(np.uint8)


def decode_ml_bytes(
    dtype: MLDType, raw: np.ndarray, shape: tuple[int, ...], endian: object
) -> np.ndarray:
    """Decode ``bytes``-codec bytes into an array of ``shape``; bits above the width are ignored.

    raw: 1-D uint8 of exactly ``prod(shape) * dtype.item_size`` bytes.
    Raises ValueError when the length does not match ``shape``.
    """
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.item_size
    if raw.size != expected:
        raise ValueError(
            f"bytes codec: chunk has {raw.size} bytes, expected {expected} for shape {shape} "
            f"of {dtype.to_json(3)}"
        )
    units = raw.view(dtype._uint)
    if _swap(endian, dtype.item_size):
        units = units.byteswap()
    return dtype.from_bits(units).reshape(shape)


def encode_complex_bytes(dtype: MLComplex, values: np.ndarray, endian: object) -> np.ndarray:
    """Bytes of a ``complex_*`` array: real then imaginary component of each element, each as
    its component type is stored, in ``endian``. Returns 1-D uint8."""
    comp = dtype.component
    units = np.ascontiguousarray(comp.to_stored_bytes(dtype.components(values))).ravel()
    if _swap(endian, comp.item_size):
        units = units.byteswap()
    return units.view(np.uint8)


def decode_complex_bytes(dtype: MLComplex, raw: np.ndarray, shape: tuple[int, ...], endian: object) -> np.ndarray:
    """Inverse of ``encode_complex_bytes``; ValueError when the length does not match."""
    comp = dtype.component
    expected = int(np.prod(shape, dtype=np.int64)) * 2 * comp.item_size
    if raw.size != expected:
        raise ValueError(f"bytes codec: chunk has {raw.size} bytes, expected {expected} for shape {shape} "
                         f"of {dtype.to_json(3)}")
    units = raw.view(comp._uint)
    if _swap(endian, comp.item_size):
        units = units.byteswap()
    return dtype.from_components(comp.from_bits(units).reshape(*shape, 2))


@dataclass(frozen=True, init=False)
class BytesCodec(_ZarrBytesCodec):
    """``bytes`` codec that also handles zopt's ml_dtypes data types (see module docstring)."""

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        dtype = chunk_spec.dtype
        if isinstance(dtype, MLComplex):
            raw = np.asarray(chunk_bytes.as_numpy_array()).view(np.uint8).ravel()
            out = decode_complex_bytes(dtype, raw, tuple(chunk_spec.shape), self.endian)
            return nd_buffer(chunk_spec, out)
        if not isinstance(dtype, MLDType):
            return super()._decode_sync(chunk_bytes, chunk_spec)
        raw = np.asarray(chunk_bytes.as_numpy_array()).view(np.uint8).ravel()
        out = decode_ml_bytes(dtype, raw, chunk_spec.shape, self.endian)
        return nd_buffer(chunk_spec, out)

    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer | None:
        dtype = chunk_spec.dtype
        if isinstance(dtype, MLComplex):
            raw = encode_complex_bytes(dtype, chunk_array.as_numpy_array(), self.endian)
            return chunk_spec.prototype.buffer.from_array_like(raw)
        if not isinstance(dtype, MLDType):
            return super()._encode_sync(chunk_array, chunk_spec)
        raw = encode_ml_bytes(dtype, chunk_array.as_numpy_array(), self.endian)
        return chunk_spec.prototype.buffer.from_array_like(raw)


def as_zopt_bytes(codec: Codec) -> Codec:
    """zopt's ``BytesCodec`` in place of an instance of zarr's own (same ``endian``): zarr's
    ``create_array`` makes zarr's class, which cannot handle zopt's data types. Any other codec
    is returned as it is."""
    if type(codec) is _ZarrBytesCodec:
        return BytesCodec(endian=codec.endian)
    return codec
