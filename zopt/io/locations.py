"""Where a source or destination lives: a local path, an object store through obstore, or an fsspec URL.

``where(location)`` resolves a location once into a ``Location`` (cached per process, and made
again when the environment's cloud variables or fsspec's configuration change): a local path
(``file://`` URLs are local paths) goes to ``os``; ``s3://``, ``gs://`` and ``az://`` go to
obstore when it is installed (``zopt.io.object_stores``); any other URL (``memory://``,
``http(s)://`` …) to its fsspec file system (credentials and endpoints as fsspec configures them:
environment, ``~/.config/fsspec``, ``fsspec.config.conf``). A ``Location`` answers the few
questions the source side asks (does it exist, is it a directory, read a small file, list
sub-directories and files, sizes, a file's identity) and gives the zarr store the job reads or
writes (``zarr_store``: zarr's ``ObjectStore``, ``FsspecStore``, or the local path zarr opens as
a ``LocalStore``). A store that cannot be reached raises ``SourceUnreachableError`` naming the
URL (one line), not a retry trace.

The module-level functions (``exists``, ``isdir``, ``read_bytes``, …) are ``where(location)``'s.
"""

from __future__ import annotations

import fnmatch
import os
from typing import Any, Protocol

from zopt.io.object_stores import (
    SourceUnreachableError,
    client,
    config_fingerprint,
    root_store,
    split_url,
)
from zopt.store.files import walk_files

__all__ = [
    "Location",
    "SourceUnreachableError",
    "exists",
    "files",
    "glob",
    "identity",
    "is_url",
    "isdir",
    "isfile",
    "join",
    "local_path",
    "read_bytes",
    "subdirs",
    "total_bytes",
    "url_fs",
    "where",
    "zarr_store",
]


def is_url(location: str | os.PathLike[str]) -> bool:
    """True for a URL other than ``file://`` (those are local paths)."""
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


class Location(Protocol):
    """One resolved location. text : as given (``file://`` removed); kind : ``"local"``,
    ``"obstore"`` or ``"fsspec"``."""

    text: str
    kind: str

    def exists(self) -> bool: ...

    def isdir(self) -> bool: ...

    def isfile(self) -> bool: ...

    def read_bytes(self) -> bytes:
        """The bytes of a (small) file; FileNotFoundError if absent."""
        ...

    def subdirs(self) -> list[str]:
        """Names of the directories (key prefixes) directly inside, sorted."""
        ...

    def files(self) -> list[tuple[str, int]]:
        """``(path relative to the location, size in bytes)`` of every file under it, sorted."""
        ...

    def size(self) -> int:
        """Bytes of the file."""
        ...

    def identity(self) -> str:
        """What identifies the file's content for a resumed job: ``"SIZE MTIME_NS"`` locally (the
        sample of its bytes is ``zopt.store.identity``'s); on an object store its size, ETag and
        version, or its modification time where the store gives no ETag."""
        ...

    def zarr_store(self, read_only: bool = True) -> Any:
        """What zarr opens: the local path, or a ``zarr.abc.store.Store`` (made once per location)."""
        ...


class LocalLocation:
    kind = "local"

    def __init__(self, text: str) -> None:
        self.text = self.path = local_path(text)

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def isdir(self) -> bool:
        return os.path.isdir(self.path)

    def isfile(self) -> bool:
        return os.path.isfile(self.path)

    def read_bytes(self) -> bytes:
        with open(self.path, "rb") as f:
            return f.read()

    def subdirs(self) -> list[str]:
        return sorted(e.name for e in os.scandir(self.path) if e.is_dir())

    def files(self) -> list[tuple[str, int]]:
        skip = len(os.path.join(self.path, ""))  # walk_files' paths are os.path.join(root, ...): no relpath per file
        return sorted((p[skip:], st.st_size) for p, st in walk_files(self.path))

    def size(self) -> int:
        return os.path.getsize(self.path)

    def identity(self) -> str:
        st = os.stat(self.path)
        return f"{st.st_size} {st.st_mtime_ns}"

    def zarr_store(self, read_only: bool = True) -> str:
        return self.path


class FsspecLocation:
    kind = "fsspec"

    def __init__(self, text: str) -> None:
        self.text = text
        self._stores: dict[bool, Any] = {}

    def _ask(self, what: str, *args: object, **kwargs: object) -> Any:
        fs, path = url_fs(self.text)
        try:
            return getattr(fs, what)(path, *args, **kwargs)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise
        except PermissionError as exc:
            raise SourceUnreachableError(f"src: {self.text} refused access ({type(exc).__name__}: "
                                         f"{' '.join(str(exc).split())}); check the credentials fsspec uses for it"
                                         ) from exc
        except Exception as exc:  # botocore/aiohttp errors: endpoint down, bad credentials
            if type(exc).__module__.split(".")[0] in ("botocore", "aiohttp", "aiobotocore", "gcsfs", "google") or \
                    isinstance(exc, OSError | TimeoutError):
                raise SourceUnreachableError(f"src: cannot reach {self.text} ({type(exc).__name__}: "
                                             f"{' '.join(str(exc).split())}); check the endpoint and credentials "
                                             "fsspec uses for it") from exc
            raise

    def exists(self) -> bool:
        return bool(self._ask("exists"))

    def isdir(self) -> bool:
        return bool(self._ask("isdir"))

    def isfile(self) -> bool:
        return bool(self._ask("isfile"))

    def read_bytes(self) -> bytes:
        data: bytes = self._ask("cat_file")
        return data

    def subdirs(self) -> list[str]:
        entries = self._ask("ls", True)
        return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "directory")

    def files(self) -> list[tuple[str, int]]:
        path = url_fs(self.text)[1]
        found = self._ask("find", maxdepth=None, withdirs=False, detail=True)
        base = path.rstrip("/") + "/"
        return sorted((p[len(base):], int(info.get("size") or 0)) for p, info in found.items() if p.startswith(base))

    def size(self) -> int:
        return int(self._ask("size"))

    def identity(self) -> str:
        info = self._ask("info")
        mtime = info.get("LastModified") or info.get("mtime") or info.get("updated") or info.get("last_modified")
        return _remote_identity(info.get("size"), info.get("ETag") or info.get("etag"),
                                info.get("VersionId") or info.get("generation"), mtime)

    def zarr_store(self, read_only: bool = True) -> Any:
        if read_only not in self._stores:
            import zarr

            self._stores[read_only] = zarr.storage.FsspecStore.from_url(self.text, read_only=read_only)
        return self._stores[read_only]


class ObjectLocation:
    """A location on an object store through obstore: the bucket's store, shared by every location
    in it, and the key."""

    kind = "obstore"

    def __init__(self, text: str) -> None:
        self.text = text
        self.root, self.key = root_store(text)
        self._stores: dict[bool, Any] = {}

    def _fail(self, exc: Exception) -> BaseException:
        from zopt.io.object_stores import is_obstore_error, named_error

        return named_error(self.text, exc) if is_obstore_error(exc) else exc

    def _head(self) -> Any:
        import obstore

        if not self.key:
            raise FileNotFoundError(self.text)
        try:
            return obstore.head(self.root, self.key)
        except Exception as exc:
            raise self._fail(exc) from exc

    def _prefix(self) -> str:
        return f"{self.key}/" if self.key else ""

    def exists(self) -> bool:
        return self.isfile() or self.isdir()

    def isfile(self) -> bool:
        try:
            self._head()
        except FileNotFoundError:
            return False
        return True

    def isdir(self) -> bool:
        import obstore

        try:
            for batch in obstore.list(self.root, self._prefix(), chunk_size=1):
                return bool(batch)
        except FileNotFoundError:
            return False
        except Exception as exc:
            raise self._fail(exc) from exc
        return False

    def read_bytes(self) -> bytes:
        import obstore

        if not self.key:
            raise IsADirectoryError(self.text)
        try:
            return bytes(obstore.get(self.root, self.key).bytes())
        except Exception as exc:
            raise self._fail(exc) from exc

    def subdirs(self) -> list[str]:
        import obstore

        try:
            found = obstore.list_with_delimiter(self.root, self._prefix() or None)
        except Exception as exc:
            raise self._fail(exc) from exc
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in found["common_prefixes"])

    def files(self) -> list[tuple[str, int]]:
        import obstore

        base = self._prefix()
        try:
            return sorted((m["path"][len(base):], int(m["size"]))
                          for batch in obstore.list(self.root, base or None) for m in batch
                          if m["path"].startswith(base))
        except Exception as exc:
            raise self._fail(exc) from exc

    def size(self) -> int:
        return int(self._head()["size"])

    def identity(self) -> str:
        meta = self._head()
        return _remote_identity(meta["size"], meta.get("e_tag"), meta.get("version"), meta["last_modified"])

    def zarr_store(self, read_only: bool = True) -> Any:
        from zopt.io.object_stores import zarr_object_store

        if read_only not in self._stores:
            self._stores[read_only] = zarr_object_store(self.text, read_only)
        return self._stores[read_only]

    def glob(self, pattern: str) -> list[str]:
        """The keys under this location matching ``pattern`` (``fnmatch`` per ``/``-separated part,
        so ``*`` stays inside one part), as URLs, sorted."""
        import obstore

        want = split_url(pattern)[2].split("/")
        base = self._prefix()
        try:
            keys = [m["path"] for batch in obstore.list(self.root, base or None) for m in batch]
        except Exception as exc:
            raise self._fail(exc) from exc
        root = split_url(self.text)[1]
        return sorted(f"{root}/{k}" for k in keys if _matches(k.split("/"), want))


def _remote_identity(size: object, etag: object, version: object, modified: object) -> str:
    """``"SIZE ETAG VERSION"`` of an object (the ETag changes with the content: the same bytes put
    again resume), or ``"SIZE - VERSION MODIFIED"`` where the store gives no ETag."""
    if etag:
        return f"{size} {str(etag).strip(chr(34))} {version or '-'}"
    return f"{size} - {version or '-'} {modified}"


def _matches(parts: list[str], want: list[str]) -> bool:
    return len(parts) == len(want) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, want, strict=True))


_RESOLVED: dict[tuple[str, object], Location] = {}
_MAX_RESOLVED = 4096


def where(location: str | os.PathLike[str]) -> Location:
    """``location`` resolved (see the module docstring): local, obstore or fsspec. Cached per
    process; made again when the environment's cloud variables or fsspec's configuration change.
    Raises OptionError for a bad ``ZOPT_OBJECT_STORE``."""
    text = os.fspath(location)
    if not is_url(text):
        return LocalLocation(text)
    key = (text, config_fingerprint())
    found = _RESOLVED.get(key)
    if found is None:
        if len(_RESOLVED) >= _MAX_RESOLVED:
            _RESOLVED.clear()
        kind = client(text.split("://", 1)[0].lower())
        found = _RESOLVED[key] = ObjectLocation(text) if kind == "obstore" else FsspecLocation(text)
    return found


def exists(location: str) -> bool:
    return where(location).exists()


def isdir(location: str) -> bool:
    return where(location).isdir()


def isfile(location: str) -> bool:
    return where(location).isfile()


def join(location: str, *parts: str) -> str:
    if is_url(location):
        return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts if p)])
    return os.path.join(local_path(location), *parts)


def read_bytes(location: str) -> bytes:
    """The bytes of a (small) file; FileNotFoundError if absent."""
    return where(location).read_bytes()


def subdirs(location: str) -> list[str]:
    """Names of the directories (key prefixes) directly inside ``location``, sorted."""
    return where(location).subdirs()


def files(location: str) -> list[tuple[str, int]]:
    """``(path relative to location, size)`` of every file under the directory ``location``."""
    return where(location).files()


def total_bytes(location: str) -> int:
    """Bytes of a file, or of every file under a directory."""
    found = where(location)
    if isinstance(found, ObjectLocation):  # one HEAD for a file, a listing for a prefix
        try:
            return found.size()
        except FileNotFoundError:
            return sum(n for _, n in found.files())
    return found.size() if found.isfile() else sum(n for _, n in found.files())


def identity(location: str) -> str:
    """``where(location).identity()``: a file's size and modification time, and its ETag and
    version on an object store."""
    return where(location).identity()


def zarr_store(location: str | os.PathLike[str], read_only: bool = True) -> Any:
    """What zarr opens for ``location``: the local path, or its store (``where(location).zarr_store``)."""
    return where(location).zarr_store(read_only)


def glob(pattern: str) -> list[str]:
    """The URLs matching the URL ``pattern`` (``s3://bucket/archive/*.nc``), sorted: listed through
    the store under the pattern's literal prefix (obstore), or fsspec's ``glob``."""
    found = where(pattern.split("*")[0].split("?")[0].split("[")[0].rsplit("/", 1)[0])
    if isinstance(found, ObjectLocation):
        return found.glob(pattern)
    fs, path = url_fs(pattern)
    return [fs.unstrip_protocol(p) for p in sorted(fs.glob(path))]
