"""A source changed between two jobs in one process is read again, and no job leaves its source
open (issue 15 item 2). Real netCDF files from iris-sample-data's NEMO SST."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import xarray as xr
import zarr

from zopt import recompress
from zopt.compat.job_cache import release_job
from zopt.io import sources

iris_sample_data = pytest.importorskip("iris_sample_data")
NEMO = os.path.join(iris_sample_data.path, "NEMO", "nemo_1m_20150101-20150201_grid-T.nc")


def _open_fds_to(path: str) -> list[str]:
    target = os.path.realpath(path)
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                out.append(fd)
        except OSError:
            continue
    return out


def test_a_changed_source_recompressed_in_the_same_process_gives_the_new_values(tmp_path):
    src = tmp_path / "sst.nc"
    shutil.copy(NEMO, src)
    first = recompress(src, tmp_path / "a.zarr", variables=["tos"])
    assert first.arrays[0].chunks_written > 0
    assert not _open_fds_to(str(src))  # closed at the end of the job: another process may rewrite it
    ds = xr.open_dataset(NEMO, decode_cf=False).load()
    ds["tos"] = ds["tos"] + np.float32(1)
    ds.to_netcdf(tmp_path / "new.nc")
    os.replace(tmp_path / "new.nc", src)  # same name, same shape and size, new values
    recompress(src, tmp_path / "b.zarr", variables=["tos"])
    expected = xr.open_dataset(src, decode_cf=False)["tos"].values
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "b.zarr", path="tos")[...], expected)
    assert not np.array_equal(zarr.open_array(tmp_path / "a.zarr", path="tos")[...], expected)
    assert sources.cached_tokens() == []


def test_the_cache_is_keyed_on_the_source_identity(tmp_path):
    src = tmp_path / "sst.nc"
    shutil.copy(NEMO, src)
    a = sources.open_dataset(str(src), "t1")
    assert sources.open_dataset(str(src), "t1") is a  # one open file per job and process
    assert sources.open_dataset(str(src), "t2") is not a  # another job opens its own
    shutil.copy(NEMO, tmp_path / "copy.nc")
    os.replace(tmp_path / "copy.nc", src)
    assert sources.open_dataset(str(src), "t1") is not a  # rewritten: opened again even in the same job
    assert release_job("t1") == 2 and release_job("t2") == 1
    assert sources.cached_tokens() == [] and not _open_fds_to(str(src))


def test_threads_opening_one_source_at_once_open_it_once(tmp_path, monkeypatch):
    """Dask threads of one job asking for the same source at the same moment get one dataset,
    opened once: two concurrent opens of a netCDF file crashed the process (SIGSEGV inside
    netCDF4/HDF5, seen in ``zopt verify``) and left a second, never-closed copy."""
    import threading
    import time

    import xarray as xr

    from zopt.io import sources

    path = tmp_path / "one.nc"
    xr.Dataset({"v": ("x", [1.0, 2.0])}).to_netcdf(path)
    opened = []
    real_open = sources._open

    def slow_open(src):
        opened.append(src)
        time.sleep(0.05)  # wide enough for every thread to arrive while the first still opens
        return real_open(src)

    monkeypatch.setattr(sources, "_open", slow_open)
    results, barrier = [], threading.Barrier(8)

    def worker():
        barrier.wait()
        results.append(sources.open_dataset(str(path), "job-threads"))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert len(opened) == 1
        assert len({id(ds) for ds in results}) == 1
    finally:
        assert release_job("job-threads") == 1
