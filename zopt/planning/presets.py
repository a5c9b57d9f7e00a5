"""Named codec chains (presets) for ``zopt recompress --preset`` and ``zopt.xarray.encoding``.

A preset names either a codec menu (``default``, ``archive``: each variable's chain chosen by
trial encodings, ``zopt.planning.optimizer``) or one target codec chain for every variable
(``fast``, ``lossless-8bit``: a ``bytes`` serializer, then one ``conditional`` codec wrapping
standard codecs), plus the decision the ``conditional`` codec uses to pick each chunk's mask.

Readers (issue 36): the menu presets choose, without ``--readers``, among chains plain
zarr-python >= 3.1 reads without zopt (``zopt.planning.readers.DEFAULT_READERS``: numcodecs'
shuffle + zstd, Blosc, pcodec); ``--readers zopt`` adds zopt's ``conditional`` candidates. The
chain presets write zopt's ``conditional`` (read by zarr-python with zopt installed, no import
needed), and say so in their summary:

- ``default``: the ``default`` menu within budget 1 — zopt's default; its chain
  (``conditional([shuffle, zstd(3)])``, ``compress_if_smaller``) is what zopt's own data types
  (``bfloat16``, ``float8_*`` …, which only zopt reads anyway) and ``Preset.array_codecs`` get.
- ``fast``: ``conditional([shuffle, zstd(1)])``, ``always`` — one encoding per chunk and no
  trials, for ingest that must keep up with an instrument or a model; with ``decision never``
  and ``recompress --in-place`` later, write fast and compress later.
- ``archive``: the ``archive`` menu, size first (budget ``inf``): pcodec 8/12, Blosc, numcodecs'
  shuffle + zstd 19, and zopt's ``conditional`` shuffle + zstd 19 with ``--readers zopt``.
- ``lossless-8bit``: ``conditional([zstd(10)])``, ``compress_if_smaller`` — for 1-byte and bool
  data (``uint8``, ``int8``, ``bool``, ``float8_*``), where a byte shuffle does nothing; the
  level is ``zopt.planning.menu.BYTE_LEVEL``.

``shuffle`` is written without ``element_size``: it takes the array's item size when the array
is created (``zopt.xarray.encoding`` sets it explicitly per variable). For 1-byte types it is
left out (``Preset.chain(itemsize=1)``); with a chain preset ``recompress`` writes one chain
for every variable, and the no-op shuffle is skipped per chunk.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zopt.errors import OptionError
from zopt.planning.menu import BYTE_LEVEL

if TYPE_CHECKING:
    from zopt.codecs.decisions import DecisionLike

__all__ = ["PRESETS", "Preset", "chain_words", "get_preset", "presets", "presets_json", "set_element_size"]


@dataclass(frozen=True)
class Preset:
    """A named target chain.

    name : the name ``--preset`` takes.
    summary : one line saying what it is for.
    codecs : the codec chain as Zarr v3 JSON (a fresh copy from ``chain()``).
    decision : the ``conditional`` codec's heuristic (``zopt.codecs.decisions.HEURISTICS``).
    """

    name: str
    summary: str
    codecs: tuple[str, ...]  # JSON text of each codec, so the dataclass stays immutable
    decision: str
    menu: str | None = None  # recompress without --codecs: the zopt.planning.candidates menu it chooses from
    budget: float | None = None  # and the speed budget of that choice (zopt.planning.optimizer)
    purpose: str = ""  # what it is for, in a few words (the "for" column of ``zopt presets``)

    def chain(self, itemsize: int | None = None) -> list[dict[str, Any]]:
        """The codec chain as a list of codec JSON objects (a new copy each call).

        itemsize : bytes per element of the array it is for; with 1, ``shuffle`` (a no-op on
        1-byte elements) is left out, as zopt's default chain does. The ``default`` preset with
        an ``itemsize`` is exactly the engine's chain for that type (``zopt.planning.menu.default_chain``).
        """
        if self.name == "default" and itemsize is not None:  # the engine's own per-type chain
            from zopt.planning.menu import default_chain

            return default_chain(f"V{itemsize}")
        chain = [json.loads(c) for c in self.codecs]
        if itemsize == 1:
            for c in chain:
                cfg = c.get("configuration") or {}
                if c["name"] == "conditional":
                    cfg["codecs"] = [w for w in cfg["codecs"] if w["name"] != "shuffle"]
        return chain

    def array_codecs(self, itemsize: int | None = None, decision: DecisionLike = None) -> dict[str, Any]:
        """``filters``, ``serializer`` and ``compressors`` for ``zarr.create_array`` (or an
        xarray ``encoding``): the chain as codec objects, the ``conditional`` codec deciding with
        ``decision`` (default: the preset's). ``itemsize`` as for ``chain``; ``shuffle`` gets
        it as ``element_size`` when given. Raises ValueError naming ``decision`` if invalid."""
        from zopt.codecs.conditional import with_decision_in
        from zopt.planning.chains import split_chain

        chain = self.chain(itemsize)
        if itemsize is not None:
            set_element_size(chain, itemsize)
        split = split_chain(chain)
        chosen = self.decision if decision is None else decision
        split["compressors"] = list(with_decision_in(split["compressors"] or (), chosen)) or None
        return split

    @property
    def readers(self) -> str:
        """Who reads what the preset writes, in words (``zopt presets``)."""
        if self.menu is not None:
            return "zarr-python ≥ 3.1 + pcodec, no zopt (the menu's choice; --readers zopt adds conditional)"
        return "zopt (conditional): zarr-python with zopt installed"

    @property
    def short_readers(self) -> str:
        """``readers`` in a few words (``zopt presets``' table)."""
        return "zarr-python ≥ 3.1 + pcodec, no zopt" if self.menu is not None else "zopt"

    def writes(self) -> str:
        """What a job with this preset writes, in a few words (``zopt presets``' table): a menu
        preset one chain per variable, chosen among its menu's candidates that the default readers
        read (``zopt.planning.candidates``; zopt's own data types get ``chain()``); a chain preset
        its one chain and the ``conditional`` codec's decision."""
        if self.menu is not None:
            from zopt.planning.candidates import CANDIDATES, MENUS
            from zopt.planning.readers import DEFAULT_READERS

            names = [n for n in MENUS[self.menu] if set(DEFAULT_READERS) <= CANDIDATES[n].readers]
            how = "the smallest" if self.budget == float("inf") else f"the best within budget {self.budget:g}"
            return f"per variable, {how} of: {', '.join(names)}"
        return f"{chain_words(self.chain())}, decision {self.decision}"

    def to_json(self) -> dict[str, Any]:
        """``{"name", "summary", "decision", "codecs", "menu", "budget", "readers"}``, as ``zopt presets --json`` prints."""
        return {"name": self.name, "summary": self.summary, "decision": self.decision, "codecs": self.chain(),
                "menu": self.menu, "budget": None if self.budget is None else str(self.budget), "readers": self.readers}


def set_element_size(codecs: list[dict[str, Any]], itemsize: int) -> None:
    """Give every ``shuffle`` in ``codecs`` (also inside ``conditional``) ``element_size`` if unset."""
    for c in codecs:
        cfg = c.get("configuration") or {}
        if c["name"] == "shuffle" and cfg.get("element_size") is None:
            c["configuration"] = {**cfg, "element_size": itemsize}
        if isinstance(cfg.get("codecs"), list):
            set_element_size(cfg["codecs"], itemsize)


def chain_words(chain: list[dict[str, Any]]) -> str:
    """A codec chain in a few words: ``conditional(shuffle, zstd 1)``, the ``bytes`` serializer left out."""
    def word(c: dict[str, Any]) -> str:
        cfg = c.get("configuration") or {}
        if c["name"] == "conditional":
            return f"conditional({', '.join(map(word, cfg.get('codecs', [])))})"
        level = cfg.get("level", cfg.get("clevel"))
        return c["name"] if level is None else f"{c['name']} {level}"

    return " + ".join(word(c) for c in chain if c["name"] != "bytes")


def _chain(*wrapped: dict[str, Any]) -> tuple[str, ...]:
    chain = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "conditional", "configuration": {"codecs": list(wrapped)}},
    ]
    return tuple(json.dumps(c, sort_keys=True) for c in chain)


def _zstd(level: int) -> dict[str, Any]:
    return {"name": "zstd", "configuration": {"level": level, "checksum": False}}


def _default_codecs() -> tuple[str, ...]:
    from zopt.planning.chains import DEFAULT_CHAIN

    return tuple(json.dumps(c, sort_keys=True) for c in copy.deepcopy(DEFAULT_CHAIN))


#: the presets by name, in the order ``zopt presets`` lists them
PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("default", "zopt's default: each variable's chain chosen from the default menu within budget 1 "
               "(pcodec where it saves > 1 % per extra encode time: smaller, slower to write than zstd); this chain "
               "(zopt's conditional shuffle + zstd(3)) for zopt's own data types",
               _default_codecs(), "compress_if_smaller", "default", 1.0,
               "most data: small, read by plain zarr-python"),
        Preset("fast", "the fast one, for ingest: shuffle + zstd(1) on every chunk, no trial encodings; zopt's "
               "conditional (readers need zopt); with --decision never, compress later with --in-place",
               _chain({"name": "shuffle"}, _zstd(1)), "always", purpose="ingest that must keep up; compress later"),
        Preset("archive", "archive: the smallest chain of the archive menu (pcodec 8/12, blosc, shuffle + zstd 19; "
               "slow to write); this chain (zopt's conditional shuffle + zstd(19)) with --readers zopt too",
               _chain({"name": "shuffle"}, _zstd(19)), "compress_if_smaller", "archive", float("inf"),
               "archives: smallest, slow to write"),
        Preset("lossless-8bit", f"1-byte and bool data: zstd({BYTE_LEVEL}) where it makes the chunk smaller, no "
               "shuffle; zopt's conditional (readers need zopt)",
               _chain(_zstd(BYTE_LEVEL)), "compress_if_smaller", purpose="1-byte and bool data"),
    )
}


def get_preset(name: str) -> Preset:
    """The preset called ``name``. Raises ValueError naming ``preset`` and the allowed names."""
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        raise OptionError("preset", f"unknown preset {name!r}; allowed: {list(PRESETS)}") from None


def presets() -> list[Preset]:
    """All presets, in listing order."""
    return list(PRESETS.values())


def presets_json() -> str:
    """Every preset as indented JSON (a list of ``Preset.to_json()`` objects)."""
    return json.dumps([p.to_json() for p in presets()], indent=2)
