"""Exceptions zopt raises beyond ``ValueError`` for bad configuration."""

from __future__ import annotations

__all__ = ["ChunkDecodeError", "ChunkIndexUnavailableError", "UnsupportedArrayError", "ZoptError"]


class ZoptError(Exception):
    """Base class of zopt's own errors."""


class ChunkDecodeError(ZoptError, ValueError):
    """A stored chunk could not be decoded: corrupt, truncated or over-long bytes.

    key : store key of the chunk (or of the shard holding it).
    inner : coordinates of the inner chunk within that shard, or None.
    """

    def __init__(self, key: str, inner: tuple[int, ...] | None, cause: BaseException) -> None:
        self.key = key
        self.inner = inner
        where = f"chunk {key!r}" if inner is None else f"inner chunk {inner} of shard {key!r}"
        super().__init__(f"cannot decode {where}: {type(cause).__name__}: {cause}")


class ChunkIndexUnavailableError(ZoptError, LookupError):
    """A ``conditional`` decision needs the chunk's grid coordinates (a mask grid, a plan, a
    decision function), but the codec pipeline in use does not publish them: only
    ``zopt.pipeline.ChunkIndexCodecPipeline`` does. The message names the pipeline."""


class UnsupportedArrayError(ZoptError, ValueError):
    """An array whose metadata the installed zarr-python cannot serve (an unknown codec, or a
    configuration this zarr version refuses). The message names the array, the codec and the
    zarr-python version."""
