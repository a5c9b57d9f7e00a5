"""Analysis statistics describe the data, not the padding of edge chunks (issue 15, "defaults")."""

from __future__ import annotations

import os

import numpy as np
import pytest
import xarray as xr
import zarr

from zopt.planning.analysis import analyze_array

iris_sample_data = pytest.importorskip("iris_sample_data")
NEMO = os.path.join(iris_sample_data.path, "NEMO", "nemo_1m_20150101-20150201_grid-T.nc")


@pytest.mark.parametrize("sample", [None, 1 / 16])
def test_edge_chunk_padding_is_not_counted_as_nan_or_zero(tmp_path, sample):
    lat = xr.open_dataset(NEMO, decode_cf=False).nav_lat.values.astype("f4") + 1000  # 330 × 360, no NaN, no zero
    assert not np.isnan(lat).any() and not (lat == 0).any()
    g = zarr.open_group(tmp_path / "s.zarr", mode="w")
    g.create_array("lat", data=lat, chunks=(100, 100), fill_value=np.nan, compressors=None)
    ds = analyze_array(tmp_path / "s.zarr", "lat", sample=sample, read="full")
    assert ds["nan_fraction"].shape == (4, 4)
    assert float(ds["nan_fraction"].max()) == 0.0
    assert float(ds["zero_fraction"].max()) == 0.0
