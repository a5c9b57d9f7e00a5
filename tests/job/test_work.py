"""The plan of work (``zopt.job.work``): built and checked before anything is written.

Every refusal a job can make from its options — a plan made for other arrays, ``max_memory``, a
fixed-slot chain without a size bound — comes before the destination or its partial store
exists. The tests put a regular *file* where DST's partial store would be made, so no directory
can be made there (even as root): a job that created its target before refusing fails with
an error instead (the file is in the way). (The one thing a job makes first is its lock beside DST,
``DST.zopt-lock``: one job per DST; it is gone once the job has refused.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import zarr

from zopt import recompress
from zopt.io.paths import PARTIAL_SUFFIX
from zopt.io.sources import source_variables, zarr_v3_group
from zopt.job.targets import TargetSpec, target_arrays
from zopt.job.work import WorkOptions, build_work, layouts_for
from zopt.planning.analysis import analyze
from zopt.planning.plan import PlanMismatchError, make_plan


@pytest.fixture
def src(tmp_path) -> Path:
    rng = np.random.default_rng(5)
    g = zarr.open_group(tmp_path / "src.zarr", mode="w")
    a = np.round(np.cumsum(rng.standard_normal((64, 96)), axis=1), 1).astype("f4")
    g.create_array("v", shape=a.shape, chunks=(32, 48), dtype="f4", fill_value=0, dimension_names=("y", "x"))[:] = a
    # an array the jobs below do not rewrite: it would be copied first by a job that creates its target early
    g.create_array("other", shape=(4000,), chunks=(1000,), dtype="f8", dimension_names=("t",))[:] = rng.random(4000)
    return tmp_path / "src.zarr"


def _nowhere(tmp_path: Path) -> Path:
    """A DST whose partial store cannot be made: a regular file stands where it would be."""
    Path(str(tmp_path / "d.zarr") + PARTIAL_SUFFIX).write_text("not a directory")
    return tmp_path / "d.zarr"


def _nothing_written(dst: Path) -> bool:
    left = sorted(p.name for p in dst.parent.iterdir() if p.name.startswith(dst.name))
    return left == [dst.name + PARTIAL_SUFFIX] and Path(str(dst) + PARTIAL_SUFFIX).read_text() == "not a directory"


def test_max_memory_refuses_before_the_destination_exists(src, tmp_path):
    dst = _nowhere(tmp_path)
    with pytest.raises(ValueError, match=r"max_memory: a write task of array 'v' needs"):
        recompress(src, dst, variables=["v"], chunks=(16, 16), shards=(64, 96), max_memory="32kiB")
    assert _nothing_written(dst)


def test_a_plan_for_other_arrays_is_refused_before_the_destination_exists(src, tmp_path):
    plan = make_plan(analyze(src, ["v"], chunks=(16, 16)))
    other = tmp_path / "other.zarr"
    g = zarr.open_group(other, mode="w")
    g.create_array("w", shape=(64, 96), chunks=(32, 48), dtype="f4", fill_value=0)[:] = 1
    dst = _nowhere(tmp_path)
    with pytest.raises(PlanMismatchError, match="no masks for array 'w'"):
        recompress(other, dst, chunks=(16, 16), shards=(64, 96), plan=plan)
    with pytest.raises(PlanMismatchError, match=r"chunk shape \(32, 32\) vs planned \(16, 16\)"):
        recompress(src, dst, variables=["v"], chunks=(32, 32), shards=(64, 96), plan=plan)
    assert _nothing_written(dst)


def test_a_fixed_slot_chain_without_a_bound_is_refused_before_the_destination_exists(src, tmp_path):
    dst = _nowhere(tmp_path)
    chain = json.dumps([{"name": "bytes"}, {"name": "numcodecs.bz2", "configuration": {"level": 1}}])
    with pytest.raises(ValueError, match="numcodecs.bz2"):
        recompress(src, dst, variables=["v"], codecs=chain, chunks=(16, 16), shards=(64, 96), layout="fixed-slot")
    assert _nothing_written(dst)


def test_the_work_is_built_in_memory_and_counts_units_tasks_and_memory(src, tmp_path):
    before = sorted(p for p in tmp_path.rglob("*"))
    source = source_variables(str(src), zarr_v3_group(str(src)))
    layouts = layouts_for(source, ["v"], (16, 16), (32, 48), None, ["v"])
    from zopt.planning.chains import split_chain

    split = {"v": split_chain([{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1}}])}
    targets = target_arrays(TargetSpec(str(src), zarr_v3_group(str(src)), source, ["v"], layouts, split))
    assert targets["v"].shards == (32, 48) and targets["v"].chunks == (16, 16)
    work = build_work(["v"], source, layouts, targets, WorkOptions("fixed-slot", slot_parts=2))
    w = work.arrays["v"]
    assert (w.units, len(w.pending), w.units_resumed) == (4, 4, 0)  # a 2×2 grid of shards
    assert w.parts == [(0, 1), (1, 2)] and w.tasks == 4 * 3  # two writers and a finalize per shard
    assert w.region((1, 1)) == (slice(32, 64), slice(48, 96))
    inner = 16 * 16 * 4
    # a writer holds a slab of 3 inner chunks: its region twice, their slots, 4 chunk buffers
    assert w.projected_task_bytes == 2 * 3 * inner + 3 * w.shard_layout.slot_size + 4 * inner
    assert work.over_memory(w.projected_task_bytes) is None and work.over_memory(w.projected_task_bytes - 1) is w
    # units an interrupted run finished are left out, their masks and chunks counted
    from zopt.store.journal import Journal

    done = {Journal.key((0, 1)): ({1: 6}, 6)}
    resumed = build_work(["v"], source, layouts, targets, WorkOptions("compact"), done=lambda name: done).arrays["v"]
    assert resumed.pending == [(0, 0), (1, 0), (1, 1)] and resumed.units_resumed == 1
    assert resumed.resumed_masks == {1: 6} and resumed.resumed_chunks == 6 and resumed.tasks == 3
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing written anywhere


def test_dry_run_reports_the_work_and_writes_nothing(src, tmp_path):
    dst = _nowhere(tmp_path)
    report = recompress(src, dst, variables=["v"], chunks=(16, 16), shards=(32, 48), layout="fixed-slot",
                        slot_parts=2, dry_run=True)
    rep = report.arrays[0]
    assert (rep.units, rep.tasks, rep.units_resumed, rep.stored_after) == (4, 12, 0, 0)
    assert rep.projected_task_bytes > 0 and _nothing_written(dst)


# -- before_publish -----------------------------------------------------------------------------------


def test_before_publish_sees_the_finished_partial_store_and_a_refusal_keeps_it(src, tmp_path):
    dst = tmp_path / "d.zarr"
    seen = []

    def refuse(partial, names):
        seen.append((partial, names, zarr.open_array(partial, path="v")[:]))
        raise RuntimeError("values differ")

    with pytest.raises(RuntimeError, match="values differ"):
        recompress(src, dst, variables=["v"], chunks=(16, 16), shards=(32, 48), before_publish=refuse)
    partial = str(dst) + PARTIAL_SUFFIX
    assert not dst.exists() and os.path.isdir(partial)
    (where, names, values), = seen
    assert where == partial and names == ["v"]
    np.testing.assert_array_equal(values, zarr.open_array(src, path="v")[:])
    # the same job again resumes the kept store: nothing rewritten, then published
    calls = []
    report = recompress(src, dst, variables=["v"], chunks=(16, 16), shards=(32, 48),
                        before_publish=lambda p, n: calls.append(n))
    assert calls == [["v"]] and dst.is_dir() and not os.path.exists(partial)
    assert report.arrays[0].units_resumed == report.arrays[0].units == 4
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], zarr.open_array(src, path="v")[:])
    np.testing.assert_array_equal(zarr.open_array(dst, path="other")[:], zarr.open_array(src, path="other")[:])


def test_before_publish_refusing_a_store_destination_leaves_it_written(src):
    store = zarr.storage.MemoryStore()
    with pytest.raises(RuntimeError, match="no"):
        recompress(src, store, variables=["v"], chunks=(16, 16), shards=(32, 48), scheduler="synchronous",
                   before_publish=lambda p, n: (_ for _ in ()).throw(RuntimeError("no")))
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:], zarr.open_array(src, path="v")[:])
