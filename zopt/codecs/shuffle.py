"""``shuffle``: the byte shuffle filter as the ``conditional`` spec's examples name it.

Configuration ``{"element_size": n}`` (bytes per element). Byte ``b`` of element ``e`` moves to
position ``b * n_elements + e``; trailing bytes that do not fill an element stay in place. The
work is done by ``numcodecs.Shuffle``. If ``element_size`` is omitted it is taken from the
array's data type when the array is created.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Self

import numcodecs
import numpy as np
from zarr.abc.codec import BytesBytesCodec
from zarr.core.common import parse_named_configuration

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

__all__ = ["ShuffleCodec"]


@dataclass(frozen=True)
class ShuffleCodec(BytesBytesCodec):
    """Byte shuffle. ``element_size``: bytes per element, a positive integer, or None."""

    is_fixed_size = True
    element_size: int | None

    def __init__(self, *, element_size: int | None = None) -> None:
        if element_size is not None and (
            isinstance(element_size, bool)
            or not isinstance(element_size, int | np.integer)
            or element_size < 1
        ):
            raise ValueError(f"element_size: expected a positive integer, got {element_size!r}")
        object.__setattr__(self, "element_size", None if element_size is None else int(element_size))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        _, config = parse_named_configuration(data, "shuffle", require_configuration=False)
        config = config or {}
        unknown = set(config) - {"element_size"}
        if unknown:
            raise ValueError(f"shuffle: unknown configuration keys {sorted(unknown)}; allowed: ['element_size']")
        return cls(**config)

    def to_dict(self) -> dict[str, Any]:
        if self.element_size is None:
            return {"name": "shuffle"}
        return {"name": "shuffle", "configuration": {"element_size": self.element_size}}

    def evolve_from_array_spec(self, array_spec: ArraySpec) -> Self:
        if self.element_size is None:
            return replace(self, element_size=array_spec.dtype.to_native_dtype().itemsize)
        return self

    def _codec(self) -> numcodecs.Shuffle:
        return numcodecs.Shuffle(elementsize=self.element_size or 1)

    def _run(self, fn_name: str, data: np.ndarray) -> np.ndarray:
        out = getattr(self._codec(), fn_name)(np.ascontiguousarray(data).view(np.uint8))
        return np.frombuffer(out, dtype=np.uint8).ravel()

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        out = self._run("encode", chunk_bytes.as_numpy_array())
        return chunk_spec.prototype.buffer.from_array_like(out)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        out = self._run("decode", chunk_bytes.as_numpy_array())
        return chunk_spec.prototype.buffer.from_array_like(out)

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        return input_byte_length
