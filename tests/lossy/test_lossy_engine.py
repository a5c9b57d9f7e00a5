"""recompress --lossy end to end on a real LocalStore: bounds hold, attributes record them, verify
checks them with no option, keepbits plans round-trip, bad input writes nothing, readers read."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr
import zarr

from zopt import recompress
from zopt.lossy.prepare import keepbits_plan
from zopt.planning.plan import Plan, PlanMismatchError
from zopt.readback.verify import verify

ZSTD_ONLY = json.dumps([{"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "zstd", "configuration": {"level": 3}}])


@pytest.fixture(scope="module")
def ocean(tmp_path_factory):
    """A netCDF file like the NEMO SST: float32 field with a 1e20 land sentinel, an int16 field."""
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:60, 0:80]
    sst = (15 + 10 * np.sin(y / 15.0) * np.cos(x / 20.0) + rng.normal(scale=0.01, size=y.shape)).astype(np.float32)
    land = (x - 40) ** 2 + (y - 30) ** 2 < 200
    sst[land] = np.float32(1e20)
    sst[0, :5] = np.nan
    depth = (rng.integers(0, 5000, size=y.shape)).astype(np.int16)
    ds = xr.Dataset({"tos": (("y", "x"), sst, {"_FillValue": np.float32(1e20), "missing_value": np.float32(1e20)}),
                     "depth": (("y", "x"), depth)})
    path = tmp_path_factory.mktemp("ocean") / "ocean.nc"
    ds.to_netcdf(path)
    return str(path), sst, depth


def test_abs_bound_recorded_and_verified(ocean, tmp_path):
    src, sst, depth = ocean
    dst = tmp_path / "abs.zarr"
    recompress(src, dst, chunks="y=20,x=20", shards="y=60,x=80", lossy=["tos=abs:0.01", "depth=abs:2"])
    a = zarr.open_array(dst, path="tos")
    rec = a.attrs["zopt_lossy"]
    assert rec["method"] == "abs" and rec["abs"] == 0.01
    lo, hi = rec["range"]
    assert rec["bits"] == int(np.ceil(np.log2((hi - lo) / 0.02 + 3)))  # codes + NaN + the sentinel
    got = a[...]
    ocean_pts = np.isfinite(sst) & (sst != np.float32(1e20))
    assert np.abs(got[ocean_pts].astype(np.float64) - sst[ocean_pts]).max() <= 0.01
    assert np.array_equal(got == np.float32(1e20), sst == np.float32(1e20))
    assert np.array_equal(np.isnan(got), np.isnan(sst))
    d = zarr.open_array(dst, path="depth")[...]
    assert np.abs(d.astype(int) - depth).max() <= 2
    # CF decoding sees the land mask as before
    assert xr.open_zarr(dst)["tos"].isnull().sum() == xr.open_dataset(src)["tos"].isnull().sum()
    report = verify(src, str(dst))
    assert report.ok, report
    by = {c.name: c for c in report.checks}
    assert by["tos"].kind == "abs" and by["tos"].max_abs_error <= 0.01 and by["depth"].max_abs_error <= 2
    from zopt.io.sources import cached_tokens

    assert cached_tokens() == []  # the analysis and verify closed the files they opened


def test_verify_fails_when_a_stored_value_breaks_the_bound(ocean, tmp_path):
    src, sst, _ = ocean
    dst = tmp_path / "k.zarr"
    recompress(src, dst, chunks="y=20,x=20", lossy=["tos=keepbits:8"], variables=["tos"])
    a = zarr.open_array(dst, path="tos", mode="r+")
    a[30, 5] = a[30, 5] + 1  # a tampered value: not the bitrounded source
    report = verify(src, str(dst), ["tos"])
    assert not report.ok and report.checks[0].violations == 1
    r = subprocess.run([sys.executable, "-m", "zopt", "verify", src, str(dst)], capture_output=True, text=True)
    assert r.returncode == 1
    assert re.match(r"Error: verify: 1 of \d+ arrays? differs?: ", r.stderr.strip().splitlines()[-1])
    assert "Traceback" not in r.stderr


def test_keepbits_and_info_keep_specials(ocean, tmp_path):
    src, sst, _ = ocean
    dst = tmp_path / "i.zarr"
    recompress(src, dst, chunks="y=20,x=20", lossy=["tos=info:0.99"], variables=["tos"])
    rec = zarr.open_array(dst, path="tos").attrs["zopt_lossy"]
    assert rec["method"] == "keepbits" and 0 <= rec["keepbits"] < 23
    got = zarr.open_array(dst, path="tos")[...]
    assert np.array_equal(got == np.float32(1e20), sst == np.float32(1e20))
    assert verify(src, str(dst)).ok


def test_per_chunk_keepbits_plan_round_trips(ocean, tmp_path):
    src, sst, _ = ocean
    plan = keepbits_plan(src, {"tos": 0.99}, chunks="y=20,x=20")
    ap = plan["tos"]
    assert ap.keepbits.shape == (3, 4) and ap.keepbits.dtype == np.uint8
    plan.save(tmp_path / "kp")
    back = Plan.load(tmp_path / "kp")
    np.testing.assert_array_equal(back["tos"].keepbits, ap.keepbits)
    np.testing.assert_array_equal(back["tos"].digests, ap.digests)
    # applied twice, from the live analysis and from the saved plan: the same stored values
    recompress(src, tmp_path / "a.zarr", chunks="y=20,x=20", lossy=["tos=info:0.99:chunk"], variables=["tos"])
    recompress(src, tmp_path / "b.zarr", chunks="y=20,x=20", lossy=[f"tos=plan:{tmp_path / 'kp'}"], variables=["tos"])
    va, vb = (zarr.open_array(tmp_path / n, path="tos")[...] for n in ("a.zarr", "b.zarr"))
    assert np.array_equal(va.view(np.uint32), vb.view(np.uint32))
    rec = zarr.open_array(tmp_path / "b.zarr", path="tos").attrs["zopt_lossy"]
    assert rec["keepbits_grid"] == ap.keepbits.tolist()
    assert verify(src, str(tmp_path / "b.zarr")).ok
    # the picture has a keepbits panel
    from zopt.cli.plot import plot_plan

    plot_plan(back, tmp_path / "kp.png")
    assert (tmp_path / "kp.png").stat().st_size > 1000
    # a plan for another grid is refused before writing
    with pytest.raises(PlanMismatchError, match="chunk shape"):
        recompress(src, tmp_path / "c.zarr", chunks="y=30,x=20", lossy=[f"tos=plan:{tmp_path / 'kp'}"], variables=["tos"])
    assert not (tmp_path / "c.zarr").exists()


def test_unsharded_targets(ocean, tmp_path):
    """One task per chunk through zarr (no shards): the same checks and rounding per chunk."""
    src, sst, _ = ocean
    dst = tmp_path / "u.zarr"
    recompress(src, dst, chunks="y=20,x=20", shards="y=20,x=20", lossy=["tos=info:0.99:chunk", "depth=abs:3"])
    a = zarr.open_array(dst, path="tos")
    assert a.shards is None and a.attrs["zopt_lossy"]["chunk_shape"] == [20, 20]
    report = verify(src, str(dst))
    assert report.ok and {c.name: c.kind for c in report.checks} == {"tos": "keepbits", "depth": "abs"}


def test_data_beyond_the_analysed_range_stops_the_job(ocean, tmp_path, monkeypatch):
    """Data that changed after the range analysis (simulated: the analysis saw a narrower range)
    is an error naming the chunk; never a clamp, and the partial store is removed."""
    import zopt.lossy.prepare as prep

    real = prep._range_task

    def narrower(*args):
        st = real(*args)
        if st.hi is not None:
            st.hi = min(st.hi, 20.0)
        return st

    monkeypatch.setattr(prep, "_range_task", narrower)
    src, _, _ = ocean
    dst = tmp_path / "r.zarr"
    with pytest.raises(prep.LossyBoundError, match=r"inner chunk \(\d+, \d+\) \(shard .*\) of 'tos': value .* is outside the range"):
        recompress(src, dst, chunks="y=20,x=20", shards="y=60,x=80", lossy=["tos=abs:0.01"], variables=["tos"])
    assert not dst.exists() and not (tmp_path / "r.zarr.zopt-partial").exists()


@pytest.mark.parametrize("lossy, match", [
    ("tos=abs:0", "lossy tos: abs: the bound must be a finite number > 0"),
    ("tos=abs:-0.1", "lossy tos: abs: the bound must be a finite number > 0"),
    ("depth=abs:0.5", "lossy depth: abs: 'depth' is an integer variable"),
    ("tos=abs:1e-12", "lossy tos: abs: 1e-12 is below what float32 arithmetic"),
    ("tos=info:0", r"lossy tos: info: the information level must be in \(0, 1\]"),
    ("tos=info:1.01", r"lossy tos: info: the information level must be in \(0, 1\]"),
    ("tos=keepbits:65", r"lossy tos: keepbits: '65' is not a whole number of mantissa bits in \[0, 64\]"),
    ("tos=keepbits:30", "lossy tos: keepbits: 30 exceeds the 23 mantissa bits of float32"),
    ("depth=keepbits:3", "lossy depth: keepbits .bitround. needs a float16/float32/float64 variable"),
])
def test_bad_input_writes_nothing(ocean, tmp_path, lossy, match):
    src, _, _ = ocean
    dst = tmp_path / "bad.zarr"
    from zopt.io.sources import cached_tokens

    with pytest.raises(ValueError, match=match):
        recompress(src, dst, lossy=[lossy])
    assert not dst.exists() and not (tmp_path / "bad.zarr.zopt-partial").exists()
    assert cached_tokens() == []  # the refused job closed the source it had opened


def test_cli_lossy_bad_input_is_one_line(ocean, tmp_path):
    src, _, _ = ocean
    r = subprocess.run([sys.executable, "-m", "zopt", "recompress", src, str(tmp_path / "x.zarr"), "--lossy",
                        "tos=abs:0"], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.strip() == "Error: --lossy tos: abs: the bound must be a finite number > 0, got '0'"
    assert not (tmp_path / "x.zarr").exists()


def test_readers(ocean, tmp_path):
    """The claims of docs/lossy.md's reader table."""
    src, sst, _ = ocean
    # keepbits chains for every reader (a core tail chosen among those tensorstore reads too):
    # zarr-python, zarrs and tensorstore read the same values
    dst = tmp_path / "kb.zarr"
    recompress(src, dst, chunks="y=20,x=20", shards="y=60,x=80", codecs=ZSTD_ONLY, lossy=["tos=keepbits:7"],
               variables=["tos"], readers="zarr-python,zarrs,tensorstore")
    assert zarr.open_array(dst, path="tos").attrs["zopt_lossy"]["tail"] in ("blosc", "bytes")
    ref = zarr.open_array(dst, path="tos")[...]
    assert verify(src, str(dst)).ok
    zarrs = pytest.importorskip("zarrs")
    ts = pytest.importorskip("tensorstore")
    with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
        assert zarrs is not None
        np.testing.assert_array_equal(zarr.open_array(dst, path="tos")[...], ref)
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(dst / "tos")}}).result()
    np.testing.assert_array_equal(t.read().result(), ref)
    # abs chains: tensorstore refuses scale_offset/cast_value
    dst2 = tmp_path / "abs.zarr"
    recompress(src, dst2, chunks="y=20,x=20", codecs=ZSTD_ONLY, lossy=["tos=abs:0.01:bytes"], variables=["tos"])
    with pytest.raises(ValueError):
        ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(dst2 / "tos")}}).result()
    if zarr.__version__ >= "3.2":
        # zarr-python's own scale_offset and cast_value read the bytes variant exactly as zopt's do
        code = ("import zarr, numpy as np, sys\n"
                "zarr.config.set({'codecs.cast_value': 'zarr.codecs.cast_value.CastValue',"
                " 'codecs.scale_offset': 'zarr.codecs.scale_offset.ScaleOffset'})\n"
                "a = zarr.open_array(sys.argv[1], path='tos')\n"
                "cs = a.metadata.codecs\n"
                "cs = cs[0].codecs if len(cs) == 1 and hasattr(cs[0], 'codecs') else cs\n"
                "mods = {type(c).__module__ for c in cs}\n"
                "assert {'zarr.codecs.cast_value', 'zarr.codecs.scale_offset'} <= mods, mods\n"
                "assert not any(m.startswith('zopt.codecs.cast') or m.startswith('zopt.codecs.scale') for m in mods)\n"
                "np.save(sys.argv[2], a[...])\n")
        subprocess.run([sys.executable, "-c", code, str(dst2), str(tmp_path / "own.npy")], check=True)
        mine = zarr.open_array(dst2, path="tos")[...]
        np.testing.assert_array_equal(np.load(tmp_path / "own.npy").view(np.uint32), mine.view(np.uint32))


def test_docs_python_blocks_run(tmp_path, monkeypatch):
    """docs/lossy.md's Python examples run as written (on the README's NEMO file)."""
    import re
    from pathlib import Path

    pytest.importorskip("iris_sample_data")
    monkeypatch.chdir(tmp_path)
    text = (Path(__file__).parents[2] / "docs" / "lossy.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/lossy.md", "exec"), {})
    json_blocks = re.findall(r"```json\n(.*?)```", text, re.S)
    assert all(json.loads(b) for b in json_blocks)


def test_readers_option_refuses_what_a_reader_cannot_read(ocean, tmp_path):
    src, _, _ = ocean
    dst = tmp_path / "r.zarr"
    with pytest.raises(ValueError, match=r"readers: the chain of 'tos'.*tensorstore cannot read 'scale_offset'"):
        recompress(src, dst, lossy=["tos=abs:0.01:blosc"], variables=["tos"], readers="zarr-python-3.2,tensorstore")
    with pytest.raises(ValueError, match=r"tensorstore cannot read 'scale_offset'.*zarrs cannot read 'cast_value'"):
        recompress(src, dst, codecs=ZSTD_ONLY, lossy=["tos=abs:0.01:bytes"], variables=["tos"],
                   readers=["tensorstore", "zarrs"])
    with pytest.raises(ValueError, match=r"zarr-python-3.2 cannot read 'packbits'"):
        recompress(src, dst, codecs=ZSTD_ONLY, lossy=["tos=abs:0.01:packbits"], variables=["tos"],
                   readers="zarr-python-3.2")
    with pytest.raises(ValueError, match=r"readers: \['gdal'\] are not among"):
        recompress(src, dst, codecs=ZSTD_ONLY, variables=["tos"], readers="gdal")
    assert not dst.exists()
    with pytest.raises(ValueError, match=r"zarr-python cannot read 'scale_offset'.*from 3.2 on: --readers zarr-python-3.2"):
        recompress(src, dst, codecs=ZSTD_ONLY, lossy=["tos=abs:0.01:bytes"], variables=["tos"], readers="zarr-python")
    recompress(src, dst, codecs=ZSTD_ONLY, lossy=["tos=abs:0.01:bytes"], variables=["tos"], readers="zarr-python-3.2")
    assert verify(src, str(dst)).ok


@pytest.mark.parametrize("case", ["keepbits-core", "abs-bytes-core", "abs-packbits-core", "abs-auto", "default"])
def test_tensorstore_claims_match_tensorstore(ocean, tmp_path, case):
    """zopt.planning.readers says tensorstore reads a chain exactly when tensorstore opens it."""
    ts = pytest.importorskip("tensorstore")
    from zopt.lossy.prepare import prepare_for_recompress  # noqa: F401
    from zopt.planning.readers import unreadable

    src, _, _ = ocean
    codecs, lossy = {"keepbits-core": (ZSTD_ONLY, "tos=keepbits:7"), "abs-bytes-core": (ZSTD_ONLY, "tos=abs:0.01:bytes"),
                     "abs-packbits-core": (ZSTD_ONLY, "tos=abs:0.01:packbits"), "abs-auto": (None, "tos=abs:0.01"),
                     "default": (None, "tos=keepbits:7")}[case]
    readers = "zarr-python,tensorstore" if case == "keepbits-core" else None  # its tail: one tensorstore reads
    dst = tmp_path / "t.zarr"
    recompress(src, dst, codecs=codecs, lossy=[lossy], variables=["tos"], readers=readers)
    meta = json.loads((dst / "tos" / "zarr.json").read_text())
    claimed = not unreadable(meta["codecs"], ["tensorstore"])
    try:
        ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(dst / "tos")}}).result().read().result()
        opened = True
    except ValueError:
        opened = False
    assert claimed == opened


def test_zarr_v3_source_fill_value_and_missing_value(tmp_path):
    """A Zarr v3 source: its fill value (0.0, zarr's default) and a CF missing_value (-1e34) are
    both restored exactly, and neither widens the range."""
    rng = np.random.default_rng(2)
    x = (rng.random((40, 50)) * 8 + 1).astype(np.float32)
    x[:5] = 0.0  # equal to the fill value: not stored, read back as 0.0
    x[10, :7] = np.float32(-1e34)
    x[20, 3] = np.nan
    src = tmp_path / "src.zarr"
    g = zarr.open_group(src, mode="w", zarr_format=3)
    a = g.create_array("v", shape=x.shape, chunks=(20, 25), dtype="f4", fill_value=0.0,
                       dimension_names=("y", "x"), attributes={"missing_value": -1e34})
    a[...] = x
    dst = tmp_path / "dst.zarr"
    recompress(str(src), dst, chunks="y=10,x=25", lossy=["v=abs:0.05"])
    out = zarr.open_array(dst, path="v")
    rec = out.attrs["zopt_lossy"]
    assert rec["range"] == [float(x[x > 0.5].min()), float(x[np.isfinite(x)].max())]
    assert rec["bits"] == int(np.ceil(np.log2((rec["range"][1] - rec["range"][0]) / 0.1 + 4)))
    got = out[...]
    assert np.array_equal(got == 0, x == 0) and np.array_equal(got == np.float32(-1e34), x == np.float32(-1e34))
    assert verify(str(src), str(dst)).ok
