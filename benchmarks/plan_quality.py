"""Benchmark: how good and how cheap are plans? Policies × estimators against the per-chunk oracle.

    python benchmarks/plan_quality.py [--size-gib 1] [--workdir bench-out] [--repeat 3]

Data:

- ``mixed``: a float32 array of ``--size-gib`` GiB, 256×256 chunks, each chunk one of: smooth
  field (3 significant digits; 55 %), white noise (20 %), constant (10 %), random bytes (10 %),
  fill value (5 %), assigned by a hash of the chunk index;
- ``nemo``: the real NEMO sea-surface temperature of iris-sample-data (land masked), if
  installed, in 30×36 chunks.

For each array, with the wrapped codecs ``[shuffle, zstd(3)]``:

1. a full analysis (``sample=None``) measures every mask of every chunk exactly: the **oracle**
   stores each chunk with its smallest mask;
2. estimators: the sampled analysis (default: 12 windows of at least 4 KiB, one centred in
   each twelfth of the chunk, totalling at least 1/16 of it; on this raw-stored source it
   reads only those windows, ``read="auto"``), the same with 16 and with 8 windows, 16 of at
   least 2 KiB, zopt 0.1's 2 windows at the chunk's ends, and reading whole chunks
   (``read="full"``: same sizes, other time), and an entropy-only estimate (no trial encodings,
   ``zopt.planning.analysis.entropy_estimate``; its time is that of the sampled analysis it
   reuses). Each runs without decode times (the default) and, for the ``fastest_within`` rows,
   with them (``decode_times=True``);
3. each policy's masks from each estimator are scored with the oracle's exact sizes: stored
   bytes (+1 header byte per chunk) and the excess over the oracle;
4. times (median of ``--repeat`` runs): each analysis, and the rewrite (``recompress`` with the
   runtime ``compress_if_smaller`` and with ``--plan`` from the default sampled analysis).

Then (``--sampling``, or alone with ``--sampling-only``) where the sample lies, on the lat-lon
fields of the real-data corpus (``corpus_data.py``: iris-sample-data, gsee-climate-data,
MCD12C1, pvlib, matplotlib; each stored raw with ``recompress``'s default chunks, as
``zopt analyze`` copies a netCDF file): the estimated ratio (raw / estimated bytes, each chunk
with its smallest mask: ``zopt analyze``'s est. ratio) of the full analysis, of spread samples
(8, 12 (the default), 16 windows of at least 4 KiB; 16 of at least 2 KiB) and of zopt 0.1's ends
sample; the bytes the plans (``compress_if_smaller``) of the full analysis, the default and the
ends sample store, written by ``recompress --plan`` (the stored ratio); each analysis's time.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

CHUNK = (256, 256)
SHARD = (2048, 4096)
ROW = 16384


def make_mixed(path: Path, size_gib: float) -> None:
    import zarr

    rows = int(ROW * size_gib) // SHARD[0] * SHARD[0]
    shape = (rows, ROW)
    if (path / "zarr.json").exists():
        return
    g = zarr.open_group(str(path), mode="w")
    arr = g.create_array("mixed", shape=shape, chunks=SHARD, dtype="f4", fill_value=0, compressors=None,
                         dimension_names=("y", "x"))
    rng = np.random.default_rng(7)
    x = np.linspace(0, 60, shape[1], dtype="f4")
    for r0 in range(0, rows, SHARD[0]):
        for c0 in range(0, shape[1], SHARD[1]):
            y = np.linspace(r0 / rows * 40, (r0 + SHARD[0]) / rows * 40, SHARD[0], dtype="f4")[:, None]
            block = np.round(np.sin(x[c0 : c0 + SHARD[1]]) * np.cos(y) * 30 + 280, 1).astype("f4")
            for i in range(0, SHARD[0], CHUNK[0]):
                for j in range(0, SHARD[1], CHUNK[1]):
                    ci, cj = (r0 + i) // CHUNK[0], (c0 + j) // CHUNK[1]
                    kind = (ci * 7919 + cj * 104729) % 20
                    sl = (slice(i, i + CHUNK[0]), slice(j, j + CHUNK[1]))
                    if kind < 4:
                        block[sl] = rng.standard_normal(CHUNK, dtype="f4")
                    elif kind < 6:
                        block[sl] = 273.15
                    elif kind < 8:
                        block[sl] = rng.integers(0, 2**32, CHUNK, dtype=np.uint32).view("f4")
                    elif kind < 9:
                        block[sl] = 0
            arr[r0 : r0 + SHARD[0], c0 : c0 + SHARD[1]] = block


def make_nemo(path: Path) -> bool:
    try:
        import iris_sample_data
        import xarray as xr
    except ImportError:
        return False
    if (path / "zarr.json").exists():
        return True
    nc = os.path.join(iris_sample_data.path, "NEMO", "nemo_1m_20150101-20150201_grid-T.nc")
    ds = xr.open_dataset(nc, decode_cf=False)[["tos"]]
    for v in ds.variables.values():
        v.encoding = {}
    ds.to_zarr(str(path), mode="w", zarr_format=3, consolidated=False)
    return True


def score(masks: np.ndarray, exact: np.ndarray, stored: np.ndarray) -> float:
    """Stored bytes of ``masks`` using the exact sizes of the full analysis (+1 header byte)."""
    chosen = np.take_along_axis(exact, masks[..., None].astype(np.int64), -1)[..., 0]
    return float((chosen[stored] + 1).sum())


def _timed(fn, repeat: int):
    """(result of the median run, its seconds) over ``repeat`` runs."""
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        runs.append((time.perf_counter() - t, out))
    runs.sort(key=lambda r: r[0])
    seconds, out = runs[len(runs) // 2]
    return out, seconds


def evaluate(store: Path, name: str, chunks, shards, work: Path, repeat: int = 3) -> list[str]:
    from zopt import recompress
    from zopt.planning.analysis import analyze_array, entropy_estimate
    from zopt.planning.plan import POLICIES, make_plan, policy_masks

    lines = []
    t = time.perf_counter()
    # every mask of every chunk, decode times included
    full = analyze_array(store, name, chunks=chunks, sample=None, early_out_entropy=9.0, decode_times=True)
    t_full = time.perf_counter() - t
    exact = np.nan_to_num(full["encoded_bytes"].values, nan=np.inf)
    exact[..., 0] = full["raw_bytes"].values
    stored = ~full["is_fill"].values
    oracle = float((exact.min(axis=-1)[stored] + 1).sum())
    raw = float(full["raw_bytes"].values[stored].sum())
    # per estimator: (analysis, seconds) without decode times, and with them (for fastest_within)
    estimators = {"full trial": ((full, t_full), (full, t_full))}
    settings = (("sampled 1/16, 12 spread windows (default)", {}),
                ("sampled 1/16, 16 spread windows", {"windows": 16}),
                ("sampled 1/16, 16 spread windows of ≥ 2 KiB", {"windows": 16, "min_window": 2048}),
                ("sampled 1/16, 8 spread windows", {"windows": 8}),
                ("sampled 1/16, 2 windows at the ends (zopt 0.1)", {"windows": 2, "placement": "ends"}),
                ("sampled 1/16, whole chunks read", {"read": "full"}))
    for label, kwargs in settings:
        estimators[label] = tuple(
            _timed(functools.partial(analyze_array, store, name, chunks=chunks, decode_times=decode, **kwargs), repeat)
            for decode in (False, True)
        )
    default = estimators["sampled 1/16, 12 spread windows (default)"]
    estimators["entropy only"] = tuple((entropy_estimate(ds), secs) for ds, secs in default)

    dst = work / f"{name}-rewrite.zarr"
    rep, t_rewrite = _timed(lambda: recompress(store, dst, chunks=chunks, shards=shards, variables=[name], overwrite=True), repeat)
    runtime_bytes = rep.arrays[0].stored_after
    plan = make_plan(default[0][0])
    rep_plan, t_plan_rewrite = _timed(
        lambda: recompress(store, dst, chunks=chunks, shards=shards, variables=[name], overwrite=True, plan=plan), repeat
    )
    shutil.rmtree(dst, ignore_errors=True)

    chunks_n = int(stored.size)
    lines.append(f"\n### {name}: {chunks_n} chunks of {chunks}, {raw / 2**20:.0f} MiB stored-chunk raw bytes\n")
    lines.append(f"oracle (best mask per chunk by full trial): {oracle / 2**20:.2f} MiB, ratio {raw / oracle:.3f}\n")
    lines.append("| estimator | policy | stored MiB | vs oracle | analysis s | analysis / rewrite |")
    lines.append("| --- | --- | ---: | ---: | ---: | ---: |")
    for est, (plain, timed) in estimators.items():
        for policy in POLICIES:
            ds, secs = timed if policy == "fastest_within" else plain  # only fastest_within needs decode times
            masks, _ = policy_masks(ds, policy)
            b = score(masks, exact, stored)
            lines.append(f"| {est} | {policy} | {b / 2**20:.2f} | {100 * (b / oracle - 1):+.2f} % | {secs:.2f} | {100 * secs / t_rewrite:.0f} % |")
    lines.append("")
    lines.append(f"rewrite with the runtime `compress_if_smaller`: {t_rewrite:.2f} s, shard files {runtime_bytes / 2**20:.2f} MiB "
                 f"(includes shard indexes); with `--plan` (the default sample, compress_if_smaller): {t_plan_rewrite:.2f} s, "
                 f"{rep_plan.arrays[0].stored_after / 2**20:.2f} MiB (times: median of {repeat})")
    return lines


#: the lat-lon fields of the corpus (corpus_data.DATASETS name -> dimension names), each with
#: rows of land, ice or sea that differ from the rest (a global DEM and a bench elevation beside them)
LATLON = {
    "iris NEMO tos (1e20 fill)": ("time", "y", "x"),
    "iris UM sea ice v (60 months)": ("time", "latitude", "longitude"),
    "gsee irradiance pdf pk": ("latitude", "longitude", "month", "bin"),
    "iris ostia surface_temperature": ("time", "latitude", "longitude"),
    "iris GloSea4 surface temperature": ("realization_month", "latitude", "longitude"),
    "iris hybrid height u wind": ("time_level", "latitude", "longitude"),
    "MCD12C1 land cover": ("latitude", "longitude"),
    "pvlib Linke turbidity (3 months)": ("latitude", "longitude", "month"),
    "pvlib altitude": ("latitude", "longitude"),
    "matplotlib Jacksboro DEM": ("y", "x"),
}


def _estimated_ratio(ds) -> float:
    from zopt.planning.plan import policy_masks

    masks, _ = policy_masks(ds, "smallest")
    stored = ~ds["is_fill"].values
    sizes = np.take_along_axis(np.nan_to_num(ds["encoded_bytes"].values, nan=0), masks[..., None].astype(np.int64), -1)[..., 0]
    return float(ds["raw_bytes"].values[stored].sum() / max(sizes[stored].sum(), 1))


def sampling_comparison(work: Path, repeat: int) -> list[str]:
    """Where the sample lies, per lat-lon field of the corpus: estimated and stored ratios and
    times of the full analysis and of the samples (see the module docstring)."""
    import json
    import zlib

    import xarray as xr
    from corpus_data import DATASETS

    from zopt import recompress
    from zopt.job.analyze import _raw_view
    from zopt.planning.analysis import analyze_array
    from zopt.planning.plan import make_plan

    kinds = {"full": {"sample": None}, "ends (0.1)": {"windows": 2, "placement": "ends"}, "8": {"windows": 8},
             "12 (default)": {}, "16": {"windows": 16}, "16 of 2 KiB": {"windows": 16, "min_window": 2048}}
    planned = ("full", "12 (default)", "ends (0.1)")  # whose plans are written
    est_rows, stored_rows, time_rows = [], [], []
    for label, dims in LATLON.items():
        package, load, _ = DATASETS[label]
        try:
            values = load()
        except (ImportError, OSError) as exc:
            est_rows.append(f"| {label} | ({package} missing: {type(exc).__name__}) |")
            continue
        key = "v"
        store = work / f"latlon-{zlib.crc32(label.encode()):08x}.zarr"
        if not (store / "zarr.json").exists():
            nc = work / "latlon.nc"
            xr.Dataset({key: (dims, values)}).to_netcdf(nc)
            _raw_view(str(nc), str(store))
            nc.unlink()
        est, stored, secs = {}, {}, {}
        for kind, kwargs in kinds.items():
            ds, secs[kind] = _timed(functools.partial(analyze_array, store, key, **kwargs), repeat)
            est[kind] = _estimated_ratio(ds)
            chunk = "×".join(map(str, ds.attrs["chunk_shape"]))
            if kind in planned:
                dst = work / "latlon-out.zarr"
                chain = [{"name": "bytes", "configuration": {"endian": "little"}},
                         {"name": "conditional", "configuration": {"codecs": json.loads(ds.attrs["codecs"])}}]
                rep = recompress(store, dst, plan=make_plan(ds), codecs=chain, variables=[key], overwrite=True)
                stored[kind] = rep.arrays[0].stored_after
                logical = rep.arrays[0].logical_bytes
                shutil.rmtree(dst, ignore_errors=True)
        est_rows.append(f"| {label} | {chunk} | {est['full']:.2f} | "
                        + " | ".join(f"{est[k]:.2f} ({100 * (est[k] / est['full'] - 1):+.0f} %)" for k in kinds if k != "full")
                        + " |")
        stored_rows.append(f"| {label} | {logical / stored['full']:.2f} | "
                           + " | ".join(f"{logical / stored[k]:.2f} ({stored[k] / stored['full']:.3f}×)" for k in planned[1:])
                           + " |")
        time_rows.append(f"| {label} | " + " | ".join(f"{secs[k]:.2f}" for k in kinds) + " |")
    others = [k for k in kinds if k != "full"]
    lines = ["\n### Where the sample lies: lat-lon fields of the corpus\n",
             "Estimated ratio (raw / estimated bytes, each chunk with its smallest mask of `[shuffle, zstd(3)]`: "
             "zopt analyze's est. ratio), by the full analysis and by samples of spread windows (how many; at least "
             "4 KiB each unless said) or of the chunk's two ends (zopt 0.1); in brackets against the full analysis:\n",
             "| dataset | chunk | full | " + " | ".join(others) + " |",
             "| --- | --- | ---: | " + " | ".join("---:" for _ in others) + " |", *est_rows,
             "\nStored ratio (logical / shard-file bytes) written by `recompress --plan` with each analysis's "
             "compress_if_smaller plan; in brackets the bytes against the full analysis's plan:\n",
             "| dataset | full | " + " | ".join(planned[1:]) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in planned[1:]) + " |", *stored_rows,
             f"\nAnalysis seconds (median of {repeat}):\n",
             "| dataset | " + " | ".join(kinds) + " |", "| --- | " + " | ".join("---:" for _ in kinds) + " |", *time_rows]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gib", type=float, default=1.0)
    ap.add_argument("--workdir", default="bench-out")
    ap.add_argument("--repeat", type=int, default=3, help="runs per timed analysis and rewrite; the median is shown")
    ap.add_argument("--sampling", action="store_true", help="also compare sample placements on the corpus's lat-lon fields")
    ap.add_argument("--sampling-only", action="store_true", help="only that comparison")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(exist_ok=True)
    out = [f"plan quality on {os.cpu_count()} cores, Python {sys.version.split()[0]}"]
    if not args.sampling_only:
        mixed = work / f"mixed-{args.size_gib:g}.zarr"
        make_mixed(mixed, args.size_gib)
        out += evaluate(mixed, "mixed", CHUNK, SHARD, work, args.repeat)
        nemo = work / "nemo.zarr"
        if make_nemo(nemo):
            out += evaluate(nemo, "tos", (1, 30, 36), (1, 330, 360), work, args.repeat)
    if args.sampling or args.sampling_only:
        out += sampling_comparison(work, args.repeat)
    print("\n".join(out))


if __name__ == "__main__":
    main()
