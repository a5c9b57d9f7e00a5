"""Object stores through obstore: which URLs go there, how their stores are made, their errors named.

With obstore installed (zopt's ``obstore`` extra), ``s3://`` (``s3a://``), ``gs://`` and
``az://`` (``azure://``, ``abfs://``, ``abfss://``) locations are read and written through
obstore (Rust ``object_store``: async, the GIL released), as zarr-python's
``zarr.storage.ObjectStore``; every other URL (``memory://``, ``gcs://``, ``http(s)://`` …) goes
through fsspec as before. ``http(s)://`` stays with fsspec: obstore lists an HTTP server with
WebDAV only, and a Zarr group lists its members (a plain web server's index pages are what
fsspec lists). ``ZOPT_OBJECT_STORE=fsspec`` in the environment sends every URL
through fsspec; ``ZOPT_OBJECT_STORE=obstore`` requires obstore (an error where it is missing).

Configuration and credentials come from where they came from: obstore reads the environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``, ``GOOGLE_SERVICE_ACCOUNT``, ``AZURE_STORAGE_ACCOUNT_NAME`` …, and the cloud's
instance metadata), and what fsspec is configured with for the protocol
(``fsspec.config.conf["s3"]``: ``endpoint_url``, ``key``, ``secret``, ``token``,
``client_kwargs.endpoint_url`` / ``region_name``, ``config_kwargs.retries.max_attempts`` /
``connect_timeout``; ``["az"]``: ``account_name``, ``account_key``)
is given to obstore too, so one configuration serves both. An ``http://`` endpoint is allowed
(a local S3-compatible server).

Errors: an obstore error other than "not found" becomes ``SourceUnreachableError`` (a
``ZoptError``) naming the URL and key, on one line.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from zarr.storage import ObjectStore

from zopt.errors import OptionError, ZoptError

if TYPE_CHECKING:
    from obstore.store import ObjectStore as UpstreamStore
    from zarr.abc.store import ByteRequest
    from zarr.core.buffer import Buffer, BufferPrototype

__all__ = [
    "CLIENT_ENV",
    "NamedObjectStore",
    "OBSTORE_SCHEMES",
    "SourceUnreachableError",
    "client",
    "config_fingerprint",
    "named_error",
    "obstore_available",
    "root_store",
    "split_url",
    "zarr_object_store",
]

#: the environment variable choosing the client of object-store URLs: ``obstore`` or ``fsspec``
CLIENT_ENV = "ZOPT_OBJECT_STORE"
#: the URL schemes obstore serves (``memory://`` and the rest stay with fsspec)
OBSTORE_SCHEMES = frozenset({"s3", "s3a", "gs", "az", "azure", "abfs", "abfss"})
_CONFIG_PREFIXES = ("AWS_", "GOOGLE_", "AZURE_", CLIENT_ENV)


class SourceUnreachableError(ZoptError, OSError):
    """The object store or remote file system of a URL did not answer, or refused the credentials."""


def obstore_available() -> bool:
    """Whether obstore can be imported."""
    try:
        import obstore  # noqa: F401
    except ImportError:
        return False
    return True


def client(scheme: str) -> str:
    """``"obstore"`` or ``"fsspec"``: the client of URLs of ``scheme`` (see the module docstring).
    Raises OptionError for another value of ``ZOPT_OBJECT_STORE``, or ``obstore`` asked for and
    not installed."""
    chosen = os.environ.get(CLIENT_ENV, "").strip().lower()
    if chosen not in ("", "obstore", "fsspec"):
        raise OptionError(CLIENT_ENV, f"{chosen!r} is not a client of object stores; allowed: obstore, fsspec")
    if chosen == "fsspec" or scheme not in OBSTORE_SCHEMES:
        return "fsspec"
    if obstore_available():
        return "obstore"
    if chosen == "obstore":
        raise OptionError(CLIENT_ENV, "obstore is not installed (pip install obstore: zopt's obstore extra), or set it to fsspec")
    return "fsspec"


def config_fingerprint() -> tuple[object, ...]:
    """What a store made now depends on: the cloud variables of the environment and fsspec's
    configuration (a store is made again when either changes)."""
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_CONFIG_PREFIXES)))
    try:
        import fsspec.config

        conf = repr(sorted((k, repr(v)) for k, v in fsspec.config.conf.items()))
    except ImportError:
        conf = ""
    return env, conf


def split_url(url: str) -> tuple[str, str, str]:
    """``(scheme, root URL, key)``: ``s3://bucket/a/b`` → ``("s3", "s3://bucket", "a/b")``."""
    parts = urlsplit(url)
    return parts.scheme.lower(), f"{parts.scheme}://{parts.netloc}", parts.path.strip("/")


def _fsspec_conf(scheme: str) -> dict[str, Any]:
    try:
        import fsspec.config
    except ImportError:
        return {}
    names = {"s3a": "s3", "abfs": "az", "abfss": "az", "azure": "az", "gs": "gcs"}
    for name in (scheme, names.get(scheme, scheme)):
        found = fsspec.config.conf.get(name)
        if isinstance(found, dict):
            return found
    return {}


def _retries(conf: dict[str, Any]) -> dict[str, Any] | None:
    """obstore's retry configuration from botocore's (``config_kwargs.retries.max_attempts``)."""
    attempts = ((conf.get("config_kwargs") or {}).get("retries") or {}).get("max_attempts")
    return None if attempts is None else {"max_retries": max(int(attempts) - 1, 0)}


def _options(scheme: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config, client options)`` for obstore from fsspec's configuration of ``scheme``."""
    conf = _fsspec_conf(scheme)
    config: dict[str, Any] = {}
    if scheme in ("s3", "s3a"):
        kwargs = conf.get("client_kwargs") or {}
        endpoint = conf.get("endpoint_url") or kwargs.get("endpoint_url")
        for ours, theirs in (("endpoint", endpoint), ("access_key_id", conf.get("key")),
                             ("secret_access_key", conf.get("secret")), ("session_token", conf.get("token")),
                             ("region", kwargs.get("region_name"))):
            if theirs:
                config[ours] = theirs
        if conf.get("anon"):
            config["skip_signature"] = True
    elif scheme in ("az", "azure", "abfs", "abfss"):
        for ours in ("account_name", "account_key", "sas_token"):
            if conf.get(ours):
                config[ours] = conf[ours]
    endpoint = str(config.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL") or "")
    options: dict[str, Any] = {"allow_http": True} if endpoint.startswith("http://") else {}
    timeout = (conf.get("config_kwargs") or {}).get("connect_timeout")
    if timeout is not None:
        options["connect_timeout"] = f"{float(timeout)}s"
    return config, options


def _make(url: str) -> Any:
    """An obstore store for ``url`` (its path is the store's prefix)."""
    from obstore.store import from_url

    scheme = urlsplit(url).scheme.lower()
    try:
        config, options = _options(scheme)
        make: Any = from_url  # overloaded per scheme: the configuration is built per scheme above
        return make(url, config=config or None, client_options=options or None,
                    retry_config=_retries(_fsspec_conf(scheme)))
    except Exception as exc:  # a configuration obstore refuses: named, not a Rust trace
        raise named_error(url, exc) from exc


_ROOTS: dict[tuple[object, ...], Any] = {}


def root_store(url: str) -> tuple[Any, str]:
    """``(obstore store of the bucket, key)`` of ``url``; one store per bucket and
    configuration in a process (its connections are shared by every file of the bucket)."""
    scheme, root, key = split_url(url)
    cache_key = (root, config_fingerprint())
    store = _ROOTS.get(cache_key)
    if store is None:
        store = _ROOTS[cache_key] = _make(root)
    return store, key


def _first_line(exc: BaseException) -> str:
    text = str(exc).split("\n\nDebug source")[0]
    return " ".join(text.split())[:400]


def named_error(where: str, exc: BaseException, label: str = "src") -> SourceUnreachableError:
    """``exc`` (an obstore error) as a ``SourceUnreachableError`` naming ``where`` on one line."""
    kind = type(exc).__name__
    if kind in ("PermissionDeniedError", "UnauthenticatedError"):
        return SourceUnreachableError(f"{label}: {where} refused access ({kind}: {_first_line(exc)}); check the "
                                      "credentials obstore uses for it (see docs/object-stores.md)")
    return SourceUnreachableError(f"{label}: cannot reach {where} ({kind}: {_first_line(exc)}); check the endpoint "
                                  "and credentials obstore uses for it (see docs/object-stores.md)")


def is_obstore_error(exc: BaseException) -> bool:
    """An error of obstore other than "not found" (those are FileNotFoundError)."""
    return type(exc).__module__.split(".")[0] == "obstore" and not isinstance(exc, FileNotFoundError)


class NamedObjectStore(ObjectStore):  # type: ignore[type-arg]
    """zarr's ObjectStore whose errors name the URL; ``str(store)`` is the URL."""

    def __init__(self, store: UpstreamStore, *, read_only: bool = False, url: str = "") -> None:
        super().__init__(store, read_only=read_only)
        self.url = url

    def with_read_only(self, read_only: bool = False) -> NamedObjectStore:
        return type(self)(self.store, read_only=read_only, url=self.url)

    def __str__(self) -> str:
        return self.url

    def _named(self, key: str, exc: BaseException) -> BaseException:
        return named_error(f"{self.url.rstrip('/')}/{key}" if key else self.url, exc,
                           "src" if self.read_only else "dst") if is_obstore_error(exc) else exc

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
                  ) -> Buffer | None:
        try:
            return await super().get(key, prototype, byte_range)
        except Exception as exc:
            raise self._named(key, exc) from exc

    async def get_partial_values(self, prototype: BufferPrototype,
                                 key_ranges: Iterable[tuple[str, ByteRequest | None]]) -> list[Buffer | None]:
        key_ranges = list(key_ranges)
        try:
            return await super().get_partial_values(prototype, key_ranges)
        except Exception as exc:
            raise self._named(key_ranges[0][0] if key_ranges else "", exc) from exc

    async def exists(self, key: str) -> bool:
        try:
            return await super().exists(key)
        except Exception as exc:
            raise self._named(key, exc) from exc

    async def set(self, key: str, value: Buffer) -> None:
        try:
            await super().set(key, value)
        except Exception as exc:
            raise self._named(key, exc) from exc

    async def delete(self, key: str) -> None:
        try:
            await super().delete(key)
        except Exception as exc:
            raise self._named(key, exc) from exc

    async def getsize(self, key: str) -> int:
        try:
            return await super().getsize(key)
        except Exception as exc:
            raise self._named(key, exc) from exc

    async def delete_dir(self, prefix: str) -> None:
        try:
            await super().delete_dir(prefix)
        except Exception as exc:
            raise self._named(prefix, exc) from exc

    def list_prefix(self, prefix: str) -> AsyncGenerator[str, None]:
        return self._listed(super().list_prefix(prefix), prefix)

    def list_dir(self, prefix: str) -> AsyncGenerator[str, None]:
        return self._listed(super().list_dir(prefix), prefix)

    async def _listed(self, found: AsyncGenerator[str, None], prefix: str) -> AsyncGenerator[str, None]:
        try:
            async for key in found:
                yield key
        except Exception as exc:
            raise self._named(prefix, exc) from exc


def zarr_object_store(url: str, read_only: bool) -> Any:
    """``url`` as zarr's ``ObjectStore`` on an obstore store whose prefix is the URL's path; its
    errors name the URL and key (``SourceUnreachableError``), and ``str()`` of it is ``url``."""
    return NamedObjectStore(_make(url), read_only=read_only, url=url)
