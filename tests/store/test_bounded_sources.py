"""Every decompression of source data is bounded by the decoded size the metadata implies
(issue 28): a chunk whose frame claims (or yields) more is refused in one line naming the chunk,
without allocating what it claims."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib

import numcodecs
import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from zopt.cli.commands import main
from zopt.codecs.bounded import decode_bounded
from zopt.errors import ChunkDecodeError, ZoptError

SHAPE, CHUNK = (32, 16), (16, 16)
RAW = 16 * 16 * 4  # bytes of one decoded chunk


def _frame_claiming(size: int) -> bytes:
    """A zstd frame header declaring ``size`` bytes (single segment), then one raw 4-byte block."""
    header = (0xFD2FB528).to_bytes(4, "little") + bytes([0xE0]) + size.to_bytes(8, "little")
    return header + (1 | (4 << 3)).to_bytes(3, "little") + b"abcd"


def _blosc_claiming(size: int) -> bytes:
    real = bytes(numcodecs.Blosc(cname="lz4").encode(np.zeros(64, "u1")))
    return real[:4] + size.to_bytes(4, "little") + real[8:]


HOSTILE = {
    # codec of the v3 array, stored bytes, what the message says
    "zstd": ({"name": "zstd", "configuration": {"level": 3}}, _frame_claiming(2**36), "zstd frame claims 68719476736"),
    "blosc": ({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "noshuffle", "typesize": 4}},
              _blosc_claiming(2**31), "blosc header claims 2147483648"),
    "gzip": ({"name": "gzip", "configuration": {"level": 5}}, gzip.compress(bytes(RAW * 64)), "gzip stream holds"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_v3_source_chunk_claiming_more_than_it_holds_is_refused_naming_it(tmp_path, kind):
    codec, stored, says = HOSTILE[kind]
    src = tmp_path / "src.zarr"
    z = zarr.create_group(str(src)).create_array("v", shape=SHAPE, chunks=CHUNK, dtype="f4", compressors=[codec],
                                                  dimension_names=("y", "x"))
    z[...] = 1.5
    (src / "v" / "c" / "1" / "0").write_bytes(stored)
    tracemalloc.start()
    try:
        with pytest.raises(ChunkDecodeError, match=rf"chunk 'v/c/1/0'.*{says}.*more than the {RAW}") as info:
            zarr.open_array(str(src), path="v", mode="r")[...]
        assert tracemalloc.get_traced_memory()[1] < 2**22  # nothing near the claim was allocated
    finally:
        tracemalloc.stop()
    assert isinstance(info.value, ZoptError)
    np.testing.assert_array_equal(zarr.open_array(str(src), path="v", mode="r")[:16], 1.5)  # the good chunk reads
    r = CliRunner().invoke(main, ["recompress", str(src), str(tmp_path / "out.zarr"), "--no-progress"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    line = " ".join(r.output.split())
    assert line.startswith("Error:") and "v/c/1/0" in line and says in line


@pytest.mark.parametrize("compressor, stored", [
    (numcodecs.Zstd(level=1), _frame_claiming(2**36)),
    (numcodecs.Blosc(cname="lz4"), _blosc_claiming(2**31)),
    (numcodecs.LZ4(), (2**31).to_bytes(4, "little") + b"\x00" * 8),
    (numcodecs.Zlib(level=1), zlib.compress(bytes(RAW * 64))),
])
def test_a_v2_source_chunk_claiming_more_is_refused_naming_it(tmp_path, compressor, stored):
    src = tmp_path / "v2.zarr"
    z = zarr.create_array(str(src), shape=SHAPE, chunks=CHUNK, dtype="f4", zarr_format=2, compressors=compressor)
    z[...] = 2.5
    (src / "1.0").write_bytes(stored)
    with pytest.raises(ChunkDecodeError, match=rf"chunk '1.0'.*more than the {RAW}"):
        zarr.open_array(str(src), mode="r")[...]
    np.testing.assert_array_equal(zarr.open_array(str(src), mode="r")[:16], 2.5)


@pytest.mark.parametrize("nc", [numcodecs.Zstd(), numcodecs.Blosc(), numcodecs.LZ4(), numcodecs.GZip(), numcodecs.Zlib(),
                                numcodecs.BZ2(), numcodecs.LZMA()], ids=lambda c: c.codec_id)
def test_bounded_decoding_gives_the_codec_s_own_output_up_to_the_limit(nc):
    data = np.random.default_rng(1).integers(0, 4, 5000, dtype="u1")
    enc = np.frombuffer(bytes(nc.encode(data)), np.uint8)
    np.testing.assert_array_equal(decode_bounded(nc, enc, data.size), data)
    with pytest.raises(ValueError, match="more than the 4999"):
        decode_bounded(nc, enc, data.size - 1)


@pytest.fixture(autouse=True)
def _zopt_pipeline():
    """The reads above are a zopt job's (bounded decoding, chunk keys in errors): zopt's pipeline,
    which plain zarr no longer gets from installing zopt (``zopt.codecs.zarr_config``)."""
    from zopt.codecs.zarr_config import zopt_pipeline

    with zopt_pipeline():
        yield
