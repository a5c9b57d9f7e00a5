"""An archive of 240 yearly netCDF files (200 with ``--small``), one of them packed differently, into one Icechunk commit.

Data: 240 years (1860-2099) of annual-mean air temperature over North America (A1B scenario) from
``iris-sample-data``, split into one CF-packed int16 netCDF file per year (``scale_factor`` 0.01,
``add_offset`` 273.15), the way such archives are distributed; one year is packed with other
parameters, as happens when a producer changes its settings.

1. ``zopt.recompress(files, "icechunk://…", concat_dim="time", readers="zarr-python-3.2")``: the
   files are combined along ``time`` as ``xarray.open_mfdataset`` would (their metadata read by
   Dask tasks, checked), the odd year's packing re-expressed in one exact ``scale_offset`` +
   ``cast_value`` packing (a note says so; keeping the first file's packing would silently re-pack
   it wrongly; zarr-python reads those codecs without zopt from 3.2 on, hence the readers: by
   default, for zarr-python 3.1 too, the variable is written as the floats it decodes to), in one job
   and one commit on ``main`` with zopt's options and plan in its metadata; ``before_publish``
   (``--verify``) compares the commit with the files before ``main`` moves to it.
2. Check every year against its own file, and print the commit log.

    python recipes/icechunk_archive.py [--small] [--out DIR]

Needs, from a zopt clone, ``pip install ".[icechunk,data]"``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import icechunk
import iris_sample_data
import numpy as np
import xarray as xr
from _outdir import recipe_out  # recipes/_outdir.py: the script's directory is on sys.path

import zopt
from zopt.readback.verify import before_publish_check

VAR = "air_temperature"


def split_into_monthly_files(ds: xr.Dataset, folder: Path, odd: int) -> list[Path]:
    """One CF-packed int16 file per year; year ``odd`` packed with other parameters."""
    folder.mkdir(parents=True)
    paths = []
    for i in range(ds.sizes["time"]):
        scale, offset = (0.02, 250.0) if i == odd else (0.01, 273.15)
        path = folder / f"air_{i:03d}.nc"
        ds.isel(time=[i]).to_netcdf(path, encoding={VAR: {"dtype": "int16", "scale_factor": scale, "add_offset": offset,
                                                          "_FillValue": np.int16(-32768)}})
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="200 years (200 files) instead of 240 (for CI)")
    parser.add_argument("--out", default="recipe-out", help="directory for the files and the repository (new or empty; a recipe's own: its outputs replaced)")
    args = parser.parse_args()
    out = recipe_out(args.out)  # refuses a non-empty directory no recipe made

    ds = xr.open_dataset(os.path.join(iris_sample_data.path, "A1B_north_america.nc"))[[VAR]].load()
    if args.small:
        ds = ds.isel(time=slice(0, 200))
    odd = 100
    files = split_into_monthly_files(ds, out / "monthly", odd)
    assert xr.open_dataset(files[odd], mask_and_scale=False)[VAR].attrs["scale_factor"] == 0.02

    # 1. one job, one Icechunk commit, verified against the files before main moves
    repo_path = out / "archive.icechunk"
    if "ICECHUNK_LOG" not in os.environ:  # icechunk warns that local storage is unsafe for concurrent commits:
        icechunk.set_logs_filter("error")  # this recipe commits from one process (errors still show)
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(repo_path)))
    url = f"icechunk://{repo_path}@main"
    sources = [str(p) for p in files]
    checked: list = []
    report = zopt.recompress(sources, url, concat_dim="time", chunks={"time": 12}, shards={"time": 120},
                             readers="zarr-python-3.2",
                             before_publish=before_publish_check(sources, url, done=checked, concat_dim="time"))
    assert checked and checked[0].ok, "the commit differs from the files"
    print(f"{len(files)} files → {report.dst}: {report.arrays[0].stored_after} bytes stored for "
          f"{report.arrays[0].logical_bytes} logical; verified before main moved")
    for note in report.notes:
        print(f"note: {note}")
    print(report.readers)

    # 2. every year against its own file, read from the branch
    store = repo.readonly_session(branch="main").store
    archived = xr.open_zarr(store, consolidated=False)[VAR].values
    for i, path in enumerate(files):
        with xr.open_dataset(path) as month:  # the file's own CF decoding (float32 arithmetic)
            expected = month[VAR].values[0]
        # the stored integers are exact; the two decodings round differently by at most 2 ulps
        np.testing.assert_array_max_ulp(archived[i].astype(expected.dtype), expected, maxulp=2)
    print(f"every year equals its own file decoded, to 2 ulps (year {odd} packed with scale 0.02, offset 250)")

    print("commit log of main:")
    for snap in repo.ancestry(branch="main"):
        record = (snap.metadata or {}).get("zopt")
        what = "" if record is None else (f"  [zopt: {sum(map(len, record['done'].values()))} units, "
                                          f"layouts {record['layouts']}, options "
                                          f"chunks={record['fingerprint']['options']['chunks']}]")
        print(f"  {snap.id}  {snap.message}{what}")


if __name__ == "__main__":
    main()
