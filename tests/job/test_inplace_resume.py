"""``recompress --in-place`` resumes: a real process SIGKILLed mid-run, then the same command
again skips the shards the killed run finished (its journal markers match the files) and
rewrites the rest; the store ends byte for byte as after one uninterrupted run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr
from sigkill import kill_at_replace

from zopt import recompress, recompress_in_place
from zopt.store.journal import IN_PLACE_DIR, InPlaceJournal

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])}
SHAPE = (160, 160)
N_SHARDS = 25  # (160 / 32) ** 2


def _values() -> np.ndarray:
    rng = np.random.default_rng(5)
    return np.round(np.cumsum(rng.standard_normal(SHAPE), axis=1), 1).astype("f4")


def _store(tmp_path: Path, name: str) -> Path:
    """A store written fast (mask 0, fixed slots): what --in-place re-decides."""
    src = tmp_path / "src.zarr"
    if not src.exists():
        zarr.open_group(src, mode="w").create_array("v", shape=SHAPE, chunks=SHAPE, dtype="f4",
                                                    dimension_names=("y", "x"))[:] = _values()
    dst = tmp_path / name
    recompress(src, dst, chunks=(16, 16), shards=(32, 32), layout="fixed-slot", decision="never")
    return dst


def _files(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def _shard_ids(store: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(store)): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in (store / "v" / "c").rglob("*") if p.is_file()}


def _kill_cli_at(call: int, store: Path, *args: str) -> None:
    """``zopt recompress STORE --in-place`` in a fresh interpreter that SIGKILLs itself at its
    ``call``-th os.replace (a shard's rename or a marker's, alternately)."""
    script = kill_at_replace(call) + textwrap.dedent(f"""
        import sys
        from zopt.cli.commands import main
        sys.exit(main([{str(store)!r}, "--in-place", "--no-progress", "--scheduler", "synchronous", *{list(args)!r}]))
    """).replace("main([", "main(['recompress', ")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=ENV)
    assert proc.returncode == -9, proc.stderr[-2000:]


@pytest.fixture
def counted(monkeypatch):
    """How many shards the in-process runs encode (calls of the journal's task wrapper)."""
    calls = []
    real = InPlaceJournal.task

    def task(self, write, path, marker, *args):
        calls.append(path)
        return real(self, write, path, marker, *args)

    monkeypatch.setattr(InPlaceJournal, "task", task)
    return calls


@pytest.mark.parametrize("call", [7, 30, 46])  # early (a shard's rename), half way (a marker's), late (a shard's)
def test_a_killed_in_place_run_resumes_with_fewer_shards(tmp_path, call, counted):
    ref = _store(tmp_path, "ref.zarr")
    dst = tmp_path / "d.zarr"
    shutil.copytree(ref, dst)
    report = recompress_in_place(ref, decision="always", scheduler="synchronous", grace=0)
    assert len(counted) == N_SHARDS and report.arrays[0].units_resumed == 0
    expected = _files(ref)
    assert not (ref / IN_PLACE_DIR).exists()  # a completed run leaves no journal

    _kill_cli_at(call, dst, "--decision", "always")
    assert (dst / IN_PLACE_DIR).is_dir()  # the journal survives the kill
    journal = InPlaceJournal.start(str(dst), ["v"], "always", None)
    finished = len(journal.done("v"))
    assert finished == (call - 1) // 2  # every shard renamed and marked before the kill
    before = _shard_ids(dst)
    counted.clear()
    report = recompress_in_place(dst, decision="always", scheduler="synchronous", grace=0)
    assert len(counted) == N_SHARDS - finished  # only the unfinished shards are encoded again
    assert report.arrays[0].units_resumed == finished
    assert report.arrays[0].chunks_written == 100 and sum(report.arrays[0].masks.values()) == 100
    skipped = set(before) - {os.path.relpath(c, dst) for c in counted}
    assert len(skipped) == finished  # (phase B still drops their holes: not compared by inode)
    assert _files(dst) == expected  # byte for byte as one uninterrupted run (no journal, no temp files)
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], _values())


def test_another_decision_or_a_touched_shard_is_redone(tmp_path, counted):
    dst = _store(tmp_path, "d.zarr")
    _kill_cli_at(21, dst, "--decision", "always")  # 10 shards done and marked
    counted.clear()
    recompress_in_place(dst, decision="never", scheduler="synchronous", grace=0)  # another job: starts over
    assert len(counted) == N_SHARDS
    _kill_cli_at(21, dst, "--decision", "always")
    shard = next(iter(InPlaceJournal.start(str(dst), ["v"], "always", None).done("v")))
    path = dst / "v" / "c" / shard.replace(".", "/")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1000))  # changed since its marker
    counted.clear()
    report = recompress_in_place(dst, decision="always", scheduler="synchronous", grace=0)
    assert len(counted) == N_SHARDS - 9 and report.arrays[0].units_resumed == 9
    assert not (dst / IN_PLACE_DIR).exists()
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], _values())
