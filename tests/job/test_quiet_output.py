"""What a job leaves for the user to read: no third party's internal warnings, no work-in-progress
commit title in an Icechunk branch's history."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zopt

icechunk = pytest.importorskip("icechunk")

UNSAFE = "not safe for concurrent commits"


@pytest.fixture
def src(tmp_path):
    zarr.open_group(tmp_path / "s.zarr", mode="w").create_array(
        "t", shape=(40, 40), chunks=(10, 40), dtype="f4", dimension_names=("y", "x"))[:] = np.arange(1600, dtype="f4").reshape(40, 40)
    return tmp_path / "s.zarr"


def test_a_job_on_a_local_repository_prints_no_icechunk_warning(src, tmp_path, capfd, monkeypatch):
    monkeypatch.delenv("ICECHUNK_LOG", raising=False)
    icechunk.set_logs_filter(None)  # icechunk's default (warnings shown), whatever an earlier test set
    try:
        icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "r.icechunk")))
        made = capfd.readouterr()
        assert UNSAFE in made.out + made.err  # icechunk itself warns (to the process's stdout), as the user's call does
        zopt.recompress(src, f"icechunk://{tmp_path / 'r.icechunk'}", progress=False)
        job = capfd.readouterr()
        assert UNSAFE not in job.out + job.err  # zopt's own calls do not
        icechunk.local_filesystem_storage(str(tmp_path / "r.icechunk"))
        after = capfd.readouterr()
        assert UNSAFE in after.out + after.err  # and icechunk's filter is back as it was
    finally:
        icechunk.set_logs_filter(None)


def test_the_published_history_has_no_work_in_progress_title(src, tmp_path, monkeypatch):
    from zopt.job import icechunk_target

    monkeypatch.setattr(icechunk_target, "WAVE_UNITS", 1)  # icechunk 1.1 keeps one commit per wave
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "r.icechunk")))
    zopt.recompress(src, f"icechunk://{tmp_path / 'r.icechunk'}", chunks="y=10", shards="y=20", progress=False)
    titles = [s.message for s in repo.ancestry(branch="main")]
    assert titles[-1] == "Repository initialized" and titles[0].startswith("zopt recompress ")
    assert titles[0].endswith("→ icechunk://" + str(tmp_path / "r.icechunk") + "@main")
    assert not [t for t in titles if "in progress" in t]


def _slow_exit() -> None:
    import atexit
    import time

    atexit.register(time.sleep, 6)  # the worker's interpreter takes longer than the nanny waits


def _close_with_a_slow_worker(quiet: bool) -> None:
    from distributed import Client, LocalCluster

    from zopt.compat.cluster import close_cluster

    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0")
    with Client(cluster) as client:
        client.run(_slow_exit)
    if quiet:
        close_cluster(cluster)
    else:
        cluster.close()


def test_closing_a_local_cluster_logs_no_worker_killing_warning(caplog):
    pytest.importorskip("distributed")

    def killing() -> list[str]:
        return [r.getMessage() for r in caplog.records if "still alive after" in r.getMessage()]

    _close_with_a_slow_worker(quiet=False)
    assert killing()  # what distributed logs (to stderr, outside pytest) on its own
    caplog.clear()
    _close_with_a_slow_worker(quiet=True)
    assert not killing()
