"""``--scheduler tcp://…`` on a real ``dask.distributed.LocalCluster`` with worker processes
(issue 15 items 2, 5, 6): relative paths mean the client's directory, a failed job leaves nothing
behind once it returns, and the workers close the sources the job opened."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner

from zopt import recompress
from zopt.cli.commands import main
from zopt.io.paths import PARTIAL_SUFFIX

iris_sample_data = pytest.importorskip("iris_sample_data")
distributed = pytest.importorskip("distributed")
NEMO = os.path.join(iris_sample_data.path, "NEMO", "nemo_1m_20150101-20150201_grid-T.nc")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two single-threaded worker processes whose working directory is not the test's."""
    elsewhere = tmp_path_factory.mktemp("worker-cwd")
    cwd = os.getcwd()
    os.chdir(elsewhere)
    try:
        cl = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    finally:
        os.chdir(cwd)
    with cl, distributed.Client(cl) as client:
        assert set(client.run(os.getcwd).values()) == {str(elsewhere)}
        yield cl, client, elsewhere


def test_relative_paths_are_the_clients_and_workers_close_the_source(tmp_path, cluster, monkeypatch):
    cl, client, elsewhere = cluster
    shutil.copy(NEMO, tmp_path / "nemo.nc")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["recompress", "nemo.nc", "out.zarr", "--variable", "tos", "--chunks", "y=30,x=36",
                                       "--shards", "y=90,x=108", "--scheduler", cl.scheduler_address, "--no-progress"])
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "out.zarr", path="tos")[...],
                                  xr.open_dataset(NEMO, decode_cf=False).tos.values)
    assert list(elsewhere.iterdir()) == [p for p in elsewhere.iterdir() if p.name == "dask-scratch-space"]
    from zopt.io.sources import cached_tokens

    assert all(tokens == [] for tokens in client.run(cached_tokens).values())  # closed: not locked, never stale


def test_a_failed_job_leaves_no_partial_store_once_it_returns(tmp_path, cluster):
    cl, _, _ = cluster

    def slow_then_fail(chunk_index, codec, unencoded_chunk):
        if distributed.get_worker().name == 0:
            raise RuntimeError("disk on fire")
        time.sleep(0.2)
        return True  # worker 1 is still encoding its shard (~3.6 s) when the job fails

    dst = tmp_path / "f.zarr"
    with pytest.raises(RuntimeError, match="disk on fire"):
        recompress(NEMO, dst, variables=["tos"], chunks="y=30,x=36", shards="y=90,x=108", decision=slow_then_fail,
                   scheduler=cl.scheduler_address)
    time.sleep(4)  # any task still running would have written by now
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert not os.path.exists(str(dst) + PARTIAL_SUFFIX)


def test_tasks_go_in_bounded_waves_and_the_bar_follows_the_cluster(tmp_path, cluster, monkeypatch):
    import zopt.compat.cluster

    cl, client, _ = cluster
    monkeypatch.setattr(zopt.compat.cluster, "IN_FLIGHT", 4)
    monkeypatch.setattr(zopt.compat.cluster, "WAVE", 2)
    seen = []
    submitted = []
    real = distributed.Client.compute

    def compute(self, collections, *args, **kwargs):
        submitted.append(len(collections))
        return real(self, collections, *args, **kwargs)

    monkeypatch.setattr(distributed.Client, "compute", compute)

    report = recompress(NEMO, tmp_path / "w.zarr", variables=["tos"], chunks="y=30,x=36", shards="y=30,x=108",
                        scheduler=cl.scheduler_address, progress=seen.append, menu="classic")  # the write tasks alone
    writes = [(e.done, e.total) for e in seen if e.phase == "writing"]
    # 11 x 4 shards: each one finished moved the bar
    assert report.arrays[0].units == 44 and writes == [(n, 44) for n in range(45)]
    assert submitted[0] == 4 and set(submitted[1:]) <= {1, 2} and sum(submitted) == 44  # never more than 4 in flight
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "w.zarr", path="tos")[...],
                                  xr.open_dataset(NEMO, decode_cf=False).tos.values)
    assert report.arrays[0].chunks_written == 110


def test_verify_runs_on_the_cluster_and_workers_close_what_it_opened(tmp_path, cluster, monkeypatch):
    cl, client, _ = cluster
    shutil.copy(NEMO, tmp_path / "nemo.nc")
    monkeypatch.chdir(tmp_path)
    args = ["--scheduler", cl.scheduler_address, "--no-progress"]
    result = CliRunner().invoke(main, ["recompress", "nemo.nc", "out.zarr", "--chunks", "y=30,x=36",
                                       "--shards", "y=90,x=108", "--verify", *args])
    assert result.exit_code == 0, result.output
    assert "verified out.zarr against nemo.nc" in " ".join(result.output.split())
    tos = zarr.open_array("out.zarr", path="tos", mode="r+")
    tos[0, 100, 200] = tos[0, 100, 200] + 1
    result = CliRunner().invoke(main, ["verify", "nemo.nc", "out.zarr", "tos", *args])
    assert result.exit_code == 1
    assert "tos (1 of " in result.output and "first: chunk 0.3.5 [0:1, 90:120, 180:216]" in result.output
    from zopt.io.sources import cached_tokens

    assert all(tokens == [] for tokens in client.run(cached_tokens).values())


def test_jobs_under_the_users_client_use_it_and_leave_it_open(tmp_path, cluster, monkeypatch):
    """A batch of jobs under one ``Client`` opens no client of its own per job (two connections a
    job before, ~0.05 s of a small store's 0.13 s; issue 34 G2), and never closes the user's."""
    cl, client, _ = cluster
    made = []

    class Counting(distributed.Client):
        def __init__(self, *args, **kwargs):
            made.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(distributed, "Client", Counting)
    src = tmp_path / "s.zarr"
    zarr.create_array(src, shape=(64, 64), chunks=(32, 32), dtype="f4", dimension_names=("y", "x"))[...] = 1.5
    for i in range(2):
        recompress(src, tmp_path / f"o{i}.zarr", scheduler=cl.scheduler_address)
        assert (zarr.open_array(tmp_path / f"o{i}.zarr")[...] == 1.5).all()
    assert made == [] and client.status == "running"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as other:
        recompress(src, tmp_path / "o2.zarr", scheduler=other.scheduler_address)  # another scheduler: its own client
    assert set(made) == {(other.scheduler_address,)} and client.status == "running"
