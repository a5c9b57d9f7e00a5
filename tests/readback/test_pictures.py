"""Chunk-grid pictures: ``zopt info --png`` (masks and ratios read from a store) and
``zopt plan show --png`` (1-D and N-D plans)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from zopt import ConditionalCodec, ShuffleCodec
from zopt.cli.commands import main
from zopt.readback.info import chunk_grids, store_info

PNG = b"\x89PNG\r\n\x1a\n"


def _store(tmp_path, sharded: bool, name: str = "s.zarr"):
    """A 2-D array whose chunks are smooth (mask 11), random (00) or fill (not stored)."""
    from zarr.codecs import ZstdCodec

    rng = np.random.default_rng(0)
    a = np.tile(np.linspace(0, 1, 64, dtype="f4"), (64, 1))
    a[:16, 16:32] = rng.integers(0, 2**32, (16, 16), dtype=np.uint32).view("f4")  # random bytes
    a[16:32, :16] = 0  # the fill value
    codec = ConditionalCodec(codecs=[ShuffleCodec(), ZstdCodec(level=3)], decision="compress_if_smaller")
    z = zarr.create_array(tmp_path / name, name="v", shape=a.shape, dtype="f4", chunks=(16, 16),
                          shards=(32, 64) if sharded else None, compressors=[codec], fill_value=0,
                          dimension_names=("y", "x"), attributes={"units": "K"})
    z[:] = a
    return z


def test_chunk_grids_read_masks_and_ratios_of_every_chunk(tmp_path):
    for sharded in (True, False):
        store = tmp_path / f"{sharded}.zarr"
        z = _store(tmp_path, sharded, store.name)
        masks, ratios = chunk_grids(store, z)
        assert masks.shape == ratios.shape == (4, 4)
        assert masks[1, 0] == -1 and np.isnan(ratios[1, 0])  # fill chunk: not stored
        assert masks[0, 1] in (0, 0b10) and masks[2, 2] == 0b11
        assert ratios[2, 2] > 4 and ratios[0, 1] < 1.1
        stored = collections.Counter(int(m) for m in masks.ravel() if m >= 0)
        assert stored == store_info(store, ["v"])[0].masks  # the same headers as zopt info


def test_info_png_and_1d_plan_png(tmp_path):
    _store(tmp_path, True)
    runner = CliRunner()
    res = runner.invoke(main, ["info", str(tmp_path / "s.zarr"), "--png", str(tmp_path / "i.png")])
    assert res.exit_code == 0, res.output
    assert f"wrote {tmp_path / 'i.png'}" in res.output.replace("\n", "")
    assert (tmp_path / "i.png").read_bytes()[:8] == PNG and (tmp_path / "i.png").stat().st_size > 10_000
    # a 1-D array: mask strip and ratio bars
    a = np.repeat(np.arange(40, dtype="f4"), 48)
    a[480:960] = 0
    zarr.create_array(tmp_path / "one.zarr", name="t", shape=a.shape, dtype="f4", chunks=(48,), compressors=None,
                      fill_value=0, dimension_names=("time",))[:] = a
    res = runner.invoke(main, ["plan", str(tmp_path / "one.zarr"), "--policy", "smallest", "-o",
                               str(tmp_path / "p.zarr"), "--no-progress"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["plan", "show", str(tmp_path / "p.zarr"), "--png", str(tmp_path / "p.png")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG and (tmp_path / "p.png").stat().st_size > 10_000
    res = runner.invoke(main, ["info", str(tmp_path / "one.zarr"), "nope", "--png", str(tmp_path / "n.png")])
    assert res.exit_code == 1 and "nope" in res.output and not (tmp_path / "n.png").exists()


def _figures(monkeypatch) -> list:
    """The figures the next pictures draw (kept open: plt.close is replaced)."""
    import matplotlib.pyplot as plt

    figures: list = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    return figures


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")) if t.get_text()]


def _assert_no_label_clipped(fig) -> None:
    """Every title, axis label, tick label and caption lies inside the figure, and no axis label or
    title runs into another panel."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    panels = [ax for ax in fig.axes if ax.get_images() or ax.patches]
    for ax in fig.axes:
        ticks = []
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for locs, labels in ((axis.get_majorticklocs(), axis.get_majorticklabels()),
                                 (axis.get_minorticklocs(), axis.get_minorticklabels())):
                ticks += [t for loc, t in zip(locs, labels, strict=False) if lo <= loc <= hi]  # the drawn ones
        labels = [ax.xaxis.label, ax.yaxis.label, ax.title, *ticks]
        for text in labels:
            if not text.get_text() or not text.get_visible():
                continue
            box = text.get_window_extent(renderer)
            assert page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1 and page.y0 - 1 <= box.y0 and box.y1 <= page.y1 + 1, \
                f"{text.get_text()!r} outside the figure"
            if text in (ax.xaxis.label, ax.yaxis.label, ax.title):
                for other in panels:
                    if other is not ax:
                        assert not box.overlaps(other.get_window_extent(renderer)), f"{text.get_text()!r} over another panel"
    for text in fig.texts:
        box = text.get_window_extent(renderer)
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0, f"caption {text.get_text()[:40]!r} clipped"


def _climatology(path):
    """A Zarr store as xarray writes a small climatology: tos (time, lat, lon) over 3 × 2 × 3 chunks
    with land (NaN) rows, its coordinates (one chunk each) and a second variable, sst_anom."""
    import xarray as xr

    rng = np.random.default_rng(3)
    tos = np.round(20 + rng.standard_normal((6, 40, 60)), 1).astype("f4")
    tos[:, :6] = np.nan  # Antarctica
    ds = xr.Dataset({"tos": (("time", "lat", "lon"), tos), "sst_anom": (("time", "lat", "lon"), tos - 20)},
                    coords={"time": np.arange(6.0), "lat": np.linspace(-90, 90, 40), "lon": np.linspace(0, 354, 60)})
    enc = {v: {"chunks": (2, 20, 20)} for v in ("tos", "sst_anom")}
    ds.to_zarr(path, zarr_format=3, consolidated=False, encoding=enc)
    return path


def test_plan_picture_orders_data_variables_by_name_names_dimensions_and_lists_one_chunk_arrays(tmp_path, monkeypatch):
    src = _climatology(tmp_path / "c.zarr")
    runner = CliRunner()
    res = runner.invoke(main, ["plan", str(src), "-o", str(tmp_path / "p.zarr"), "--no-progress"])
    assert res.exit_code == 0, res.output
    figures = _figures(monkeypatch)
    res = runner.invoke(main, ["plan", "show", str(tmp_path / "p.zarr"), "--png", str(tmp_path / "p.png")])
    assert res.exit_code == 0, res.output
    (fig,) = figures
    titled = [ax for ax in fig.axes if ax.get_images() or ax.patches]
    names = [ax.get_title().split(" (")[0] for ax in titled]
    # 3 time slices of a 3 × 2 × 3 grid per variable, data variables by name; no coordinate panel
    assert names == ["sst_anom"] * 6 + ["tos"] * 6
    assert "at time chunk 0" in titled[0].get_title() and "at time chunk 2" in titled[-1].get_title()
    assert {ax.get_xlabel() for ax in titled} == {"lon: chunk index (20 elements each)"}
    assert {ax.get_ylabel() for ax in titled} == {"lat\nchunk index (20 elements each)"}
    (caption,) = [t for t in fig.texts if t.get_text().startswith("One chunk")]
    flat = " ".join(caption.get_text().split())
    assert flat.startswith("One chunk each, not drawn: lat (mask") and "lon (mask" in flat and "time (mask" in flat
    # ratios on a log colour scale, the same for every slice of an array
    from matplotlib.colors import LogNorm

    ratio_images = [ax.get_images()[0] for ax in titled if "ratio" in ax.get_title()]
    assert len(ratio_images) == 6 and all(isinstance(im.norm, LogNorm) for im in ratio_images)
    assert len({(im.norm.vmin, im.norm.vmax) for im in ratio_images[3:]}) == 1
    assert not any("not stored" in t for t in _texts(fig))
    assert any("grey: chunk equal to the fill value, not written" in t for t in _texts(fig))
    _assert_no_label_clipped(fig)


def test_a_store_without_masks_is_drawn_as_one_chain_and_written_chunks(tmp_path, monkeypatch):
    pytest.importorskip("pcodec")
    a = np.repeat(np.linspace(0, 1, 48, dtype="f4")[None], 40, axis=0) * np.arange(40, dtype="f4")[:, None]
    a[8:16] = 0  # equal to the fill value: not written
    z = zarr.create_array(tmp_path / "s.zarr", name="v", shape=a.shape, dtype="f4", chunks=(8, 48), fill_value=0,
                          serializer={"name": "numcodecs.pcodec", "configuration": {"level": 8}}, compressors=None,
                          dimension_names=("time", "x"))
    z[:] = a
    figures = _figures(monkeypatch)
    res = CliRunner().invoke(main, ["info", str(tmp_path / "s.zarr"), "--png", str(tmp_path / "i.png")])
    assert res.exit_code == 0, res.output
    (fig,) = figures
    mask_ax, ratio_ax = (ax for ax in fig.axes if ax.get_images() or ax.patches)
    assert "one chain for the whole array: pcodec 8" in mask_ax.get_title()
    legend = [t.get_text() for t in mask_ax.get_legend().get_texts()]
    assert legend == ["chunk written", "chunk equal to the\nfill value: not written"]
    written = mask_ax.get_images()[0].get_array()
    assert written.tolist() == [[1, 0, 1, 1, 1]]  # chunk 1 is the fill value
    # a 1-D grid: ratio bars on a log axis with dimension names
    assert ratio_ax.get_yscale() == "log" and len(ratio_ax.patches) == 4
    assert ratio_ax.get_xlabel() == "time: chunk index (8 elements each)"
    assert not any("not stored" in t for t in _texts(fig))
    _assert_no_label_clipped(fig)


def test_chain_words():
    from zopt.cli.plot import chain_words

    assert chain_words([{"name": "bytes"}, {"name": "numcodecs.pcodec", "configuration": {"level": 8}}]) == "pcodec 8"
    assert chain_words([{"name": "sharding_indexed", "configuration": {"codecs": [
        {"name": "bytes"}, {"name": "numcodecs.blosc", "configuration": {"cname": "zstd", "clevel": 5, "shuffle": 2}}]}}]) \
        == "blosc zstd 5 bitshuffle"
    assert chain_words([{"name": "bytes"}]) == "bytes (raw)"
