"""Per-chunk statistics of the analysis (``zopt.planning.analysis``), on many chunks at once.

- ``batch_entropies``: order-0 byte entropy of each sample, overall and per byte plane;
- ``batch_value_stats``: the fractions of zeros, constant runs and NaNs of each sample;
- ``byte_entropy`` (one array) and ``chunk_digest`` (the content fingerprint a plan checks);
- ``entropy_estimate``: an analysis's sizes replaced by an entropy-only estimate (a baseline).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np

from zopt.errors import OptionError

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["batch_entropies", "batch_value_stats", "byte_entropy", "chunk_digest", "entropy_estimate"]


def byte_entropy(data: np.ndarray) -> float:
    """Order-0 entropy of the bytes of ``data`` in bits per byte (0 for empty input)."""
    counts = np.bincount(np.ascontiguousarray(data).view(np.uint8).ravel(), minlength=256)
    n = counts.sum()
    if n == 0:
        return 0.0
    p = counts[counts > 0] / n
    return float(-(p * np.log2(p)).sum()) + 0.0  # no -0.0 for constant data


def _entropy_of_counts(counts: np.ndarray) -> np.ndarray:
    """Entropy in bits of each row of a (..., 256) integer histogram (0 for empty rows).

    H = log2(N) - sum(c log2 c) / N, with c log2 c looked up in a table over 0..max(c).
    """
    n = counts.sum(axis=-1)
    table = np.arange(int(counts.max(initial=0)) + 1, dtype=np.float64)
    table[1:] *= np.log2(table[1:])
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.log2(n) - table[counts].sum(axis=-1) / n
    return np.where(n > 0, np.maximum(h, 0.0), 0.0) + 0.0


def chunk_digest(values: np.ndarray) -> int:
    """crc32c (uint32) of the bytes of ``values`` in C order: the content fingerprint of a chunk."""
    import google_crc32c

    return int(google_crc32c.value(np.ascontiguousarray(values).view(np.uint8).tobytes()))


def _nan_mask(values: np.ndarray) -> np.ndarray:
    """NaN flags of ``values`` (any shape); complex types count an element with a NaN part."""
    if values.dtype.names:  # zopt's structured complex_* types: a NaN in either component
        either: np.ndarray = _nan_mask(values[values.dtype.names[0]]) | _nan_mask(values[values.dtype.names[1]])
        return either
    if values.dtype.kind in "fc":
        nan: np.ndarray = np.isnan(values)
        return nan
    if values.dtype.kind in "biu":
        return np.zeros(values.shape, dtype=bool)
    nan32: np.ndarray = np.isnan(values.astype(np.float32))  # ml_dtypes floats
    return nan32


def batch_value_stats(samples: np.ndarray, native: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(zero, constant-run, NaN) fractions of each row of ``samples``, float64 each, shape (n,).

    samples : uint8 ``(n, nbytes)``, ``nbytes`` a multiple of ``native.itemsize``; row ``k`` is
    the bytes of chunk ``k`` (or of its sample). Zeros compare values for numpy numbers (−0.0
    is zero) and bit patterns otherwise; a run element equals its predecessor bit for bit.
    """
    n = samples.shape[0]
    item = native.itemsize
    count = samples.shape[1] // item
    if n == 0 or count == 0:
        return np.zeros(n), np.zeros(n), np.zeros(n)
    values = np.ascontiguousarray(samples).view(native).reshape(n, count)
    bits = values.view(f"u{item}") if item in (1, 2, 4, 8) else samples.reshape(n, count, item)
    if native.kind in "biufc" and not native.names:
        zero = np.count_nonzero(values == 0, axis=1)
    else:
        zero = np.count_nonzero((bits == 0).reshape(n, count, -1).all(axis=2), axis=1)
    nan = np.count_nonzero(_nan_mask(values), axis=1)
    runs = np.zeros(n, dtype=np.int64)
    if count > 1:  # a one-element chunk has no runs
        same = (bits[:, 1:] == bits[:, :-1]).reshape(n, count - 1, -1).all(axis=2)
        runs = np.count_nonzero(same, axis=1)
    return zero / count, runs / count, nan / count


def batch_entropies(samples: np.ndarray, itemsize: int) -> tuple[np.ndarray, np.ndarray]:
    """Byte entropy (bits/byte) of each row of ``samples`` overall and per byte plane.

    samples : uint8 ``(n, nbytes)``; a trailing partial element of a row counts overall only.
    Returns ``(overall (n,), planes (n, itemsize))``, float64 and float32.
    """
    n, width = samples.shape
    whole = width // itemsize * itemsize
    counts = np.empty((n, itemsize, 256), dtype=np.int64)
    # one bincount per byte plane for all rows at once: row k's bytes count in bins k*256 + value
    offsets = (np.arange(n, dtype=np.intp) * 256)[:, None]
    planes = samples[:, :whole].reshape(n, -1, itemsize)
    for b in range(itemsize):
        counts[:, b] = np.bincount((planes[:, :, b] + offsets).ravel(), minlength=n * 256).reshape(n, 256)
    total = counts.sum(axis=1)
    if whole < width:
        total += np.bincount((samples[:, whole:] + offsets).ravel(), minlength=n * 256).reshape(n, 256)
    return _entropy_of_counts(total), _entropy_of_counts(counts).astype(np.float32)


def entropy_estimate(ds: xr.Dataset) -> xr.Dataset:
    """The analysis with ``encoded_bytes`` replaced by an entropy-only estimate (no trials).

    For a wrapped list of byte shuffles and compressors: a mask without a compressor stores the
    raw size; with one, ``raw * H / 8`` where ``H`` is the order-0 entropy of the bytes, or the
    mean byte-plane entropy when a shuffle precedes the compressor. A baseline for
    ``benchmarks/plan_quality.py``; raises ValueError for other codec lists.
    """
    codecs = json.loads(ds.attrs["codecs"])
    names = [c["name"] for c in codecs]
    if any(n not in ("shuffle", "zstd", "gzip", "blosc") for n in names):
        raise OptionError("codecs", f"the entropy estimate knows shuffle and compressors only, got {names}")
    raw = ds["raw_bytes"].values.astype(np.float64)
    h = ds["entropy"].values.astype(np.float64)
    hp = ds["plane_entropy"].values.astype(np.float64).mean(axis=-1)
    sizes = np.empty(ds["encoded_bytes"].shape, dtype=np.float64)
    for m in range(sizes.shape[-1]):
        applied = [n for i, n in enumerate(names) if m >> i & 1]
        if not any(n != "shuffle" for n in applied):
            sizes[..., m] = raw
            continue
        first = next(i for i, n in enumerate(applied) if n != "shuffle")
        sizes[..., m] = raw * (hp if "shuffle" in applied[:first] else h) / 8
    out = ds.copy()
    out["encoded_bytes"] = (ds["encoded_bytes"].dims, sizes)
    out["early_out"] = (ds["early_out"].dims, np.zeros(ds["early_out"].shape, bool))
    return out
