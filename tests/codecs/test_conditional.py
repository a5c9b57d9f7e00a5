"""The ``conditional`` codec: header bytes, decode order, errors, decisions and chunk_index."""

from __future__ import annotations

import itertools
import json

import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import Crc32cCodec, GzipCodec, ZstdCodec

from zopt import ChunkDecodeError, ConditionalCodec, ShuffleCodec
from zopt.planning.chains import with_decision


def _array(path, codec, shape=(64,), chunks=(64,), shards=None, dtype="f4"):
    return zarr.create_array(
        str(path), shape=shape, chunks=chunks, shards=shards, dtype=dtype, compressors=[codec],
        fill_value=0,
    )


def _chunk(path, *coords):
    return (path / "c" / "/".join(map(str, coords))).read_bytes()


def _smooth(n=64):
    return np.linspace(0, 1, n, dtype="f4")


def test_header_shuffle_zstd_mask_0b10_is_0x02_then_zstd_frame(tmp_path):
    codec = ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec(level=5)], decision=0b10)
    data = _smooth()
    _array(tmp_path / "a", codec)[:] = data
    stored = _chunk(tmp_path / "a", 0)
    assert stored[0] == 0x02
    assert numcodecs.Zstd(level=5).decode(stored[1:]) == data.tobytes()
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"))[:], data)


def test_header_bits_16_with_bits_0_and_9_is_01_02(tmp_path):
    codecs = [ShuffleCodec(element_size=2)] + [GzipCodec(level=1)] + [ShuffleCodec(element_size=4)] * 7 + [ZstdCodec()]
    mask = (1 << 0) | (1 << 9)
    codec = ConditionalCodec(codecs=codecs, header_bits=16, decision=mask)
    data = _smooth()
    _array(tmp_path / "a", codec)[:] = data
    stored = _chunk(tmp_path / "a", 0)
    assert stored[:2] == bytes([0x01, 0x02])
    shuffled = numcodecs.Shuffle(2).encode(data.tobytes())
    assert numcodecs.Zstd().decode(stored[2:]) == bytes(shuffled)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"))[:], data)
    assert json.loads((tmp_path / "a" / "zarr.json").read_text())["codecs"][1]["configuration"]["header_bits"] == 16


@settings(max_examples=25, deadline=None)
@given(mask=st.integers(0, 7), seed=st.integers(0, 2**32 - 1))
def test_round_trip_every_mask_decodes_in_reverse_order(tmp_path_factory, mask, seed):
    # shuffle before gzip: decoding in forward order would gunzip shuffled garbage
    codecs = [ShuffleCodec(element_size=4), GzipCodec(level=1), Crc32cCodec()]
    rng = np.random.default_rng(seed)
    data = np.round(rng.normal(size=(40, 30)), 2).astype("f4")
    path = tmp_path_factory.mktemp("m") / "a"
    _array(path, ConditionalCodec(codecs=codecs, decision=mask), shape=(40, 30), chunks=(16, 16))[:] = data
    assert {_chunk(path, i, j)[0] for i, j in itertools.product(range(3), range(2))} == {mask}
    np.testing.assert_array_equal(zarr.open_array(str(path))[:], data)


def test_no_decision_writes_mask_zero_and_raw_bytes(tmp_path):
    codec = ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec()])
    assert codec.decision is None
    data = _smooth()
    _array(tmp_path / "a", codec)[:] = data
    assert _chunk(tmp_path / "a", 0) == b"\x00" + data.tobytes()


@pytest.mark.parametrize(
    "data,expected",
    [
        (np.zeros(4096, "f4") + 3.5, 0b10),  # constant: zstd alone is as small, shuffle skipped
        (np.linspace(0, 1, 4096, dtype="f4"), 0b11),  # smooth floats: shuffle helps zstd
        (np.random.default_rng(0).integers(0, 256, 16384, dtype="u1").view("f4"), 0b00),  # noise
        # over 64 KiB: the filter is judged on a 1/16 sample, the compressor on the full chunk
        (np.zeros(65536, "f4") - 7.25, 0b10),
        (np.linspace(0, 1, 65536, dtype="f4"), 0b11),
        (np.random.default_rng(2).integers(0, 256, 262144, dtype="u1").view("f4"), 0b00),
    ],
)
def test_compress_if_smaller(tmp_path, data, expected):
    codec = ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec()], decision="compress_if_smaller")
    _array(tmp_path / "a", codec, shape=data.shape, chunks=data.shape)[:] = data
    stored = _chunk(tmp_path / "a", 0)
    assert stored[0] == expected
    raw = data.tobytes()
    assert len(stored) - 1 <= len(raw)
    if expected == 0b11:  # the chosen mask is the smallest of all four
        sizes = {m: len(numcodecs.Zstd().encode(numcodecs.Shuffle(4).encode(raw) if m & 1 else raw)) for m in (0b10, 0b11)}
        assert len(stored) - 1 == min(sizes.values())
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"))[:], data)


@pytest.mark.parametrize("name,mask", [("always", 0b11), ("always_apply", 0b11), ("never", 0), ("never_apply", 0)])
def test_always_and_never(tmp_path, name, mask):
    data = np.random.default_rng(1).random(256).astype("f4")
    codec = ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec()], decision=name)
    _array(tmp_path / "a", codec, shape=(256,), chunks=(256,))[:] = data
    assert _chunk(tmp_path / "a", 0)[0] == mask
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"))[:], data)


def _recording(trial: bool, log: list):
    if trial:
        def decide(chunk_index, codec, unencoded_chunk, trial_encoded_chunk):
            log.append((chunk_index, codec.name, codec.index, bytes(unencoded_chunk), len(trial_encoded_chunk)))
            return codec.name == "zstd"
    else:
        def decide(chunk_index, codec, unencoded_chunk):
            log.append((chunk_index, codec.name, codec.index, bytes(unencoded_chunk), None))
            return codec.name == "zstd"
    return decide


@pytest.mark.parametrize("trial", [False, True])
@pytest.mark.parametrize("sharded", [False, True])
def test_decision_function_gets_chunk_index_through_plain_zarr_writes(tmp_path, trial, sharded):
    log: list = []
    codec = ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec()], decision=_recording(trial, log))
    shape, inner = (40, 60), (10, 20)
    shards = (20, 40) if sharded else None
    data = np.arange(np.prod(shape), dtype="f4").reshape(shape) + 1  # no chunk equals the fill value
    arr = _array(tmp_path / "a", codec, shape=shape, chunks=inner, shards=shards)
    arr[:] = data
    grid = {(i, j) for i in range(4) for j in range(3)}
    shuffle_calls = {entry[0]: entry for entry in log if entry[1] == "shuffle"}
    assert set(shuffle_calls) == grid
    for (i, j), (_, _, index, unencoded, trial_len) in shuffle_calls.items():
        assert index == 0
        block = data[i * 10 : (i + 1) * 10, j * 20 : (j + 1) * 20]
        if j == 2:  # edge chunk padded with the fill value
            block = np.pad(block, ((0, 0), (0, 20 - block.shape[1])))
        assert unencoded == np.ascontiguousarray(block).tobytes()
        assert (trial_len == len(unencoded)) if trial else trial_len is None
    zstd_calls = [entry for entry in log if entry[1] == "zstd"]
    assert {e[0] for e in zstd_calls} == grid and all(e[2] == 1 for e in zstd_calls)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"))[:], data)


def test_partial_write_reports_the_written_chunk_only(tmp_path):
    log: list = []
    codec = ConditionalCodec(codecs=[ZstdCodec()], decision=_recording(False, log))
    arr = _array(tmp_path / "a", codec, shape=(30, 30), chunks=(10, 10))
    arr[12:18, 25:28] = 1.0
    assert {e[0] for e in log} == {(1, 2)}


def test_mask_grid_decision_through_sharded_write(tmp_path):
    masks = np.array([[0, 1], [2, 3]], dtype="u1")
    codec = ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec()], decision=masks)
    data = np.arange(1, 401, dtype="f4").reshape(20, 20)
    _array(tmp_path / "a", codec, shape=(20, 20), chunks=(10, 10), shards=(20, 20))[:] = data
    shard = _chunk(tmp_path / "a", 0, 0)
    index = np.frombuffer(shard[-(4 * 16 + 4) : -4], dtype="<u8").reshape(2, 2, 2)
    headers = np.array([[shard[index[i, j, 0]] for j in range(2)] for i in range(2)])
    np.testing.assert_array_equal(headers, masks)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"))[:], data)


def test_with_decision_attaches_to_a_reopened_array(tmp_path):
    codec = ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec()])
    data = _smooth(1024)
    _array(tmp_path / "a", codec, shape=(1024,), chunks=(256,))[:] = data
    assert {_chunk(tmp_path / "a", i)[0] for i in range(4)} == {0}  # "write fast"
    reopened = with_decision(zarr.open_array(str(tmp_path / "a"), mode="r+"), "compress_if_smaller")
    reopened[:] = reopened[:]  # "compress later"
    assert {_chunk(tmp_path / "a", i)[0] for i in range(4)} == {0b11}
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"))[:], data)


# -- errors ------------------------------------------------------------------------------------------


def test_reserved_bit_set_raises_naming_the_chunk(tmp_path):
    _array(tmp_path / "a", ConditionalCodec(codecs=[ZstdCodec()]), shape=(8,), chunks=(4,))[:] = np.arange(1, 9, dtype="f4")
    path = tmp_path / "a" / "c" / "1"
    path.write_bytes(b"\x02" + path.read_bytes()[1:])
    with pytest.raises(ChunkDecodeError, match=r"c/1.*reserved bits") as info:
        zarr.open_array(str(tmp_path / "a"))[:]
    assert info.value.key.endswith("c/1")


def test_chunk_shorter_than_header_raises(tmp_path):
    codec = ConditionalCodec(codecs=[ZstdCodec()], header_bits=16)
    _array(tmp_path / "a", codec, shape=(8,), chunks=(8,))[:] = np.arange(1, 9, dtype="f4")
    (tmp_path / "a" / "c" / "0").write_bytes(b"\x00")
    with pytest.raises(ChunkDecodeError, match=r"c/0.*shorter than its 2-byte header"):
        zarr.open_array(str(tmp_path / "a"))[:]


@pytest.mark.parametrize("mask", [0, 1])
def test_truncated_payload_raises_naming_the_chunk(tmp_path, mask):
    codec = ConditionalCodec(codecs=[ZstdCodec()], decision=mask)
    _array(tmp_path / "a", codec, shape=(64,), chunks=(32,))[:] = _smooth()
    path = tmp_path / "a" / "c" / "1"
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(ChunkDecodeError, match="c/1"):
        zarr.open_array(str(tmp_path / "a"))[:]


def test_corrupt_inner_chunk_of_shard_names_shard_and_inner_chunk(tmp_path):
    codec = ConditionalCodec(codecs=[ZstdCodec()], decision=0)
    _array(tmp_path / "a", codec, shape=(8,), chunks=(2,), shards=(8,))[:] = np.arange(1, 9, dtype="f4")
    shard = bytearray(_chunk(tmp_path / "a", 0))
    index = np.frombuffer(bytes(shard[-(16 * 4 + 4) : -4]), "<u8").reshape(4, 2)
    shard[int(index[2, 0])] = 0x80  # reserved bit in inner chunk 2's header
    (tmp_path / "a" / "c" / "0").write_bytes(bytes(shard))
    with pytest.raises(ChunkDecodeError, match=r"inner chunk \(2,\) of shard .*c/0") as info:
        zarr.open_array(str(tmp_path / "a"))[:]
    assert info.value.inner == (2,)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"codecs": [ZstdCodec()], "header_bits": 7}, "header_bits"),
        ({"codecs": [ZstdCodec()] * 9, "header_bits": 8}, "header_bits"),
        ({"codecs": [ZstdCodec()], "header_bits": "8"}, "header_bits"),
        ({"codecs": [zarr.codecs.BytesCodec()]}, r"codecs\[0\].*bytes→bytes"),
        ({"codecs": [{"name": "no-such-codec"}]}, r"codecs\[0\].*unknown codec"),
        ({"codecs": "zstd"}, "codecs"),
        ({"codecs": [ZstdCodec()], "decision": "compress_if_bigger"}, r"decision.*compress_if_smaller"),
        ({"codecs": [ZstdCodec()], "decision": 0b10}, r"decision.*reserved"),
        ({"codecs": [ZstdCodec()], "decision": np.array([[4]])}, "decision"),
    ],
)
def test_invalid_configuration_raises_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ConditionalCodec(**kwargs)


def test_from_dict_rejects_unknown_keys_and_missing_codecs():
    with pytest.raises(ValueError, match="unknown configuration keys"):
        ConditionalCodec.from_dict({"name": "conditional", "configuration": {"codecs": [], "level": 1}})
    with pytest.raises(ValueError, match="requires 'codecs'"):
        ConditionalCodec.from_dict({"name": "conditional", "configuration": {"header_bits": 8}})


def _rename_codec(path, name, configuration=None):
    meta = json.loads((path / "zarr.json").read_text())
    meta["codecs"][1]["name"] = name
    if configuration is not None:
        meta["codecs"][1]["configuration"] = configuration
    (path / "zarr.json").write_text(json.dumps(meta))


def test_reads_the_draft_name_optional_as_alias(tmp_path):
    data = _smooth()
    _array(tmp_path / "a", ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec()], decision=0b11))[:] = data
    _rename_codec(tmp_path / "a", "optional")
    arr = zarr.open_array(str(tmp_path / "a"))
    np.testing.assert_array_equal(arr[:], data)
    assert arr.metadata.codecs[1].to_dict()["name"] == "conditional"


def test_refuses_zarrs_nullable_optional(tmp_path):
    _array(tmp_path / "a", ConditionalCodec(codecs=[ZstdCodec()]))[:] = _smooth()
    _rename_codec(tmp_path / "a", "optional", {"mask_codecs": [{"name": "packbits"}], "data_codecs": []})
    with pytest.raises(ValueError, match="different codec"):
        zarr.open_array(str(tmp_path / "a"))


def test_entry_points_are_registered():
    from importlib.metadata import entry_points

    codecs = {e.name for e in entry_points(group="zarr.codecs") if e.value.startswith("zopt")}
    assert {"conditional", "optional", "shuffle", "bytes"} <= codecs
    dtypes = {e.name for e in entry_points(group="zarr.data_type") if e.value.startswith("zopt")}
    assert {"int4", "bfloat16", "float8_e4m3", "float4_e2m1fn"} <= dtypes


@given(data=st.binary(max_size=4096), element_size=st.integers(1, 16))
@settings(max_examples=200, deadline=None)
def test_shuffle_matches_numcodecs_and_keeps_trailing_bytes(data, element_size):
    codec = ShuffleCodec(element_size=element_size)
    raw = np.frombuffer(data, dtype=np.uint8)
    out = codec.encode_bytes(raw)
    whole = raw.size // element_size * element_size
    if whole:
        reference = numcodecs.Shuffle(element_size).encode(raw[:whole].tobytes())
        assert out[:whole].tobytes() == bytes(reference)
    assert out[whole:].tobytes() == raw[whole:].tobytes()  # a partial element stays in place
    assert codec.decode_bytes(out).tobytes() == data


@given(data=st.binary(max_size=4096), element_size=st.integers(1, 24), rows=st.integers(1, 3))
@settings(max_examples=200, deadline=None)
def test_unshuffle_of_any_bytes_matches_numcodecs(data, element_size, rows):
    # decode is computed word by word (shifts and ors) for sizes divisible by 2, 4 or 8: every
    # byte pattern, not only shuffle outputs, must give numcodecs' bytes, in every row
    from zopt.codecs.shuffle import shuffle_rows

    raw = np.frombuffer(data, dtype=np.uint8)
    whole = raw.size // element_size * element_size
    out = ShuffleCodec(element_size=element_size).decode_bytes(raw)
    if whole:
        reference = numcodecs.Shuffle(element_size).decode(raw[:whole].tobytes())
        assert out[:whole].tobytes() == np.asarray(reference).tobytes()
    assert out[whole:].tobytes() == raw[whole:].tobytes()
    stacked = np.stack([np.roll(raw, k) for k in range(rows)])
    assert shuffle_rows(stacked, element_size, inverse=True).tolist() == [
        ShuffleCodec(element_size=element_size).decode_bytes(row).tolist() for row in stacked]


@given(rows=st.integers(1, 6), width=st.integers(0, 300), element_size=st.integers(1, 9), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=150, deadline=None)
def test_shuffle_rows_equals_shuffling_each_row(rows, width, element_size, seed):
    from zopt.codecs.shuffle import shuffle_rows

    codec = ShuffleCodec(element_size=element_size)
    data = np.random.default_rng(seed).integers(0, 256, size=(rows, width), dtype=np.uint8)
    out = shuffle_rows(data, element_size, inverse=False)
    for k in range(rows):  # rows with a trailing partial element included
        assert out[k].tobytes() == codec.encode_bytes(data[k]).tobytes()
    assert shuffle_rows(out, element_size, inverse=True).tobytes() == data.tobytes()


@pytest.mark.parametrize(("level", "checksum"), [(3, False), (1, True), (5, False), (0, False), (22, False)])
def test_batch_zstd_sizes_match_numcodecs_frames(level, checksum):
    from zopt.codecs.sync import zstd_row_sizes

    rng = np.random.default_rng(level)
    rows = np.round(np.cumsum(rng.normal(size=(24, 2048)), axis=1), 1).astype("f4").view(np.uint8).reshape(24, -1).copy()
    rows[3] = rng.integers(0, 256, rows.shape[1], dtype=np.uint8)  # incompressible: blosc copies it, sized exactly
    rows[4] = 9
    sizes = zstd_row_sizes(ZstdCodec(level=level, checksum=checksum))(rows)
    exact = np.array([len(numcodecs.Zstd(level=level, checksum=checksum).encode(r)) for r in rows])
    assert sizes.dtype == np.int64 and sizes.shape == (24,)
    assert np.abs(sizes - exact).max() <= 16
    assert sizes[3] == exact[3] > rows.shape[1]  # the exact frame, larger than the row
    # rows too short for a blosc block of their own are sized one by one, exactly
    short = rows[:, :1000]
    assert zstd_row_sizes(ZstdCodec(level=level, checksum=checksum))(short).tolist() == [
        len(numcodecs.Zstd(level=level, checksum=checksum).encode(r)) for r in short
    ]


def test_batch_zstd_sizes_only_for_levels_blosc_can_express():
    from zopt.codecs.sync import zstd_row_sizes

    assert zstd_row_sizes(ZstdCodec(level=4)) is None  # c-blosc runs only odd zstd levels up to 13, 20 and 22
    assert zstd_row_sizes(ZstdCodec(level=-1)) is None
    assert zstd_row_sizes(GzipCodec(level=1)) is None
    assert zstd_row_sizes(ZstdCodec(level=13)) is not None
