"""Source chunks read straight into a reused buffer when they are the target's inner chunks."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from zarr.codecs import GzipCodec, ZstdCodec

from zopt import recompress
from zopt.errors import ChunkDecodeError
from zopt.store.chunk_feed import AlignedChunkReader


def _store(path, a, chunks, compressors=None, fill=0):
    g = zarr.open_group(path, mode="w")
    arr = g.create_array("v", shape=a.shape, chunks=chunks, dtype=a.dtype, fill_value=fill,
                         dimension_names=("y", "x"), compressors=compressors)
    arr[:] = a
    return arr


@pytest.fixture
def values():
    rng = np.random.default_rng(5)
    a = np.round(rng.normal(10, 3, (70, 90)), 1).astype("f4")
    a[:32, :32] = 0  # one chunk equal to the fill value
    return a


def test_reader_is_used_only_for_aligned_bytes_and_zstd_chains(tmp_path, values):
    f4 = np.dtype("f4")
    _store(tmp_path / "z.zarr", values, (32, 32), [ZstdCodec(level=3)])
    _store(tmp_path / "raw.zarr", values, (32, 32), None)
    _store(tmp_path / "gzip.zarr", values, (32, 32), [GzipCodec()])
    _store(tmp_path / "other.zarr", values, (16, 32), [ZstdCodec(level=3)])
    assert AlignedChunkReader.open(tmp_path / "z.zarr", "v", (32, 32), f4) is not None
    assert AlignedChunkReader.open(tmp_path / "raw.zarr", "v", (32, 32), f4) is not None
    assert AlignedChunkReader.open(tmp_path / "gzip.zarr", "v", (32, 32), f4) is None
    assert AlignedChunkReader.open(tmp_path / "other.zarr", "v", (32, 32), f4) is None
    assert AlignedChunkReader.open(tmp_path / "z.zarr", "v", (32, 32), np.dtype("f8")) is None
    assert AlignedChunkReader.open(tmp_path / "nothing.nc", "v", (32, 32), f4) is None


@pytest.mark.parametrize("compressors", [None, [ZstdCodec(level=3)]])
def test_chunks_edges_and_absent_chunks_read_as_zarr_reads_them(tmp_path, values, compressors):
    arr = _store(tmp_path / "s.zarr", values, (32, 32), compressors)
    reader = AlignedChunkReader.open(tmp_path / "s.zarr", "v", (32, 32), np.dtype("f4"))
    fill = np.asarray(0, dtype="f4")
    for index in np.ndindex(3, 3):
        got = reader.read(index, fill)
        assert got.shape == (32, 32) and got.flags.c_contiguous
        region = tuple(slice(i * 32, min((i + 1) * 32, s)) for i, s in zip(index, values.shape, strict=True))
        np.testing.assert_array_equal(got[: region[0].stop - region[0].start, : region[1].stop - region[1].start], arr[region])
    # the fill-value chunk is not stored: it reads as the fill value
    assert not (tmp_path / "s.zarr" / "v" / "c" / "0" / "0").exists()
    assert np.all(reader.read((0, 0), fill) == 0)


def test_a_corrupt_source_chunk_is_named(tmp_path, values):
    _store(tmp_path / "s.zarr", values, (32, 32), [ZstdCodec(level=3)])
    chunk = tmp_path / "s.zarr" / "v" / "c" / "1" / "2"
    chunk.write_bytes(chunk.read_bytes()[:-7])
    # named by the menu's trial read (v/c/1/2) or the aligned read (c/1/2), whichever reads it first
    with pytest.raises(ChunkDecodeError, match=r"chunk '(v/)?c/1/2'"):
        recompress(tmp_path / "s.zarr", tmp_path / "d.zarr", chunks=(32, 32), shards=(64, 96))
    assert not (tmp_path / "d.zarr").exists()


def test_recompress_from_aligned_chunks_equals_the_source(tmp_path, values):
    _store(tmp_path / "s.zarr", values, (32, 32), [ZstdCodec(level=3)])
    for layout in ("compact", "fixed-slot"):
        dst = tmp_path / f"{layout}.zarr"
        report = recompress(tmp_path / "s.zarr", dst, chunks=(32, 32), shards=(64, 96), layout=layout)
        np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], values)
        assert report.arrays[0].chunks_written == 8  # the fill-value chunk is not stored
