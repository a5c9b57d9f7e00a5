"""Benchmark: stored bytes of the lossless default beside each lossy mode, on real data (issue 35).

    python benchmarks/lossy_vs_lossless.py [--modes abs,rel,keepbits,info] [--keepbits 10] [--rel 0.001]

Each dataset (two DEMs of matplotlib's sample data in whole metres, three iris-sample-data
fields) is written as one float32 netCDF variable ``v`` and recompressed by ``zopt.recompress``
without ``lossy`` (the lossless default: the codec menu's choice) and with ``abs:E`` (E: 0.1 % of
the values' standard deviation), ``rel:R``, ``keepbits:K`` and ``info:0.99``. Printed: stored
bytes of ``v`` (chunk files), each mode's ratio to lossless and how it was stored (its tail, or
``lossless`` when the lossless default stored fewer bytes on the sampled chunks). No lossy mode
may store more than lossless (docs/lossy.md, "Never more than lossless").
"""

from __future__ import annotations

import argparse
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np


def _datasets() -> dict[str, np.ndarray]:
    import iris_sample_data
    import matplotlib
    import netCDF4

    sample = Path(matplotlib.__file__).parent / "mpl-data" / "sample_data"

    def iris(file: str, var: str) -> np.ndarray:
        with netCDF4.Dataset(os.path.join(iris_sample_data.path, file)) as ds:
            ds.set_auto_maskandscale(False)
            return np.asarray(ds[var][...]).astype("f4")

    return {
        "matplotlib topobathy (DEM, m)": np.load(sample / "topobathy.npz")["topo"].astype("f4"),
        "matplotlib jacksboro_fault_dem (DEM, m)": np.load(sample / "jacksboro_fault_dem.npz")["elevation"].astype("f4"),
        "iris hybrid_height surface_altitude": iris("hybrid_height.nc", "surface_altitude"),
        "iris A1B air_temperature": iris("A1B_north_america.nc", "air_temperature"),
        "iris NEMO tos (1e20 fill)": iris("NEMO/nemo_1m_20150101-20150201_grid-T.nc", "tos"),
    }


def _stored(dst: Path) -> int:
    return sum(p.stat().st_size for p in (dst / "v").rglob("*") if p.is_file() and p.name != "zarr.json")


def main() -> None:
    import xarray as xr
    import zarr

    from zopt import recompress

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="abs,rel,keepbits,info", help="comma-separated lossy modes (default: all four)")
    ap.add_argument("--keepbits", type=int, default=10, help="K of keepbits:K (default 10)")
    ap.add_argument("--rel", type=float, default=0.001, help="R of rel:R (default 0.001)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    modes = args.modes.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, values in _datasets().items():
            src = Path(tmp) / "src.nc"
            dims = ("t", "y", "x")[-values.ndim:]
            fill = {"_FillValue": np.float32(1e20)} if (values == np.float32(1e20)).any() else {"_FillValue": None}
            xr.Dataset({"v": (dims, values)}).to_netcdf(src, encoding={"v": fill})
            finite = values[np.abs(values) < 1e19]
            e = float(f"{float(np.std(finite)) / 1000:.2g}")
            specs = {"abs": f"abs:{e}", "rel": f"rel:{args.rel}", "keepbits": f"keepbits:{args.keepbits}",
                     "info": "info:0.99"}
            dst = Path(tmp) / "dst.zarr"
            recompress(str(src), dst, overwrite=True)
            lossless = _stored(dst)
            cells = []
            for m in modes:
                recompress(str(src), dst, lossy=[f"v={specs[m]}"], overwrite=True)
                attrs = zarr.open_array(dst, path="v").attrs
                how = attrs["zopt_lossy"].get("tail", "--codecs") if "zopt_lossy" in attrs else "lossless"
                n = _stored(dst)
                cells.append(f"{specs[m]}: {n} ({n / lossless:.2f}×, {how})")
            rows.append((label, values.nbytes, lossless, cells))
            print(label, values.nbytes, lossless, cells, flush=True)
    print()
    print("| data | raw bytes | lossless | " + " | ".join(modes) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in modes) + " |")
    for label, raw, lossless, cells in rows:
        print(f"| {label} | {raw} | {lossless} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
