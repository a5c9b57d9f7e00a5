"""cast_value: the spec's and the issue's examples, an exact-rational reference for every
ml_dtypes type, and cast-value-rs as the oracle for the standard types (hypothesis)."""

from __future__ import annotations

import bisect
import math
import os
import warnings
from fractions import Fraction

import cast_value_rs
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zopt.codecs.cast_value import CastValueCodec
from zopt.codecs.exact_cast import ROUNDING, CastError, cast_array

ML_FLOATS = [ml_dtypes.float4_e2m1fn, ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn, ml_dtypes.float8_e3m4,
             ml_dtypes.float8_e4m3, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3b11fnuz, ml_dtypes.float8_e4m3fnuz,
             ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e8m0fnu, ml_dtypes.bfloat16]
ML_INTS = [ml_dtypes.int2, ml_dtypes.uint2, ml_dtypes.int4, ml_dtypes.uint4]
STD = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"]


def bits(a: np.ndarray) -> list[int]:
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}").astype(np.uint64).tolist()


# -- the and the spec's examples ---------------------------------------------------------
@pytest.mark.parametrize(("rounding", "expected"), [
    ("nearest-even", 18446744073709551616.0), ("towards-positive", 18446744073709551616.0),
    ("nearest-away", 18446744073709551616.0), ("towards-zero", 18446744073709549568.0),
    ("towards-negative", 18446744073709549568.0)])
def test_uint64_max_to_float64_rounds_the_exact_integer(rounding, expected):
    out = cast_array(np.array([2**64 - 1], np.uint64), np.float64, rounding=rounding)
    assert out[0] == expected


@pytest.mark.parametrize(("rounding", "expected"), [
    ("nearest-even", 2**53), ("towards-zero", 2**53), ("towards-negative", 2**53),
    ("towards-positive", 2**53 + 2), ("nearest-away", 2**53 + 2)])
def test_two_pow_53_plus_one_to_float64(rounding, expected):
    for dtype in (np.int64, np.uint64):
        assert int(cast_array(np.array([2**53 + 1], dtype), np.float64, rounding=rounding)[0]) == expected
    # negative: towards-negative and towards-positive swap roles
    neg = int(cast_array(np.array([-(2**53) - 1], np.int64), np.float64, rounding=rounding)[0])
    mirrored = {"towards-negative": "towards-positive", "towards-positive": "towards-negative"}.get(rounding, rounding)
    assert neg == -int(cast_array(np.array([2**53 + 1], np.int64), np.float64, rounding=mirrored)[0])


def test_nearest_away_is_not_floor_of_x_plus_half():
    x = np.array([0.49999999999999994, 2.0**52 + 1, 2.5, -2.5, 0.5, -0.5, 1.5])
    out = cast_array(x, np.int64, rounding="nearest-away")
    assert out.tolist() == [0, 2**52 + 1, 3, -3, 1, -1, 2]
    naive = np.sign(x) * np.floor(np.abs(x) + 0.5)
    assert naive[0] == 1 and naive[1] == 2**52 + 2  # the pitfall the issue names


@pytest.mark.parametrize(("rounding", "expected"), [
    ("nearest-even", [2, -2, 2, 4]), ("towards-zero", [2, -2, 1, 3]), ("towards-positive", [3, -2, 2, 4]),
    ("towards-negative", [2, -3, 1, 3]), ("nearest-away", [3, -3, 2, 4])])
def test_float_to_int_each_rounding(rounding, expected):
    assert cast_array(np.array([2.5, -2.5, 1.5, 3.5]), np.int8, rounding=rounding).tolist() == expected


def test_wrap_examples():
    assert cast_array(np.array([32768, 32769, -32769]), np.int16, out_of_range="wrap").tolist() == [-32768, -32767, 32767]
    assert cast_array(np.array([255.0, 256.0], np.float32), np.uint8, out_of_range="wrap").tolist() == [255, 0]
    assert cast_array(np.array([1e20, -1.0]), np.uint64, out_of_range="wrap").tolist() == [
        10**20 % 2**64, 2**64 - 1]
    assert cast_array(np.array([8, 9, -9]), ml_dtypes.int4, out_of_range="wrap").astype(int).tolist() == [-8, -7, 7]


def test_clamp_examples():
    assert cast_array(np.array([300.0, -5.0]), np.uint8, out_of_range="clamp").tolist() == [255, 0]
    assert cast_array(np.array([1e40, -1e40]), np.float32, out_of_range="clamp").tolist() == [np.inf, -np.inf]
    e4m3fn = cast_array(np.array([1e9, -1e9]), ml_dtypes.float8_e4m3fn, out_of_range="clamp")
    assert e4m3fn.astype(float).tolist() == [448.0, -448.0]  # no infinity: the largest finite value
    assert cast_array(np.array([100.0]), ml_dtypes.float4_e2m1fn, out_of_range="clamp").astype(float).tolist() == [6.0]
    assert cast_array(np.array([2**40]), ml_dtypes.uint2, out_of_range="clamp").astype(int).tolist() == [3]


def test_out_of_range_absent_is_an_error_naming_value_and_rule():
    with pytest.raises(CastError) as err:
        cast_array(np.array([1.0, 300.0, 400.0]), np.uint8, where="chunk 'a/c/0'")
    e = err.value
    assert e.value == 300.0 and e.position == (1,) and e.count == 2 and e.rule == "out_of_range"
    assert "chunk 'a/c/0'" in str(e) and "300.0" in str(e) and "out_of_range" in str(e)


def test_rounding_up_past_the_largest_value_is_out_of_range():
    # float16: 65519 rounds to 65504, 65520 is the tie that rounds up to 65536 (out of range)
    assert cast_array(np.array([65519.0]), np.float16)[0] == 65504
    with pytest.raises(CastError):
        cast_array(np.array([65520.0]), np.float16)
    assert cast_array(np.array([65520.0]), np.float16, rounding="towards-zero")[0] == 65504
    # float4_e2m1fn: 7 is the tie between 6 and 8; ml_dtypes' astype saturates it to 6
    with pytest.raises(CastError):
        cast_array(np.array([7.0]), ml_dtypes.float4_e2m1fn)
    assert float(cast_array(np.array([6.5]), ml_dtypes.float4_e2m1fn)[0]) == 6.0


def test_ml_dtypes_pitfalls_are_errors():
    with pytest.raises(CastError):  # ml_dtypes wraps int4 silently
        cast_array(np.array([9]), ml_dtypes.int4)
    with pytest.raises(CastError, match="NaN"):  # ml_dtypes turns NaN into -0.0
        cast_array(np.array([np.nan]), ml_dtypes.float4_e2m1fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert float(np.array([100.0]).astype(ml_dtypes.float4_e2m1fn)[0]) == 6.0  # saturates
    with pytest.raises(CastError):
        cast_array(np.array([100.0]), ml_dtypes.float4_e2m1fn)


def test_nan_and_infinity():
    assert np.isnan(cast_array(np.array([np.nan]), np.float16)[0])
    assert np.isnan(cast_array(np.array([np.nan], np.float32), ml_dtypes.bfloat16).astype(float)[0])
    assert cast_array(np.array([-np.inf]), ml_dtypes.float8_e5m2).astype(float)[0] == -np.inf
    for target, oor in [(np.uint8, "clamp"), (np.int32, None), (ml_dtypes.float6_e2m3fn, "clamp")]:
        with pytest.raises(CastError, match="NaN"):
            cast_array(np.array([np.nan]), target, out_of_range=oor)
    for target in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, np.int16):
        with pytest.raises(CastError, match="Infinity"):
            cast_array(np.array([np.inf]), target, out_of_range="clamp")


def test_signed_zero():
    z = np.array([-0.0, 0.0, -1e-10])
    assert np.signbit(cast_array(z, np.float16)).tolist() == [True, False, True]
    assert np.signbit(cast_array(z, np.float32).astype(np.float64)).tolist() == [True, False, True]
    assert np.signbit(cast_array(z, ml_dtypes.bfloat16).astype(np.float64)).tolist() == [True, False, True]
    fnuz = cast_array(z, ml_dtypes.float8_e4m3fnuz)  # no negative zero: 0x80 is its NaN
    assert bits(fnuz) == [0, 0, 0]
    assert cast_array(np.array([-0.0, -0.4]), np.int8).tolist() == [0, 0]


def test_scalar_map_first_match_wins_not_chained_nan_and_zero_rules():
    nan_payload = np.array([0x7FF8000000000123, 0xFFF8000000000000], np.uint64).view(np.float64)
    x = np.concatenate([[1.0, 2.0, -0.0, 0.0], nan_payload])
    m = [(np.float64(1.0), np.uint8(2)), (np.float64(2.0), np.uint8(3)), (np.float64(1.0), np.uint8(9)),
         (np.float64(0.0), np.uint8(7)), (np.float64(np.nan), np.uint8(200))]
    out = cast_array(x, np.uint8, scalar_map=m)
    # 1 → 2 (not 9: first wins; not 3: no chaining); both zeros match 0; any NaN matches NaN
    assert out.tolist() == [2, 3, 7, 7, 200, 200]


def test_scalar_map_decides_before_out_of_range_and_specials():
    x = np.array([np.inf, -np.inf, 1000.0, 5.0])
    m = [(np.float64(np.inf), np.uint8(255)), (np.float64(-np.inf), np.uint8(0)), (np.float64(1000.0), np.uint8(1))]
    assert cast_array(x, np.uint8, scalar_map=m).tolist() == [255, 0, 1, 5]


@pytest.mark.parametrize("config", [
    {"data_type": "uint8", "rounding": "nearest"}, {"data_type": "uint8", "out_of_range": "saturate"},
    {"data_type": "float32", "out_of_range": "wrap"}, {"data_type": "complex64"}, {"data_type": "nope"},
    {"data_type": "uint8", "scalar_map": {"encode": [[1]]}}, {"data_type": "uint8", "scalar_map": {"both": []}},
    {"data_type": "uint8", "scalar_map": {"decode": [[1.5, 0]]}}, {"data_type": "uint8", "scalar_map": {"encode": [[1, 256]]}},
])
def test_invalid_configuration_names_the_parameter(config):
    bad_key = next(k for k in ("scalar_map", "out_of_range", "rounding") if k in config) if len(config) > 1 else "data_type"
    with pytest.raises(ValueError, match=bad_key):
        CastValueCodec.from_dict({"name": "cast_value", "configuration": config})


def test_unknown_and_missing_keys():
    with pytest.raises(ValueError, match="unknown"):
        CastValueCodec.from_dict({"name": "cast_value", "configuration": {"data_type": "uint8", "rounding_mode": "x"}})
    with pytest.raises(ValueError, match="data_type"):
        CastValueCodec.from_dict({"name": "cast_value", "configuration": {"rounding": "towards-zero"}})


def test_codec_json_round_trip_keeps_hex_strings():
    d = {"name": "cast_value", "configuration": {"data_type": "float8_e4m3", "rounding": "towards-zero",
                                                 "out_of_range": "clamp",
                                                 "scalar_map": {"encode": [["0x7ff8000000000000", "0x7f"]],
                                                                "decode": [["0x7f", "NaN"]]}}}
    assert CastValueCodec.from_dict(d).to_dict() == d


# -- exact rational reference for the ml_dtypes types -------------------------------------------------
def _format(dtype) -> tuple[list[Fraction], list[int], Fraction, Fraction]:
    """Finite values (one zero) with their codes, sorted, and the virtual steps beyond both ends."""
    n = 1 << ml_dtypes.finfo(dtype).bits
    codes = np.arange(n, dtype=np.uint8 if n <= 256 else np.uint16)
    with np.errstate(invalid="ignore"):
        vals = codes.view(dtype).astype(np.float64)
    pairs = sorted({(Fraction(float(v)), int(c)) for v, c in zip(vals, codes, strict=True)
                    if np.isfinite(v) and not (v == 0 and np.signbit(v))}, key=lambda p: p[0])
    values, cs = [p[0] for p in pairs], [p[1] for p in pairs]
    top = values[-1]
    step = Fraction(2) ** (math.floor(math.log2(top)) - ml_dtypes.finfo(dtype).nmant)
    low = -(top + step) if values[0] < 0 else values[0] / 2
    return values, cs, low, top + step


def _reference(x: Fraction, fmt, rounding: str) -> Fraction | None:
    """x rounded to the format with an unbounded exponent; None when out of range."""
    values, codes, low, high = fmt
    ext = [low, *values, high]
    ecodes = [-1, *codes, -1]
    if x < low or x > high:
        return None
    i = bisect.bisect_left(ext, x)
    if ext[i] != x:
        lo, hi = i - 1, i
        mid = (ext[lo] + ext[hi]) / 2
        if rounding == "towards-positive":
            i = hi
        elif rounding == "towards-negative":
            i = lo
        elif rounding == "towards-zero":
            i = hi if x < 0 else lo
        elif x != mid:
            i = hi if x > mid else lo
        elif rounding == "nearest-even":
            i = lo if ecodes[lo] % 2 == 0 else hi
        else:
            i = hi if x > 0 else lo
    return None if i in (0, len(ext) - 1) else ext[i]


def _check_against(x: np.ndarray, refs: list, dtype, rounding: str) -> None:
    """One vectorised call for the in-range elements, one call per out-of-range element."""
    ok = np.array([r is not None for r in refs])
    got = cast_array(x[ok], dtype, rounding=rounding).astype(np.float64)
    expected = [r for r in refs if r is not None]
    bad = [(v, g, r) for v, g, r in zip(x[ok], got, expected, strict=True) if Fraction(float(g)) != r]
    assert not bad, bad[:5]
    for v in x[~ok]:
        with pytest.raises(CastError):
            cast_array(np.array([v]), dtype, rounding=rounding)


def _sample_values(rng) -> np.ndarray:
    mags = rng.choice([1e-45, 1e-10, 1e-3, 0.1, 1.0, 10.0, 300.0, 6e4, 1e9, 1e38], 600)
    x = rng.standard_normal(600) * mags
    halfway = np.array([0.75, 1.25, 2.5, 3.5, 5.0, 7.0, 6.5, 464.0, 480.0, 240.0, 248.0, 57344.0, 61440.0, 65520.0,
                        2.0**-7, 2.0**-10, 1.5 * 2.0**-9, 2.0**127, 1.5 * 2.0**127, 2.0**-128, 3.0 * 2.0**-129])
    return np.concatenate([x, halfway, -halfway])


@pytest.mark.parametrize("dtype", ML_FLOATS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("rounding", ROUNDING)
def test_float64_to_ml_floats_matches_exact_rationals(dtype, rounding):
    fmt = _format(dtype)
    x = _sample_values(np.random.default_rng(len(np.dtype(dtype).name)))
    refs = [_reference(Fraction(float(v)), fmt, rounding) for v in x]
    _check_against(x, refs, dtype, rounding)
    # with clamp, in one call: the same values where in range
    got = cast_array(x, dtype, rounding=rounding, out_of_range="clamp").astype(np.float64)
    assert all(r is None or Fraction(float(g)) == r for g, r in zip(got, refs, strict=True))


@pytest.mark.parametrize("dtype", ML_FLOATS[3:], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("rounding", ["nearest-even", "towards-zero", "nearest-away"])
def test_integers_and_float32_to_ml_floats_match_exact_rationals(dtype, rounding):
    fmt = _format(dtype)
    rng = np.random.default_rng(1)
    ints = np.concatenate([rng.integers(-(2**62), 2**62, 200), rng.integers(-600, 600, 200),
                           [2**53 + 1, 2**60 + 2**49, -(2**55) - 3, 255, 256, 257, 479, 481, 465]]).astype(np.int64)
    for source in (ints, ints.astype(np.float32)):
        refs = [_reference(Fraction(int(v)) if source.dtype.kind == "i" else Fraction(float(v)), fmt, rounding)
                for v in source]
        _check_against(source, refs, dtype, rounding)


@pytest.mark.parametrize("src", ML_FLOATS + ML_INTS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("dst", ML_FLOATS[:4] + ML_INTS + [np.int8, np.uint8, np.float16], ids=lambda t: np.dtype(t).name)
def test_every_bit_pattern_between_small_types_matches_exact_rationals(src, dst):
    n = 1 << (ml_dtypes.iinfo(src).bits if src in ML_INTS else ml_dtypes.finfo(src).bits)
    x = np.arange(n, dtype=np.uint16 if n > 256 else np.uint8).view(src)
    if n > 256:
        x = x[::97]
    with np.errstate(invalid="ignore"):
        wide = x.astype(np.float64)
    x = x[np.isfinite(wide)]
    fmt = None if dst in ML_INTS + [np.int8, np.uint8] else _format(dst)
    refs = []
    for v in x:
        exact = Fraction(float(np.asarray(v).astype(np.float64)))
        if fmt is None:
            info = ml_dtypes.iinfo(dst) if dst in ML_INTS else np.iinfo(dst)
            r = Fraction(round(exact))  # nearest-even, as Python's round
            refs.append(r if info.min <= r <= info.max else None)
        else:
            refs.append(_reference(exact, fmt, "nearest-even"))
    _check_against(x, refs, dst, "nearest-even")


# -- cast-value-rs as the oracle for the standard types --------------------------------------------
def _edge_values(dtype: np.dtype) -> list:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        cands = [info.min, info.max, 0, 1, -1, 127, 128, 255, 256, 32767, 32768, 65535, 65536, 2**31 - 1, 2**31,
                 2**53 + 1, 2**63 - 1, 2**24 + 1, 4097, info.min + 1, info.max - 1]
        return [c for c in cands if info.min <= c <= info.max]
    info = np.finfo(dtype)
    return [0.0, -0.0, np.nan, np.inf, -np.inf, float(info.max), -float(info.max), float(info.tiny),
            float(info.smallest_subnormal), 0.5, 2.5, -2.5, 0.49999999999999994, 255.5, 256.0, -128.5, 65504.0,
            65520.0, 2.0**63, 2.0**64, -(2.0**63), 32767.5, 3.4028235e38, 1e300, 2.0**52 + 1]


@st.composite
def _case(draw):
    src, tgt = np.dtype(draw(st.sampled_from(STD))), np.dtype(draw(st.sampled_from(STD)))
    rounding = draw(st.sampled_from(ROUNDING))
    oor = draw(st.sampled_from([None, "clamp"] + (["wrap"] if tgt.kind in "iu" else [])))
    edges = _edge_values(src)
    if src.kind in "iu":
        info = np.iinfo(src)
        elem = st.one_of(st.sampled_from(edges), st.integers(int(info.min), int(info.max)))
    else:
        bound = min(1e6, float(np.finfo(src).max))
        elem = st.one_of(st.sampled_from(edges), st.floats(width=8 * src.itemsize, allow_nan=True),
                         st.floats(-bound, bound, width=8 * src.itemsize))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = np.array(draw(st.lists(elem, min_size=1, max_size=12)), dtype=np.float64 if src.kind == "f" else object)
        values = values.astype(src)
    entries = []
    if draw(st.booleans()):
        key_pool = ([k for k in (0, 1, 100, 255) if k <= np.iinfo(src).max] if src.kind in "iu"
                    else [0.0, -0.0, 1.0, float("nan"), float("inf"), 300.5])
        val_pool = [0, 7] if tgt.kind in "iu" else [0.0, -0.0, 7.5, float("nan")]
        entries = draw(st.lists(st.tuples(st.sampled_from(key_pool), st.sampled_from(val_pool)), max_size=3))
    return src, tgt, rounding, oor, values, entries


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        return np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a) & ~np.isnan(a),
                                                                        np.signbit(b) & ~np.isnan(b))
    return np.array_equal(a, b)


@settings(max_examples=int(os.environ.get("ZOPT_HYPOTHESIS_EXAMPLES", 400)), deadline=None)
@given(_case())
def test_agrees_with_cast_value_rs(case):
    """Every disagreement would be listed in docs/interop.md; today there are none."""
    src, tgt, rounding, oor, values, entries = case
    mine_map = [(np.array(k).astype(src), np.array(v).astype(tgt)) for k, v in entries]
    try:
        mine = cast_array(values, tgt, rounding=rounding, out_of_range=oor, scalar_map=mine_map)
    except CastError:
        mine = None
    try:
        theirs = cast_value_rs.cast_array(values, target_dtype=tgt.name, rounding_mode=rounding,
                                          out_of_range_mode=oor, scalar_map_entries=entries or None)
    except (ValueError, OverflowError, TypeError):
        theirs = None
    assert (mine is None) == (theirs is None), (values, mine, theirs)
    if mine is not None:
        assert _same(mine, theirs), (values, mine, theirs)


@pytest.mark.parametrize("dtype", [*ML_FLOATS, np.float16], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("rounding", ROUNDING)
def test_float32_table_path_equals_the_float64_path(dtype, rounding):
    """float32 sources use a (top bits, sticky bit) table; float64 sources the exact kernel."""
    rng = np.random.default_rng(7)
    pats = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    pats[:2000] &= np.uint32(0x807FFFFF)  # exponent 0: subnormals
    pats[2000:8000] = (pats[2000:8000] & np.uint32(0x83FFFFFF)) | np.uint32(0x3C000000)  # near 1
    x = pats.view(np.float32)
    x = x[np.isfinite(x)]
    wide = cast_array(x.astype(np.float64), dtype, rounding=rounding, out_of_range="clamp")
    narrow = cast_array(x, dtype, rounding=rounding, out_of_range="clamp")
    assert bits(narrow) == bits(wide)
    for big in (np.finfo(np.float32).max, np.float32(1e30), np.float32(-500.0)):
        one = np.array([1.0, big], np.float32)
        try:
            expected = bits(cast_array(one.astype(np.float64), dtype, rounding=rounding))
        except CastError as exc:
            with pytest.raises(CastError) as err:
                cast_array(one, dtype, rounding=rounding)
            assert err.value.position == exc.position == (1,)
        else:
            assert bits(cast_array(one, dtype, rounding=rounding)) == expected


_WIDENING = [(np.uint8, np.float32), (np.uint16, np.float32), (np.int16, np.float16), (np.uint32, np.float32),
             (np.int32, np.float32), (np.uint32, np.float64), (np.int64, np.float64), (np.float32, np.float32),
             (np.float16, np.float64), (np.float32, np.float64), (np.uint16, np.int32), (np.int8, np.int64)]


@settings(max_examples=int(os.environ.get("ZOPT_HYPOTHESIS_EXAMPLES", 300)), deadline=None)
@given(pair=st.sampled_from(_WIDENING), data=st.data())
def test_widening_fast_path_equals_the_exact_kernels(monkeypatch_module, pair, data):
    """Widening casts (every lossy decode) are numpy's astype plus masked scalar_map stores; the
    result must be the exact kernels' bit for bit (NaN as NaN, the first matching key winning),
    and integers past 2^(nmant+1) (uint32 → float32 above 2^24) must still be rounded exactly."""
    from zopt.codecs import exact_cast  # cast_array's module: its widens_exactly decides the path

    src, tgt = np.dtype(pair[0]), np.dtype(pair[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edges = np.array(_edge_values(src), dtype=np.float64 if src.kind == "f" else object).astype(src)
    if src.kind == "f":
        elem = st.floats(width=8 * src.itemsize, allow_nan=True)
        keys = [float("nan"), 0.0, -0.0, float("inf"), 1.5]
    else:
        info = np.iinfo(src)
        elem = st.integers(int(info.min), int(info.max))
        keys = [k for k in (0, 1, int(info.max), 2**24 + 1, 300, -1) if info.min <= k <= info.max]
    values = np.concatenate([data.draw(st.sampled_from([edges, edges[:0]])),
                             np.array(data.draw(st.lists(elem, max_size=20)), dtype=object).astype(src)])
    entries = data.draw(st.lists(st.tuples(st.sampled_from(keys), st.sampled_from([0, 7, -3, 255])), max_size=3))
    scalar_map = [(np.array(k).astype(src), np.array(v).astype(tgt)) for k, v in entries]  # as parsed
    shape = (2, -1) if values.size % 2 == 0 else (-1,)
    values = values.reshape(shape)
    fast = cast_array(values, tgt, scalar_map=scalar_map)
    monkeypatch_module.setattr(exact_cast, "widens_exactly", lambda *a: False)
    try:
        slow = cast_array(values, tgt, scalar_map=scalar_map)
    finally:
        monkeypatch_module.undo()
    assert fast.shape == values.shape and _same(fast, slow), (values, entries, fast, slow)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp
