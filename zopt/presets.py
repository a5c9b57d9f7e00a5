"""Named codec chains (presets) for ``zopt recompress --preset`` and ``zopt.xarray.encoding``.

A preset is a target codec chain (Zarr v3 codec JSON: a ``bytes`` serializer, then one
``conditional`` codec wrapping standard codecs) plus the decision the ``conditional`` codec uses
to pick each chunk's mask. Everything a preset writes is read by any zarr-python with zopt
installed; the wrapped codecs are ``shuffle`` (the spec's byte shuffle) and Zarr v3's ``zstd``.

- ``default``: ``conditional([shuffle, zstd(3)])``, ``compress_if_smaller`` — zopt's default.
- ``fast``: ``conditional([shuffle, zstd(1)])``, ``always`` — one encoding per chunk and no
  trials, for ingest that must keep up with an instrument or a model.
- ``archive``: ``conditional([shuffle, zstd(19)])``, ``compress_if_smaller`` — slower, smaller.
- ``lossless-8bit``: ``conditional([zstd(5)])``, ``compress_if_smaller`` — for 1-byte and bool
  data (``uint8``, ``int8``, ``bool``, ``float8_*``), where a byte shuffle does nothing.

``shuffle`` is written without ``element_size``: it takes the array's item size when the array
is created (``zopt.xarray.encoding`` sets it explicitly per variable).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

__all__ = ["PRESETS", "Preset", "get_preset", "presets", "presets_json"]


@dataclass(frozen=True)
class Preset:
    """A named target chain.

    name : the name ``--preset`` takes.
    summary : one line saying what it is for.
    codecs : the codec chain as Zarr v3 JSON (a fresh copy from ``chain()``).
    decision : the ``conditional`` codec's heuristic (``zopt.decisions.HEURISTICS``).
    """

    name: str
    summary: str
    codecs: tuple[str, ...]  # JSON text of each codec, so the dataclass stays immutable
    decision: str

    def chain(self) -> list[dict[str, Any]]:
        """The codec chain as a list of codec JSON objects (a new copy each call)."""
        return [json.loads(c) for c in self.codecs]

    def to_json(self) -> dict[str, Any]:
        """``{"name", "summary", "decision", "codecs"}``, as ``zopt presets --json`` prints."""
        return {"name": self.name, "summary": self.summary, "decision": self.decision, "codecs": self.chain()}


def _chain(*wrapped: dict[str, Any]) -> tuple[str, ...]:
    chain = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "conditional", "configuration": {"codecs": list(wrapped)}},
    ]
    return tuple(json.dumps(c, sort_keys=True) for c in chain)


def _zstd(level: int) -> dict[str, Any]:
    return {"name": "zstd", "configuration": {"level": level, "checksum": False}}


def _default_codecs() -> tuple[str, ...]:
    from zopt.engine import DEFAULT_CHAIN

    return tuple(json.dumps(c, sort_keys=True) for c in copy.deepcopy(DEFAULT_CHAIN))


#: the presets by name, in the order ``zopt presets`` lists them
PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("default", "zopt's default: shuffle + zstd(3) where they make the chunk smaller",
               _default_codecs(), "compress_if_smaller"),
        Preset("fast", "ingest: shuffle + zstd(1) on every chunk, no trial encodings",
               _chain({"name": "shuffle"}, _zstd(1)), "always"),
        Preset("archive", "archive: shuffle + zstd(19) where they make the chunk smaller (slow to write)",
               _chain({"name": "shuffle"}, _zstd(19)), "compress_if_smaller"),
        Preset("lossless-8bit", "1-byte and bool data: zstd(5) where it makes the chunk smaller, no shuffle",
               _chain(_zstd(5)), "compress_if_smaller"),
    )
}


def get_preset(name: str) -> Preset:
    """The preset called ``name``. Raises ValueError naming ``preset`` and the allowed names."""
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        raise ValueError(f"preset: unknown preset {name!r}; allowed: {list(PRESETS)}") from None


def presets() -> list[Preset]:
    """All presets, in listing order."""
    return list(PRESETS.values())


def presets_json() -> str:
    """Every preset as indented JSON (a list of ``Preset.to_json()`` objects)."""
    return json.dumps([p.to_json() for p in presets()], indent=2)
