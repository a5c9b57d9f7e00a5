"""zopt's ml_dtypes data types: fill-value JSON and the ``bytes`` codec, through real LocalStores."""

from __future__ import annotations

import json
import math

import ml_dtypes
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import zopt  # noqa: F401
from zopt.dtypes.ml import ML_DTYPES, BFloat16, Float4E2M1FN, Int4, MLFloat, MLInt

NAMES = sorted(ML_DTYPES)


def _create(path, name, shape=(8,), chunks=(8,), fill_value=0, **kw):
    return zarr.create_array(
        str(path), shape=shape, chunks=chunks, dtype=np.dtype(ML_DTYPES[name].ml_type),
        fill_value=fill_value, compressors=None, **kw,
    )


def _fill_for(name):
    return 1.0 if issubclass(ML_DTYPES[name], MLFloat) else 1


@pytest.mark.parametrize("name", NAMES)
def test_dtype_json_and_native_round_trip(name):
    cls = ML_DTYPES[name]
    zdtype = zarr.dtype.parse_dtype(name, zarr_format=3)
    assert isinstance(zdtype, cls)
    assert zdtype.to_json(zarr_format=3) == name
    assert zarr.dtype.parse_dtype(np.dtype(cls.ml_type), zarr_format=3) == zdtype
    with pytest.raises(ValueError, match="zarr_format"):
        zdtype.to_json(zarr_format=2)


@pytest.mark.parametrize("name", NAMES)
def test_fill_value_json_round_trip_through_store(tmp_path, name):
    fill = _fill_for(name)
    arr = _create(tmp_path / "a.zarr", name, fill_value=fill)
    meta = json.loads((tmp_path / "a.zarr" / "zarr.json").read_text())
    assert meta["data_type"] == name
    assert meta["fill_value"] == fill and type(meta["fill_value"]) is type(fill)
    again = zarr.open_array(str(tmp_path / "a.zarr"))
    assert float(again.fill_value) == fill
    assert np.all(again[:].astype(np.float64) == fill)  # unwritten chunks read as the fill value
    assert arr.dtype == again.dtype


@pytest.mark.parametrize(
    "name,json_value,bits",
    [
        ("bfloat16", "NaN", 0x7FC0),
        ("bfloat16", "Infinity", 0x7F80),
        ("bfloat16", "-Infinity", 0xFF80),
        ("bfloat16", "0x3f80", 0x3F80),
        ("bfloat16", -0.0, 0x8000),
        ("float8_e4m3", "NaN", 0x7C),
        ("float8_e5m2", "-Infinity", 0xFC),
        ("float8_e4m3fnuz", "NaN", 0x80),
        ("float8_e8m0fnu", "NaN", 0xFF),
        ("float4_e2m1fn", "0x9", 0x9),
        ("float4_e2m1fn", -6.0, 0xF),
        ("float6_e2m3fn", 1.0, 0x08),
    ],
)
def test_float_fill_values_by_bits(name, json_value, bits):
    dt = ML_DTYPES[name]()
    value = dt.from_json_scalar(json_value, zarr_format=3)
    assert int(dt.to_bits(np.array(value))) == bits
    back = dt.to_json_scalar(value, zarr_format=3)
    assert back == json_value or (isinstance(json_value, str) and json_value.startswith("0x") and dt.from_json_scalar(back, zarr_format=3) == value)


def test_non_canonical_nan_written_as_hex():
    dt = BFloat16()
    value = dt.from_json_scalar("0x7fc1", zarr_format=3)
    assert math.isnan(float(value))
    assert dt.to_json_scalar(value, zarr_format=3) == "0x7fc1"


@pytest.mark.parametrize(
    "name,bad",
    [
        ("float4_e2m1fn", "NaN"),
        ("float4_e2m1fn", "Infinity"),
        ("float6_e3m2fn", "-Infinity"),
        ("float8_e4m3fnuz", "Infinity"),
        ("float4_e2m1fn", 7.0),
        ("float4_e2m1fn", "0x10"),
        ("bfloat16", "nan"),
        ("float8_e8m0fnu", 0.0),
        ("int4", 8),
        ("uint2", -1),
        ("int2", 1.5),
    ],
)
def test_invalid_fill_values_raise(name, bad):
    dt = ML_DTYPES[name]()
    with pytest.raises((ValueError, TypeError)):
        dt.from_json_scalar(bad, zarr_format=3)


@pytest.mark.parametrize(
    "name,values,stored",
    [
        ("int4", [-8, -1, 0, 1, 7], "f8ff000107"),
        ("uint4", [0, 15, 8], "000f08"),
        ("int2", [-2, -1, 0, 1], "feff0001"),
        ("uint2", [0, 3], "0003"),
        ("float4_e2m1fn", [0.5, -0.5, 6.0, -6.0], "0109070f"),
        ("float6_e2m3fn", [1.0, -1.0], "0828"),
        ("float8_e4m3", [1.0], "38"),
    ],
)
def test_bytes_codec_writes_expected_bytes(tmp_path, name, values, stored):
    arr = _create(tmp_path / "a.zarr", name, shape=(len(values),), chunks=(len(values),))
    arr[:] = np.array(values, dtype=ML_DTYPES[name].ml_type)
    assert (tmp_path / "a.zarr" / "c" / "0").read_bytes().hex() == stored
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a.zarr"))[:].astype(float), values)


@pytest.mark.parametrize("endian,stored", [("little", "803f00c0"), ("big", "3f80c000")])
def test_bfloat16_endianness(tmp_path, endian, stored):
    from zopt.codecs import BytesCodec

    arr = zarr.create_array(
        str(tmp_path / "b.zarr"), shape=(2,), chunks=(2,), dtype=ml_dtypes.bfloat16,
        serializer=BytesCodec(endian=endian), compressors=None, fill_value=0,
    )
    arr[:] = np.array([1.0, -2.0], ml_dtypes.bfloat16)
    assert (tmp_path / "b.zarr" / "c" / "0").read_bytes().hex() == stored
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "b.zarr"))[:].astype(float), [1.0, -2.0])


@pytest.mark.parametrize(
    "name,raw,expected",
    [
        ("int4", b"\x08\xf8\x18", [-8, -8, -8]),
        ("uint4", b"\xf3\x03", [3, 3]),
        ("int2", b"\x03\xff\x7e", [-1, -1, -2]),
        ("float4_e2m1fn", b"\x01\x11\xf1", [0.5, 0.5, 0.5]),
        ("float6_e2m3fn", b"\x08\xc8", [1.0, 1.0]),
    ],
)
def test_bytes_codec_ignores_upper_bits_on_read(tmp_path, name, raw, expected):
    _create(tmp_path / "a.zarr", name, shape=(len(raw),), chunks=(len(raw),))
    (tmp_path / "a.zarr" / "c").mkdir()
    (tmp_path / "a.zarr" / "c" / "0").write_bytes(raw)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a.zarr"))[:].astype(float), expected)


@settings(max_examples=20, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("name", NAMES)
def test_bytes_round_trip_bit_exact(tmp_path_factory, name, data):
    cls = ML_DTYPES[name]
    dt = cls()
    n = data.draw(st.integers(1, 40))
    patterns = np.array(data.draw(st.lists(st.integers(0, (1 << cls.bits) - 1), min_size=n, max_size=n)), dtype=dt._uint)
    values = dt.from_bits(patterns)
    path = tmp_path_factory.mktemp("rt") / "a.zarr"
    chunk = data.draw(st.integers(1, n))
    arr = _create(path, name, shape=(n,), chunks=(chunk,), fill_value=_fill_for(name))
    arr[:] = values
    back = zarr.open_array(str(path))[:]
    np.testing.assert_array_equal(dt.to_bits(back), patterns)


def test_int_and_float_classes_cover_the_issue_list():
    assert set(NAMES) == {
        "int2", "uint2", "int4", "uint4", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn",
        "bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fnuz",
        "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
    }
    assert issubclass(ML_DTYPES["int4"], MLInt) and ML_DTYPES["int4"] is Int4
    assert issubclass(ML_DTYPES["float4_e2m1fn"], MLFloat) and ML_DTYPES["float4_e2m1fn"] is Float4E2M1FN
