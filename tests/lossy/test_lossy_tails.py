"""abs:E tails (zopt.lossy.tails) and the zopt.lorenzo codec: every tail keeps the proven bound
through the real codecs, the trial keeps the smallest tail readers allow, plain zarr-python
reads the default chain without zopt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from zopt import recompress
from zopt.codecs.chain import ChunkEncoder, chunk_spec, max_encoded_size
from zopt.codecs.lorenzo import LorenzoCodec, lorenzo_decode, lorenzo_encode
from zopt.compat.zarr_compat import resolve_codec
from zopt.dtypes.numeric import zarr_dtype
from zopt.lossy.bounds import RangeStats, design_abs, exact_abs_error_exceeds
from zopt.lossy.spec import parse_lossy
from zopt.lossy.tails import (
    ORDER,
    candidates,
    kind,
    lorenzo_variants,
    sample_regions,
    sample_sizes,
    tail_codecs,
)
from zopt.lossy.tails import with_storage as _with_storage
from zopt.readback.verify import verify

pytest.importorskip("pcodec")
BASE = [{"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "conditional", "configuration": {"codecs": [{"name": "shuffle"},
                                                             {"name": "zstd", "configuration": {"level": 3}}]}}]
SENTINEL = 1e20


# -- zopt.lorenzo ----------------------------------------------------------------------------------
int_types = st.sampled_from([np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64])


@settings(max_examples=100, deadline=None)
@given(data=hnp.arrays(int_types, hnp.array_shapes(min_dims=1, max_dims=4, max_side=7)))
def test_lorenzo_round_trips_exactly(data):
    r = lorenzo_encode(data)
    assert r.dtype == data.dtype and r.shape == data.shape
    np.testing.assert_array_equal(lorenzo_decode(r), data)


def test_lorenzo_residuals_of_a_plane_vanish_and_wrap():
    i, j = np.mgrid[0:5, 0:6]
    plane = (3 * i + 7 * j + 100).astype(np.uint16)
    r = lorenzo_encode(plane)
    assert r[0, 0] == 100 and (r[1:, 1:] == 0).all()  # D_0 D_1 of a plane: zero away from the edges
    assert (r[1:, 0] == 3).all() and (r[0, 1:] == 7).all()
    down = np.array([5, 2], dtype=np.uint16)  # 2 - 5 wraps to 65533, and back
    assert lorenzo_encode(down)[1] == 65533
    np.testing.assert_array_equal(lorenzo_decode(lorenzo_encode(down)), down)


def test_lorenzo_codec_in_a_zarr_array(tmp_path):
    x = (np.add.outer(np.arange(40), np.arange(30)) * 3).astype(np.uint16)
    a = zarr.create_array(tmp_path / "l.zarr", shape=x.shape, chunks=(16, 16), dtype="uint16", filters=[LorenzoCodec()],
                          compressors=None, fill_value=0)
    a[...] = x
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "l.zarr")[...], x)
    meta = json.loads((tmp_path / "l.zarr" / "zarr.json").read_text())
    assert {"name": "zopt.lorenzo"} in meta["codecs"]
    # residuals are what is stored: the first chunk's bytes are the residuals of its values
    raw = (tmp_path / "l.zarr" / "c" / "0" / "0").read_bytes()
    np.testing.assert_array_equal(np.frombuffer(raw, "<u2").reshape(16, 16), lorenzo_encode(x[:16, :16]))


@settings(max_examples=50, deadline=None)
@given(data=hnp.arrays(int_types, hnp.array_shapes(min_dims=3, max_dims=3, max_side=6)),
       axes=st.sampled_from([(0,), (1,), (2,), (0, 2), (1, 2)]))
def test_lorenzo_on_some_axes(data, axes):
    r = lorenzo_encode(data, axes)
    np.testing.assert_array_equal(lorenzo_decode(r, axes), data)
    expected = data.copy()
    for ax in axes:  # the differences along the named axes only, with numpy's own diff
        expected = np.diff(expected, axis=ax, prepend=np.zeros_like(np.take(expected, [0], axis=ax)))
    np.testing.assert_array_equal(r, expected)


def test_lorenzo_refuses_floats_and_bad_configuration():
    with pytest.raises(ValueError, match="zopt.lorenzo: needs an integer"):
        lorenzo_encode(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="zopt.lorenzo: the only configuration key is 'axes'"):
        LorenzoCodec.from_dict({"name": "zopt.lorenzo", "configuration": {"order": 2}})
    for bad in ([], [1, 0], [-1], "0", [True]):
        with pytest.raises(ValueError, match="zopt.lorenzo: axes must be"):
            LorenzoCodec(axes=bad)
    with pytest.raises(ValueError, match="zopt.lorenzo: axes \\[3\\] name dimensions beyond the chunk's 2"):
        lorenzo_encode(np.zeros((2, 2), np.uint16), (3,))
    assert LorenzoCodec.from_dict({"name": "zopt.lorenzo", "configuration": {"axes": [1]}}).to_dict() == {
        "name": "zopt.lorenzo", "configuration": {"axes": [1]}}
    assert LorenzoCodec().to_dict() == {"name": "zopt.lorenzo"}


# -- every tail keeps the bound, through the real codecs -----------------------------------------
def _stats(x, sentinels=()):
    special = ~np.isfinite(x)
    for s in sentinels:
        special |= x == x.dtype.type(s)
    n = x[~special]
    return RangeStats(lo=n.min().item() if n.size else None, hi=n.max().item() if n.size else None,
                      nan=int(np.isnan(x).sum()), posinf=int(np.isposinf(x).sum()), neginf=int(np.isneginf(x).sum()),
                      count=x.size)


def _through(chain, tail, x):
    """x encoded and decoded by the whole chain (filters + tail) with zopt's ChunkEncoder."""
    chain = _with_storage(chain, tail)
    codecs = [*chain.filters(), *tail_codecs(tail, chain.storage, chain.bits, BASE)]
    fill = x.dtype.type(SENTINEL) if x.dtype.kind == "f" else 0
    enc = ChunkEncoder([resolve_codec(c) for c in codecs], chunk_spec(x.shape, zarr_dtype(x.dtype.name), fill))
    from zopt.codecs.decisions import CompressIfSmaller

    stored = enc.with_decision(CompressIfSmaller()).encode(x, (0,) * x.ndim).data
    return enc.decode(stored)


def _specials(dtype, n):
    fi = np.finfo(dtype)
    return np.array([np.nan, 0.0, -0.0, fi.smallest_subnormal, -fi.smallest_subnormal, fi.smallest_normal,
                     SENTINEL, SENTINEL, np.nan, 0.0][:n], dtype=dtype)


@pytest.mark.parametrize("tail", [*ORDER, "lorenzo:1"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from([np.float32, np.float64]), data=st.data(), bound_exp=st.floats(-4, 1),
       center=st.floats(-1e3, 1e3), width_exp=st.floats(-2, 3), smooth=st.booleans())
def test_every_tail_keeps_the_bound(tail, dtype, data, bound_exp, center, width_exp, smooth):
    bound = 10.0**bound_exp
    lo, hi = float(dtype(center)), float(dtype(center + 10.0**width_exp))
    shape = (data.draw(st.integers(1, 12)), data.draw(st.integers(1, 12)))
    if smooth:  # a smooth field (what prediction is for), else random values (adversarial for it)
        i, j = np.mgrid[0 : shape[0], 0 : shape[1]]
        x = (lo + (hi - lo) * (0.5 + 0.5 * np.sin(i / 3.0) * np.cos(j / 4.0))).astype(dtype)
    else:
        x = data.draw(hnp.arrays(dtype, shape, elements=st.floats(lo, hi, width=np.dtype(dtype).itemsize * 8)))
    x = np.clip(x, dtype(lo), dtype(hi))
    flat = x.reshape(-1)
    k = min(flat.size, data.draw(st.integers(0, 10)))
    specials = _specials(dtype, k)
    keep_range = (specials == 0) | (np.abs(specials) < 1e-30)  # ±0, subnormals: data only inside [lo, hi]
    specials = np.where(keep_range & ~((lo <= specials) & (specials <= hi)), dtype(lo), specials)
    flat[:k] = specials
    x[0, 0] = dtype(lo)
    x[-1, -1] = dtype(hi)
    try:
        chain = design_abs("v", dtype, _stats(x, (SENTINEL,)), bound, (dtype(SENTINEL), np.nan))
    except ValueError as exc:
        assert "below what" in str(exc) or "beyond" in str(exc)
        return
    back = _through(chain, tail, x)
    normal = np.isfinite(x) & (x != dtype(SENTINEL))
    assert not exact_abs_error_exceeds(x[normal], back[normal], bound).any()
    assert np.array_equal(np.isnan(x), np.isnan(back))
    assert np.array_equal(x == dtype(SENTINEL), back == dtype(SENTINEL))
    chain.check(x, "chunk (0, 0)")


@pytest.mark.parametrize("tail", ORDER)
def test_every_tail_on_integers(tail):
    rng = np.random.default_rng(3)
    x = np.cumsum(rng.integers(-20, 21, size=(20, 30)), axis=1).astype(np.int16)
    chain = design_abs("depth", np.int16, _stats(x), 3)
    back = _through(chain, tail, x)
    assert back.dtype == np.int16
    assert np.abs(back.astype(np.int64) - x).max() <= 3


# -- the trial ---------------------------------------------------------------------------------------
def test_candidates_follow_the_readers():
    assert candidates((), BASE) == ["pcodec", "blosc"]  # plain zarr-python: no zopt codec
    assert candidates({"zopt"}, BASE) == list(ORDER)
    core = [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 3}}]
    assert "bytes" in candidates({"zarr-python"}, core) and "packbits" not in candidates({"zarr-python"}, core)
    # tensorstore reads bytes + blosc (it is scale_offset it cannot read: check_readers refuses that later)
    assert candidates({"tensorstore"}, BASE) == ["blosc"]


def test_lorenzo_variants_skip_dimensions_of_length_one():
    assert lorenzo_variants((1, 30, 36)) == ["lorenzo", "lorenzo:1", "lorenzo:2"]
    assert lorenzo_variants((50,)) == ["lorenzo"]
    assert len(lorenzo_variants((2, 3, 4, 5))) == 1 + 4 + 4
    assert "lorenzo:1" in candidates({"zopt"}, BASE, (1, 30, 36)) and "lorenzo:1" not in candidates((), BASE, (1, 30, 36))


def test_sample_regions_spread_over_the_grid():
    regions = sample_regions((100, 35), (10, 10), n=8)
    assert len(regions) == 8 and regions[0] == (slice(0, 10), slice(0, 10))
    assert regions[-1] == (slice(90, 100), slice(30, 35))  # the last, clipped chunk
    assert len({repr(r) for r in regions}) == 8
    assert len(sample_regions((5,), (10,))) == 1


def test_sample_sizes_are_the_stored_sizes():
    i, j = np.mgrid[0:40, 0:50]
    x = (10 + np.sin(i / 7) * np.cos(j / 9)).astype(np.float32)
    chain = design_abs("t", np.float32, _stats(x), 0.001)
    sizes = sample_sizes(chain, x, list(ORDER), BASE)
    import numcodecs

    codes = _with_storage(chain, "pcodec").encode(x)
    assert sizes["pcodec"] == len(numcodecs.get_codec({"id": "pcodec", "level": 8}).encode(codes))
    assert sizes["lorenzo"] < sizes["pcodec"]  # a smooth 2-D field: prediction pays


@pytest.fixture(scope="module")
def smooth_nc(tmp_path_factory):
    rng = np.random.default_rng(11)
    t, y, x = np.mgrid[0:6, 0:48, 0:64]
    v = (12 + 6 * np.sin(y / 9.0 + t / 5.0) * np.cos(x / 11.0) + rng.normal(scale=0.002, size=t.shape))
    v = v.astype(np.float32)
    v[:, 20:26, 30:40] = np.float32(SENTINEL)
    v[0, 0, :3] = np.nan
    path = tmp_path_factory.mktemp("smooth") / "s.nc"
    xr.Dataset({"temp": (("t", "y", "x"), v, {"_FillValue": np.float32(SENTINEL)})}).to_netcdf(path)
    return str(path), v


def test_auto_keeps_the_smallest_readable_tail(smooth_nc, tmp_path):
    src, v = smooth_nc
    for readers, allowed in ((None, {"pcodec", "blosc"}), ("zopt", set(ORDER))):
        dst = tmp_path / f"{readers}.zarr"
        recompress(src, dst, chunks="t=3,y=24,x=32", shards="t=6,y=48,x=64", lossy=["temp=abs:0.01"], readers=readers)
        a = zarr.open_array(dst, path="temp")
        rec = a.attrs["zopt_lossy"]
        trial = rec["tail_trial"]
        assert {kind(t) for t in trial} == allowed
        assert rec["tail"] == min(trial, key=lambda t: (trial[t], ORDER.index(kind(t)), t))
        assert verify(src, str(dst)).ok
        ocean = np.isfinite(v) & (v != np.float32(SENTINEL))
        assert np.abs(a[...][ocean].astype(np.float64) - v[ocean]).max() <= 0.01
    rec = zarr.open_array(tmp_path / "zopt.zarr", path="temp").attrs["zopt_lossy"]
    assert kind(rec["tail"]) == "lorenzo"
    # every axis subset of the (3, 24, 32) inner chunks was tried
    assert {t for t in rec["tail_trial"] if kind(t) == "lorenzo"} == {
        "lorenzo", "lorenzo:0", "lorenzo:1", "lorenzo:2", "lorenzo:0,1", "lorenzo:0,2", "lorenzo:1,2"}


def test_named_tail_and_bad_tail(smooth_nc, tmp_path):
    assert parse_lossy(["v=abs:0.5:pcodec"])["v"].tail == "pcodec"
    assert parse_lossy(["v=abs:0.5:bytes"])["v"].pack is False
    assert parse_lossy(["v=abs:0.5"])["v"].text() == "abs:0.5"
    with pytest.raises(ValueError, match=r"lossy v: abs: tail 'zfp' is not one of \['auto', 'pcodec'"):
        parse_lossy(["v=abs:0.5:zfp"])
    assert parse_lossy(["v=abs:0.5:lorenzo:0,2"])["v"].tail == "lorenzo:0,2"
    with pytest.raises(ValueError, match=r"lossy v: abs: tail 'lorenzo:2,1': AXES must be increasing"):
        parse_lossy(["v=abs:0.5:lorenzo:2,1"])
    src, _ = smooth_nc
    recompress(src, tmp_path / "b.zarr", chunks="t=3,y=24,x=32", lossy=["temp=abs:0.01:blosc"])
    rec = zarr.open_array(tmp_path / "b.zarr", path="temp").attrs["zopt_lossy"]
    assert rec["tail"] == "blosc" and "tail_trial" not in rec and rec["spec"] == "abs:0.01:blosc"


@pytest.mark.skipif(zarr.__version__ < "3.2", reason="zarr-python >= 3.2 ships scale_offset and cast_value")
@pytest.mark.parametrize("lossy", ["temp=abs:0.01", "temp=abs:0.01:blosc", "temp=rel:0.001"])
def test_plain_zarr_reads_the_default_chain_without_zopt(smooth_nc, tmp_path, lossy):
    src, _ = smooth_nc
    dst = tmp_path / "plain.zarr"
    recompress(src, dst, chunks="t=3,y=24,x=32", shards="t=6,y=48,x=64", lossy=[lossy])
    mine = zarr.open_array(dst, path="temp")[...]
    # a fresh interpreter as if zopt were not installed: its entry points hidden from zarr, and
    # any import of it refused (a meta-path finder)
    code = ("import sys, importlib.metadata as md\n"
            "_eps = md.entry_points\n"
            "def entry_points(**kw):\n"
            "    eps = _eps(**kw)\n"
            "    return md.EntryPoints([e for e in eps if not e.value.startswith('zopt')])\n"
            "md.entry_points = entry_points\n"
            "class NoZopt:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'zopt' or name.startswith('zopt.') or name == '_zopt_zarr_startup':\n"
            "            raise ImportError('zopt is not installed here')\n"
            "sys.meta_path.insert(0, NoZopt())\n"
            "import numpy as np, zarr\n"
            "a = zarr.open_array(sys.argv[1], path='temp')\n"
            "np.save(sys.argv[2], a[...])\n"
            "assert not any(m == 'zopt' or m.startswith('zopt.') for m in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-c", code, str(dst), str(tmp_path / "plain.npy")], check=True, env=env,
                   cwd=tmp_path)
    np.testing.assert_array_equal(np.load(tmp_path / "plain.npy").view(np.uint32), mine.view(np.uint32))


def test_pcodec_size_bound_holds():
    import numcodecs

    rng = np.random.default_rng(5)
    for dtype in ("uint16", "uint32", "uint64"):
        for n in (1, 100, 70_000):
            x = np.frombuffer(rng.bytes(n * np.dtype(dtype).itemsize), dtype)
            spec = chunk_spec((n,), zarr_dtype(dtype), 0)
            bound = max_encoded_size([resolve_codec({"name": "numcodecs.pcodec", "configuration": {"level": 8}})], spec)
            actual = len(numcodecs.get_codec({"id": "pcodec", "level": 8}).encode(x))
            assert actual <= bound < x.nbytes * 1.01 + 1100


def test_docs_mention_every_tail():
    text = (Path(__file__).parents[2] / "docs" / "lossy.md").read_text()
    for tail in ORDER:
        assert f"`{tail}`" in text


def test_a_codecs_chain_with_bytes_without_endian_is_tried_as_written_little_endian():
    """zarr 3.4 refuses ``bytes`` without ``endian`` for multi-byte types; the job writes it
    little-endian (planning.chains.split_chain), and the tail trials of ``rel``/``info`` encode the
    same chain (docs/lossy.md's --codecs example failed on zarr 3.4 before)."""
    from zopt.lossy.tails import rounded_sample_sizes

    values = np.linspace(0, 1, 4096, dtype=np.float32).reshape(64, 64)
    base = [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 3}}]
    sizes = rounded_sample_sizes(values, ["bytes"], base)
    little = rounded_sample_sizes(values, ["bytes"], [{"name": "bytes", "configuration": {"endian": "little"}},
                                                      base[1]])
    assert sizes == little and 0 < sizes["bytes"] < values.nbytes
