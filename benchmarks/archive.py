"""Benchmark: an archive of many small netCDF files into one Zarr store, zopt next to xarray.

    python benchmarks/archive.py [--sizes 1000,10000] [--workdir bench-out]

Each archive is N netCDF4 files (one per day: ``sst`` (1, 64, 64) packed int16 with
``scale_factor`` 0.01, a ``time`` coordinate, ``lat``/``lon``), written once under
``WORKDIR/archive/N`` and reused. Every route runs in a fresh process (peak RSS is that process's
``ru_maxrss``), one run each:

- ``zopt plan``: ``zopt.recompress(glob, dst, concat_dim="time", dry_run=True)``: every file's
  metadata read by Dask tasks and checked, the plan of work made; nothing written.
- ``zopt``: the whole job on Dask's threaded scheduler in the same process (so the RSS covers
  the tasks too), into a local directory.
- ``zopt cluster client``: the same job on a ``LocalCluster`` (2 worker processes): the RSS is the
  client's alone.
- ``xarray``: ``xr.open_mfdataset(glob, combine="by_coords", parallel=True, data_vars="minimal",
  coords="minimal", compat="override").to_zarr(dst)`` — xarray's documented fast settings for many
  files (no value comparisons between files) — on the same threaded scheduler; ``xarray serial``:
  the same with ``parallel=False`` (the files opened one by one on the client, xarray's default).

files/s counts source files per second of wall-clock time for the whole route (imports
excluded); CPU s is the route process's user + system time, imports included (the cluster's
workers are other processes, not counted). The machine is shared: the 1-minute load average
before each route is printed with it.

``--tracemalloc``: the routes run under ``tracemalloc`` (much slower) and print, to stderr, the
source lines holding the most memory at the largest traced size the client reached: where a
client's memory goes as the archive grows.
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


def make_archive(folder: str, n: int) -> str:
    """``n`` files under ``folder`` (written once, with netCDF4 directly: fast); returns the glob."""
    import netCDF4
    import numpy as np

    done = os.path.join(folder, ".complete")
    if not os.path.exists(done):
        os.makedirs(folder, exist_ok=True)
        base = (np.add.outer(np.linspace(-2, 28, NY), np.zeros(NX)) * 100).astype("i2")
        for i in range(n):
            path = os.path.join(folder, f"sst_{i:06d}.nc")
            if os.path.exists(path) and os.path.exists(os.path.join(folder, f"sst_{i + 1:06d}.nc")):
                continue  # written by an interrupted run (the last one may be torn: rewritten)
            rng = np.random.default_rng(i)
            with netCDF4.Dataset(path, "w") as nc:
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


def _usage(seconds: float) -> dict:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"seconds": seconds, "rss": r.ru_maxrss * 1024, "cpu": r.ru_utime + r.ru_stime}


def _trace_peak() -> tuple[object, list]:
    """Start tracemalloc and a thread that keeps a snapshot of the largest traced size seen
    (checked every second); returns the thread's stop event and the [size, snapshot] cell."""
    import threading
    import tracemalloc

    tracemalloc.start(8)
    stop, best = threading.Event(), [0, None]

    def watch() -> None:
        while not stop.wait(1.0):
            current = tracemalloc.get_traced_memory()[0]
            if current > best[0] * 1.05:
                best[:] = [current, tracemalloc.take_snapshot()]

    threading.Thread(target=watch, daemon=True).start()
    return stop, best


def _print_trace(best: list) -> None:
    if best[1] is None:
        return
    print(f"tracemalloc: largest traced size seen {best[0] / 2**20:.1f} MiB; the lines holding most of it:", file=sys.stderr)
    for stat in best[1].statistics("lineno")[:15]:
        print(f"  {stat.size / 2**20:8.2f} MiB {stat.count:9d} blocks  {stat.traceback[0]}", file=sys.stderr)


def route(name: str, pattern: str, dst: str, trace: bool = False) -> dict:
    """Run one route in this process; returns seconds, peak RSS and CPU seconds (this process)."""
    import zopt  # noqa: F401 - imports before the clock starts, for every route alike

    if trace:
        stop, best = _trace_peak()
        try:
            return route(name, pattern, dst)
        finally:
            stop.set()
            _print_trace(best)

    shutil.rmtree(dst, ignore_errors=True)
    t = time.perf_counter()
    if name == "zopt plan":
        zopt.recompress(pattern, dst, concat_dim="time", dry_run=True)
    elif name == "zopt":
        zopt.recompress(pattern, dst, concat_dim="time")
    elif name == "zopt cluster client":
        import distributed

        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl:
            t = time.perf_counter()  # the cluster's start-up is not the job's
            zopt.recompress(pattern, dst, concat_dim="time", scheduler=cl.scheduler_address)
            seconds = time.perf_counter() - t
        return _usage(seconds)
    elif name in ("xarray", "xarray serial"):
        import xarray as xr

        ds = xr.open_mfdataset(pattern, combine="by_coords", parallel=name == "xarray", data_vars="minimal",
                               coords="minimal", compat="override")
        ds.to_zarr(dst, mode="w")
    else:
        raise ValueError(f"route: {name!r}")
    return _usage(time.perf_counter() - t)


ROUTES = ("zopt plan", "zopt", "zopt cluster client", "xarray", "xarray serial")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,10000", help="archive sizes (files), comma-separated")
    p.add_argument("--workdir", default="bench-out")
    p.add_argument("--routes", default=",".join(ROUTES))
    p.add_argument("--route", help=argparse.SUPPRESS)  # internal: run one route in this process
    p.add_argument("--pattern", help=argparse.SUPPRESS)
    p.add_argument("--dst", help=argparse.SUPPRESS)
    p.add_argument("--tracemalloc", action="store_true", help="print where the client's memory goes (slow)")
    args = p.parse_args()
    if args.route:
        print(json.dumps(route(args.route, args.pattern, args.dst, args.tracemalloc)))
        return
    print("| files | route | seconds | files/s | CPU s (this process) | peak RSS MiB | load before |")
    print("|---|---|---|---|---|---|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        t = time.perf_counter()
        pattern = make_archive(os.path.join(args.workdir, "archive", str(n)), n)
        made = time.perf_counter() - t
        if made > 1:
            print(f"<!-- made {n} files in {made:.0f} s -->", flush=True)
        for name in args.routes.split(","):
            dst = os.path.join(args.workdir, "archive", f"{n}-{name.replace(' ', '-')}.zarr")
            load = os.getloadavg()[0]
            out = subprocess.run([sys.executable, __file__, "--route", name, "--pattern", pattern, "--dst", dst]
                                 + ["--tracemalloc"] * args.tracemalloc, capture_output=True, text=True)
            if args.tracemalloc:
                print("\n".join(line for line in out.stderr.splitlines() if line.startswith(("tracemalloc", "  "))),
                      file=sys.stderr, flush=True)
            if out.returncode:
                why = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
                print(f"| {n} | {name} | failed: {why} | | | | {load:.1f} |", flush=True)
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {n} | {name} | {r['seconds']:.1f} | {n / r['seconds']:.0f} | {r['cpu']:.1f} | "
                  f"{r['rss'] / 2**20:.0f} | {load:.1f} |", flush=True)
            shutil.rmtree(dst, ignore_errors=True)


if __name__ == "__main__":
    main()
