"""Parsing a codec's ``{"name": …, "configuration": {…}}`` with a clear error for unknown keys."""

from __future__ import annotations

from typing import Any

from zarr.core.common import parse_named_configuration

__all__ = ["codec_configuration"]


def codec_configuration(data: dict[str, Any], name: str, allowed: set[str], *, required: bool = False) -> dict[str, Any]:
    """The configuration object of codec ``name`` (``{}`` when omitted and not ``required``).

    Raises ValueError naming the unknown keys and the allowed ones.
    """
    _, config = parse_named_configuration(data, name, require_configuration=required)
    config = dict(config or {})
    unknown = set(config) - allowed
    if unknown:
        raise ValueError(f"{name}: unknown configuration keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    return config
