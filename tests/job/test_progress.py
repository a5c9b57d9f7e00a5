"""Progress as a user meets it: events from the first step of planning, a write bar with MB/s and the
time left, nothing with ``progress=False``, a wrong ``progress`` refused by name, one bar per analysis."""

from __future__ import annotations

import io

import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner
from rich.console import Console

import zopt
import zopt.xarray
from zopt.cli.commands import main
from zopt.job.progress import ProgressEvent, RichDisplay, RichProgress


@pytest.fixture
def store(tmp_path):
    g = zarr.open_group(tmp_path / "src.zarr", mode="w")
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        g.create_array(name, shape=(64, 90), chunks=(16, 30), dtype="f4", dimension_names=("y", "x"))[:] = (
            np.round(rng.normal(size=(64, 90)), 2).astype("f4"))
    return tmp_path / "src.zarr"


SHAPES = {"chunks": "y=16,x=30", "shards": "y=32,x=90"}


def test_planning_events_come_first_with_counts_then_writes_with_bytes(store, tmp_path):
    events: list[ProgressEvent] = []
    report = zopt.recompress(store, tmp_path / "o.zarr", progress=events.append, **SHAPES)
    first_write = next(i for i, e in enumerate(events) if e.phase == "writing")
    planning = events[:first_write]
    assert planning[0].phase == "planning" and planning[0].done == 0  # sent before the source is read
    assert all(e.phase == "planning" for e in planning)
    trialled = [(e.done, e.total) for e in planning if e.what == "arrays trialled"]
    assert trialled[0] == (0, 2) and trialled[-1] == (2, 2)  # the menu's trials, one array at a time
    assert ("arrays described", 2, 2) in [(e.what, e.done, e.total) for e in planning]
    writes = [e for e in events[first_write:] if e.phase == "writing"]
    assert [(e.done, e.total) for e in writes] == [(n, 4) for n in range(5)]  # 2 arrays x 2 shards
    assert writes[-1].nbytes == writes[-1].nbytes_total == report.logical_bytes
    assert writes[2].nbytes == report.logical_bytes // 2


def test_an_event_gives_mb_per_s_and_the_time_left():
    e = ProgressEvent("writing", "shards", 3, 12, nbytes=30_000_000, nbytes_total=120_000_000, elapsed=2.0)
    assert e.mb_per_s == pytest.approx(15.0) and e.eta == pytest.approx(6.0)
    assert ProgressEvent("planning", "arrays trialled", 0, None).eta is None


def test_the_display_shows_mb_per_s_and_eta():
    out = io.StringIO()
    display = RichDisplay(Console(file=out, width=120, force_terminal=False))
    display(ProgressEvent("planning", "arrays trialled", 2, 2, elapsed=0.5))
    display(ProgressEvent("writing", "shards", 3, 12, nbytes=30_000_000, nbytes_total=120_000_000, elapsed=2.0))
    display.close()
    text = out.getvalue()
    assert "planning: arrays trialled" in text and "2/2" in text
    assert "writing: shards" in text and "3/12" in text and "15.0 MB/s" in text and "ETA 0:06" in text


@pytest.fixture
def terminal(monkeypatch):
    """stderr taken for a terminal, as it is where a user runs zopt (the default then shows the display)."""
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))


def test_progress_is_shown_by_default_on_a_terminal_and_false_shows_nothing(store, tmp_path, terminal, capsys):
    zopt.recompress(store, tmp_path / "shown.zarr", **SHAPES)
    err = capsys.readouterr().err
    assert "planning" in err and "writing: shards" in err
    zopt.recompress(store, tmp_path / "quiet.zarr", progress=False, **SHAPES)
    quiet = capsys.readouterr()
    assert quiet.err == "" and quiet.out == ""


def test_xarray_recompress_of_a_dataset_reports_its_writes(tmp_path, terminal, capsys):
    ds = xr.Dataset({"t": (("y", "x"), np.arange(64 * 90, dtype="f4").reshape(64, 90))})
    events: list[ProgressEvent] = []
    zopt.xarray.recompress(ds, tmp_path / "d.zarr", progress=events.append, **SHAPES)
    writes = [(e.done, e.total) for e in events if e.phase == "writing"]
    assert writes[0][0] == 0 and writes[-1][0] == writes[-1][1] > 0
    zopt.xarray.recompress(ds, tmp_path / "q.zarr", progress=False, **SHAPES)
    assert capsys.readouterr().err == ""
    zopt.xarray.recompress(ds, tmp_path / "s.zarr", **SHAPES)
    assert "writing: tasks" in capsys.readouterr().err


@pytest.mark.parametrize("wrong", ["yes", 1, RichProgress])
def test_a_wrong_progress_is_refused_naming_it(store, tmp_path, wrong):
    """A string, a number, or a class (the undocumented context-manager factory of earlier versions)."""
    with pytest.raises(ValueError, match="progress"):
        zopt.recompress(store, tmp_path / "o.zarr", progress=wrong)
    assert not (tmp_path / "o.zarr").exists()


def test_analyze_shows_one_bar_for_every_array(store):
    bars = []

    class Bar:
        def __init__(self, total):
            self.total, self.done = total, 0
            bars.append(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    analyses = zopt.analyze(store, progress=Bar)
    assert sorted(analyses) == ["a", "b"] and len(bars) == 1


def test_the_cli_bars_planning_writing_and_vs_default(store, tmp_path):
    res = CliRunner().invoke(main, ["recompress", str(store), str(tmp_path / "o.zarr"), "--vs-default",
                                    "--chunks", SHAPES["chunks"], "--shards", SHAPES["shards"]])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "planning: arrays trialled" in text and "2/2" in text
    assert "writing: shards" in text and "MB/s" in text
    assert "zarr default: shards" in text  # the --vs-default pass has its own bar


def test_recompress_in_place_takes_the_same_progress(store, tmp_path):
    zopt.recompress(store, tmp_path / "w.zarr", decision="never", layout="fixed-slot", progress=False, **SHAPES)
    events: list[ProgressEvent] = []
    zopt.recompress_in_place(tmp_path / "w.zarr", progress=events.append)
    assert [(e.done, e.total) for e in events if e.phase == "writing"][-1] == (4, 4)
    with pytest.raises(ValueError, match="progress"):
        zopt.recompress_in_place(tmp_path / "w.zarr", progress="bar")
