"""Shard layouts: slot arithmetic, index bytes, fixed-slot writes by concurrent processes,
crash safety, compaction, ``zopt info``/``compact`` and interop reads (zarrs, tensorstore)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import google_crc32c
import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec

from zopt import recompress
from zopt.cli.commands import main
from zopt.codecs.conditional import ConditionalCodec
from zopt.job.compact import compact
from zopt.readback.info import store_info
from zopt.store.shards import (
    EMPTY,
    ShardIndexError,
    ShardLayout,
    classify,
    finalize_slots,
    layout_of,
    read_index,
    write_slots,
)
from zopt.store.shards import tmp_path as slot_tmp_path  # (pytest's tmp_path fixture has the name)


def _field(shape=(300, 260), seed=0) -> np.ndarray:
    """Smooth field with a noise block and a zero band: chunks that want different masks."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 30, shape[0])[:, None]
    x = np.linspace(0, 20, shape[1])[None]
    a = np.round(np.sin(y) * np.cos(x) * 10, 2).astype("f4")
    a[:50, :70] = rng.standard_normal((50, 70))
    a[200:, :] = 0
    return a


@pytest.fixture
def source(tmp_path) -> tuple[Path, np.ndarray]:
    a = _field()
    g = zarr.open_group(tmp_path / "src.zarr", mode="w")
    g.create_array("v", shape=a.shape, chunks=(100, 100), dtype="f4", fill_value=0, dimension_names=("y", "x"))[:] = a
    return tmp_path / "src.zarr", a


def _layout(index_location="end", cps=(2, 3), inner=(4, 5), codecs=None) -> ShardLayout:
    from zarr.core.dtype import Float32

    return ShardLayout(
        shard_shape=tuple(c * i for c, i in zip(cps, inner, strict=True)),
        inner_shape=inner,
        index_location=index_location,
        index_codecs=(BytesCodec(), Crc32cCodec()),
        inner_codecs=codecs or (BytesCodec(), ConditionalCodec(codecs=[{"name": "zstd", "configuration": {"level": 1}}])),
        dtype=Float32(),
        fill_value=0.0,
    )


def _shard_files(store: Path) -> list[Path]:
    return sorted(f for f in (store / "v" / "c").rglob("*") if f.is_file())


def _chunk_bytes(path: Path, layout: ShardLayout) -> dict[int, bytes]:
    table = read_index(path, layout)
    blob = path.read_bytes()
    return {int(i): blob[int(table[i, 0]) : int(table[i, 0] + table[i, 1])] for i in np.flatnonzero(table[:, 0] != EMPTY)}


# -- slot arithmetic and index bytes -----------------------------------------------------------------


@pytest.mark.parametrize("where", ["start", "end"])
def test_slot_arithmetic_and_index_bytes(tmp_path, where):
    layout = _layout(where)
    assert layout.n_inner == 6
    assert layout.index_nbytes == 6 * 16 + 4  # uint64 pairs + crc32c
    assert layout.slot_size == 4 * 5 * 4 + 1  # raw float32 chunk + 1-byte conditional header
    base = 100 if where == "start" else 0
    assert [layout.slot_offset(i) for i in range(3)] == [base, base + 81, base + 162]

    chunks = {1: np.arange(30, dtype=np.uint8), 4: np.arange(81, dtype=np.uint8)}
    tmp = tmp_path / "s.tmp"
    written = write_slots(tmp, layout, chunks.items())
    assert written == [(1, 30), (4, 81)]
    final = tmp_path / "s"
    size = finalize_slots(tmp, final, layout, written)
    assert not tmp.exists() and final.exists()
    blob = final.read_bytes()
    assert size == len(blob) == 6 * 81 + 100
    pairs = [(EMPTY, EMPTY)] * 6
    pairs[1] = (base + 81, 30)
    pairs[4] = (base + 4 * 81, 81)
    raw = b"".join(struct.pack("<QQ", int(o), int(n)) for o, n in pairs)
    index = raw + struct.pack("<I", google_crc32c.value(raw))
    assert (blob[:100] if where == "start" else blob[-100:]) == index
    for i, data in chunks.items():
        assert blob[base + i * 81 : base + i * 81 + data.size] == data.tobytes()
    assert classify(read_index(final, layout), layout, size) == "fixed-slot"


def test_chain_without_a_bound_is_refused_naming_the_codec(source, tmp_path):
    src, _ = source
    chain = json.dumps([{"name": "bytes"}, {"name": "numcodecs.bz2", "configuration": {"level": 1}}])
    with pytest.raises(ValueError, match="numcodecs.bz2"):
        recompress(src, tmp_path / "d.zarr", codecs=chain, chunks=(32, 32), shards=(96, 128), layout="fixed-slot")
    assert not (tmp_path / "d.zarr").exists()


def test_unknown_layout_is_a_value_error(source, tmp_path):
    with pytest.raises(ValueError, match="layout: 'sparse' is not one of"):
        recompress(source[0], tmp_path / "d.zarr", layout="sparse")


# -- the engine ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["fixed-slot", "compact"])
def test_recompress_layouts_round_trip_with_slot_offsets(source, tmp_path, layout):
    src, a = source
    dst = tmp_path / "d.zarr"
    report = recompress(src, dst, chunks=(32, 32), shards=(96, 128), layout=layout, slot_parts=3, menu="classic")
    arr = zarr.open_array(dst, path="v")
    np.testing.assert_array_equal(arr[:], a)
    rep = report.arrays[0]
    assert rep.layout == layout
    lay = layout_of(arr)
    kinds = set()
    for f in _shard_files(dst):
        table = read_index(f, lay)
        kinds.add(classify(table, lay, f.stat().st_size))
        used = np.flatnonzero(table[:, 0] != EMPTY)
        if layout == "fixed-slot":
            assert np.all(table[used, 0] == used * lay.slot_size)
    assert kinds == {layout}
    # chunks equal to the fill value (the zero band) are not stored, as zarr does
    assert rep.chunks_written == 63 < rep.chunks == 90
    assert not list(dst.rglob("*.zopt-*"))
    infos = store_info(dst)
    assert infos[0].masks == rep.masks and infos[0].layout == layout
    assert sum(rep.masks.values()) == rep.chunks_written


def test_a_decision_never_overflows_its_slot(tmp_path):
    noise = np.random.default_rng(1).integers(0, 2**32, (64, 64), dtype=np.uint32).view("f4")
    g = zarr.open_group(tmp_path / "src.zarr", mode="w")
    g.create_array("v", shape=noise.shape, chunks=(64, 64), dtype="f4", fill_value=0, dimension_names=("y", "x"))[:] = noise
    dst = tmp_path / "d.zarr"
    report = recompress(tmp_path / "src.zarr", dst, chunks=(16, 16), shards=(64, 64), decision="always", layout="fixed-slot")
    # zstd makes random bytes larger, so "always" would overflow: stored with mask 0 instead
    assert set(report.arrays[0].masks) == {0}
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:].view("u4"), noise.view("u4"))
    compact_report = recompress(tmp_path / "src.zarr", tmp_path / "c.zarr", chunks=(16, 16), shards=(64, 64), decision="always")
    assert set(compact_report.arrays[0].masks) == {3}  # packed: no slot limit, the mask holds


def test_worker_processes_write_the_same_shards_concurrently(source, tmp_path):
    from distributed import Client, LocalCluster, get_task_stream

    src, a = source
    dst = tmp_path / "d.zarr"
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, Client(cluster) as client, get_task_stream(client) as stream:
        report = recompress(src, dst, chunks=(32, 32), shards=(96, 256), layout="fixed-slot", slot_parts=3, scheduler=cluster.scheduler_address)
    by_shard: dict[str, set] = {}
    for t in stream.data:
        key = str(t["key"])
        if key.startswith("zopt-slots-"):
            by_shard.setdefault(key.rsplit("-", 1)[0], set()).add(t["worker"])
    assert len(by_shard) == 8  # 4×2 shards, three writer tasks each
    assert any(len(w) == 2 for w in by_shard.values())  # one shard written by both processes
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], a)  # 0 chunks lost
    assert report.arrays[0].chunks_written == 63


# -- crash safety --------------------------------------------------------------------------------------


def test_a_writer_killed_before_finalize_leaves_the_previous_shard(source, tmp_path):
    src, a = source
    dst = tmp_path / "d.zarr"
    recompress(src, dst, chunks=(32, 32), shards=(96, 128), layout="fixed-slot")
    shard = dst / "v" / "c" / "0" / "0"
    before = shard.read_bytes()
    script = textwrap.dedent(
        f"""
        import os, signal, numpy as np, zarr
        from zopt.store.shards import layout_of, tmp_path, write_slots
        lay = layout_of(zarr.open_array({str(dst)!r}, path="v"))
        enc = lay.inner_encoder()
        chunk = np.full(lay.inner_shape, 7.0, dtype="f4")
        tmp = tmp_path({str(shard)!r}, "killed")
        write_slots(tmp, lay, [(i, enc.encode(chunk).data) for i in range(5)])
        os.kill(os.getpid(), signal.SIGKILL)  # dies before finalize
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == -9
    assert slot_tmp_path(shard, "killed").exists()  # only the temporary file holds the new slots
    assert shard.read_bytes() == before
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], a)
    assert store_info(dst)[0].temp_files == 1


# -- compaction ------------------------------------------------------------------------------------------


def _fixed_slot_store(tmp_path: Path, a: np.ndarray, where: str) -> Path:
    """A fixed-slot store of ``a`` with the shard index at ``where``, written by zopt's tasks."""
    from zopt.job.tasks import ShardJob as _ShardJob
    from zopt.job.tasks import finalize_shard as _finalize_shard
    from zopt.job.tasks import write_slot_part as _write_slot_part
    from zopt.job.work import slot_parts as _slot_parts

    src = tmp_path / "src.zarr"
    zarr.open_group(src, mode="w").create_array("v", shape=a.shape, chunks=a.shape, dtype="f4", fill_value=0, dimension_names=("y", "x"))[:] = a
    dst = tmp_path / "d.zarr"
    z = zarr.open_group(dst, mode="w").create_array(
        "v", shape=a.shape, dtype="f4", fill_value=0, chunks=(32, 32),
        shards={"shape": (96, 128), "index_location": where}, serializer=BytesCodec(),
        compressors=[ConditionalCodec(codecs=[{"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 3}}])],
    )
    lay = layout_of(z)
    job = _ShardJob(str(src), "v", str(dst / "v"), lay, a.shape, "compress_if_smaller", "test", z.metadata.chunk_key_encoding)
    for coords in np.ndindex(4, 3):
        _finalize_shard(job, coords, *[_write_slot_part(job, coords, p) for p in _slot_parts(lay, 2)])
    return dst


@pytest.mark.parametrize("where", ["start", "end"])
def test_compaction_keeps_every_chunk_bit_for_bit(tmp_path, where):
    a = _field(seed=2)
    dst = _fixed_slot_store(tmp_path, a, where)
    lay = layout_of(zarr.open_array(dst, path="v"))
    assert lay.index_location == where
    files = _shard_files(dst)
    assert {classify(read_index(f, lay), lay, f.stat().st_size) for f in files} == {"fixed-slot"}
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], a)
    chunks_before = {f: _chunk_bytes(f, lay) for f in files}
    report = compact(dst)
    entry = report.arrays[0]
    assert entry.shards == entry.compacted == len(files)
    assert entry.apparent_after < entry.apparent_before
    assert entry.apparent_after == sum(f.stat().st_size for f in files)
    for f in files:
        assert _chunk_bytes(f, lay) == chunks_before[f]
        assert classify(read_index(f, lay), lay, f.stat().st_size) == "compact"
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], a)
    again = compact(dst)  # idempotent: nothing left to compact
    assert again.arrays[0].compacted == 0


def test_cli_info_and_compact(source, tmp_path):
    src, a = source
    dst = tmp_path / "d.zarr"
    runner = CliRunner()
    res = runner.invoke(main, ["recompress", str(src), str(dst), "--chunks", "y=32,x=32", "--shards", "y=96,x=128",
                               "--layout", "fixed-slot", "--slot-parts", "2", "--no-progress"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["info", str(dst), "--wide"])  # the slot column: left out at 100 columns
    assert res.exit_code == 0, res.output
    row = next(line for line in res.output.splitlines() if " v " in line)
    assert "fixed-slot" in row and "63/90" in row and "4.0 KiB" in row
    res = runner.invoke(main, ["compact", str(dst), "v", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "compact" in res.output and "nothing to compact" not in res.output
    again = runner.invoke(main, ["compact", str(dst), "v", "--no-progress"])
    assert again.exit_code == 0 and "nothing to compact: every shard is already packed" in again.output
    plain = tmp_path / "plain.zarr"
    zarr.create_array(plain, name="u", shape=(4,), dtype="f4", fill_value=0)
    none = runner.invoke(main, ["compact", str(plain), "--no-progress"])
    assert none.exit_code == 0 and "nothing to compact: no array of" in none.output and "is sharded" in none.output
    named = runner.invoke(main, ["compact", str(plain), "u", "--no-progress"])
    assert named.exit_code == 0 and "nothing to compact: none of the arrays named is sharded" in named.output
    res = runner.invoke(main, ["info", str(dst)])
    row = next(line for line in res.output.splitlines() if " v " in line)
    assert "fixed-slot" not in row and "compact" in row
    res = runner.invoke(main, ["info", str(dst), "nope"])
    assert res.exit_code != 0 and "nope" in res.output
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], a)


def test_a_shard_whose_index_does_not_match_its_file_is_named(source, tmp_path):
    src, _ = source
    dst = tmp_path / "d.zarr"
    recompress(src, dst, chunks=(32, 32), shards=(96, 128), layout="fixed-slot")
    shard = dst / "v" / "c" / "1" / "0"
    blob = shard.read_bytes()
    lay = layout_of(zarr.open_array(dst, path="v"))
    # drop the last slot but keep the index: entries now point past the chunk data
    shard.write_bytes(blob[: len(blob) - lay.index_nbytes - lay.slot_size] + blob[-lay.index_nbytes :])
    with pytest.raises(ShardIndexError, match=r"shard 'v/c/1/0'.*outside"):
        store_info(dst)
    with pytest.raises(ShardIndexError, match=r"v/c/1/0"):
        compact(dst)
    shard.write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]))  # a flipped checksum bit
    with pytest.raises(ShardIndexError, match=r"shard 'v/c/1/0'.*index does not decode"):
        store_info(dst)


# -- interop -----------------------------------------------------------------------------------------------

INTEROP_CHAINS = {
    "zstd+crc32c": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 3}}, {"name": "crc32c"}],
    "blosc": [{"name": "bytes", "configuration": {"endian": "little"}},
              {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}}],
}


@pytest.mark.parametrize("chain", sorted(INTEROP_CHAINS))
@pytest.mark.parametrize("layout", ["fixed-slot", "compact"])
def test_zarrs_and_tensorstore_read_both_layouts(source, tmp_path, chain, layout):
    zarrs = pytest.importorskip("zarrs")
    ts = pytest.importorskip("tensorstore")
    src, a = source
    dst = tmp_path / "d.zarr"
    recompress(src, dst, chunks=(32, 32), shards=(96, 128), layout=layout, codecs=json.dumps(INTEROP_CHAINS[chain]))
    lay = layout_of(zarr.open_array(dst, path="v"))
    kinds = {classify(read_index(f, lay), lay, f.stat().st_size) for f in _shard_files(dst)}
    assert kinds == {layout}
    with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
        assert zarrs is not None
        np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], a)
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(dst / "v")}}).result()
    np.testing.assert_array_equal(t.read().result(), a)


def test_inner_chunk_bytes_equal_zarr_pythons_for_a_core_chain(source, tmp_path):
    """Same chain, same data: zopt's shard files hold the very inner-chunk bytes zarr-python
    writes (only their order in the file differs: C order vs zarr's Morton order)."""
    src, a = source
    chain = INTEROP_CHAINS["zstd+crc32c"]
    recompress(src, tmp_path / "zopt.zarr", chunks=(32, 32), shards=(96, 128), codecs=json.dumps(chain))
    ref = zarr.create_array(
        tmp_path / "zarr.zarr", shape=a.shape, dtype="f4", fill_value=0, chunks=(32, 32), shards=(96, 128),
        serializer=BytesCodec(), compressors=[ZstdCodec(level=3), Crc32cCodec()],
    )
    ref[:] = a
    lay = layout_of(ref)
    ours = {f.relative_to(tmp_path / "zopt.zarr" / "v"): f for f in _shard_files(tmp_path / "zopt.zarr")}
    theirs = {f.relative_to(tmp_path / "zarr.zarr"): f for f in sorted((tmp_path / "zarr.zarr" / "c").rglob("*")) if f.is_file()}
    assert ours.keys() == theirs.keys()
    for rel in ours:
        assert _chunk_bytes(ours[rel], lay) == _chunk_bytes(theirs[rel], lay)


# -- stores without positional writes -----------------------------------------------------------------


def test_a_store_without_positional_writes_gets_packed_shards_and_says_so(source, tmp_path):
    from zarr.core.sync import sync
    from zarr.storage import MemoryStore

    src, a = source
    store = MemoryStore()
    report = recompress(src, store, chunks="y=50,x=52", shards="y=100,x=104", layout="fixed-slot", slot_parts=2)
    layout_notes = [n for n in report.notes if "positional writes" in n]  # beside the menu's choice
    assert len(layout_notes) == 1 and "packed" in layout_notes[0]
    assert report.arrays[0].layout == "compact"
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:], a)
    lay = layout_of(zarr.open_array(store, path="v"))
    keys = sorted(sync(_keys(store, "v/c/")))
    assert keys and report.arrays[0].stored_after == sum(len(_get(store, k)) for k in keys)
    for key in keys:  # packed: the chunks back to back after the index, nothing unused
        blob = _get(store, key)
        shard = tmp_path / "shard"
        shard.write_bytes(blob)
        table = read_index(shard, lay)
        used = table[table[:, 0] != EMPTY]
        assert int(used[:, 1].sum()) + lay.index_nbytes == len(blob)
    # the same through the CLI with an fsspec URL; a second run without --overwrite is refused
    url = f"memory://zopt-test-{tmp_path.name}.zarr"
    args = ["recompress", str(src), url, "--chunks", "y=50,x=52", "--shards", "y=100,x=104", "--layout", "fixed-slot", "--no-progress"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "note: layout: fixed slots need positional writes" in " ".join(res.output.split())
    np.testing.assert_array_equal(zarr.open_array(url, path="v")[:], a)
    res = CliRunner().invoke(main, args)
    assert res.exit_code != 0 and "--overwrite" in res.output


def test_a_failed_write_into_a_store_leaves_it_empty(source, failing_decision):
    from zarr.core.sync import sync
    from zarr.storage import MemoryStore

    src, _ = source
    explode, calls = failing_decision(3, "disk on fire")

    store = MemoryStore()
    with pytest.raises(RuntimeError, match="disk on fire"):
        recompress(src, store, chunks="y=50,x=52", shards="y=100,x=104", decision=explode, scheduler="synchronous")
    assert len(calls) > 3 and sync(_keys(store, "")) == []


async def _keys(store, prefix: str) -> list[str]:
    return [k async for k in store.list_prefix(prefix)]


def _get(store, key: str) -> bytes:
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    return sync(store.get(key, default_buffer_prototype())).to_bytes()


# -- in place: write fast, compress later --------------------------------------------------------------


def _fast_store(source, tmp_path, **kwargs) -> Path:
    """The source written fast: every inner chunk stored raw (mask 0), by default in fixed slots."""
    src, _ = source
    dst = tmp_path / "fast.zarr"
    kwargs = {"shards": "y=100,x=104", "layout": "fixed-slot", **kwargs}
    report = recompress(src, dst, chunks="y=50,x=52", decision="never", **kwargs)
    assert set(report.arrays[0].masks) == {0}
    return dst


@pytest.mark.parametrize("sharded", [True, False])
def test_in_place_rewrite_keeps_metadata_and_values_and_replaces_shards_packed(source, tmp_path, sharded):
    from zopt import recompress_in_place

    _, a = source
    store = _fast_store(source, tmp_path, **({} if sharded else {"shards": None}))
    meta = {p: p.read_bytes() for p in store.rglob("zarr.json")}
    report = recompress_in_place(store)
    (rep,) = report.arrays
    assert rep.stored_after < 0.7 * rep.stored_before and 0 not in rep.masks and sum(rep.masks.values()) == rep.chunks_written
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:], a)
    assert {p: p.read_bytes() for p in store.rglob("zarr.json")} == meta  # no metadata changed
    assert not [p for p in store.rglob("*") if ".zopt-" in p.name]  # no temporary files left
    if sharded:
        assert store_info(store, ["v"])[0].layout == "compact"  # fixed slots became packed shards
        headers = {(k, int(b)) for k, b in _inner_headers(store)}
        assert {m for _, m in headers} == set(rep.masks)


def _inner_headers(store: Path):
    lay = layout_of(zarr.open_array(store, path="v"))
    for f in _shard_files(store):
        for i, blob in _chunk_bytes(f, lay).items():
            yield (f.name, i), blob[0]


def test_in_place_rewrite_follows_a_plan_and_an_interrupted_one_loses_nothing(source, tmp_path, failing_decision):
    from zopt import recompress_in_place
    from zopt.planning.plan import Plan

    _, a = source
    store = _fast_store(source, tmp_path)
    res = CliRunner().invoke(main, ["plan", str(store), "--policy", "smallest", "-o", str(tmp_path / "p.zarr"), "--no-progress"])
    assert res.exit_code == 0, res.output
    planned = Plan.load(tmp_path / "p.zarr")["v"].masks
    # interrupted part way: some shards new, some old, every value still reads back
    explode, calls = failing_decision(8, "power cut")

    with pytest.raises(RuntimeError, match="power cut"):
        recompress_in_place(store, decision=explode, scheduler="synchronous")
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:], a)
    assert {m for _, m in _inner_headers(store)} == {0, 3}  # a mix of old and new shards
    # the CLI with the plan: every stored inner chunk gets its planned mask
    res = CliRunner().invoke(main, ["recompress", str(store), "--in-place", "--plan", str(tmp_path / "p.zarr"), "--no-progress"])
    assert res.exit_code == 0, res.output
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:], a)
    lay = layout_of(zarr.open_array(store, path="v"))
    for f in _shard_files(store):
        shard = tuple(int(p) for p in f.relative_to(store / "v" / "c").parts)
        for i, blob in _chunk_bytes(f, lay).items():
            local = np.unravel_index(i, lay.chunks_per_shard)
            index = tuple(s * n + c for s, n, c in zip(shard, lay.chunks_per_shard, local, strict=True))
            assert blob[0] == planned[index]


def test_in_place_refuses_what_would_change_metadata(source, tmp_path):
    from zopt import recompress_in_place

    src, _ = source  # its array has no conditional codec
    with pytest.raises(ValueError, match="array 'v' has no conditional codec"):
        recompress_in_place(src, ["v"])
    store = _fast_store(source, tmp_path)
    res = CliRunner().invoke(main, ["recompress", str(store), "--in-place", "--chunks", "y=10,x=10"])
    assert res.exit_code != 0 and "--chunks cannot be used" in res.output
    res = CliRunner().invoke(main, ["recompress", str(store), str(tmp_path / "x.zarr"), "--in-place"])
    assert res.exit_code != 0 and "give no DST" in res.output
    res = CliRunner().invoke(main, ["recompress", str(store)])
    assert res.exit_code != 0 and "--in-place" in res.output


def test_in_place_rewrite_writes_shards_under_the_arrays_own_chunk_keys(tmp_path):
    from zopt import recompress_in_place

    a = _field()
    store = tmp_path / "dot.zarr"
    z = zarr.open_group(store, mode="w").create_array(
        "v", shape=a.shape, chunks=(50, 52), shards=(100, 104), dtype="f4", fill_value=0,
        chunk_key_encoding={"name": "default", "separator": "."},
        compressors=[ConditionalCodec(codecs=[{"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 3}}])],
    )
    z[:] = a  # mask 0 everywhere, shards at v/c.0.0 …
    before = sorted(p.name for p in (store / "v").iterdir())
    report = recompress_in_place(store)
    assert sorted(p.name for p in (store / "v").iterdir()) == before  # replaced in place, no new c/ tree
    assert 0 not in report.arrays[0].masks
    lay = layout_of(zarr.open_array(store, path="v"))
    for name in before:
        if name.startswith("c."):
            assert all(blob[0] != 0 for blob in _chunk_bytes(store / "v" / name, lay).values())
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:], a)
