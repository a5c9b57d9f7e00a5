"""Presets, the "vs zarr default" baseline, and the xarray helpers (``zopt.xarray``), on real data."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner

import zopt
import zopt.xarray as zx
from zopt.cli.commands import main
from zopt.codecs.conditional import conditional_codecs_in
from zopt.errors import ChunkIndexUnavailableError
from zopt.planning.analysis import analyze
from zopt.planning.baseline import zarr_default_bytes
from zopt.planning.candidates import CANDIDATES, MENUS
from zopt.planning.menu import default_codecs
from zopt.planning.plan import PlanMismatchError, make_plan
from zopt.planning.presets import PRESETS, get_preset, presets_json
from zopt.readback.info import store_info

iris_sample_data = pytest.importorskip("iris_sample_data")
A1B = os.path.join(iris_sample_data.path, "A1B_north_america.nc")  # 240×37×49 float32 air temperature, uncompressed


def _store_bytes(path: Path, name: str) -> int:
    root = Path(path) / name
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and f.name != "zarr.json")


def _assert_bitwise_equal(a: xr.Dataset, b: xr.Dataset) -> None:
    assert set(a.variables) == set(b.variables)
    for name in a.variables:
        va, vb = a[name], b[name]
        assert va.dtype == vb.dtype and va.dims == vb.dims, name
        if va.dtype.kind == "O":  # cftime dates: compare the objects, not their pointers
            assert va.values.tolist() == vb.values.tolist(), name
        else:
            assert va.values.tobytes() == vb.values.tobytes(), name
        assert va.attrs == vb.attrs, name


# -- presets ----------------------------------------------------------------------------------------


def test_every_preset_is_a_valid_chain_that_round_trips(tmp_path):
    from zopt.planning.chains import split_chain

    rng = np.random.default_rng(0)
    values = np.round(np.cumsum(rng.standard_normal((64, 64)), axis=1), 2).astype("f4")
    for p in PRESETS.values():
        split = split_chain(p.chain())
        (cond,) = conditional_codecs_in(split["compressors"])
        assert all(c.to_dict()["name"] in ("shuffle", "zstd") for c in cond.codecs)
        z = zarr.create_array(tmp_path / f"{p.name}.zarr", shape=values.shape, chunks=(32, 32), dtype="f4",
                              serializer=split["serializer"], compressors=[cond.with_decision(p.decision)])
        z[:] = values
        assert np.array_equal(zarr.open_array(tmp_path / f"{p.name}.zarr")[:], values)
    assert [c["name"] for c in json.loads(presets_json())[0]["codecs"]] == ["bytes", "conditional"]
    with pytest.raises(ValueError, match=r"preset: unknown preset 'tiny'; allowed: \['default', 'fast', 'archive', 'lossless-8bit'\]"):
        get_preset("tiny")


def _codec_levels(chain: list) -> list:
    """``(name, level)`` of every codec of a chain, wrapped ones included (what a menu candidate fixes)."""
    out = []
    for c in chain:
        cfg = c.get("configuration") or {}
        out.append((c["name"], cfg.get("level", cfg.get("clevel")), cfg.get("shuffle")))
        out += _codec_levels(cfg.get("codecs", [])) if c["name"] == "conditional" else []
    return out


def test_cli_presets_and_recompress_with_a_preset_vs_zarr_default(tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["presets", "--json"])
    assert res.exit_code == 0, res.output
    assert [p["name"] for p in json.loads(res.output)] == list(PRESETS)
    res = runner.invoke(main, ["presets"])
    assert res.exit_code == 0 and "lossless-8bit" in res.output and "zstd" in res.output
    dst = tmp_path / "a.zarr"
    res = runner.invoke(main, ["recompress", A1B, str(dst), "--chunks", "time=12", "--shards", "time=120",
                               "--preset", "archive", "--vs-default", "--no-progress", "--wide"])
    assert res.exit_code == 0, res.output
    assert "vs zarr default" in res.output
    meta = json.loads((dst / "air_temperature" / "zarr.json").read_text())
    inner = meta["codecs"][0]["configuration"]["codecs"]
    # archive chooses from the archive menu, size first; the note names the choice, the store holds it
    chosen = re.search(r"air_temperature=([\w-]+)", res.output.replace("\n", " ")).group(1)
    assert chosen in MENUS["archive"]
    assert _codec_levels(inner) == _codec_levels(CANDIDATES[chosen].chain("f4"))
    # the printed zarr-default size is what zarr itself stores for the same chunks and shards
    baseline = zarr_default_bytes(dst, ["air_temperature"])["air_temperature"]
    src = xr.open_dataset(A1B, decode_cf=False)["air_temperature"]
    z = zarr.create_array(tmp_path / "plain.zarr", shape=src.shape, dtype="f4", chunks=(12, 37, 49),
                          shards=(120, 37, 49), fill_value=zarr.open_array(dst, path="air_temperature").fill_value)
    z[:] = src.values
    assert baseline == _store_bytes(tmp_path / "plain.zarr", "")
    assert _store_bytes(dst, "air_temperature") < 0.8 * baseline < os.path.getsize(A1B)
    # --preset and --codecs together, an unknown preset, --preset with --in-place: one line each
    res = runner.invoke(main, ["recompress", A1B, str(tmp_path / "b.zarr"), "--preset", "fast", "--codecs", "[]"])
    assert res.exit_code == 2 and "not both" in res.output
    res = runner.invoke(main, ["recompress", A1B, str(tmp_path / "b.zarr"), "--preset", "tiny"])
    assert res.exit_code == 2 and "allowed: ['default', 'fast', 'archive', 'lossless-8bit']" in res.output
    res = runner.invoke(main, ["recompress", str(dst), "--in-place", "--preset", "fast"])
    assert res.exit_code == 2 and "--preset cannot be used" in res.output
    assert not (tmp_path / "b.zarr").exists()


def test_explicit_decision_overrides_the_presets(tmp_path):
    res = CliRunner().invoke(main, ["recompress", A1B, str(tmp_path / "n.zarr"), "--variable", "air_temperature",
                                    "--preset", "fast", "--decision", "never", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert set(store_info(tmp_path / "n.zarr", ["air_temperature"])[0].masks) == {0}


# -- zopt.xarray ------------------------------------------------------------------------------------


def test_encoding_round_trips_a_real_dataset_bit_for_bit_sharded(tmp_path):
    ds = xr.open_dataset(A1B)
    enc = zx.encoding(ds, chunks={"time": 12}, shards={"time": 120})
    t = enc["air_temperature"]
    assert t["chunks"] == (12, 37, 49) and t["shards"] == (120, 37, 49)
    assert t["serializer"].to_dict()["name"] == "numcodecs.pcodec" and t["compressors"] is None  # the menu's choice
    shuffle, _ = enc["time_bnds"]["compressors"]  # numcodecs.shuffle + zstd: plain zarr-python reads it
    assert shuffle.to_dict() == {"name": "numcodecs.shuffle", "configuration": {"elementsize": 8}}  # float64
    assert enc["time"]["chunks"] == (240,) and enc["latitude"]["chunks"] == (37,)  # coordinates whole
    assert enc["time"]["units"] == ds["time"].encoding["units"]  # CF encoding carried over (to_zarr drops it)
    ds.to_zarr(tmp_path / "a.zarr", zarr_format=3, encoding=enc, consolidated=False)
    _assert_bitwise_equal(xr.open_zarr(tmp_path / "a.zarr", consolidated=False).load(), ds)
    info = {a.name: a for a in store_info(tmp_path / "a.zarr")}
    assert info["air_temperature"].layout == "compact" and info["air_temperature"].chunks_stored == 20
    assert info["air_temperature"].apparent_bytes < 0.55 * ds["air_temperature"].nbytes
    meta = json.loads((tmp_path / "a.zarr" / "time" / "zarr.json").read_text())
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [240]
    # readers zopt: zopt's classic chain where the menu takes it, shuffle sized per variable, decided per chunk
    enc = zx.encoding(ds, chunks={"time": 12}, shards={"time": 120}, readers="zopt")
    (cond,) = enc["time_bnds"]["compressors"]
    assert cond.codecs[0].element_size == 8 and cond.decision is not None
    ds.to_zarr(tmp_path / "z.zarr", zarr_format=3, encoding=enc, consolidated=False)
    _assert_bitwise_equal(xr.open_zarr(tmp_path / "z.zarr", consolidated=False).load(), ds)
    assert sum(store_info(tmp_path / "z.zarr", ["time_bnds"])[0].masks.values()) == 20


def test_encoding_chooses_whole_levels_for_a_3d_climatology():
    # issue 26: 20 depths × 180 × 360 float32 got 20 × 57 × 57 tiles (6 % larger than xarray's own
    # one-level-per-chunk default); now one whole lat × lon level per inner chunk
    ds = xr.Dataset({"t": (("depth", "lat", "lon"), np.zeros((20, 180, 360), "f4")),
                     "mask": (("lat", "lon"), np.zeros((180, 360), bool))})
    enc = zx.encoding(ds)
    assert enc["t"]["chunks"] == (1, 180, 360) and enc["t"]["shards"] == (20, 180, 360)
    assert enc["mask"]["chunks"] == (180, 360)  # 1-byte types: square tiles, here the whole array
    assert zx.encoding(ds, chunks={"depth": 20, "lat": 57, "lon": 57})["t"]["chunks"] == (20, 57, 57)  # given: kept


def test_encoding_with_a_plan_writes_the_planned_masks(tmp_path):
    import collections

    ds = xr.open_dataset(A1B, decode_cf=False)[["air_temperature"]]
    a = ds["air_temperature"].values.copy()
    # a year of random bytes: the plan stores it raw (mask 0), the other years shuffled + compressed
    a[24:36] = np.random.default_rng(1).integers(0, 2**32, a[24:36].shape, dtype=np.uint32).view("f4")
    ds["air_temperature"].values[:] = a
    zarr.open_group(tmp_path / "raw.zarr", mode="w").create_array(
        "air_temperature", shape=a.shape, chunks=(12, 37, 49), dtype="f4", fill_value=0,
        dimension_names=ds["air_temperature"].dims)[:] = a
    plan = make_plan(analyze(tmp_path / "raw.zarr", ["air_temperature"]), "smallest")
    planned = collections.Counter(int(m) for m in plan["air_temperature"].masks.ravel())
    assert planned[0] == 1 and planned[0b11] == 19
    plan.save(tmp_path / "plan.zarr")
    enc = zx.encoding(ds, shards={"time": 120}, plan=tmp_path / "plan.zarr")  # a path works too
    assert enc["air_temperature"]["chunks"] == (12, 37, 49)  # the plan's chunk shape
    with pytest.raises(ChunkIndexUnavailableError, match=r"needs each chunk's index.*zopt.pipeline\(\)"):
        ds.to_zarr(tmp_path / "plain.zarr", zarr_format=3, encoding=enc, consolidated=False)  # zarr's own pipeline
    with zopt.pipeline():  # the user opts in: zopt's pipeline passes each chunk's index to the plan
        ds.to_zarr(tmp_path / "p.zarr", zarr_format=3, encoding=enc, consolidated=False)
    back = zarr.open_array(tmp_path / "p.zarr", path="air_temperature")
    assert back[:].tobytes() == a.tobytes()
    assert store_info(tmp_path / "p.zarr", ["air_temperature"])[0].masks == planned
    with pytest.raises(PlanMismatchError, match=r"chunk grid: chunk shape \(24, 37, 49\) vs planned \(12, 37, 49\)"):
        zx.encoding(ds, chunks={"time": 24}, plan=plan)
    with pytest.raises(PlanMismatchError, match=r"plan: it covers \['air_temperature'\], which are not data variables"):
        zx.encoding(ds.rename({"air_temperature": "t"}), plan=plan)


def test_encoding_of_one_byte_and_bool_variables_and_bad_arguments():
    ds = xr.Dataset({"flag": (("y", "x"), np.zeros((20, 30), bool)), "n": (("y", "x"), np.ones((20, 30), "u1")),
                     "t": (("y", "x"), np.arange(600, dtype="i2").reshape(20, 30)), "s": (("y",), np.array(["a"] * 20))})
    enc = zx.encoding(ds)
    for name in ("flag", "n"):  # the engine's level for 1-byte types (zopt.planning.menu), not a level of its own
        want = [(c["name"], c["configuration"]["level"]) for c in default_codecs(ds[name].dtype)]
        assert [(c.to_dict()["name"], c.level) for c in enc[name]["compressors"]] == want  # plain zstd: portable
        lossless = zx.encoding(ds, preset="lossless-8bit")
        assert [(c.to_dict()["name"], c.level) for c in lossless[name]["compressors"][0].codecs] == want  # conditional
    assert enc["t"]["serializer"].to_dict()["name"] == "numcodecs.pcodec"  # a ramp: pcodec's deltas win
    assert zx.encoding(ds, readers="zopt", menu="classic")["t"]["compressors"][0].codecs[0].element_size == 2
    # a candidate named is written as asked, like --codecs (zopt.planning.candidates.menu_readers)
    assert zx.encoding(ds, menu="classic")["t"]["compressors"][0].to_dict()["name"] == "conditional"
    fast = zx.encoding(ds, preset="fast")
    assert [c.to_dict()["name"] for c in fast["n"]["compressors"][0].codecs] == ["zstd"]  # no 1-byte shuffle
    assert [c.to_dict()["name"] for c in fast["t"]["compressors"][0].codecs] == ["shuffle", "zstd"]
    assert "s" not in enc  # strings keep xarray's own encoding
    with pytest.raises(ValueError, match="preset: unknown preset"):
        zx.encoding(ds, preset="nope")
    with pytest.raises(ValueError, match="chunks: .* sizes must be positive integers"):
        zx.encoding(ds, chunks="y=0")
    with pytest.raises(ValueError, match=r"chunks: the Dataset has no dimension\(s\) \['FOO'\]; its dimensions are "
                                         r"\['x', 'y'\]"):
        zx.encoding(ds, chunks="FOO=3,y=10")  # was ignored: the default chunks
    with pytest.raises(ValueError, match=r"shards: the Dataset has no dimension\(s\) \['z'\]"):
        zx.encoding(ds, shards={"z": 40})


def test_recompress_a_path_and_a_dask_dataset_and_the_accessor(tmp_path):
    report = zx.recompress(A1B, tmp_path / "p.zarr", chunks="time=12", shards="time=120", preset="fast",
                           variables=["air_temperature"])
    assert report.arrays[0].masks == {0b11: 20}  # "always": every chunk shuffled and compressed
    src = xr.open_dataset(A1B, chunks={"time": 60})  # dask-backed
    out = zx.recompress(src, tmp_path / "d.zarr", chunks={"time": 12}, shards={"time": 120}, scheduler="threads")
    _assert_bitwise_equal(out.load(), xr.open_dataset(A1B))
    assert not (tmp_path / "d.zarr.zopt-partial").exists()
    with pytest.raises(FileExistsError):
        zx.recompress(src, tmp_path / "d.zarr")
    with pytest.raises(ValueError, match=r"\['layout'\]: not options of a Dataset write"):
        zx.recompress(src, tmp_path / "e.zarr", layout="fixed-slot")
    src.zopt.to_zarr(tmp_path / "acc.zarr", chunks={"time": 12}, shards={"time": 120}, preset="archive",
                     consolidated=False)
    meta = json.loads((tmp_path / "acc.zarr" / "air_temperature" / "zarr.json").read_text())
    assert meta["codecs"][0]["configuration"]["codecs"] == [  # the archive menu's choice, as recompress makes it
        {"name": "numcodecs.pcodec", "configuration": {"level": 12}}]
    _assert_bitwise_equal(xr.open_zarr(tmp_path / "acc.zarr", consolidated=False).load(), xr.open_dataset(A1B))


def test_zarr_default_bytes_of_an_unsharded_array_with_fill_chunks(tmp_path, monkeypatch):
    from zopt.planning import baseline

    a = np.round(np.sin(np.arange(5000) / 50), 3).astype("f8")
    a[1000:2000] = -1.0  # whole chunks equal to the fill value: zarr does not store them
    codecs = get_preset("default").array_codecs(itemsize=8)
    zarr.create_array(tmp_path / "z.zarr", name="v", shape=a.shape, dtype="f8", chunks=(500,), fill_value=-1.0,
                      **codecs)[:] = a
    plain = zarr.create_array(tmp_path / "plain.zarr", shape=a.shape, dtype="f8", chunks=(500,), fill_value=-1.0)
    plain[:] = a
    monkeypatch.setattr(baseline, "TASK_BYTES", 3 * 500 * 8)  # several tasks of 3 chunks, the last one partial
    assert zarr_default_bytes(tmp_path / "z.zarr", ["v"]) == {"v": _store_bytes(tmp_path / "plain.zarr", "")}
    assert len(list((tmp_path / "plain.zarr" / "c").iterdir())) == 8


def test_zarr_default_bytes_refuses_a_zarr_v2_array(tmp_path):
    """The baseline is of Zarr v3 arrays: a v2 one is an OptionError naming the array, not an
    AttributeError from inside zarr's metadata."""
    from zopt.errors import OptionError

    zarr.create_array(tmp_path / "v2.zarr", name="v", shape=(10,), dtype="f8", chunks=(5,), zarr_format=2)[:] = 1.0
    with pytest.raises(OptionError, match=r"store: 'v' is a Zarr v2 array"):
        zarr_default_bytes(tmp_path / "v2.zarr", ["v"])


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_the_default_preset_is_the_engines_chain_for_each_type(itemsize):
    """``--preset default`` and ``zopt.xarray.encoding(preset="default")`` write what a plain
    ``zopt recompress`` writes: bool/1-byte types zstd(10) without shuffle, wider types the
    shuffle + zstd(3) chain (``zopt.planning.menu``)."""
    from zopt.planning.menu import default_chain
    from zopt.planning.presets import get_preset

    assert get_preset("default").chain(itemsize) == default_chain(f"V{itemsize}")
