"""Benchmark: fixed-slot shards with concurrent writers, compaction, and zarr-python for comparison.

    python benchmarks/shards.py [--size-gib 0.5] [--workdir bench-out] [--repeat 3]

On the 2-D float32 source of ``benchmarks/field2d.py`` (a smooth field, a noise band, a
constant block; shards of 2048×4096, inner chunks 256×256), each run in its own subprocess:

1. ``zopt fixed-slot``: ``recompress(layout="fixed-slot", slot_parts=2)`` — every shard written
   by two tasks into its slots — on Dask's threaded scheduler with 1 and with 2 workers
   (``dask.config.set(num_workers=N)``): the speed-up of two concurrent writers into the same
   shards (goal ≥ 1.8× on 2 cores).
2. ``zarr-python shard-aligned``: ``dask.array.from_zarr(src).to_zarr(dst)`` with one task per
   shard, ``[shuffle, zstd(3)]``, 1 and 2 workers — what zarr and dask allow today.
3. ``zopt compact (direct)``: ``recompress(layout="compact")`` — each shard encoded and packed by
   one task — against ``fixed-slot`` followed by ``zopt.job.compact``: which way to a packed store
   is faster.
4. ``zopt.job.compact``: MB/s over the fixed-slot store, and apparent vs allocated bytes before and
   after (fixed-slot files are sparse).
5. zarr-python writing half-shard regions from 2 threads at once into the same shards
   (not shard-aligned): how many inner chunks are lost (its shard writes read-modify-write the
   whole shard). A smaller array (``--race-mib``) is enough to show it.

MB/s counts logical (uncompressed) bytes; peak RSS is the run's subprocess ``ru_maxrss``; each
route runs ``--repeat`` times and the median run is shown.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from field2d import INNER, SHARD, make_source  # noqa: E402


def _rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_fixed_slot(src: str, dst: str, workers: int) -> dict:
    import dask

    from zopt import recompress

    with dask.config.set(num_workers=workers):
        t = time.perf_counter()
        report = recompress(src, dst, chunks=INNER, shards=SHARD, layout="fixed-slot", slot_parts=2, overwrite=True)
        seconds = time.perf_counter() - t
    a = report.arrays[0]
    return {"seconds": seconds, "graph_seconds": report.graph_seconds, "apparent": a.stored_after, "allocated": a.allocated_after}


def run_compact_direct(src: str, dst: str, workers: int) -> dict:
    import dask

    from zopt import recompress

    with dask.config.set(num_workers=workers):
        t = time.perf_counter()
        report = recompress(src, dst, chunks=INNER, shards=SHARD, layout="compact", overwrite=True)
        seconds = time.perf_counter() - t
    a = report.arrays[0]
    return {"seconds": seconds, "apparent": a.stored_after, "allocated": a.allocated_after}


def run_fixed_then_compact(src: str, dst: str, workers: int) -> dict:
    import dask

    from zopt.job.compact import compact

    out = run_fixed_slot(src, dst, workers)
    with dask.config.set(num_workers=workers):
        report = compact(dst, grace=0)  # no readers here: no need to wait before dropping the holes
    return {
        "seconds": out["seconds"] + report.seconds,
        "write_seconds": out["seconds"],
        "compact_seconds": report.seconds,
        "compact_read_mb_s": report.mb_per_s,
        "apparent_before": report.total("apparent_before"),
        "allocated_before": report.total("allocated_before"),
        "apparent": report.total("apparent_after"),
        "allocated": report.total("allocated_after"),
    }


def run_zarr_aligned(src: str, dst: str, workers: int) -> dict:
    import dask
    import dask.array as da
    import zarr
    from zarr.codecs import ZstdCodec
    from zarr.codecs.numcodecs import Shuffle

    from zopt.job.targets import stored_sizes as _stored_sizes

    with dask.config.set(num_workers=workers):
        t = time.perf_counter()
        source = da.from_zarr(src, component="field")
        shutil.rmtree(dst, ignore_errors=True)
        target = zarr.create_array(
            dst, shape=source.shape, chunks=INNER, shards=SHARD, dtype="f4", fill_value=0,
            compressors=[Shuffle(elementsize=4), ZstdCodec(level=3)],
        )
        da.to_zarr(source, target)
        seconds = time.perf_counter() - t
    apparent, allocated = _stored_sizes(dst, "")
    return {"seconds": seconds, "apparent": apparent, "allocated": allocated}


def run_zarr_race(src: str, dst: str, mib: int) -> dict:
    """Two threads write the two halves of every shard at the same time through zarr."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import zarr

    source = zarr.open_array(src, path="field")
    rows = max(SHARD[0], (mib * 2**20 // (source.shape[1] * 4)) // SHARD[0] * SHARD[0])
    data = source[:rows]
    shutil.rmtree(dst, ignore_errors=True)
    target = zarr.create_array(dst, shape=data.shape, chunks=INNER, shards=SHARD, dtype="f4", fill_value=0)
    half = SHARD[0] // 2
    regions = [slice(r, r + half) for r in range(0, rows, half)]
    t = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda r: target.__setitem__(r, data[r]), regions))
    seconds = time.perf_counter() - t
    back = target[:]
    lost = 0
    total = 0
    for i in range(0, rows, INNER[0]):
        for j in range(0, data.shape[1], INNER[1]):
            total += 1
            lost += not np.array_equal(back[i : i + INNER[0], j : j + INNER[1]], data[i : i + INNER[0], j : j + INNER[1]])
    return {"seconds": seconds, "lost": lost, "total": total, "logical": data.nbytes}


def child(which: str, src: str, dst: str, arg: str) -> None:
    fn = {
        "fixed-slot": run_fixed_slot,
        "compact-direct": run_compact_direct,
        "fixed+compact": run_fixed_then_compact,
        "zarr-aligned": run_zarr_aligned,
        "zarr-race": run_zarr_race,
    }[which]
    out = fn(src, dst, int(arg))
    out["peak_rss"] = _rss()
    print(json.dumps(out))


def _run(which: str, src: Path, dst: Path, arg: int) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", which, str(src), str(dst), str(arg)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gib", type=float, default=0.5)
    ap.add_argument("--workdir", default="bench-out")
    ap.add_argument("--race-mib", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3, help="runs per route; the median is shown")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    work = Path(args.workdir)
    work.mkdir(exist_ok=True)
    src = work / f"source-{args.size_gib:g}.zarr"
    shape = make_source(src, args.size_gib)
    logical = shape[0] * shape[1] * 4
    mib = 2**20
    print(f"\nshards: {logical / 2**30:.2f} GiB float32 {shape}, inner {INNER}, shards {SHARD}, {os.cpu_count()} cores\n")
    print(f"{'route':<52} {'workers':>7} {'seconds':>8} {'MB/s':>7} {'apparent MiB':>13} {'allocated MiB':>14} {'peak RSS MiB':>13}")
    rows = {}
    for which, label in (
        ("fixed-slot", "zopt fixed-slot, 2 writer tasks per shard"),
        ("zarr-aligned", "zarr-python via dask, shard-aligned [shuffle,zstd]"),
        ("compact-direct", "zopt compact (direct packed, 1 task per shard)"),
        ("fixed+compact", "zopt fixed-slot then zopt.job.compact"),
    ):
        for workers in (1, 2):
            dst = work / f"{which}.zarr"
            runs = sorted((_run(which, src, dst, workers) for _ in range(args.repeat)), key=lambda r: r["seconds"])
            r = runs[len(runs) // 2]
            rows[(which, workers)] = r
            print(f"{label:<52} {workers:>7} {r['seconds']:>8.2f} {logical / 1e6 / r['seconds']:>7.1f} "
                  f"{r['apparent'] / mib:>13.1f} {r['allocated'] / mib:>14.1f} {r['peak_rss'] / mib:>13.0f}")
            shutil.rmtree(dst, ignore_errors=True)
    fs1, fs2 = rows[("fixed-slot", 1)], rows[("fixed-slot", 2)]
    za1, za2 = rows[("zarr-aligned", 1)]["seconds"], rows[("zarr-aligned", 2)]["seconds"]
    print(f"\nspeed-up 1 → 2 workers: zopt fixed-slot {fs1['seconds'] / fs2['seconds']:.2f}× end to end, "
          f"{fs1['graph_seconds'] / fs2['graph_seconds']:.2f}× in the write graph "
          f"({fs1['graph_seconds']:.2f} → {fs2['graph_seconds']:.2f} s); zarr-python shard-aligned {za1 / za2:.2f}×")
    fc = rows[("fixed+compact", 2)]
    print(f"zopt.job.compact (2 workers): {fc['compact_seconds']:.2f} s, {fc['compact_read_mb_s']:.0f} MB/s of fixed-slot "
          f"files read; apparent {fc['apparent_before'] / mib:.1f} → {fc['apparent'] / mib:.1f} MiB, "
          f"allocated {fc['allocated_before'] / mib:.1f} → {fc['allocated'] / mib:.1f} MiB")
    race = _run("zarr-race", src, work / "race.zarr", args.race_mib)
    shutil.rmtree(work / "race.zarr", ignore_errors=True)
    print(f"zarr-python, 2 threads writing half-shards into the same shards ({race['logical'] / mib:.0f} MiB): "
          f"{race['lost']} of {race['total']} inner chunks lost")


if __name__ == "__main__":
    main()
