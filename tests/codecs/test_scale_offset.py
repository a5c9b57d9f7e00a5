"""scale_offset: arithmetic in the array's own type, overflow and remainder errors, parameter
parsing, against Python integers and against numpy/ml_dtypes arithmetic."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.core.dtype import Float16, Float32, Float64, Int8, Int64, UInt16, UInt64

from zopt.codecs.exact_cast import CastError
from zopt.codecs.scale_offset import ScaleOffsetCodec, scale_offset_decode, scale_offset_encode
from zopt.dtypes import ml


def test_float32_arithmetic_stays_in_float32():
    x = np.linspace(-50, 50, 1001, dtype=np.float32)
    (off, s) = ScaleOffsetCodec(offset=1.7, scale=0.1).parameters(Float32())
    assert off.dtype == np.float32 and s == np.float32(0.1)
    y = scale_offset_encode(x, off, s)
    assert y.dtype == np.float32
    assert np.array_equal(y, (x - np.float32(1.7)) * np.float32(0.1))
    promoted = ((x.astype(np.float64) - 1.7) * 0.1).astype(np.float32)
    assert not np.array_equal(y, promoted)  # promotion would give other float32 values
    back = scale_offset_decode(y, off, s)
    assert np.array_equal(back, y / np.float32(0.1) + np.float32(1.7))


def test_integer_intermediate_overflow_is_an_error():
    off, s = ScaleOffsetCodec(offset=-1, scale=1).parameters(Int8())
    with pytest.raises(CastError, match=r"127.*overflows int8") as err:
        scale_offset_encode(np.array([0, 127, 5], np.int8), off, s, where="chunk 'x/c/3'")
    assert err.value.position == (1,) and "chunk 'x/c/3'" in str(err.value)
    off, s = ScaleOffsetCodec(offset=0, scale=2).parameters(Int8())
    with pytest.raises(CastError, match="64"):
        scale_offset_encode(np.array([63, 64], np.int8), off, s)
    assert scale_offset_encode(np.array([63, -64], np.int8), off, s).tolist() == [126, -128]


def test_int64_scale_of_minus_two_pow_63():
    off, s = ScaleOffsetCodec(offset=0, scale=-(2**63)).parameters(Int64())
    assert scale_offset_encode(np.array([0, 1], np.int64), off, s).tolist() == [0, -(2**63)]
    with pytest.raises(CastError):
        scale_offset_encode(np.array([-1], np.int64), off, s)  # 2^63 overflows
    assert scale_offset_decode(np.array([0, -(2**63)], np.int64), off, s).tolist() == [0, 1]
    with pytest.raises(CastError, match="not a multiple"):
        scale_offset_decode(np.array([5], np.int64), off, s)


def test_integer_decode_needs_an_exact_division():
    off, s = ScaleOffsetCodec(offset=3, scale=4).parameters(Int64())
    assert scale_offset_decode(np.array([8, -4], np.int64), off, s).tolist() == [5, 2]
    with pytest.raises(CastError, match="not a multiple of scale 4"):
        scale_offset_decode(np.array([8, 9], np.int64), off, s)


def test_int64_and_uint64_extremes():
    big = np.array([2**63 - 1, -(2**63)], np.int64)
    off, s = ScaleOffsetCodec(offset=-1, scale=-1).parameters(Int64())
    with pytest.raises(CastError):  # 2^63 - 1 + 1 overflows
        scale_offset_encode(big[:1], off, s)
    # -2^63 - (-1) = -2^63 + 1; times -1 = 2^63 - 1: fits
    assert scale_offset_encode(big[1:], off, s).tolist() == [2**63 - 1]
    assert scale_offset_decode(np.array([2**63 - 1], np.int64), off, s).tolist() == [-(2**63)]
    u = np.array([2**64 - 1, 5], np.uint64)
    off, s = ScaleOffsetCodec(offset=5, scale=1).parameters(UInt64())
    assert scale_offset_encode(u, off, s).tolist() == [2**64 - 6, 0]
    with pytest.raises(CastError):
        scale_offset_encode(np.array([4], np.uint64), off, s)


@settings(max_examples=int(os.environ.get("ZOPT_HYPOTHESIS_EXAMPLES", 300)), deadline=None)
@given(st.sampled_from(["int8", "uint8", "int16", "int32", "int64", "uint64"]), st.data())
def test_integer_encode_decode_match_python_integers(name, data):
    dtype = np.dtype(name)
    info = np.iinfo(dtype)
    x = data.draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=1, max_size=8))
    off = data.draw(st.integers(int(info.min), int(info.max)))
    s = data.draw(st.integers(int(info.min), int(info.max)).filter(lambda v: v != 0))
    offset, scale = ScaleOffsetCodec(offset=off, scale=s).parameters(_zdtype(name))
    arr = np.array(x, dtype=dtype)
    ok = all(info.min <= v - off <= info.max and info.min <= (v - off) * s <= info.max for v in x)
    if not ok:
        with pytest.raises(CastError):
            scale_offset_encode(arr, offset, scale)
        return
    y = scale_offset_encode(arr, offset, scale)
    assert y.tolist() == [(v - off) * s for v in x]
    assert scale_offset_decode(y, offset, scale).tolist() == x


def _zdtype(name):
    from zopt.dtypes.numeric import zarr_dtype

    return zarr_dtype(name)


@pytest.mark.parametrize("dtype", [ml.BFloat16(), ml.Float8E4M3(), ml.Float8E5M2(), Float16()],
                         ids=lambda d: d.to_native_dtype().name)
def test_small_floats_match_native_arithmetic(dtype):
    native = dtype.to_native_dtype()
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(4000) * 20).astype(native)
    off, s = ScaleOffsetCodec(offset=1.5, scale=0.75).parameters(dtype)
    y = scale_offset_encode(x, off, s)
    with np.errstate(all="ignore"):
        expected = (x - off) * s  # ml_dtypes/numpy: computed wider, rounded once per operation
    fin = np.isfinite(expected.astype(np.float64))
    assert np.array_equal(y.astype(np.float64)[fin], expected.astype(np.float64)[fin])
    back = scale_offset_decode(y, off, s)
    with np.errstate(all="ignore"):
        expected_back = y / s + off
    assert np.array_equal(back.astype(np.float64), expected_back.astype(np.float64))


def test_float_nan_and_infinity_pass_overflow_is_an_error():
    off, s = ScaleOffsetCodec(offset=0, scale=1e30).parameters(Float32())
    y = scale_offset_encode(np.array([np.nan, np.inf, -np.inf, 1.0], np.float32), off, s)
    assert np.isnan(y[0]) and y[1] == np.inf and y[2] == -np.inf and y[3] == np.float32(1e30)
    with pytest.raises(CastError, match="overflows float32"):
        scale_offset_encode(np.array([1.0, 1e10], np.float32), off, s)
    # a type without infinity: float8_e4m3fnuz (max 240)
    off, s = ScaleOffsetCodec(offset=0, scale=10).parameters(ml.Float8E4M3FNUZ())
    with pytest.raises(CastError, match="overflows float8_e4m3fnuz"):
        scale_offset_encode(np.array([1.0, 30.0], ml_dtypes.float8_e4m3fnuz), off, s)
    off, s = ScaleOffsetCodec(offset=0, scale=2).parameters(ml.Float4E2M1FN())
    with pytest.raises(CastError):  # ml_dtypes would saturate 4 * 2 to 6
        scale_offset_encode(np.array([4.0], ml_dtypes.float4_e2m1fn), off, s)


@pytest.mark.parametrize(("dtype", "scale"), [(Float16(), "0x0000"), (Float16(), "0x8000"), (Float32(), "0x00000000"),
                                              (Float64(), -0.0), (Int8(), 0), (ml.Float8E4M3(), "0x00")])
def test_zero_scale_in_any_spelling(dtype, scale):
    with pytest.raises(ValueError, match="scale"):
        ScaleOffsetCodec(scale=scale).parameters(dtype)


@pytest.mark.parametrize(("config", "dtype", "match"), [
    ({"offset": 1.5}, Int8(), "offset"), ({"scale": 2.0}, Int8(), "scale"), ({"offset": 300}, Int8(), "offset"),
    ({"offset": "NaN"}, Float32(), "offset"), ({"scale": "Infinity"}, Float64(), "scale"),
    ({"offset": 1e40}, Float32(), "offset"), ({"offset": -1}, UInt16(), "offset"),
])
def test_invalid_parameters_for_the_data_type(config, dtype, match):
    with pytest.raises(ValueError, match=match):
        ScaleOffsetCodec(**config).parameters(dtype)


def test_configuration_json():
    assert ScaleOffsetCodec.from_dict({"name": "scale_offset"}).to_dict() == {"name": "scale_offset"}
    d = {"name": "scale_offset", "configuration": {"offset": "0x3c00", "scale": 2}}
    codec = ScaleOffsetCodec.from_dict(d)
    assert codec.to_dict() == d
    assert float(codec.parameters(Float16())[0]) == 1.0  # 0x3c00 is 1.0 in float16
    with pytest.raises(ValueError, match="unknown"):
        ScaleOffsetCodec.from_dict({"name": "scale_offset", "configuration": {"offset": 1, "factor": 2}})
    with pytest.raises(ValueError, match="offset"):
        ScaleOffsetCodec(offset=[1])
    with pytest.raises(ValueError, match="scale"):
        ScaleOffsetCodec(scale=0)


def test_identity_when_omitted():
    off, s = ScaleOffsetCodec().parameters(ml.Int4())
    x = np.array([-8, 0, 7], ml_dtypes.int4)
    assert scale_offset_encode(x, off, s).tolist() == x.tolist()
