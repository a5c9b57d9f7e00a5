"""Exceptions zopt raises beyond ``ValueError`` for bad configuration."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable

__all__ = [
    "ChunkDecodeError",
    "ChunkIndexUnavailableError",
    "OptionError",
    "UnsupportedArrayError",
    "ZoptError",
    "disk_full_message",
    "is_disk_full",
]


class ZoptError(Exception):
    """Base class of zopt's own errors."""


class OptionError(ZoptError, ValueError):
    """An option (a parameter of ``zopt.recompress``, a codec's configuration, a CLI flag's value)
    with a value that is not allowed.

    option : the option's name as the library spells it (``"budget"``, ``"chunks"``); the CLI maps
    it to its flag (``--budget``) without reading the message.
    message : what is wrong and the allowed values.
    conflicts : other options this one cannot be given with; the message then ends "give OPTION or
    OTHER, not both".
    label : what the message is prefixed with instead of ``option``, where it names more (``"lossy
    tos: abs"``: the variable and method of ``--lossy``).
    ``str(e)`` is ``"option: message"`` (``"label: message"``); a ``ValueError``, so ``except ValueError`` still catches it.
    """

    def __init__(self, option: str, message: str, conflicts: tuple[str, ...] = (), label: str | None = None) -> None:
        self.option = option
        self.reason = message
        self.conflicts = tuple(conflicts)
        self.label = label
        self.message = self.worded(str)
        super().__init__(f"{label or option}: {self.message}")

    def worded(self, name: Callable[[str], str]) -> str:
        """The message with the options it names (``conflicts``) spelt by ``name``, e.g. as CLI flags."""
        if not self.conflicts:
            return self.reason
        return f"{self.reason}; give {' or '.join(name(o) for o in (self.option, *self.conflicts))}, not both"

    def __reduce__(self) -> tuple[type[OptionError], tuple[str, str, tuple[str, ...], str | None]]:  # across Dask workers
        return type(self), (self.option, self.reason, self.conflicts, self.label)


class ChunkDecodeError(ZoptError, ValueError):
    """A stored chunk could not be decoded: corrupt, truncated or over-long bytes.

    key : store key of the chunk (or of the shard holding it), or None when unknown.
    inner : coordinates of the inner chunk within that shard, or None.
    codec : name of the codec whose decoding failed, or None.
    store : the store (its path or URL) when known, named after the key.
    why : the cause in words (without the codec).
    """

    def __init__(self, key: str | None, inner: tuple[int, ...] | None, cause: BaseException | str,
                 codec: str | None = None, store: str | None = None) -> None:
        self.key = key
        self.inner = inner
        self.codec = codec
        self.store = store
        where = "a chunk" if key is None else f"chunk {key!r}" if inner is None else f"inner chunk {inner} of shard {key!r}"
        self.why = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
        place = f" in {store}" if store else ""
        super().__init__(f"cannot decode {where}{place}: {f'{codec}: ' if codec else ''}{self.why}")

    def in_store(self, key: str | None, inner: tuple[int, ...] | None, store: str | None) -> ChunkDecodeError:
        """The same fault named with the store (and the key and inner chunk where this one lacks them)."""
        return ChunkDecodeError(self.key or key, self.inner if self.inner is not None else inner, self.why,
                                codec=self.codec, store=store)


class ChunkIndexUnavailableError(ZoptError, LookupError):
    """A ``conditional`` decision needs the chunk's grid coordinates (a mask grid, a plan, a
    decision function), but the codec pipeline in use does not publish them: only
    ``zopt.codecs.pipeline.ChunkIndexCodecPipeline`` does. The message names the pipeline."""


class UnsupportedArrayError(ZoptError, ValueError):
    """An array whose metadata the installed zarr-python cannot serve (an unknown codec, or a
    configuration this zarr version refuses). The message names the array, the codec and the
    zarr-python version."""


def is_disk_full(exc: BaseException) -> bool:
    """True for an OSError saying the disk (or quota) is full."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def disk_full_message(target: str | os.PathLike[str], needed: int | None, removed: str) -> str:
    """One line for a job that ran out of disk space writing under ``target``.

    needed : bytes the job needs there in all (an estimate), or None; removed : what the job
    removed, e.g. "the partial output was removed".
    """
    where = os.path.abspath(os.fspath(target))
    probe = where
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    free = shutil.disk_usage(probe).free
    need = f"about {_size(needed)} needed, " if needed else ""
    return f"no space left on the device writing {where}: {need}{_size(free)} free there; {removed}"
