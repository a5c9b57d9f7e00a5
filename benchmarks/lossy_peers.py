"""Absolute-bound lossy compressors beside zopt ``abs:E``: the peers of ``benchmarks/lossy.py --abs``.

Each peer takes the whole variable ``x`` (numpy, its own dtype), the mask of values it must
restore exactly (NaN, ±Inf, sentinels) and the bound ``E``, and returns ``(bytes, decoded,
encode s, decode s)``. Peers that cannot keep sentinels (SZ3, ZFP, quantise + pcodec) get those
cells replaced by the mean of the other values and are charged a zstd-compressed bit mask of
them (what the issue's anchor table did); the decoded array has the specials put back.

- ``sz3``: SZ3 through ``pysz`` (``ABS`` mode, its default predictor).
- ``sz3_safeguarded``: ``numcodecs-wasm-sz3``'s ``Sz3`` wrapped in ``numcodecs-safeguards``
  (pointwise abs bound guaranteed); only when both import (not installable everywhere).
- ``zfp``: ZFP fixed accuracy (``zfpy``, tolerance ``E``). numcodecs 0.16 fails to import
  when zfpy 1.0.1.post0 is installed, so zfpy lives in its own directory
  (``pip install --no-deps --target DIR zfpy``), added to ``sys.path`` after numcodecs is imported.
- ``quantise_pcodec``: ``round((x - min) / 2E)`` in float64 into the smallest unsigned type
  (>= 16 bits, pcodec's minimum) + numcodecs' pcodec level 8.
- ``bitround_zstd``: xbitinfo's ``xr_bitround`` with the fewest mantissa bits whose rounding
  keeps every value within ``E``, then zstd 3; the specials are put back before compressing
  (stored exactly, so no mask is charged).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

__all__ = ["PEERS", "available"]


def _mask_bytes(special: np.ndarray) -> int:
    import numcodecs

    return len(numcodecs.Zstd(level=3).encode(np.packbits(special.ravel()))) if special.any() else 0


def _filled(x: np.ndarray, special: np.ndarray) -> np.ndarray:
    if not special.any():
        return np.ascontiguousarray(x)
    out = x.copy()
    out[special] = x[~special].mean(dtype=np.float64)
    return out


def _restore(y: np.ndarray, x: np.ndarray, special: np.ndarray) -> np.ndarray:
    y = np.array(y, dtype=x.dtype).reshape(x.shape)
    y[special] = x[special]
    return y


def sz3(x: np.ndarray, special: np.ndarray, bound: float) -> tuple[int, np.ndarray, float, float]:
    from pysz import sz, szConfig, szErrorBoundMode

    xs = _filled(x, special)
    cfg = szConfig(xs.shape)
    cfg.errorBoundMode = szErrorBoundMode.ABS
    cfg.absErrorBound = float(bound)
    t0 = time.perf_counter()
    comp, _ = sz.compress(xs, cfg)
    t1 = time.perf_counter()
    y, _ = sz.decompress(comp, xs.dtype, xs.shape)
    t2 = time.perf_counter()
    return len(comp) + _mask_bytes(special), _restore(y, x, special), t1 - t0, t2 - t1


def sz3_safeguarded(x: np.ndarray, special: np.ndarray, bound: float) -> tuple[int, np.ndarray, float, float]:
    from numcodecs_safeguards import SafeguardedCodec
    from numcodecs_wasm_sz3 import Sz3

    xs = _filled(x, special)
    codec = SafeguardedCodec(codec=Sz3(eb_mode="abs", eb_abs=float(bound)),
                              safeguards=[dict(kind="eb", type="abs", eb=float(bound))])
    t0 = time.perf_counter()
    comp = codec.encode(xs)
    t1 = time.perf_counter()
    y = codec.decode(comp)
    t2 = time.perf_counter()
    return len(bytes(comp)) + _mask_bytes(special), _restore(y, x, special), t1 - t0, t2 - t1


def zfp(x: np.ndarray, special: np.ndarray, bound: float) -> tuple[int, np.ndarray, float, float]:
    import zfpy

    xs = _filled(x, special)
    t0 = time.perf_counter()
    comp = zfpy.compress_numpy(xs, tolerance=float(bound))
    t1 = time.perf_counter()
    y = zfpy.decompress_numpy(comp)
    t2 = time.perf_counter()
    return len(comp) + _mask_bytes(special), _restore(y, x, special), t1 - t0, t2 - t1


def quantise_pcodec(x: np.ndarray, special: np.ndarray, bound: float) -> tuple[int, np.ndarray, float, float]:
    from numcodecs.pcodec import PCodec

    codec = PCodec(level=8)
    xs = _filled(x, special)
    t0 = time.perf_counter()
    lo = float(xs.min())
    q = np.rint((xs.astype(np.float64) - lo) / (2 * bound))
    storage = next(t for t in (np.uint16, np.uint32, np.uint64) if q.max() <= np.iinfo(t).max)
    comp = codec.encode(q.astype(storage))
    t1 = time.perf_counter()
    y = np.frombuffer(codec.decode(comp), storage).astype(np.float64) * (2 * bound) + lo
    t2 = time.perf_counter()
    return len(comp) + _mask_bytes(special) + 8, _restore(y.astype(x.dtype), x, special), t1 - t0, t2 - t1


def bitround_zstd(x: np.ndarray, special: np.ndarray, bound: float) -> tuple[int, np.ndarray, float, float]:
    import numcodecs
    import xarray as xr
    import xbitinfo

    normal = ~special
    nmant = np.finfo(x.dtype).nmant
    keep = nmant
    for k in range(nmant + 1):  # the fewest bits holding the bound (bitround's error grows with |x|)
        r = xbitinfo.xr_bitround(xr.DataArray(x[normal]), k).values
        if np.abs(r.astype(np.float64) - x[normal]).max() <= bound:
            keep = k
            break
    t0 = time.perf_counter()
    y = xbitinfo.xr_bitround(xr.DataArray(x), keep).values
    y = np.where(special, x, y)  # xbitinfo rounds sentinels too; keep them (charged as a mask)
    comp = numcodecs.Zstd(level=3).encode(np.ascontiguousarray(y))
    t1 = time.perf_counter()
    back = np.frombuffer(numcodecs.Zstd(level=3).decode(comp), x.dtype).reshape(x.shape)
    t2 = time.perf_counter()
    return len(comp), back, t1 - t0, t2 - t1


PEERS: dict[str, Callable] = {"SZ3 (pysz, abs)": sz3, "SZ3 safeguarded (numcodecs-wasm)": sz3_safeguarded,
                              "ZFP (zfpy, fixed accuracy)": zfp, "quantise + pcodec": quantise_pcodec,
                              "xbitinfo bitround + zstd": bitround_zstd}
_MODULES = {sz3: ["pysz"], sz3_safeguarded: ["numcodecs_safeguards", "numcodecs_wasm_sz3"], zfp: ["zfpy"],
            quantise_pcodec: ["pcodec"], bitround_zstd: ["xbitinfo"]}


def available(peer: Callable) -> bool:
    """Whether the packages ``peer`` needs import here."""
    import importlib

    try:
        for m in _MODULES[peer]:
            importlib.import_module(m)
    except Exception:  # noqa: BLE001 - any failure (ImportError, a broken wheel) means: skipped
        return False
    return True
