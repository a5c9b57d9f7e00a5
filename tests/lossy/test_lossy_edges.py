"""Lossy bounds at the edges of float32/float64 (issue 28): subnormal values and bounds, ±0,
±inf, NaN, the fill value and the values next to it. Every bound kind either holds, or is refused
before writing with a ValueError naming the variable and the reason."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zopt import recompress
from zopt.lossy.bounds import RangeStats, design_abs, exact_abs_error_exceeds
from zopt.lossy.prepare import bitround, sentinels_of, special_mask
from zopt.readback.verify import verify


def _edges(dt: np.dtype) -> list[float]:
    fi = np.finfo(dt)
    t = dt.type
    sub, tiny = float(fi.smallest_subnormal), float(fi.smallest_normal)
    big = -1e34 if dt == np.float32 else -1e300
    out = [0.0, -0.0, sub, -sub, 3 * sub, tiny, -tiny, float(np.nextafter(t(tiny), t(0))), 1e-3, 1.0, -7.5, big,
           float(fi.max), float(-fi.max), np.inf, -np.inf, np.nan]
    return out


def _neighbours(dt: np.dtype, v: float) -> list[float]:
    t = dt.type
    if not np.isfinite(v):
        return []
    return [float(np.nextafter(t(v), t(np.inf))), float(np.nextafter(t(v), t(-np.inf)))]


@st.composite
def cases(draw):
    dt = np.dtype(draw(st.sampled_from(["float32", "float64"])))
    edges = _edges(dt)
    fill = draw(st.sampled_from(edges))
    pool = edges + _neighbours(dt, fill) + [fill]
    values = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=40))
    x = np.array(values, dtype=dt)
    return dt, fill, x


def _stats(x: np.ndarray, sentinels) -> RangeStats:
    """What the engine's range reduction (``zopt.lossy.prepare._range_task``) finds."""
    special = special_mask(x, sentinels)
    normal = x[~special]
    is_sentinel = np.zeros(x.shape, bool)
    for s in sentinels:
        is_sentinel |= x == s
    return RangeStats(lo=normal.min().item() if normal.size else None, hi=normal.max().item() if normal.size else None,
                      nan=int(np.isnan(x).sum()), posinf=int((np.isposinf(x) & ~is_sentinel).sum()),
                      neginf=int((np.isneginf(x) & ~is_sentinel).sum()), count=x.size)


def _specials_kept(x: np.ndarray, y: np.ndarray, sentinels) -> None:
    assert np.array_equal(np.isnan(x), np.isnan(y))
    inf = np.isinf(x)
    assert np.array_equal(x[inf], y[inf])
    for s in sentinels:
        if not np.isnan(s):
            assert np.array_equal(x == s, y == s), f"sentinel {s} moved"


ABS_BOUNDS = [4e-42, 1e-45, 5e-324, 1e-310, 1e-38, 1e-30, 1e-3, 0.5, 1e30]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), bound=st.sampled_from(ABS_BOUNDS))
def test_abs_bounds_hold_or_are_refused_naming_the_variable(case, bound):
    dt, fill, x = case
    sentinels = sentinels_of(dt, fill, {})
    try:
        chain = design_abs("t", dt, _stats(x, sentinels), bound, sentinels)
    except ValueError as exc:
        assert str(exc).startswith("lossy t"), exc
        return
    chain.check(x, "chunk (0,)")  # the writer's check: a failure here is the "zopt bug" refusal
    y = chain.decode(chain.encode(x))
    special = special_mask(x, sentinels)
    assert not exact_abs_error_exceeds(x[~special], y[~special], bound).any()
    _specials_kept(x, y, sentinels)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), keepbits=st.sampled_from([0, 1, 3, 10, 22, 23, 51]))
def test_keepbits_hold_their_relative_bound_and_never_make_a_value_missing(case, keepbits):
    dt, fill, x = case
    if keepbits > np.finfo(dt).nmant:
        with pytest.raises(ValueError, match="keepbits"):
            bitround(x, keepbits)
        return
    sentinels = sentinels_of(dt, fill, {})
    special = special_mask(x, sentinels)
    y = bitround(x, keepbits, special, sentinels)
    _specials_kept(x, y, sentinels)
    normal = ~special
    xs, ys = x[normal].astype(np.float64), y[normal].astype(np.float64)
    sub = np.abs(xs) < np.finfo(dt).smallest_normal
    assert np.array_equal(xs[sub], ys[sub])  # subnormals are kept exactly
    with np.errstate(over="ignore", invalid="ignore"):
        rel = np.abs(ys[~sub] - xs[~sub]) / np.abs(xs[~sub])
    assert (rel <= 2.0 ** -(keepbits + 1)).all()


# -- the three cases of the issue, end to end ----------------------------------------------------


def _source(tmp_path, values: np.ndarray, fill: float) -> str:
    src = tmp_path / "src.zarr"
    a = zarr.create_group(str(src)).create_array("t", shape=values.shape, chunks=(10, 10), dtype=values.dtype,
                                                 fill_value=fill, dimension_names=("y", "x"))
    a[...] = values
    return str(src)


@pytest.mark.parametrize("spec, scale", [
    ("t=abs:1e-40", 1e-38),  # tiny values, fill 0.0
    ("t=abs:4e-42", 1e-38),  # a subnormal bound: was an OverflowError traceback
    ("t=abs:1e-30", 1e-38),  # every value within the bound of 0
    ("t=keepbits:3", 1e-40),  # subnormal data, fill 0: was written as all fill, exit 0
    ("t=keepbits:3", 1e-38),
])
def test_the_edge_cases_of_the_issue_work_or_are_refused_before_writing(tmp_path, spec, scale):
    values = (np.random.default_rng(0).random((20, 20)) * scale).astype("f4")
    values[0, 0] = 0.0
    src, dst = _source(tmp_path, values, 0.0), tmp_path / "out.zarr"
    try:
        recompress(src, dst, lossy=[spec], scheduler="synchronous")
    except ValueError as exc:
        assert str(exc).startswith("lossy t: abs:") and "zopt bug" not in str(exc), exc
        assert not dst.exists() and not (tmp_path / "out.zarr.zopt-partial").exists()
        return
    report = verify(src, dst)
    assert report.ok, report.failure_line()
    out = zarr.open_array(str(dst), path="t", mode="r")[...]
    assert np.array_equal(out == 0, values == 0)  # no value became the fill value
