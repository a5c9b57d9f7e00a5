"""Rounding as the lossy modes store values: bitround (``keepbits``, ``info``, ``plan``), ``rel``'s
rounding, and the sentinels restored exactly. Pure array functions; ``zopt.lossy.prepare`` applies
them chunk by chunk while writing, ``zopt.lossy.check`` recomputes them for ``zopt verify``, and
the tail trial (``zopt.lossy.tails``) encodes what they give.

The rounding itself is numcodecs' ``BitRound`` (round to nearest, ties to even, as
``numcodecs.bitround``). Kept bit for bit: NaN, ±Infinity, values that would round to infinity,
subnormals, sentinels (the fill value, ``_FillValue``, ``missing_value``) and values that would
round onto a sentinel (they would read back as missing).
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from zopt.errors import OptionError

__all__ = ["bitround", "rel_round", "rounded_as_stored", "sentinels_of", "special_mask"]


def bitround(values: np.ndarray, keepbits: int, keep: np.ndarray | None = None,
             sentinels: tuple[Any, ...] = ()) -> np.ndarray:
    """``values`` (float16/32/64) rounded to ``keepbits`` mantissa bits by numcodecs' ``BitRound``;
    elements where ``keep`` is true, non-finite ones, and finite ones that would round to
    infinity keep their exact bits. So do subnormal values (their significant bits sit below
    the exponent field's: bitrounding the mantissa field zeroes them, no relative bound holds)
    and values that would round onto one of ``sentinels`` (the fill value: a value must not
    become "missing"). Raises ValueError naming ``keepbits`` when it exceeds the type's mantissa."""
    import numcodecs

    values = np.asarray(values)
    nmant = np.finfo(values.dtype).nmant
    if not 0 <= keepbits <= nmant:
        raise OptionError("keepbits", f"{keepbits} is outside [0, {nmant}] for {values.dtype}")
    if keepbits == nmant:
        return values
    flat = np.ascontiguousarray(values)
    rounded = np.asarray(numcodecs.BitRound(keepbits=int(keepbits)).encode(flat)).view(values.dtype).reshape(values.shape)
    same = ~np.isfinite(values) | ~np.isfinite(rounded)
    same |= np.abs(values) < np.finfo(values.dtype).smallest_normal  # subnormals (and zeros: unchanged anyway)
    for s in sentinels:
        if not np.isnan(s):
            same |= rounded == values.dtype.type(s)
    if keep is not None:
        same |= keep
    return np.where(same, values, rounded)


def _decode_attr_scalar(v: object, dtype: np.dtype) -> Any:
    """An attribute value as a scalar of ``dtype``: numbers, or xarray's base64 ``_FillValue``."""
    if isinstance(v, str):
        try:
            raw = base64.b64decode(v, validate=True)
            return np.frombuffer(raw, dtype=f"<f{len(raw)}" if dtype.kind == "f" else f"<i{len(raw)}")[0]
        except (ValueError, TypeError):
            return None
    if isinstance(v, list | tuple | np.ndarray):
        return None
    try:
        return dtype.type(v)
    except (TypeError, ValueError, OverflowError):
        return None


def sentinels_of(dtype: np.dtype, fill_value: object, attrs: dict[str, Any]) -> tuple[Any, ...]:
    """The values restored exactly: the array's fill value, ``_FillValue`` and every ``missing_value``."""
    out = [fill_value] if fill_value is not None else []
    for key in ("_FillValue", "missing_value"):
        v = attrs.get(key)
        items = v if isinstance(v, list | tuple | np.ndarray) and not isinstance(v, str) else [v]
        for item in items:
            if item is not None:
                s = _decode_attr_scalar(item, dtype)
                if s is not None:
                    out.append(s)
    return tuple(dtype.type(s) for s in out)


def rel_round(values: np.ndarray, keepbits: int, sentinels: tuple[Any, ...]) -> np.ndarray:
    """``values`` as ``rel`` stores them: bitrounded; specials, sentinels, subnormals and values
    that would round onto a sentinel (they would read back as missing) kept exactly."""
    from zopt.lossy.relative import keep_mask

    values = np.asarray(values)
    return bitround(values, keepbits, keep_mask(values, special_mask(values, sentinels)), sentinels)


def rounded_as_stored(values: np.ndarray, region: tuple[slice, ...], *, method: str, keepbits: int,
                      sentinels: tuple[Any, ...], grid: np.ndarray | None = None,
                      inner: tuple[int, ...] | None = None) -> np.ndarray:
    """One inner chunk's ``values`` (at ``region`` of the array) as a ``rel`` or keepbits variable
    stores them, for the tail trial (``zopt.lossy.tails.choose_tail``): ``keepbits``, or with a
    per-chunk ``grid`` (over ``inner`` chunks) the chunk's own."""
    if grid is not None:
        if inner is None:
            raise ValueError("inner: the inner chunk shape is needed with a per-chunk keepbits grid")
        keepbits = int(grid[tuple(r.start // c for r, c in zip(region, inner, strict=True))])
    if method == "rel":
        return rel_round(values, keepbits, sentinels)
    return bitround(values, keepbits, special_mask(values, sentinels), sentinels)


def special_mask(values: np.ndarray, sentinels: tuple[Any, ...]) -> np.ndarray:
    mask = ~np.isfinite(values) if values.dtype.kind == "f" else np.zeros(values.shape, bool)
    for s in sentinels:
        if not (isinstance(s, float | np.floating) and np.isnan(s)):
            mask |= values == values.dtype.type(s)
    return mask
