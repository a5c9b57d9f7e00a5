"""rel:R (zopt.lossy.relative): |x' - x| <= R·|x| on every finite value, decided exactly, with
subnormals, ±0, NaN, infinities and sentinels kept bit for bit; recorded and checked by verify."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from zopt import recompress
from zopt.lossy.check import bits
from zopt.lossy.prepare import bitround, special_mask
from zopt.lossy.relative import check_relative, keep_mask, rel_keepbits
from zopt.lossy.spec import parse_lossy
from zopt.readback.verify import verify

SENTINEL = -1e34


def _apply(x: np.ndarray, rel: float, sentinels=(SENTINEL,)) -> np.ndarray:
    """What recompress stores for one chunk under rel:R (LossyVariable.prepare's steps)."""
    k = rel_keepbits("v", rel, x.dtype)
    return bitround(x, k, keep_mask(x, special_mask(x, tuple(x.dtype.type(s) for s in sentinels))))


def _adversarial(dtype) -> np.ndarray:
    fi = np.finfo(dtype)
    t = np.dtype(dtype).type
    edges = t(2.0) ** np.arange(-8, 9, dtype=dtype)  # binade edges and their neighbours round across
    near = np.concatenate([np.nextafter(edges, t(0)), np.nextafter(edges, t(np.inf)), edges, -edges])
    return np.concatenate([near, np.array([0.0, -0.0, fi.smallest_subnormal, -fi.smallest_subnormal,
                                           fi.smallest_normal, -fi.smallest_normal,
                                           np.nextafter(fi.smallest_normal, t(0)), fi.max, -fi.max,
                                           np.nextafter(fi.max, t(0)), np.inf, -np.inf, np.nan, SENTINEL],
                                          dtype=dtype)])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from([np.float32, np.float64]), rel_exp=st.floats(-7, -0.05), data=st.data())
def test_relative_bound_holds_exactly(dtype, rel_exp, data):
    rel = 10.0**rel_exp
    x = data.draw(hnp.arrays(dtype, st.integers(1, 200), elements=st.floats(width=np.dtype(dtype).itemsize * 8)))
    x = np.concatenate([x, _adversarial(dtype)]).astype(dtype)
    k = rel_keepbits("v", rel, dtype)
    assert Fraction(1, 2 ** (k + 1)) <= Fraction(rel)  # K proves R ...
    assert k == 0 or Fraction(1, 2**k) > Fraction(rel)  # ... and is the fewest bits that do
    y = _apply(x, rel)
    fi = np.finfo(dtype)
    for a, b in zip(x.tolist(), y.tolist(), strict=True):  # every element, with rationals
        if a != a:
            assert b != b
        elif a in (np.inf, -np.inf) or a == SENTINEL or (0 < abs(a) < float(fi.smallest_normal)) or a == 0:
            assert np.float64(a).tobytes() == np.float64(b).tobytes()  # exact, sign of zero included
        elif b in (np.inf, -np.inf):
            raise AssertionError(f"{a!r} rounded to infinity")
        else:
            assert abs(Fraction(b) - Fraction(a)) <= Fraction(rel) * abs(Fraction(a)), (a, b, rel, k)
    assert check_relative(x, y, rel) == 0


def test_check_relative_decides_ties_exactly():
    x = np.array([1.0, 1.0, 3.0, -2.0])
    y = np.array([1.5, np.nextafter(1.5, 2.0), 3.0, -1.0])
    assert check_relative(x, y, 0.5) == 1  # 0.5 ≤ 0.5·1 holds, one ulp more does not; -1 vs -2 holds


@pytest.mark.parametrize("rel, dtype, match", [
    (0.0, np.float32, r"must be in \(0, 1\)"),
    (float("inf"), np.float64, r"must be in \(0, 1\)"),
    (1.0, np.float64, r"must be in \(0, 1\)"),
    (1e-9, np.float32, "below the precision of float32"),
    (1e-17, np.float64, "below the precision of float64"),
])
def test_bad_relative_bounds(rel, dtype, match):
    with pytest.raises(ValueError, match=f"lossy t: rel: .*{match}"):
        rel_keepbits("t", rel, dtype)


def test_parse_rel():
    assert parse_lossy(["t=rel:0.001"])["t"].method == "rel"
    with pytest.raises(ValueError, match=r"lossy t: rel: the bound must be in \(0, 1\)"):
        parse_lossy(["t=rel:-1"])
    with pytest.raises(ValueError, match="is not one of abs:BOUND\\[:TAIL\\], rel:BOUND\\[:TAIL\\]"):
        parse_lossy(["t=relative:0.1"])


@pytest.fixture(scope="module")
def field(tmp_path_factory):
    rng = np.random.default_rng(2)
    y, x = np.mgrid[0:40, 0:50]
    v = (np.exp(rng.normal(size=y.shape) * 8) * np.sign(np.sin(x / 5.0) + 0.1)).astype(np.float32)  # 7 decades
    v[0, :4] = [np.float32(1e-40), np.float32(-3e-42), np.float32(0.0), np.float32(-0.0)]  # subnormals, ±0
    v[5:9, 5:9] = np.float32(SENTINEL)
    v[1, 1] = np.nan
    depth = rng.integers(0, 100, size=y.shape).astype(np.int16)
    path = tmp_path_factory.mktemp("rel") / "f.nc"
    xr.Dataset({"v": (("y", "x"), v, {"_FillValue": np.float32(SENTINEL)}), "depth": (("y", "x"), depth)}).to_netcdf(path)
    return str(path), v


def test_rel_end_to_end_and_verify(field, tmp_path):
    src, v = field
    dst = tmp_path / "r.zarr"
    recompress(src, dst, chunks="y=20,x=25", shards="y=40,x=50", lossy=["v=rel:0.001"], variables=["v"])
    a = zarr.open_array(dst, path="v")
    rec = a.attrs["zopt_lossy"]
    assert rec["method"] == "rel" and rec["rel"] == 0.001 and rec["keepbits"] == 9  # 2^-10 <= 0.001 < 2^-9
    got = a[...]
    assert np.array_equal(bits(got), bits(_apply(v, 0.001)))
    assert np.array_equal(bits(got[0, :4]), bits(v[0, :4]))  # subnormals and ±0 bit for bit
    assert not np.array_equal(got, v)  # it did round
    report = verify(src, str(dst))
    assert report.ok, report
    check = next(c for c in report.checks if c.name == "v")
    assert check.kind == "rel" and check.bound == "rel 0.001" and check.max_rel_error <= 0.001
    # a stored value moved by more than the bound is caught
    bad = got.copy()
    bad[10, 10] = bad[10, 10] * np.float32(1.01)
    a[10:11, 10:11] = bad[10:11, 10:11]
    assert not verify(src, str(dst)).ok


@pytest.mark.parametrize("tail", ["pcodec", "blosc", "bytes"])
def test_rel_tails_store_the_rounded_bits(field, tmp_path, tail):
    src, v = field
    dst = tmp_path / f"{tail}.zarr"
    recompress(src, dst, chunks="y=20,x=25", shards="y=40,x=50", lossy=[f"v=rel:0.01:{tail}"], variables=["v"])
    a = zarr.open_array(dst, path="v")
    assert a.attrs["zopt_lossy"]["tail"] == tail and a.attrs["zopt_lossy"]["spec"] == f"rel:0.01:{tail}"
    assert np.array_equal(bits(a[...]), bits(_apply(v, 0.01)))  # NaN payloads and -0.0 included
    names = [c["name"] for c in a.metadata.to_dict()["codecs"][0]["configuration"]["codecs"]]
    assert names == {"pcodec": ["numcodecs.pcodec"], "blosc": ["bytes", "blosc"], "bytes": ["bytes", "conditional"]}[tail]
    assert verify(src, str(dst)).ok


def test_rel_trial_keeps_the_smallest_portable_tail(field, tmp_path):
    src, _ = field
    dst = tmp_path / "auto.zarr"
    recompress(src, dst, chunks="y=20,x=25", lossy=["v=rel:0.01"], variables=["v"])
    rec = zarr.open_array(dst, path="v").attrs["zopt_lossy"]
    trial = rec["tail_trial"]
    assert set(trial) == {"pcodec", "blosc"}  # plain zarr-python readers: not zopt's conditional
    assert rec["tail"] == min(trial, key=lambda t: (trial[t], ["pcodec", "blosc"].index(t)))
    with pytest.raises(ValueError, match=r"lossy v: rel: tail 'lorenzo' is not one of \['auto', 'pcodec'"):
        parse_lossy(["v=rel:0.01:lorenzo"])


def test_rel_refuses_integers_and_tiny_bounds(field, tmp_path):
    src, _ = field
    with pytest.raises(ValueError, match="lossy depth: rel"):
        recompress(src, tmp_path / "i.zarr", lossy=["depth=rel:0.1"], variables=["depth"])
    with pytest.raises(ValueError, match="lossy v: rel: 1e-09 is below the precision of float32"):
        recompress(src, tmp_path / "t.zarr", lossy=["v=rel:1e-9"], variables=["v"])
    assert not (tmp_path / "i.zarr").exists() and not (tmp_path / "t.zarr").exists()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rel_never_rounds_a_value_onto_the_fill_value(tmp_path, dtype):
    """Issue 35 item 7: values in [-10000, -9998] with fill -9999 under rel:1e-6 (keepbits 19):
    -9998.9990234375 and its neighbours rounded to exactly -9999.0 and read back as missing (907
    values in float32, 921 in float64). rel keeps them exactly, as keepbits does."""
    rng = np.random.default_rng(7)
    v = rng.uniform(-10000, -9998, size=(200, 300)).astype(dtype)
    v[0, :5] = dtype(-9999.0)  # real missing values stay missing
    path = tmp_path / "f.nc"
    xr.Dataset({"v": (("y", "x"), v)}).to_netcdf(path, encoding={"v": {"_FillValue": dtype(-9999.0)}})
    missing = int((v == dtype(-9999.0)).sum())  # the 5 set, and values drawn on -9999 exactly
    k = rel_keepbits("v", 1e-6, dtype)
    onto = (bitround(v, k) == dtype(-9999.0)) & (v != dtype(-9999.0))  # what plain rounding makes missing
    assert onto.sum() > 100  # the fault's ingredients are there
    dst = tmp_path / "r.zarr"
    recompress(str(path), dst, lossy=["v=rel:1e-6"], variables=["v"])
    got = zarr.open_array(dst, path="v")[...]
    assert int((got == dtype(-9999.0)).sum()) == missing  # only the values that were missing
    assert np.array_equal(bits(got[onto]), bits(v[onto]))  # kept exactly
    assert not np.array_equal(got, v)  # the others were rounded
    decoded = xr.open_zarr(dst)["v"].values
    assert int(np.isnan(decoded).sum()) == missing
    assert verify(str(path), str(dst)).ok


@pytest.mark.parametrize("rel", ["1", "1.0", "2", "1e6", "inf", "nan"])
def test_rel_of_one_or_more_is_refused(field, tmp_path, rel):
    """Issue 35: rel:R with R >= 1 was accepted and turned values into powers of two (keepbits 0:
    any value within 100 % of itself). Refused, naming lossy and the allowed range, in one CLI line."""
    from click.testing import CliRunner

    from zopt.cli.commands import main

    with pytest.raises(ValueError, match=r"lossy v: rel: the bound must be in \(0, 1\)"):
        parse_lossy([f"v=rel:{rel}"])
    src, _ = field
    dst = tmp_path / "r.zarr"
    result = CliRunner().invoke(main, ["recompress", src, str(dst), "--lossy", f"v=rel:{rel}", "--no-progress"])
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "lossy v: rel" in lines[0] and "(0, 1)" in lines[0], result.output
    assert not dst.exists()
