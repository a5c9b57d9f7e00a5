"""Which readers read which codecs: ``recompress(readers=[…])`` refuses chains they cannot read.

=================  ===================================================================
reader             codecs it reads (Zarr v3 names)
=================  ===================================================================
``zopt``           everything zopt writes (zarr-python with zopt installed)
``zarr-python``    zarr-python >= 3.2 without zopt: ``bytes``, ``transpose``,
                   ``sharding_indexed``, ``zstd``, ``blosc``, ``gzip``, ``crc32c``,
                   ``scale_offset``, ``cast_value`` and ``numcodecs.*``
``tensorstore``    ``bytes``, ``transpose``, ``sharding_indexed``, ``zstd``, ``blosc``,
                   ``gzip``, ``crc32c``
``zarrs``          the same core codecs, ``packbits`` and ``numcodecs.pcodec`` (zarrs 0.2.3;
                   no ``scale_offset``/``cast_value``)
=================  ===================================================================

``conditional``, ``shuffle``, ``reshape`` and ``zopt.lorenzo`` are zopt's alone (``numcodecs.pcodec``,
a ``numcodecs.*`` codec, is read by zarr-python >= 3.2 with numcodecs and pcodec installed). The tables in ``docs/lossy.md``
and ``docs/interop.md`` say what the tests establish.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["READERS", "check_readers", "unreadable"]

_CORE = frozenset({"bytes", "transpose", "sharding_indexed", "zstd", "blosc", "gzip", "crc32c"})
#: reader → codec names it reads (None: all)
READERS: dict[str, frozenset[str] | None] = {
    "zopt": None,
    "zarr-python": _CORE | {"scale_offset", "cast_value"},
    "tensorstore": _CORE,
    "zarrs": _CORE | {"packbits", "numcodecs.pcodec"},
}


def _names(chain: Iterable[dict[str, Any]]) -> list[str]:
    out = []
    for c in chain:
        out.append(c["name"])
        if c["name"] == "sharding_indexed":
            cfg = c.get("configuration", {})
            out += _names(cfg.get("codecs", [])) + _names(cfg.get("index_codecs", []))
    return out


def _reads(reader: str, name: str) -> bool:
    known = READERS[reader]
    if known is None:
        return True
    return name in known or (reader == "zarr-python" and name.startswith("numcodecs."))


def unreadable(chain: Sequence[dict[str, Any]], readers: Iterable[str]) -> list[tuple[str, str]]:
    """``[(reader, codec name)]`` for each codec of ``chain`` (codec JSON, shards included) a
    reader cannot read. Raises ValueError naming ``readers`` for an unknown reader."""
    readers = list(readers)
    bad = [r for r in readers if r not in READERS]
    if bad:
        raise ValueError(f"readers: {bad} are not among {sorted(READERS)}")
    return [(r, n) for r in readers for n in dict.fromkeys(_names(chain)) if not _reads(r, n)]


def check_readers(chains: Mapping[str, Sequence[dict[str, Any]]], readers: Iterable[str] | str | None) -> None:
    """Raise ValueError when a variable's chain (``{variable: codec JSON list}``, the inner chain
    when sharded: every reader reads ``sharding_indexed``) holds a codec one of ``readers``
    (names, or one comma-separated string) cannot read, naming the variable, the codec and the
    reader."""
    if not readers:
        return
    if isinstance(readers, str):
        readers = [r.strip() for r in readers.split(",") if r.strip()]
    readers = list(readers)
    for var, chain in chains.items():
        missing = unreadable(list(chain), readers)
        if missing:
            what = "; ".join(f"{r} cannot read {n!r}" for r, n in missing)
            raise ValueError(f"readers: the chain of {var!r} is not readable by every reader asked for ({what}); "
                             "choose codecs they read (docs/lossy.md, 'Readers'), e.g. --codecs "
                             "'[{\"name\": \"bytes\"}, {\"name\": \"zstd\", \"configuration\": {\"level\": 3}}]' and keepbits/info rather than abs")
