"""A worker process SIGKILLed mid-job on a real ``dask.distributed.LocalCluster``: the job either
finishes correctly (Dask reruns the lost tasks; the shard tasks are idempotent) or fails with a
message saying how to resume, and the same call resumes to a correct result."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
import zarr

from zopt import recompress
from zopt.io.paths import PARTIAL_SUFFIX
from zopt.store.journal import JOURNAL_DIR

distributed = pytest.importorskip("distributed")


def test_a_worker_killed_mid_job_leaves_a_correct_result(tmp_path):
    rng = np.random.default_rng(11)
    data = (rng.normal(size=(240, 240)) * 10).astype("f4")
    zarr.create_array(str(tmp_path / "src.zarr"), shape=data.shape, chunks=(60, 60), dtype="f4")[...] = data
    dst = tmp_path / "dst.zarr"
    done = tmp_path / ("dst.zarr" + PARTIAL_SUFFIX) / JOURNAL_DIR / "done" / "@root"

    def slow(chunk_index, codec, unencoded_chunk):
        time.sleep(0.02)  # 36 shards of 4 chunks: ~3 s of work on two workers
        return True

    def run():
        return recompress(tmp_path / "src.zarr", dst, chunks=(20, 20), shards=(40, 40), decision=slow,
                          scheduler=cl.scheduler_address)

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
            distributed.Client(cl) as client:
        pids = client.run(os.getpid)
        outcome: dict = {}
        job = threading.Thread(target=lambda: outcome.update(report=_attempt(run)))
        job.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (done.exists() and len(os.listdir(done)) >= 6):
            time.sleep(0.01)
        victim = sorted(pids.values())[0]
        os.kill(victim, signal.SIGKILL)
        job.join(120)
        assert not job.is_alive()
        report = outcome["report"]
        if isinstance(report, BaseException):  # failed: says how to resume, and resuming finishes the job
            assert "run the same command again to resume" in " ".join(getattr(report, "__notes__", []))
            report = run()
            assert report.arrays[0].units_resumed >= 6
        assert client.run(os.getpid) and victim not in client.run(os.getpid).values()
    out = zarr.open_array(str(dst), mode="r")[...]
    assert out.view("u4").tobytes() == data.view("u4").tobytes()
    assert report.arrays[0].chunks_written == 144 and sum(report.arrays[0].masks.values()) == 144
    assert not (tmp_path / ("dst.zarr" + PARTIAL_SUFFIX)).exists()


def _attempt(run):
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return exc
