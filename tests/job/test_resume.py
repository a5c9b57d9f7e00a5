"""Resumable recompress jobs: real processes SIGKILLed at random points, then the same command again.

The second run must skip every shard the journal marks finished (their files keep their inode:
not rewritten), rewrite all others (a shard torn by the kill included), and publish a store that
reads back bit for bit."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from zopt import recompress
from zopt.io.paths import PARTIAL_SUFFIX
from zopt.store.journal import JOURNAL_DIR, Journal, ResumeMismatchError, remove_temporaries

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])}
SHAPE = (480, 480)


def _source(path: Path, kind: str) -> Path:
    rng = np.random.default_rng(7)
    data = (rng.normal(size=SHAPE) * 100).astype("f4")
    data[rng.random(SHAPE) < 0.01] = np.nan  # NaNs compared by bits below
    if kind == "root":
        a = zarr.create_array(str(path), shape=SHAPE, chunks=(60, 60), dtype="f4", dimension_names=("y", "x"))
        a[...] = data
    else:  # a v3 group with two arrays and attributes
        g = zarr.create_group(str(path), attributes={"title": "resume"})
        for name, d in (("a", data), ("b", data[::-1].copy())):
            a = g.create_array(name, shape=SHAPE, chunks=(60, 60), dtype="f4", dimension_names=("y", "x"))
            a[...] = d
    return path


def _cmd(src: Path, dst: Path, layout: str) -> list[str]:
    cmd = [sys.executable, "-m", "zopt", "recompress", str(src), str(dst), "--scheduler", "synchronous",
           "--no-progress"]
    if layout == "unsharded":
        return [*cmd, "--chunks", "y=60,x=60", "--shards", "y=60,x=60"]  # shards equal to chunks: unsharded, 64 chunks
    cmd += ["--chunks", "y=20,x=20", "--shards", "y=40,x=40"]  # 144 shards of 4 inner chunks
    return [*cmd, "--layout", "fixed-slot", "--slot-parts", "2"] if layout == "fixed-slot" else cmd


def _markers(partial: Path) -> set[str]:
    done = partial / JOURNAL_DIR / "done"
    return {str(p.relative_to(done)) for p in done.rglob("*") if p.is_file() and not p.name.startswith(".")}


def _shard_inodes(root: Path) -> dict[str, tuple[int, int]]:
    """Each shard (chunk) file's identity: inode and modification time, both changed by a rewrite."""
    return {str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_mtime_ns) for p in root.rglob("c/**/*") if p.is_file()}


def _kill_after(cmd: list[str], partial: Path, at: int, rng: random.Random) -> bool:
    """Run ``cmd`` and SIGKILL it once ``at`` shards are marked, a random few ms later (mid-write).
    Returns False if the job finished first."""
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while proc.poll() is None:
            if len(_markers(partial)) >= at:
                time.sleep(rng.random() * 0.004)
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return True
            time.sleep(0.001)
        return False
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _assert_same(src: Path, dst: Path, names: list[str]) -> None:
    for name in names:
        a = zarr.open_array(str(src), path=name, mode="r")[...]
        b = zarr.open_array(str(dst), path=name, mode="r")[...]
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a.view("u4"), b.view("u4")), name  # NaN payloads included


@pytest.mark.parametrize("kind,layout", [("root", "compact"), ("group", "fixed-slot"), ("group", "unsharded")])
def test_sigkilled_job_resumes_and_writes_only_unfinished_shards(tmp_path, kind, layout):
    src = _source(tmp_path / "src.zarr", kind)
    dst = tmp_path / "dst.zarr"
    partial = Path(str(dst) + PARTIAL_SUFFIX)
    names = [""] if kind == "root" else ["a", "b"]
    total = (144 if layout != "unsharded" else 64) * len(names)
    rng = random.Random(f"{kind}-{layout}")
    cmd = _cmd(src, dst, layout)
    killed_runs = 0
    for _ in range(2):  # kills at random points: the second one kills a resumed run
        at = len(_markers(partial)) + rng.randint(1, total // 4) if partial.exists() else rng.randint(1, total // 3)
        if not _kill_after(cmd, partial, at, rng):
            break
        killed_runs += 1
        assert not dst.exists() and (partial / JOURNAL_DIR / "job.json").exists()
    assert killed_runs >= 1
    before = _markers(partial)
    inodes = _shard_inodes(partial)
    assert 0 < len(before) < total
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "resumed" in out.stdout
    after = _shard_inodes(dst)
    kept = {k for k, ino in after.items() if inodes.get(k) == ino}
    rewritten = set(after) - kept
    # every marked shard kept its file, every other shard was written by the second run — except a
    # shard a killed run had finalized but not yet marked: its finalize finds the same index and
    # leaves the file (zopt.store.shards.finalize_slots; at most one per killed run, the scheduler being synchronous)
    assert len(before) <= len(kept) <= len(before) + (killed_runs if layout == "fixed-slot" else 0)
    assert len(kept) + len(rewritten) == total
    # nothing temporary published: zopt's own temporaries, nor zarr LocalStore's ``*.<hex>.partial``
    # of a chunk write the kill interrupted (found on zarr 3.4: the resumed job published one)
    assert not partial.exists() and not any(JOURNAL_DIR in str(p) or ".zopt-" in p.name or p.name.endswith(".partial")
                                            for p in dst.rglob("*"))
    _assert_same(src, dst, names)


def test_resuming_after_90_percent_rewrites_about_10_percent(tmp_path):
    src = _source(tmp_path / "src.zarr", "root")
    dst = tmp_path / "dst.zarr"
    partial = Path(str(dst) + PARTIAL_SUFFIX)
    cmd = _cmd(src, dst, "compact")
    assert _kill_after(cmd, partial, 130, random.Random(1))  # 130 of 144 shards
    before = _markers(partial)
    inodes = _shard_inodes(partial)
    assert subprocess.run(cmd, env=ENV, capture_output=True).returncode == 0
    rewritten = [k for k, ino in _shard_inodes(dst).items() if inodes.get(k) != ino]
    assert len(before) >= 130 and len(rewritten) == 144 - len(before) <= 14
    _assert_same(src, dst, [""])


def test_resume_refuses_other_options_or_a_changed_source_in_one_line(tmp_path):
    src = _source(tmp_path / "src.zarr", "group")
    dst = tmp_path / "dst.zarr"
    partial = Path(str(dst) + PARTIAL_SUFFIX)
    cmd = _cmd(src, dst, "compact")
    assert _kill_after(cmd, partial, 20, random.Random(2))
    before = _markers(partial)
    other = [c if c != "y=40,x=40" else "y=80,x=80" for c in cmd]
    out = subprocess.run(other, env=ENV, capture_output=True, text=True)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    line = [ln for ln in out.stderr.splitlines() if "resume:" in ln]
    assert line and "shards: y=40,x=40 → y=80,x=80" in line[0] and "delete" in line[0]
    assert _markers(partial) == before  # nothing touched
    meta = json.loads((src / "zarr.json").read_text())
    meta["attributes"]["title"] = "changed"
    (src / "zarr.json").write_text(json.dumps(meta))
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    assert out.returncode != 0 and "the source changed" in out.stderr and "Traceback" not in out.stderr
    with pytest.raises(ResumeMismatchError, match="the source changed"):
        recompress(src, dst, chunks="y=20,x=20", shards="y=40,x=40", scheduler="synchronous")
    assert _markers(partial) == before


def test_a_marker_that_is_unreadable_means_the_shard_is_redone(tmp_path):
    src = _source(tmp_path / "src.zarr", "root")
    dst = tmp_path / "dst.zarr"
    partial = Path(str(dst) + PARTIAL_SUFFIX)
    cmd = _cmd(src, dst, "compact")
    assert _kill_after(cmd, partial, 30, random.Random(3))
    journal = Journal(partial)
    done = journal.done("")
    victim = sorted(done)[0]
    Path(journal.marker("", map(int, victim.split(".")))).write_bytes(b'{"masks": {"1": ')  # torn
    shard = partial / "c" / victim.replace(".", "/")
    shard.write_bytes(shard.read_bytes()[:10])  # and its shard torn too
    report = recompress(src, dst, chunks="y=20,x=20", shards="y=40,x=40", scheduler="synchronous")
    assert report.arrays[0].units_resumed == len(done) - 1
    _assert_same(src, dst, [""])


def test_dry_run_prints_the_plan_of_work_and_writes_nothing(tmp_path):
    src = _source(tmp_path / "src.zarr", "group")
    dst = tmp_path / "dst.zarr"
    report = recompress(src, dst, chunks="y=20,x=20", shards="y=40,x=40", layout="fixed-slot", slot_parts=3,  # 2 rows of inner chunks: 2 parts
                        dry_run=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.zarr"]
    (a, b) = report.arrays
    assert a.units == b.units == 144 and a.tasks == 144 * 3 and a.units_resumed == 0
    assert a.logical_bytes == 480 * 480 * 4 and a.projected_task_bytes > 0 and a.stored_after == 0
    out = subprocess.run([sys.executable, "-m", "zopt", "recompress", str(src), str(dst), "--chunks", "y=20,x=20",
                          "--shards", "y=40,x=40", "--dry-run"], env=ENV, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "288" in out.stdout and "memory/task" in out.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.zarr"]


def test_resume_removes_a_killed_zarr_chunk_write_but_nothing_else(tmp_path):
    # zarr-python's LocalStore writes a chunk as ``<key>.<uuid hex>.partial`` and renames it; a
    # SIGKILL between the two leaves it in the partial store, which a resumed job must not publish
    partial = tmp_path / ("d.zarr" + PARTIAL_SUFFIX)
    chunks = partial / "a" / "c" / "4"
    chunks.mkdir(parents=True)
    (chunks / "7").write_bytes(b"chunk")
    (chunks / f"7.{'0123456789abcdef' * 2}.partial").write_bytes(b"torn")
    (partial / f"zarr.{'f' * 32}.partial").write_bytes(b"{")
    (chunks / "8.partial").write_bytes(b"not zarr's pattern")
    assert remove_temporaries(partial) == 2
    assert sorted(p.name for p in partial.rglob("*") if p.is_file()) == ["7", "8.partial"]


def _source_with_child(path: Path) -> Path:
    """A v3 group with array ``a`` and a child group ``sub`` holding ``c`` (each 144 shards below)."""
    _source(path, "group")
    rng = np.random.default_rng(8)
    c = zarr.open_group(str(path), mode="a").create_group("sub").create_array(
        "c", shape=SHAPE, chunks=(60, 60), dtype="f4", dimension_names=("y", "x"))
    c[...] = (rng.normal(size=SHAPE) * 10).astype("f4")
    return path


CHILD_OPTS = {"chunks": "y=20,x=20", "shards": "y=40,x=40", "scheduler": "synchronous"}


def _interrupted_before_publish(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A job over a source with a child group, interrupted in ``before_publish`` (every array
    written, nothing published): ``(src, dst, partial store)``."""
    src = _source_with_child(tmp_path / "src.zarr")
    dst = tmp_path / "dst.zarr"

    def interrupted(partial, names):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        recompress(src, dst, before_publish=interrupted, **CHILD_OPTS)
    return src, dst, Path(str(dst) + PARTIAL_SUFFIX)


def test_dry_run_after_an_interrupted_run_counts_a_finished_child_group_as_resumed(tmp_path):
    src, dst, partial = _interrupted_before_publish(tmp_path)
    opts = CHILD_OPTS
    assert (partial / "sub" / "zarr.json").exists() and not dst.exists()  # the child group is finished in the partial store
    report = recompress(src, dst, dry_run=True, **opts)
    units = {a.name: (a.units, a.units_resumed) for a in report.arrays}
    assert units == {"a": (144, 144), "b": (144, 144), "sub/c": (144, 144)}
    assert not dst.exists() and (partial / "sub" / "zarr.json").exists()  # the dry run wrote nothing
    rerun = recompress(src, dst, **opts)
    assert any("sub: already rewritten by the interrupted run" in n for n in rerun.notes)
    _assert_same(src, dst, ["a", "b", "sub/c"])


def test_dry_run_over_a_partial_store_without_its_journal_plans_the_child_groups_anew(tmp_path):
    """A kill between the journal's removal and the publish rename leaves a partial store without
    a journal: the run starts over (replacing it), so the dry run plans every child group anew
    instead of refusing the leftover child as an existing destination."""
    import shutil

    src, dst, partial = _interrupted_before_publish(tmp_path)
    opts = CHILD_OPTS
    shutil.rmtree(partial / JOURNAL_DIR)
    report = recompress(src, dst, dry_run=True, **opts)
    units = {a.name: (a.units, a.units_resumed) for a in report.arrays}
    assert units == {"a": (144, 0), "b": (144, 0), "sub/c": (144, 0)}
    assert not any("already rewritten" in n for n in report.notes)
    rerun = recompress(src, dst, **opts)
    assert not any("already rewritten" in n for n in rerun.notes)
    _assert_same(src, dst, ["a", "b", "sub/c"])


def test_dry_run_after_a_run_killed_inside_a_child_group_counts_its_finished_shards(tmp_path):
    src = _source_with_child(tmp_path / "src.zarr")
    dst = tmp_path / "dst.zarr"
    child_partial = Path(str(dst) + PARTIAL_SUFFIX) / ("sub" + PARTIAL_SUFFIX)
    assert _kill_after(_cmd(src, dst, "compact"), child_partial, 30, random.Random(4))
    finished = _markers(child_partial)
    assert 30 <= len(finished) < 144
    opts = {"chunks": "y=20,x=20", "shards": "y=40,x=40", "scheduler": "synchronous"}
    report = recompress(src, dst, dry_run=True, **opts)
    planned = {a.name: a.units_resumed for a in report.arrays}
    assert planned == {"a": 144, "b": 144, "sub/c": len(finished)}
    resumed = recompress(src, dst, **opts)
    assert {a.name: a.units_resumed for a in resumed.arrays} == planned
    _assert_same(src, dst, ["a", "b", "sub/c"])


def _interrupted(src: Any, dst: Path, **kwargs: Any) -> Path:
    """A job interrupted in ``before_publish`` (every array written, nothing published): its partial store."""
    def interrupted(partial, names):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        recompress(src, dst, before_publish=interrupted, scheduler="synchronous", **kwargs)
    return Path(str(dst) + PARTIAL_SUFFIX)


def _edit_in_place(path: Path, offset: int) -> bytes:
    """One byte of ``path`` changed in place, its size and modification time put back (as
    ``touch -r`` or a restore keeping times would); returns the original bytes."""
    st = path.stat()
    data = path.read_bytes()
    changed = bytearray(data)
    changed[offset] ^= 0x01
    path.write_bytes(bytes(changed))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    return data


def test_a_file_edited_in_place_with_its_size_and_mtime_put_back_is_not_resumed(tmp_path):
    """Issue 35 item 9: the journal knew a netCDF file by its size and mtime only, so a file
    edited in place with both put back was resumed with its old values (exit 0). Its identity
    now holds a sample of its bytes: the resume is refused naming the file."""
    import xarray as xr

    src = tmp_path / "src.nc"
    values = np.arange(60 * 70, dtype="f4").reshape(60, 70)
    xr.Dataset({"v": (("y", "x"), values)}).to_netcdf(src, engine="netcdf4")
    dst = tmp_path / "dst.zarr"
    opts = {"chunks": "y=10,x=70", "shards": "y=20,x=70"}
    partial = _interrupted(src, dst, **opts)
    before = _markers(partial)
    original = _edit_in_place(src, src.stat().st_size - 200)  # inside the data of v
    with pytest.raises(ResumeMismatchError, match=rf"the source changed \({src}\)"):
        recompress(src, dst, scheduler="synchronous", **opts)
    cmd = [sys.executable, "-m", "zopt", "recompress", str(src), str(dst), "--chunks", "y=10,x=70", "--shards",
           "y=20,x=70", "--no-progress"]
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    assert out.returncode == 1 and f"the source changed ({src})" in out.stderr and "Traceback" not in out.stderr
    assert _markers(partial) == before  # nothing touched
    st = src.stat()
    src.write_bytes(original)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    report = recompress(src, dst, scheduler="synchronous", **opts)  # the same bytes again: resumed
    assert any("resumed" in n for n in report.notes)
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[...], values)


def test_the_content_sample_reads_fixed_ranges_of_a_large_file(tmp_path):
    """A file of at most SAMPLES * SAMPLE_BYTES is hashed whole; a larger one at SAMPLES fixed
    ranges (first, last, evenly spaced): a change there is seen, one between them is not (the
    limit docs/archives.md states)."""
    from zopt.store.identity import SAMPLE_BYTES, SAMPLES, content_sample

    small = tmp_path / "small.bin"
    small.write_bytes(bytes(SAMPLES * SAMPLE_BYTES))
    first = content_sample(small)
    _edit_in_place(small, SAMPLES * SAMPLE_BYTES // 2 + 7)
    assert content_sample(small) != first
    size = 100 * SAMPLE_BYTES + 123
    big = tmp_path / "big.bin"
    big.write_bytes(np.random.default_rng(0).integers(0, 256, size, dtype="u1").tobytes())
    base = content_sample(big)
    last = size - SAMPLE_BYTES
    starts = [last * i // (SAMPLES - 1) for i in range(SAMPLES)]
    for at in [0, size - 1] + [s + SAMPLE_BYTES // 2 for s in starts[1:-1]]:
        original = _edit_in_place(big, at)
        assert content_sample(big) != base, at
        big.write_bytes(original)
    _edit_in_place(big, starts[1] + SAMPLE_BYTES + 10)  # between two ranges: not seen
    assert content_sample(big) == base
