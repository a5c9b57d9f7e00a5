"""The classic default codec chain per data type (the ``classic`` candidate of ``zopt.planning.candidates``).

Since issue 26 ``zopt recompress`` without a chain chooses each variable's chain from a menu
(``zopt.planning.candidates``: this chain with readers ``zopt``, numcodecs' shuffle + zstd, blosc with byte or
bit shuffle, ``numcodecs.pcodec``) by trial encodings within a speed budget (``zopt.planning.optimizer``);
this module's chain is the menu's reference with readers ``zopt`` (by default, since issue 36, its portable
twin ``numcodecs-shuffle-zstd-3``: the same bytes without the mask header), what ``--menu classic``, plans
and zopt's ML types write.

Every chain is ``bytes`` (little-endian) followed by one ``conditional`` codec
(``../shared/specs/optional.md``) wrapping only ``zstd`` (a core Zarr v3 codec) and the spec's
``shuffle`` (the bytes of numcodecs' ``Shuffle``): a reader needs ``conditional`` and nothing
else. Today that is zarr-python with zopt installed; zarrs and tensorstore read ``zstd`` but
not ``conditional`` (docs/interop.md). No Blosc and no numcodecs-only codec is used.

===============================  =============================================================
data type (numpy item size)      wrapped codecs
===============================  =============================================================
bool and 1-byte types            ``[zstd(level=10)]`` — a byte shuffle of 1-byte elements is
(uint8, int8, float8, int4 …)    the identity, so only the compressor is tried; level 10
                                 because class maps and masks are small and compress 6–30 %
                                 better at 10 than at 3 (``benchmarks/corpus.py``)
every other type                 ``[shuffle, zstd(level=3)]``, ``shuffle``'s element size
                                 taken from the data type when the array is created; the
                                 chain of zopt 0.1, byte for byte
===============================  =============================================================

Measured on the corpus of ``benchmarks/corpus.py`` (docs/benchmarks.md): zstd level 9–10
would also make the multi-byte types 1–3 % smaller, and as small as ``Blosc(zstd, 5,
shuffle)``, but it compresses 3–5× slower, which the recompression throughput goal of issue 19
cannot afford; the level is an argument for whoever prefers size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt
from zopt.errors import OptionError

__all__ = ["BYTE_LEVEL", "WIDE_LEVEL", "default_chain", "default_codecs"]

#: zstd level for bool and 1-byte types
BYTE_LEVEL = 10
#: zstd level for types of 2 bytes and more
WIDE_LEVEL = 3


def _itemsize(dtype: npt.DTypeLike) -> int:
    try:
        return int(np.dtype(dtype).itemsize)
    except TypeError as exc:
        raise OptionError("dtype", f"{dtype!r} is not a numpy data type") from exc


def default_codecs(dtype: npt.DTypeLike, level: int | None = None) -> list[dict[str, Any]]:
    """The codecs the default ``conditional`` wraps for ``dtype`` (JSON objects, chain order).

    dtype : anything ``numpy.dtype`` accepts (``"f4"``, ``np.uint8``, ``bool`` …).
    level : zstd level (1–22) instead of the per-type default (``BYTE_LEVEL``/``WIDE_LEVEL``).
    Raises ValueError naming ``dtype`` or ``level``.
    """
    size = _itemsize(dtype)
    if level is not None and (isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= 22):
        raise OptionError("level", f"{level!r} is not a zstd level; allowed: integers 1..22")
    if size <= 1:
        return [{"name": "zstd", "configuration": {"level": level or BYTE_LEVEL}}]
    return [{"name": "shuffle"}, {"name": "zstd", "configuration": {"level": level or WIDE_LEVEL}}]


def default_chain(dtype: npt.DTypeLike, level: int | None = None) -> list[dict[str, Any]]:
    """The whole default chain for ``dtype``: ``bytes`` then ``conditional(default_codecs)``.

    Same arguments and errors as ``default_codecs``.
    """
    return [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "conditional", "configuration": {"codecs": default_codecs(dtype, level)}},
    ]
