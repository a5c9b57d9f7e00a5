"""Encoding a shard's inner chunks in batches (issue 34, part 2) writes the bytes of encoding them one by one.

``zopt.codecs.batch.BatchEncoder`` runs each step of a chain once per stack of chunks and compresses
through numcodecs' own libzstd / c-blosc with ``ctypes``; every chunk's stored bytes and masks must
be those ``ChunkEncoder.encode`` gives the chunk alone (itself tested against zarr's pipeline in
test_gil_path.py), and a job must write the same shard files either way.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numcodecs import zstd as nzstd
from zarr.storage import MemoryStore

from zopt.codecs import batch as batch_mod
from zopt.codecs.batch import BatchEncoder
from zopt.codecs.chain import ChunkEncoder, chunk_spec
from zopt.codecs.decisions import CompressIfSmaller, FixedMask
from zopt.compat import libblosc, libzstd
from zopt.compat.zarr_compat import resolve_codec
from zopt.errors import ChunkDecodeError
from zopt.store.chunk_feed import AlignedChunkReader

pytestmark = pytest.mark.skipif(not libzstd.available(), reason="numcodecs' zstd symbols are not reachable")

_BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
_ZSTD = {"name": "zstd", "configuration": {"level": 3}}
_SHUFFLE_ZSTD = [{"name": "shuffle"}, _ZSTD]
CHAINS = {
    "bytes": [_BYTES],
    "shuffle": [_BYTES, {"name": "shuffle"}],
    "zstd": [_BYTES, {"name": "zstd", "configuration": {"level": 1, "checksum": True}}],
    "shuffle-zstd": [_BYTES, *_SHUFFLE_ZSTD],
    "numcodecs-shuffle-zstd": [_BYTES, {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}}, _ZSTD],
    "blosc-bitshuffle": [_BYTES, {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 5, "shuffle": "bitshuffle", "blocksize": 0}}],
    "blosc-shuffle": [_BYTES, {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "blocksize": 0}}],
    "blosc-noshuffle": [_BYTES, {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 1, "shuffle": "noshuffle", "blocksize": 0}}],
    "conditional-zstd": [_BYTES, {"name": "conditional", "configuration": {"codecs": [_ZSTD]}}],
    "conditional": [_BYTES, {"name": "conditional", "configuration": {"codecs": _SHUFFLE_ZSTD}}],
    "pcodec": [{"name": "numcodecs.pcodec", "configuration": {"level": 8}}],
}
DECISIONS = {"none": None, "if-smaller": CompressIfSmaller(), "mask-0": FixedMask(0), "mask-1": FixedMask(1),
             "mask-2": FixedMask(2), "mask-3": FixedMask(3)}


def _encoder(chain: str, shape: tuple[int, ...], dtype: str, decision=None) -> ChunkEncoder:
    codecs = [resolve_codec(c, where="codecs") for c in CHAINS[chain]]
    spec = chunk_spec(shape, zarr.create_array(MemoryStore(), shape=shape, dtype=dtype).metadata.data_type, 0)
    encoder = ChunkEncoder(codecs, spec)
    return encoder.with_decision(decision) if decision is not None else encoder


def _chunk(kind: str, shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    n = int(np.prod(shape))
    dt = np.dtype(dtype)
    if kind == "random":  # incompressible bits: stored as they are
        return rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8).view(dt).reshape(shape)
    if kind == "constant":
        return np.full(shape, 7, dtype=dt)
    if kind == "half":  # random bits, then zeros: compressed, but the shuffle loses
        raw = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8)
        raw[raw.size // 2 :] = 0
        return raw.view(dt).reshape(shape)
    walk = np.cumsum(rng.normal(0, 1, n))  # smooth: the shuffle wins
    if kind.startswith("noisy"):  # a smooth field under noise of 10**k: near the decisions' edges
        walk = walk + rng.normal(0, 10.0 ** int(kind[5:]), n)
    return (walk * 10).astype(dt).reshape(shape) if dt.kind in "iu" else walk.astype(dt).reshape(shape)


def _in_a_thread(fn):
    """``fn()`` run in a worker thread, as a job's tasks run (numcodecs' blosc compresses with one
    thread there; in the main thread its bytes vary from call to call)."""
    out: list = []
    errors: list = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return out[0]


def _compare(encoder: ChunkEncoder, stack: np.ndarray, limit: int | None = None) -> None:
    """The batch's chunks are ``encoder.encode``'s, byte for byte and mask for mask."""
    batch = BatchEncoder.of(encoder)
    assert batch is not None
    n = len(stack)
    positions = list(range(3, 3 + 2 * n, 2))
    indices = [(k, 0) for k in range(n)]

    def both():
        got = batch.encode(stack, positions, indices, limit=limit)
        want = [encoder.encode(stack[k], indices[k], limit=limit) for k in range(n)]
        return got, want

    got, want = _in_a_thread(both)
    assert len(got) == n and got.positions.tolist() == positions
    chunks = list(got.chunks())
    assert [c[0] for c in chunks] == positions
    for k, ((_, data, masks), w) in enumerate(zip(chunks, want, strict=True)):
        assert data.tobytes() == w.data.tobytes(), f"chunk {k}"
        assert tuple(masks) == tuple(w.masks), f"chunk {k}"
    assert b"".join(bytes(p) for p in got.parts()) == b"".join(w.data.tobytes() for w in want)
    assert got.sizes.tolist() == [w.data.size for w in want]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=st.sampled_from(sorted(CHAINS)), dtype=st.sampled_from(["u1", "i2", "f4", "f8"]),
       shape=st.sampled_from([(16, 16), (7,), (130, 130), (33, 65)]),
       kinds=st.lists(st.sampled_from(["smooth", "random", "constant", "half", *[f"noisy{k}" for k in range(-3, 4)]]),
                      min_size=1, max_size=8),
       seed=st.integers(0, 2**16))
def test_a_batch_is_its_chunks_encoded_one_by_one(chain, dtype, shape, kinds, seed):
    if chain == "pcodec" and np.dtype(dtype).itemsize == 1:
        return  # pcodec has no 8-bit types
    if chain == "numcodecs-shuffle-zstd" and np.prod(shape) * np.dtype(dtype).itemsize % 4:
        return  # numcodecs' shuffle refuses partial elements (and the batch encoder does not take it)
    rng = np.random.default_rng(seed)
    stack = np.stack([_chunk(k, shape, dtype, rng) for k in kinds])
    decisions = ["if-smaller", "none", "mask-1"] if chain == "conditional-zstd" else \
        ["if-smaller", "none", "mask-0", "mask-1", "mask-2", "mask-3"] if chain == "conditional" else [None]
    for d in decisions:
        _compare(_encoder(chain, shape, dtype, DECISIONS.get(d)), stack)


@pytest.mark.parametrize("shape", [(64, 64), (130, 130)])  # full trials, sampled trials
@pytest.mark.parametrize("chain", ["conditional", "conditional-zstd", "shuffle-zstd", "blosc-shuffle"])
def test_fields_under_growing_noise_take_every_decision_as_chunks_alone_do(chain, shape):
    """A smooth field under noise from 1e-3 to 1e3: the shuffle wins, then loses, then nothing
    compresses, so chunks of one batch take different branches."""
    rng = np.random.default_rng(0)
    base = np.cumsum(rng.normal(0, 1, shape[0] * shape[1])).reshape(shape)
    stack = np.stack([(base + rng.normal(0, s, shape)).astype("f4") for s in np.geomspace(1e-3, 1e3, 13)]
                     + [_chunk("random", shape, "f4", rng), np.zeros(shape, "f4")])
    encoder = _encoder(chain, shape, "f4", CompressIfSmaller() if chain.startswith("conditional") else None)
    _compare(encoder, stack)
    if chain == "conditional":
        masks = {m for _, _, m in BatchEncoder.of(encoder).encode(stack, range(15), [(k, 0) for k in range(15)]).chunks()}
        assert masks >= {(0,), (2,), (3,)}


def test_a_chunk_whose_frame_is_exactly_its_size_is_encoded_alone():
    """A tie (the frame exactly as long as the chunk) is decided as ``CompressIfSmaller`` decides
    it: the batch encoder hands that chunk to ``ChunkEncoder.encode``. zstd only writes a
    compressed block that gains a few bytes, so a tie needs two blocks: 128 KiB of random bytes
    stored raw, then a short block whose gain is tuned to the frame's headers."""
    block, width = 131072, 131672
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 256, width, dtype=np.uint8)
    low = rng.integers(0, 64, width, dtype=np.uint8)
    tie = None
    for m in range(width - block):
        raw = bits.copy()
        raw[block : block + m] = low[block : block + m]
        if len(nzstd.compress(raw, 3)) == width:
            tie = raw
            break
    assert tie is not None
    stack = np.stack([tie, _chunk("smooth", (width,), "u1", rng), tie, _chunk("random", (width,), "u1", rng)])
    calls = []
    encoder = _encoder("conditional-zstd", (width,), "u1", CompressIfSmaller())
    real = type(encoder).encode
    _compare(encoder, stack)
    type(encoder).encode = lambda self, *a, **k: calls.append(1) or real(self, *a, **k)
    try:
        BatchEncoder.of(encoder).encode(stack, [0, 1, 2, 3], [(k,) for k in range(4)])
    finally:
        type(encoder).encode = real
    assert len(calls) == 2  # the two ties, encoded alone


@pytest.mark.parametrize("chain", ["shuffle-zstd", "conditional", "blosc-bitshuffle"])
def test_a_chunk_over_its_slot_is_encoded_alone_under_the_limit(chain):
    rng = np.random.default_rng(5)
    stack = np.stack([_chunk(k, (32, 32), "f4", rng) for k in ("smooth", "random", "half", "random")])
    encoder = _encoder(chain, (32, 32), "f4", CompressIfSmaller() if chain == "conditional" else None)
    limit = encoder.max_encoded_size()
    _compare(encoder, stack, limit=limit)
    if chain == "conditional":  # a slot smaller than a compressed chunk: that chunk is stored with mask 0
        _compare(encoder, stack, limit=32 * 32 * 4 + 1)


def test_blosc_rows_are_numcodecs_chunks_in_worker_threads():
    from numcodecs import blosc

    rng = np.random.default_rng(3)
    rows = np.stack([_chunk(k, (5000,), "<i4", rng).view(np.uint8) for k in ("smooth", "random", "half")])
    for cname, shuffle, typesize in [("zstd", 2, 4), ("lz4", 1, 4), ("blosclz", 0, 1), ("zlib", 1, 2)]:
        compress = libblosc.compressor(cname, 5, shuffle, typesize, 0)
        assert compress is not None
        data, ends = _in_a_thread(lambda c=compress: c(rows, 3))  # noqa: B023
        expected = _in_a_thread(lambda c=cname, s=shuffle, t=typesize: [blosc.compress(r, c.encode(), 5, s, 0, t) for r in rows])
        starts = [0, *ends[:-1].tolist()]
        assert [data[s + 3 : e].tobytes() for s, e in zip(starts, ends.tolist(), strict=True)] == expected


def test_libzstd_frames_of_rows_decode_back_in_one_call():
    rng = np.random.default_rng(4)
    rows = np.stack([_chunk(k, (3000,), "u1", rng) for k in ("smooth", "random", "constant", "half")])
    data, ends = libzstd.compress_rows(rows, 3, False, head=0)
    starts = [0, *ends[:-1].tolist()]
    assert [data[s:e].tobytes() for s, e in zip(starts, ends.tolist(), strict=True)] == [nzstd.compress(r, 3) for r in rows]
    out = np.empty_like(rows)
    assert libzstd.decompress_frames(data, ends, out, 3000)
    np.testing.assert_array_equal(out, rows)
    assert not libzstd.decompress_frames(data, ends, np.empty((4, 2999), np.uint8), 2999)  # another chunk size
    bad = data.copy()
    bad[ends[0]] ^= 0xFF  # frame 1 is not a zstd frame: refused, so the caller names the chunk
    assert not libzstd.decompress_frames(bad, ends, out, 3000)
    short = ends.copy()
    short[2] -= 1  # frame 2 one byte short, frame 3 one byte long
    assert not libzstd.decompress_frames(data, short, out, 3000)
    two = np.concatenate([data[: ends[0]], data[: ends[0]]])  # one piece holding two frames
    assert not libzstd.decompress_frames(two, np.array([two.size]), np.empty(6000, np.uint8), 6000)


def _aligned_source(tmp_path: Path, values: np.ndarray, chunks: tuple[int, ...], compressors) -> Path:
    g = zarr.open_group(tmp_path / "s.zarr", mode="w")
    g.create_array("v", shape=values.shape, chunks=chunks, dtype=values.dtype, fill_value=0, compressors=compressors)[:] = values
    return tmp_path / "s.zarr"


@pytest.mark.parametrize("zstd", [True, False])
def test_read_many_reads_what_read_reads_and_names_a_bad_chunk(tmp_path, zstd, loops_kind):
    from zarr.codecs import ZstdCodec

    values = (np.arange(12 * 8, dtype="f4").reshape(12, 8) + 1)
    values[4:8, :4] = 0  # a fill-value chunk: not stored, read as the fill value
    src = _aligned_source(tmp_path, values, (4, 4), [ZstdCodec(level=3)] if zstd else None)
    assert not (src / "v" / "c" / "1" / "0").exists()
    reader = AlignedChunkReader.open(src, "v", (4, 4), np.dtype("f4"))
    fill = np.asarray(0, "f4")
    indices = [(0, 0), (0, 1), (1, 0), (1, 1), (2, 1)]
    out = np.full((5, 4, 4), 99, "f4")
    reader.read_many(indices, out, fill)
    for k, (i, j) in enumerate(indices):
        np.testing.assert_array_equal(out[k], values[4 * i : 4 * i + 4, 4 * j : 4 * j + 4])
    bad = src / "v" / "c" / "1" / "1"
    bad.write_bytes(nzstd.compress(np.arange(8, dtype="f4"), 3) if zstd else b"short")
    with pytest.raises(ChunkDecodeError, match=r"c/1/1"):
        reader.read_many(indices, out, fill)


def _store_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.name != "zarr.json"}


@pytest.mark.parametrize("source", ["aligned-zstd", "region"])
@pytest.mark.parametrize("chain", ["shuffle-zstd", "conditional", "blosc-bitshuffle", "pcodec"])
@pytest.mark.parametrize("layout", ["compact", "fixed-slot"])
def test_a_job_writes_the_same_shards_with_and_without_batches(tmp_path, monkeypatch, source, chain, layout, loops_kind):
    """On a LocalStore: an array whose edge cuts inner chunks and shards, with chunks equal to the
    fill value and chunks absent from the source, read chunk by chunk (``read_many``) or by region."""
    from zarr.codecs import ZstdCodec

    from zopt import recompress

    rng = np.random.default_rng(11)
    values = np.cumsum(rng.normal(0, 1, (70, 90)), axis=1).astype("f4")
    values[:16, 16:48] = rng.integers(0, 2**32, (16, 32), dtype=np.uint32).view("f4")
    values[16:32, :] = 0  # fill value: absent from the source and from the target
    src = _aligned_source(tmp_path, values, (16, 16) if source == "aligned-zstd" else (35, 45),
                          [ZstdCodec(level=1)] if source == "aligned-zstd" else None)
    if layout == "fixed-slot" and chain == "pcodec":
        layout = "compact"  # pcodec's slots are sized by its bound: kept short here
    kw = dict(codecs=json.dumps(CHAINS[chain]), chunks=(16, 16), shards=(32, 48), layout=layout)
    if layout == "fixed-slot":
        kw["checksum"] = False
    calls = []
    real = BatchEncoder.encode

    def counted(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(BatchEncoder, "encode", counted)
    recompress(src, tmp_path / "batch.zarr", **kw)
    assert calls, "the batch encoder was not used"
    monkeypatch.setattr(BatchEncoder, "of", classmethod(lambda cls, encoder: None))
    recompress(src, tmp_path / "each.zarr", **kw)
    batched, each = _store_files(tmp_path / "batch.zarr"), _store_files(tmp_path / "each.zarr")
    assert batched.keys() == each.keys() and batched == each
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "batch.zarr", path="v")[:], values)


def test_a_batch_holds_about_group_bytes_of_chunks(tmp_path, monkeypatch):
    """Peak memory: a shard is encoded ``GROUP_BYTES`` of chunks at a time."""
    from zopt import recompress

    monkeypatch.setattr(batch_mod, "GROUP_BYTES", 4 * 16 * 16 * 4)
    sizes = []
    real = BatchEncoder.encode

    def sized(self, stack, *a, **k):
        sizes.append(len(stack))
        return real(self, stack, *a, **k)

    monkeypatch.setattr(BatchEncoder, "encode", sized)
    values = np.cumsum(np.ones((64, 64), "f4"), axis=0)
    src = _aligned_source(tmp_path, values, (16, 16), None)
    recompress(src, tmp_path / "d.zarr", codecs=json.dumps(CHAINS["shuffle-zstd"]), chunks=(16, 16), shards=(64, 64))
    assert sizes and max(sizes) == 4 and sum(sizes) == 16
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "d.zarr", path="v")[:], values)
    assert os.path.isdir(tmp_path / "d.zarr")
