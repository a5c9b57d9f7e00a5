"""The CLI's tables fit the width (COLUMNS, the terminal's, or 100 columns with neither): no header
or word cut to "…", no line wider than the width; ``--wide`` prints every column (issue 36)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from zopt.cli import tables
from zopt.cli.commands import main

#: a unit that follows a number ("889.0 KiB", "0.13 s", "66 %")
UNIT = re.compile(r"^(B|KiB|MiB|GiB|TiB|s|MB/s|%)(\W|$)")


def split_numbers(output: str) -> list[tuple[str, str]]:
    """Pairs of lines of ``output`` where a number ends one line and its unit starts the next, in
    the same table cell (table lines split at the column rules) or in running text."""
    lines = output.splitlines()
    found = []
    for a, b in zip(lines, lines[1:], strict=False):
        ca, cb = re.split("[│┃]", a), re.split("[│┃]", b)
        if len(ca) != len(cb):
            ca, cb = [a], [b]
        found += [(a, b) for x, y in zip(ca, cb, strict=True) if re.search(r"\d$", x.rstrip()) and UNIT.match(y.strip())]
    return found


def continued_rows(output: str) -> list[str]:
    """Table body lines that continue the row above (first cell blank): a row wrapped onto more lines."""
    return [line for line in output.splitlines() if line.startswith("│") and not line[1:].split("│")[0].strip()]


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
                 ["recompress", str(tmp / "src.zarr"), str(tmp / "lossy.zarr"), "--no-progress", "--lossy",
                  "surface_temperature=abs:0.01"],
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
        "verify lossy": ["verify", src, str(tmp / "lossy.zarr"), "--no-progress"],
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
        assert not split_numbers(res.output), (name, res.output)
        if name not in ("presets", "plan", "plan show", "lossy-plan"):  # prose or mask histograms may wrap at spaces
            assert not continued_rows(res.output), (name, res.output)


def test_wide_prints_every_column_and_a_narrow_table_says_what_it_left_out(stores, monkeypatch):
    monkeypatch.setattr(tables, "_terminal", lambda: False)
    runner = CliRunner()
    dst = str(stores / "dst.zarr")
    narrow = runner.invoke(main, ["info", dst], env={"COLUMNS": "80"})
    wide = runner.invoke(main, ["info", dst, "--wide"], env={"COLUMNS": "80"})
    assert narrow.exit_code == wide.exit_code == 0
    flat = " ".join(narrow.output.split())
    # slot and slot fill say nothing for packed shards ("—" in every row): left out without a word
    assert "left out to fit 80 columns: allocated" in flat and "(--wide shows every column)" in flat
    assert "slot fill" not in narrow.output
    header = next(line for line in wide.output.splitlines() if "array" in line)
    for column in ("array", "shape", "dtype", "layout", "shards", "chunks", "slot", "slot fill", "logical", "apparent",
                   "allocated", "ratio", "masks"):
        assert f" {column} " in header
    assert max(len(line) for line in wide.output.splitlines()) > 80 and "left out" not in wide.output
    # the width comes back for the next command
    assert max(len(line) for line in runner.invoke(main, ["info", dst], env={"COLUMNS": "80"}).output.splitlines()) <= 80


def test_a_narrow_table_keeps_numbers_with_their_units_and_words_whole(monkeypatch):
    """At 80 columns rich alone wraps "889.0 KiB" into "889.0" / "KiB" and "bit for bit" onto three
    lines; fitted keeps cells that are not prose whole, leaves out the all-"—" column, and wraps
    title and caption at spaces between words, never after a number."""
    from rich.console import Console
    from rich.table import Table

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(tables, "_terminal", lambda: False)
    tables.set_width()
    table = Table(title="zopt recompress → out.zarr  (12.34 s, 0.9 MB/s; zarr default: 0.13 s, 13.6 MB/s) and more words")
    for col in ("array", "bound", "chunks differing", "stored", "zarr default", "masks", "notes about the array"):
        table.add_column(col)
    for name in ("air_temperature", "forecast_reference_time", "time_bnds"):
        table.add_row(name, "bit for bit", "0/20", "889.0 KiB", "1.3 MiB", "—", "a long note " * 3)
    table.caption = "sizes: " + ", ".join(f"{i}.5 KiB" for i in range(30))
    out = Console(width=80, record=True)
    out.print(tables.fitted(table, drop=("zarr default",), wrap=("notes about the array",)))
    text = out.export_text()
    assert max(map(len, text.splitlines())) <= 80, text
    assert not split_numbers(text), text
    assert "masks" not in text  # every cell "—": left out
    for whole in ("bit for bit", "forecast_reference_time", "889.0 KiB", "0.13 s"):
        assert whole in text, (whole, text)
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert all("bit for bit" in line for line in rows if line[1:].split("│")[0].strip()), text


def test_presets_read_in_80_columns_and_the_default_row_says_what_the_default_writes(monkeypatch):
    """``zopt presets`` wrapped each row to ~15 lines beside the raw chain JSON, and its default row
    showed a conditional chain the default does not write: now a few lines a row, the default's
    row naming the menu candidates it chooses from (what zopt.planning.candidates gives it), and
    ``--json`` the full chains."""
    import json

    from zopt.planning.candidates import CANDIDATES, MENUS
    from zopt.planning.presets import PRESETS

    monkeypatch.setattr(tables, "_terminal", lambda: False)
    res = CliRunner().invoke(main, ["presets"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(map(len, lines)) <= 80 and not split_numbers(res.output), res.output
    starts = [i for i, line in enumerate(lines) if line.startswith("│") and line[1:].split("│")[0].strip()]
    assert [lines[i][1:].split("│")[0].strip() for i in starts] == list(PRESETS)
    ends = [*starts[1:], next(i for i, line in enumerate(lines) if line.startswith("└"))]
    assert max(b - a for a, b in zip(starts, ends, strict=True)) <= 6, res.output
    default = " ".join(" ".join(line.split("│")[-2] for line in lines[starts[0]:starts[1]]).split())
    portable = [n for n in MENUS["default"] if "zarr-python" in CANDIDATES[n].readers]
    assert "conditional" not in default and all(n in default for n in portable), default
    chains = json.loads(CliRunner().invoke(main, ["presets", "--json"]).output)
    assert [p["name"] for p in chains] == list(PRESETS) and all(p["codecs"] for p in chains)
