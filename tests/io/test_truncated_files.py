"""Truncated netCDF/HDF5 files are refused (issue 35 item 1): netCDF-C reads the missing end of a
netCDF-3 file as zeros or garbage, so ``zopt recompress t.cdf o.zarr`` wrote made-up rows and
``zopt verify`` passed them. Real files written by netCDF4 (classic, 64-bit offset, 64-bit data,
netCDF-4), cut with ``head -c``; the CLI runs for real and prints one line."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from zopt.cli.commands import main
from zopt.io.file_check import TruncatedFileError, check_file, expected_size
from zopt.io.paths import PARTIAL_SUFFIX

netCDF4 = pytest.importorskip("netCDF4")

FORMATS = ["NETCDF3_CLASSIC", "NETCDF3_64BIT_OFFSET", "NETCDF3_64BIT_DATA"]


def _write(path: Path, fmt: str, record: bool, extra: bool = False) -> Path:
    """``v`` (time, y, x) float32, ``w`` (y, x) int16 and the coordinate ``time``; ``time`` a
    record (unlimited) dimension if ``record``; ``extra``: record variables of odd sizes (a
    byte and a char variable, padded differently) and a scalar."""
    with netCDF4.Dataset(path, "w", format=fmt) as nc:
        nc.createDimension("time", None if record else 12)
        nc.createDimension("y", 15)
        nc.createDimension("x", 20)
        nc.setncattr("title", "cut short")
        t = nc.createVariable("time", "f8", ("time",))
        t[:] = np.arange(12.0)
        v = nc.createVariable("v", "f4", ("time", "y", "x"))
        v.units = "K"
        v[:] = np.arange(12 * 15 * 20, dtype="f4").reshape(12, 15, 20) + 1
        nc.createVariable("w", "i2", ("y", "x"))[:] = 3
        if extra:
            nc.createDimension("three", 3)
            nc.createVariable("flag", "i1", ("time", "three"))[:] = np.ones((12, 3), "i1")
            nc.createVariable("s", "f8", ())[...] = 2.5
    return path


def _cli(*args) -> tuple[int, str]:
    r = CliRunner().invoke(main, [*map(str, args), "--no-progress"])
    return r.exit_code, " ".join(r.output.split())


def _cut(src: Path, dst: Path, size: int) -> Path:
    dst.write_bytes(src.read_bytes()[:size])
    return dst


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("record,extra", [(False, False), (True, False), (True, True), (False, True)])
def test_a_complete_file_needs_no_more_than_it_has(tmp_path, fmt, record, extra):
    """The size computed from the header is the file's own (netCDF-C pads to it) or at most its
    last padding short: no complete file is refused, and one byte fewer than needed is."""
    path = _write(tmp_path / "f.nc", fmt, record, extra)
    kind, need = expected_size(path)
    size = path.stat().st_size
    assert kind.startswith("netCDF-3") and size - 4 < need <= size
    check_file(path)
    with pytest.raises(TruncatedFileError) as info:
        check_file(_cut(path, tmp_path / "t.nc", need - 1))
    assert info.value.expected == need and info.value.actual == need - 1


def test_a_netcdf4_file_is_checked_against_its_superblock(tmp_path):
    path = tmp_path / "h.nc"
    xr.Dataset({"v": (("y", "x"), np.arange(4000.0).reshape(40, 100))}).to_netcdf(path, engine="netcdf4")
    kind, need = expected_size(path)
    assert kind == "HDF5" and need == path.stat().st_size
    with pytest.raises(TruncatedFileError, match="its HDF5 header needs at least"):
        check_file(_cut(path, tmp_path / "t.nc", need - 100))


# fractions of the file kept: in the header, in the fixed variables, in the records, one byte short
CUTS = [0.002, 0.3, 0.6, 0.9]


@pytest.mark.parametrize("fmt", FORMATS[:2])
@pytest.mark.parametrize("record", [False, True], ids=["fixed", "record"])
def test_recompress_and_verify_refuse_a_truncated_file_naming_it_and_both_sizes(tmp_path, fmt, record):
    full = _write(tmp_path / "full.nc", fmt, record)
    good = tmp_path / "good.zarr"
    assert _cli("recompress", full, good)[0] == 0
    size = full.stat().st_size
    for cut in [int(size * c) for c in CUTS] + [size - 1]:
        t = _cut(full, tmp_path / "t.cdf", cut)
        dst = tmp_path / "o.zarr"
        code, out = _cli("recompress", t, dst)
        assert code == 1 and f"src: {t}: truncated or corrupt file" in out, (cut, out)
        if cut > 200:  # past the header: both sizes named
            assert "header needs at least" in out and f"the file has {cut} (" in out, out
        assert not dst.exists() and not Path(str(dst) + PARTIAL_SUFFIX).exists()
        code, out = _cli("verify", t, good)
        assert code == 1 and f"src: {t}: truncated or corrupt file" in out, (cut, out)


def _member(folder: Path, i: int, fmt: str) -> Path:
    ds = xr.Dataset({"v": (("time", "x"), np.arange(2000.0).reshape(1, 2000) + i)}, coords={"time": [float(i)]})
    path = folder / f"f{i}.nc"
    ds.to_netcdf(path, format=fmt, engine="netcdf4")
    return path


@pytest.mark.parametrize("fmt,words", [("NETCDF3_CLASSIC", "its netCDF-3 (CDF-1) header needs at least"),
                                       ("NETCDF4", "its HDF5 header needs at least")])
def test_one_truncated_file_of_several_is_named(tmp_path, fmt, words):
    folder = tmp_path / "nc"
    folder.mkdir()
    files = [_member(folder, i, fmt) for i in range(4)]
    size = files[2].stat().st_size
    _cut(files[2], files[2], size // 2)
    dst = tmp_path / "o.zarr"
    code, out = _cli("recompress", folder / "*.nc", dst, "--concat-dim", "time")
    assert code == 1 and f"src: {files[2]}: truncated or corrupt file: {words} {size} bytes" in out, out
    assert f"the file has {size // 2}" in out and not dst.exists()
    code, out = _cli("verify", folder / "*.nc", tmp_path / "any.zarr", "--concat-dim", "time")
    assert code == 1 and f"src: {files[2]}: truncated or corrupt file" in out, out


def test_a_corrupt_hdf5_member_is_named_as_corrupt(tmp_path):
    """Not cut short but overwritten: the HDF5 library's own refusal, named as a corrupt file."""
    folder = tmp_path / "nc"
    folder.mkdir()
    files = [_member(folder, i, "NETCDF4") for i in range(3)]
    data = bytearray(files[1].read_bytes())
    data[200:600] = b"\xff" * 400
    files[1].write_bytes(bytes(data))
    code, out = _cli("recompress", folder / "*.nc", tmp_path / "o.zarr", "--concat-dim", "time")
    assert code == 1 and f"src: {files[1]}: truncated or corrupt file" in out and "HDF error" in out, out
    code, out = _cli("recompress", files[1], tmp_path / "o.zarr")
    assert code == 1 and f"src: {files[1]}: truncated or corrupt file" in out, out


def test_a_header_cut_short_is_named(tmp_path):
    full = _write(tmp_path / "full.nc", "NETCDF3_CLASSIC", True)
    t = _cut(full, tmp_path / "t.nc", 40)
    with pytest.raises(TruncatedFileError, match=r"its header is cut short at byte 40"):
        check_file(t)
    assert check_file(tmp_path) is None  # a directory, like a URL or another format: not for this check
    other = tmp_path / "x.txt"
    other.write_bytes(b"CDF")
    check_file(other)
    assert os.path.getsize(other) == 3


@pytest.mark.parametrize("fmt,width", [("NETCDF3_CLASSIC", 4), ("NETCDF3_64BIT_DATA", 8)])
def test_a_streaming_file_without_numrecs_is_not_refused(tmp_path, fmt, width):
    """numrecs all ones: a file written as a stream, its records counted from its size. Nothing
    to compare, so not refused (a CDF-5 one once needed 2**64 records)."""
    path = _write(tmp_path / "f.nc", fmt, True)
    data = bytearray(path.read_bytes())
    data[4:4 + width] = b"\xff" * width
    path.write_bytes(bytes(data))
    assert expected_size(path)[1] is None
    check_file(path)
