"""Exceptions zopt raises beyond ``ValueError`` for bad configuration."""

from __future__ import annotations

__all__ = ["ChunkDecodeError", "ZoptError"]


class ZoptError(Exception):
    """Base class of zopt's own errors."""


class ChunkDecodeError(ZoptError, ValueError):
    """A stored chunk could not be decoded: corrupt, truncated or over-long bytes.

    key : store key of the chunk (or of the shard holding it), or None when unknown.
    inner : coordinates of the inner chunk within that shard, or None.
    codec : name of the codec whose decoding failed, or None.
    """

    def __init__(self, key: str | None, inner: tuple[int, ...] | None, cause: BaseException | str,
                 codec: str | None = None) -> None:
        self.key = key
        self.inner = inner
        self.codec = codec
        where = "a chunk" if key is None else f"chunk {key!r}" if inner is None else f"inner chunk {inner} of shard {key!r}"
        why = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
        super().__init__(f"cannot decode {where}: {f'{codec}: ' if codec else ''}{why}")
