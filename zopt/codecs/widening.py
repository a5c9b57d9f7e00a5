"""Widening casts of ``cast_value``: where numpy's ``astype`` is already exact.

When every source value is a value of the target (numpy integer and float types widening, such
as ``uint16 → float32``, ``float32 → float64`` or the same type; or integers whose values in
the array at hand lie within ``±2^(nmant+1)`` of a float target), ``astype`` gives each element
exactly, so ``zopt.codecs.exact_cast.cast_array`` uses it as the whole conversion, with
``scalar_map`` applied as masked stores (first match wins, keys matched in the source type by
IEEE equality, a NaN key matching any NaN). This is every decode of zopt's lossy chains.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from zopt.dtypes.numeric import NumericInfo

__all__ = ["widen", "widens_exactly"]


def _is_builtin(info: NumericInfo) -> bool:
    return info.dtype.isbuiltin == 1 and info.dtype.kind in "iuf"


def widens_exactly(values: np.ndarray, src: NumericInfo, tgt: NumericInfo) -> bool:
    """True when numpy's ``astype`` gives every element of ``values`` (any shape, of ``src``'s
    dtype) exactly as a value of ``tgt``: no rounding, nothing out of range. numpy's own real
    types only (not ml_dtypes' or non-native byte orders)."""
    if not (_is_builtin(src) and _is_builtin(tgt)):
        return False
    if tgt.is_int:
        return src.is_int and tgt.lo <= src.lo and src.hi <= tgt.hi
    if not src.is_int:
        return src.dtype.itemsize <= tgt.dtype.itemsize  # float16 ⊂ float32 ⊂ float64
    limit = 1 << (tgt.nmant + 1)  # every integer of magnitude up to 2^(nmant+1) is a value of tgt
    if -limit <= src.lo and src.hi <= limit:
        return True
    if values.size == 0:
        return True
    # e.g. uint32 codes below 2^24 into float32: one reduction, far cheaper than the exact kernels
    return int(values.max()) <= limit and (not src.signed or -limit <= int(values.min()))


def widen(values: np.ndarray, tgt: NumericInfo, scalar_map: Sequence[tuple[Any, Any]]) -> np.ndarray:
    """``values.astype(tgt)`` (exact: see ``widens_exactly``), then ``scalar_map``'s
    ``(source scalar, target scalar)`` entries, first match wins, keys matched in the source
    type (IEEE equality; a NaN key matches any NaN; a key that is not a source value matches
    nothing). Returns a new C-ordered array of ``tgt``'s dtype and ``values``' shape."""
    out = values.astype(tgt.dtype, order="C")
    mapped = None
    for key, value in scalar_map:
        k = np.array(key)
        with np.errstate(all="ignore"):
            k_src = k.astype(values.dtype)
        if np.isnan(k):
            mask = np.isnan(values)
        elif k_src == k:
            mask = values == k_src
        else:  # a key that is not a value of the source type matches nothing
            continue
        if mapped is not None:
            mask &= ~mapped
        np.copyto(out, np.array(value).astype(tgt.dtype), where=mask)
        if len(scalar_map) > 1:
            mapped = mask if mapped is None else mapped | mask
    return out
