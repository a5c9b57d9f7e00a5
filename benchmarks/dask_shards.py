"""Benchmark: sharded writes from Dask whose chunks do not align with the shards (issue 36).

    python benchmarks/dask_shards.py [--size 8192] [--shard 1024] [--workers 2] [--trials 5]

A ``size``² float32 array of random numbers, built lazily by Dask in chunks of 130 × 170, is
written with shards of ``shard``² (inner chunks a quarter of a shard per side):

- ``xarray safe_chunks=True``: ``Dataset.to_zarr`` refuses (each Dask chunk overlaps several shards);
- ``xarray safe_chunks=False``: ``to_zarr`` writes, and several Dask tasks write into one shard at
  once (read-modify-write of the whole shard file); the store is read back and compared
  (dask#12583, zarr-python#3682); ``--trials`` runs;
- ``ds.zopt.to_zarr(..., shards=...)``: ``zopt.xarray.dask_chunks`` rechunks each variable to whole
  shards, so one task writes one shard, with the chain the codec menu chooses.

Each run is a fresh subprocess on Dask's threaded scheduler with ``--workers`` threads; peak
memory is the process's resident high-water mark (``ru_maxrss``) minus its value after the
imports and a small warm-up write (so pcodec's, blosc's and zarr's buffers are counted, which
``tracemalloc`` would not see). Printed: values equal or how many differ, wall seconds, the peak
memory growth and it over one shard's raw bytes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

RUN = r"""
import json, resource, shutil, sys, time, warnings
import dask, dask.array as da, numpy as np, xarray as xr
import zopt.xarray  # noqa: F401 - ds.zopt
warnings.simplefilter("ignore")
mode, size, shard, workers, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
dask.config.set(scheduler="threads", num_workers=workers)
def dataset(n):
    return xr.Dataset({"v": (("y", "x"), da.random.default_rng(0).random((n, n), chunks=(130, 170), dtype="f4"))})
def write(ds, where, sh):
    enc = {"v": {"chunks": (sh // 4, sh // 4), "shards": (sh, sh)}}
    shutil.rmtree(where, ignore_errors=True)
    if mode == "zopt":
        ds.zopt.to_zarr(where, chunks={"y": sh // 4, "x": sh // 4}, shards={"y": sh, "x": sh}, consolidated=False)
    else:
        ds.to_zarr(where, zarr_format=3, encoding=enc, consolidated=False, safe_chunks=(mode == "safe"))
try:
    write(dataset(520), path, 260)  # warm-up: imports, codec buffers
except ValueError:
    pass
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
ds = dataset(size)
t = time.perf_counter()
try:
    write(ds, path, shard)
except ValueError as exc:
    print(json.dumps({"refused": str(exc).split(".")[0]}))
    sys.exit(0)
seconds = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
back = xr.open_zarr(path, consolidated=False)["v"].values
want = ds["v"].values
print(json.dumps({"differ": int(np.sum(back != want)), "seconds": seconds, "peak": peak}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--shard", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--workdir", default="bench-dask-shards.zarr")
    args = ap.parse_args()
    shard_bytes = args.shard ** 2 * 4
    print(f"{args.size}² float32 ({args.size ** 2 * 4 / 2**20:.0f} MiB), Dask chunks 130 × 170, shards {args.shard}² "
          f"({shard_bytes / 2**20:.0f} MiB), {args.workers} threads")
    print("| write | values | s | peak memory growth | / shard |")
    print("|---|---|---|---|---|")
    for mode, trials in (("safe", 1), ("unsafe", args.trials), ("zopt", args.trials)):
        for _ in range(trials):
            out = subprocess.run([sys.executable, "-c", RUN, mode, str(args.size), str(args.shard), str(args.workers),
                                  args.workdir], capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            name = {"safe": "xarray safe_chunks=True", "unsafe": "xarray safe_chunks=False",
                    "zopt": "ds.zopt.to_zarr"}[mode]
            if "refused" in r:
                print(f"| {name} | refused: {r['refused'][:60]}… | | | |")
                continue
            values = "equal" if r["differ"] == 0 else f"**{r['differ']} differ**"
            print(f"| {name} | {values} | {r['seconds']:.2f} | {r['peak'] / 2**20:.0f} MiB | "
                  f"{r['peak'] / shard_bytes:.1f} |")


if __name__ == "__main__":
    main()
