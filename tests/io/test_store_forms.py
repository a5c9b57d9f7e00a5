"""``zopt recompress`` on every form of store a user has, read back bit for bit, all groups included
(issue 15, "Done when"; item 3: child groups are kept). Made from iris-sample-data's NEMO SST."""

from __future__ import annotations

import os

import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner

from zopt import recompress
from zopt.cli.commands import main

iris_sample_data = pytest.importorskip("iris_sample_data")
NEMO = os.path.join(iris_sample_data.path, "NEMO", "nemo_1m_20150101-20150201_grid-T.nc")


def _nemo() -> xr.Dataset:
    return xr.open_dataset(NEMO, decode_cf=False, mask_and_scale=False, decode_times=False).load()


def _tos() -> np.ndarray:
    return _nemo()["tos"].values[0]  # 330 × 360 float32, land = 1e20


def _tree() -> xr.DataTree:
    ds = _nemo()
    coarse = ds[["tos"]].isel(y=slice(None, None, 3), x=slice(None, None, 3)).rename(y="yc", x="xc")
    coarse.attrs = {"title": "every third point"}
    return xr.DataTree.from_dict({"/": ds, "/coarse": coarse, "/coarse/finer": coarse.isel(yc=slice(0, 20)).rename(yc="yf")})


def _make(form: str, path: str) -> None:
    tos = _tos()
    if form == "netcdf":
        os.symlink(NEMO, path)
    elif form in ("zarr-v2", "zarr-v3"):
        _nemo().to_zarr(path, zarr_format=int(form[-1]), consolidated=form == "zarr-v2")
    elif form == "root-array":
        zarr.create_array(path, data=tos, chunks=(110, 120), dimension_names=("y", "x"), attributes={"units": "degC"})
    elif form == "raw-v3":
        g = zarr.open_group(path, mode="w", attributes={"source": "NEMO"})
        g.create_array("tos", data=tos, chunks=(110, 120), compressors=None, dimension_names=("y", "x"))
    elif form == "sharded-v3":
        g = zarr.open_group(path, mode="w")
        g.create_array("tos", data=tos, chunks=(30, 36), shards=(330, 360), dimension_names=("y", "x"))
    elif form == "big-endian":
        from zarr.codecs import BytesCodec

        g = zarr.open_group(path, mode="w")
        g.create_array("tos", data=tos.astype(">f4"), chunks=(110, 120), serializer=BytesCodec(endian="big"),
                       dimension_names=("y", "x"))
    elif form in ("tree-v2", "tree-v3"):
        _tree().to_zarr(path, zarr_format=int(form[-1]), consolidated=False)
    else:  # pragma: no cover
        raise AssertionError(form)


def _values(path: str) -> dict[str, tuple[str, bytes]]:
    """Every array of a store (or variable of a netCDF file) as (dtype, bytes), by its path."""
    if os.path.isfile(path):
        return {n: (str(v.dtype), np.ascontiguousarray(v.values).tobytes()) for n, v in _nemo().variables.items()}
    node = zarr.open(path, mode="r")
    if isinstance(node, zarr.Array):
        a = node[...]
        return {"": (a.dtype.newbyteorder("=").str, a.astype(a.dtype.newbyteorder("=")).tobytes())}
    out = {}
    for name, arr in node.members(max_depth=None):
        if isinstance(arr, zarr.Array):
            a = arr[...]
            native = a.dtype.newbyteorder("=") if a.dtype.kind in "biufc" else a.dtype
            out[name] = (str(native), np.ascontiguousarray(a.astype(native)).tobytes())
    return out


FORMS = ["netcdf", "zarr-v2", "zarr-v3", "root-array", "raw-v3", "sharded-v3", "big-endian", "tree-v2", "tree-v3"]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("form", FORMS)
def test_every_store_form_recompresses_bit_for_bit(tmp_path, form):
    src, dst = str(tmp_path / f"src-{form}"), str(tmp_path / "out.zarr")
    _make(form, src)
    result = CliRunner().invoke(main, ["recompress", src, dst, "--no-progress"])
    assert result.exit_code == 0, result.output
    before, after = _values(src), _values(dst)
    assert sorted(after) == sorted(before)
    for name in before:
        assert after[name] == before[name], name
    out = zarr.open(dst, mode="r")
    if form.startswith("tree"):
        assert dict(out["coarse"].attrs)["title"] == "every third point"
        assert "coarse/tos" in result.output and "coarse/finer/tos" in result.output
        xr.testing.assert_identical(xr.open_datatree(dst, engine="zarr").load(), xr.open_datatree(src, engine="zarr").load())
    if form == "root-array":
        assert isinstance(out, zarr.Array) and out.metadata.dimension_names == ("y", "x")
        assert dict(out.attrs) == {"units": "degC"}


def test_a_netcdf_file_with_groups_is_refused_naming_them(tmp_path):
    src = tmp_path / "tree.nc"
    _tree().to_netcdf(src)
    result = CliRunner().invoke(main, ["recompress", str(src), str(tmp_path / "o.zarr"), "--no-progress"])
    assert result.exit_code != 0 and "['coarse']" in result.output and "drop" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "o.zarr").exists()


def test_variables_of_child_groups_are_named_by_path(tmp_path):
    src, dst = str(tmp_path / "tree.zarr"), tmp_path / "out.zarr"
    _make("tree-v3", src)
    result = CliRunner().invoke(main, ["recompress", src, str(dst), "--variable", "coarse/tos", "--no-progress",
                                       "--menu", "classic"])
    assert result.exit_code == 0, result.output
    rewritten = zarr.open_array(dst, path="coarse/tos")
    kept = zarr.open_array(dst, path="tos")
    assert "Conditional" in str(rewritten.metadata.codecs) and "Conditional" not in str(kept.metadata.codecs)
    assert _values(str(dst)) == _values(src)
    result = CliRunner().invoke(main, ["recompress", src, str(tmp_path / "o2.zarr"), "--variable", "fine/tos",
                                       "--no-progress"])
    assert result.exit_code != 0 and "'fine/tos'" in result.output and "child groups ['coarse']" in result.output


def test_a_root_array_into_a_store_url(tmp_path):
    import zarr.storage

    src = str(tmp_path / "root.zarr")
    _make("root-array", src)
    report = recompress(src, "memory://forms-root.zarr")
    (rep,) = report.arrays
    assert rep.name == "" and 0 < rep.stored_after < rep.logical_bytes
    out = zarr.open_array(zarr.storage.FsspecStore.from_url("memory://forms-root.zarr", read_only=True))
    assert out[...].tobytes() == _tos().tobytes()
