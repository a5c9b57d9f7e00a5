"""Ordinary stores do not crash analyze/plan/info, and a failing command prints one line
(issue 15, "crashes on ordinary stores" and "messages"). Stores made from iris-sample-data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner

from zopt.cli.commands import main

iris_sample_data = pytest.importorskip("iris_sample_data")
NEMO = os.path.join(iris_sample_data.path, "NEMO", "nemo_1m_20150101-20150201_grid-T.nc")


@pytest.fixture(scope="module")
def xarray_stores(tmp_path_factory):
    """NEMO written by xarray as Zarr v2 and v3, with an integer coordinate (v2: fill_value null),
    the one-element time_counter, and a string coordinate."""
    root = tmp_path_factory.mktemp("ordinary")
    ds = xr.open_dataset(NEMO).assign_coords(k=("k", np.arange(5)), label=("label", np.array(["a", "bb", "ccc"])))
    out = {}
    for fmt in (2, 3):
        out[fmt] = root / f"v{fmt}.zarr"
        with warnings.catch_warnings():  # zarr: strings have no v3 specification yet
            warnings.simplefilter("ignore")
            ds.to_zarr(out[fmt], zarr_format=fmt, consolidated=fmt == 2)
    return out


def _zopt(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zopt", *args], capture_output=True, text=True, cwd=cwd, check=False)


@pytest.mark.parametrize("fmt", [2, 3])
def test_analyze_and_plan_on_stores_xarray_writes(tmp_path, xarray_stores, fmt):
    store = str(xarray_stores[fmt])
    assert zarr.open_array(store, path="k").fill_value is None or fmt == 3
    result = CliRunner().invoke(main, ["analyze", store, "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "skipped array 'label'" in result.output and "time_counter" in result.output and "k " in result.output
    plan = tmp_path / "p.zarr"
    result = CliRunner().invoke(main, ["plan", store, "-o", str(plan), "--no-progress"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["plan", store, "-o", str(plan), "--no-progress"])
    assert result.exit_code != 0 and "--overwrite" in result.output  # like recompress
    assert CliRunner().invoke(main, ["plan", store, "-o", str(plan), "--overwrite", "--no-progress"]).exit_code == 0


def test_analyze_plan_and_recompress_with_the_plan_on_a_netcdf_file(tmp_path):
    plan = tmp_path / "p.zarr"
    result = CliRunner().invoke(main, ["plan", NEMO, "tos", "-o", str(plan), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "raw Zarr copy" in result.output
    result = CliRunner().invoke(main, ["recompress", NEMO, str(tmp_path / "o.zarr"), "--variable", "tos", "--plan",
                                       str(plan), "--no-progress"])
    assert result.exit_code == 0, result.output  # the plan's chunking is the one recompress uses
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "o.zarr", path="tos")[...],
                                  xr.open_dataset(NEMO, decode_cf=False).tos.values)
    result = CliRunner().invoke(main, ["info", NEMO])
    assert result.exit_code != 0 and "not a Zarr store" in result.output


def test_a_corrupt_chunk_is_one_line(tmp_path):
    store = tmp_path / "a.zarr"
    assert _zopt("recompress", NEMO, str(store), "--variable", "tos", "--chunks", "y=30,x=36", "--shards", "y=30,x=36",
                 "--no-progress").returncode == 0
    chunk = store / "tos" / "c" / "0" / "5" / "5"
    data = bytearray(chunk.read_bytes())
    data[1:9] = b"\xff" * 8
    chunk.write_bytes(bytes(data))
    for args in (["analyze", str(store), "--no-progress"], ["recompress", str(store), str(tmp_path / "b.zarr"), "--no-progress"]):
        out = _zopt(*args)
        lines = (out.stdout + out.stderr).strip().splitlines()
        assert out.returncode != 0 and lines == [lines[0]], lines[:6]
        assert "tos/c/0/5/5" in lines[0]


@pytest.mark.parametrize("make,match", [
    (lambda p: (p.mkdir(), (p / "notes.txt").write_text("x")), "is not a Zarr store (no zarr.json"),
    (lambda p: p.write_text("not netcdf"), "neither a Zarr store nor a file xarray can read"),
])
def test_a_source_that_is_neither_zarr_nor_netcdf_is_one_line(tmp_path, make, match):
    src = tmp_path / "src"
    make(src)
    result = CliRunner().invoke(main, ["recompress", str(src), str(tmp_path / "o.zarr"), "--no-progress"])
    assert result.exit_code != 0 and match in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_truncated_raw_chunk_is_one_line(tmp_path):
    src = tmp_path / "raw.zarr"
    g = zarr.open_group(src, mode="w")
    g.create_array("tos", data=xr.open_dataset(NEMO, decode_cf=False).tos.values[0], chunks=(110, 120), compressors=None)
    chunk = src / "tos" / "c" / "1" / "1"
    chunk.write_bytes(chunk.read_bytes()[:100])
    result = CliRunner().invoke(main, ["recompress", str(src), str(tmp_path / "o.zarr"), "--no-progress"])
    assert result.exit_code != 0 and len(result.output.strip().splitlines()) == 1, result.output
    assert "tos" in result.output and not (tmp_path / "o.zarr").exists()


def test_a_dead_scheduler_is_one_line(tmp_path, monkeypatch):
    import zopt.compat.cluster

    monkeypatch.setattr(zopt.compat.cluster, "CONNECT_TIMEOUT", 1.0)
    result = CliRunner().invoke(main, ["recompress", NEMO, str(tmp_path / "o.zarr"), "--variable", "tos",
                                       "--scheduler", "tcp://127.0.0.1:9", "--no-progress"])
    assert result.exit_code != 0 and "no dask.distributed scheduler answered at tcp://127.0.0.1:9" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "o.zarr").exists()


def test_a_note_names_a_memory_store_by_its_url(tmp_path):
    result = CliRunner().invoke(main, ["recompress", NEMO, "memory://notes.zarr", "--variable", "tos",
                                       "--layout", "fixed-slot", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "memory://notes.zarr has none" in " ".join(result.output.split()) and "FsspecStore" not in result.output


@pytest.mark.parametrize("command", [["recompress", "{src}", "{dst}", "--no-progress"],
                                     ["recompress", "{src}", "--in-place", "--no-progress"],
                                     ["compact", "{src}", "--no-progress"], ["analyze", "{src}", "--no-progress"],
                                     ["plan", "{src}", "-o", "{dst}", "--no-progress"],
                                     ["verify", "{src}", "{src}", "--no-progress"],
                                     ["lossy-plan", "{src}", "-o", "{dst}", "--info", "a=0.99"]])
def test_an_unknown_scheduler_names_the_option_and_the_allowed_values(tmp_path, command):
    src = tmp_path / "s.zarr"
    zarr.create_array(src, name="a", shape=(8,), chunks=(4,), dtype="f4")[:] = np.arange(8)
    args = [a.format(src=src, dst=tmp_path / "o.zarr") for a in command]
    result = CliRunner().invoke(main, [*args, "--scheduler", "thread"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--scheduler': 'thread' is not one of 'threads'" in result.output
    assert "'processes', 'synchronous', or a dask.distributed address" in result.output
    assert not (tmp_path / "o.zarr").exists() and not (tmp_path / "o.zarr.zopt-partial").exists()


def test_the_api_refuses_an_unknown_scheduler_before_writing(tmp_path):
    from zopt import recompress

    src = tmp_path / "s.zarr"
    zarr.create_array(src, name="a", shape=(8,), chunks=(4,), dtype="f4")[:] = np.arange(8)
    with pytest.raises(ValueError, match=r"^scheduler: 'thread' is not one of 'threads' \(the default\), 'processes'"):
        recompress(src, tmp_path / "o.zarr", scheduler="thread")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]


@pytest.mark.parametrize("shards", [(50, 50), (100, 100)], ids=["unsharded", "sharded"])
def test_written_counts_stored_chunks_without_a_conditional(tmp_path, shards):
    """The report's "written" column counted only chunks a conditional codec recorded: 0 for an
    unsharded array with a plain chain. A chunk equal to the fill value is not stored."""
    from zopt import recompress

    src = tmp_path / "s.zarr"
    values = np.random.default_rng(0).random((100, 100)).astype("f4")
    values[:50, :50] = 0
    zarr.create_array(src, name="a", shape=values.shape, chunks=(50, 50), dtype="f4", fill_value=0)[:] = values
    plain = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 3}}]
    report = recompress(src, tmp_path / "o.zarr", codecs=plain, chunks=(50, 50), shards=shards)
    (a,) = report.arrays
    unsharded = shards == (50, 50)  # shards equal to the chunks: no sharding
    assert a.layout == ("unsharded" if unsharded else "compact")
    stored = [p for p in (tmp_path / "o.zarr" / "a" / "c").rglob("*") if p.is_file()]
    assert a.chunks == 4 and a.chunks_written == 3 == (len(stored) if unsharded else 3)
    result = CliRunner().invoke(main, ["recompress", str(src), str(tmp_path / "cli.zarr"), "--codecs", json.dumps(plain),
                                       "--chunks", "50,50", "--shards", ",".join(map(str, shards)), "--no-progress"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("│ a "))
    assert [c.strip() for c in row.split("│")][4:6] == ["4", "3"]  # chunks, written


def test_vs_default_shows_the_baseline_time(tmp_path, monkeypatch):
    import re
    import time

    import zopt.planning.baseline

    src = tmp_path / "s.zarr"
    zarr.create_array(src, name="a", shape=(64, 64), chunks=(32, 32), dtype="f4")[:] = np.arange(64 * 64).reshape(64, 64)
    real = zopt.planning.baseline.zarr_default_bytes

    def slow(*args, **kwargs):  # the baseline pass takes at least 0.3 s: the title must say so
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(zopt.planning.baseline, "zarr_default_bytes", slow)
    monkeypatch.setenv("COLUMNS", "250")
    result = CliRunner().invoke(main, ["recompress", str(src), str(tmp_path / "o.zarr"), "--vs-default", "--no-progress"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    found = re.search(r"\((\d+\.\d\d) s, [\d.]+ MB/s; zarr default: (\d+\.\d\d) s, ([\d.]+) MB/s\)", text)
    assert found, result.output
    assert 0.3 <= float(found[2]) < 30 and float(found[3]) == pytest.approx(64 * 64 * 4 / 1e6 / float(found[2]), abs=0.06)
    assert "zarr default's time: reading DST back" in text


def test_in_place_takes_grace_and_other_rewrites_refuse_it(tmp_path, monkeypatch):
    import zopt.job.in_place
    from zopt import recompress

    src = tmp_path / "s.zarr"
    zarr.create_array(src, name="a", shape=(64, 64), chunks=(32, 32), dtype="f4")[:] = np.arange(64 * 64).reshape(64, 64)
    store = tmp_path / "fast.zarr"
    recompress(src, store, chunks=(16, 16), shards=(32, 32), decision="never", layout="fixed-slot")
    seen = []
    real = zopt.job.in_place.shrink_after_grace
    monkeypatch.setattr(zopt.job.in_place, "shrink_after_grace",
                        lambda shards, tmp, grace, scheduler: seen.append(grace) or real(shards, tmp, 0, scheduler))
    result = CliRunner().invoke(main, ["recompress", str(store), "--in-place", "--grace", "0.25", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert seen == [0.25]
    result = CliRunner().invoke(main, ["recompress", str(src), str(tmp_path / "o.zarr"), "--grace", "1"])
    assert result.exit_code == 2 and "--grace applies to --in-place" in result.output
    result = CliRunner().invoke(main, ["recompress", str(store), "--in-place", "--grace", "-1"])
    assert result.exit_code == 2 and "--grace" in result.output and not (tmp_path / "o.zarr").exists()


A1B = os.path.join(iris_sample_data.path, "A1B_north_america.nc")


@pytest.mark.parametrize("args, flag, says", [
    (["--policy", "smalest"], "--policy", "'smalest' is not one of ['compress_if_smaller'"),
    (["--param", "gian=0.1"], "--param", "unknown parameters ['gian']"),
    (["--chunks", "time:12"], "--chunks", "'time:12' is not a size; use NAME=SIZE, e.g. time=12"),
    (["--sample", "2"], "--sample", "must be a fraction in (0, 1]"),
    (["--codecs", '[{"name": "zsdt"}]'], "--codecs", "unknown codec 'zsdt'"),
])
def test_plan_checks_every_option_before_reading_data(tmp_path, monkeypatch, args, flag, says):
    """``zopt plan STORE -o P --policy smalest`` (or ``--param gian=0.1``) ran the whole analysis,
    then refused: now every option is refused before a byte of data is read (the netCDF file's raw
    copy and the analysis would fail this test), in one line naming the flag."""
    import zopt.job.analyze as job

    def no_reading(*args, **kwargs):
        raise AssertionError("data read before the options were checked")

    monkeypatch.setattr(job, "_raw_view", no_reading)
    monkeypatch.setattr(job, "analyze_zarr", no_reading)
    result = CliRunner().invoke(main, ["plan", A1B, "-o", str(tmp_path / "p.zarr"), "--no-progress", *args])
    assert result.exit_code == 1 and not isinstance(result.exception, AssertionError), result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"Error: {flag}") and says in line, line
    assert not (tmp_path / "p.zarr").exists()


def test_plan_without_output_names_the_command_the_user_typed(tmp_path):
    """``zopt plan STORE`` without -o suggested ``zopt plan create --help``, a subcommand the user
    never typed; the usage and the hint say ``zopt plan``, whose help shows the plan's options."""
    result = CliRunner().invoke(main, ["plan", A1B], prog_name="zopt")
    assert result.exit_code == 2 and "Missing option '-o' / '--output'" in result.output
    assert "create" not in result.output and "Try 'zopt plan --help' for help." in result.output, result.output
    assert "Usage: zopt plan [OPTIONS] STORE [ARRAYS]..." in result.output
    shown = CliRunner().invoke(main, ["plan", "--help"], prog_name="zopt")
    assert shown.exit_code == 0 and "-o, --output" in shown.output and "--policy" in shown.output
    assert "show" in shown.output.split("Commands:")[1]
    # zopt plan create STORE still works, and its usage names it
    typed = CliRunner().invoke(main, ["plan", "create", A1B], prog_name="zopt")
    assert "Try 'zopt plan create --help' for help." in typed.output


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_file_destination_is_refused_as_a_file_the_first_time(tmp_path, overwrite):
    """``zopt recompress A1B data.csv`` said "exists; use --overwrite", then with --overwrite "is
    a file; --overwrite only replaces a Zarr store": both say it is a file, and suggest no
    --overwrite; the file is kept."""
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n")
    result = CliRunner().invoke(main, ["recompress", A1B, str(data), "--no-progress", *overwrite])
    (line,) = result.output.strip().splitlines()
    assert result.exit_code == 1 and "is a file, not a Zarr store" in line and "--overwrite" not in line, line
    assert data.read_text() == "a,b\n1,2\n"


def test_a_size_given_with_a_colon_says_name_equals_size(tmp_path):
    """``--chunks time:12`` said "sizes must be positive integers"; the ':' is the problem."""
    result = CliRunner().invoke(main, ["recompress", A1B, str(tmp_path / "o.zarr"), "--chunks", "time:12",
                                       "--no-progress"])
    assert result.exit_code == 1, result.output
    assert result.output.strip() == "Error: --chunks: 'time:12' is not a size; use NAME=SIZE, e.g. time=12"
    from zopt.planning.chunking import parse_shape

    with pytest.raises(ValueError, match=r"shards: 'time=120,lat 4': 'lat 4' is not a size; use NAME=SIZE, e\.g\. lat=4"):
        parse_shape("time=120,lat 4", "shards")
    assert not (tmp_path / "o.zarr").exists()


def test_a_refused_max_memory_names_the_flag(tmp_path):
    """A refused ``--max-memory`` printed ``max_memory:``, the Python name, not the flag."""
    for limit in ("1KiB", "lots"):
        result = CliRunner().invoke(main, ["recompress", A1B, str(tmp_path / "o.zarr"), "--max-memory", limit,
                                           "--no-progress"])
        (line,) = result.output.strip().splitlines()
        assert result.exit_code == 1 and line.startswith("Error: --max-memory: ") and "max_memory" not in line, line
    assert not (tmp_path / "o.zarr").exists()
