"""The chunk being encoded or decoded: a context variable that codecs and pipelines share.

zarr-python's codec API hands a codec a chunk's bytes and an ``ArraySpec`` but not the chunk's
position in the chunk grid. ``zopt.codecs.pipeline.ChunkIndexCodecPipeline`` sets this context around
every chunk it writes or reads; the ``conditional`` codec reads ``chunk_index`` from it (spec
``optional.md``, Phase 2) and codecs name the chunk in errors. zopt's own shard writers set it
with ``chunk_context``. A leaf module: codecs import it without importing the pipeline.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

__all__ = [
    "ChunkContext",
    "chunk_context",
    "current_chunk",
    "current_chunk_index",
    "describe_current_chunk",
    "restore_current_chunk",
    "set_current_chunk",
]


@dataclass(frozen=True)
class ChunkContext:
    """Where the chunk being encoded or decoded sits.

    key : store key of the chunk, or of the shard that holds it.
    coords : coordinates in the array's chunk grid at this level (inner-chunk grid inside a
        shard), or None when they could not be determined.
    shape : chunk shape at this level, in elements.
    coords_in_shard : for an inner chunk, its coordinates within its shard; else None.
    """

    key: str
    coords: tuple[int, ...] | None
    shape: tuple[int, ...]
    coords_in_shard: tuple[int, ...] | None = None

    def describe(self) -> str:
        if self.coords_in_shard is not None:
            return f"inner chunk {self.coords_in_shard} of shard {self.key!r} (chunk index {self.coords})"
        return f"chunk {self.key!r}"


_CURRENT: contextvars.ContextVar[ChunkContext | None] = contextvars.ContextVar(
    "zopt_current_chunk", default=None
)


def current_chunk() -> ChunkContext | None:
    """The ``ChunkContext`` of the chunk being encoded/decoded in this task, if known."""
    return _CURRENT.get()


def describe_current_chunk() -> str | None:
    """``ChunkContext.describe()`` of the current chunk (for error messages), or None."""
    ctx = _CURRENT.get()
    return None if ctx is None else ctx.describe()


def current_chunk_index() -> tuple[int, ...] | None:
    """Grid coordinates of the chunk being encoded in this task, or None if unknown."""
    ctx = _CURRENT.get()
    return None if ctx is None else ctx.coords


class chunk_context:  # noqa: N801 - used as a context manager, like contextlib helpers
    """Set the current chunk explicitly (for encoders that bypass zarr's pipeline)."""

    def __init__(self, ctx: ChunkContext) -> None:
        self._ctx = ctx
        self._token: contextvars.Token | None = None

    def __enter__(self) -> ChunkContext:
        self._token = _CURRENT.set(self._ctx)
        return self._ctx

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _CURRENT.reset(self._token)


def set_current_chunk(ctx: ChunkContext | None) -> ChunkContext | None:
    """Make ``ctx`` the current chunk; returns the previous one for ``restore_current_chunk``."""
    previous = _CURRENT.get()
    _CURRENT.set(ctx)
    return previous


def restore_current_chunk(previous: ChunkContext | None) -> None:
    """Make ``previous`` (from ``set_current_chunk``) current again.

    By value with ``set()``, not ``reset(token)``: a coroutine destroyed unfinished (its read
    failed elsewhere, the process exits) runs its ``finally`` in another context, where a token
    is refused with a traceback.
    """
    _CURRENT.set(previous)
