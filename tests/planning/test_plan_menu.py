"""Plans made with the codec menu (issue 26): the chain per array next to the mask per chunk, saved,
shown, drawn, and re-applied by ``recompress --plan`` with no trial encoding."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from zopt import recompress, recompress_in_place
from zopt.cli.commands import main
from zopt.job.analyze import analyze  # menu, budget, readers: parsed there (MenuOptions)
from zopt.planning.plan import Plan, make_plan


def _dem() -> np.ndarray:
    y, x = np.mgrid[0:256, 0:256]
    return (1000 * np.sin(x / 40) * np.cos(y / 30) + 3 * x).astype(np.int16)


def _levels() -> np.ndarray:
    """20 depths of a 64 × 64 field: a 20 × 1 × 1 chunk grid at one level per chunk."""
    walk = np.cumsum(np.random.default_rng(0).normal(size=(1, 64, 64)), axis=2)
    return (np.repeat(walk, 20, axis=0) + np.arange(20)[:, None, None]).astype("f4")


@pytest.fixture
def store(tmp_path) -> str:
    g = zarr.open_group(tmp_path / "s.zarr", mode="w")
    g.create_array("dem", shape=(256, 256), chunks=(64, 256), dtype="i2", compressors=None,
                   dimension_names=("y", "x"))[...] = _dem()
    g.create_array("t", shape=(20, 64, 64), chunks=(1, 64, 64), dtype="f4", compressors=None,
                   dimension_names=("depth", "y", "x"))[...] = _levels()
    return str(tmp_path / "s.zarr")


def test_a_menu_plan_records_each_chain_and_recompress_applies_it_without_trials(store, tmp_path, monkeypatch):
    plan = make_plan(analyze(store, menu="default"))
    assert plan["dem"].chain == [{"name": "numcodecs.pcodec", "configuration": {"level": 8}}]
    assert plan["dem"].choice["candidate"] == "pcodec-8" and set(plan["dem"].choice["trials"]) >= {"classic", "pcodec-8"}
    assert not plan["dem"].masks.any()  # no conditional codec in that chain: no masks
    plan.save(tmp_path / "p.zarr")
    loaded = Plan.load(tmp_path / "p.zarr")
    assert loaded["dem"].chain == plan["dem"].chain and loaded["t"].choice == plan["t"].choice

    import zopt.planning.optimizer

    def no_trials(*args, **kwargs):
        raise AssertionError("recompress --plan ran a trial encoding")

    monkeypatch.setattr(zopt.planning.optimizer, "trial_encode", no_trials)
    dst = tmp_path / "o.zarr"
    recompress(store, dst, plan=tmp_path / "p.zarr")
    for name, values in (("dem", _dem()), ("t", _levels())):
        codecs = json.loads((dst / name / "zarr.json").read_text())["codecs"]
        inner = codecs[0]["configuration"]["codecs"] if codecs[0]["name"] == "sharding_indexed" else codecs
        assert [c["name"] for c in inner] == [c["name"] for c in plan[name].chain]
        np.testing.assert_array_equal(zarr.open_array(dst, path=name)[...], values)


def test_a_menu_plan_of_a_conditional_chain_keeps_its_masks_for_that_chain(store, tmp_path):
    analyses = analyze(store, menu="shuffle-zstd-19,zstd-19")
    assert json.loads(analyses["t"].attrs["codecs"])[1]["configuration"]["level"] == 19  # masks of the chosen chain
    plan = make_plan(analyses)
    assert plan["t"].chain[1]["name"] == "conditional" and plan["t"].masks.any()
    plan.save(tmp_path / "p.zarr")
    recompress(store, tmp_path / "o.zarr", plan=tmp_path / "p.zarr")
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "o.zarr", path="t")[...], _levels())


def test_plan_show_prints_the_chain_and_draws_a_20_level_grid_as_one_strip(store, tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    runner = CliRunner()
    res = runner.invoke(main, ["plan", "create", store, "t", "-o", str(tmp_path / "p.zarr"), "--menu", "classic",
                               "--no-progress"])
    assert res.exit_code == 0, res.output
    figures = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    res = runner.invoke(main, ["plan", "show", str(tmp_path / "p.zarr"), "--png", str(tmp_path / "p.png")])
    assert res.exit_code == 0, res.output
    assert "chain" in res.output and "classic" in res.output
    (fig,) = figures
    shapes = [ax.get_images()[0].get_array().shape for ax in fig.axes if ax.get_images()]
    assert shapes == [(1, 20)]  # one strip of the 20 levels, not 4 slices of one cell each
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    top = fig._suptitle.get_window_extent(renderer)
    assert all(ax.title.get_window_extent(renderer).y1 <= top.y0 for ax in fig.axes if ax.get_title())
    assert any("chain: classic" in ax.get_title() for ax in fig.axes)


def test_analysis_menu_options_refuse_what_they_cannot_honour(store, tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["analyze", store, "--budget", "2", "--no-progress"])
    assert res.exit_code == 2 and "give --menu too" in res.output
    res = runner.invoke(main, ["analyze", store, "--menu", "default", "--codecs", "[]", "--no-progress"])
    assert res.exit_code == 2 and "not both" in res.output
    with pytest.raises(ValueError, match=r"budget: -1 is not allowed"):
        analyze(store, menu="default", budget=-1)


def test_the_figure_title_stays_clear_of_the_panel_titles_on_a_sliced_3d_grid(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from zopt.cli.plot import GridPanel, plot_grids

    figures = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    masks = np.arange(4 * 3 * 3).reshape(4, 3, 3) % 4
    panel = GridPanel("t (4×30×30, float32)", masks, np.ones((4, 3, 3)), ["shuffle", "zstd"], ("z", "y", "x"),
                      (1, 10, 10), chain="classic")
    plot_grids([panel], "zopt plan: policy compress_if_smaller", tmp_path / "g.png")
    (fig,) = figures
    assert len([ax for ax in fig.axes if ax.get_images()]) == 8  # 4 slices × (masks, ratios)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    top = fig._suptitle.get_window_extent(renderer)
    assert all(ax.title.get_window_extent(renderer).y1 <= top.y0 for ax in fig.axes if ax.get_title())


def test_a_plan_that_chose_a_chain_without_masks_is_refused_where_masks_would_be_written(store, tmp_path):
    """Its masks are all 0: applied to a conditional chain they would store every chunk raw."""
    from zopt.planning.plan import PlanMismatchError

    plan = make_plan(analyze(store, ["dem"], menu="default"))
    assert plan["dem"].choice["candidate"] == "pcodec-8"
    plan.save(tmp_path / "p.zarr")
    with pytest.raises(PlanMismatchError, match=r"chose the chain pcodec-8 for 'dem'.*--menu classic"):
        recompress(store, tmp_path / "o.zarr", plan=tmp_path / "p.zarr", variables=["dem"],
                   codecs='[{"name": "bytes"}, {"name": "conditional", "configuration": {"codecs": '
                          '[{"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 3}}]}}]')
    recompress(store, tmp_path / "fast.zarr", variables=["dem"], decision="never")  # a store written fast: masks 0
    with pytest.raises(PlanMismatchError, match="chose the chain pcodec-8"):
        recompress_in_place(tmp_path / "fast.zarr", plan=tmp_path / "p.zarr")


def test_xarray_encoding_with_a_menu_chooses_per_variable_and_xarray_reads_it_back(tmp_path):
    import xarray as xr

    import zopt.xarray as zx

    noise = np.random.default_rng(0).integers(-(2**15), 2**15, (256, 256), dtype=np.int16)
    ds = xr.Dataset({"dem": (("y", "x"), _dem()), "noise": (("y", "x"), noise)})
    enc = zx.encoding(ds, chunks={"y": 64}, menu="default")
    assert enc["dem"]["serializer"].to_dict() == {"name": "numcodecs.pcodec", "configuration": {"level": 8}}
    assert enc["dem"]["compressors"] is None
    assert enc["noise"]["compressors"][0].to_dict()["name"] == "numcodecs.shuffle"  # nothing pays for time on noise
    zopt_enc = zx.encoding(ds, chunks={"y": 64}, menu="default", readers="zopt")
    assert zopt_enc["noise"]["compressors"][0].to_dict()["name"] == "conditional"  # zopt's reference: classic
    ds.to_zarr(tmp_path / "o.zarr", zarr_format=3, encoding=enc, consolidated=False)
    xr.testing.assert_identical(xr.open_zarr(tmp_path / "o.zarr", consolidated=False).load(), ds)
    narrowed = zx.encoding(ds, chunks={"y": 64}, menu="default", readers="tensorstore")["dem"]
    assert narrowed["serializer"].to_dict()["name"] == "bytes" and narrowed["compressors"][0].to_dict()["name"] == "blosc"
    with pytest.raises(ValueError, match="menu: preset 'fast' names a chain; give menu/budget, or that preset"):
        zx.encoding(ds, menu="default", preset="fast")
