"""A full disk: one line naming the path and the space needed, the partial output removed, a
non-zero exit; the source and an existing DST untouched. On a real 1 MiB tmpfs when the tests
run as root, else (and also) with positional writes failing with ENOSPC."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from zopt.cli.commands import main


@pytest.fixture
def src(tmp_path) -> Path:
    a = np.random.default_rng(0).standard_normal((512, 1024)).astype("f4")  # 2 MiB, incompressible
    zarr.open_group(tmp_path / "src.zarr", mode="w").create_array("v", shape=a.shape, chunks=(128, 1024), dtype="f4")[:] = a
    return tmp_path / "src.zarr"


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs mounted at tmp_path/disk (root only)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


def _one_line_error(res, dst: Path) -> str:
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert "no space left on the device writing" in res.output and str(dst) in res.output.replace("\n", "")
    assert "needed" in res.output and "free there" in res.output
    return res.output


@pytest.mark.parametrize("layout", ["compact", "fixed-slot"])
def test_a_full_tmpfs_gives_one_line_and_leaves_nothing(src, small_disk, layout):
    dst = small_disk / "out.zarr"
    res = CliRunner().invoke(main, ["recompress", str(src), str(dst), "--codecs", '[{"name": "bytes"}]',
                                    "--chunks", "64,256", "--shards", "128,1024", "--layout", layout, "--no-progress"])
    out = _one_line_error(res, dst)
    left = [p.name for p in small_disk.iterdir()]
    # the partial store is removed, or kept (and said so) for a resume once there is space
    assert left == [] or (left == ["out.zarr.zopt-partial"] and "run the same command to resume" in out.replace("\n", ""))
    assert zarr.open_array(src, path="v")[:].shape == (512, 1024)


def test_enospc_from_positional_writes(src, tmp_path, monkeypatch):
    real = os.pwrite

    def full(fd, data, offset):
        if len(memoryview(data)) > 4096:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data, offset)

    dst = tmp_path / "out.zarr"
    zarr.open_group(dst, mode="w", attributes={"previous": "output"})
    before = {str(p.relative_to(dst)): p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    monkeypatch.setattr(os, "pwrite", full)
    res = CliRunner().invoke(main, ["recompress", str(src), str(dst), "--overwrite", "--chunks", "64,256",
                                    "--shards", "128,1024", "--layout", "fixed-slot", "--no-progress"])
    out = _one_line_error(res, dst)
    assert "DST is as it was" in out.replace("\n", "")
    assert {str(p.relative_to(dst)): p.read_bytes() for p in dst.rglob("*") if p.is_file()} == before
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["out.zarr", "src.zarr"] or (left == ["out.zarr", "out.zarr.zopt-partial", "src.zarr"]
                                                 and "resume" in out.replace("\n", ""))


def test_an_existing_dst_is_refused_in_cli_words(src, tmp_path):
    dst = tmp_path / "out.zarr"
    zarr.open_group(dst, mode="w")
    res = CliRunner().invoke(main, ["recompress", str(src), str(dst), "--no-progress"])
    assert res.exit_code == 1 and "exists; use --overwrite to replace it" in res.output
    assert "overwrite=True" not in res.output
