"""Checking one region of a lossy array against its source: within its recorded bound (``zopt verify``).

Pure array maths on values already read (``zopt.readback.verify`` reads them, one inner chunk at a time):

- ``abs`` arrays: the maximum absolute and relative error over finite, non-sentinel values, the
  number of values beyond the bound (decided exactly, ``exact_abs_error_exceeds``), and the
  positions of NaN, ±Infinity and every sentinel, which must be preserved exactly;
- ``rel`` arrays: every value must equal the source bitrounded to the recorded ``keepbits``
  with NaN, infinities, sentinels, subnormals and values that would round onto a sentinel
  untouched, and be within ``rel·|x|``;
- keepbits arrays (``keepbits``, ``info``, per chunk or not): every value must equal the source
  bitrounded to the recorded keepbits of its chunk (NaN, infinities and sentinels untouched),
  i.e. exactly the stated bits are kept; the maximum errors, and the share of the source's
  real information (``zopt.lossy.bitinfo``) the kept bits hold. Without a per-chunk grid in the
  attribute (grids above ``MAX_GRID_IN_ATTRIBUTES`` chunks) the relative error bound of the
  smallest keepbits is checked instead.

The bound comes from the ``zopt_lossy`` attribute ``recompress --lossy`` wrote, unless the user
states it (``zopt verify --bound VAR=abs:E``, ``stated_record``): an attribute anyone can edit.
``record_problems`` checks the attribute against itself (its bound against the spec it records),
which catches a widened bound unless the spec text was forged too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zopt.errors import OptionError
from zopt.lossy.bounds import exact_abs_error_exceeds

__all__ = ["bound_text", "check_region", "information_kept", "kind_of", "record_problems", "stated_record"]


def bits(x: np.ndarray) -> np.ndarray:
    """``x``'s raw bit patterns in native byte order, through a same-size unsigned view."""
    x = np.ascontiguousarray(x)
    if not x.dtype.isnative:
        x = x.byteswap().view(x.dtype.newbyteorder("="))
    return x.view(f"u{x.dtype.itemsize}") if x.dtype.itemsize in (1, 2, 4, 8) else x


def kind_of(record: dict[str, Any] | None) -> str:
    """``"lossless"``, ``"abs"``, ``"rel"`` or ``"keepbits"`` for a ``zopt_lossy`` attribute (or None)."""
    if record is None:
        return "lossless"
    method = record.get("method")
    return method if isinstance(method, str) and method in ("abs", "rel") else "keepbits"


def bound_text(record: dict[str, Any]) -> tuple[str, str]:
    """``(bound, keepbits)`` of a ``zopt_lossy`` attribute, as text for a report."""
    if kind_of(record) == "abs":
        return f"abs {record['abs']}" + (" (--bound)" if record.get("stated") else ""), ""
    if kind_of(record) == "rel":
        return f"rel {record['rel']}", str(record["keepbits"])
    keep = str(record["keepbits"]) if "keepbits" in record else f"{record['keepbits_min']}..{record['keepbits_max']} per chunk"
    return f"relative {record.get('relative')}" + (" (--bound)" if record.get("stated") else ""), keep


def stated_record(text: str, record: dict[str, Any] | None) -> dict[str, Any]:
    """The record to check against for a bound the user states: ``abs:E`` (E > 0) or
    ``keepbits:K`` (K >= 0 mantissa bits). The recorded sentinels are kept (they are restored
    exactly, not bounded). Raises ValueError naming ``--bound`` and the allowed forms."""
    kind, _, value = text.partition(":")
    sentinels = list((record or {}).get("sentinels", []))
    try:
        if kind == "abs" and float(value) > 0 and np.isfinite(float(value)):
            return {"method": "abs", "abs": float(value), "sentinels": sentinels, "stated": True}
        if kind == "keepbits" and int(value) >= 0:
            return {"method": "keepbits", "keepbits": int(value), "relative": 2.0 ** -(int(value) + 1),
                    "sentinels": sentinels, "stated": True}
    except ValueError:
        pass
    raise OptionError("bound", label="--bound", message=f"{text!r} is not abs:E (E a finite number > 0) or keepbits:K (K an integer >= 0)")


def record_problems(record: dict[str, Any]) -> list[str]:
    """Where a ``zopt_lossy`` attribute contradicts itself: its bound is not the one its own
    ``spec`` states (e.g. ``abs`` widened by hand). ``[]`` when consistent."""
    spec = str(record.get("spec", ""))
    kind, _, value = spec.partition(":")
    value = value.split(":")[0]  # e.g. abs:0.01:bytes
    try:
        if record.get("method") == "abs" and kind == "abs" and float(record["abs"]) != float(value):
            return [f"zopt_lossy records abs {record['abs']} but its spec is {spec!r}: the attribute was edited; "
                    "state the bound with --bound"]
        if kind == "keepbits" and "keepbits" in record and int(record["keepbits"]) != int(value):
            return [f"zopt_lossy records keepbits {record['keepbits']} but its spec is {spec!r}: the attribute was "
                    "edited; state the bound with --bound"]
    except (KeyError, TypeError, ValueError):
        return [f"zopt_lossy attribute {record!r} does not hold a readable bound"]
    return []


def _errors(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    if x.size == 0:
        return 0.0, 0.0
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        d = np.abs(y.astype(np.float64) - x.astype(np.float64))
        ax = np.abs(x.astype(np.float64))
        rel = np.where(ax > 0, d / np.where(ax > 0, ax, 1), np.where(d > 0, np.inf, 0.0))
    return float(d.max()), float(rel.max())


def check_region(x: np.ndarray, y: np.ndarray, region: tuple[slice, ...], record: dict[str, Any],
                 sentinels: tuple[Any, ...]) -> dict[str, Any]:
    """Check ``y`` (stored) against ``x`` (source), same shape and dtype, at ``region`` of the array.

    Returns ``{"n", "viol", "spec", "abs", "rel", "counts", "kept"?}``: elements, values beyond the
    bound (or not the expected bits), special positions not preserved, maximum absolute and
    relative error (array units; relative dimensionless), bit-pair counts for the information
    content, and the weighted information share kept (per-chunk keepbits grids)."""
    from zopt.lossy.rounding import bitround, special_mask

    out: dict[str, Any] = {"n": int(x.size), "viol": 0, "spec": 0, "abs": 0.0, "rel": 0.0, "counts": None}
    special = special_mask(x, sentinels)
    if x.dtype.kind == "f":
        out["spec"] += int((np.isnan(x) != np.isnan(y)).sum())
        inf = np.isinf(x)
        out["spec"] += int((x[inf] != y[inf]).sum())
    for s in sentinels:
        if not (isinstance(s, float | np.floating) and np.isnan(s)):
            out["spec"] += int(((x == x.dtype.type(s)) != (y == y.dtype.type(s))).sum())
    normal = ~special
    out["abs"], out["rel"] = _errors(x[normal], y[normal])
    if record["method"] == "abs":
        out["viol"] = int(exact_abs_error_exceeds(x[normal], y[normal], float(record["abs"])).sum())
        return out
    if record["method"] == "rel":  # exactly the bits of bitround(K), subnormals and would-be sentinels kept, within R·|x|
        from zopt.lossy.relative import check_relative, keep_mask

        expected = bitround(x, int(record["keepbits"]), keep_mask(x, special), sentinels)
        out["viol"] = int((bits(expected) != bits(y)).sum()) + check_relative(x[normal], y[normal], float(record["rel"]))
        return out
    from zopt.codecs.grid import regions
    from zopt.lossy.bitinfo import pair_counts

    out["counts"] = pair_counts(x, normal)
    grid = record.get("keepbits_grid")
    if "keepbits" in record or grid is not None:
        inner = tuple(record.get("chunk_shape") or x.shape)
        origin = [r.start for r in region]
        gridarr = None if grid is None else np.asarray(grid)
        kept = [0.0, 0]  # information share kept, weighted by valid pairs, chunk by chunk
        for sub in regions(x.shape, inner):
            if gridarr is None:
                k = int(record["keepbits"])
            else:
                index = tuple((o + s.start) // c for o, s, c in zip(origin, sub, inner, strict=True))
                k = int(gridarr[index])
            xs = x[sub]
            special = special_mask(xs, sentinels)
            expected = bitround(xs, k, special, sentinels)
            out["viol"] += int((bits(expected) != bits(y[sub])).sum())
            if gridarr is not None:
                c = pair_counts(xs, ~special)
                share = information_kept(c, x.dtype, k)
                if share is not None:
                    n = int(c[:, 0].sum())
                    kept[0] += share * n
                    kept[1] += n
        if gridarr is not None:
            out["kept"] = kept
        return out
    # no grid: the relative bound of the smallest keepbits (normal numbers; subnormals absolute)
    k = int(record["keepbits_min"])
    fi = np.finfo(x.dtype)
    xs, ys = x[normal].astype(np.float64), y[normal].astype(np.float64)
    limit = np.maximum(np.abs(xs), float(fi.smallest_normal)) * 2.0 ** -(k + 1)
    out["viol"] = int((np.abs(ys - xs) > limit).sum())
    return out


def information_kept(counts: np.ndarray, dtype: np.dtype, kept: int) -> float | None:
    """The smallest share, over dimensions, of the real information that ``kept`` mantissa bits hold
    (``counts``: ``zopt.lossy.bitinfo.pair_counts``); None without valid pairs."""
    from zopt.lossy.bitinfo import bit_information

    fi = np.finfo(dtype)
    best = None
    for dim_counts in counts:
        if dim_counts[0].sum() == 0:
            continue
        info = bit_information(dim_counts)
        total = info.sum()
        if total <= 0:
            continue
        share = float(info[: fi.bits - fi.nmant + kept].sum() / total)
        best = share if best is None else min(best, share)
    return best
