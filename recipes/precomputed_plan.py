"""A precomputed plan (the conditional spec's Example 3): analyse the data once, make a plan of
per-chunk masks, look at it, then write the final array with exactly those masks and no trial
encoding — from plain zarr and from xarray.

Data: NEMO sea-surface temperature (``tos``, 330×360, land masked with 1e20), shipped by
``iris-sample-data``. Ocean chunks end up shuffled + compressed, coastal ones compressed only,
all-land chunks equal the fill value and are not stored at all.

    python recipes/precomputed_plan.py [--small] [--out DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys

import iris_sample_data
import xarray as xr
import zarr
from _outdir import recipe_out  # recipes/_outdir.py: the script's directory is on sys.path

import zopt.xarray
from zopt import ConditionalCodec
from zopt import info as store_info
from zopt.planning.plan import Plan

SRC = os.path.join(iris_sample_data.path, "NEMO", "nemo_1m_20150101-20150201_grid-T.nc")


def zopt_cli(*args: str) -> None:
    print("$ zopt", " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "zopt", *args], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the northern 120 rows only (for CI)")
    parser.add_argument("--out", default="recipe-out", help="directory for stores, plan and picture (new or empty; a recipe's own: its outputs replaced)")
    args = parser.parse_args()
    out = recipe_out(args.out)  # refuses a non-empty directory no recipe made

    # the raw values, land included (mask_and_scale=False keeps 1e20 and its _FillValue attribute)
    ds = xr.open_dataset(SRC, mask_and_scale=False)[["tos"]]
    if args.small:
        ds = ds.isel(y=slice(210, 330))
    tos = ds["tos"]
    fill = tos.attrs["_FillValue"]
    chunks = (1, 30, 36)

    # 1. a raw (uncompressed) staging copy: the analysis reads only sample windows of each chunk
    stage = zarr.create_array(out / "stage.zarr", name="tos", shape=tos.shape, dtype=tos.dtype, chunks=chunks,
                              compressors=None, fill_value=fill, dimension_names=tos.dims)
    stage[:] = tos.values

    # 2. analyse and plan: the smallest trial per chunk; 3. review it as a picture
    zopt_cli("plan", str(out / "stage.zarr"), "tos", "--policy", "smallest", "-o", str(out / "plan.zarr"), "--no-progress")
    zopt_cli("plan", "show", str(out / "plan.zarr"), "--png", str(out / "plan.png"))
    plan = Plan.load(out / "plan.zarr")
    planned_stored = collections.Counter(int(m) for m in plan["tos"].masks[plan["tos"].ratios == plan["tos"].ratios])
    print("planned masks of stored chunks:", dict(planned_stored))

    # 4a. plain zarr: the plan is the conditional codec's decision
    shards = (1, tos.shape[1], tos.shape[2])
    # a plan's masks are per chunk: zopt's codec pipeline hands each chunk's index to the decision
    # (zarr's own does not; installing zopt leaves zarr's default alone), so write inside zopt.pipeline()
    codec = ConditionalCodec(codecs=plan["tos"].codecs, decision=plan["tos"])
    with zopt.pipeline():
        z = zarr.create_array(out / "plain.zarr", name="tos", shape=tos.shape, dtype=tos.dtype, chunks=chunks,
                              shards=shards, compressors=[codec], fill_value=fill, dimension_names=tos.dims)
        z[:] = tos.values

        # 4b. xarray: zopt.xarray.encoding takes the plan's codecs, chunk shape and masks
        encoding = zopt.xarray.encoding(ds, shards={"y": shards[1], "x": shards[2]}, plan=plan)
        ds.to_zarr(out / "xarray.zarr", zarr_format=3, encoding=encoding, consolidated=False)

    for store in ("plain.zarr", "xarray.zarr"):
        info = store_info(out / store, ["tos"])[0]
        print(f"{store}: {info.apparent_bytes} bytes for {info.logical_bytes} logical, masks {dict(info.masks)}")
        assert info.masks == planned_stored, f"{store}: masks differ from the plan"
        back = zarr.open_array(out / store, path="tos")[:]
        assert back.tobytes() == tos.values.tobytes(), f"{store}: values differ"
    assert (out / "plan.png").stat().st_size > 10_000


if __name__ == "__main__":
    main()
