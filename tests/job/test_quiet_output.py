"""What a job leaves for the user to read: no third party's internal warnings, no work-in-progress
commit title in an Icechunk branch's history."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

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


def test_a_job_on_a_local_repository_prints_no_icechunk_warning(src, tmp_path):
    """In a process of its own: icechunk's log filter and what it has already warned about are
    process state that earlier tests change."""
    repo = tmp_path / "r.icechunk"
    script = textwrap.dedent(f"""
        import os, sys
        import icechunk, zopt
        def mark(word):
            sys.stdout.flush(); os.write(1, f"\\n@@{{word}}@@\\n".encode())
        icechunk.Repository.create(icechunk.local_filesystem_storage({str(repo)!r}))
        mark("job")
        zopt.recompress({str(src)!r}, "icechunk://" + {str(repo)!r}, progress=False)
        mark("after")
        icechunk.local_filesystem_storage({str(repo)!r})
        mark("end")
    """)
    env = {k: v for k, v in os.environ.items() if k != "ICECHUNK_LOG"}
    # one pipe for both: icechunk 1.x logs to stdout, 2.x to stderr, in order with the marks
    proc = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout
    out = proc.stdout
    made, rest = out.split("@@job@@", 1)
    job, after = rest.split("@@after@@", 1)
    assert UNSAFE in made  # icechunk itself warns (to the process's stdout), as the user's call does
    assert UNSAFE not in job  # zopt's own calls do not
    assert UNSAFE in after  # and icechunk's filter is back as it was


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


def test_a_job_shows_no_numcodecs_warning_and_leaves_warnings_as_they_were(tmp_path):
    """zarr 3.1-3.3 warns each time an array with a ``numcodecs.*`` codec is made; a job's readers
    line says who reads its chains, so the job shows none, and zarr warns again after the job."""
    script = textwrap.dedent(f"""
        import warnings
        import numpy as np, zarr, zopt
        from zarr.codecs.numcodecs import PCodec
        def plain_warns(path):
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                zarr.create_array(path, shape=(4,), dtype="f4", serializer=PCodec(level=8), compressors=None)
            return any("Numcodecs codecs" in str(w.message) for w in seen)
        before = plain_warns({str(tmp_path / "before.zarr")!r})
        zarr.open_group({str(tmp_path / "s.zarr")!r}, mode="w").create_array(
            "t", shape=(64, 64), chunks=(16, 64), dtype="f4", dimension_names=("y", "x"))[:] = (
            np.random.default_rng(0).normal(size=(64, 64)).astype("f4"))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            zopt.recompress({str(tmp_path / "s.zarr")!r}, {str(tmp_path / "d.zarr")!r}, progress=False)
        chain = zarr.open_array({str(tmp_path / "d.zarr")!r}, path="t").metadata.to_dict()["codecs"]
        print("before", before, "job", sum("Numcodecs codecs" in str(w.message) for w in seen),
              "after", plain_warns({str(tmp_path / "after.zarr")!r}), "numcodecs-chain", "numcodecs." in str(chain))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    words = proc.stdout.split()
    got = dict(zip(words[::2], words[1::2], strict=True))
    if got["before"] == "False":
        pytest.skip("this zarr does not warn about numcodecs codecs")
    assert got["numcodecs-chain"] == "True"  # the job wrote a chain zarr warns about
    assert got["job"] == "0" and got["after"] == "True"
