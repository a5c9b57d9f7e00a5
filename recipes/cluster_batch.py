"""Recompress several stores in one job on a Dask cluster, and verify every output.

Starts a ``dask.distributed.LocalCluster`` (two worker processes) or joins a running scheduler
(``--scheduler tcp://host:8786``), prints the dashboard link, and runs ``zopt.job``
for each source on it: one Dask task per output shard, each reading only its region of the
source. Every output is then opened with plain xarray and compared with its source bit for bit.

Data: the NEMO ocean model output (three months) and two climate scenarios shipped by
``iris-sample-data``.

Interrupted (killed, preempted, a worker lost)? Run the same command again: outputs already
published are verified and kept, and the output that was being written resumes from its
``<dst>.zopt-partial`` journal, rewriting only its unfinished shards (docs/recompress.md,
"Resuming an interrupted job"). ``--fresh`` starts over. The outputs are verified by comparing
values with the sources, as ``zopt verify SRC DST`` does from the command line.

    python recipes/cluster_batch.py [--small] [--out DIR] [--scheduler ADDRESS] [--fresh]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import iris_sample_data
import xarray as xr
from _outdir import recipe_out  # recipes/_outdir.py: the script's directory is on sys.path

from zopt import recompress
from zopt.compat.cluster import close_cluster

SOURCES = [
    "NEMO/nemo_1m_20150101-20150201_grid-T.nc",
    "NEMO/nemo_1m_20150201-20150301_grid-T.nc",
    "NEMO/nemo_1m_20150301-20150401_grid-T.nc",
    "A1B_north_america.nc",
    "E1_north_america.nc",
]


def same(src: str, dst: Path) -> bool:
    """``xarray.open_zarr(dst)`` is identical to ``xarray.open_dataset(src)``, bit for bit."""
    a, b = xr.open_dataset(src), xr.open_zarr(dst).load()
    xr.testing.assert_identical(a, b)  # values, dims, coordinates, attributes
    return all(a[n].values.tobytes() == b[n].values.tobytes() for n in a.variables if a[n].dtype.kind != "O")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="two sources instead of five (for CI)")
    parser.add_argument("--out", default="recipe-out", help="directory for the outputs (new or empty, or an earlier run's: resumed)")
    parser.add_argument("--scheduler", default=None, help="address of a running dask scheduler (default: a LocalCluster)")
    parser.add_argument("--fresh", action="store_true", help="delete the outputs of a previous run in OUT first instead of resuming it")
    args = parser.parse_args()
    out = recipe_out(args.out, fresh=args.fresh)  # refuses a non-empty directory no recipe made
    sources = SOURCES[:1] + SOURCES[3:4] if args.small else SOURCES

    cluster = None
    address = args.scheduler
    if address is None:
        from distributed import LocalCluster

        # processes, not threads: each worker is its own interpreter, as on a real cluster
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
        address = cluster.scheduler_address
        print(f"dashboard: {cluster.dashboard_link}  (served when bokeh is installed)")
    print(f"scheduler: {address}")
    try:
        total_src = total_dst = 0
        for rel in sources:
            src = os.path.join(iris_sample_data.path, rel)
            dst = out / (Path(rel).stem + ".zarr")
            if dst.exists():  # published by an earlier run of this batch: verify, keep
                assert same(src, dst), f"{dst} differs from {src}"
                print(f"{rel:45s} done by an earlier run, verified")
                continue
            # default chunking (~256 KiB chunks, ~64 MiB shards); resumes dst.zopt-partial if a run was killed
            report = recompress(src, dst, scheduler=address)
            assert same(src, dst), f"{dst} differs from {src}"
            total_src += report.source_bytes
            total_dst += report.stored_after
            print(f"{rel:45s} {report.source_bytes:>9} -> {report.stored_after:>9} bytes, "
                  f"{sum(a.chunks_written for a in report.arrays)} chunks, verified")
        if total_src:
            print(f"total {total_src} -> {total_dst} bytes ({total_dst / total_src:.0%})")
        assert not list(out.glob("*.zopt-partial")), "a partial store was left behind"
    finally:
        if cluster is not None:
            close_cluster(cluster)  # without distributed's warnings about killing worker processes at exit


if __name__ == "__main__":
    main()
