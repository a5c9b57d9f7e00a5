"""An archive of 240 monthly netCDF files (200 with ``--small``), one of them packed differently, into one Icechunk commit.

Data: 20 years of monthly air temperature over North America (A1B scenario) from
``iris-sample-data``, split into one CF-packed int16 netCDF file per month (``scale_factor`` 0.01,
``add_offset`` 273.15), the way such archives are distributed; one month is packed with other
parameters, as happens when a producer changes its settings.

1. Combine the files along ``time`` with ``xarray.open_mfdataset`` into one netCDF first; each
   file is decoded with its own packing, and the combined file stores the decoded (float64)
   values (keeping the first file's packing would silently re-pack the odd month wrongly).
   zopt combines files itself (``zopt.recompress(files, dst, concat_dim="time")``, re-expressing
   the odd month in one exact packing), but on zarr-python >= 3.4 a sharded array refuses that
   packing when 0.0 does not survive it (offset 273.15 here; docs/archives.md, "Limits"),
   so this recipe keeps xarray's combine until that is fixed.
2. ``zopt.recompress(combined, "icechunk://…")``: one job, one commit on ``main`` with zopt's
   options and plan in its metadata; ``--verify`` (``before_publish``) compares the commit bit
   for bit before ``main`` moves to it.
3. Check every month against its own file, and print the commit log.

    python recipes/icechunk_archive.py [--small] [--out DIR]

Needs, from a zopt clone, ``pip install ".[icechunk,data]"``.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import icechunk
import iris_sample_data
import numpy as np
import xarray as xr

import zopt
from zopt.readback.verify import before_publish_check

VAR = "air_temperature"


def split_into_monthly_files(ds: xr.Dataset, folder: Path, odd: int) -> list[Path]:
    """One CF-packed int16 file per month; month ``odd`` packed with other parameters."""
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
    parser.add_argument("--small", action="store_true", help="200 months (200 files) instead of 240 (for CI)")
    parser.add_argument("--out", default="recipe-out", help="directory for the files and the repository (replaced)")
    args = parser.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)

    ds = xr.open_dataset(os.path.join(iris_sample_data.path, "A1B_north_america.nc"))[[VAR]].load()
    if args.small:
        ds = ds.isel(time=slice(0, 200))
    odd = 100
    files = split_into_monthly_files(ds, out / "monthly", odd)
    assert xr.open_dataset(files[odd], mask_and_scale=False)[VAR].attrs["scale_factor"] == 0.02

    # 1. combine: each file decoded with its own packing; the combined file stores the decoded values
    combined = out / "combined.nc"
    with xr.open_mfdataset(files, combine="nested", concat_dim="time", data_vars="minimal", coords="minimal",
                           compat="override") as mf:
        for v in mf.variables.values():
            v.encoding = {}  # not the first file's packing: that would re-pack the odd month wrongly
        mf.to_netcdf(combined)

    # 2. one Icechunk commit
    repo_path = out / "archive.icechunk"
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(repo_path)))
    url = f"icechunk://{repo_path}@main"
    checked: list = []
    report = zopt.recompress(combined, url, chunks={"time": 12}, shards={"time": 120},
                             before_publish=before_publish_check(combined, url, done=checked))
    assert checked and checked[0].ok, "the commit differs from the combined file"
    print(f"{len(files)} files → {report.dst}: {report.arrays[0].stored_after} bytes stored for "
          f"{report.arrays[0].logical_bytes} logical; verified bit for bit before main moved")

    # 3. every month against its own file, read from the branch
    store = repo.readonly_session(branch="main").store
    archived = xr.open_zarr(store, consolidated=False)[VAR].values
    for i, path in enumerate(files):
        with xr.open_dataset(path) as month:
            expected = month[VAR].values[0]
            assert archived.dtype == expected.dtype and archived[i].tobytes() == expected.tobytes(), path.name
    print(f"every month equals its own file decoded (month {odd} packed with scale 0.02, offset 250)")

    print("commit log of main:")
    for snap in repo.ancestry(branch="main"):
        record = (snap.metadata or {}).get("zopt")
        what = "" if record is None else (f"  [zopt: {sum(map(len, record['done'].values()))} units, "
                                          f"layouts {record['layouts']}, options "
                                          f"chunks={record['fingerprint']['options']['chunks']}]")
        print(f"  {snap.id}  {snap.message}{what}")


if __name__ == "__main__":
    main()
