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
2. estimators: the sampled analysis (default: 2 windows totalling 1/16 of each chunk; on this
   raw-stored source it reads only those windows, ``read="auto"``), the same with 8 windows, 1/32
   in 1 window, 1/64, and reading whole chunks (``read="full"``: same sizes, other time), and an
   entropy-only estimate (no trial encodings, ``zopt.planning.analysis.entropy_estimate``; its time is
   that of the sampled analysis it reuses). Each runs without decode times (the default) and,
   for the ``fastest_within`` rows, with them (``decode_times=True``);
3. each policy's masks from each estimator are scored with the oracle's exact sizes: stored
   bytes (+1 header byte per chunk) and the excess over the oracle;
4. times (median of ``--repeat`` runs): each analysis, and the rewrite (``recompress`` with the
   runtime ``compress_if_smaller`` and with ``--plan`` from the default sampled analysis).
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
    settings = (("sampled 1/16 (2 windows)", 1 / 16, 2, "auto"), ("sampled 1/16 (8 windows)", 1 / 16, 8, "auto"),
                ("sampled 1/32 (1 window)", 1 / 32, 1, "auto"), ("sampled 1/64 (2 windows)", 1 / 64, 2, "auto"),
                ("sampled 1/16 (2 windows), whole chunks read", 1 / 16, 2, "full"))
    for label, frac, windows, read in settings:
        estimators[label] = tuple(
            _timed(functools.partial(analyze_array, store, name, chunks=chunks, sample=frac, windows=windows, read=read,
                                     decode_times=decode), repeat)
            for decode in (False, True)
        )
    default = estimators["sampled 1/16 (2 windows)"]
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
                 f"(includes shard indexes); with `--plan` (sampled 1/16, compress_if_smaller): {t_plan_rewrite:.2f} s, "
                 f"{rep_plan.arrays[0].stored_after / 2**20:.2f} MiB (times: median of {repeat})")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gib", type=float, default=1.0)
    ap.add_argument("--workdir", default="bench-out")
    ap.add_argument("--repeat", type=int, default=3, help="runs per timed analysis and rewrite; the median is shown")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(exist_ok=True)
    mixed = work / f"mixed-{args.size_gib:g}.zarr"
    make_mixed(mixed, args.size_gib)
    out = [f"plan quality on {os.cpu_count()} cores, Python {sys.version.split()[0]}"]
    out += evaluate(mixed, "mixed", CHUNK, SHARD, work, args.repeat)
    nemo = work / "nemo.zarr"
    if make_nemo(nemo):
        out += evaluate(nemo, "tos", (1, 30, 36), (1, 330, 360), work, args.repeat)
    print("\n".join(out))


if __name__ == "__main__":
    main()
