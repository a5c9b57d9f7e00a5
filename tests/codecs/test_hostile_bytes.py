"""Hostile bytes and configurations: bounded memory, zopt errors naming codec and chunk, every
configuration field bounded on construction and from JSON, packbits padding bits."""

from __future__ import annotations

import tracemalloc

import ml_dtypes
import numcodecs
import numpy as np
import pytest
import zarr
from zarr.core.dtype import Float32, Int8

from zopt.codecs.bounded import zstd_content_size
from zopt.codecs.chain import chunk_spec
from zopt.codecs.conditional import ConditionalCodec
from zopt.codecs.packbits import PackBitsCodec
from zopt.codecs.shuffle import ShuffleCodec
from zopt.errors import ChunkDecodeError, ZoptError

ZSTD = {"name": "zstd", "configuration": {"level": 3}}


def _frame_claiming(size: int) -> bytes:
    """A zstd frame header declaring ``size`` content bytes (single segment, 8-byte field), then
    one raw block of 4 bytes: valid up to the claim."""
    header = (0xFD2FB528).to_bytes(4, "little") + bytes([0xE0]) + size.to_bytes(8, "little")
    block = (1 | (0 << 1) | (4 << 3)).to_bytes(3, "little") + b"abcd"  # last block, raw, 4 bytes
    return header + block


def test_the_frame_content_size_is_read_from_the_header():
    for n in (0, 5, 300, 70000, 10**6):
        frame = np.frombuffer(numcodecs.Zstd().encode(np.zeros(n, "u1")), np.uint8)
        assert zstd_content_size(frame) == n
    assert zstd_content_size(np.frombuffer(_frame_claiming(2**40), np.uint8)) == 2**40


def test_a_zstd_frame_claiming_a_terabyte_is_corruption_without_allocating_it(tmp_path):
    codec = ConditionalCodec(codecs=[ZSTD])
    spec = chunk_spec((16, 16), Float32(), 0.0)
    stored = np.frombuffer(b"\x01" + _frame_claiming(2**40), np.uint8)
    tracemalloc.start()
    try:
        with pytest.raises(ChunkDecodeError, match=r"zstd: ValueError: zstd frame claims 1099511627776 bytes.*more than the"):
            codec.decode_bytes(stored, spec)
        assert tracemalloc.get_traced_memory()[1] < 2**20
    finally:
        tracemalloc.stop()
    # through zarr: the chunk file is named, and the error is a zopt error and a ValueError
    z = zarr.create_array(tmp_path / "a.zarr", shape=(32, 16), chunks=(16, 16), dtype="f4", compressors=[codec])
    z[:] = 1.5
    (tmp_path / "a.zarr" / "c" / "1" / "0").write_bytes(stored.tobytes())
    with pytest.raises(ChunkDecodeError, match=r"chunk 'c/1/0'.*zstd frame claims") as info:
        zarr.open_array(tmp_path / "a.zarr")[:]
    assert isinstance(info.value, ZoptError) and isinstance(info.value, ValueError)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a.zarr")[:16], 1.5)


@pytest.mark.parametrize(
    "stored, codec_name",
    [
        (b"\x01" + b"\x28\xb5\x2f\xfd\x00", "zstd"),  # truncated frame
        (b"\x01\x00\x01\x02", "zstd"),  # not a frame at all
        (b"\x04" + bytes(16), "conditional"),  # a mask bit for a codec the chain does not have
        (b"", "conditional"),  # no header
    ],
)
def test_every_decode_failure_is_a_zopt_value_error_naming_the_codec(stored, codec_name):
    codec = ConditionalCodec(codecs=[ZSTD, {"name": "shuffle", "configuration": {"element_size": 4}}])
    with pytest.raises(ChunkDecodeError) as info:
        codec.decode_bytes(np.frombuffer(stored, np.uint8), chunk_spec((4,), Float32(), 0.0))
    assert isinstance(info.value, ZoptError) and isinstance(info.value, ValueError)
    assert info.value.codec == codec_name


# -- configuration bounds --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: ConditionalCodec(codecs=[ZSTD], header_bits=2**20), r"header_bits: 1048576 is not allowed.*to 64"),
        (lambda: ConditionalCodec.from_dict({"name": "conditional", "configuration": {"codecs": [ZSTD], "header_bits": 72}}),
         r"header_bits: 72 is not allowed"),
        (lambda: ConditionalCodec(codecs=[]), r"codecs: \[\] is not allowed"),
        (lambda: ConditionalCodec.from_dict({"name": "conditional", "configuration": {"codecs": []}}), r"codecs: \[\] is not allowed"),
        (lambda: ShuffleCodec(element_size=2**40), r"element_size: 1099511627776 is not allowed; expected an integer from 1 to 65536"),
        (lambda: ShuffleCodec.from_dict({"name": "shuffle", "configuration": {"element_size": 2**40}}), r"element_size: 1099511627776"),
        (lambda: ShuffleCodec(element_size=0), r"element_size: 0 is not allowed"),
    ],
)
def test_configuration_fields_are_bounded(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_sharded_packbits_last_bit_is_checked_against_the_data_type(tmp_path):
    with pytest.raises(ValueError, match=r"last_bit: 40 is outside the 8-bit components of 'int8' \(allowed 0..7\)"):
        zarr.create_array(tmp_path / "a.zarr", shape=(8,), chunks=(2,), shards=(4,), dtype=Int8(),
                          serializer=PackBitsCodec(last_bit=40), compressors=None)


# -- packbits padding bits ---------------------------------------------------------------------------------


@pytest.mark.parametrize("padding", ["none", "first_byte", "last_byte"])
def test_packbits_rejects_non_zero_padding_bits(tmp_path, padding):
    z = zarr.create_array(tmp_path / "a.zarr", shape=(5,), chunks=(5,), dtype="uint4",
                          serializer=PackBitsCodec(padding_encoding=padding), compressors=None)
    z[:] = np.arange(1, 6).astype(ml_dtypes.uint4)
    chunk = tmp_path / "a.zarr" / "c" / "0"
    data = bytearray(chunk.read_bytes())
    last = len(data) - (2 if padding == "last_byte" else 1)
    assert data[last] >> 4 == 0  # 5 × 4 bits: the high 4 bits of the last data byte are padding
    data[last] |= 0x80
    chunk.write_bytes(bytes(data))
    with pytest.raises(ChunkDecodeError, match=r"chunk 'c/0'.*padding bits of the last byte are not zero"):
        zarr.open_array(tmp_path / "a.zarr")[:]


def test_a_bounded_v2_compressor_rebuilt_from_its_config_is_bounded_too():
    """``BoundedCompressor`` has what zarr's ``Numcodec`` protocol asks (codec_id, get_config and the
    class method from_config), and the codec rebuilt from its config still refuses a frame over the limit."""
    from zopt.codecs.bounded import BoundedCompressor, decoded_limit

    bounded = BoundedCompressor(numcodecs.Zstd(level=3))
    assert bounded.codec_id == "zstd" and bounded.get_config() == numcodecs.Zstd(level=3).get_config()
    again = BoundedCompressor.from_config(bounded.get_config())
    assert isinstance(again, BoundedCompressor) and again == bounded
    frame = numcodecs.Zstd(level=3).encode(bytes(100))
    assert bytes(again.decode(frame)) == bytes(100)  # no limit set: decoded as numcodecs does
    token = decoded_limit.set(99)
    try:
        with pytest.raises(ChunkDecodeError, match="100 bytes of content, more than the 99"):
            again.decode(frame)
    finally:
        decoded_limit.reset(token)
