"""Which readers read which codecs and data types: the default chains, ``--readers``, the reader line.

=====================  ===============================================================
reader                 codecs it reads (Zarr v3 names)
=====================  ===============================================================
``zopt``               everything zopt writes (zarr-python with zopt installed)
``zarr-python``        zarr-python >= 3.1 without zopt (no ``import zopt``, no zopt entry
                       point), with numcodecs and pcodec installed: ``bytes``,
                       ``transpose``, ``sharding_indexed``, ``zstd``, ``blosc``, ``gzip``,
                       ``crc32c``, ``vlen-utf8``, ``vlen-bytes`` and ``numcodecs.*``
``zarr-python-3.2``    zarr-python >= 3.2 without zopt: the same, and ``scale_offset`` and
                       ``cast_value``, which zarr-python ships from 3.2 on (3.1 does not)
``tensorstore``        ``bytes``, ``transpose``, ``sharding_indexed``, ``zstd``, ``blosc``,
                       ``gzip``, ``crc32c``
``zarrs``              the same core codecs, ``packbits``, ``numcodecs.pcodec`` and
                       ``numcodecs.shuffle`` (zarrs 0.2.3; no ``scale_offset``/``cast_value``)
=====================  ===============================================================

The oldest versions that open zopt's output are ``MIN_VERSIONS``: zarr-python 3.1, pcodec 0.3.6
(pcodec's format 4; 0.3.0-0.3.5 refuse it), zarrs 0.2.3; the reader line names them.

``conditional``, zopt's ``shuffle``, ``reshape`` and ``zopt.lorenzo`` are zopt's alone, and so are
zopt's data types (``int4``, ``bfloat16``, ``float8_*``, … ``zopt.dtypes``): zarr-python parses an
array's data type before its codecs, so an array of one needs zopt whatever its codecs.

``DEFAULT_READERS`` is what a job without ``--readers`` writes for (issue 36: a store a user
without zopt opens): ``zopt.job`` narrows the codec menu to it and re-expresses CF packing only
for readers of ``scale_offset``/``cast_value``. ``store_readers`` and ``reader_line`` say who
reads a written store, from its arrays' codecs and data types (the job's summary and ``zopt
info`` end with that line). The tables in ``docs/interop.md`` say what the tests establish.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zarr.storage import StoreLike

from zopt.errors import OptionError

__all__ = ["DEFAULT_READERS", "MIN_VERSIONS", "READERS", "ZOPT_DATA_TYPES", "check_readers", "effective_readers", "parse_readers",
           "array_codecs", "reader_line", "reads_repacking", "store_arrays", "store_readers", "unreadable"]

_CORE = frozenset({"bytes", "transpose", "sharding_indexed", "zstd", "blosc", "gzip", "crc32c"})
_ZARR_PYTHON = _CORE | {"vlen-utf8", "vlen-bytes"}
#: reader → codec names it reads (None: all); ``numcodecs.*`` is read by both zarr-python readers
READERS: dict[str, frozenset[str] | None] = {
    "zopt": None,
    "zarr-python": _ZARR_PYTHON,
    "zarr-python-3.2": _ZARR_PYTHON | {"scale_offset", "cast_value"},
    "tensorstore": _CORE,
    "zarrs": _CORE | {"packbits", "numcodecs.pcodec", "numcodecs.shuffle"},
}
#: the readers a job writes for when none are given (``zopt.job``): plain zarr-python >= 3.1
DEFAULT_READERS: tuple[str, ...] = ("zarr-python",)
#: the oldest version of a reader's package that opens what zopt writes, as the reader line names
#: them: pcodec >= 1.0 (which zopt writes with) writes format 4, which pcodec 0.3.0-0.3.5 refuse
#: ("format version (4) exceeds max supported (3)"); numcodecs 0.16, the last for Python 3.11,
#: pins pcodec < 0.4. ``tests/interop/test_portable.py`` opens every default output with zarr 3.1,
#: numcodecs 0.16 and pcodec 0.3.6 on Python 3.11; zarrs is tested at 0.2.3.
MIN_VERSIONS: dict[str, str] = {"zarr-python": "3.1", "pcodec": "0.3.6", "zarrs": "0.2.3"}
#: the readers the reader line names, in its order (zopt last: it reads everything)
_ORDER = ("zarr-python", "zarrs", "tensorstore")


def _zopt_data_types() -> frozenset[str]:
    from zopt.dtypes import ML_DTYPES
    from zopt.dtypes.complex import COMPLEX_DTYPES

    return frozenset(ML_DTYPES) | frozenset(COMPLEX_DTYPES)


#: Zarr v3 data type names that only zopt defines (``zopt.dtypes``)
ZOPT_DATA_TYPES: frozenset[str] = _zopt_data_types()


def parse_readers(readers: Iterable[str] | str | None) -> list[str]:
    """Reader names from a list or one comma-separated string (None or empty: ``[]``). Raises
    ValueError naming ``readers`` and the allowed names for an unknown one."""
    if isinstance(readers, str):  # the one place reader text is split
        readers = [r.strip() for r in readers.split(",") if r.strip()]
    out = sorted(readers) if isinstance(readers, Set) else list(readers or ())
    bad = [r for r in out if r not in READERS]
    if bad:
        raise OptionError("readers", f"{bad} are not among {sorted(READERS)}")
    return out


def _names_of(readers: Collection[str]) -> list[str]:
    """Parsed reader names in a stable order; a string is refused (``parse_readers`` parses text)."""
    if isinstance(readers, str):
        raise TypeError(f"readers: {readers!r} is text; give reader names (zopt.planning.readers.parse_readers)")
    return sorted(readers) if isinstance(readers, Set) else list(readers)


def effective_readers(readers: Iterable[str] | str | None, decision_given: bool = False) -> list[str]:
    """The readers a job's own choices (the codec menu, CF re-expression) must suit: ``readers``
    as given, else ``DEFAULT_READERS``; with none given and an explicit ``decision`` (it decides
    the masks of zopt's ``conditional``, which only zopt reads), ``["zopt"]``."""
    given = parse_readers(readers)
    if given:
        return given
    return ["zopt"] if decision_given else list(DEFAULT_READERS)


def _names(chain: Iterable[dict[str, Any]]) -> list[str]:
    out = []
    for c in chain:
        out.append(c["name"])
        cfg = c.get("configuration") or {}
        if c["name"] == "sharding_indexed":  # (conditional's wrapped codecs: read only through conditional)
            out += _names(cfg.get("codecs", [])) + _names(cfg.get("index_codecs", []))
    return out


def _reads(reader: str, name: str) -> bool:
    known = READERS[reader]
    if known is None:
        return True
    return name in known or (reader.startswith("zarr-python") and name.startswith("numcodecs."))


def unreadable(chain: Sequence[dict[str, Any]], readers: Collection[str]) -> list[tuple[str, str]]:
    """``[(reader, codec name)]`` for each codec of ``chain`` (codec JSON, shards included) a
    reader of ``readers`` (names of ``READERS``, parsed: ``parse_readers``) cannot read."""
    readers = _names_of(readers)
    return [(r, n) for r in readers for n in dict.fromkeys(_names(chain)) if not _reads(r, n)]


def reads_repacking(readers: Collection[str]) -> bool:
    """Whether every reader of ``readers`` (parsed names) reads ``scale_offset`` + ``cast_value`` (files
    packed differently are re-expressed with them, ``zopt.io.packing``; else written as their floats)."""
    chain = [{"name": "scale_offset"}, {"name": "cast_value"}]
    return not unreadable(chain, readers)


def check_readers(chains: Mapping[str, Sequence[dict[str, Any]]], readers: Collection[str]) -> None:
    """Raise ValueError when a variable's chain (``{variable: codec JSON list}``, the inner chain
    when sharded: every reader reads ``sharding_indexed``) holds a codec one of ``readers``
    (parsed names, ``parse_readers``) cannot read, naming the variable, the codec and the reader."""
    readers = _names_of(readers)
    if not readers:
        return
    for var, chain in chains.items():
        missing = unreadable(list(chain), readers)
        if missing:
            what = "; ".join(f"{r} cannot read {n!r}" for r, n in missing)
            hint = (" (zarr-python reads them from 3.2 on: --readers zarr-python-3.2)"
                    if {n for _, n in missing} <= {"scale_offset", "cast_value"} else "")
            raise OptionError("readers", f"the chain of {var!r} is not readable by every reader asked for ({what}){hint}; "
                             "choose codecs they read (docs/lossy.md, 'Readers'), e.g. --codecs "
                             "'[{\"name\": \"bytes\"}, {\"name\": \"zstd\", \"configuration\": {\"level\": 3}}]' and keepbits/info rather than abs")


# -- who reads a written store ------------------------------------------------------------------


def store_arrays(store: StoreLike) -> dict[str, tuple[list[dict[str, Any]], Any]]:
    """``{array path: (codec JSON list, data type JSON)}`` of every array of ``store`` (a path, a
    URL or a zarr Store; a group with its child groups, or one root array, path ``""``) as zarr
    opens it: the consolidated metadata when there is some (``array_codecs``)."""
    import warnings

    import zarr

    with warnings.catch_warnings():  # numcodecs and consolidation warnings are zarr's, not the caller's
        warnings.simplefilter("ignore")
        node = zarr.open(store, mode="r")
        found = {"": node} if isinstance(node, zarr.Array) else {
            p: a for p, a in node.members(max_depth=None) if isinstance(a, zarr.Array)}
        return array_codecs(found)


def array_codecs(arrays: Mapping[str, Any]) -> dict[str, tuple[list[dict[str, Any]], Any]]:
    """``{name: (codec JSON list, data type JSON)}`` of opened ``zarr.Array`` objects, sorted by
    name. A Zarr v2 array's codecs are given as ``[{"name": "zarr-v2"}]``, which only the
    zarr-python readers and zopt are taken to read."""
    out = {}
    for path in sorted(arrays):
        meta = arrays[path].metadata
        if meta.zarr_format == 2:
            out[path] = ([{"name": "zarr-v2"}], str(arrays[path].dtype))
            continue
        d = meta.to_dict()
        out[path] = ([c if isinstance(c, dict) else c.to_dict() for c in d["codecs"]], d["data_type"])
    return out


def _type_name(data_type: object) -> str:
    """The name of a data type's JSON (a name, or an object with ``name`` and ``configuration``)."""
    return str(data_type.get("name", "")) if isinstance(data_type, dict) else str(data_type)


def store_readers(arrays: Mapping[str, tuple[Sequence[dict[str, Any]], Any]]) -> dict[str, list[tuple[str, str]]]:
    """For each reader of ``READERS``, ``[(array, what it cannot read)]`` over ``arrays`` (``{path:
    (codec JSON list, data type JSON)}``, as ``store_arrays`` gives): a codec name, or ``"data
    type NAME"`` for zopt's own data types. An empty list: the reader reads every array."""
    out: dict[str, list[tuple[str, str]]] = {r: [] for r in READERS}
    for path, (codecs, data_type) in arrays.items():
        name = _type_name(data_type)
        for reader in READERS:
            if reader != "zopt" and name in ZOPT_DATA_TYPES:
                out[reader].append((path, f"data type {name}"))
                continue
            if list(codecs) == [{"name": "zarr-v2"}]:
                if not reader.startswith("zarr-python") and reader != "zopt":
                    out[reader].append((path, "Zarr v2"))
                continue
            out[reader] += [(path, n) for _, n in unreadable(list(codecs), [reader])]
    return out


def _what(missing: list[tuple[str, str]], limit: int = 3) -> str:
    """``conditional in a, b and 2 more; data type bfloat16 in w``: what a reader misses, by codec."""
    by: dict[str, list[str]] = {}
    for path, what in missing:
        by.setdefault(what, []).append(path or "/")
    parts = []
    for what, paths in by.items():
        more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
        parts.append(f"{what} in {', '.join(paths[:limit])}{more}")
    return "; ".join(parts)


def reader_line(arrays: Mapping[str, tuple[Sequence[dict[str, Any]], Any]]) -> str:
    """One line saying which readers open a store whose arrays are ``arrays`` (``store_arrays``),
    short enough for a 100-column terminal in the common cases. Readers other than zopt are
    named only where they need no zopt:

    - ``readers: any Zarr v3 reader (zarr-python ≥ 3.1, zarrs, tensorstore)``;
    - ``readers: zarr-python ≥ 3.1 + pcodec ≥ 0.3.6, zarrs ≥ 0.2.3; not tensorstore: numcodecs.pcodec``
      (``≥ 3.2`` where ``scale_offset``/``cast_value`` are written; ``+ pcodec ≥ 0.3.6``: a reader
      needs the ``pcodec`` package, of a version that reads pcodec's format 4; zarrs' version is
      named where a ``numcodecs.*`` codec is written, ``MIN_VERSIONS``);
    - ``readers: zopt only (zarr-python with zopt installed): conditional in time_bnds``."""
    if not arrays:
        return "readers: no arrays"
    missing = store_readers(arrays)
    names = {n for codecs, _ in arrays.values() for n in _names(codecs)}
    plain = "zarr-python" if not missing["zarr-python"] else "zarr-python-3.2" if not missing["zarr-python-3.2"] else None
    if plain is None and missing["zarrs"] and missing["tensorstore"]:
        return "readers: zopt only (zarr-python with zopt installed): " + _what(missing["zarr-python-3.2"])
    who = []
    if plain is not None:
        who.append(f"zarr-python ≥ {MIN_VERSIONS['zarr-python'] if plain == 'zarr-python' else '3.2'}"
                   + (f" + pcodec ≥ {MIN_VERSIONS['pcodec']}" if "numcodecs.pcodec" in names else ""))
    numcodecs = any(n.startswith("numcodecs.") for n in names)
    who += [f"zarrs ≥ {MIN_VERSIONS['zarrs']}" if r == "zarrs" and numcodecs else r
            for r in ("zarrs", "tensorstore") if not missing[r]]
    head = f"readers: any Zarr v3 reader ({', '.join(who)})" if len(who) == 3 else f"readers: {', '.join(who)}"
    lacking = [("zarr-python 3.1", missing["zarr-python"])] if plain == "zarr-python-3.2" else []
    lacking += [("zarr-python", missing["zarr-python-3.2"])] if plain is None else []
    lacking += [(r, missing[r]) for r in ("zarrs", "tensorstore") if missing[r]]
    groups: dict[tuple[str, ...], list[str]] = {}  # readers lacking the same codecs, said once
    for label, miss in lacking:
        groups.setdefault(tuple(dict.fromkeys(what for _, what in miss)), []).append(label)
    nots = [f"not {', '.join(labels)}: {', '.join(codecs)}" for codecs, labels in groups.items()]
    return "; ".join([head, *nots])
