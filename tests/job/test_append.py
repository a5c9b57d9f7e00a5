"""``recompress(..., append=True)`` / ``--append``: new netCDF files appended to a store zopt wrote,
along the concat dimension, with the store's chains, inner chunks and shards; checked against the
store (refusals naming the files); old shards byte for byte except the rewritten last one; readers
see the old store or the new one at every rename; SIGKILL at any phase leaves the store as it was
or finished by the same command; one append per store at a time (the destination lock)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner
from sigkill import kill_at_replace

import zopt
from zopt.cli.commands import main
from zopt.errors import OptionError
from zopt.store.journal import ResumeMismatchError
from zopt.store.lock import StoreLockedError, destination_lock
from zopt.store.staged import STAGING_SUFFIX

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])}
STEPS = 3  # time steps per file


def _write(folder: Path, months: range, *, units: str = "degC", scale: float = 0.01, ny: int = 6,
           lat0: float = 0.0, step: float = 1.0, dtype: str = "f8") -> list[str]:
    """One netCDF file per month: ``sst`` (floats), ``pk`` (CF-packed int16), ``time``, ``lat``, ``lon``."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for m in months:
        rng = np.random.default_rng(m)
        sst = (20 + 5 * rng.standard_normal((STEPS, ny, 8))).astype(dtype)
        ds = xr.Dataset({"sst": (("time", "lat", "lon"), sst, {"units": units}),
                         "pk": (("time", "lat", "lon"), np.round(sst.astype("f8"), 2), {"units": "degC"})},
                        coords={"time": ("time", STEPS * m + step * np.arange(float(STEPS)),
                                         {"units": "days since 2000-01-01"}),
                                "lat": lat0 + np.arange(float(ny)), "lon": np.arange(8.0)})
        path = folder / f"f_{m:03d}.nc"
        ds.to_netcdf(path, encoding={"pk": {"dtype": "int16", "scale_factor": scale, "_FillValue": -32767}})
        out.append(str(path))
    return out


@pytest.fixture
def archive(tmp_path):
    """``(dst, old files, new files)``: 5 files recompressed into dst (15 steps, shards of 4, inner
    chunks of 2: a partly filled last shard), 3 more to append."""
    old = _write(tmp_path / "old", range(5))
    new = _write(tmp_path / "new", range(5, 8))
    dst = tmp_path / "dst.zarr"
    zopt.recompress(str(tmp_path / "old" / "*.nc"), dst, concat_dim="time", chunks="time=2", shards="time=4")
    return dst, old, new


def _files(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def _expected(files: list[str]) -> xr.Dataset:
    return xr.open_mfdataset(sorted(files), combine="by_coords", decode_cf=False).load()


def _assert_values(dst: Path, files: list[str]) -> None:
    want = _expected(files)
    group = zarr.open_group(dst, mode="r")
    for name in ("sst", "pk", "time", "lat", "lon"):
        np.testing.assert_array_equal(group[name][...], want[name].values, err_msg=name)


def test_append_extends_the_store_with_its_layout_and_keeps_the_old_shards(archive):
    dst, old, new = archive
    before = _files(dst)
    meta_before = {n: json.loads((dst / n / "zarr.json").read_text()) for n in ("sst", "pk", "time")}
    report = zopt.recompress(new, dst, concat_dim="time", append=True)
    assert any("appended 9 rows along 'time'" in str(n) for n in report.notes)
    _assert_values(dst, old + new)
    assert xr.open_zarr(dst).sst.shape == (24, 6, 8)  # consolidated metadata: the new shape
    for name, meta in meta_before.items():  # one layout: only the shape changed
        now = json.loads((dst / name / "zarr.json").read_text())
        assert now["shape"][0] == 24 and meta["shape"][0] == 15
        assert {k: v for k, v in now.items() if k != "shape"} == {k: v for k, v in meta.items() if k != "shape"}
    after = _files(dst)
    # sst/pk: shards 0-2 (rows 0-11) byte for byte; shard 3 (rows 12-14 then) rewritten whole; 4, 5 new
    for name in ("sst", "pk"):
        for i in range(3):
            assert after[f"{name}/c/{i}/0/0"] == before[f"{name}/c/{i}/0/0"]
        assert after[f"{name}/c/3/0/0"] != before[f"{name}/c/3/0/0"]
        assert {f"{name}/c/4/0/0", f"{name}/c/5/0/0"} <= set(after) and f"{name}/c/4/0/0" not in before
    assert after["time/c/0"] == before["time/c/0"]  # the coordinate: one chunk of 15, kept; a new chunk after
    assert after["lat/c/0"] == before["lat/c/0"] and after["lat/zarr.json"] == before["lat/zarr.json"]
    assert not Path(str(dst) + STAGING_SUFFIX).exists() and not Path(str(dst) + ".zopt-lock").exists()
    assert zopt.verify(sorted(old + new), dst, concat_dim="time").ok


def test_a_second_append_and_the_cli(archive, tmp_path):
    dst, old, new = archive
    zopt.recompress(new[:1], dst, concat_dim="time", append=True)
    result = CliRunner().invoke(main, ["recompress", str(tmp_path / "new" / "f_00[67].nc"), str(dst), "--concat-dim",
                                       "time", "--append", "--no-progress"])
    assert result.exit_code == 0, result.output
    _assert_values(dst, old + new)
    result = CliRunner().invoke(main, ["verify", str(tmp_path / "*" / "f_*.nc"), str(dst), "--concat-dim", "time",
                                       "--no-progress"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(("kwargs", "months", "words"), [
    ({"units": "K"}, range(5, 7), "variable 'sst': attribute 'units' 'K' there, 'degC' in dst"),
    ({"dtype": "f4"}, range(5, 7), "variable 'sst': data type"),
    ({"scale": 0.02}, range(5, 7), "variable 'pk': attribute 'scale_factor' 0.02 there, 0.01 in dst"),
    ({"ny": 5}, range(5, 7), "size 5 along 'lat' there, 6 in dst"),
    ({"lat0": 1.0}, range(5, 7), "variable 'lat' (without the concat dimension) has other values there"),
    ({}, range(4, 6), "overlaps dst"),
])
def test_new_files_that_differ_from_the_store_are_refused_naming_them(archive, tmp_path, kwargs, months, words):
    dst, _, _ = archive
    bad = _write(tmp_path / "bad", months, **kwargs)
    before = _files(dst)
    with pytest.raises(OptionError, match="^src: ") as info:
        zopt.recompress(bad, dst, concat_dim="time", append=True)
    assert words in str(info.value)
    assert bad[0] in str(info.value)
    assert str(dst) in str(info.value)
    assert _files(dst) == before and not Path(str(dst) + STAGING_SUFFIX).exists()


def test_a_gap_is_a_note(archive, tmp_path):
    dst, old, _ = archive
    later = _write(tmp_path / "later", range(7, 9))
    report = zopt.recompress(later, dst, concat_dim="time", append=True)
    assert any("gap along 'time'" in str(n) and later[0] in str(n) for n in report.notes)
    _assert_values(dst, old + later)


def test_another_step_is_a_note(archive, tmp_path):
    dst, old, _ = archive
    finer = _write(tmp_path / "finer", range(5, 6), step=0.5)  # 15.0, 15.5, 16.0 after dst's ... 13, 14
    report = zopt.recompress(finer, dst, concat_dim="time", append=True)
    assert any("step along 'time'" in str(n) and finer[0] in str(n) for n in report.notes)
    _assert_values(dst, old + finer)


@pytest.mark.parametrize(("options", "option"), [
    ({"chunks": "time=3"}, "chunks"), ({"shards": "time=8"}, "shards"), ({"preset": "fast"}, "preset"),
    ({"codecs": [{"name": "bytes"}]}, "codecs"), ({"menu": "archive"}, "menu"), ({"overwrite": True}, "overwrite"),
])
def test_options_that_change_the_layout_are_refused_naming_the_option(archive, options, option):
    dst, _, new = archive
    before = _files(dst)
    with pytest.raises(OptionError) as info:
        zopt.recompress(new, dst, concat_dim="time", append=True, **options)
    assert info.value.option == option
    assert _files(dst) == before


def test_the_store_s_own_chunks_and_shards_are_taken(archive):
    dst, old, new = archive
    zopt.recompress(new, dst, concat_dim="time", append=True, chunks="time=2", shards="time=4")
    _assert_values(dst, old + new)


def test_a_destination_that_is_no_local_store_or_no_concat_dim_is_refused(archive, tmp_path):
    _, _, new = archive
    with pytest.raises(OptionError, match="^append: .*local"):
        zopt.recompress(new, "memory://x.zarr", concat_dim="time", append=True)
    with pytest.raises(OptionError, match="^dst: .*does not exist"):
        zopt.recompress(new, tmp_path / "none.zarr", concat_dim="time", append=True)
    with pytest.raises(OptionError, match="^append: .*concat_dim"):
        zopt.recompress(new[0], tmp_path / "none.zarr", append=True)


def test_a_second_append_on_the_store_is_refused_while_one_holds_its_lock(archive):
    dst, _, new = archive
    before = _files(dst)
    with destination_lock(dst, "other-job"), pytest.raises(StoreLockedError):
        zopt.recompress(new, dst, concat_dim="time", append=True)
    assert _files(dst) == before


def _state(dst: Path, old: list[str], full: list[str]) -> str:
    """``"old"`` or ``"new"``: what a reader opening ``dst`` now sees, through the consolidated
    metadata and array by array; AssertionError for anything else (a missing chunk, a torn shard)."""
    key = (tuple(old), tuple(full))
    if key not in _WANT:
        _WANT[key] = {n: {15: _expected(old)[n].values, len(full) * STEPS: _expected(full)[n].values}
                      for n in ("sst", "pk", "time")}
    want = _WANT[key]
    seen = set()
    group = zarr.open_group(dst, mode="r", use_consolidated=True)
    for name in ("sst", "pk", "time"):
        arr = group[name]  # its shape from the consolidated metadata
        np.testing.assert_array_equal(arr[...], want[name][arr.shape[0]], err_msg=name)
        own = zarr.open_array(dst, path=name, mode="r")  # the array's own document
        np.testing.assert_array_equal(own[...], want[name][own.shape[0]], err_msg=name)
        seen.add("old" if arr.shape[0] == 15 else "new")
    assert len(seen) == 1, seen
    return seen.pop()


_WANT: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[str, dict[int, np.ndarray]]] = {}


def test_readers_see_the_old_store_or_the_new_one_at_every_rename(archive, monkeypatch):
    dst, old, new = archive
    real, states = os.replace, []

    def replace(a, b):
        states.append(_state(dst, old, old + new))  # a reader before and after each rename
        real(a, b)
        states.append(_state(dst, old, old + new))

    monkeypatch.setattr(os, "replace", replace)
    zopt.recompress(new, dst, concat_dim="time", append=True, scheduler="synchronous")
    monkeypatch.undo()
    assert states[0] == "old" and states[-1] == "new"
    assert states == sorted(states, key=["old", "new"].index)  # once new, never old again


def _kill_at(call: int, dst: Path, new: list[str]) -> subprocess.CompletedProcess[str]:
    script = kill_at_replace(call) + textwrap.dedent(f"""
        import zopt
        zopt.recompress({new!r}, {str(dst)!r}, concat_dim="time", append=True, scheduler="synchronous")
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=ENV)


def test_sigkill_at_each_phase_leaves_the_old_store_or_is_finished_by_the_same_command(tmp_path):
    old = _write(tmp_path / "old", range(5))
    new = _write(tmp_path / "new", range(5, 8))
    first = tmp_path / "first.zarr"
    zopt.recompress(old, first, concat_dim="time", chunks="time=2", shards="time=4")
    kills = 0
    for call in (2, 9, 23, 28, 31):  # staging, shards and markers, the install: new shards, the rewritten ones, zarr.json
        dst = tmp_path / f"dst{call}.zarr"
        shutil.copytree(first, dst)
        proc = _kill_at(call, dst, new)
        if proc.returncode == 0:
            assert _state(dst, old, old + new) == "new"
            continue
        assert proc.returncode == -9, proc.stderr
        kills += 1
        _state(dst, old, old + new)  # old, or new where the install had got to the root document
        zopt.recompress(new, dst, concat_dim="time", append=True)  # the same command finishes it
        assert _state(dst, old, old + new) == "new"
        assert not Path(str(dst) + STAGING_SUFFIX).exists()
        assert zopt.verify(sorted(old + new), dst, concat_dim="time").ok
    assert kills == 5


def test_an_interrupted_append_of_other_files_is_refused(archive, tmp_path):
    dst, _, new = archive
    assert _kill_at(9, dst, new).returncode == -9
    others = _write(tmp_path / "others", range(9, 10))
    with pytest.raises(ResumeMismatchError, match="source changed"):
        zopt.recompress(others, dst, concat_dim="time", append=True)
    zopt.recompress(new, dst, concat_dim="time", append=True)
    assert xr.open_zarr(dst).sst.shape == (24, 6, 8)


def test_an_append_reads_none_of_the_old_files(archive):
    """The append opens the new files only (the old ones could be gone): it must not reread them."""
    dst, old, new = archive
    for f in old:
        os.rename(f, f + ".moved")
    zopt.recompress(new, dst, concat_dim="time", append=True)
    for f in old:
        os.rename(f + ".moved", f)
    _assert_values(dst, old + new)
    assert glob.glob(str(dst) + "*") == [str(dst)]


def test_an_icechunk_branch_gets_one_commit_per_append(tmp_path):
    ic = pytest.importorskip("icechunk")
    old = _write(tmp_path / "old", range(5))
    new = _write(tmp_path / "new", range(5, 8))
    path = str(tmp_path / "repo")
    ic.Repository.create(ic.local_filesystem_storage(path))
    url = f"icechunk://{path}"
    zopt.recompress(old, url, concat_dim="time", chunks="time=2", shards="time=4")
    repo = ic.Repository.open(ic.local_filesystem_storage(path))
    tip = repo.lookup_branch("main")
    before = len(list(repo.ancestry(branch="main")))
    with pytest.raises(OptionError, match="overlaps dst"):  # checked against the branch's tip: nothing committed
        zopt.recompress(old[-1:], url, concat_dim="time", append=True)
    assert repo.lookup_branch("main") == tip
    report = zopt.recompress(new, url, concat_dim="time", append=True)
    assert any("committed snapshot" in str(n) for n in report.notes)
    assert len(list(repo.ancestry(branch="main"))) == before + 1  # one commit
    group = zarr.open_group(repo.readonly_session(branch="main").store, mode="r")
    want = _expected(old + new)
    for name in ("sst", "pk", "time", "lat"):
        np.testing.assert_array_equal(group[name][...], want[name].values, err_msg=name)
    assert group["sst"].shards == (4, 6, 8) and group["sst"].chunks == (2, 6, 8)
    old_group = zarr.open_group(repo.readonly_session(snapshot_id=tip).store, mode="r")
    assert old_group["sst"].shape == (15, 6, 8)  # readers of the old snapshot: the old store
    assert zopt.verify(sorted(old + new), url, concat_dim="time").ok


def test_an_icechunk_append_that_finds_the_branch_moved_commits_nothing(tmp_path, monkeypatch):
    ic = pytest.importorskip("icechunk")
    from zopt.compat.icechunk_compat import BranchMovedError
    from zopt.job import append_icechunk

    old = _write(tmp_path / "old", range(5))
    new = _write(tmp_path / "new", range(5, 6))
    path = str(tmp_path / "repo")
    ic.Repository.create(ic.local_filesystem_storage(path))
    url = f"icechunk://{path}"
    zopt.recompress(old, url, concat_dim="time", chunks="time=2", shards="time=4")
    repo = ic.Repository.open(ic.local_filesystem_storage(path))
    real = append_icechunk.write_units

    def then_another_commit(*args, **kwargs):  # another writer commits on the branch while the append writes
        out = real(*args, **kwargs)
        other = repo.writable_session("main")
        zarr.open_group(other.store, mode="r+").attrs["title"] = "moved"
        other.commit("another writer")
        return out

    monkeypatch.setattr(append_icechunk, "write_units", then_another_commit)
    with pytest.raises(BranchMovedError, match="moved during the append"):
        zopt.recompress(new, url, concat_dim="time", append=True)
    group = zarr.open_group(repo.readonly_session(branch="main").store, mode="r")
    assert group["sst"].shape == (15, 6, 8) and group.attrs["title"] == "moved"  # the other commit, not the append


def test_an_interrupted_install_into_a_store_replaced_since_is_refused(archive, tmp_path):
    dst, old, new = archive
    assert _kill_at(23, dst, new).returncode == -9  # the install began: a new shard moved into dst
    shutil.rmtree(dst)  # another store at dst since (recompress --overwrite)
    zopt.recompress(old[:2], dst, concat_dim="time", chunks="time=2", shards="time=4")
    before = _files(dst)
    with pytest.raises(ResumeMismatchError, match="changed since the interrupted append"):
        zopt.recompress(new, dst, concat_dim="time", append=True)
    assert _files(dst) == before  # nothing of the interrupted append moved into it
