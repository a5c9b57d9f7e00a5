"""The codec menu: the array→bytes chains the planning layer chooses from, per array (issue 26).

Each ``Candidate`` has a stable name, gives its Zarr v3 codec chain (JSON) for a data type, or
None where it does not apply, and states which readers read it (``zopt.planning.readers``) and whether it
keeps the per-chunk ``conditional`` mask. The codecs: ``bytes``, zopt's ``conditional`` over
``shuffle``/``zstd`` (``../shared/specs/optional.md``; only zopt reads it), Zarr v3 ``zstd`` and
``blosc`` (every Zarr v3 reader), numcodecs' ``shuffle`` (``numcodecs.shuffle``: the same bytes
as the spec's shuffle) and pcodec (``numcodecs.pcodec``: Pcodec, Loeb 2024, arXiv:2502.06112),
which zarr-python 3.1 and 3.4 read through ``zarr.codecs.numcodecs`` and zarrs 0.2.3 reads too,
tensorstore not.

============================  ==================================================  ==============
name                          chain after ``bytes`` (little-endian)               data types
============================  ==================================================  ==============
``classic``                   ``zopt.planning.menu.default_chain``:               all
                              ``shuffle-zstd-3``, or ``zstd-10`` for 1-byte
                              types (zopt before issue 26)
``shuffle-zstd-3``            ``conditional([shuffle, zstd 3])``                  item size >= 2
``shuffle-zstd-19``           ``conditional([shuffle, zstd 19])``                 item size >= 2
``zstd-10``                   ``conditional([zstd 10])``                          all
``zstd-19``                   ``conditional([zstd 19])``                          all
``numcodecs-shuffle-zstd-3``  ``numcodecs.shuffle``, ``zstd 3``: ``classic``'s    numpy numbers,
``numcodecs-shuffle-zstd-19`` bytes without the mask header (level 19: archive)   item size >= 2
``plain-zstd-3``              ``zstd 3`` (``classic``'s mask 10, zarr's default)  item size >= 2
``plain-zstd-10``             ``zstd 10`` (``classic`` of 1-byte types, no mask)  bool, 1-byte
``plain-zstd-19``             ``zstd 19``                                         numpy numbers
``blosc-shuffle-5``           ``blosc(zstd, 5, shuffle)``                         numpy numbers
``blosc-bitshuffle-5``        ``blosc(zstd, 5, bitshuffle)``                      numpy numbers
``pcodec-8``                  ``numcodecs.pcodec`` level 8 (array→bytes)          (u)int16/32/64,
``pcodec-12``                 ``numcodecs.pcodec`` level 12                       float16/32/64
============================  ==================================================  ==============

``MENUS`` names the candidates tried by default (``default``) and by ``--preset archive``
(``archive``); ``menu_for`` narrows a menu to what every reader asked for reads (a job without
``--readers`` asks for ``zopt.planning.readers.DEFAULT_READERS``: plain zarr-python, so the
``conditional`` candidates are left out and ``numcodecs-shuffle-zstd-3`` or ``plain-zstd-10`` is
the menu's reference instead of ``classic``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from zopt.compat.zarr_compat import CODEC_PACKAGES, missing_codec_package
from zopt.errors import OptionError
from zopt.planning.menu import BYTE_LEVEL, WIDE_LEVEL, default_chain
from zopt.planning.readers import READERS, parse_readers, unreadable

__all__ = ["CANDIDATES", "MENUS", "PACKAGES", "Candidate", "candidate", "menu_for", "menu_readers", "parse_menu"]

_BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
#: numpy kinds and item sizes numcodecs' PCodec encodes (pcodec 1.x: 16/32/64-bit numbers)
_PCODEC_TYPES = frozenset({("u", 2), ("u", 4), ("u", 8), ("i", 2), ("i", 4), ("i", 8), ("f", 2), ("f", 4), ("f", 8)})


def _dtype(dtype: npt.DTypeLike) -> np.dtype | None:
    try:
        return np.dtype(dtype)
    except TypeError:
        return None


def _numeric(dt: np.dtype | None) -> bool:
    """A plain numpy number or bool (not zopt's ML/complex types, which only zopt's chains read)."""
    return dt is not None and dt.kind in "biufc" and not dt.names and type(dt).__module__.startswith("numpy")


def _conditional(*wrapped: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(_BYTES), {"name": "conditional", "configuration": {"codecs": list(wrapped)}}]


def _zstd(level: int) -> dict[str, Any]:
    return {"name": "zstd", "configuration": {"level": level}}


def _shuffle_zstd(level: int) -> Callable[[np.dtype | None, int], list[dict[str, Any]] | None]:
    def chain(dt: np.dtype | None, itemsize: int) -> list[dict[str, Any]] | None:
        return _conditional({"name": "shuffle"}, _zstd(level)) if itemsize >= 2 else None
    return chain


def _classic(dt: np.dtype | None, itemsize: int) -> list[dict[str, Any]] | None:
    return default_chain(f"V{max(itemsize, 1)}")


def _zstd_only(level: int) -> Callable[[np.dtype | None, int], list[dict[str, Any]] | None]:
    def chain(dt: np.dtype | None, itemsize: int) -> list[dict[str, Any]] | None:
        return _conditional(_zstd(level))
    return chain


def _numcodecs_shuffle_zstd(level: int) -> Callable[[np.dtype | None, int], list[dict[str, Any]] | None]:
    def chain(dt: np.dtype | None, itemsize: int) -> list[dict[str, Any]] | None:
        if not _numeric(dt) or itemsize < 2:
            return None
        return [dict(_BYTES), {"name": "numcodecs.shuffle", "configuration": {"elementsize": itemsize}}, _zstd(level)]
    return chain


def _plain_zstd(level: int, sizes: str) -> Callable[[np.dtype | None, int], list[dict[str, Any]] | None]:
    """``bytes`` + ``zstd(level)`` for numpy numbers of 1 byte (``sizes="1"``), of 2 and more
    (``"wide"``) or of any size (``"all"``)."""
    def chain(dt: np.dtype | None, itemsize: int) -> list[dict[str, Any]] | None:
        fits = {"1": itemsize == 1, "wide": itemsize >= 2, "all": True}[sizes]
        return [dict(_BYTES), _zstd(level)] if _numeric(dt) and fits else None
    return chain


def _blosc(shuffle: str) -> Callable[[np.dtype | None, int], list[dict[str, Any]] | None]:
    def chain(dt: np.dtype | None, itemsize: int) -> list[dict[str, Any]] | None:
        if not _numeric(dt):
            return None
        return [dict(_BYTES), {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 5, "shuffle": shuffle,
                                                                  "typesize": itemsize, "blocksize": 0}}]
    return chain


def _pcodec(level: int) -> Callable[[np.dtype | None, int], list[dict[str, Any]] | None]:
    def chain(dt: np.dtype | None, itemsize: int) -> list[dict[str, Any]] | None:
        if dt is None or not _numeric(dt) or (dt.kind, dt.itemsize) not in _PCODEC_TYPES:
            return None
        return [{"name": "numcodecs.pcodec", "configuration": {"level": level}}]
    return chain


_ZOPT = frozenset({"zopt"})
_CORE = frozenset(READERS)  # every reader
_NUMCODECS = frozenset({"zopt", "zarr-python", "zarr-python-3.2", "zarrs"})  # numcodecs.pcodec, numcodecs.shuffle


@dataclass(frozen=True)
class Candidate:
    """One entry of the menu.

    name : stable name (``--menu``, plans, reports).
    summary : one line for ``zopt presets`` and docs.
    build : ``(numpy dtype or None, item size) -> chain JSON or None``.
    readers : the ``zopt.planning.readers`` names that read every chain it gives (tested in
        ``tests/planning/test_candidates.py``).
    keeps_mask : True when the chain has a ``conditional`` codec, so a plan keeps a mask per chunk.
    bounded : True when its encoded size has a known bound (``zopt.codecs.chain``), as
        ``fixed-slot`` shards need.
    encode_cost : its encode CPU time relative to ``classic`` (a fixed figure, measured by
        ``benchmarks/menu_costs.py`` on the corpus and in ``benchmarks/recompress.py``): the cost
        model charges this, not the trial's own timing, so the same data always gets the same
        chain whatever else the machine is doing.
    """

    name: str
    summary: str
    build: Callable[[np.dtype | None, int], list[dict[str, Any]] | None]
    readers: frozenset[str]
    keeps_mask: bool
    bounded: bool = True
    encode_cost: float = 1.0

    def chain(self, dtype: npt.DTypeLike) -> list[dict[str, Any]] | None:
        """The codec chain (a new JSON list) for ``dtype`` (anything ``numpy.dtype`` accepts, or a
        zopt data type's numpy dtype), or None when the candidate does not apply to it (pcodec:
        no 8-bit, bool or ML types; blosc: plain numpy numbers only; shuffle: item size >= 2)."""
        dt = _dtype(dtype)
        itemsize = dt.itemsize if dt is not None else 0
        return self.build(dt, itemsize)


#: every candidate by name, in the order tables list them
CANDIDATES: dict[str, Candidate] = {
    c.name: c
    for c in (
        Candidate("classic", "zopt.planning.menu.default_chain: the chain zopt wrote for every variable before issue 26",
                  _classic, _ZOPT, True),
        Candidate("shuffle-zstd-3", f"conditional([shuffle, zstd {WIDE_LEVEL}])",
                  _shuffle_zstd(WIDE_LEVEL), _ZOPT, True),
        Candidate("zstd-10", f"conditional([zstd {BYTE_LEVEL}]): the default of 1-byte and bool types",
                  _zstd_only(BYTE_LEVEL), _ZOPT, True, encode_cost=3.0),
        Candidate("shuffle-zstd-19", "conditional([shuffle, zstd 19]): slow, small", _shuffle_zstd(19), _ZOPT, True,
                  encode_cost=40.0),
        Candidate("zstd-19", "conditional([zstd 19]): slow, small, for 1-byte types", _zstd_only(19), _ZOPT, True,
                  encode_cost=40.0),
        Candidate("numcodecs-shuffle-zstd-3", f"numcodecs.shuffle + zstd {WIDE_LEVEL}: classic's bytes without the "
                  "mask header, read by zarr-python and zarrs without zopt", _numcodecs_shuffle_zstd(WIDE_LEVEL),
                  _NUMCODECS, False, False),
        Candidate("numcodecs-shuffle-zstd-19", "numcodecs.shuffle + zstd 19: slow, small", _numcodecs_shuffle_zstd(19),
                  _NUMCODECS, False, False, encode_cost=40.0),
        Candidate("plain-zstd-3", f"zstd {WIDE_LEVEL} without shuffle (zarr's default compressor; classic's "
                  "mask 10): read by every Zarr v3 reader", _plain_zstd(WIDE_LEVEL, "wide"), _CORE, False),
        Candidate("plain-zstd-10", f"zstd {BYTE_LEVEL} for bool and 1-byte types (classic's, without the mask "
                  "header): read by every Zarr v3 reader", _plain_zstd(BYTE_LEVEL, "1"), _CORE, False, encode_cost=3.0),
        Candidate("plain-zstd-19", "zstd 19 without shuffle: slow, small", _plain_zstd(19, "all"), _CORE, False,
                  encode_cost=40.0),
        Candidate("blosc-shuffle-5", "blosc(zstd, 5, byte shuffle): read by every Zarr v3 reader",
                  _blosc("shuffle"), _CORE, False, encode_cost=2.0),
        Candidate("blosc-bitshuffle-5", "blosc(zstd, 5, bit shuffle): read by every Zarr v3 reader",
                  _blosc("bitshuffle"), _CORE, False, encode_cost=2.0),
        Candidate("pcodec-8", "numcodecs.pcodec level 8: numeric compression (16/32/64-bit numbers)",
                  _pcodec(8), _NUMCODECS, False, False, encode_cost=2.0),
        Candidate("pcodec-12", "numcodecs.pcodec level 12: slower, smaller", _pcodec(12), _NUMCODECS, False, False,
                  encode_cost=2.5),
    )
}

#: named menus: which candidates the optimizer tries
#: (the first that applies and that the readers read is the reference of the budget, ``zopt.planning.optimizer``)
MENUS: dict[str, tuple[str, ...]] = {
    "default": ("classic", "numcodecs-shuffle-zstd-3", "plain-zstd-3", "plain-zstd-10", "blosc-shuffle-5",
                "blosc-bitshuffle-5", "pcodec-8"),
    "archive": ("shuffle-zstd-19", "zstd-19", "numcodecs-shuffle-zstd-19", "plain-zstd-19", "blosc-shuffle-5",
                "blosc-bitshuffle-5", "pcodec-8", "pcodec-12"),
}


def candidate(name: str) -> Candidate:
    """The candidate called ``name``. Raises ValueError naming ``menu`` and the allowed names."""
    try:
        return CANDIDATES[name]
    except (KeyError, TypeError):
        raise OptionError("menu", f"unknown candidate {name!r}; allowed: {list(CANDIDATES)}") from None


def parse_menu(menu: str | Sequence[str] | None) -> tuple[str, ...]:
    """Candidate names from a menu name (``MENUS``), a comma-separated string or a list.

    None is the ``default`` menu. Raises ValueError naming ``menu`` and the allowed values for an
    unknown name or an empty menu.
    """
    if menu is None:
        return MENUS["default"]
    if isinstance(menu, str):
        if menu in MENUS:
            return MENUS[menu]
        menu = [m.strip() for m in menu.split(",") if m.strip()]
    names = tuple(dict.fromkeys(menu))
    if not names:
        raise OptionError("menu", f"empty; allowed: a menu of {list(MENUS)} or candidate names from {list(CANDIDATES)}")
    for n in names:
        if n not in CANDIDATES:
            raise OptionError("menu", f"unknown candidate {n!r}; allowed: a menu of {list(MENUS)} or candidate names "
                             f"from {list(CANDIDATES)}")
    return names


def _named(menu: str | Sequence[str] | None) -> bool:
    """Whether ``menu`` is a named menu (``MENUS``; None: ``default``), given by name or parsed."""
    return menu is None or (menu in MENUS if isinstance(menu, str) else tuple(menu) in MENUS.values())


def menu_readers(readers: Iterable[str] | str | None, menu: str | Sequence[str] | None = None,
                 decision_given: bool = False) -> list[str]:
    """The readers a job narrows ``menu`` to (``menu_for``'s ``readers``): ``readers`` as given;
    else ``["zopt"]`` with an explicit decision (it decides the masks of ``conditional``, which
    only zopt reads); else none for a menu of candidates named one by one (written as asked, like
    ``--codecs``); else ``zopt.planning.readers.DEFAULT_READERS`` (a named menu: plain
    zarr-python, issue 36). Raises ValueError naming ``readers`` for an unknown reader."""
    from zopt.planning.readers import effective_readers

    given = parse_readers(readers)
    if given or decision_given:
        return effective_readers(given, decision_given)
    if not _named(menu):
        return []
    return effective_readers(None)


#: codec name → the Python package that implements it (a reader needs it as well)
PACKAGES = CODEC_PACKAGES


def _missing_package(chain: list[dict[str, Any]]) -> tuple[str, str] | None:
    """``(codec, package)`` for the first codec of ``chain`` whose package is not importable."""
    for c in chain:
        package = missing_codec_package(c["name"])
        if package is not None:
            return c["name"], package
    return None


def menu_for(dtype: npt.DTypeLike, menu: str | Sequence[str] | None = None,
             readers: Iterable[str] | str | None = None) -> dict[str, list[dict[str, Any]]]:
    """``{candidate name: chain}`` of ``menu`` that apply to ``dtype`` and that every reader of
    ``readers`` reads (names or one comma-separated string), in menu order.

    A candidate whose codec's package (``PACKAGES``: pcodec) is not installed is left out of a
    named menu, and refused when named alone: ValueError naming ``menu``, the codec and the package.
    Raises ValueError naming ``readers`` for an unknown reader, ``menu`` for an unknown candidate,
    and ``readers`` when no candidate is left for this data type (naming what each reader lacks).
    """
    readers = parse_readers(readers)
    out: dict[str, list[dict[str, Any]]] = {}
    skipped = []
    names = parse_menu(menu)
    for name in names:
        c = CANDIDATES[name]
        chain = c.chain(dtype)
        if chain is None:
            continue
        missing = _missing_package(chain)
        if missing is not None:
            if _named(menu):
                continue  # a named menu goes without it; a candidate asked for by name is refused
            raise OptionError("menu", f"candidate {name!r} writes codec {missing[0]!r}, whose package {missing[1]!r} is not "
                             f"installed here (pip install {missing[1]}); every reader needs it too")
        if not set(readers) <= c.readers or unreadable(chain, readers):
            skipped.append(name)
            continue
        out[name] = chain
    if not out:
        raise OptionError("readers", f"no candidate of the menu {list(names)} for data type {dtype} is read by "
                         f"every reader of {readers} (left out: {skipped}); allowed menus for them: candidates whose "
                         f"readers include them, {[n for n, c in CANDIDATES.items() if set(readers) <= c.readers]}")
    return out
