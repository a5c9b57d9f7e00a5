"""The CLI's tables fit the width (COLUMNS, the terminal's, or 100 columns with neither): no header
or word cut to "…", no line wider than the width; ``--wide`` prints every column (issue 36)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from zopt.cli import tables
from zopt.cli.commands import main


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A source with a data variable and coordinates, its recompressed copy and a plan of it."""
    tmp = tmp_path_factory.mktemp("tables")
    rng = np.random.default_rng(1)
    ds = xr.Dataset({"surface_temperature": (("time", "latitude", "longitude"),
                                             np.round(rng.standard_normal((4, 30, 40)), 2).astype("f4"))},
                    coords={"time": np.arange(4.0), "latitude": np.linspace(-90, 90, 30), "longitude": np.linspace(0, 351, 40)})
    ds.to_zarr(tmp / "src.zarr", zarr_format=3, consolidated=False)
    runner = CliRunner()
    for args in (["recompress", str(tmp / "src.zarr"), str(tmp / "dst.zarr"), "--no-progress"],
                 ["plan", str(tmp / "src.zarr"), "-o", str(tmp / "plan.zarr"), "--no-progress"]):
        res = runner.invoke(main, args)
        assert res.exit_code == 0, res.output
    return tmp


def _commands(tmp):
    src, dst = str(tmp / "src.zarr"), str(tmp / "dst.zarr")
    return {
        "recompress": ["recompress", src, str(tmp / "out.zarr"), "--overwrite", "--no-progress", "--vs-default"],
        "recompress --dry-run": ["recompress", src, str(tmp / "dry.zarr"), "--dry-run", "--no-progress"],
        "presets": ["presets"],
        "info": ["info", dst],
        "compact": ["compact", dst, "--no-progress"],
        "verify": ["verify", src, dst, "--no-progress"],
        "analyze": ["analyze", src, "--no-progress"],
        "plan": ["plan", src, "-o", str(tmp / "p2.zarr"), "--overwrite", "--no-progress"],
        "plan show": ["plan", "show", str(tmp / "plan.zarr")],
        "lossy-plan": ["lossy-plan", src, "-o", str(tmp / "lp.zarr"), "--info", "surface_temperature=0.99"],
    }


@pytest.mark.parametrize("columns", ["80", "100", None])
def test_every_table_fits_the_width_without_cutting_a_header(stores, columns, monkeypatch):
    monkeypatch.setattr(tables, "_terminal", lambda: False)  # piped, as under CI, even run from a terminal
    width = int(columns or tables.DEFAULT_WIDTH)
    runner = CliRunner()
    for name, args in _commands(stores).items():
        res = runner.invoke(main, args, env={"COLUMNS": columns})
        assert res.exit_code == 0, (name, res.output)
        table = [line for line in res.output.splitlines() if line[:1] in "┏┃┡│└"]
        assert table, (name, res.output)
        assert "…" not in res.output, (name, res.output)
        assert max(len(line) for line in res.output.splitlines()) <= width, (name, res.output)


def test_wide_prints_every_column_and_a_narrow_table_says_what_it_left_out(stores, monkeypatch):
    monkeypatch.setattr(tables, "_terminal", lambda: False)
    runner = CliRunner()
    dst = str(stores / "dst.zarr")
    narrow = runner.invoke(main, ["info", dst], env={"COLUMNS": "80"})
    wide = runner.invoke(main, ["info", dst, "--wide"], env={"COLUMNS": "80"})
    assert narrow.exit_code == wide.exit_code == 0
    flat = " ".join(narrow.output.split())
    assert "left out to fit 80 columns: slot fill, slot, allocated" in flat and "(--wide shows every column)" in flat
    header = next(line for line in wide.output.splitlines() if "array" in line)
    for column in ("array", "shape", "dtype", "layout", "shards", "chunks", "slot", "slot fill", "logical", "apparent",
                   "allocated", "ratio", "masks"):
        assert f" {column} " in header
    assert max(len(line) for line in wide.output.splitlines()) > 80 and "left out" not in wide.output
    # the width comes back for the next command
    assert max(len(line) for line in runner.invoke(main, ["info", dst], env={"COLUMNS": "80"}).output.splitlines()) <= 80
