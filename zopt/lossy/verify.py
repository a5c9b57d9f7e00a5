"""Compare a source with its recompressed store: bit for bit, or within each variable's recorded bound.

``verify(src, dst)`` reads both as a Dask graph (one task per shard of the destination array,
per chunk when unsharded) and reports, per array of ``dst`` that ``src`` also has:

- arrays without a ``zopt_lossy`` attribute: the number of elements whose bits differ
  (NaN payloads included) — a lossless rewrite must have none;
- ``abs`` arrays: the maximum absolute and relative error over finite, non-sentinel values, the
  number of values beyond the bound (decided exactly, ``exact_abs_error_exceeds``), and the
  positions of NaN, ±Infinity and every sentinel, which must be preserved exactly;
- keepbits arrays (``keepbits``, ``info``, per chunk or not): every value must equal the source
  bitrounded to the recorded keepbits of its chunk (NaN, infinities and sentinels untouched),
  i.e. exactly the stated bits are kept; the maximum errors, and the share of the source's
  real information (``zopt.lossy.bitinfo``) the kept bits hold. Without a per-chunk grid in the
  attribute (grids above ``MAX_GRID_IN_ATTRIBUTES`` chunks) the relative error bound of the
  smallest keepbits is checked instead.

The bound comes from the attribute ``recompress --lossy`` wrote; no option is needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zopt.lossy.bounds import exact_abs_error_exceeds

__all__ = ["VariableCheck", "VerifyReport", "verify"]


@dataclass
class VariableCheck:
    """The comparison of one array. Errors in the array's units (relative: dimensionless)."""

    name: str
    kind: str  # "lossless", "abs", "keepbits"
    bound: str = ""
    elements: int = 0
    violations: int = 0  # values beyond the bound / not the expected bits
    special_mismatches: int = 0  # NaN, ±Infinity or sentinel positions not preserved
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    keepbits: str = ""
    information_kept: float | None = None
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem and self.violations == 0 and self.special_mismatches == 0


@dataclass
class VerifyReport:
    """All arrays compared; ``ok`` when every check passes."""

    src: str
    dst: str
    checks: list[VariableCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(f"u{x.dtype.itemsize}") if x.dtype.itemsize in (1, 2, 4, 8) else x


def _errors(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    if x.size == 0:
        return 0.0, 0.0
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        d = np.abs(y.astype(np.float64) - x.astype(np.float64))
        ax = np.abs(x.astype(np.float64))
        rel = np.where(ax > 0, d / np.where(ax > 0, ax, 1), np.where(d > 0, np.inf, 0.0))
    return float(d.max()), float(rel.max())


def _region_task(src: str, dst: str, name: str, region: tuple[slice, ...], record: dict[str, Any] | None,
                 sentinels: tuple[Any, ...], token: str | None = None) -> dict[str, Any]:
    from zopt.lossy.prepare import bitround, special_mask
    from zopt.sources import read_source

    x = np.asarray(read_source(src, name, region, token))
    y = np.asarray(read_source(dst, name, region, token))
    out: dict[str, Any] = {"n": int(x.size), "viol": 0, "spec": 0, "abs": 0.0, "rel": 0.0, "counts": None}
    if x.shape != y.shape or x.dtype != y.dtype:
        out["problem"] = f"{name}: region {region} has {y.shape} {y.dtype} in dst, {x.shape} {x.dtype} in src"
        return out
    if record is None:
        out["viol"] = int((_bits(x) != _bits(y)).sum()) if x.dtype.kind in "biuf" else int((x != y).sum())
        return out
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
    from zopt.grid import regions
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
            expected = bitround(xs, k, special)
            out["viol"] += int((_bits(expected) != _bits(y[sub])).sum())
            if gridarr is not None:
                c = pair_counts(xs, ~special)
                share = _information_kept(c, x.dtype, k)
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


def _information_kept(counts: np.ndarray, dtype: np.dtype, kept: int) -> float | None:
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


def verify(src: str, dst: str, variables: list[str] | None = None, scheduler: str | None = None) -> VerifyReport:
    """Compare ``src`` (anything ``recompress`` reads) with ``dst`` (a Zarr v3 store it wrote).

    variables : arrays to compare (default: every array of ``dst`` with a dimension).
    Returns a ``VerifyReport``; raises FileNotFoundError for a missing store and ValueError for
    a named variable absent from ``dst``. A variable absent from ``src`` is reported as a problem.
    """
    import os
    import uuid

    import dask
    import zarr

    from zopt.grid import regions
    from zopt.lossy.prepare import ATTRIBUTE, sentinels_of
    from zopt.scheduling import compute
    from zopt.sources import source_variables

    src, dst = os.fspath(src), os.fspath(dst)
    if not os.path.exists(dst):
        raise FileNotFoundError(f"dst {dst!r} does not exist")
    group = zarr.open_group(dst, mode="r")
    arrays = {n: a for n, a in group.arrays() if a.ndim >= 1}
    if variables:
        missing = [v for v in variables if v not in arrays]
        if missing:
            raise ValueError(f"variables: {missing} are not in {dst!r}; it has {sorted(arrays)}")
        arrays = {v: arrays[v] for v in variables}
    token = f"verify-{uuid.uuid4().hex[:12]}"  # the sources the tasks open, closed at the end
    try:
        source = source_variables(src, None, token)
    finally:
        from zopt.sources import release

        release(token)
    report = VerifyReport(src, dst)
    tasks, owners = [], []
    for name, a in arrays.items():
        record = a.attrs.get(ATTRIBUTE)
        kind = "lossless" if record is None else ("abs" if record.get("method") == "abs" else "keepbits")
        check = VariableCheck(name, kind)
        report.checks.append(check)
        if name not in source:
            check.problem = f"{name!r} is not in the source"
            continue
        if tuple(source[name].shape) != tuple(a.shape):
            check.problem = f"shape {tuple(a.shape)} in dst, {tuple(source[name].shape)} in src"
            continue
        sentinels: tuple[Any, ...] = ()
        if record is not None:
            dt = np.dtype(a.dtype)
            sentinels = sentinels_of(dt, a.fill_value, {"missing_value": list(record.get("sentinels", []))})
            if kind == "abs":
                check.bound = f"abs {record['abs']}"
            else:
                check.bound = f"relative {record.get('relative')}"
                check.keepbits = (str(record["keepbits"]) if "keepbits" in record
                                  else f"{record['keepbits_min']}..{record['keepbits_max']} per chunk")
        step = tuple(a.shards or a.chunks) if getattr(a, "shards", None) else tuple(a.chunks)
        for region in regions(tuple(a.shape), step):
            tasks.append(dask.delayed(_region_task, pure=False)(src, dst, name, region, record, sentinels, token))
            owners.append(check)
    from zopt.sources import release

    try:
        results = compute(tasks, scheduler, None, token)
    finally:
        release(token)  # this process's (local schedulers); workers release their own
    counts: dict[str, Any] = {}
    kept_chunks: dict[str, list] = {}
    for check, r in zip(owners, results, strict=True):
        check.elements += r["n"]
        check.violations += r["viol"]
        check.special_mismatches += r["spec"]
        check.max_abs_error = max(check.max_abs_error, r["abs"])
        check.max_rel_error = max(check.max_rel_error, r["rel"])
        if r.get("problem"):
            check.problem = r["problem"]
        if "kept" in r:
            acc = kept_chunks.setdefault(check.name, [0.0, 0])
            acc[0] += r["kept"][0]
            acc[1] += r["kept"][1]
        if r["counts"] is not None:
            counts[check.name] = r["counts"] if check.name not in counts else counts[check.name] + r["counts"]
    for check in report.checks:
        if check.name in kept_chunks:
            w, n = kept_chunks[check.name]
            check.information_kept = w / n if n else None
        elif check.name in counts:
            record = arrays[check.name].attrs[ATTRIBUTE]
            kept = int(record.get("keepbits", record.get("keepbits_min", 0)))
            share = _information_kept(counts[check.name], np.dtype(arrays[check.name].dtype), kept)
            check.information_kept = None if share is None or math.isnan(share) else share
    return report
