"""The per-chunk write path that holds the GIL for microseconds (issue 34) writes the bytes it wrote before.

zstd goes through numcodecs' own libzstd with a context per thread (``zopt.compat.libzstd``), the
shuffle through numpy, the array→bytes step without zarr's buffer objects: every stored byte must
be the one zarr's own pipeline (or numcodecs) writes for the same chunk and chain.
"""

from __future__ import annotations

import json
import os
import threading

import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numcodecs import zstd as nzstd
from zarr.storage import MemoryStore

from zopt.codecs.chain import ChunkEncoder, chunk_spec
from zopt.codecs.grid import is_fill
from zopt.codecs.sync import shuffle_encoder, sync_encoder
from zopt.compat import libzstd
from zopt.compat.zarr_compat import resolve_codec
from zopt.store import shards
from zopt.store.chunk_feed import AlignedChunkReader

pytestmark = pytest.mark.skipif(not libzstd.available(), reason="numcodecs' zstd symbols are not reachable")

_BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
CHAINS = {
    "zstd": [_BYTES, {"name": "zstd", "configuration": {"level": 3}}],
    "shuffle-zstd": [_BYTES, {"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 1, "checksum": True}}],
    "numcodecs-shuffle-zstd": [_BYTES, {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
                               {"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
    "big-endian": [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "zstd", "configuration": {"level": 3}}],
    "conditional": [_BYTES, {"name": "conditional", "configuration": {"codecs": [{"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 3}}]}}],
    "blosc": [_BYTES, {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 5, "shuffle": "bitshuffle", "blocksize": 0}}],
    "pcodec": [{"name": "numcodecs.pcodec", "configuration": {"level": 8}}],
}
DTYPES = ["u1", "i2", "<u4", "f4", "f8", "i8", "c8", "bool"]


def _zdtype(dtype: np.dtype):
    """zarr's data type for ``dtype`` (numpy's complex types match zopt's too: named explicitly)."""
    from zarr.core.dtype import Complex64, Complex128

    return {"c8": Complex64(), "c16": Complex128()}.get(np.dtype(dtype).str[1:], np.dtype(dtype))


def _zarr_bytes(values: np.ndarray, chain: list) -> bytes | None:
    """The stored bytes of one chunk holding ``values``, as zarr's pipeline writes them."""
    store = MemoryStore()
    codecs = [resolve_codec(c, where="codecs") for c in chain]
    arr = zarr.create_array(store, shape=values.shape, chunks=values.shape, dtype=_zdtype(values.dtype), fill_value=0,
                            serializer=codecs[0], compressors=codecs[1:] or None, filters=None,
                            config={"write_empty_chunks": True})
    arr[...] = values
    key = "c/" + "/".join("0" * values.ndim)
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    got = sync(store.get(key, prototype=default_buffer_prototype()))
    return None if got is None else got.to_bytes()


def _values(draw_dtype: str, shape: tuple[int, ...], seed: int, smooth: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if draw_dtype == "bool":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    dt = np.dtype(draw_dtype)
    base = np.cumsum(rng.normal(0, 1, n)) if smooth else rng.normal(0, 1e3, n)
    if dt.kind == "c":
        return (base + 1j * base[::-1]).astype(dt).reshape(shape)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return np.clip(base, info.min, info.max).astype(dt).reshape(shape)
    return base.astype(dt).reshape(shape)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=st.sampled_from(sorted(CHAINS)), dtype=st.sampled_from(DTYPES),
       shape=st.sampled_from([(7,), (64, 33), (5, 6, 7), (1,), (300,)]), seed=st.integers(0, 2**16), smooth=st.booleans())
def test_the_fast_path_writes_zarrs_bytes(chain, dtype, shape, seed, smooth):
    if chain == "pcodec" and np.dtype(dtype).kind not in "iuf" or chain == "pcodec" and np.dtype(dtype).itemsize == 1:
        return  # pcodec has no 8-bit, bool or complex types
    if chain == "numcodecs-shuffle-zstd" and np.dtype(dtype).itemsize != 4:
        return  # numcodecs' shuffle refuses lengths that are not whole 4-byte elements
    values = _values(dtype, shape, seed, smooth)
    codecs = [resolve_codec(c, where="codecs") for c in CHAINS[chain]]
    spec = chunk_spec(shape, zarr.create_array(MemoryStore(), shape=shape, dtype=_zdtype(values.dtype)).metadata.data_type, 0)
    encoder = ChunkEncoder(codecs, spec)
    assert encoder.encode(values).data.tobytes() == _zarr_bytes(values, CHAINS[chain])
    # a view that is not C-contiguous is encoded as its C-order copy
    if values.ndim == 2 and values.shape[1] > 1:
        wide = np.concatenate([values, values], axis=1)[:, : values.shape[1]]
        assert encoder.encode(wide).data.tobytes() == encoder.encode(np.ascontiguousarray(wide)).data.tobytes()


@settings(max_examples=60, deadline=None)
@given(data=st.binary(min_size=0, max_size=5000), level=st.sampled_from([-5, 0, 1, 3, 9, 19, 22, 99]), checksum=st.booleans(),
       head=st.integers(0, 3))
def test_libzstd_frames_are_numcodecs_frames(data, level, checksum, head):
    src = np.frombuffer(data, dtype=np.uint8).copy()
    out = libzstd.compress(src, level, checksum, head=head)
    assert out[head:].tobytes() == nzstd.compress(data, level, checksum)
    back = np.empty(len(data) + 1, dtype=np.uint8)
    assert libzstd.decompress_into(out[head:], back) == len(data)
    assert back[: len(data)].tobytes() == data


def test_libzstd_contexts_are_per_thread():
    rng = np.random.default_rng(1)
    chunks = [np.cumsum(rng.integers(0, 3, 1 << 16)).astype(np.uint8) for _ in range(8)]
    expected = [nzstd.compress(c, 3) for c in chunks]
    results: dict[int, list] = {}

    def work(k: int) -> None:
        results[k] = [libzstd.compress(c, 3).tobytes() for c in chunks for _ in range(3)][::3]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == expected for r in results.values())


def test_libzstd_refuses_bytes_it_cannot_decode():
    frame = libzstd.compress(np.arange(1000, dtype=np.uint8), 3)
    out = np.empty(1000, dtype=np.uint8)
    with pytest.raises(RuntimeError, match="zstd decompression error"):
        libzstd.decompress_into(frame[:-3], out)
    with pytest.raises(RuntimeError, match="zstd decompression error"):
        libzstd.decompress_into(frame, out[:999])
    with pytest.raises(ValueError, match="holds 1000 bytes of content, expected 1001"):
        libzstd.decompress_into(frame, np.empty(2000, np.uint8), 1001)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 8, 12])
@pytest.mark.parametrize("n", [0, 1, 24, 1000, 1003])
def test_shuffle_encoder_is_numcodecs_shuffle(size, n):
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    nc = numcodecs.Shuffle(elementsize=size)
    fast = shuffle_encoder(size, lambda d: np.frombuffer(nc.encode(d), np.uint8))
    if n % size:
        with pytest.raises(ValueError, match="not an integer multiple"):
            fast(data)
        return
    assert fast(data).tobytes() == bytes(nc.encode(data))
    codec = resolve_codec({"name": "numcodecs.shuffle", "configuration": {"elementsize": size}}, where="codecs")
    assert sync_encoder(codec, None)(data).tobytes() == bytes(nc.encode(data))


def test_the_fill_check_answers_from_the_first_element_and_stays_bitwise():
    fill = np.asarray(0.0, "f4")
    a = np.zeros((4, 5), "f4")
    assert is_fill(a, fill)
    a[-1, -1] = 1
    assert not is_fill(a, fill)  # the first element equals the fill value: the whole chunk is looked at
    assert not is_fill(np.full((4, 5), -0.0, "f4"), fill)  # bitwise: -0.0 is not 0.0
    b = np.ones((3, 3), "f8")
    assert not is_fill(b, np.asarray(1.5, "f8")) and is_fill(b, np.asarray(1.0, "f8"))
    assert is_fill(np.full(6, np.nan, "f4"), np.asarray(np.nan, "f4"))


def test_inner_chunk_items_are_the_inner_chunks_in_shard_order():
    layout = shards.ShardLayout((4, 6, 5), (2, 3, 2), "end", (), (), None, 0)
    for shape in [(8, 12, 10), (7, 11, 9), (5, 7, 6), (3, 4, 1)]:
        for shard in np.ndindex(*[-(-s // t) for s, t in zip(shape, (4, 6, 5), strict=True)]):
            expected = []
            for i, local in enumerate(np.ndindex(*layout.chunks_per_shard)):
                index = tuple(s * n + c for s, n, c in zip(shard, layout.chunks_per_shard, local, strict=True))
                start = [c * k for c, k in zip(index, layout.inner_shape, strict=True)]
                if all(o < n for o, n in zip(start, shape, strict=True)):
                    region = tuple(slice(o, min(o + k, n)) for o, k, n in zip(start, layout.inner_shape, shape, strict=True))
                    expected.append((i, index, region, all(o + k <= n for o, k, n in zip(start, layout.inner_shape, shape, strict=True))))
            assert layout.inner_chunk_items(shard, shape) == expected
            assert list(layout.inner_chunks(shard, shape)) == [e[:3] for e in expected]


def test_parts_are_written_whole_when_a_write_takes_a_few_bytes_at_a_time(tmp_path, monkeypatch):
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, memoryview(data)[:5]))
    parts = [memoryview(bytes([k]) * (k * 3)) for k in range(9)]
    with open(tmp_path / "f", "wb") as f:
        shards.write_all(f.fileno(), parts)
    assert (tmp_path / "f").read_bytes() == b"".join(bytes(p) for p in parts)


def _source(tmp_path, values, compressors):
    g = zarr.open_group(tmp_path / "s.zarr", mode="w")
    arr = g.create_array("v", shape=values.shape, chunks=(4, 4), dtype=values.dtype, fill_value=0, compressors=compressors)
    arr[:] = values
    return tmp_path / "s.zarr" / "v" / "c"


def test_a_zstd_chunk_holding_fewer_bytes_than_a_chunk_is_named_not_read(tmp_path, loops_kind):
    """A frame of 8 of the 16 values of a chunk used to decode into the reader's buffer without
    an error, the rest of the buffer left from the chunk read before it."""
    from zarr.codecs import ZstdCodec

    from zopt import recompress
    from zopt.errors import ChunkDecodeError

    values = np.arange(64, dtype="f4").reshape(8, 8) + 1
    chunks = _source(tmp_path, values, [ZstdCodec(level=3)])
    (chunks / "1" / "1").write_bytes(nzstd.compress(np.arange(8, dtype="f4") + 100, 3))
    reader = AlignedChunkReader.open(tmp_path / "s.zarr", "v", (4, 4), np.dtype("f4"))
    reader.read((0, 0), np.asarray(0, "f4"))
    with pytest.raises(ChunkDecodeError, match=r"c/1/1"):
        reader.read((1, 1), np.asarray(0, "f4"))
    with pytest.raises(ChunkDecodeError, match=r"c/1/1"):
        recompress(tmp_path / "s.zarr", tmp_path / "d.zarr", chunks=(4, 4), shards=(8, 8), codecs=json.dumps(CHAINS["zstd"]))
    assert not (tmp_path / "d.zarr").exists()


def test_a_raw_chunk_file_of_the_wrong_length_is_named(tmp_path, loops_kind):
    from zopt.errors import ChunkDecodeError

    values = np.arange(64, dtype="f4").reshape(8, 8) + 1
    chunks = _source(tmp_path, values, None)
    reader = AlignedChunkReader.open(tmp_path / "s.zarr", "v", (4, 4), np.dtype("f4"))
    np.testing.assert_array_equal(reader.read((1, 0), np.asarray(0, "f4")), values[4:, :4])
    (chunks / "1" / "0").write_bytes((chunks / "1" / "0").read_bytes() + b"x")
    with pytest.raises(ChunkDecodeError, match=r"c/1/0"):
        reader.read((1, 0), np.asarray(0, "f4"))
    with pytest.raises(ChunkDecodeError, match=r"c/1/0"):
        reader.read_many([(0, 0), (1, 0)], np.empty((2, 4, 4), "f4"), np.asarray(0, "f4"))
    (chunks / "1" / "0").write_bytes(b"short")
    with pytest.raises(ChunkDecodeError, match=r"c/1/0"):
        reader.read((1, 0), np.asarray(0, "f4"))
    with pytest.raises(ChunkDecodeError, match=r"c/1/0"):
        reader.read_many([(0, 0), (1, 0)], np.empty((2, 4, 4), "f4"), np.asarray(0, "f4"))


def test_a_zstd_chunk_file_of_several_frames_is_read_and_one_over_its_bound_refused(tmp_path, loops_kind):
    """Two frames whose sum is the chunk are a valid chunk (zarr-python reads it); a file larger
    than any encoding of one chunk (its bound, 1 KiB spare) is refused by its size, unread."""
    from zarr.codecs import ZstdCodec

    from zopt.errors import ChunkDecodeError

    values = np.arange(64, dtype="f4").reshape(8, 8) + 1
    chunks = _source(tmp_path, values, [ZstdCodec(level=3)])
    block = np.ascontiguousarray(values[:4, 4:])
    padding = nzstd.compress(b"", 3) * 20  # empty frames: more than one frame of the chunk takes
    (chunks / "0" / "1").write_bytes(nzstd.compress(block[:2], 3) + padding + nzstd.compress(block[2:], 3))
    reader = AlignedChunkReader.open(tmp_path / "s.zarr", "v", (4, 4), np.dtype("f4"))
    assert (chunks / "0" / "1").stat().st_size > nzstd.compress(block, 3).__len__() + 100
    np.testing.assert_array_equal(reader.read((0, 1), np.asarray(0, "f4")), block)
    (chunks / "1" / "1").write_bytes(nzstd.compress(block, 3) + nzstd.compress(b"", 3) * 200)
    assert (chunks / "1" / "1").stat().st_size > reader._bound
    with pytest.raises(ChunkDecodeError, match=r"c/1/1.*more than the \d+ bytes one encoded chunk"):
        reader.read((1, 1), np.asarray(0, "f4"))
    with pytest.raises(ChunkDecodeError, match=r"c/1/1.*more than the \d+ bytes one encoded chunk"):
        reader.read_many([(0, 0), (1, 1)], np.empty((2, 4, 4), "f4"), np.asarray(0, "f4"))
    out = np.empty((2, 4, 4), "f4")
    reader.read_many([(0, 0), (0, 1)], out, np.asarray(0, "f4"))  # in a batch too
    np.testing.assert_array_equal(out[1], block)
    np.testing.assert_array_equal(out[0], values[:4, :4])
