"""``reshape``: array → array codec changing a chunk's shape in C order (``../shared/specs/reshape.md``).

``shape`` lists the output dimensions; each entry is a positive integer, a list of input
dimensions (size: their product; ``[]`` is 1), or ``-1`` (at most once: whatever makes the
element count match). The flattened input dimensions must be strictly increasing, and an entry
given as input dimensions ``[d0..dk]`` at output position ``i`` must be aligned:
``prod(B_shape[:i]) == prod(A_shape[:d0])`` and ``prod(B_shape[i+1:]) == prod(A_shape[dk+1:])``
(the spec writes ``A_shape[input_dims[0]]`` in the first one, a typo for ``A_shape[:d0]``, which
is the rule followed here). Every violation is a ``ValueError`` saying which rule.

The shape is resolved per chunk (input dimensions follow variable chunking). Elements keep their
C order even when the input is not C-contiguous (e.g. after ``transpose``); the result is a view
when numpy can make one. Data type and fill value are unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
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

__all__ = ["ReshapeCodec", "resolve_shape"]

Entry = int | tuple[int, ...]


def _parse_entries(shape: object) -> tuple[Entry, ...]:
    if not isinstance(shape, list | tuple) or not shape:
        raise OptionError("shape", f"expected a non-empty list of sizes, input-dimension lists or -1, got {shape!r}")
    out: list[Entry] = []
    for i, e in enumerate(shape):
        if isinstance(e, list | tuple):
            if not all(isinstance(d, int | np.integer) and not isinstance(d, bool) and d >= 0 for d in e):
                raise OptionError("shape", label=f"shape[{i}]", message=f"input dimensions must be non-negative integers, got {e!r}")
            out.append(tuple(int(d) for d in e))
        elif isinstance(e, int | np.integer) and not isinstance(e, bool) and (e >= 1 or e == -1):
            out.append(int(e))
        else:
            raise OptionError("shape", label=f"shape[{i}]", message=f"{e!r} is not a positive integer, a list of input dimensions or -1")
    if sum(1 for e in out if e == -1) > 1:
        raise OptionError("shape", "-1 may occur at most once")
    flat = [d for e in out if isinstance(e, tuple) for d in e]
    if any(b <= a for a, b in zip(flat, flat[1:], strict=False)):
        raise OptionError("shape", f"the input dimensions {flat} must be strictly increasing over all entries "
                         "(reshape never transposes)")
    return tuple(out)


def resolve_shape(entries: Sequence[Entry], a_shape: Sequence[int]) -> tuple[int, ...]:
    """The output shape for input (chunk) shape ``a_shape``.

    Raises ValueError naming the rule violated: an input dimension out of range, element
    counts that cannot match, or a misaligned input-dimension entry.
    """
    a_shape = tuple(int(s) for s in a_shape)
    total = math.prod(a_shape)
    sizes: list[int | None] = []
    for i, e in enumerate(entries):
        if isinstance(e, tuple):
            if any(d >= len(a_shape) for d in e):
                raise OptionError("shape", label=f"shape[{i}]", message=f"input dimensions {list(e)} out of range for a {len(a_shape)}-d chunk")
            sizes.append(math.prod(a_shape[d] for d in e))
        else:
            sizes.append(None if e == -1 else e)
    known = math.prod(s for s in sizes if s is not None)
    if None in sizes:
        if known == 0 or total % known:
            raise OptionError("shape", f"no size for -1 makes {known} × ? equal the {total} elements of {a_shape}")
        sizes[sizes.index(None)] = total // known
    b_shape = tuple(int(s) for s in sizes)  # type: ignore[arg-type]
    if math.prod(b_shape) != total:
        raise OptionError("shape", f"output {b_shape} has {math.prod(b_shape)} elements, the input {a_shape} has {total}")
    for i, e in enumerate(entries):
        if isinstance(e, tuple) and e:
            if math.prod(b_shape[:i]) != math.prod(a_shape[: e[0]]):
                raise OptionError("shape", label=f"shape[{i}]", message=f"input dimensions {list(e)} are not aligned: the output dimensions "
                                 f"before it hold {math.prod(b_shape[:i])} elements, input dimensions before "
                                 f"{e[0]} hold {math.prod(a_shape[: e[0]])}")
            if math.prod(b_shape[i + 1 :]) != math.prod(a_shape[e[-1] + 1 :]):
                raise OptionError("shape", label=f"shape[{i}]", message=f"input dimensions {list(e)} are not aligned: the output dimensions "
                                 f"after it hold {math.prod(b_shape[i + 1:])} elements, input dimensions after "
                                 f"{e[-1]} hold {math.prod(a_shape[e[-1] + 1:])}")
    return b_shape


@dataclass(frozen=True)
class ReshapeCodec(ArrayArrayCodec):
    """reshape (see module docstring). ``shape``: the configuration list."""

    is_fixed_size = True

    shape: tuple[Entry, ...]

    def __init__(self, *, shape: object) -> None:
        object.__setattr__(self, "shape", _parse_entries(shape))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        _, found = parse_named_configuration(data, "reshape", require_configuration=True)
        config = found or {}
        unknown = set(config) - {"shape"}
        if unknown or "shape" not in config:
            raise OptionError("reshape", f"the configuration needs exactly 'shape'; got keys {sorted(config)}")
        return cls(shape=config["shape"])

    def to_dict(self) -> dict[str, Any]:
        return {"name": "reshape", "configuration": {"shape": [list(e) if isinstance(e, tuple) else e for e in self.shape]}}

    def validate(self, *, shape: tuple[int, ...], dtype: ZDType[Any, Any], chunk_grid: object) -> None:
        chunk_shape = getattr(chunk_grid, "chunk_shape", None)
        if chunk_shape is not None:
            resolve_shape(self.shape, chunk_shape)

    def resolve_metadata(self, chunk_spec: ArraySpec) -> ArraySpec:
        return replace(chunk_spec, shape=resolve_shape(self.shape, chunk_spec.shape))

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        return input_byte_length

    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        values = chunk_array.as_ndarray_like()
        out = np.reshape(values, resolve_shape(self.shape, chunk_spec.shape), order="C")
        return nd_buffer(chunk_spec, out)

    def _decode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        values = chunk_array.as_ndarray_like()
        out = np.reshape(values, tuple(chunk_spec.shape), order="C")
        return nd_buffer(chunk_spec, out)

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        return self._encode_sync(chunk_array, chunk_spec)

    async def _decode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        return self._decode_sync(chunk_array, chunk_spec)
