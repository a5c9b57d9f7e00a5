"""Every option is honoured or refused, never silently ignored (issue 15 item 4), and the default
chunking a user gets (issue 15, "defaults"). Real stores made from iris-sample-data's NEMO SST."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from zopt import recompress
from zopt.cli.commands import main
from zopt.planning.chunking import choose_chunks, long_chunks, square_chunks

iris_sample_data = pytest.importorskip("iris_sample_data")
NEMO = os.path.join(iris_sample_data.path, "NEMO", "nemo_1m_20150101-20150201_grid-T.nc")


@pytest.fixture(scope="module")
def grid2d(tmp_path_factory) -> str:
    """A Zarr v3 store with a 2-D variable ``tos`` (y, x), 1-D coordinates y and x, a uint8 mask."""
    tos = xr.open_dataset(NEMO, decode_cf=False)["tos"].values[0]
    ds = xr.Dataset(
        {"tos": (("y", "x"), tos), "land": (("y", "x"), (tos > 1e19).astype("u1"))},
        coords={"y": np.arange(330.0), "x": np.arange(360.0)},
    )
    path = str(tmp_path_factory.mktemp("opts") / "grid.zarr")
    ds.to_zarr(path, zarr_format=3, consolidated=False)
    return path


def _cli(*args: str):
    return CliRunner().invoke(main, ["recompress", *args, "--no-progress"])


@pytest.mark.parametrize("args,words", [
    (["--chunks", "lat=100,y=30"], "chunks: no rewritten variable has dimension(s) ['lat']; the dimensions are ['x', 'y']"),
    (["--shards", "t=1000"], "shards: no rewritten variable has dimension(s) ['t']; the dimensions are ['x', 'y']"),
    (["--chunks", "y=30", "--shards", "x=360,FOO=3"], "shards: no rewritten variable has dimension(s) ['FOO']"),
])
def test_a_dimension_no_variable_has_is_refused_naming_the_dimensions_there_are(tmp_path, grid2d, args, words):
    """A misspelt name once left the default chunks with a warning (issue 35): refused, as a
    positional shape that fits nothing is, before anything is written."""
    result = _cli(grid2d, str(tmp_path / "o.zarr"), *args)
    assert result.exit_code == 1 and words in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "o.zarr").exists()


def test_a_dimension_of_a_child_group_only_applies_there(tmp_path):
    """In a hierarchy each group's job applies the shapes to its own arrays: a name only a child
    group's arrays have is no error at the root, and a name no group has is."""
    src = tmp_path / "h.zarr"
    g = zarr.create_group(str(src))
    g.create_array("a", shape=(10,), dtype="f4", dimension_names=("t",))[...] = 1
    g.create_group("sub").create_array("b", shape=(10, 6), dtype="f4", dimension_names=("t", "depth"))[...] = 2
    result = _cli(str(src), str(tmp_path / "o.zarr"), "--chunks", "depth=3")
    assert result.exit_code == 0, result.output
    assert zarr.open_array(str(tmp_path / "o.zarr" / "sub" / "b")).chunks == (10, 3)
    result = _cli(str(src), str(tmp_path / "o2.zarr"), "--chunks", "detph=3")
    assert result.exit_code == 1 and "['detph']; the dimensions are ['depth', 't']" in result.output


@pytest.mark.parametrize("args,match", [
    (["--chunks", "10,10,10"], "3 entries, but the rewritten variables have [1, 2] dimensions"),
    (["--chunks", "y=30,x=36", "--shards", "y=10,x=36"], "smaller than the inner chunks"),
    (["--plan", "PLAN", "--decision", "never"], "not both"),
])
def test_options_that_cannot_apply_are_refused(tmp_path, grid2d, args, match):
    plan = tmp_path / "p.zarr"
    if "PLAN" in args:
        assert CliRunner().invoke(main, ["plan", grid2d, "tos", "-o", str(plan), "--no-progress"]).exit_code == 0
    result = _cli(grid2d, str(tmp_path / "o.zarr"), *[str(plan) if a == "PLAN" else a for a in args])
    assert result.exit_code != 0 and match in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not (tmp_path / "o.zarr").exists()


def test_in_place_on_a_store_without_conditional_codec_is_refused(grid2d):
    result = _cli(grid2d, "--in-place")
    assert result.exit_code != 0 and "no array" in result.output and "conditional" in result.output


def test_default_chunks_keep_the_last_dimensions_long():
    # issue 26: whole rows / levels instead of square tiles for multi-byte types
    inner, shard = choose_chunks((8644, 17280), 4, None, None)
    assert inner == (3, 17280)
    inner, _ = choose_chunks((3, 8644, 17280), 4, None, None)
    assert inner == (1, 3, 17280)
    assert choose_chunks((100, 20), 4, None, None)[0] == (100, 20)  # small arrays: one chunk
    # the 3-D climatology: one whole lat × lon level per chunk, not 20 × 57 × 57
    assert choose_chunks((20, 180, 360), 4, None, None)[0] == (1, 180, 360)
    # a level of up to 1 MiB stays whole rather than being cut into two uneven parts
    assert choose_chunks((20, 300, 300), 4, None, None)[0] == (1, 300, 300)
    # rows cut into about equal parts: 145 rows of 4096 float32 -> chunks of 15 rows, not 9 of 16 and one of 1
    assert choose_chunks((145, 4096), 4, None, None)[0] == (15, 4096)
    # a last dimension longer than 1 MiB is cut into about equal runs of ~256 KiB
    assert choose_chunks((10_000_000,), 4, None, None)[0] == (65360,)


def test_one_byte_types_keep_square_tiles():
    # class maps and masks store 4-11 % smaller in square tiles (benchmarks/corpus.py --compare-chunks)
    assert choose_chunks((3600, 7200), 1, None, None)[0] == (512, 512)
    assert choose_chunks((3600, 7200), 1, None, None)[0] == square_chunks((3600, 7200), 256 * 1024)


def test_given_chunks_override_the_choice():
    assert choose_chunks((20, 180, 360), 4, (20, 57, 57), None)[0] == (20, 57, 57)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=1, max_size=4), st.sampled_from([2, 4, 8]))
def test_long_chunks_stay_within_bounds(shape, itemsize):
    target = 256 * 1024 // itemsize
    inner = long_chunks(tuple(shape), target)
    assert len(inner) == len(shape) and all(1 <= c <= s for c, s in zip(inner, shape, strict=True))
    assert math.prod(inner) <= 4 * target
    # dimensions after the first one cut are whole; the ones before it are 1
    cut = [d for d, (c, s) in enumerate(zip(inner, shape, strict=True)) if c < s]
    if cut:
        assert all(inner[d] == 1 for d in range(cut[-1]))
        assert all(inner[d] == shape[d] for d in range(cut[-1] + 1, len(shape)))
        # a cut chunk is not far below the target: at least half of it
        assert math.prod(inner) * 2 >= target or math.prod(inner) == math.prod(shape)


def test_coordinates_stay_whole_and_one_byte_types_are_not_shuffled(tmp_path, grid2d):
    dst = tmp_path / "o.zarr"
    recompress(grid2d, dst, chunks="y=30,x=36", menu="classic")  # the classic chain per type
    for coord in ("y", "x"):
        meta = json.loads((dst / coord / "zarr.json").read_text())
        assert meta["chunk_grid"]["configuration"]["chunk_shape"] == meta["shape"], coord
    land = json.loads((dst / "land" / "zarr.json").read_text())
    wrapped = land["codecs"][0]["configuration"]["codecs"][1]["configuration"]["codecs"]
    assert [c["name"] for c in wrapped] == ["zstd"]
    tos = json.loads((dst / "tos" / "zarr.json").read_text())
    assert [c["name"] for c in tos["codecs"][0]["configuration"]["codecs"][1]["configuration"]["codecs"]] == [
        "shuffle", "zstd"]
    np.testing.assert_array_equal(zarr.open_array(dst, path="land")[...], zarr.open_array(grid2d, path="land")[...])
    recompress(grid2d, tmp_path / "asked.zarr", chunks="y=30", variables=["y"])  # a coordinate named is chunked
    assert zarr.open_array(tmp_path / "asked.zarr", path="y").chunks == (30,)


def test_a_plan_is_applied_with_the_chunking_it_was_made_for(tmp_path, grid2d):
    plan = tmp_path / "p.zarr"
    res = CliRunner().invoke(main, ["plan", grid2d, "tos", "--chunks", "y=66,x=72", "-o", str(plan), "--no-progress"])
    assert res.exit_code == 0, res.output
    result = _cli(grid2d, str(tmp_path / "o.zarr"), "--variable", "tos", "--plan", str(plan))
    assert result.exit_code == 0, result.output
    out = zarr.open_array(tmp_path / "o.zarr", path="tos")
    assert (out.shards or out.chunks) and json.loads((tmp_path / "o.zarr" / "tos" / "zarr.json").read_text())[
        "codecs"][0]["configuration"]["chunk_shape"] == [66, 72]
    np.testing.assert_array_equal(out[...], zarr.open_array(grid2d, path="tos")[...])


def test_an_array_of_more_write_units_than_a_job_lists_is_refused_naming_it(tmp_path, monkeypatch):
    """The plan of work lists every shard: 2**62 rows were a MemoryError naming nothing. The
    limit is 10**8 units; lowered here to keep the test small."""
    import zopt.job.prepare as prepare

    monkeypatch.setattr(prepare, "MAX_UNITS", 100)
    src = tmp_path / "s.zarr"
    zarr.create_array(str(src), shape=(1000,), chunks=(100,), dtype="f4", dimension_names=("t",))[...] = 1
    result = _cli(str(src), str(tmp_path / "o.zarr"), "--chunks", "t=5", "--shards", "t=5")
    line = " ".join(result.output.split())
    assert result.exit_code == 1 and f"src: the root array of {src}: shape (1000,) makes 200 chunks of (5,)" in line, line
    assert not (tmp_path / "o.zarr").exists()


@pytest.mark.parametrize("command", ["analyze", "plan"])
def test_analyze_and_plan_refuse_a_dimension_no_array_has(tmp_path, grid2d, command):
    args = [command, grid2d, "--chunks", "FOO=3,y=30", "--no-progress"] + (["-o", str(tmp_path / "p.zarr")]
                                                                          if command == "plan" else [])
    result = CliRunner().invoke(main, args)
    line = " ".join(result.output.split())
    assert result.exit_code == 1 and "chunks: no analysed array has dimension(s) ['FOO']; the dimensions are" in line, line


@pytest.fixture(scope="module")
def conditional_store(tmp_path_factory, grid2d) -> str:
    """``grid2d`` recompressed: every array has a ``conditional`` codec, so ``--in-place`` applies."""
    path = str(tmp_path_factory.mktemp("inplace") / "c.zarr")
    recompress(grid2d, path, preset="fast")
    return path


@pytest.mark.parametrize("args,named", [
    (["--combine", "nested"], "--combine"),  # issue 35: silently ignored
    (["--chunks", "y=30", "--no-checksum"], "--chunks, --checksum/--no-checksum"),
    (["--lossy", "tos=abs:0.1", "--readers", "zarrs"], "--lossy, --readers"),
    (["--skip-broken", "--vs-default"], "--skip-broken, --vs-default"),
])
def test_in_place_refuses_every_option_that_does_not_apply_naming_it(conditional_store, args, named):
    """The refusals come from ``RecompressJob``'s field metadata (``zopt.job.options.refused_in_place``):
    an option added to the job is refused in place unless marked as applying there."""
    before = {p: os.path.getmtime(os.path.join(r, p)) for r, _, fs in os.walk(conditional_store) for p in fs}
    result = _cli(conditional_store, "--in-place", *args)
    assert result.exit_code == 2, result.output
    assert f"--in-place keeps the arrays' metadata, so {named} cannot be used with it." in " ".join(result.output.split())
    assert {p: os.path.getmtime(os.path.join(r, p)) for r, _, fs in os.walk(conditional_store) for p in fs} == before


def test_recompress_in_place_refuses_the_same_options_from_the_same_metadata(conditional_store):
    import dataclasses
    import inspect

    from zopt import recompress_in_place
    from zopt.job.options import RecompressJob

    with pytest.raises(ValueError, match=r"^combine: does not apply to a rewrite in place"):
        recompress_in_place(conditional_store, combine="nested")
    with pytest.raises(ValueError, match=r"^chunks, lossy: do not apply"):
        recompress_in_place(conditional_store, chunks="y=30", lossy=["tos=abs:0.1"], layout="compact")
    with pytest.raises(TypeError, match="unexpected keyword argument 'chunkz'"):
        recompress_in_place(conditional_store, chunkz=3)
    # what applies in place is what recompress_in_place takes: the metadata and the signature agree
    applies = {f.name for f in dataclasses.fields(RecompressJob) if f.metadata.get("in_place")}
    own = set(inspect.signature(recompress_in_place).parameters) - {"store", "grace", "options"}
    assert applies == own | {"src"}
    report = recompress_in_place(conditional_store, chunks=None, scheduler="synchronous")  # defaults: nothing refused
    assert {a.name for a in report.arrays} >= {"tos"}
