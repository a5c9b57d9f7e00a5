"""Portable by default (issue 36): every store a job writes without ``--readers`` opens in plain
xarray without zopt (``tests/plain_reader.py`` says how zopt is kept out of the subprocess), the
values equal to the source's; a ``--readers zopt`` store does not, naming the codec; the
summary and ``zopt info`` end with the reader line derived from what was written."""

from __future__ import annotations

import os
import pickle
import re
import shutil

import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner
from plain_reader import open_plain

import zopt
import zopt.xarray
from zopt.cli import main
from zopt.planning.readers import READERS, reader_line, store_arrays

iris_sample_data = pytest.importorskip("iris_sample_data")
SAMPLE = iris_sample_data.path
A1B = os.path.join(SAMPLE, "A1B_north_america.nc")
#: the netCDF test datasets of iris-sample-data: model fields, satellite and ocean grids, profiles,
#: time series, a UGRID mesh, cftime calendars, CF packing and fill values
NETCDF = ["A1B_north_america.nc", "E1_north_america.nc", "ostia_monthly.nc", "hybrid_height.nc",
          "toa_brightness_stereographic.nc", "orca2_votemper.nc", "space_weather.nc", "SOI_Darwin.nc",
          "atlantic_profiles.nc", "rotated_pole.nc", "mesh_C4_synthetic_float.nc", "vlstr_type.nc",
          "NEMO/nemo_1m_20150101-20150201_grid-T.nc"]


def _equal(got: xr.Dataset, want: xr.Dataset, what: str) -> None:
    """Every variable of ``want`` in ``got``, same dtype, dims and values bit for bit (cftime dates
    compared as objects, strings as strings)."""
    assert set(want.variables) <= set(got.variables), (what, set(want.variables) - set(got.variables))
    for name in want.variables:
        a, b = got[name], want[name]
        assert a.dims == b.dims and a.dtype == b.dtype, (what, name, a.dtype, b.dtype)
        if b.dtype.kind in "OUS":
            assert a.values.tolist() == b.values.tolist(), (what, name)
        else:
            assert a.values.tobytes() == b.values.tobytes(), (what, name)


def _opened(res, out) -> dict:
    assert res.returncode == 0, res.stderr[-3000:]
    with open(out, "rb") as f:
        return pickle.load(f)


def test_the_readme_job_and_every_test_dataset_open_without_zopt(tmp_path):
    """The README's first command and a default recompress of every netCDF test dataset: plain
    xarray (no zopt, no zopt entry point) opens every store and reads the source's values; the
    summary's last line says so. With ``--readers zopt`` the same reader fails, naming the codec."""
    runner = CliRunner()
    readme = tmp_path / "a1b.zarr"
    res = runner.invoke(main, ["recompress", A1B, str(readme), "--chunks", "time=12", "--shards", "time=120",
                               "--vs-default", "--no-progress"])
    assert res.exit_code == 0, res.output
    last = " ".join(res.output[res.output.rindex("readers: "):].split())  # wrapped to the width
    assert last == "readers: zarr-python ≥ 3.1 + pcodec ≥ 0.3.6, zarrs ≥ 0.2.3; not tensorstore: numcodecs.pcodec, numcodecs.shuffle"
    stores = {A1B: readme}
    for name in NETCDF[1:]:
        dst = tmp_path / (os.path.basename(name) + ".zarr")
        report = zopt.recompress(os.path.join(SAMPLE, name), dst)
        assert report.readers.startswith("readers: ") and "zopt only" not in report.readers, (name, report.readers)
        stores[os.path.join(SAMPLE, name)] = dst
    # the xarray helper's default encoding too
    ds = xr.open_dataset(A1B)
    ds.to_zarr(tmp_path / "enc.zarr", zarr_format=3, encoding=zopt.xarray.encoding(ds), consolidated=True)
    got = _opened(open_plain([*stores.values(), tmp_path / "enc.zarr"], tmp_path / "out.pkl"), tmp_path / "out.pkl")
    for src, dst in stores.items():
        with xr.open_dataset(src) as want:
            _equal(got[str(dst)], want.load(), src)
    _equal(got[str(tmp_path / "enc.zarr")], ds.load(), "encoding")
    # --readers zopt: zopt's conditional where the menu takes it (time_bnds); the plain reader fails naming it
    res = runner.invoke(main, ["recompress", A1B, str(tmp_path / "z.zarr"), "--chunks", "time=12", "--shards",
                               "time=120", "--readers", "zopt", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert " ".join(res.output[res.output.rindex("readers: "):].split()) == ("readers: zopt only (zarr-python with zopt installed): "
                                                   "conditional in time_bnds")
    res = open_plain([tmp_path / "z.zarr"], tmp_path / "z.pkl")
    assert res.returncode != 0 and "codec" in res.stderr.splitlines()[-1] and "'conditional'" in res.stderr, res.stderr


def _every_type() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    base = rng.normal(size=(60, 50)).cumsum(axis=1)
    out = {}
    for dt in ("bool", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", "c8", "c16"):
        if dt == "bool":
            a = base > 0
        elif dt[0] in "iu":
            a = np.clip(base * 10, 0 if dt[0] == "u" else -100, 100).astype(dt)
        elif dt[0] == "c":
            a = (base + 1j * base[::-1]).astype(dt)
        else:
            a = base.astype(dt)
        out[f"v_{dt}"] = a
    return out


def test_every_numpy_type_fixed_slots_and_several_packed_files_open_without_zopt(tmp_path):
    """A Zarr v3 source with every numpy type (1-byte, bool and complex included), written with
    the default chains compact and in fixed slots, and netCDF files packed differently (written as
    their floats by default: zarr-python 3.1 has no scale_offset): plain xarray reads them all."""
    from test_multi import write_files

    arrays = _every_type()
    src = tmp_path / "src.zarr"
    g = zarr.open_group(src, mode="w", zarr_format=3)
    for name, a in arrays.items():
        # by name: zarr's complex64/128 (zopt's complex_float32/64 match numpy's complex natively too)
        g.create_array(name, shape=a.shape, chunks=(30, 50), dtype=a.dtype.name, dimension_names=("y", "x"))[...] = a
    zarr.consolidate_metadata(src)
    compact, slots = tmp_path / "compact.zarr", tmp_path / "slots.zarr"
    zopt.recompress(str(src), compact, chunks="y=20", shards="y=60")
    report = zopt.recompress(str(src), slots, chunks="y=20", shards="y=60", layout="fixed-slot")
    assert "zopt only" not in report.readers
    files = write_files(tmp_path / "nc", 4, packing=lambda i: (0.01, 0.0) if i % 2 else (0.02, 10.0))
    multi = tmp_path / "multi.zarr"
    report = zopt.recompress(str(tmp_path / "nc" / "*.nc"), multi, concat_dim="time")
    assert any(re.match(r"sst: files packed differently, written as the float(32|64) values they decode to \(exact\)", n)
               for n in report.notes), report.notes
    assert not any("re-expressed as one exact packing" in n for n in report.notes)
    got = _opened(open_plain([compact, slots, multi], tmp_path / "o.pkl"), tmp_path / "o.pkl")
    for dst in (compact, slots):
        for name, a in arrays.items():
            assert got[str(dst)][name].values.tobytes() == a.tobytes(), (dst, name)
    # the floats are the files' exact decimals p·scale+offset (zopt verify's check), which xarray's
    # CF decoding p*scale+offset may miss in the last bit
    assert zopt.verify([str(f) for f in files], str(multi), concat_dim="time").ok
    with xr.open_mfdataset(files, combine="by_coords") as want:
        a, b = got[str(multi)]["sst"].values, want["sst"].values
        assert a.dtype == b.dtype and np.array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-13)  # last bits (2.4e-15 at 18.12)


def test_several_packed_files_are_re_expressed_for_readers_of_scale_offset(tmp_path):
    """``--readers zarr-python-3.2`` (or zopt) re-expresses files packed differently as one exact
    integer packing, smaller than the floats; the reader line says zarr-python ≥ 3.2."""
    from test_multi import write_files

    write_files(tmp_path / "nc", 4, packing=lambda i: (0.01, 0.0) if i % 2 else (0.02, 10.0))
    floats = zopt.recompress(str(tmp_path / "nc" / "*.nc"), tmp_path / "f.zarr", concat_dim="time")
    ints = zopt.recompress(str(tmp_path / "nc" / "*.nc"), tmp_path / "i.zarr", concat_dim="time",
                           readers="zarr-python-3.2")
    codecs = store_arrays(str(tmp_path / "i.zarr"))["sst"][0]
    codecs = codecs[0]["configuration"]["codecs"] if codecs[0]["name"] == "sharding_indexed" else codecs
    assert [c["name"] for c in codecs[:2]] == ["scale_offset", "cast_value"]
    assert ints.readers.startswith("readers: zarr-python ≥ 3.2") and "not zarr-python 3.1" not in floats.readers
    assert "zarr-python 3.1 without zopt: scale_offset (sst)" not in floats.readers
    size = {r.dst: next(a for a in r.arrays if a.name == "sst").stored_after for r in (floats, ints)}
    assert size[ints.dst] < size[floats.dst]
    got, want = zarr.open_array(tmp_path / "i.zarr", path="sst")[...], zarr.open_array(tmp_path / "f.zarr", path="sst")[...]
    assert got.tobytes() == want.tobytes()  # the same floats, bit for bit


def test_choices_that_ask_for_zopt_s_codecs_write_them_and_the_reader_line_says_so(tmp_path):
    """An explicit decision decides conditional's masks: without --readers it takes zopt's
    chains; with --readers zarr-python it is refused, naming readers zopt. Candidates named one
    by one are written as asked; a named menu and the presets with a menu stay portable."""
    a = np.round(np.sin(np.arange(64 * 256) / 300), 3).astype("f4").reshape(64, 256)
    src = tmp_path / "s.zarr"
    zarr.create_array(src, shape=a.shape, chunks=(64, 256), dtype="f4", dimension_names=("y", "x"))[...] = a
    r = zopt.recompress(str(src), tmp_path / "d.zarr", decision="always")
    assert r.readers.startswith("readers: zopt only")
    with pytest.raises(ValueError, match="a decision decides the masks of zopt's conditional codec, which only zopt "
                                         "reads: give readers 'zopt'"):
        zopt.recompress(str(src), tmp_path / "e.zarr", decision="always", readers="zarr-python")
    assert zopt.recompress(str(src), tmp_path / "m.zarr", menu="classic").readers.startswith("readers: zopt only")
    for preset in ("default", "archive"):
        r = zopt.recompress(str(src), tmp_path / f"{preset}.zarr", preset=preset)
        assert "zopt only" not in r.readers, (preset, r.readers)
    r = zopt.recompress(str(src), tmp_path / "fast.zarr", preset="fast")
    assert r.readers.startswith("readers: zopt only")


def test_the_reader_line_names_every_reader_from_codecs_and_data_types():
    f4, bf16 = "float32", "bfloat16"
    raw = [{"name": "bytes", "configuration": {"endian": "little"}}]
    zstd = raw + [{"name": "zstd", "configuration": {"level": 3}}]
    pco = [{"name": "numcodecs.pcodec", "configuration": {"level": 8}}]
    cond = raw + [{"name": "conditional", "configuration": {"codecs": [{"name": "zstd"}]}}]
    so = [{"name": "scale_offset", "configuration": {}}, {"name": "cast_value", "configuration": {}}] + zstd
    pack = [{"name": "packbits", "configuration": {}}, {"name": "zstd"}]
    shard = [{"name": "sharding_indexed", "configuration": {"codecs": pco, "index_codecs": raw}}]
    assert reader_line({"a": (zstd, f4)}) == "readers: any Zarr v3 reader (zarr-python ≥ 3.1, zarrs, tensorstore)"
    assert reader_line({"a": (zstd, f4), "b": (shard, f4)}) == (
        "readers: zarr-python ≥ 3.1 + pcodec ≥ 0.3.6, zarrs ≥ 0.2.3; not tensorstore: numcodecs.pcodec")
    assert reader_line({"a": (so, f4)}) == (
        "readers: zarr-python ≥ 3.2; not zarr-python 3.1, zarrs, tensorstore: scale_offset, cast_value")
    assert reader_line({"a": (pack, f4)}) == "readers: zarrs; not zarr-python, tensorstore: packbits"
    assert reader_line({"a": (cond, f4), "b": (zstd, f4)}) == (
        "readers: zopt only (zarr-python with zopt installed): conditional in a")
    assert reader_line({"w": (zstd, bf16)}) == (
        "readers: zopt only (zarr-python with zopt installed): data type bfloat16 in w")
    assert reader_line({f"v{i}": (cond, f4) for i in range(5)}).endswith("conditional in v0, v1, v2 and 2 more")
    assert set(READERS) == {"zopt", "zarr-python", "zarr-python-3.2", "tensorstore", "zarrs"}


def test_info_and_dry_run_show_the_reader_line(tmp_path):
    runner = CliRunner()
    dst = tmp_path / "a1b.zarr"
    res = runner.invoke(main, ["recompress", A1B, str(dst), "--chunks", "time=12", "--no-progress", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert " ".join(res.output.split()).endswith("readers (planned): zarr-python ≥ 3.1 + pcodec ≥ 0.3.6, zarrs ≥ 0.2.3; not tensorstore: "
                                                 "numcodecs.pcodec, numcodecs.shuffle")
    report = zopt.recompress(A1B, dst, chunks="time=12")
    res = runner.invoke(main, ["info", str(dst)])
    assert res.exit_code == 0, res.output
    assert " ".join(res.output[res.output.rindex("readers: "):].split()) == report.readers  # wrapped to the width
    shutil.rmtree(dst)
    zopt.recompress(A1B, dst, chunks="time=12", readers="zopt")
    res = runner.invoke(main, ["info", str(dst)])
    assert "readers: zopt only" in res.output


@pytest.mark.parametrize("name", NETCDF)
def test_encoding_is_never_larger_than_xarray_default_and_within_1_percent_of_recompress(tmp_path, name):
    """``zopt.xarray.encoding(ds)`` on each test dataset: stored bytes (chunk and shard files)
    never more than ``ds.to_zarr``'s default (the same values: the CF keys kept), and within 1 %
    of ``zopt recompress`` on the file (the same menu and chunk choice: one code path)."""
    src = os.path.join(SAMPLE, name)

    def stored(path) -> int:
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs if f != "zarr.json")

    with xr.open_dataset(src) as ds:
        ds.to_zarr(tmp_path / "z.zarr", zarr_format=3, encoding=zopt.xarray.encoding(ds), consolidated=True)
        for v in ds.variables.values():  # xarray's default: only the CF encoding (netCDF storage keys do not apply)
            v.encoding = {k: v.encoding[k] for k in v.encoding if k in zopt.xarray._CF_KEYS}
        ds.to_zarr(tmp_path / "x.zarr", zarr_format=3, consolidated=True)
    zopt.recompress(src, tmp_path / "r.zarr")
    mine, plain, engine = (stored(tmp_path / p) for p in ("z.zarr", "x.zarr", "r.zarr"))
    assert mine <= plain, (mine, plain)
    assert abs(mine - engine) <= 0.01 * engine, (mine, engine)


def test_readers_in_the_job_summary_and_report(tmp_path):
    """The report carries the line; --in-place keeps the store's chains, and its line says zopt only."""
    a = np.round(np.sin(np.arange(64 * 256) / 300), 3).astype("f4").reshape(64, 256)
    src = tmp_path / "s.zarr"
    zarr.open_group(src, mode="w").create_array("v", shape=a.shape, chunks=(64, 256), dtype="f4",
                                                 dimension_names=("y", "x"))[...] = a
    zopt.recompress(str(src), tmp_path / "fast.zarr", preset="fast", decision="never")
    res = CliRunner().invoke(main, ["recompress", str(tmp_path / "fast.zarr"), "--in-place", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert res.output.strip().splitlines()[-1].startswith("readers: zopt only"), res.output


def test_shards_alone_take_default_chunks_no_larger_than_them():
    """``--shards time=120`` (or ``encoding(ds, shards=...)``) without chunks: a 1-D variable whose
    default inner chunk (all 240 steps) is longer than the shard was refused; the default inner
    chunk is now clipped to the shards given."""
    from zopt.planning.chunking import choose_chunks

    assert choose_chunks((240, 2), 8, None, (120, 2)) == ((120, 2), None)
    assert choose_chunks((240, 37, 49), 4, None, (120, 37, 49)) == ((35, 37, 49), (105, 37, 49))  # unchanged
    with xr.open_dataset(A1B) as ds:
        enc = zopt.xarray.encoding(ds, shards={"time": 120})
    assert enc["forecast_period"]["chunks"] == (120,) and "shards" not in enc["forecast_period"]
