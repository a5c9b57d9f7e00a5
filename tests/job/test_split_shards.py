"""Packed shards split below the shard when a job has too few of them for its workers (issue 34, G4).

``zopt.job.work.encode_parts`` chooses, in the plan of work, slabs of inner chunks encoded by their
own tasks (``encode_shard_part``), then one assembly per shard (``assemble_shard``) writes it: the
stored bytes must be those of one task per shard, and a killed job must resume from the journal's
per-shard markers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dask
import numpy as np
import pytest
import zarr
from sigkill import kill_at_replace

from zopt import recompress
from zopt.io.paths import PARTIAL_SUFFIX
from zopt.job import work as work_mod
from zopt.store.journal import JOURNAL_DIR
from zopt.store.shards import ShardLayout, layout_of

_CHAINS = {
    "plain": [{"name": "bytes"}, {"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 3}}],
    "conditional": [{"name": "bytes"}, {"name": "conditional", "configuration": {
        "codecs": [{"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 3}}]}}],
    "pcodec": [{"name": "numcodecs.pcodec", "configuration": {"level": 8}}],
}


def _layout(shard: tuple[int, ...], inner: tuple[int, ...]) -> ShardLayout:
    from zarr.storage import MemoryStore

    return layout_of(zarr.create_array(MemoryStore(), shape=shard, chunks=inner, shards=shard, dtype="f4"))


def test_shards_are_split_only_when_too_few_for_the_workers(monkeypatch):
    monkeypatch.setattr(work_mod, "MIN_PART_BYTES", 4 * 1024 * 1024)
    big = _layout((256, 256, 256), (64, 64, 64))  # 64 MiB shards of 4 rows of 16 inner chunks
    assert work_mod.encode_parts(big, 64, 16) == []  # 4 per worker: one task per shard
    assert work_mod.encode_parts(big, 1, 16) == [(0, 1), (1, 2), (2, 3), (3, 4)]  # at most a row each
    assert work_mod.encode_parts(big, 40, 16) == [(0, 2), (2, 4)]  # 80 tasks
    assert work_mod.encode_parts(big, 30, 16) == [(0, 1), (1, 3), (3, 4)]
    assert work_mod.encode_parts(big, 0, 16) == []
    small = _layout((64, 64), (16, 16))  # 16 KiB shards: not worth a task per part
    assert work_mod.encode_parts(small, 1, 16) == []
    flat = _layout((1, 64, 64), (1, 16, 16))  # split along the first axis holding several chunks
    monkeypatch.setattr(work_mod, "MIN_PART_BYTES", 1024)
    assert work_mod.encode_parts(flat, 1, 16) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def _source(path: Path, shape=(100, 150), chunks=(16, 16)) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(3)
    a = np.cumsum(rng.normal(size=shape), axis=1).astype("f4")
    a[:16, :64] = rng.integers(0, 2**32, (16, 64), dtype=np.uint32).view("f4")  # stored raw by conditional
    a[32:64, :] = 0  # a whole part of the first shards equal to the fill value: nothing stored
    zarr.create_array(str(path), shape=shape, chunks=chunks, dtype="f4", fill_value=0)[...] = a
    return path, a


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.name != "zarr.json"}


@pytest.mark.parametrize("chain", sorted(_CHAINS))
@pytest.mark.parametrize("source_chunks", [(16, 16), (50, 75)])  # aligned chunks (read_many), regions
def test_split_shards_store_the_bytes_of_whole_shard_tasks(tmp_path, monkeypatch, chain, source_chunks):
    """On a LocalStore, with edge shards cut by the array and a part holding only the fill value."""
    src, a = _source(tmp_path / "s.zarr", chunks=source_chunks)
    monkeypatch.setattr(work_mod, "MIN_PART_BYTES", 1024)
    kw = dict(codecs=json.dumps(_CHAINS[chain]), chunks=(16, 16), shards=(64, 96))
    with dask.config.set(num_workers=4):
        split = recompress(src, tmp_path / "split.zarr", **kw)
        monkeypatch.setattr(work_mod, "TASKS_PER_WORKER", 0)  # never split
        whole = recompress(src, tmp_path / "whole.zarr", **kw)
    (s,), (w,) = split.arrays, whole.arrays
    assert s.units == w.units == 4 and w.tasks == 4
    assert s.tasks == 4 * (1 + 4)  # 4 shards for 4 workers: each in 4 parts (of one row each) + an assembly
    assert (s.chunks_written, dict(s.masks)) == (w.chunks_written, dict(w.masks))
    assert _files(tmp_path / "split.zarr") == _files(tmp_path / "whole.zarr")
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "split.zarr")[...], a)


def test_a_one_shard_array_is_split_for_the_workers_and_the_dry_run_says_so(tmp_path, monkeypatch):
    src, a = _source(tmp_path / "s.zarr", shape=(64, 96))
    monkeypatch.setattr(work_mod, "MIN_PART_BYTES", 1024)
    with dask.config.set(num_workers=2):
        dry = recompress(src, tmp_path / "d.zarr", chunks=(16, 16), shards=(64, 96), dry_run=True)
        assert dry.arrays[0].tasks == 1 + 4 and not (tmp_path / "d.zarr").exists()
        seen = []
        real = work_mod.encode_parts
        monkeypatch.setattr(work_mod, "encode_parts", lambda *x: seen.append(x[1:]) or real(*x))
        rep = recompress(src, tmp_path / "d.zarr", chunks=(16, 16), shards=(64, 96))
    assert seen == [(1, 2)] and rep.arrays[0].tasks == 5
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "d.zarr")[...], a)


_RUN = """
import sys
import dask
from zopt import recompress
from zopt.job import work
work.MIN_PART_BYTES = 1024
with dask.config.set(num_workers=4):
    report = recompress(sys.argv[1], sys.argv[2], chunks=(16, 16), shards=(64, 96), codecs=sys.argv[3],
                        scheduler="synchronous")
print(report.arrays[0].tasks, report.arrays[0].units_resumed)
"""


def test_a_killed_job_of_split_shards_resumes_from_its_markers(tmp_path):
    src, a = _source(tmp_path / "s.zarr")
    dst = tmp_path / "d.zarr"
    partial = Path(str(dst) + PARTIAL_SUFFIX)
    codecs = json.dumps(_CHAINS["conditional"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # os.replace calls: the metadata, the journal's job record, then per shard its rename and its
    # marker: at the 6th, one shard is marked and a second is written but not marked
    killed = subprocess.run([sys.executable, "-c", kill_at_replace(6) + _RUN, str(src), str(dst), codecs],
                            env=env, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    assert not dst.exists()
    markers = [p for p in (partial / JOURNAL_DIR / "done").rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert len(markers) == 1
    resumed = subprocess.run([sys.executable, "-c", _RUN, str(src), str(dst), codecs], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    tasks, units_resumed = map(int, resumed.stdout.split()[-2:])
    assert (tasks, units_resumed) == (3 * (1 + 4), 1)  # the three shards left, split again
    whole = recompress(src, tmp_path / "whole.zarr", chunks=(16, 16), shards=(64, 96), codecs=codecs)
    assert whole.arrays[0].tasks == 4
    assert _files(dst) == _files(tmp_path / "whole.zarr")
    assert not partial.exists()
    np.testing.assert_array_equal(zarr.open_array(dst)[...], a)
