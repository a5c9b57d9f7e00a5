"""Write fast, compress later: an instrument-style ingest appends time steps with no compression
at all (every chunk stored with mask 0, ``decision="never"``), then ``zopt recompress STORE
--in-place --plan PLAN`` re-decides each chunk's codecs shard by shard, atomically, keeping every
array's metadata as it was.

Data: annual-mean air temperature over North America (``iris-sample-data``), appended one year at
a time as if it came from a model or an instrument.

    python recipes/write_fast_compress_later.py [--small] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import iris_sample_data
import numpy as np
import xarray as xr
from _outdir import recipe_out  # recipes/_outdir.py: the script's directory is on sys.path

import zopt.xarray
from zopt import info as store_info


def zopt_cli(*args: str) -> None:
    """Run a ``zopt`` command (the CLI of this Python's zopt), echoing it."""
    print("$ zopt", " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "zopt", *args, "--no-progress"], check=True)


def files(store: Path) -> dict[str, bytes]:
    """Every metadata document of a store, by path."""
    return {str(p.relative_to(store)): p.read_bytes() for p in store.rglob("zarr.json")}


def chunk_bytes(store: Path) -> int:
    return sum(f.stat().st_size for f in store.rglob("*") if f.is_file() and f.name != "zarr.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="2 years instead of 20 (for CI)")
    parser.add_argument("--out", default="recipe-out", help="directory for the store and the plan (new or empty; a recipe's own: its outputs replaced)")
    args = parser.parse_args()
    out = recipe_out(args.out)  # refuses a non-empty directory no recipe made
    store = out / "ingest.zarr"

    ds = xr.open_dataset(os.path.join(iris_sample_data.path, "A1B_north_america.nc"))
    ds = ds[["air_temperature"]].drop_vars("time_bnds", errors="ignore")
    steps = 24 if args.small else ds.sizes["time"]

    # 1. ingest: the codec chain is in the metadata from the start, but nothing is compressed
    #    (decision "never": mask 0, the chunk's raw bytes after a 1-byte header)
    encoding = zopt.xarray.encoding(ds.isel(time=[0]), chunks={"time": 1}, shards={"time": 12}, decision="never")
    for t in range(steps):
        step = ds.isel(time=[t])
        if t == 0:
            step.to_zarr(store, zarr_format=3, encoding=encoding, consolidated=False)
        else:
            step.to_zarr(store, append_dim="time", consolidated=False)
    before, raw_size = files(store), chunk_bytes(store)
    assert store_info(store, ["air_temperature"])[0].masks == {0: steps}, "ingest compressed something"
    print(f"ingested {steps} time steps uncompressed: {raw_size} bytes")

    # 2. later, off the critical path: analyse, plan, and rewrite in place with the plan
    zopt_cli("plan", str(store), "air_temperature", "--policy", "min_gain", "--param", "gain=0.05",
             "-o", str(out / "plan.zarr"))
    zopt_cli("recompress", str(store), "--in-place", "--plan", str(out / "plan.zarr"), "--variable", "air_temperature")

    after = chunk_bytes(store)
    print(f"after zopt recompress --in-place: {after} bytes ({after / raw_size:.0%})")
    assert files(store) == before, "metadata changed"
    assert after < 0.8 * raw_size, "the store did not get smaller"
    back = xr.open_zarr(store, consolidated=False)["air_temperature"].values
    assert np.array_equal(back, ds["air_temperature"].values[:steps], equal_nan=True), "values changed"
    assert not list(store.rglob("*.zopt-*")), "temporary files left behind"


if __name__ == "__main__":
    main()
