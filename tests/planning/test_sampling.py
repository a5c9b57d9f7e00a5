"""Where the analysis samples a chunk: windows spread through it, not its two ends, so the first
and last rows of a lat-lon field (land, ice) weigh no more than any other (issue 36)."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.codecs import BytesCodec

from zopt.planning.analysis import analyze_array
from zopt.planning.plan import policy_masks

iris_sample_data = pytest.importorskip("iris_sample_data")


def _estimated_ratio(ds: xr.Dataset) -> float:
    """raw / estimated stored bytes of the stored chunks, each with its smallest mask (what
    ``zopt analyze`` prints as est. ratio)."""
    masks, _ = policy_masks(ds, "smallest")
    stored = ~ds["is_fill"].values
    sizes = np.take_along_axis(np.nan_to_num(ds["encoded_bytes"].values, nan=0), masks[..., None].astype(np.int64), -1)[..., 0]
    return float(ds["raw_bytes"].values[stored].sum() / sizes[stored].sum())


@pytest.fixture(scope="module")
def nemo(tmp_path_factory) -> str:
    """The NEMO sea surface temperature of iris-sample-data, 3 months of (330, 360), NaN over
    land (Antarctica fills its first rows), stored raw one month per chunk (475 KB), as
    ``zopt analyze`` copies a netCDF file."""
    files = sorted(glob.glob(os.path.join(iris_sample_data.path, "NEMO", "nemo_1m_*_grid-T.nc")))
    tos = np.concatenate([xr.open_dataset(f)["tos"].values for f in files]).astype("f4")
    path = str(tmp_path_factory.mktemp("nemo") / "tos.zarr")
    zarr.open_group(path, mode="w").create_array(
        "tos", shape=tos.shape, chunks=(1, 330, 360), dtype="f4", fill_value=np.nan, serializer=BytesCodec(),
        compressors=None, dimension_names=("time", "y", "x"))[:] = tos
    return path


def test_the_sampled_estimate_of_a_field_with_land_rows_is_near_the_full_analysis(nemo):
    full = analyze_array(nemo, "tos", sample=None)
    sampled = analyze_array(nemo, "tos")
    ends = analyze_array(nemo, "tos", windows=2, placement="ends")  # zopt 0.1's sample
    assert sampled.attrs["placement"] == "spread" and sampled.attrs["windows"] == 12 and sampled.attrs["read"] == "windows"
    exact = _estimated_ratio(full)
    assert _estimated_ratio(sampled) == pytest.approx(exact, rel=0.1)
    assert _estimated_ratio(ends) > 2 * exact  # the land rows at both ends: "5.87" for 2.40
    # the plan from the sample chooses what the full analysis does: the same stored bytes
    sizes = np.nan_to_num(full["encoded_bytes"].values, nan=np.inf)

    def stored(ds):
        m, _ = policy_masks(ds, "compress_if_smaller")
        return np.take_along_axis(sizes, m[..., None].astype(np.int64), -1).sum()

    assert stored(sampled) <= 1.01 * stored(full)


def test_window_count_and_placement_are_checked(nemo):
    with pytest.raises(ValueError, match=r"placement: 'middle' is not one of \['spread', 'ends'\]"):
        analyze_array(nemo, "tos", placement="middle")
    with pytest.raises(ValueError, match=r"windows: 0 must be an integer >= 1"):
        analyze_array(nemo, "tos", windows=0)
    with pytest.raises(ValueError, match=r"min_window: 100 must be a positive multiple of 64 bytes"):
        analyze_array(nemo, "tos", min_window=100)
