"""``zopt verify`` and ``recompress --verify`` on real stores: every source form recompress takes,
metadata and value differences found and placed, nothing published when a check fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner

from zopt import recompress
from zopt.cli.commands import main
from zopt.io.paths import PARTIAL_SUFFIX
from zopt.readback.verify import VerifyError, before_publish_check, verify
from zopt.store.journal import JOURNAL_DIR

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])}
SHAPE = (40, 60)


def _data() -> np.ndarray:
    rng = np.random.default_rng(3)
    data = (rng.normal(size=SHAPE) * 10).astype("f4")
    data[rng.random(SHAPE) < 0.05] = np.nan
    bits = data.view("u4")
    bits[0, 0] = 0x7FC00123  # a NaN with a payload: bit for bit means payloads too
    return data


def _source(tmp_path: Path, kind: str) -> str:
    data = _data()
    if kind == "root":
        path = tmp_path / "root.zarr"
        a = zarr.create_array(str(path), shape=SHAPE, chunks=(10, 20), dtype="f4", dimension_names=("y", "x"),
                              attributes={"units": "K"})
        a[...] = data
    elif kind == "nested":
        path = tmp_path / "nested.zarr"
        g = zarr.create_group(str(path), attributes={"title": "t"})
        g.create_array("a", shape=SHAPE, chunks=(10, 20), dtype="f4", dimension_names=("y", "x"), fill_value=-1.0)[...] = data
        sub = g.create_group("sub")
        sub.create_array("b", shape=SHAPE, chunks=(20, 20), dtype="i2", dimension_names=("y", "x"),
                         attributes={"scale": [1, 2]})[...] = np.arange(np.prod(SHAPE)).reshape(SHAPE) % 300
    else:
        ds = xr.Dataset({"a": (("y", "x"), data, {"units": "K", "valid": np.array([1.5, 2.5])})},
                        coords={"y": np.arange(SHAPE[0]), "x": np.arange(SHAPE[1]) * 0.5}, attrs={"title": "t"})
        ds["a"].encoding["_FillValue"] = np.float32(-999)
        if kind == "v2":
            path = tmp_path / "v2.zarr"
            ds.to_zarr(path, zarr_format=2)
        else:
            path = tmp_path / "src.nc"
            ds.to_netcdf(path)
    return str(path)


@pytest.mark.parametrize("kind", ["root", "nested", "v2", "netcdf"])
def test_recompressed_stores_verify_bit_for_bit(tmp_path, kind):
    src = _source(tmp_path, kind)
    dst = tmp_path / "out.zarr"
    recompress(src, dst, chunks=(10, 10), shards=(20, 20), scheduler="synchronous")
    report = verify(src, dst)
    assert report.ok, [(c.name, c.summary()) for c in report.checks]
    names = {c.name for c in report.checks}
    assert names == {"root": {""}, "nested": {"a", "sub/b"}}.get(kind, {"a", "x", "y"})
    a = next(c for c in report.checks if c.name in ("", "a"))
    assert a.elements == np.prod(SHAPE) and a.chunks == 4 * 6  # dst inner chunks of 10 x 10


def test_a_nan_payload_and_a_value_are_placed_in_their_chunks(tmp_path):
    src = _source(tmp_path, "root")
    dst = tmp_path / "out.zarr"
    recompress(src, dst, chunks=(10, 10), shards=(20, 20), scheduler="synchronous")
    out = zarr.open_array(str(dst), mode="r+")
    y = out[...]
    y.view("u4")[0, 0] = 0x7FC00000  # the canonical NaN instead of the payload: same value, other bits
    y[35, 55] += 0.25
    out[...] = y
    report = verify(src, dst, scheduler="synchronous")
    (c,) = report.checks
    assert not c.ok and c.differing_chunks == 2 and c.violations == 2
    first, last = c.first_differences
    assert first.coords == (0, 0) and first.max_abs_diff is None  # NaN vs NaN: no finite difference
    assert last.coords == (3, 5) and last.region == ((30, 40), (50, 60))
    assert last.max_abs_diff == pytest.approx(0.25, abs=1e-5)


def test_first_differences_are_the_first_five_in_grid_order(tmp_path):
    src = _source(tmp_path, "nested")
    dst = tmp_path / "out.zarr"
    recompress(src, dst, chunks=(10, 10), shards=(20, 30), scheduler="synchronous")
    b = zarr.open_array(str(dst), path="sub/b", mode="r+")
    v = b[...]
    hit = [(3, 5), (0, 4), (2, 0), (1, 1), (0, 0), (3, 0), (2, 2)]  # 7 chunks, out of order
    for i, j in hit:
        v[i * 10 + 1, j * 10 + 2] += 1
    b[...] = v
    report = verify(src, dst, ["sub/b"])
    (c,) = report.checks
    assert c.differing_chunks == 7 and c.chunks == 24
    assert [d.coords for d in c.first_differences] == sorted(hit)[:5]
    assert all(d.max_abs_diff == 1 for d in c.first_differences)


def _rewrite_metadata(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_metadata_differences_are_reported_per_array(tmp_path):
    src = _source(tmp_path, "nested")
    dst = tmp_path / "out.zarr"
    recompress(src, dst, chunks=(10, 10), scheduler="synchronous")
    assert verify(src, dst).ok
    _rewrite_metadata(dst / "a" / "zarr.json", lambda d: d.update(fill_value="NaN", attributes={"extra": 1}))
    _rewrite_metadata(dst / "sub" / "b" / "zarr.json", lambda d: d.update(dimension_names=["x", "y"]))
    zarr.create_array(str(dst / "only_dst"), shape=(3,), dtype="i1")
    report = verify(src, dst)
    by = {c.name: c for c in report.checks}
    assert by["a"].metadata == ["fill value -1.0 in src, NaN in dst", "attribute 'extra' only in dst"]
    assert by["a"].differing_chunks == 0  # the values still match: only metadata differs
    assert by["sub/b"].metadata == ["dimension names ('y', 'x') in src, ('x', 'y') in dst"]
    assert by["only_dst"].problem == "not in the source"
    r = CliRunner().invoke(main, ["verify", src, str(dst), "--no-progress"])
    assert r.exit_code == 1
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("Error: verify: 3 of 3 arrays differ and 2 other difference(s)") and "only_dst (not in the source)" in last


def test_fill_value_is_compared_bit_for_bit(tmp_path):
    src = tmp_path / "s.zarr"
    zarr.create_array(str(src), shape=(4,), chunks=(4,), dtype="f8", fill_value=-0.0)[...] = 1.0
    dst = tmp_path / "d.zarr"
    recompress(str(src), dst)
    assert verify(str(src), dst).ok
    _rewrite_metadata(dst / "zarr.json", lambda d: d.update(fill_value=0.0))
    (c,) = verify(str(src), dst).checks
    assert c.metadata == ["fill value -0.0 in src, 0.0 in dst"]


def test_missing_stores_and_unknown_arrays_are_one_line_errors(tmp_path):
    src = _source(tmp_path, "root")
    with pytest.raises(FileNotFoundError):
        verify(src, tmp_path / "nope.zarr")
    with pytest.raises(ValueError, match="not a Zarr store"):
        verify(src, src.replace("root.zarr", "") or ".")
    recompress(src, tmp_path / "o.zarr")
    with pytest.raises(ValueError, match=r"arrays: \['zz'\] are in neither store"):
        verify(src, tmp_path / "o.zarr", ["zz"])
    r = subprocess.run([sys.executable, "-m", "zopt", "verify", src, str(tmp_path / "nope.zarr")],
                       capture_output=True, text=True, env=ENV)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0 and "does not exist" in r.stderr


def test_s3_pair_verifies(tmp_path, s3_bucket):
    src_local = _source(tmp_path, "root")  # (a hierarchy is written into local directories only)
    src, dst = f"{s3_bucket}/src.zarr", f"{s3_bucket}/dst.zarr"
    recompress(src_local, src, chunks=(20, 20), scheduler="synchronous")  # the source on S3
    recompress(src, dst, chunks=(10, 10), shards=(20, 20), scheduler="synchronous")
    report = verify(src, dst)
    assert report.ok and [c.name for c in report.checks] == [""] and report.checks[0].chunks == 24
    assert verify(src_local, dst).ok
    seen = []
    check = before_publish_check(src, f"{s3_bucket}/checked.zarr", done=seen)  # a URL dst: written in place
    recompress(src, f"{s3_bucket}/checked.zarr", chunks=(20, 20), before_publish=check, scheduler="synchronous")
    assert len(seen) == 1 and seen[0].ok and seen[0].dst == f"{s3_bucket}/checked.zarr"


# -- recompress --verify ----------------------------------------------------------------------


def test_recompress_verify_publishes_after_the_check(tmp_path):
    src = _source(tmp_path, "v2")
    dst = tmp_path / "out.zarr"
    r = subprocess.run([sys.executable, "-m", "zopt", "recompress", src, str(dst), "--verify", "--no-progress",
                        "--chunks", "y=10,x=10"], capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stderr
    assert f"verified {dst} against {src}: 3 array(s)" in " ".join(r.stdout.split())
    assert verify(src, dst).ok


def test_a_failed_check_publishes_nothing_and_keeps_the_partial(tmp_path):
    src = _source(tmp_path, "root")
    dst = tmp_path / "out.zarr"
    check = before_publish_check(src, dst, scheduler="synchronous")
    seen = []

    def tamper_then_check(partial, names):  # a bad write, found before publishing
        seen.append((partial, names))
        a = zarr.open_array(partial, mode="r+")
        a[5, 5] = 1e6
        check(partial, names)

    with pytest.raises(VerifyError, match=r"verify: 1 of 1 array differs: .* chunk 0\.0 .*nothing was published"):
        recompress(src, dst, chunks=(10, 10), before_publish=tamper_then_check, scheduler="synchronous")
    partial = Path(str(dst) + PARTIAL_SUFFIX)
    assert seen == [(str(partial), [""])]
    assert not dst.exists() and (partial / "zarr.json").exists() and (partial / JOURNAL_DIR).is_dir()
    # the same job again resumes (every shard marked done) and checks again: still nothing published
    with pytest.raises(VerifyError):
        recompress(src, dst, chunks=(10, 10), before_publish=check, scheduler="synchronous")
    assert not dst.exists() and (partial / "zarr.json").exists()


def test_verify_refuses_in_place_and_dry_run(tmp_path):
    src = _source(tmp_path, "root")
    for extra in (["--in-place"], [str(tmp_path / "o.zarr"), "--dry-run"]):
        r = CliRunner().invoke(main, ["recompress", src, *extra, "--verify"])
        assert r.exit_code == 2 and "--verify compares a new DST" in r.output


@pytest.mark.parametrize("kind", ["pathlike", "memory-store", "local-store"])
def test_before_publish_check_takes_every_destination_recompress_takes(tmp_path, kind):
    src = _source(tmp_path, "v2")  # child groups go to a local directory only
    dst = {"pathlike": lambda: tmp_path / "out.zarr", "memory-store": zarr.storage.MemoryStore,
           "local-store": lambda: zarr.storage.LocalStore(tmp_path / "out.zarr")}[kind]()
    done: list = []
    report = recompress(src, dst, chunks=(10, 10), scheduler="synchronous",
                        before_publish=before_publish_check(src, dst, scheduler="synchronous", done=done))
    assert len(done) == 1 and done[0].ok and done[0].dst == report.dst
    assert {c.name for c in done[0].checks} == {"a", "x", "y"}
    assert np.array_equal(zarr.open_group(dst, mode="r")["a"][:].view("u4"),
                          zarr.open_group(src, mode="r")["a"][:].view("u4"))
    other = tmp_path / "other.zarr"  # the check is real: another source's values are a difference
    zarr.create_array(str(other), shape=SHAPE, chunks=(10, 20), dtype="f4", dimension_names=("y", "x"))[...] = 1.0
    src2 = _source(tmp_path, "root")
    dst2 = {"pathlike": lambda: tmp_path / "out2.zarr", "memory-store": zarr.storage.MemoryStore,
            "local-store": lambda: zarr.storage.LocalStore(tmp_path / "out2.zarr")}[kind]()
    with pytest.raises(VerifyError, match=r"\(root array\) .*chunk"):
        recompress(src2, dst2, chunks=(10, 10), scheduler="synchronous",
                   before_publish=before_publish_check(other, dst2, scheduler="synchronous"))


def test_before_publish_check_refuses_other_types_naming_the_parameter(tmp_path):
    src = _source(tmp_path, "root")
    with pytest.raises(ValueError, match=r"^dst: a int is not a destination"):
        before_publish_check(src, 42)
    with pytest.raises(ValueError, match=r"^dst: a dict is not a destination"):
        before_publish_check(src, {"path": "x"})
    with pytest.raises(ValueError, match=r"^src: a bytes is not a source"):
        before_publish_check(src.encode(), tmp_path / "o.zarr")
    with pytest.raises(ValueError, match=r"^src: a list is not a source"):
        before_publish_check([src], tmp_path / "o.zarr")  # several sources need concat_dim


def test_rows_are_sorted_and_the_last_line_is_the_verdict(tmp_path, monkeypatch):
    """Issue 35: ``zopt verify`` printed its rows in no order and no verdict. Rows sorted by
    array; the last line is ``N arrays equal`` or ``K of N arrays differ``."""
    monkeypatch.setenv("COLUMNS", "250")
    src = tmp_path / "s.zarr"
    g = zarr.create_group(str(src))
    names = ["zeta", "alpha", "mid", "beta"]
    for i, name in enumerate(names):  # created out of order
        g.create_array(name, shape=(20,), chunks=(10,), dtype="i4")[...] = np.arange(20) * (i + 1)
    dst = tmp_path / "d.zarr"
    recompress(str(src), dst)
    report = verify(str(src), dst)
    assert [c.name for c in report.checks] == sorted(names) and report.verdict() == "4 arrays equal"
    r = CliRunner().invoke(main, ["verify", str(src), str(dst), "--no-progress"])
    assert r.exit_code == 0, r.output
    rows = [line.split("│")[1].strip() for line in r.output.splitlines() if line.startswith("│ ")
            and line.split("│")[1].strip() in names]
    assert rows == sorted(names), r.output
    assert r.output.strip().splitlines()[-1] == "4 arrays equal"
    a = zarr.open_array(dst, path="mid", mode="r+")
    a[3] = -1
    r = CliRunner().invoke(main, ["verify", str(src), str(dst), "--no-progress"])
    assert r.exit_code == 1
    assert r.output.strip().splitlines()[-1].startswith("Error: verify: 1 of 4 arrays differ: mid ("), r.output
