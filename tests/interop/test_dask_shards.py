"""Sharded writes from Dask (issue 36): Dask chunks that do not align with the shards make
xarray's ``to_zarr`` refuse (``safe_chunks``), and with ``safe_chunks=False`` several tasks write
into one shard at once and lose each other's chunks (dask#12583, zarr-python#3682).
``ds.zopt.to_zarr(..., shards=...)`` rechunks to whole shards: one task per shard, the values
intact, with the codec menu's chain. Its peak memory is measured in ``benchmarks/dask_shards.py``
(docs/benchmarks.md)."""

from __future__ import annotations

import json

import dask.array as da
import numpy as np
import pytest
import xarray as xr

import zopt.xarray as zx
from zopt.planning.candidates import menu_for
from zopt.planning.readers import DEFAULT_READERS

SHAPE, DASK_CHUNKS, INNER, SHARD = (1200, 1200), (130, 170), (100, 100), (300, 300)


def _dataset() -> tuple[xr.Dataset, np.ndarray]:
    a = np.random.default_rng(0).random(SHAPE, dtype="f4")
    return xr.Dataset({"v": (("y", "x"), da.from_array(a, chunks=DASK_CHUNKS))}), a


def test_chunks_that_straddle_shards_corrupt_xarray_s_unsafe_write_and_not_zopt_s(tmp_path):
    ds, a = _dataset()
    enc = {"v": {"chunks": INNER, "shards": SHARD}}
    with pytest.raises(ValueError, match="would overlap multiple Dask chunks"):  # xarray's safe_chunks
        ds.to_zarr(tmp_path / "safe.zarr", zarr_format=3, encoding=enc, consolidated=False)
    corrupt = 0
    for trial in range(3):  # 5 of 5 here; one is enough to show it
        where = tmp_path / f"unsafe{trial}.zarr"
        ds.to_zarr(where, zarr_format=3, encoding=enc, consolidated=False, safe_chunks=False)
        corrupt += not np.array_equal(xr.open_zarr(where, consolidated=False)["v"].values, a)
        if corrupt:
            break
    assert corrupt, "safe_chunks=False wrote intact three times: zarr-python#3682 fixed? This half can then go"
    for trial in range(3):
        where = tmp_path / f"zopt{trial}.zarr"
        ds.zopt.to_zarr(where, chunks={"y": 100, "x": 100}, shards={"y": 300, "x": 300}, consolidated=False)
        assert xr.open_zarr(where, consolidated=False)["v"].values.tobytes() == a.tobytes()
    # the menu's chain (plain zarr-python reads it), inside sharding_indexed with zopt's inner chunks
    meta = json.loads((tmp_path / "zopt0.zarr" / "v" / "zarr.json").read_text())
    (shard,) = meta["codecs"]
    assert shard["name"] == "sharding_indexed" and shard["configuration"]["chunk_shape"] == list(INNER)
    inner = [{k: v for k, v in c.items() if k in ("name", "configuration")} for c in shard["configuration"]["codecs"]]
    portable = [json.loads(json.dumps(c)) for c in menu_for("f4", readers=DEFAULT_READERS).values()]
    assert any([c["name"] for c in inner] == [c["name"] for c in want] for want in portable), inner


def test_each_write_task_holds_exactly_one_shard():
    """The bound on memory: after ``dask_chunks`` every Dask chunk of a sharded variable is one
    shard (edge shards clipped), so a task reads, encodes and writes one shard and no two tasks
    touch the same shard file."""
    ds, _ = _dataset()
    ds = ds.assign(w=(("y", "z"), da.zeros((1200, 1000), chunks=(77, 1000), dtype="i2")))
    enc = zx.encoding(ds, chunks={"y": 100, "x": 100, "z": 100}, shards={"y": 300, "x": 300, "z": 300})
    out = zx.dask_chunks(ds, enc)
    assert out["v"].chunks == ((300,) * 4, (300,) * 4)
    assert out["w"].chunks == ((300,) * 4, (300, 300, 300, 100))  # the edge shard: what is left
    assert ds["v"].chunks == ((130,) * 9 + (30,), (170,) * 7 + (10,))  # the Dataset given is unchanged
