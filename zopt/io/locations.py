"""Where a source lives: a local path, or an fsspec URL (``s3://``, ``gs://``, ``memory://``, …).

The source side of recompress, analyze, plan and info asks these few questions (does it exist,
is it a directory, read a small file, list sub-directories, total size) without caring which:
a local path goes to ``os``, a URL to its fsspec file system (credentials and endpoints as fsspec
configures them: environment, ``~/.config/fsspec``, ``fsspec.config.conf``). ``file://`` URLs
are local paths. A file system that cannot be reached raises ``SourceUnreachableError`` naming
the URL (one line), not a retry trace.
"""

from __future__ import annotations

import os
from typing import Any

from zopt.errors import ZoptError
from zopt.store.files import walk_files

__all__ = ["SourceUnreachableError", "is_url", "local_path", "url_fs"]


class SourceUnreachableError(ZoptError, OSError):
    """The object store or remote file system of a URL did not answer, or refused the credentials."""


def is_url(location: str | os.PathLike[str]) -> bool:
    """True for an fsspec URL other than ``file://`` (those are local paths)."""
    text = os.fspath(location)
    return "://" in text and not text.startswith("file://")


def local_path(location: str | os.PathLike[str]) -> str:
    """A local location without its ``file://`` prefix."""
    return os.fspath(location).removeprefix("file://")


def url_fs(url: str) -> tuple[Any, str]:
    """``(fsspec file system, path)`` of ``url``."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs, str(path)


def _ask(url: str, what: str, *args: object) -> Any:
    fs, path = url_fs(url)
    try:
        return getattr(fs, what)(path, *args)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise
    except PermissionError as exc:
        raise SourceUnreachableError(f"src: {url} refused access ({type(exc).__name__}: {' '.join(str(exc).split())}); "
                                     "check the credentials fsspec uses for it") from exc
    except Exception as exc:  # botocore/aiohttp errors: endpoint down, bad credentials
        if type(exc).__module__.split(".")[0] in ("botocore", "aiohttp", "aiobotocore", "gcsfs", "google") or isinstance(
                exc, OSError | TimeoutError):
            raise SourceUnreachableError(f"src: cannot reach {url} ({type(exc).__name__}: {' '.join(str(exc).split())}); "
                                         "check the endpoint and credentials fsspec uses for it") from exc
        raise


def exists(location: str) -> bool:
    if is_url(location):
        return bool(_ask(location, "exists"))
    return os.path.exists(local_path(location))


def isdir(location: str) -> bool:
    if is_url(location):
        return bool(_ask(location, "isdir"))
    return os.path.isdir(local_path(location))


def isfile(location: str) -> bool:
    if is_url(location):
        return bool(_ask(location, "isfile"))
    return os.path.isfile(local_path(location))


def join(location: str, *parts: str) -> str:
    if is_url(location):
        return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts if p)])
    return os.path.join(local_path(location), *parts)


def read_bytes(location: str) -> bytes:
    """The bytes of a (small) file; FileNotFoundError if absent."""
    if is_url(location):
        data: bytes = _ask(location, "cat_file")
        return data
    with open(local_path(location), "rb") as f:
        return f.read()


def subdirs(location: str) -> list[str]:
    """Names of the directories (key prefixes) directly inside ``location``, sorted."""
    if is_url(location):
        fs, path = url_fs(location)
        entries = _ask(location, "ls", True)
        return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "directory")
    return sorted(e.name for e in os.scandir(local_path(location)) if e.is_dir())


def files(location: str) -> list[tuple[str, int]]:
    """``(path relative to location, size)`` of every file under the directory ``location``."""
    if is_url(location):
        fs, path = url_fs(location)
        found = _ask(location, "find", None, False, True)
        base = path.rstrip("/") + "/"
        return sorted((p[len(base):], int(info.get("size") or 0)) for p, info in found.items() if p.startswith(base))
    root = local_path(location)
    skip = len(os.path.join(root, ""))  # walk_files' paths are os.path.join(root, ...): no relpath per file
    return sorted((p[skip:], st.st_size) for p, st in walk_files(root))


def total_bytes(location: str) -> int:
    """Bytes of a file, or of every file under a directory."""
    if isfile(location):
        return int(_ask(location, "size")) if is_url(location) else os.path.getsize(local_path(location))
    return sum(n for _, n in files(location))
