"""Benchmark: error-bounded lossy recompression on real data — stored bytes and achieved error.

    python benchmarks/lossy.py [--workdir bench-lossy] [--xbitinfo-path /tmp/xbitinfo_pkg]

Data (all real, shipped by ``iris-sample-data``): the NEMO ocean model sea-surface temperature
of the README's first command (``tos``, float32, land = 1e20), the OSTIA monthly sea-surface
temperature (``surface_temperature``, float32, fill 1e20) and the A1B scenario near-surface air
temperature over North America (``air_temperature``, float32, 240 months).

Rows per variable (every zopt row is ``zopt recompress SRC DST --variable VAR`` on the local
threaded scheduler; bytes are the variable's chunk files):

- ``lossless zstd``: ``[bytes, zstd(3)]``, and ``lossless zopt``: zopt's default chain
  ``[bytes, conditional([shuffle, zstd(3)])]``;
- ``xbitinfo 0.99 + zstd``: xbitinfo's keepbits for 99 % of the information (python
  implementation, the CF-decoded data as xbitinfo users open it, the maximum over dimensions),
  ``xbitinfo.xr_bitround``, ``to_zarr`` with ``zstd(3)``; skipped when xbitinfo is not importable
  (it pins numpy < 2.4 and numcodecs < 0.16.4, so it is not a dependency: install it beside the
  venv with ``pip install --no-deps --target /tmp/xbitinfo_pkg xbitinfo==0.0.7 tqdm``);
- ``zopt keepbits:K`` with xbitinfo's K, ``zopt info:0.99`` and ``zopt info:0.99:chunk``;
- ``zopt abs:E`` with ``E`` = the error xbitinfo's rounding reached (equal verified error), and
  ``abs:0.01``;
- ``numcodecs Quantize`` with the fewest digits whose error bound is at most that same ``E``
  (``numcodecs.quantize`` as a filter in front of zopt's default tail).

"max abs err" and "max rel err" are measured on the values read back against the source, over
finite values that are not fill/sentinels (those must come back exactly: "specials ok").

``--abs``: the same verified absolute bound, zopt beside its peers (``benchmarks/lossy_peers.py``)

    python benchmarks/lossy.py --abs [--peer-path DIR ...]

on ``ABS_CORPUS`` (9 real variables of iris-sample-data, 2-D and 3-D, 5 with sentinels), one run
each: zopt ``abs:E`` (default: tails plain zarr-python reads) and ``abs:E`` with
``readers="zopt"`` (``zopt.lorenzo`` allowed), SZ3 (pysz; and numcodecs-wasm-sz3 under
numcodecs-safeguards when importable), ZFP (zfpy), quantise + pcodec and xbitinfo bitround +
zstd. zopt writes one chunk per variable (the peers see the whole array too). Encode/decode
MB/s are in memory for everyone: for zopt, the written array's codec chain run on the whole
variable by ``zopt.codecs.chain.ChunkEncoder``; ``recompress`` end to end (Dask, range analysis,
tail trial, per-chunk bound check, files) is printed after the table. ``--peer-path`` directories (zfpy,
xbitinfo, the safeguards packages installed with ``pip install --target``) are appended to
``sys.path`` after numcodecs is imported (numcodecs 0.16 breaks on zfpy 1.0.1.post0).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

DATA = [
    ("NEMO/nemo_1m_20150101-20150201_grid-T.nc", "tos", "y=30,x=36", "y=330,x=360"),
    ("ostia_monthly.nc", "surface_temperature", "time=6,latitude=18,longitude=144", None),
    ("A1B_north_america.nc", "air_temperature", "time=24,latitude=37,longitude=49", None),
]
ZSTD = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 3}}]
DEFAULT = [{"name": "bytes", "configuration": {"endian": "little"}},
           {"name": "conditional", "configuration": {"codecs": [{"name": "shuffle"},
                                                                {"name": "zstd", "configuration": {"level": 3}}]}}]


def sample_path(rel: str) -> str:
    import iris_sample_data

    return os.path.join(iris_sample_data.path, rel)


def source_values(src: str, var: str) -> tuple[np.ndarray, np.ndarray]:
    """Raw values and the mask of values that must be restored exactly (NaN, ±Inf, sentinels)."""
    import xarray as xr

    v = xr.open_dataset(src, decode_cf=False, mask_and_scale=False)[var]
    x = v.values
    special = ~np.isfinite(x)
    for key in ("_FillValue", "missing_value"):
        if key in v.attrs:
            special |= x == x.dtype.type(v.attrs[key])
    return x, special


def errors(x: np.ndarray, special: np.ndarray, y: np.ndarray) -> tuple[float, float, bool]:
    ok = bool(np.array_equal(np.isnan(x), np.isnan(y)) and np.array_equal(x[special & ~np.isnan(x)],
                                                                        y[special & ~np.isnan(x)]))
    n = ~special
    d = np.abs(y[n].astype(np.float64) - x[n].astype(np.float64))
    ax = np.abs(x[n].astype(np.float64))
    rel = d[ax > 0] / ax[ax > 0]
    return float(d.max()), float(rel.max()) if rel.size else 0.0, ok


def stored_bytes(store: Path, var: str) -> int:
    return sum(f.stat().st_size for f in (store / var).rglob("*") if f.is_file() and f.name != "zarr.json")


def run_zopt(src: str, var: str, dst: Path, chunks: str, shards: str | None, codecs=None, lossy=None) -> dict:
    from zopt import recompress

    shutil.rmtree(dst, ignore_errors=True)
    t0 = time.perf_counter()
    recompress(src, dst, codecs=json.dumps(codecs) if codecs else None, chunks=chunks, shards=shards,
               variables=[var], lossy=lossy)
    seconds = time.perf_counter() - t0
    import zarr

    a = zarr.open_array(dst, path=var)
    rec = a.attrs.get("zopt_lossy", {})
    kb = rec.get("keepbits", f"{rec['keepbits_min']}..{rec['keepbits_max']}" if "keepbits_min" in rec else "")
    return {"bytes": stored_bytes(dst, var), "values": a[...], "seconds": seconds, "keepbits": kb,
            "bits": rec.get("bits", "")}


def xbitinfo_keepbits(src: str, var: str) -> int:
    import xarray as xr
    import xbitinfo

    ds = xr.open_dataset(src)[[var]]  # CF-decoded (land NaN), as xbitinfo users open data
    best = 0
    for dim in ds[var].dims:
        if ds.sizes[dim] < 2:
            continue
        info = xbitinfo.get_bitinformation(ds, dim=dim, implementation="python")
        best = max(best, int(xbitinfo.get_keepbits(info, 0.99)[var].values.ravel()[0]))
    return best


def run_xbitinfo(src: str, var: str, dst: Path, keepbits: int, chunks: dict) -> dict:
    import xarray as xr
    import xbitinfo
    from zarr.codecs import ZstdCodec

    shutil.rmtree(dst, ignore_errors=True)
    t0 = time.perf_counter()
    ds = xr.open_dataset(src)[[var]]
    rounded = xbitinfo.xr_bitround(ds, {var: keepbits})
    enc = {var: {"compressors": [ZstdCodec(level=3)], "chunks": tuple(chunks[d] for d in ds[var].dims)}}
    rounded.to_zarr(dst, zarr_format=3, encoding=enc, consolidated=False)
    seconds = time.perf_counter() - t0
    back = xr.open_zarr(dst, mask_and_scale=False)[var].values  # raw, as the netCDF stores it
    fill = ds[var].encoding.get("_FillValue")
    if fill is not None:
        back = np.where(np.isnan(back), back.dtype.type(fill), back)
    return {"bytes": stored_bytes(dst, var), "values": back, "seconds": seconds, "keepbits": keepbits, "bits": ""}


def quantize_digits(bound: float) -> int:
    """The fewest digits whose numcodecs Quantize error bound (2^-(bits+1)) is at most ``bound``."""
    for d in range(0, 12):
        bits = math.ceil(math.log2(10.0**d))
        if 2.0 ** -(bits + 1) <= bound:
            return d
    return 12


#: (file, variable, bound): 2-D and 3-D, with sentinels (NEMO, OSTIA, ORCA2, TOA) and without
ABS_CORPUS = [
    ("NEMO/nemo_1m_20150101-20150201_grid-T.nc", "tos", 0.01),
    ("ostia_monthly.nc", "surface_temperature", 0.01),
    ("A1B_north_america.nc", "air_temperature", 0.01),
    ("E1_north_america.nc", "air_temperature", 0.01),
    ("hybrid_height.nc", "air_potential_temperature", 0.01),
    ("hybrid_height.nc", "surface_altitude", 1.0),
    ("orca2_votemper.nc", "votemper", 0.01),
    ("toa_brightness_stereographic.nc", "data", 0.1),
    ("space_weather.nc", "Ne", 1e-3),  # float64, units of 1e11 e/m^3, range [-2.2, 5.8]
]


def _whole_chunks(src: str, var: str) -> str:
    import xarray as xr

    v = xr.open_dataset(src, decode_cf=False)[var]
    return ",".join(f"{d}={n}" for d, n in zip(v.dims, v.shape, strict=True))


def _zopt_abs(src: str, var: str, dst: Path, chunks: str, lossy: str | None, readers: str | None) -> dict:
    import zarr

    from zopt import recompress

    shutil.rmtree(dst, ignore_errors=True)
    t0 = time.perf_counter()
    recompress(src, dst, chunks=chunks, variables=[var], lossy=[lossy] if lossy else None, readers=readers)
    total = time.perf_counter() - t0
    a = zarr.open_array(dst, path=var)
    values = a[...]
    enc, dec = _chain_seconds(a, values)
    tail = a.attrs.get("zopt_lossy", {}).get("tail", "")
    return {"bytes": stored_bytes(dst, var), "values": values, "enc": enc, "dec": dec, "note": tail, "total": total}


def _chain_seconds(a, values: np.ndarray) -> tuple[float, float]:
    """Seconds to encode ``values`` (one chunk: the whole variable) through the array's codec
    chain in memory, and to decode it: zopt's ``ChunkEncoder``, as its writers run it."""
    from zopt.codecs.chain import ChunkEncoder, chunk_spec
    from zopt.codecs.decisions import CompressIfSmaller
    from zopt.compat.zarr_compat import resolve_codec

    codecs = [resolve_codec(c) for c in a.metadata.to_dict()["codecs"]]
    enc = ChunkEncoder(codecs, chunk_spec(values.shape, a.metadata.data_type, a.metadata.fill_value))
    enc = enc.with_decision(CompressIfSmaller())
    t0 = time.perf_counter()
    stored = enc.encode(values, (0,) * values.ndim).data
    t1 = time.perf_counter()
    back = enc.decode(stored)
    t2 = time.perf_counter()
    assert np.array_equal(back.view(f"u{back.dtype.itemsize}"), values.view(f"u{values.dtype.itemsize}"))
    return t1 - t0, t2 - t1


def abs_main(args: argparse.Namespace) -> None:
    import warnings

    import numcodecs  # noqa: F401  (before any --peer-path: numcodecs 0.16 breaks on zfpy 1.0.1.post0)

    warnings.filterwarnings("ignore")  # zarr's unstable-dtype and numcodecs deprecation notes
    for extra in args.peer_path:
        sys.path.append(extra)
    from lossy_peers import PEERS, available

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    peers = {name: fn for name, fn in PEERS.items() if available(fn)}
    skipped = sorted(set(PEERS) - set(peers))
    print(f"peers: {', '.join(peers)}" + (f"; skipped (not importable): {', '.join(skipped)}" if skipped else ""))
    print("| variable | bound | method | stored bytes | ratio vs lossless | × SZ3 | max abs err | within bound | "
          "encode MB/s | decode MB/s |")
    print("|---|---:|---|---:|---:|---:|---:|---|---:|---:|")
    totals: dict[str, int] = {}
    walls: dict[str, float] = {}
    for rel, var, bound in ABS_CORPUS:
        src = sample_path(rel)
        x, special = source_values(src, var)
        chunks = _whole_chunks(src, var)
        label = f"{Path(rel).stem} `{var}` {x.dtype} {'×'.join(map(str, x.shape))}" + (
            f", {int(special.sum())} specials" if special.any() else "")
        rows = {"lossless zopt (shuffle + zstd)": _zopt_abs(src, var, work / "l.zarr", chunks, None, None),
                "zopt abs:E (default)": _zopt_abs(src, var, work / "a.zarr", chunks, f"{var}=abs:{bound}", None),
                "zopt abs:E, readers zopt": _zopt_abs(src, var, work / "z.zarr", chunks, f"{var}=abs:{bound}", "zopt")}
        for name, fn in peers.items():
            n, y, enc, dec = fn(np.squeeze(x), np.squeeze(special), bound)
            rows[name] = {"bytes": n, "values": y.reshape(x.shape), "enc": enc, "dec": dec, "note": ""}
        walls[var if var not in walls else f"{var} ({Path(rel).stem[:2]})"] = sum(
            r.get("total", 0.0) for k, r in rows.items() if k.startswith("zopt")) / 2
        base = rows["lossless zopt (shuffle + zstd)"]["bytes"]
        sz = rows.get("SZ3 (pysz, abs)", {}).get("bytes")
        mb = x.nbytes / 1e6
        for name, r in rows.items():
            e_abs, _, ok = errors(x, special, r["values"])
            within = "lossless" if name.startswith("lossless") else ("yes" if e_abs <= bound and ok else "**NO**")
            totals[name] = totals.get(name, 0) + r["bytes"]
            method = name + (f" → `{r['note']}`" if r["note"] else "")
            print(f"| {label} | {bound:g} | {method} | {r['bytes']:,} | {base / r['bytes']:.2f} | "
                  f"{r['bytes'] / sz:.3f} | {e_abs:.4g} | {within} | {mb / r['enc']:.0f} | {mb / r['dec']:.0f} |"
                  if sz else f"| {label} | {bound:g} | {method} | {r['bytes']:,} | {base / r['bytes']:.2f} | – | "
                  f"{e_abs:.4g} | {within} | {mb / r['enc']:.0f} | {mb / r['dec']:.0f} |", flush=True)
    print("\nzopt recompress end to end, seconds per variable: " + ", ".join(f"{k} {v:.2f}" for k, v in walls.items()))
    print("\n| method | total bytes | × SZ3 total |\n|---|---:|---:|")
    sz_total = totals.get("SZ3 (pysz, abs)")
    for name, n in totals.items():
        print(f"| {name} | {n:,} | {n / sz_total:.3f} |" if sz_total else f"| {name} | {n:,} | – |")
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="bench-lossy")
    ap.add_argument("--xbitinfo-path", default=os.environ.get("XBITINFO_PATH", "/tmp/xbitinfo_pkg"))
    ap.add_argument("--abs", action="store_true", help="zopt abs:E beside SZ3, ZFP, quantise + pcodec, xbitinfo")
    ap.add_argument("--peer-path", action="append", default=[], help="a directory of peer packages (repeatable)")
    args = ap.parse_args()
    if args.abs:
        sys.path.insert(0, str(Path(__file__).parent))
        if args.xbitinfo_path and os.path.isdir(args.xbitinfo_path):
            args.peer_path.append(args.xbitinfo_path)
        abs_main(args)
        return
    if args.xbitinfo_path and os.path.isdir(args.xbitinfo_path):
        sys.path.append(args.xbitinfo_path)
    try:
        import xbitinfo  # noqa: F401

        have_xbitinfo = True
    except ImportError:
        have_xbitinfo = False
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    print("| data | method | keepbits / bits | stored bytes | ratio vs lossless zstd | max abs err | max rel err | specials ok | s |")
    print("|---|---|---|---:|---:|---:|---:|---|---:|")
    for rel, var, chunks, shards in DATA:
        src = sample_path(rel)
        x, special = source_values(src, var)
        label = f"{Path(rel).stem} `{var}` {x.dtype} {'×'.join(map(str, x.shape))}"
        rows = []
        base = run_zopt(src, var, work / "zstd.zarr", chunks, shards, codecs=ZSTD)
        rows.append(("lossless zstd", base))
        rows.append(("lossless zopt (conditional shuffle+zstd)", run_zopt(src, var, work / "def.zarr", chunks, shards)))
        if have_xbitinfo:
            k = xbitinfo_keepbits(src, var)
            import xarray as xr

            v = xr.open_dataset(src)[var]
            given = {c.split("=")[0]: int(c.split("=")[1]) for c in chunks.split(",")}
            chunk_map = {d: given.get(d, n) for d, n in zip(v.dims, v.shape, strict=True)}
            xb = run_xbitinfo(src, var, work / "xb.zarr", k, chunk_map)
            rows.append(("xbitinfo 0.99 + zstd", xb))
            e_x = errors(x, special, xb["values"])[0]
            rows.append((f"zopt keepbits:{k} (xbitinfo's K)",
                         run_zopt(src, var, work / "kb.zarr", chunks, shards, lossy=[f"{var}=keepbits:{k}"])))
        else:
            e_x = None
        rows.append(("zopt info:0.99", run_zopt(src, var, work / "info.zarr", chunks, shards, lossy=[f"{var}=info:0.99"])))
        rows.append(("zopt info:0.99:chunk",
                     run_zopt(src, var, work / "infoc.zarr", chunks, shards, lossy=[f"{var}=info:0.99:chunk"])))
        e_eq = e_x if e_x is not None else errors(x, special, rows[-2][1]["values"])[0]
        e_eq = float(f"{e_eq:.3g}") if e_eq > 0 else 1e-3
        rows.append((f"zopt abs:{e_eq} (equal error)",
                     run_zopt(src, var, work / "abs.zarr", chunks, shards, lossy=[f"{var}=abs:{e_eq}"])))
        rows.append(("zopt abs:0.01", run_zopt(src, var, work / "abs2.zarr", chunks, shards, lossy=[f"{var}=abs:0.01"])))
        rows.append((f"zopt abs:{e_eq}:bytes (no packbits)",
                     run_zopt(src, var, work / "absb.zarr", chunks, shards, lossy=[f"{var}=abs:{e_eq}:bytes"])))
        d = quantize_digits(e_eq)
        q = [{"name": "numcodecs.quantize", "configuration": {"digits": d, "dtype": x.dtype.str}}, *DEFAULT]
        rows.append((f"numcodecs Quantize(digits={d}) + zopt tail", run_zopt(src, var, work / "q.zarr", chunks, shards, codecs=q)))
        for method, r in rows:
            e_abs, e_rel, ok = errors(x, special, r["values"])
            kb = r["keepbits"] if r["keepbits"] != "" else r["bits"]
            print(f"| {label} | {method} | {kb} | {r['bytes']:,} | {base['bytes'] / r['bytes']:.2f} | {e_abs:.3g} | "
                  f"{e_rel:.3g} | {'yes' if ok else 'NO'} | {r['seconds']:.2f} |", flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
