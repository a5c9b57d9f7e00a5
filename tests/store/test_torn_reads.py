"""Readers during a rewrite: a reader that pairs an old shard index with a new file (what
zarr-python's LocalStore does when a shard is replaced between its index request and its chunk
requests) gets the right values or an error, never silently wrong values; the store lock."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.abc.store import RangeByteRequest, SuffixByteRequest
from zarr.codecs import BytesCodec, Crc32cCodec
from zarr.storage import LocalStore

from zopt import recompress_in_place
from zopt.codecs.conditional import ConditionalCodec
from zopt.job.compact import compact
from zopt.store.lock import LOCK_NAME, StoreLockedError, store_lock
from zopt.store.rewrite import rewrite_shard
from zopt.store.shards import EMPTY, layout_of, pack, read_index, write_packed


def values() -> np.ndarray:
    """Distinct values in every inner chunk, and one inner chunk all fill value (a hole that
    moves the chunks after it back by one slot when the shard is packed)."""
    a = np.arange(64 * 96, dtype="f4").reshape(64, 96) + 1
    a[16:32, 32:48] = 0
    return a


def fixed_slot_store(tmp: Path, where: str, checksum: bool = True, name: str = "d.zarr") -> Path:
    """A fixed-slot store of ``values()`` with every chunk raw (mask 0: each fills its slot),
    16×16 inner chunks in 64×96 shards (one shard), index at ``where``, written by zopt's tasks."""
    from zopt.job.tasks import ShardJob as _ShardJob
    from zopt.job.tasks import finalize_shard as _finalize_shard
    from zopt.job.tasks import write_slot_part as _write_slot_part
    from zopt.job.work import slot_parts as _slot_parts

    a = values()
    src = tmp / "src.zarr"
    if not src.exists():
        zarr.open_group(src, mode="w").create_array("v", shape=a.shape, chunks=a.shape, dtype="f4", fill_value=0)[:] = a
    dst = tmp / name
    z = zarr.open_group(dst, mode="w").create_array(
        "v", shape=a.shape, dtype="f4", fill_value=0, chunks=(16, 16),
        shards={"shape": (64, 96), "index_location": where}, serializer=BytesCodec(),
        compressors=[ConditionalCodec(codecs=[{"name": "zstd", "configuration": {"level": 1}}])]
        + ([Crc32cCodec()] if checksum else []),
    )
    lay = layout_of(z)
    job = _ShardJob(str(src), "v", str(dst / "v"), lay, a.shape, "never", "t", z.metadata.chunk_key_encoding)
    _finalize_shard(job, (0, 0), *[_write_slot_part(job, (0, 0), p) for p in _slot_parts(lay, 2)])
    return dst


class TornStore(LocalStore):
    """A LocalStore that answers shard-index requests from the old bytes of a shard and chunk
    requests from the file now on disk: the interleaving a replace between them gives."""

    def __init__(self, root, old: dict[str, bytes], index_nbytes: int, **kw) -> None:
        super().__init__(root, **kw)
        self.old, self.n = old, index_nbytes

    def with_read_only(self, read_only: bool = False):  # zarr.open may ask for a copy
        return TornStore(self.root, self.old, self.n, read_only=read_only)

    def _old_index(self, key, byte_range) -> bytes | None:
        old = self.old.get(key)
        if old is not None:
            if isinstance(byte_range, SuffixByteRequest) and byte_range.suffix == self.n:
                return old[-self.n :]
            if isinstance(byte_range, RangeByteRequest) and (byte_range.start, byte_range.end) == (0, self.n):
                return old[: self.n]
        return None

    async def get(self, key, prototype, byte_range=None):
        index = self._old_index(key, byte_range)
        if index is not None:
            return prototype.buffer.from_bytes(index)
        return await super().get(key, prototype, byte_range)

    def get_sync(self, key, *, prototype=None, byte_range=None):  # zarr >= 3.3 reads shards synchronously
        from zarr.core.buffer import default_buffer_prototype

        index = self._old_index(key, byte_range)
        if index is not None:
            return (prototype or default_buffer_prototype()).buffer.from_bytes(index)
        return super().get_sync(key, prototype=prototype, byte_range=byte_range)


def torn_reads(store: Path, old: bytes) -> tuple[int, int, int]:
    """Read every inner chunk of array ``v`` (one shard, key ``c/0/0``) with the old index and
    the current file. Returns (right, errors, wrong)."""
    a = values()
    lay = layout_of(zarr.open_array(store, path="v"))
    torn = zarr.open_array(TornStore(store / "v", {"c/0/0": old}, lay.index_nbytes, read_only=True), mode="r")
    right = errors = wrong = 0
    for y in range(0, 64, 16):
        for x in range(0, 96, 16):
            try:
                got = torn[y : y + 16, x : x + 16]
            except Exception:  # noqa: BLE001 - any error is a detected torn read
                errors += 1
                continue
            if np.array_equal(got, a[y : y + 16, x : x + 16]):
                right += 1
            else:
                wrong += 1
    return right, errors, wrong


def naive_compaction(path: Path, lay) -> None:
    """What ``zopt compact`` did before: pack the chunks and rename over the shard."""
    table, blob = read_index(path, lay), path.read_bytes()
    write_packed(path, pack(lay, ((int(i), blob[int(table[i, 0]) : int(table[i, 0] + table[i, 1])])
                                  for i in np.flatnonzero(table[:, 0] != EMPTY))))


@pytest.mark.parametrize("where", ["start", "end"])
def test_naive_packing_gives_torn_readers_silently_wrong_values(tmp_path, where):
    """The hazard is real (the harness can see it): both of the issue's cases happen."""
    store = fixed_slot_store(tmp_path, where)
    shard = store / "v" / "c" / "0" / "0"
    old = shard.read_bytes()
    naive_compaction(shard, layout_of(zarr.open_array(store, path="v")))
    assert len(shard.read_bytes()) < len(old)  # old offsets now lie past the end: fill values
    right, errors, wrong = torn_reads(store, old)
    assert wrong > 0


@pytest.mark.parametrize("where", ["start", "end"])
def test_compaction_gives_torn_readers_right_values_or_an_error(tmp_path, where):
    store = fixed_slot_store(tmp_path, where)
    shard = store / "v" / "c" / "0" / "0"
    old = shard.read_bytes()
    lay = layout_of(zarr.open_array(store, path="v"))
    table = read_index(shard, lay)
    blob = shard.read_bytes()
    chunks = {int(i): blob[int(table[i, 0]) : int(table[i, 0] + table[i, 1])] for i in np.flatnonzero(table[:, 0] != EMPTY)}
    rewrite_shard(shard, lay, chunks, tmp_path, table, len(blob))  # phase A, as compact runs it
    assert len(shard.read_bytes()) >= len(old)
    right, errors, wrong = torn_reads(store, old)
    assert wrong == 0 and errors > 0, (right, errors, wrong)
    # phase B keeps offsets and index: a reader holding the phase-A index reads the same bytes
    mid = shard.read_bytes()
    compact(store, grace=0, scheduler="synchronous")
    assert len(shard.read_bytes()) < len(mid)
    assert torn_reads(store, mid) == (24, 0, 0)  # every chunk, the hole (fill value) included
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:], values())


@pytest.mark.parametrize("where", ["start", "end"])
def test_in_place_rewrite_gives_torn_readers_right_values_or_an_error(tmp_path, where):
    store = fixed_slot_store(tmp_path, where)
    shard = store / "v" / "c" / "0" / "0"
    old = shard.read_bytes()
    # phase A only (the grace period not over yet): the in-place task itself
    from zopt.job.tasks import ShardJob as _ShardJob
    from zopt.job.tasks import rewrite_shard_in_place as _rewrite_shard_in_place

    z = zarr.open_array(store, path="v")
    job = _ShardJob(str(store), "v", str(store / "v"), layout_of(z), z.shape, "always", "t", z.metadata.chunk_key_encoding)
    _rewrite_shard_in_place(job, (0, 0), str(tmp_path))
    right, errors, wrong = torn_reads(store, old)
    assert wrong == 0 and errors > 0, (right, errors, wrong)
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:], values())


def test_without_a_checksum_the_rewrite_says_readers_are_unprotected(tmp_path):
    store = fixed_slot_store(tmp_path, "end", checksum=False)
    report = compact(store, grace=0, scheduler="synchronous")
    assert any("no crc32c" in n and "'v'" in n for n in report.notes)
    report = recompress_in_place(store, decision="always", scheduler="synchronous", grace=0)
    assert any("no crc32c" in n for n in report.notes)
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:], values())


# -- concurrent readers, for real --------------------------------------------------------------------------


def _reader(store: Path, stop: threading.Event, seen: dict) -> None:
    """Plain zarr-python reading random inner chunks in a loop; a failed read is retried once."""
    a = values()
    rng = np.random.default_rng(0)
    z = zarr.open_array(store, path="v", mode="r")
    while not stop.is_set():
        y, x = int(rng.integers(4)) * 16, int(rng.integers(6)) * 16
        for attempt in range(2):
            try:
                got = z[y : y + 16, x : x + 16]
            except Exception:  # noqa: BLE001
                seen["errors"] += 1
                if attempt:
                    seen["unresolved"] += 1
                continue
            seen["reads"] += 1
            if not np.array_equal(got, a[y : y + 16, x : x + 16]):
                seen["wrong"] += 1
            break


@pytest.mark.parametrize("where", ["start", "end"])
def test_a_concurrent_reader_never_sees_wrong_values(tmp_path, where):
    """Writers of each kind (compaction of fixed slots, in-place rewrites alternating masks)
    replace the shard again and again while a reader thread reads random chunks."""
    seen = {"reads": 0, "errors": 0, "unresolved": 0, "wrong": 0}
    stop = threading.Event()
    stores = [fixed_slot_store(tmp_path, where, name=f"d{k}.zarr") for k in range(2)]
    readers = [threading.Thread(target=_reader, args=(s, stop, seen)) for s in stores]
    for t in readers:
        t.start()
    try:
        deadline = time.monotonic() + 2
        rounds = 0
        while time.monotonic() < deadline:
            compact(stores[0], grace=0.05, scheduler="synchronous")
            shutil_copy_fixed(tmp_path, where, stores[0])
            recompress_in_place(stores[1], decision="always" if rounds % 2 else "never", scheduler="synchronous", grace=0.05)
            rounds += 1
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert seen["reads"] > 50 and rounds >= 3
    assert seen["wrong"] == 0, seen
    assert seen["unresolved"] == 0, seen


def shutil_copy_fixed(tmp_path: Path, where: str, store: Path) -> None:
    """Put a fixed-slot shard back (replaced atomically) so that the next compaction has work."""
    fresh = fixed_slot_store(tmp_path, where, name="fresh.zarr")
    shard = store / "v" / "c" / "0" / "0"
    tmp = shard.with_name("0.fresh")
    tmp.write_bytes((fresh / "v" / "c" / "0" / "0").read_bytes())
    os.replace(tmp, shard)


# -- the store lock ----------------------------------------------------------------------------------------


def test_a_second_rewrite_of_the_same_store_is_refused_naming_the_owner(tmp_path):
    store = fixed_slot_store(tmp_path, "end")
    with store_lock(store, "first") as tmp_dir:
        assert tmp_dir.is_dir() and tmp_dir.parent.name == ".zopt-jobs"
        with pytest.raises(StoreLockedError, match=rf"pid {os.getpid()} on host '{socket.gethostname()}'.*job first"):
            compact(store, grace=0)
        with pytest.raises(StoreLockedError, match="being rewritten"):
            recompress_in_place(store, decision="always", grace=0)
    assert not (store / LOCK_NAME).exists() and not (store / ".zopt-jobs").exists()


def test_a_stale_lock_and_dead_jobs_leftovers_are_cleared(tmp_path):
    import json
    import subprocess
    import sys

    store = fixed_slot_store(tmp_path, "end")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)  # a process of this host that has exited
    (store / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "job": "dead", "since": 0}))
    leftover = store / ".zopt-jobs" / "dead" / "v%c%0%0"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"x" * 10)
    old_style = store / "v" / "c" / "0" / "0.zopt-packed-0123abcd"
    old_style.write_bytes(b"y")
    compact(store, grace=0, scheduler="synchronous")
    assert not leftover.exists() and not old_style.exists()
    assert not (store / LOCK_NAME).exists() and not (store / ".zopt-jobs").exists()
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:], values())


def test_a_lock_from_another_host_is_refused_and_the_message_says_what_to_remove(tmp_path):
    import json

    from click.testing import CliRunner

    from zopt.cli.commands import main

    store = fixed_slot_store(tmp_path, "end")
    (store / LOCK_NAME).write_text(json.dumps({"pid": 1, "host": "elsewhere", "job": "j", "since": 0}))
    res = CliRunner().invoke(main, ["compact", str(store), "--no-progress"])
    assert res.exit_code == 1
    assert "host 'elsewhere'" in res.output and f"remove {store / LOCK_NAME}" in res.output.replace("\n", "")
    assert "Traceback" not in res.output


# -- zopt's own readers: retry once, then name the chunk ------------------------------------------------


def test_the_raw_reader_notices_a_replaced_shard_and_reads_its_new_index(tmp_path):
    from zopt.store.raw_read import RawChunkReader

    a = values()
    z = zarr.create_array(tmp_path / "raw.zarr", shape=a.shape, dtype="f4", chunks=(16, 16), shards=(64, 96),
                          compressors=None, fill_value=0)
    z[:] = a
    reader = RawChunkReader.open(tmp_path / "raw.zarr", z)
    assert reader is not None
    region = (slice(32, 48), slice(16, 80))
    np.testing.assert_array_equal(reader.read_region(region, 0.0), a[region])  # index read and kept
    shard = tmp_path / "raw.zarr" / "c" / "0" / "0"
    lay = layout_of(z)
    table, blob = read_index(shard, lay), shard.read_bytes()
    chunks = {int(i): blob[int(table[i, 0]) : int(table[i, 0] + table[i, 1])] for i in np.flatnonzero(table[:, 0] != EMPTY)}
    rewrite_shard(shard, lay, chunks, tmp_path, table, len(blob))
    assert not np.array_equal(read_index(shard, lay)[:, 0], table[:, 0])  # chunks moved
    np.testing.assert_array_equal(reader.read_region(region, 0.0), a[region])  # not the old offsets
    samples, absent = reader.read_windows((16, 16), [(2, 3)], 1, 1, np.float32(0))
    assert samples[0].view("f4").tolist() == a[32:48, 48:64].ravel().tolist() and not absent[0]


def test_checked_reads_retry_once_then_name_the_chunk(tmp_path):
    from zopt.errors import ChunkDecodeError
    from zopt.store.checked_read import read_region

    store = fixed_slot_store(tmp_path, "end")
    z = zarr.open_array(store, path="v")

    class Flaky:  # fails once, like a torn read during a rewrite
        def __init__(self, array, failures):
            self.array, self.failures = array, failures
            self.metadata, self.path = array.metadata, array.path

        def __getitem__(self, region):
            if self.failures:
                self.failures -= 1
                raise ValueError("Stored and computed checksum do not match")
            return self.array[region]

    region = (slice(0, 64), slice(0, 96))
    np.testing.assert_array_equal(read_region(Flaky(z, 1), region, str(store)), values())
    # a chunk that stays corrupt: named after the retry
    shard = store / "v" / "c" / "0" / "0"
    lay = layout_of(z)
    table = read_index(shard, lay)
    data = bytearray(shard.read_bytes())
    data[int(table[7, 0]) + 5] ^= 0xFF  # inner chunk 7 = (1, 1)
    shard.write_bytes(bytes(data))
    with pytest.raises(ChunkDecodeError, match=r"inner chunk \(1, 1\) of shard 'v/c/0/0'"):
        read_region(zarr.open_array(store, path="v"), region, str(store))
    from zopt import recompress

    with pytest.raises(ChunkDecodeError, match=r"inner chunk \(1, 1\) of shard 'v/c/0/0'"):
        recompress(store, tmp_path / "out.zarr", chunks=(16, 16), shards=(64, 96))
    assert not (tmp_path / "out.zarr").exists()
