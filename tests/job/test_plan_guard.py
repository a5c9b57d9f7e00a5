"""A plan made on a store zopt (or zarr) already wrote must not make it worse without a word: an array
the plan would store larger, or make readable by zopt alone, keeps the source's chain unless forced."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zopt
from zopt.planning.readers import store_arrays


@pytest.fixture
def source(tmp_path):
    """A Zarr v3 store plain zarr-python reads (its default zstd), and a plan made on it."""
    t = np.round(20 + 10 * np.sin(np.linspace(0, 12, 24 * 30 * 40)), 2).astype("f4").reshape(24, 30, 40)
    zarr.open_group(tmp_path / "src.zarr", mode="w").create_array(
        "t", shape=t.shape, chunks=(6, 30, 40), dtype="f4", dimension_names=("time", "y", "x"))[:] = t
    plan = zopt.plan(tmp_path / "src.zarr", policy="smallest", output=tmp_path / "plan.zarr", progress=None)
    assert plan.arrays["t"].chain is None  # masks for zopt's conditional codec
    return tmp_path, t


def _codec_names(store) -> list[str]:
    codecs, _ = store_arrays(store)["t"]
    return [c["name"] for c in codecs[0]["configuration"]["codecs"]] if codecs[0]["name"] == "sharding_indexed" \
        else [c["name"] for c in codecs]


def test_a_plan_that_narrows_the_readers_keeps_the_sources_chain_and_says_so(source):
    tmp, t = source
    report = zopt.recompress(tmp / "src.zarr", tmp / "kept.zarr", plan=tmp / "plan.zarr", progress=False)
    assert "conditional" not in _codec_names(tmp / "kept.zarr")  # zarr's own zstd, as in the source
    assert _codec_names(tmp / "kept.zarr") == [n for n in _codec_names(tmp / "src.zarr") if n != "crc32c"]
    note = next(n for n in report.notes if n.startswith("plan: not applied"))
    assert "t (" in note and "zopt-only: conditional" in note and "plan_force" in note
    assert report.readers.startswith("readers: any Zarr v3 reader")
    np.testing.assert_array_equal(zarr.open_array(tmp / "kept.zarr", path="t")[...], t)


def test_plan_force_applies_it_and_still_says_so(source):
    tmp, t = source
    report = zopt.recompress(tmp / "src.zarr", tmp / "forced.zarr", plan=tmp / "plan.zarr", plan_force=True,
                             progress=False)
    assert "conditional" in _codec_names(tmp / "forced.zarr")
    assert any(n.startswith("plan: applied as forced") and "t (" in n for n in report.notes)
    np.testing.assert_array_equal(zarr.open_array(tmp / "forced.zarr", path="t")[...], t)


def test_plan_force_without_a_plan_is_refused(source):
    tmp, _ = source
    with pytest.raises(ValueError, match="plan_force"):
        zopt.recompress(tmp / "src.zarr", tmp / "o.zarr", plan_force=True, progress=False)
    assert not (tmp / "o.zarr").exists()
