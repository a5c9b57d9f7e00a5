"""Benchmark: appending new files to a store zopt wrote, next to a fresh job on the same new files.

    python benchmarks/append.py [--old 10000] [--new 1000] [--workdir bench-out]

An archive of OLD + NEW netCDF4 files (one per day: ``sst`` (1, 64, 64) packed int16 with
``scale_factor`` 0.01, ``time``, ``lat``/``lon``; as ``benchmarks/archive.py`` writes them) is
written once under ``WORKDIR/append/OLD+NEW``; the first OLD files go into ``old/``, the next NEW
into ``new/``. The store of the old files is made once (not timed), then each route runs in a fresh
process, on Dask's threaded scheduler, one run each:

- ``fresh``: ``zopt.recompress("new/*.nc", dst, concat_dim="time")``: a new store of the NEW files
  (the menu's trial encodings included, as any fresh job);
- ``append``: ``zopt.recompress("new/*.nc", old_store, concat_dim="time", append=True)`` on a copy
  of the old files' store (copied before the clock starts): the NEW files checked against the store
  and written with its chains and layout, the last partly filled shard rewritten.

Seconds are wall-clock for the call (imports excluded); CPU s is the route process's user + system
time. The goal: ``append`` ≤ 1.2 × ``fresh`` (it rereads none of the OLD files).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

NY = NX = 64


def make_files(folder: str, first: int, n: int) -> str:
    """Files ``first`` … ``first + n - 1`` (day numbers) under ``folder``, written once; returns the glob."""
    import netCDF4
    import numpy as np

    done = os.path.join(folder, ".complete")
    if not os.path.exists(done):
        os.makedirs(folder, exist_ok=True)
        base = (np.add.outer(np.linspace(-2, 28, NY), np.zeros(NX)) * 100).astype("i2")
        for i in range(first, first + n):
            rng = np.random.default_rng(i)
            with netCDF4.Dataset(os.path.join(folder, f"sst_{i:06d}.nc"), "w") as nc:
                nc.createDimension("time", 1)
                nc.createDimension("lat", NY)
                nc.createDimension("lon", NX)
                t = nc.createVariable("time", "f8", ("time",))
                t.units = "days since 2000-01-01"
                t[:] = [i]
                for name, size in (("lat", NY), ("lon", NX)):
                    v = nc.createVariable(name, "f4", (name,))
                    v[:] = np.arange(size, dtype="f4")
                v = nc.createVariable("sst", "i2", ("time", "lat", "lon"), fill_value=np.int16(-32767))
                v.scale_factor, v.add_offset, v.units = 0.01, 0.0, "degC"
                v.set_auto_maskandscale(False)
                v[:] = (base + rng.integers(-50, 50, (NY, NX))).astype("i2")[None]
        open(done, "w").close()
    return os.path.join(folder, "*.nc")


def route(name: str, pattern: str, dst: str) -> dict:
    """Run one route in this process: seconds (the call) and CPU seconds (the process)."""
    import zopt

    t0 = time.perf_counter()
    zopt.recompress(pattern, dst, concat_dim="time", append=name == "append")
    seconds = time.perf_counter() - t0
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"seconds": seconds, "cpu": r.ru_utime + r.ru_stime}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", type=int, default=10000)
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--workdir", default="bench-out")
    parser.add_argument("--route", help=argparse.SUPPRESS)  # internal: run one route in this process
    parser.add_argument("--pattern", help=argparse.SUPPRESS)
    parser.add_argument("--dst", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.route:
        print(json.dumps(route(args.route, args.pattern, args.dst)))
        return
    root = os.path.join(args.workdir, "append", f"{args.old}+{args.new}")
    old = make_files(os.path.join(root, "old"), 0, args.old)
    new = make_files(os.path.join(root, "new"), args.old, args.new)
    base = os.path.join(root, "old.zarr")
    if not os.path.exists(base):
        import zopt

        zopt.recompress(old, base, concat_dim="time")
    rows = []
    for name in ("fresh", "append"):
        dst = os.path.join(root, f"{name}.zarr")
        shutil.rmtree(dst, ignore_errors=True)
        if name == "append":
            shutil.copytree(base, dst)
        out = subprocess.run([sys.executable, __file__, "--route", name, "--pattern", new, "--dst", dst],
                             capture_output=True, text=True, check=True)
        rows.append((name, json.loads(out.stdout.strip().splitlines()[-1])))
    print(f"{args.new} files appended to a store of {args.old} (sst 1x64x64 int16 per file)")
    print(f"{'route':<8} {'seconds':>8} {'files/s':>8} {'CPU s':>7}")
    for name, r in rows:
        print(f"{name:<8} {r['seconds']:8.2f} {args.new / r['seconds']:8.1f} {r['cpu']:7.2f}")
    fresh, append = rows[0][1], rows[1][1]
    print(f"append / fresh: {append['seconds'] / fresh['seconds']:.2f}x wall, {append['cpu'] / fresh['cpu']:.2f}x CPU")


if __name__ == "__main__":
    main()
