"""packbits and reshape: spec examples, hypothesis round trips against a bit-by-bit reference,
byte-identical chunks with the zarrs pipeline, tensorstore reads of zopt's data types."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from zarr.codecs import BytesCodec
from zarr.core.dtype import (
    Bool,
    Float16,
    Float32,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
)

from zopt import ChunkDecodeError
from zopt.codecs.packbits import PackBitsCodec, component_layout
from zopt.codecs.reshape import ReshapeCodec, resolve_shape
from zopt.dtypes import ml
from zopt.dtypes.complex import COMPLEX_DTYPES, pack_complex

REAL_TYPES = {
    "bool": Bool(), "int2": ml.Int2(), "uint2": ml.UInt2(), "int4": ml.Int4(), "uint4": ml.UInt4(),
    "float4_e2m1fn": ml.Float4E2M1FN(), "float6_e2m3fn": ml.Float6E2M3FN(), "float6_e3m2fn": ml.Float6E3M2FN(),
    "int8": Int8(), "uint8": UInt8(), "int16": Int16(), "uint16": UInt16(), "int32": Int32(), "uint32": UInt32(),
    "int64": Int64(), "uint64": UInt64(), "float16": Float16(), "float32": Float32(), "float64": Float64(),
    "bfloat16": ml.BFloat16(), "float8_e3m4": ml.Float8E3M4(), "float8_e4m3": ml.Float8E4M3(),
    "float8_e4m3b11fnuz": ml.Float8E4M3B11FNUZ(), "float8_e4m3fnuz": ml.Float8E4M3FNUZ(),
    "float8_e5m2": ml.Float8E5M2(), "float8_e5m2fnuz": ml.Float8E5M2FNUZ(), "float8_e8m0fnu": ml.Float8E8M0FNU(),
}


COMPLEX_TYPES = {name: cls() for name, cls in COMPLEX_DTYPES.items()}
ALL_TYPES = {**REAL_TYPES, **COMPLEX_TYPES}


def _u(x: np.ndarray) -> list:
    """Raw bytes of each element: exact comparison, NaN payloads included."""
    x = np.asarray(x)
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8).reshape(x.size, x.dtype.itemsize).tolist()


def _enc(values, dtype, **config) -> str:
    native = dtype.to_native_dtype()
    return PackBitsCodec(**config).encode_array(np.asarray(values).astype(native), dtype).tobytes().hex(" ")


# -- the spec's and the hand-checked bytes ---------------------------------------------------


def test_uint4_padding_none():
    assert _enc([1, 2, 3], ml.UInt4()) == "21 03"


def test_uint4_padding_first_byte():
    assert _enc([1, 2, 3], ml.UInt4(), padding_encoding="first_byte") == "04 21 03"


def test_uint4_padding_last_byte():
    assert _enc([1, 2, 3], ml.UInt4(), padding_encoding="last_byte") == "21 03 04"


def test_bool_first_byte():
    assert _enc([True, False, False, True], Bool(), padding_encoding="first_byte") == "04 09"


def test_int2():
    assert _enc([-2, -1, 0, 1], ml.Int2()) == "4e"


def test_int16_bits_2_to_13():
    assert _enc([-4, 8], Int16(), first_bit=2, last_bit=13) == "ff 2f 00"


def test_float6_e2m3fn_first_byte():
    assert _enc([1.0, -1.0], ml.Float6E2M3FN(), padding_encoding="first_byte") == "04 08 0a"


def test_sign_extension_through_the_full_width():
    codec = PackBitsCodec(last_bit=5)
    data = codec.encode_array(np.array([-1, -32, 31, 5], dtype="i2"), Int16())
    assert codec.decode_array(data, Int16(), (4,)).tolist() == [-1, -32, 31, 5]
    u = PackBitsCodec(last_bit=5).decode_array(data, UInt16(), (4,))  # zero-extended
    assert u.tolist() == [63, 32, 31, 5]


# -- a bit-by-bit reference ----------------------------------------------------------------------------


def _reference(values: np.ndarray, dtype, first: int, last: int, padding: str) -> bytes:
    """Element by element, bit by bit, straight from the spec's text."""
    layout = component_layout(dtype)
    comps = layout.to_uint(values).tolist()
    bits = []
    for c in comps:
        bits.extend((int(c) >> j) & 1 for j in range(first, last + 1))
    pad = (-len(bits)) % 8
    bits += [0] * pad
    out = bytes(sum(bits[i + j] << j for j in range(8)) for i in range(0, len(bits), 8))
    return {"none": out, "first_byte": bytes([pad]) + out, "last_byte": out + bytes([pad])}[padding]


def _expected_decode(values: np.ndarray, dtype, first: int, last: int) -> np.ndarray:
    layout = component_layout(dtype)
    n_bits = layout.bits
    out = []
    for c in layout.to_uint(values).tolist():
        v = ((int(c) >> first) & ((1 << (last - first + 1)) - 1)) << first
        if layout.signed and (v >> last) & 1:
            v |= ((1 << n_bits) - 1) & ~((1 << (last + 1)) - 1)
        out.append(v)
    return layout.from_uint(np.array(out, dtype=np.uint64), values.shape)


def _random_values(rng: np.random.Generator, dtype, n: int) -> np.ndarray:
    native = dtype.to_native_dtype()
    layout = component_layout(dtype)
    m = n * layout.components
    pattern = rng.integers(0, 2**63, m, dtype=np.uint64) & np.uint64((1 << min(layout.bits, 63)) - 1)
    if layout.bits == 64:
        pattern |= rng.integers(0, 2, m, dtype=np.uint64) << np.uint64(63)
    return layout.from_uint(pattern, (n,)).astype(native, copy=False)


def _bit_ranges(draw, n_bits: int) -> tuple[int | None, int | None]:
    if draw(st.booleans()):
        return None, None
    first = draw(st.integers(0, n_bits - 1))
    last = draw(st.integers(first, n_bits - 1))
    return first, last


@st.composite
def packbits_cases(draw):
    name = draw(st.sampled_from(sorted(ALL_TYPES)))
    dtype = ALL_TYPES[name]
    first, last = _bit_ranges(draw, component_layout(dtype).bits)
    padding = draw(st.sampled_from(["none", "first_byte", "last_byte"]))
    n = draw(st.integers(0, 67))
    seed = draw(st.integers(0, 2**32 - 1))
    return name, dtype, first, last, padding, n, seed


@given(packbits_cases())
@settings(max_examples=400, deadline=None)
def test_encode_matches_the_bit_by_bit_reference_and_decodes(case):
    name, dtype, first, last, padding, n, seed = case
    values = _random_values(np.random.default_rng(seed), dtype, n)
    codec = PackBitsCodec(padding_encoding=padding, first_bit=first, last_bit=last)
    f, l_ = first or 0, component_layout(dtype).bits - 1 if last is None else last
    data = codec.encode_array(values, dtype)
    assert data.tobytes() == _reference(values, dtype, f, l_, padding)
    decoded = codec.decode_array(data, dtype, (n,))
    expected = _expected_decode(values, dtype, f, l_)
    assert decoded.dtype == values.dtype
    assert _u(decoded) == _u(expected)


@given(packbits_cases(), st.integers(1, 5), st.integers(1, 4))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_round_trip_through_zarr_on_a_local_store(tmp_path_factory, case, rows, chunk_rows):
    name, dtype, first, last, padding, n, seed = case
    shape = (rows, max(n, 1))
    values = _random_values(np.random.default_rng(seed), dtype, shape[0] * shape[1]).reshape(shape)
    path = tmp_path_factory.mktemp("pb") / "a.zarr"
    serializer = PackBitsCodec(padding_encoding=padding, first_bit=first, last_bit=last)
    # write_empty_chunks: zarr compares chunks with the fill value numerically and would drop a
    # chunk of -0.0 (fill 0.0); this test is about the codec
    z = zarr.create_array(path, shape=shape, chunks=(chunk_rows, shape[1]), dtype=dtype, serializer=serializer,
                          compressors=None, config={"write_empty_chunks": True})
    z[:] = values
    f, l_ = first or 0, component_layout(dtype).bits - 1 if last is None else last
    expected = _expected_decode(values.ravel(), dtype, f, l_).reshape(shape)
    back = zarr.open_array(path)[:]
    assert _u(back) == _u(expected)


# -- configuration and corrupt chunks ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"padding_encoding": "middle"}, "padding_encoding: 'middle' is not one of"),
        ({"first_bit": -1}, "first_bit: expected a non-negative integer"),
        ({"first_bit": 5, "last_bit": 3}, "last_bit: 3 is less than first_bit 5"),
        ({"last_bit": "7"}, "last_bit: expected a non-negative integer"),
    ],
)
def test_invalid_configuration(config, match):
    with pytest.raises(ValueError, match=match):
        PackBitsCodec(**config)


def test_unknown_key_and_last_bit_beyond_the_type(tmp_path):
    with pytest.raises(ValueError, match=r"unknown configuration keys \['bits'\]"):
        PackBitsCodec.from_dict({"name": "packbits", "configuration": {"bits": 3}})
    with pytest.raises(ValueError, match=r"last_bit: 4 is outside the 4-bit components of 'int4' \(allowed 0..3\)"):
        zarr.create_array(tmp_path / "a.zarr", shape=(4,), dtype="int4", serializer=PackBitsCodec(last_bit=4))
    with pytest.raises(ValueError, match="first_bit: 9 is greater than last_bit 7"):
        zarr.create_array(tmp_path / "b.zarr", shape=(4,), dtype="uint8", serializer=PackBitsCodec(first_bit=9))


def test_serialisation_omits_defaults():
    assert PackBitsCodec().to_dict() == {"name": "packbits"}
    assert PackBitsCodec(first_bit=0, padding_encoding="none").to_dict() == {"name": "packbits"}
    full = PackBitsCodec(padding_encoding="last_byte", first_bit=2, last_bit=9)
    assert full.to_dict() == {"name": "packbits", "configuration": {"padding_encoding": "last_byte", "first_bit": 2, "last_bit": 9}}
    assert PackBitsCodec.from_dict(full.to_dict()) == full


@pytest.mark.parametrize("change", ["truncate", "extend", "padding"])
def test_bad_chunk_bytes_name_the_chunk(tmp_path, change):
    z = zarr.create_array(tmp_path / "a.zarr", shape=(10,), chunks=(5,), dtype="uint4",
                          serializer=PackBitsCodec(padding_encoding="first_byte"), compressors=None)
    z[:] = np.arange(10).astype(ml_dtypes.uint4)
    chunk = tmp_path / "a.zarr" / "c" / "1"
    data = chunk.read_bytes()
    assert data[0] == 4  # 5 × 4 bits = 20 bits, padded by 4
    chunk.write_bytes({"truncate": data[:-1], "extend": data + b"\x00", "padding": b"\x03" + data[1:]}[change])
    with pytest.raises(ChunkDecodeError, match=r"chunk 'c/1'.*packbits: (chunk has|padding byte says)"):
        zarr.open_array(tmp_path / "a.zarr")[:]


# -- complex types ---------------------------------------------------------------------------------


def test_complex_bfloat16_bytes_real_then_imaginary(tmp_path):
    values = pack_complex([1.0], [2.0], "complex_bfloat16")
    for endian, expected in (("little", "80 3f 00 40"), ("big", "3f 80 40 00")):
        z = zarr.create_array(tmp_path / f"{endian}.zarr", shape=(1,), dtype="complex_bfloat16", compressors=None,
                              serializer=BytesCodec(endian=endian))
        z[:] = values
        assert (tmp_path / f"{endian}.zarr" / "c" / "0").read_bytes().hex(" ") == expected
        assert _u(zarr.open_array(tmp_path / f"{endian}.zarr")[:]) == _u(values)


def test_complex_float4_packbits_packs_real_then_imaginary():
    values = pack_complex([1.0, 0.5], [2.0, 0.0], "complex_float4_e2m1fn")  # codes 2, 4, 1, 0
    assert _enc(values, COMPLEX_TYPES["complex_float4_e2m1fn"], padding_encoding="first_byte") == "00 42 01"
    # first_bit/last_bit apply to each component: bits 1..2 of 2, 4, 1, 0 → 1, 2, 0, 0
    assert _enc(values, COMPLEX_TYPES["complex_float4_e2m1fn"], first_bit=1, last_bit=2) == "09"


@pytest.mark.parametrize(
    ("name", "fill", "json_fill"),
    [
        ("complex_bfloat16", [1.5, "NaN"], [1.5, "NaN"]),
        ("complex_float8_e5m2", ["Infinity", "-Infinity"], ["Infinity", "-Infinity"]),
        ("complex_float4_e2m1fn", [-6.0, "0x1"], [-6.0, 0.5]),
        ("complex_float16", [0.25, -0.0], [0.25, -0.0]),
        ("complex_float64", [1e300, -2.5], [1e300, -2.5]),
    ],
)
def test_complex_fill_values_in_json(tmp_path, name, fill, json_fill):
    z = zarr.create_array(tmp_path / "f.zarr", shape=(2,), dtype=name, fill_value=fill)
    meta = json.loads((tmp_path / "f.zarr" / "zarr.json").read_text())
    assert meta["data_type"] == name and meta["fill_value"] == json_fill
    again = zarr.open_array(tmp_path / "f.zarr")
    assert _u(np.asarray(again.fill_value, dtype=z.dtype)) == _u(np.asarray(z.fill_value, dtype=z.dtype))


def test_complex_fill_value_errors(tmp_path):
    with pytest.raises((TypeError, ValueError), match=r"\[real, imaginary\]|Cannot convert"):
        zarr.create_array(tmp_path / "a.zarr", shape=(2,), dtype="complex_bfloat16", fill_value="NaN")
    with pytest.raises(ValueError, match="float4_e2m1fn has no NaN"):
        zarr.create_array(tmp_path / "b.zarr", shape=(2,), dtype="complex_float4_e2m1fn", fill_value=[0.0, "NaN"])


def test_complex_float32_is_byte_identical_to_zarrs_complex64(tmp_path):
    values = (np.arange(8) + 1j * np.arange(8)[::-1]).astype(np.complex64)
    for name in ("complex_float32", "complex64"):
        z = zarr.create_array(tmp_path / f"{name}.zarr", shape=(8,), dtype=name, compressors=None)
        z[:] = values
    assert (tmp_path / "complex_float32.zarr/c/0").read_bytes() == (tmp_path / "complex64.zarr/c/0").read_bytes()


# -- reshape ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "a_shape", "b_shape"),
    [
        ([[0, 1], 10, [3, 4]], (2, 3, 10, 4, 5), (6, 10, 20)),
        ([[0, 1], [2], 3], (100, 50, 64, 3), (5000, 64, 3)),
        ([[0, 1], -1, [3], 4], (2, 3, 7, 5, 4), (6, 7, 5, 4)),
        ([-1], (4, 5, 6), (120,)),
        ([[0], -1, [2, 3]], (3, 4, 5, 6), (3, 4, 30)),
        ([[0, 1], -1, [2], 3], (2, 5, 6, 3), (10, 1, 6, 3)),
        ([[], -1], (4, 5), (1, 20)),
    ],
)
def test_reshape_valid_shapes(shape, a_shape, b_shape):
    assert resolve_shape(ReshapeCodec(shape=shape).shape, a_shape) == b_shape


@pytest.mark.parametrize(
    ("shape", "match"),
    [
        ([[1], [0]], "strictly increasing"),
        ([[1, 0], 10, [3, 4]], "strictly increasing"),
        ([[3, 4], 10, [0, 1]], "strictly increasing"),
        ([-1, -1], "-1 may occur at most once"),
        ([0], r"shape\[0\]: 0 is not a positive integer"),
        ([], "non-empty list"),
        ([[0, -2]], "non-negative integers"),
    ],
)
def test_reshape_invalid_shapes(shape, match):
    with pytest.raises(ValueError, match=match):
        ReshapeCodec(shape=shape)


@pytest.mark.parametrize(
    ("shape", "a_shape", "match"),
    [
        ([7, -1], (4, 5), "no size for -1"),
        ([3, 7], (4, 5), "has 21 elements, the input"),
        ([[1], -1], (4, 5), r"shape\[0\]: input dimensions \[1\] are not aligned"),
        ([-1, [0]], (4, 5), r"shape\[1\]: input dimensions \[0\] are not aligned"),
        ([[2]], (4, 5), "out of range"),
    ],
)
def test_reshape_rules_checked_against_the_chunk_shape(shape, a_shape, match):
    with pytest.raises(ValueError, match=match):
        resolve_shape(ReshapeCodec(shape=shape).shape, a_shape)


def test_reshape_keeps_c_order_after_transpose_and_views_when_it_can(tmp_path):
    from zarr.core.array_spec import ArrayConfig, ArraySpec
    from zarr.core.buffer import default_buffer_prototype

    codec = ReshapeCodec(shape=[-1])
    spec = ArraySpec(shape=(3, 4), dtype=Int32(), fill_value=0, config=ArrayConfig(order="C", write_empty_chunks=False),
                     prototype=default_buffer_prototype())
    x = np.arange(12, dtype="i4").reshape(3, 4)
    out = codec._encode_sync(default_buffer_prototype().nd_buffer.from_ndarray_like(x), spec).as_ndarray_like()
    assert np.shares_memory(out, x)
    t = np.arange(12, dtype="i4").reshape(4, 3).T  # not C-contiguous
    out = codec._encode_sync(default_buffer_prototype().nd_buffer.from_ndarray_like(t), spec).as_ndarray_like()
    assert out.tolist() == t.ravel(order="C").tolist()
    z = zarr.create_array(tmp_path / "r.zarr", shape=(6, 8), chunks=(3, 4), dtype="i4",
                          filters=[{"name": "transpose", "configuration": {"order": [1, 0]}}, codec], compressors=None)
    data = np.arange(48, dtype="i4").reshape(6, 8)
    z[:] = data
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "r.zarr")[:], data)
    # the stored chunk is the transposed chunk in C order
    raw = np.frombuffer((tmp_path / "r.zarr" / "c" / "0" / "1").read_bytes(), "<i4")
    assert raw.tolist() == data[0:3, 4:8].T.ravel().tolist()


# -- cross-checks with zarrs -----------------------------------------------------------------------


@pytest.fixture
def hex_fill(monkeypatch):
    """zarrs-python 0.2.3 refuses numeric fill values for float4/6/8 types (zarr-extensions allows
    them); give it the hex form, which it accepts, so these types can still be cross-checked."""
    def to_hex(self, data, *, zarr_format):
        bits = int(self.to_bits(np.asarray(data, dtype=self.to_native_dtype())).item())
        return "0x" + format(bits, f"0{self.item_size * 2}x")

    monkeypatch.setattr(ml.MLFloat, "to_json_scalar", to_hex)


def _write(path: Path, pipeline: str, values, dtype, chunks, serializer, filters=None) -> None:
    with zarr.config.set({"codec_pipeline.path": pipeline}), warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*unsupported by ZarrsCodecPipeline")  # a fallback is a failure here
        z = zarr.create_array(path, shape=values.shape, chunks=chunks, dtype=dtype, serializer=serializer,
                              filters=filters, fill_value=None, compressors=None, config={"write_empty_chunks": True})
        z[:] = values


def _read(path: Path, pipeline: str):
    with zarr.config.set({"codec_pipeline.path": pipeline}), warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*unsupported by ZarrsCodecPipeline")
        return zarr.open_array(path)[:]


ZOPT = "zopt.codecs.pipeline.ChunkIndexCodecPipeline"
ZARRS = "zarrs.ZarrsCodecPipeline"


@given(packbits_cases(), st.integers(1, 4))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_chunks_are_byte_identical_with_zarrs(tmp_path_factory, hex_fill, case, n_chunks):
    pytest.importorskip("zarrs")
    name, dtype, first, last, padding, n, seed = case
    n = max(n, 1)
    values = _random_values(np.random.default_rng(seed), dtype, n * n_chunks)
    serializer = PackBitsCodec(padding_encoding=padding, first_bit=first, last_bit=last)
    base = tmp_path_factory.mktemp("x")
    _write(base / "zopt.zarr", ZOPT, values, dtype, (n,), serializer)
    _write(base / "zarrs.zarr", ZARRS, values, dtype, (n,), serializer)
    fill = component_layout(dtype).to_uint(np.zeros(1, values.dtype))
    compared = deviated = 0
    for i in range(n_chunks):
        ours, theirs = base / "zopt.zarr" / "c" / str(i), base / "zarrs.zarr" / "c" / str(i)
        if ours.exists() and theirs.exists():
            a, b = ours.read_bytes(), theirs.read_bytes()
            if _zarrs_drops_padding_byte(dtype, first, last, padding) and len(b) == len(a) - 1:
                b = (b"\x00" + b) if padding == "first_byte" else (b + b"\x00")  # the deviation, exactly
                deviated += 1
            assert a == b
            compared += 1
        else:  # zarrs skips chunks equal to the fill value even with write_empty_chunks
            assert (component_layout(dtype).to_uint(values[i * n : (i + 1) * n]).reshape(-1, fill.size) == fill).all()
    assume(compared)
    if deviated:
        return  # the chunks differ by that byte, so neither reads the other's (interop.md)
    # each reads the other's whole chunks; zarrs' partial-chunk reads are not used (see interop.md)
    layout = component_layout(dtype)
    f, l_ = first or 0, layout.bits - 1 if last is None else last
    expected = _u(_expected_decode(values, dtype, f, l_))
    assert _u(_read(base / "zarrs.zarr", ZOPT)) == expected
    if not (layout.signed and l_ < layout.bits - 1):  # zarrs sign-extends to 8 bits only: see below
        assert _u(_read(base / "zopt.zarr", ZARRS)) == expected


def _zarrs_drops_padding_byte(dtype, first, last, padding) -> bool:
    """zarrs writes no padding byte for some full-width whole-byte types (float16, int32,
    complex_float32 …, not bfloat16): a recorded deviation, accepted only in this exact form."""
    bits = component_layout(dtype).bits
    full = (first or 0) == 0 and last in (None, bits - 1)
    return padding != "none" and full and bits % 8 == 0


def test_zarrs_writes_no_padding_byte_for_whole_byte_types(tmp_path):
    """Recorded zarrs deviation: packbits with a padding byte on a full-width 8/16/32/64-bit type
    writes just the little-endian bytes; the spec (and zopt) prepend the padding byte (0)."""
    pytest.importorskip("zarrs")
    values = np.array([1.0], dtype="f2")
    serializer = PackBitsCodec(padding_encoding="first_byte")
    _write(tmp_path / "zarrs.zarr", ZARRS, values, Float16(), (1,), serializer)
    _write(tmp_path / "zopt.zarr", ZOPT, values, Float16(), (1,), serializer)
    assert (tmp_path / "zarrs.zarr" / "c" / "0").read_bytes() == b"\x00\x3c"
    assert (tmp_path / "zopt.zarr" / "c" / "0").read_bytes() == b"\x00\x00\x3c"


def test_zarrs_sign_extends_to_eight_bits_only(tmp_path):
    """Recorded zarrs deviation: int16 with last_bit=0 stores -1 as bit 1; the spec sign-extends
    through the full width (-1), zarrs returns 255."""
    pytest.importorskip("zarrs")
    values = np.array([-1, 0], dtype="i2")
    _write(tmp_path / "a.zarr", ZOPT, values, Int16(), (2,), PackBitsCodec(first_bit=0, last_bit=0))
    assert _read(tmp_path / "a.zarr", ZARRS).tolist() == [255, 0]
    assert _read(tmp_path / "a.zarr", ZOPT).tolist() == [-1, 0]


def test_zarrs_partial_chunk_reads_ignore_first_bit(tmp_path):
    """Recorded zarrs deviation: reading part of a chunk does not shift back to first_bit."""
    pytest.importorskip("zarrs")
    values = (np.arange(30, dtype="i2") - 15) * 4
    _write(tmp_path / "a.zarr", ZOPT, values, Int16(), (30,), PackBitsCodec(first_bit=2, last_bit=13))
    assert _read(tmp_path / "a.zarr", ZARRS).tolist() == values.tolist()
    with zarr.config.set({"codec_pipeline.path": ZARRS}):
        part = zarr.open_array(tmp_path / "a.zarr")[5:8]
    assert part.tolist() == (values[5:8] // 4).tolist()  # zarrs: unshifted; zopt would give values[5:8]
    assert zarr.open_array(tmp_path / "a.zarr")[5:8].tolist() == values[5:8].tolist()


@pytest.mark.parametrize("shape", [[-1], [[0, 1], 4], [2, -1, [2]]])
def test_reshape_is_byte_identical_with_zarrs(tmp_path, shape):
    pytest.importorskip("zarrs")
    values = np.arange(4 * 6 * 4, dtype="<u2").reshape(4, 6, 4)
    filters = [{"name": "transpose", "configuration": {"order": [2, 0, 1]}}, ReshapeCodec(shape=shape)]
    chunk_filters = filters if shape != [[0, 1], 4] else [ReshapeCodec(shape=shape)]
    _write(tmp_path / "zopt.zarr", ZOPT, values, UInt16(), (2, 6, 4), BytesCodec(), chunk_filters)
    _write(tmp_path / "zarrs.zarr", ZARRS, values, UInt16(), (2, 6, 4), BytesCodec(), chunk_filters)
    for f in ("c/0/0/0", "c/1/0/0"):
        assert (tmp_path / "zopt.zarr" / f).read_bytes() == (tmp_path / "zarrs.zarr" / f).read_bytes()
    np.testing.assert_array_equal(_read(tmp_path / "zopt.zarr", ZARRS), values)
    np.testing.assert_array_equal(_read(tmp_path / "zarrs.zarr", ZOPT), values)


# -- tensorstore -----------------------------------------------------------------------------------------


# float8_e4m3 is not here: tensorstore names it float8_e4m3fn and refuses zarr-extensions' name
TS_TYPES = ["int2", "int4", "bfloat16", "float4_e2m1fn", "float8_e5m2", "float8_e4m3fnuz",
            "float8_e5m2fnuz", "float8_e4m3b11fnuz", "float8_e3m4", "float8_e8m0fnu"]


def _bits(values: np.ndarray, dtype) -> list:
    """Element bit patterns (upper bits of sub-byte types ignored): how values are compared."""
    return dtype.to_bits(np.asarray(values).astype(dtype.to_native_dtype())).tolist()


@pytest.mark.parametrize("name", TS_TYPES)
def test_tensorstore_reads_zopt_and_zopt_reads_tensorstore(tmp_path, name):
    ts = pytest.importorskip("tensorstore")
    dtype = REAL_TYPES[name]
    values = _random_values(np.random.default_rng(1), dtype, 64).reshape(8, 8)
    if dtype.to_native_dtype().kind == "V" or name.startswith(("float", "bfloat")):
        values = np.where(np.isnan(values.astype("f4")), values.dtype.type(0), values)
    z = zarr.create_array(tmp_path / "zopt.zarr", shape=(8, 8), chunks=(4, 8), dtype=dtype, fill_value=None)
    z[:] = values
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "zopt.zarr")}}).result()
    got = t.read().result()
    assert _bits(got, dtype) == _bits(values, dtype)
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "ts.zarr")},
            "metadata": {"shape": [8, 8], "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 8]}},
                         "data_type": name}, "create": True}
    if name == "float8_e8m0fnu":  # tensorstore's default fill 0.0 is not a float8_e8m0fnu value; zopt refuses it
        spec["metadata"]["fill_value"] = 1.0
    w = ts.open(spec).result()
    w.write(values.astype(np.dtype(getattr(ml_dtypes, name)), copy=False)).result()
    meta = json.loads((tmp_path / "ts.zarr" / "zarr.json").read_text())
    assert meta["data_type"] == name
    back = zarr.open_array(tmp_path / "ts.zarr")[:]
    assert _bits(back, dtype) == _bits(values, dtype)
