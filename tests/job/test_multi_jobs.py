"""Many sources, one store, as real jobs (issue 30 item 1): on a ``LocalCluster`` with worker
processes (the per-file metadata read there, not on the client), and SIGKILLed then resumed."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from zopt import recompress, verify
from zopt.io import files as ncfiles
from zopt.io import multi
from zopt.io.paths import PARTIAL_SUFFIX
from zopt.store.journal import JOURNAL_DIR, ResumeMismatchError

sys.path.insert(0, str(Path(__file__).parents[1]))
from test_multi import raw_concat, write_files  # noqa: E402

distributed = pytest.importorskip("distributed")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
            distributed.Client(cl) as client:
        yield cl, client


def test_70_files_on_worker_processes_read_their_metadata_there(tmp_path, cluster, monkeypatch):
    cl, client = cluster
    files = write_files(tmp_path / "nc", 70)  # two summary tasks (BATCH 64)

    def not_here(*args, **kwargs):
        raise AssertionError("a file's metadata was read by the client")

    monkeypatch.setattr(multi, "_summary", not_here)  # the client's copy; the workers have their own
    dst = tmp_path / "out.zarr"
    report = recompress(str(tmp_path / "nc" / "*.nc"), dst, concat_dim="time", chunks="time=6", shards="time=60",
                        scheduler=cl.scheduler_address)
    assert report.notes[0].startswith("src: 70 files")
    np.testing.assert_array_equal(zarr.open_array(dst, path="sst")[...], raw_concat(files, "sst"))
    np.testing.assert_array_equal(zarr.open_array(dst, path="count")[...], np.arange(210, dtype="i4") * 10)
    assert all(n == 0 for n in client.run(ncfiles.open_count).values())  # the workers closed every file
    monkeypatch.undo()
    assert verify(str(tmp_path / "nc" / "*.nc"), dst, concat_dim="time", scheduler=cl.scheduler_address).ok


def _markers(partial: Path) -> set[str]:
    done = partial / JOURNAL_DIR / "done"
    return {str(p.relative_to(done)) for p in done.rglob("*") if p.is_file() and not p.name.startswith(".")}


def test_a_sigkilled_multi_file_job_resumes_and_refuses_a_changed_file(tmp_path):
    files = write_files(tmp_path / "nc", 40)
    dst = tmp_path / "out.zarr"
    partial = Path(str(dst) + PARTIAL_SUFFIX)
    cmd = [sys.executable, "-m", "zopt", "recompress", str(tmp_path / "nc" / "*.nc"), str(dst),
           "--concat-dim", "time", "--chunks", "time=2", "--shards", "time=4", "--scheduler", "synchronous",
           "--no-progress"]  # 30 shards of sst, 30 of count
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    at = random.Random(3).randint(5, 20)
    try:
        while proc.poll() is None and len(_markers(partial)) < at:
            time.sleep(0.002)
        assert proc.poll() is None, "the job finished before the kill"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    before = _markers(partial)
    assert 0 < len(before) < 60 and not dst.exists()
    # one file changed since: the journal's fingerprint holds every file's identity
    st = os.stat(files[17])
    os.utime(files[17], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(ResumeMismatchError, match="the source changed"):
        recompress(str(tmp_path / "nc" / "*.nc"), dst, concat_dim="time", chunks="time=2", shards="time=4")
    assert _markers(partial) == before  # nothing touched
    os.utime(files[17], ns=(st.st_atime_ns, st.st_mtime_ns))
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "resumed" in out.stdout and not partial.exists()
    np.testing.assert_array_equal(zarr.open_array(dst, path="sst")[...], raw_concat(files, "sst"))
    np.testing.assert_array_equal(zarr.open_array(dst, path="count")[...], np.arange(120, dtype="i4") * 10)


def test_a_worker_killed_mid_job_leaves_a_correct_result(tmp_path):
    import threading

    files = write_files(tmp_path / "nc", 30)
    dst = tmp_path / "out.zarr"
    done = Path(str(dst) + PARTIAL_SUFFIX) / JOURNAL_DIR / "done" / "sst"

    def slow(chunk_index, codec, unencoded_chunk):
        time.sleep(0.05)  # 30 shards of sst: a few seconds on two workers
        return True

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
            distributed.Client(cl) as client:
        def run():
            return recompress(str(tmp_path / "nc" / "*.nc"), dst, concat_dim="time", chunks="time=3", shards="time=3",
                              decision=slow, scheduler=cl.scheduler_address)

        outcome: dict = {}

        def attempt():
            try:
                outcome["report"] = run()
            except Exception as exc:  # noqa: BLE001 - inspected below
                outcome["report"] = exc

        pids = client.run(os.getpid)
        job = threading.Thread(target=attempt)
        job.start()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (done.exists() and len(list(done.rglob("*"))) >= 4):
            time.sleep(0.01)
        assert job.is_alive() and 4 <= len(list(done.rglob("*"))) < 30  # mid-job
        os.kill(sorted(pids.values())[0], signal.SIGKILL)
        job.join(180)
        assert not job.is_alive()
        report = outcome["report"]
        if isinstance(report, BaseException):  # failed: says how to resume, and resuming finishes the job
            assert "run the same command again to resume" in " ".join(getattr(report, "__notes__", [])), report
            report = run()
    np.testing.assert_array_equal(zarr.open_array(dst, path="sst")[...], raw_concat(files, "sst"))
    assert not Path(str(dst) + PARTIAL_SUFFIX).exists()
