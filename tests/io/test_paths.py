"""SRC and DST never overlap; ``--overwrite`` replaces only a Zarr store, atomically (issue 15
item 1, issue 16 item 3). Real stores on disk, made from iris-sample-data's NEMO SST."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner

from zopt import recompress
from zopt.cli.commands import main
from zopt.errors import ZoptError
from zopt.io import paths

iris_sample_data = pytest.importorskip("iris_sample_data")
NEMO = os.path.join(iris_sample_data.path, "NEMO", "nemo_1m_20150101-20150201_grid-T.nc")


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def small_zarr(tmp_path_factory) -> Path:
    """A Zarr v3 store of NEMO's tos (to copy into each test's directory)."""
    path = tmp_path_factory.mktemp("paths") / "src.zarr"
    xr.open_dataset(NEMO, decode_cf=False)[["tos"]].to_zarr(path, zarr_format=3, consolidated=False)
    return path


def _cli(*args: str):
    return CliRunner().invoke(main, ["recompress", *args, "--no-progress"])


def test_dst_containing_src_is_refused_before_anything_is_written(tmp_path, small_zarr):
    parent = tmp_path / "parent"
    parent.mkdir()
    src = parent / "src.zarr"
    shutil.copytree(small_zarr, src)
    nc = parent / "nemo.nc"
    shutil.copy(NEMO, nc)
    before = _tree(parent)
    for source in (src, nc):
        result = _cli(str(source), str(parent), "--overwrite")
        assert result.exit_code != 0
        assert "inside" in result.output and "Traceback" not in result.output
        assert _tree(parent) == before  # source and everything next to it untouched


def test_dst_inside_src_is_refused(tmp_path, small_zarr):
    src = tmp_path / "src.zarr"
    shutil.copytree(small_zarr, src)
    before = _tree(src)
    for dst in (src / "tos", src / "new", src):
        result = _cli(str(src), str(dst), "--overwrite")
        assert result.exit_code != 0 and "SRC" in result.output, result.output
    assert _tree(src) == before
    with pytest.raises(paths.OverlapError):  # also through a symbolic link
        os.symlink(src, tmp_path / "link.zarr")
        recompress(tmp_path / "link.zarr", src / "x", overwrite=True)
    assert issubclass(paths.OverlapError, ZoptError)


def test_overwrite_refuses_a_directory_that_is_not_a_zarr_store(tmp_path, small_zarr):
    dst = tmp_path / "mywork"
    dst.mkdir()
    (dst / "thesis.tex").write_text("years of work")
    result = _cli(str(small_zarr), str(dst), "--overwrite")
    assert result.exit_code != 0 and "not a Zarr hierarchy" in result.output
    assert (dst / "thesis.tex").read_text() == "years of work"
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(paths.NotAZarrStoreError, match="is a file"):
        recompress(small_zarr, tmp_path / "f.txt", overwrite=True)
    assert (tmp_path / "f.txt").read_text() == "x"


def test_overwrite_keeps_the_old_store_when_publishing_fails(tmp_path, small_zarr, monkeypatch):
    dst = tmp_path / "dst.zarr"
    recompress(small_zarr, dst, decision="never")
    old = _tree(dst)
    real_replace = os.replace

    def failing_replace(a, b):
        if str(a).endswith(paths.PARTIAL_SUFFIX):
            raise OSError("simulated failure while publishing")
        return real_replace(a, b)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="simulated"):
        recompress(small_zarr, dst, overwrite=True)
    monkeypatch.undo()
    assert _tree(dst) == old  # the old store complete, nothing left next to it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst.zarr"]
    recompress(small_zarr, dst, overwrite=True)  # the new store replaces it; the aside copy is gone
    assert _tree(dst) != old and sorted(p.name for p in tmp_path.iterdir()) == ["dst.zarr"]
    np.testing.assert_array_equal(zarr.open_array(dst, path="tos")[...], zarr.open_array(small_zarr, path="tos")[...])


def test_a_crash_between_the_renames_is_recovered_by_the_next_job(tmp_path, small_zarr):
    dst = tmp_path / "dst.zarr"
    recompress(small_zarr, dst, decision="never")
    old = _tree(dst)
    os.rename(dst, str(dst) + paths.ASIDE_SUFFIX)  # killed after renaming the old store aside
    with pytest.raises(FileExistsError):  # the old store is put back, and then is DST
        recompress(small_zarr, dst)
    assert _tree(dst) == old and not Path(str(dst) + paths.ASIDE_SUFFIX).exists()
    shutil.copytree(dst, str(dst) + paths.ASIDE_SUFFIX)  # killed after publishing, before deleting the old one
    report = recompress(small_zarr, dst, overwrite=True)
    assert not Path(str(dst) + paths.ASIDE_SUFFIX).exists()
    assert any("killed job" in n for n in report.notes)


def test_relative_paths_are_resolved_on_the_client(tmp_path, small_zarr, monkeypatch):
    shutil.copytree(small_zarr, tmp_path / "src.zarr")
    monkeypatch.chdir(tmp_path)
    report = recompress("src.zarr", "out.zarr")
    assert report.dst == str(tmp_path / "out.zarr")
    assert (tmp_path / "out.zarr" / "zarr.json").exists()


def test_a_store_url_holding_other_keys_is_never_cleared(small_zarr):
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/foreign.zarr/notes.txt", b"years of work")
    for overwrite in (False, True):
        with pytest.raises((FileExistsError, paths.NotAZarrStoreError)):
            recompress(small_zarr, "memory://foreign.zarr", overwrite=overwrite)
    assert fs.cat("/foreign.zarr/notes.txt") == b"years of work"
    fs.rm("/foreign.zarr", recursive=True)


@pytest.mark.parametrize("where", ["missing parent", "parent is a file", "read-only parent"])
def test_a_dst_that_cannot_be_created_is_one_line_naming_dst_and_why(tmp_path, small_zarr, where, request):
    """Issue 35: ``DST`` under a missing, non-directory or unwritable parent failed with ENOENT naming
    ``….zopt-partial``; now one line naming DST and why, before anything is written."""
    if where == "missing parent":
        dst, why = tmp_path / "no" / "such" / "out.zarr", f"its parent directory {str(tmp_path / 'no' / 'such')!r} does not exist"
    elif where == "parent is a file":
        (tmp_path / "file.txt").write_text("x")
        dst, why = tmp_path / "file.txt" / "out.zarr", "is not a directory"
    elif os.geteuid() != 0:
        (tmp_path / "ro").mkdir(mode=0o555)
        dst, why = tmp_path / "ro" / "out.zarr", f"permission denied writing in {str(tmp_path / 'ro')!r}"
    else:  # root writes into any directory: a read-only file system
        (tmp_path / "ro").mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(tmp_path / "ro")],
                          capture_output=True).returncode != 0:
            pytest.skip("mounting a read-only tmpfs failed")
        request.addfinalizer(lambda: subprocess.run(["umount", str(tmp_path / "ro")], check=True))
        dst, why = tmp_path / "ro" / "out.zarr", f"{str(tmp_path / 'ro')!r} is on a read-only file system"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = _cli(str(small_zarr), str(dst))
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: cannot create dst {str(dst)!r}: ") and why in result.output, result.output
    assert result.output.count("\n") == 1 and "zopt-partial" not in result.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    with pytest.raises(OSError, match="cannot create dst") as e:
        recompress(small_zarr, dst)
    assert isinstance(e.value, ZoptError)


def test_a_partial_store_removed_under_the_job_is_said_in_words(tmp_path, small_zarr):
    """Issue 35: a partial store removed by another process while the job ran failed with only its
    path (``Error: file:///…/out.zarr.zopt-partial``); now the error says what happened."""
    dst = tmp_path / "out.zarr"

    def remove(partial, names):  # another process removes the partial store just before the publish
        shutil.rmtree(partial)

    with pytest.raises(FileNotFoundError, match=r"its partial store .*out\.zarr\.zopt-partial' was removed while the "
                                                r"job was writing it, by another process") as e:
        recompress(small_zarr, dst, before_publish=remove)
    assert isinstance(e.value, ZoptError) and "nothing was published (DST does not exist)" in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no lock left either


def test_the_lock_beside_dst_is_held_while_the_job_runs_and_removed_after(tmp_path, small_zarr):
    """``DST.zopt-lock`` exists from before anything of DST is created until the job has published;
    a job on the same DST meanwhile is refused naming the holder (here: this process)."""
    from zopt.store.lock import StoreLockedError

    dst = tmp_path / "out.zarr"
    seen = []

    def second_job(partial, names):
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        with pytest.raises(StoreLockedError, match=rf"dst {str(dst)!r} is being written by another zopt job "
                                                   rf"\(pid {os.getpid()} on host "):
            recompress(small_zarr, dst, overwrite=True)

    recompress(small_zarr, dst, before_publish=second_job)
    assert seen == [["out.zarr.zopt-lock", "out.zarr.zopt-partial"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr"]
