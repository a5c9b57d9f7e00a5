"""Write a real dataset to Zarr v3 with zopt's per-chunk codecs from xarray, read it back with
plain xarray, and compare the size with zarr's default codecs on the same chunks and shards.

Data: 240 years (1860-2099) of annual-mean air temperature over North America (A1B scenario), 240×37×49 float32,
shipped by ``iris-sample-data`` (``pip install ".[data]"`` in a zopt clone).

    python recipes/xarray_to_zarr.py [--small] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import iris_sample_data
import xarray as xr
from _outdir import recipe_out  # recipes/_outdir.py: the script's directory is on sys.path

import zopt.xarray  # noqa: F401 - registers the ds.zopt accessor too


def stored_bytes(store: Path) -> int:
    """Bytes of the chunk and shard files of a store (metadata excluded)."""
    return sum(f.stat().st_size for f in store.rglob("*") if f.is_file() and not f.name.startswith(("zarr.json", ".z")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="4 years instead of 20 (for CI)")
    parser.add_argument("--out", default="recipe-out", help="directory for the stores (new or empty; a recipe's own: its outputs replaced)")
    args = parser.parse_args()
    out = recipe_out(args.out)  # refuses a non-empty directory no recipe made

    ds = xr.open_dataset(os.path.join(iris_sample_data.path, "A1B_north_america.nc"))
    if args.small:
        ds = ds.isel(time=slice(0, 48))

    # one year per inner chunk, ten years (or all of --small) per shard file; coordinates whole
    layout = {"chunks": {"time": 12}, "shards": {"time": 120}}
    encoding = zopt.xarray.encoding(ds, **layout)
    ds.to_zarr(out / "zopt.zarr", zarr_format=3, encoding=encoding, consolidated=False)

    # the same chunks and shards with zarr's own default codecs, for comparison
    plain = {name: {k: v for k, v in enc.items() if k in ("chunks", "shards")} for name, enc in encoding.items()}
    ds.to_zarr(out / "default.zarr", zarr_format=3, encoding=plain, consolidated=False)

    # plain xarray reads it back: no zopt import is needed where zopt is installed
    back = xr.open_zarr(out / "zopt.zarr", consolidated=False).load()
    xr.testing.assert_identical(back, ds)
    t = "air_temperature"
    assert back[t].values.tobytes() == ds[t].values.tobytes(), "values differ"

    ours, theirs = stored_bytes(out / "zopt.zarr"), stored_bytes(out / "default.zarr")
    print(f"logical      {ds.nbytes:>9} bytes")
    print(f"zarr default {theirs:>9} bytes  (zstd level 0, same chunks and shards)")
    print(f"zopt         {ours:>9} bytes  ({ours / theirs:.0%} of zarr default)")
    assert ours < theirs, "zopt's store should be smaller than zarr's default"


if __name__ == "__main__":
    main()
