"""Benchmark: recompress a 1 GiB float32 array — zopt vs dask.array.from_zarr(...).to_zarr(...).

    python benchmarks/recompress.py [--size-gib 1] [--workdir bench-out] [--repeat 2]

Both runs read the same uncompressed source store (shard-aligned source chunks, so the dask
route needs no rechunk) and write a sharded Zarr v3 store with 256×256 inner chunks on Dask's
local threaded scheduler:

- zopt: ``zopt.engine.recompress`` with ``bytes`` + ``conditional([shuffle, zstd(3)])`` deciding
  ``compress_if_smaller`` per inner chunk, in the default compact layout (one task encodes and
  packs each shard) and in the fixed-slot layout (sparse shard files: the ratio is taken on
  allocated bytes);
- dask: ``dask.array.from_zarr(src).to_zarr(dst)`` into an array created with
  ``bytes`` + ``shuffle`` + ``zstd(3)`` (every chunk compressed).

Each run is its own subprocess, so peak RSS (``ru_maxrss``) belongs to that run alone.
MB/s counts logical (uncompressed) bytes. The data: a smooth field (sum of sines, 3 significant
digits) over most of the array, white noise in one band, a constant block — chunks that want
different masks.
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

SHAPE_PER_GIB = (16384, 16384)
INNER = (256, 256)
SHARD = (2048, 4096)


def make_source(path: Path, size_gib: float) -> tuple[int, int]:
    import numpy as np
    import zarr

    rows = int(SHAPE_PER_GIB[0] * size_gib)
    shape = (rows - rows % SHARD[0], SHAPE_PER_GIB[1])
    if (path / "zarr.json").exists():
        return shape
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = root.create_array(
        "field", shape=shape, chunks=SHARD, dtype="f4", compressors=None, fill_value=0,
        dimension_names=("y", "x"),
    )
    rng = np.random.default_rng(42)
    x = np.linspace(0, 40, shape[1], dtype="f4")
    for r0 in range(0, shape[0], SHARD[0]):
        y = np.linspace(r0 / shape[0] * 30, (r0 + SHARD[0]) / shape[0] * 30, SHARD[0], dtype="f4")[:, None]
        block = np.round(np.sin(x) * np.cos(y) * 20 + 15, 3).astype("f4")
        if r0 // SHARD[0] % 4 == 1:
            block[:, : shape[1] // 4] = rng.standard_normal((SHARD[0], shape[1] // 4), dtype="f4")
        if r0 // SHARD[0] % 4 == 2:
            block[:, -shape[1] // 8 :] = -999.0
        arr[r0 : r0 + SHARD[0]] = block
    zarr.consolidate_metadata(str(path))
    return shape


def run_zopt(src: str, dst: str, layout: str = "compact") -> dict:
    from zopt.engine import recompress

    t = time.perf_counter()
    report = recompress(src, dst, chunks=INNER, shards=SHARD, overwrite=True, layout=layout)
    a = report.arrays[0]
    return {"seconds": time.perf_counter() - t, "stored": a.stored_after, "allocated": a.allocated_after,
            "masks": {str(k): v for k, v in report.masks().items()}}


def run_dask(src: str, dst: str) -> dict:
    import dask.array as da
    import zarr
    from zarr.codecs import ZstdCodec
    from zarr.codecs.numcodecs import Shuffle

    from zopt.engine import _stored_sizes

    t = time.perf_counter()
    source = da.from_zarr(src, component="field")
    shutil.rmtree(dst, ignore_errors=True)
    target = zarr.create_array(
        dst, shape=source.shape, chunks=INNER, shards=SHARD, dtype="f4", fill_value=0,
        compressors=[Shuffle(elementsize=4), ZstdCodec(level=3)],  # zarr's own codecs
    )
    da.to_zarr(source, target)
    elapsed = time.perf_counter() - t
    stored, allocated = _stored_sizes(dst, "")
    return {"seconds": elapsed, "stored": stored, "allocated": allocated}


def child(which: str, src: str, dst: str) -> None:
    import resource

    out = run_dask(src, dst) if which == "dask" else run_zopt(src, dst, "fixed-slot" if which == "zopt-fixed-slot" else "compact")
    out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gib", type=float, default=1.0)
    ap.add_argument("--workdir", default="bench-out")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    work = Path(args.workdir)
    work.mkdir(exist_ok=True)
    src = work / "source.zarr"
    shape = make_source(src, args.size_gib)
    logical = shape[0] * shape[1] * 4
    rows = []
    for rep in range(args.repeat):
        for which in ("dask", "zopt", "zopt-fixed-slot"):
            dst = work / f"{which}.zarr"
            out = subprocess.run(
                [sys.executable, __file__, "--child", which, str(src), str(dst)],
                capture_output=True, text=True, check=True,
            )
            res = json.loads(out.stdout.strip().splitlines()[-1])
            res.update(which=which, rep=rep)
            rows.append(res)
            shutil.rmtree(dst, ignore_errors=True)
    print(f"\nrecompress {logical / 2**30:.2f} GiB float32 {shape}, inner {INNER}, shards {SHARD}, "
          f"{os.cpu_count()} cores, Dask threaded scheduler\n")
    print(f"{'route':<48} {'rep':>3} {'seconds':>8} {'MB/s':>8} {'stored MiB':>11} {'allocated MiB':>14} {'ratio':>6} {'peak RSS MiB':>13}")
    names = {
        "dask": "dask.array.from_zarr().to_zarr() [shuffle,zstd]",
        "zopt": "zopt recompress [conditional(shuffle,zstd)]",
        "zopt-fixed-slot": "zopt recompress --layout fixed-slot",
    }
    for r in rows:
        print(f"{names[r['which']]:<48} {r['rep']:>3} {r['seconds']:>8.2f} {logical / 1e6 / r['seconds']:>8.1f} "
              f"{r['stored'] / 2**20:>11.1f} {r['allocated'] / 2**20:>14.1f} {logical / r['allocated']:>6.2f} {r['peak_rss'] / 2**20:>13.0f}")
    masks = next(r["masks"] for r in rows if r["which"] == "zopt")
    print(f"\nzopt masks (bit 0 shuffle, bit 1 zstd): { {format(int(k), '02b'): v for k, v in sorted(masks.items())} }")


if __name__ == "__main__":
    main()
