"""Every writing task is idempotent (Dask retries tasks): run twice in a row, or again after
a run killed half way (a real SIGKILL), it leaves the same bytes, on every layout."""

from __future__ import annotations

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
from zopt.job.compact import compact
from zopt.job.tasks import ShardJob as _ShardJob
from zopt.job.tasks import finalize_shard as _finalize_shard
from zopt.job.tasks import rewrite_chunk_in_place as _rewrite_chunk_in_place
from zopt.job.tasks import write_packed_shard as _write_packed_shard
from zopt.job.tasks import write_slot_part as _write_slot_part
from zopt.job.work import slot_parts as _slot_parts
from zopt.store.shards import layout_of


def _values() -> np.ndarray:
    rng = np.random.default_rng(3)
    a = np.round(np.cumsum(rng.standard_normal((96, 160)), axis=1), 1).astype("f4")
    a[32:48, :] = 0  # whole inner chunks of fill value: holes
    a[:16, :40] = rng.standard_normal((16, 40))  # chunks that compress badly
    return a


@pytest.fixture
def src(tmp_path) -> Path:
    zarr.open_group(tmp_path / "src.zarr", mode="w").create_array(
        "v", shape=(96, 160), chunks=(96, 160), dtype="f4", fill_value=0, dimension_names=("y", "x"))[:] = _values()
    return tmp_path / "src.zarr"


def _files(store: Path) -> dict[str, bytes]:
    """Every file of a store by relative path (metadata included)."""
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def _killed_at(call: int, code: str) -> None:
    """Run ``code`` in a fresh interpreter that SIGKILLs itself at its ``call``-th os.replace."""
    script = kill_at_replace(call) + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr[-2000:]


def _fixed_slot(tmp_path: Path, src: Path, where: str, name: str) -> tuple[Path, _ShardJob]:
    """An empty fixed-slot target (index at ``where``) and the job its tasks take."""
    from zarr.codecs import BytesCodec, Crc32cCodec

    from zopt.codecs.conditional import ConditionalCodec

    dst = tmp_path / name
    z = zarr.open_group(dst, mode="w").create_array(
        "v", shape=(96, 160), dtype="f4", fill_value=0, chunks=(16, 32), shards={"shape": (48, 96), "index_location": where},
        serializer=BytesCodec(), compressors=[ConditionalCodec(codecs=[{"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 3}}]), Crc32cCodec()],
    )
    return dst, _ShardJob(str(src), "v", str(dst / "v"), layout_of(z), (96, 160), "compress_if_smaller", "job1",
                          z.metadata.chunk_key_encoding)


@pytest.mark.parametrize("where", ["start", "end"])
def test_fixed_slot_writers_and_finalize_retried(tmp_path, src, where):
    dst, job = _fixed_slot(tmp_path, src, where, "d.zarr")
    parts = _slot_parts(job.layout, 2)
    grid = list(np.ndindex(2, 2))
    for coords in grid:
        _finalize_shard(job, coords, *[_write_slot_part(job, coords, p) for p in parts])
    reference = _files(dst)
    for coords in grid:  # finalize twice in a row
        _finalize_shard(job, coords, *[_write_slot_part(job, coords, p) for p in parts])
        assert _files(dst) == reference
    # a writer re-run after the finalize (its worker died) recreates a temporary file holding only
    # its slots; the finalize re-run after it must keep the finalized shard
    for coords in grid:
        outs = [_write_slot_part(job, coords, p) for p in parts]
        _write_slot_part(job, coords, parts[0])
        _finalize_shard(job, coords, *outs)
    assert _files(dst) == reference
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], _values())


@pytest.mark.parametrize("where", ["start", "end"])
def test_a_finalize_killed_half_way_then_retried(tmp_path, src, where):
    ref, job = _fixed_slot(tmp_path, src, where, "ref.zarr")
    parts = _slot_parts(job.layout, 2)
    for coords in np.ndindex(2, 2):
        _finalize_shard(job, coords, *[_write_slot_part(job, coords, p) for p in parts])
    dst, job2 = _fixed_slot(tmp_path, src, where, "d.zarr")
    # killed at the third rename: two shards finalized, the third's index written but not renamed
    _killed_at(3, f"""
        import pickle, numpy as np
        from zopt.job.tasks import finalize_shard as _finalize_shard, write_slot_part as _write_slot_part
        from zopt.job.work import slot_parts as _slot_parts
        job = pickle.loads({__import__("pickle").dumps(job2)!r})
        parts = _slot_parts(job.layout, 2)
        for coords in np.ndindex(2, 2):
            _finalize_shard(job, coords, *[_write_slot_part(job, coords, p) for p in parts])
    """)
    assert _files(dst) != _files(ref)
    for coords in np.ndindex(2, 2):  # Dask reruns every task whose result it lost
        _finalize_shard(job2, coords, *[_write_slot_part(job2, coords, p) for p in parts])
    assert _files(dst) == _files(ref)


def test_a_packed_shard_written_twice(tmp_path, src):
    dst = tmp_path / "d.zarr"
    recompress(src, dst, chunks=(16, 32), shards=(48, 96))
    before = _files(dst)
    z = zarr.open_array(dst, path="v")
    job = _ShardJob(str(src), "v", str(dst / "v"), layout_of(z), (96, 160), "compress_if_smaller", "j",
                    z.metadata.chunk_key_encoding)
    for coords in np.ndindex(2, 2):
        _write_packed_shard(job, coords)
    assert _files(dst) == before


def _compacted(tmp_path: Path, src: Path, name: str) -> Path:
    dst = tmp_path / name
    recompress(src, dst, chunks=(16, 32), shards=(48, 96), layout="fixed-slot", decision="never")
    return dst


@pytest.mark.parametrize("call", [2, 5])  # killed in phase A (shards replaced), in phase B (holes dropped)
def test_compaction_twice_and_after_a_kill(tmp_path, src, call):
    ref = _compacted(tmp_path, src, "ref.zarr")
    compact(ref, grace=0, scheduler="synchronous")
    expected = _files(ref)
    compact(ref, grace=0, scheduler="synchronous")  # twice in a row
    assert _files(ref) == expected
    dst = _compacted(tmp_path, src, "d.zarr")
    _killed_at(call, f"""
        from zopt.job.compact import compact
        compact({str(dst)!r}, grace=0, scheduler="synchronous")
    """)
    assert (dst / ".zopt-lock").exists()  # the killed job's lock: stale, taken over below
    compact(dst, grace=0, scheduler="synchronous")
    assert _files(dst) == expected
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], _values())


# killed in phase A, in phase B (4 shards: a rename and a journal marker each, then phase B), unsharded
@pytest.mark.parametrize(("sharded", "call"), [(True, 2), (True, 9), (False, 3)])
def test_in_place_rewrite_twice_and_after_a_kill(tmp_path, src, sharded, call):
    kwargs = {"shards": (48, 96), "layout": "fixed-slot"} if sharded else {"shards": (16, 32)}
    ref = tmp_path / "ref.zarr"
    recompress(src, ref, chunks=(16, 32), decision="never", **kwargs)
    shutil.copytree(ref, tmp_path / "d.zarr")
    dst = tmp_path / "d.zarr"
    recompress_in_place(ref, decision="always", scheduler="synchronous", grace=0)
    expected = _files(ref)
    recompress_in_place(ref, decision="always", scheduler="synchronous", grace=0)  # twice in a row
    assert _files(ref) == expected
    _killed_at(call, f"""
        from zopt import recompress_in_place
        recompress_in_place({str(dst)!r}, decision="always", scheduler="synchronous", grace=0)
    """)
    recompress_in_place(dst, decision="always", scheduler="synchronous", grace=0)
    assert _files(dst) == expected
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], _values())


def test_an_unsharded_chunk_rewritten_twice(tmp_path, src):
    dst = tmp_path / "d.zarr"
    recompress(src, dst, chunks=(16, 32), shards=(16, 32), decision="never")
    _rewrite_chunk_in_place(str(dst), "v", (0, 0), "always")
    once = _files(dst)
    _rewrite_chunk_in_place(str(dst), "v", (0, 0), "always")
    assert _files(dst) == once


def test_a_slot_writer_rerun_after_its_finalize_leaves_no_temp_file_in_dst(tmp_path, src, monkeypatch):
    import zopt.job.dask_graph as graph
    from zopt.job.tasks import finalize_shard, write_slot_part
    from zopt.job.work import slot_parts

    calls = []

    def finalize_then_a_writer_again(job, coords, *parts, **kwargs):
        out = finalize_shard(job, coords, *parts, **kwargs)
        write_slot_part(job, coords, slot_parts(job.layout, 2)[0])  # Dask re-ran it: its result was lost
        calls.append(coords)
        return out

    monkeypatch.setattr(graph, "finalize_shard", finalize_then_a_writer_again)
    dst = tmp_path / "d.zarr"
    recompress(src, dst, chunks=(16, 32), shards=(48, 96), layout="fixed-slot", slot_parts=2)
    assert calls  # the writers did run again after their shards' finalize
    assert not [p for p in dst.rglob("*") if ".zopt-" in p.name]
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], _values())
