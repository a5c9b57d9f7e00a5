"""Bitround keeps exactly the stated bits; bitwise information agrees with the paper's definition.

xbitinfo itself is not a test dependency: it pins numpy < 2.4 and numcodecs < 0.16.4, which would
downgrade both legs. The reference here is the definition of Klöwer et al. 2021 (Methods, "Real
bitwise information") written out bit by bit with Python integers and dictionaries, on the same
arrays; the tolerance is 1e-12 bits (float summation order only). benchmarks/lossy.py compares
with xbitinfo 0.0.7 installed beside the venv.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from zopt.lossy.bitinfo import (
    bit_information,
    keepbits,
    keepbits_from_info,
    pair_counts,
    signed_exponent,
)
from zopt.lossy.prepare import bitround


def _reference_information(x: np.ndarray, axis: int) -> np.ndarray:
    """Mutual information of bit i of x[j] and x[j+1] along ``axis``, from its definition."""
    nbits = x.dtype.itemsize * 8
    u = signed_exponent(x) if x.dtype.kind == "f" else x.view(f"u{x.dtype.itemsize}")
    a = np.moveaxis(u, axis, -1)[..., :-1].ravel().tolist()
    b = np.moveaxis(u, axis, -1)[..., 1:].ravel().tolist()
    out = []
    for i in range(nbits - 1, -1, -1):  # most significant bit first
        joint: dict[tuple[int, int], int] = {}
        for p, q in zip(a, b, strict=True):
            key = ((p >> i) & 1, (q >> i) & 1)
            joint[key] = joint.get(key, 0) + 1
        n = len(a)
        pr = {r: sum(v for (s, _), v in joint.items() if s == r) / n for r in (0, 1)}
        pc = {r: sum(v for (_, s), v in joint.items() if s == r) / n for r in (0, 1)}
        mi = sum(v / n * math.log2((v / n) / (pr[r] * pc[s])) for (r, s), v in joint.items())
        out.append(mi)
    return np.array(out)


def _signal(rng, shape, dtype, noise):
    x = np.cumsum(rng.normal(size=shape), axis=-1) + 280
    return (x + rng.normal(scale=noise, size=shape)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("noise", [1e-1, 1e-3])
def test_information_matches_the_definition(dtype, noise):
    rng = np.random.default_rng(3)
    x = _signal(rng, (12, 150), dtype, noise)
    counts = pair_counts(x)
    for axis in range(2):
        ref = _reference_information(x, axis)
        np.testing.assert_allclose(bit_information(counts[axis]), ref, atol=1e-12)
    # xbitinfo's keepbits rule on the reference information (confidence filter off, as its python code)
    ref_k = keepbits_from_info(_reference_information(x, 1), 0.99, dtype)
    assert keepbits(counts[1:], 0.99, dtype, confidence=None) == ref_k
    # noise in the low bits: fewer bits kept for more noise
    assert ref_k < np.finfo(dtype).nmant


def test_more_noise_fewer_bits_and_invalid_pairs_left_out():
    rng = np.random.default_rng(5)
    smooth = 280 + 5 * np.sin(np.arange(400) / 30.0)[None, :] + np.arange(20)[:, None] / 10
    quiet = (smooth + rng.normal(scale=1e-4, size=smooth.shape)).astype(np.float32)
    noisy = (smooth + rng.normal(scale=1e-1, size=smooth.shape)).astype(np.float32)
    assert keepbits(pair_counts(noisy), 0.99, np.float32) < keepbits(pair_counts(quiet), 0.99, np.float32)
    assert keepbits_from_info(bit_information(pair_counts(quiet)[1]), 1.0, np.float32) == 23
    # a sentinel block does not count: same keepbits with 1e20 fill where marked invalid
    filled = quiet.copy()
    filled[:, :100] = 1e20
    valid = filled != np.float32(1e20)
    n_valid = pair_counts(filled, valid)[1, 0].sum()
    assert n_valid == 20 * 299
    assert pair_counts(filled, valid)[0, 0].sum() == 19 * 300


@settings(max_examples=80, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float64]), data=st.data())
def test_bitround_keeps_exactly_the_bits(dtype, data):
    nmant = np.finfo(dtype).nmant
    k = data.draw(st.integers(0, nmant))
    x = data.draw(hnp.arrays(dtype, st.integers(1, 64), elements=st.floats(width=np.dtype(dtype).itemsize * 8)))
    edges = np.array([0.0, -0.0, np.finfo(dtype).smallest_subnormal, np.finfo(dtype).max, np.nan, np.inf, 1.5, 2.5],
                     dtype=dtype)
    x = np.concatenate([x, edges])
    y = bitround(x, k)
    ux = x.view(f"u{x.dtype.itemsize}").astype(np.uint64)
    uy = y.view(f"u{y.dtype.itemsize}").astype(np.uint64)
    drop = nmant - k
    finite = np.isfinite(x)
    changed = uy != ux
    # every rounded value has its dropped mantissa bits zero
    assert not (uy[changed] & np.uint64((1 << drop) - 1)).any()
    # non-finite values and values that would round to infinity keep their bits
    assert np.array_equal(uy[~finite], ux[~finite])
    assert np.isfinite(y[finite]).all()
    # round to nearest: the error is at most half a unit of the kept last bit
    xf, yf = x[finite].astype(np.float64), y[finite].astype(np.float64)
    exp = np.floor(np.log2(np.maximum(np.abs(xf), np.finfo(dtype).smallest_normal)))
    assert (np.abs(yf - xf) <= 2.0 ** (exp - k - 1) * (1 + 1e-12)).all()
    # it is numcodecs' bitround wherever that stays finite, except subnormals, kept exactly (issue 28:
    # numcodecs zeroes them, e.g. all of a field of subnormals became its fill value 0)
    import numcodecs

    nc = np.asarray(numcodecs.BitRound(keepbits=k).encode(np.ascontiguousarray(x))).view(dtype) if k < nmant else x
    subnormal = finite & (np.abs(x) < np.finfo(dtype).smallest_normal)
    assert np.array_equal(uy[subnormal], ux[subnormal])
    same = finite & np.isfinite(nc) & ~subnormal
    assert np.array_equal(y[same].view(f"u{x.dtype.itemsize}"), nc[same].view(f"u{x.dtype.itemsize}"))


def test_bitround_refuses_too_many_bits():
    with pytest.raises(ValueError, match="keepbits: 24 is outside"):
        bitround(np.ones(3, np.float32), 24)


def test_zopt_rounding_equals_zarrs_numcodecs_bitround_codec(tmp_path):
    """``numcodecs.bitround`` is registered with zarr (3.1 and 3.4, as zarr.codecs.numcodecs.BitRound;
    numcodecs.zarr3 is deprecated); an array written through it stores exactly zopt's rounding."""
    import warnings

    import zarr
    from zarr.registry import get_codec_class

    cls = get_codec_class("numcodecs.bitround")
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(50, 40)) * 100).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = zarr.create_array(tmp_path / "b.zarr", shape=x.shape, chunks=(25, 20), dtype="f4",
                              filters=[cls(keepbits=6)], compressors=None, fill_value=0)
        a[...] = x
        stored = a[...]
    assert np.array_equal(stored.view(np.uint32), bitround(x, 6).view(np.uint32))
