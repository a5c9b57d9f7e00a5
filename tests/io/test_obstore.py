"""Object stores through obstore (zarr's ``ObjectStore``) against a real S3-compatible server on
127.0.0.1 (moto, fixture ``s3_bucket``): the same values and bytes as through fsspec, a glob of
netCDF files listed through the store, a rewritten file (new ETag) refused on resume, errors
naming the location."""

from __future__ import annotations

import pickle

import fsspec
import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from tests.io.test_multi import raw_concat, write_files
from zopt import recompress
from zopt.cli.commands import main
from zopt.errors import OptionError, ZoptError
from zopt.io import locations as loc
from zopt.io import object_stores
from zopt.io.object_stores import CLIENT_ENV, SourceUnreachableError

pytest.importorskip("obstore", reason="obstore does not install on this leg: the fsspec path is tested instead")


@pytest.fixture
def s3_group(s3_bucket, tmp_path):
    """A v3 group of two arrays (one with a NaN, one mostly fill) on S3; ``(url, {name: values})``."""
    rng = np.random.default_rng(5)
    g = zarr.create_group(str(tmp_path / "g.zarr"), attributes={"title": "obstore"})
    values = {"u": np.round(np.cumsum(rng.standard_normal((64, 90)), axis=1), 2).astype("f4"),
              "w": np.zeros((64, 90), "i4")}
    values["u"][3, :5] = np.nan
    values["w"][:8] = rng.integers(0, 1000, (8, 90))
    for name, a in values.items():
        g.create_array(name, shape=a.shape, chunks=(32, 45), dtype=a.dtype, dimension_names=("y", "x"))[:] = a
    fsspec.filesystem("s3").put(str(tmp_path / "g.zarr"), f"{s3_bucket}/g.zarr", recursive=True)
    return f"{s3_bucket}/g.zarr", values


def _keys(url: str) -> dict[str, bytes]:
    fs, path = fsspec.core.url_to_fs(url)
    return {p[len(path):]: fs.cat_file(p) for p in fs.find(path)}


def _local_keys(path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_urls_resolve_once_to_obstore_fsspec_or_a_local_path(s3_bucket, tmp_path, monkeypatch):
    where = loc.where(f"{s3_bucket}/x.zarr")
    assert where.kind == "obstore" and loc.where(f"{s3_bucket}/x.zarr") is where  # resolved once, then the same
    store = where.zarr_store()
    assert isinstance(store, zarr.storage.ObjectStore) and str(store) == f"{s3_bucket}/x.zarr" and store.read_only
    assert str(pickle.loads(pickle.dumps(store))) == f"{s3_bucket}/x.zarr"  # a Dask task argument
    assert loc.where("memory://x.zarr").kind == "fsspec"
    assert loc.where(f"file://{tmp_path}").kind == "local" and loc.zarr_store(f"file://{tmp_path}") == str(tmp_path)
    monkeypatch.setenv(CLIENT_ENV, "fsspec")
    assert loc.where(f"{s3_bucket}/x.zarr").kind == "fsspec"
    assert isinstance(loc.zarr_store(f"{s3_bucket}/x.zarr"), zarr.storage.FsspecStore)
    monkeypatch.setenv(CLIENT_ENV, "boto")
    with pytest.raises(OptionError, match=f"{CLIENT_ENV}: 'boto' is not a client of object stores; allowed: "
                                          "obstore, fsspec"):
        loc.where(f"{s3_bucket}/x.zarr")
    monkeypatch.setattr(object_stores, "obstore_available", lambda: False)  # a leg without obstore
    monkeypatch.delenv(CLIENT_ENV)
    assert loc.where(f"{s3_bucket}/z.zarr").kind == "fsspec"
    monkeypatch.setenv(CLIENT_ENV, "obstore")  # asked for, and missing: refused, not ignored
    with pytest.raises(OptionError, match=f"{CLIENT_ENV}: obstore is not installed"):
        loc.where(f"{s3_bucket}/y.zarr")


@pytest.mark.parametrize("to", ["s3", "local"])
def test_obstore_gives_fsspecs_bytes(s3_group, s3_bucket, tmp_path, monkeypatch, to):
    src, values = s3_group
    opts = {"chunks": (16, 15), "shards": (32, 45), "scheduler": "synchronous"}
    out = {}
    for client in ("obstore", "fsspec"):
        monkeypatch.setenv(CLIENT_ENV, client)
        dst = f"{s3_bucket}/{client}.zarr" if to == "s3" else tmp_path / f"{client}.zarr"
        recompress(src, dst, **opts)
        for name, a in values.items():
            got = zarr.open_array(str(dst), path=name, mode="r")[:]
            assert got.tobytes() == a.tobytes(), (client, name)
        out[client] = _keys(dst) if to == "s3" else _local_keys(dst)
    assert out["obstore"] == out["fsspec"]  # every key, metadata and shards, byte for byte
    assert sum("/c/" in k for k in out["obstore"]) == 4 + 2  # w's shards holding only fill values are not written


def test_a_glob_of_netcdf_files_on_s3_is_listed_through_the_store_and_combined(s3_bucket, tmp_path):
    files = write_files(tmp_path / "nc", 5)
    fs = fsspec.filesystem("s3")
    for f in files:
        fs.put(str(f), f"{s3_bucket}/archive/{f.name}")
    fs.pipe(f"{s3_bucket}/archive/README.txt", b"not a match")
    fs.put(str(files[0]), f"{s3_bucket}/archive/old/{files[0].name}")  # `*` stays in one folder
    pattern = f"{s3_bucket}/archive/*.nc"
    assert loc.glob(pattern) == sorted(f"{s3_bucket}/archive/{f.name}" for f in files)
    dst = tmp_path / "out.zarr"
    recompress(pattern, dst, concat_dim="time", scheduler="threads")  # GETs outside the HDF5 lock, in threads
    g = zarr.open_group(dst, mode="r")
    for name in ("sst", "count", "time"):  # the files' stored values, in time order, read by netCDF4 itself
        assert np.asarray(g[name][:]).tobytes() == np.asarray(raw_concat(files, name)).tobytes(), name


def test_a_remote_file_rewritten_between_a_kill_and_the_resume_is_refused(s3_bucket, tmp_path):
    from zopt.store.journal import ResumeMismatchError

    files = sorted(write_files(tmp_path / "nc", 6, shuffle_names=False))
    fs = fsspec.filesystem("s3")
    for f in files:
        fs.put(str(f), f"{s3_bucket}/arc/{f.name}")
    pattern, dst = f"{s3_bucket}/arc/*.nc", tmp_path / "out.zarr"
    opts = {"concat_dim": "time", "chunks": "time=3", "shards": "time=6", "scheduler": "synchronous"}

    def interrupted(partial, names):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        recompress(pattern, dst, before_publish=interrupted, **opts)
    data = bytearray(files[2].read_bytes())
    data[len(data) // 2] ^= 1  # same size, new content: only the ETag tells
    fs.pipe(f"{s3_bucket}/arc/{files[2].name}", bytes(data))
    with pytest.raises(ResumeMismatchError, match=rf"the source changed \(modified: {s3_bucket}/arc/{files[2].name}\)"):
        recompress(pattern, dst, **opts)
    assert not dst.exists()
    fs.put(str(files[2]), f"{s3_bucket}/arc/{files[2].name}")  # the same bytes again: the same ETag, resumed
    recompress(pattern, dst, **opts)
    assert dst.exists()


def test_a_truncated_remote_netcdf_file_is_refused_naming_it(s3_bucket, tmp_path):
    files = sorted(write_files(tmp_path / "nc", 2, shuffle_names=False))
    fs = fsspec.filesystem("s3")
    fs.put(str(files[0]), f"{s3_bucket}/t/{files[0].name}")
    fs.pipe(f"{s3_bucket}/t/{files[1].name}", files[1].read_bytes()[:-2000])
    res = CliRunner().invoke(main, ["recompress", f"{s3_bucket}/t/*.nc", str(tmp_path / "o.zarr"), "--concat-dim",
                                    "time", "--no-progress", "--scheduler", "synchronous"])
    assert res.exit_code != 0 and f"{s3_bucket}/t/{files[1].name}: truncated" in res.output, res.output


def test_an_obstore_error_names_the_location_and_is_a_zopt_error(tmp_path, monkeypatch):
    import socket

    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": f"http://127.0.0.1:{port}", "config_kwargs": {
        "retries": {"max_attempts": 1}, "connect_timeout": 1}})  # botocore's settings: obstore's too
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv(CLIENT_ENV, "obstore")
    with pytest.raises(SourceUnreachableError, match=r"^src: cannot reach s3://nowhere/x.zarr/zarr.json \(") as err:
        loc.read_bytes("s3://nowhere/x.zarr/zarr.json")
    assert isinstance(err.value, ZoptError) and "\n" not in str(err.value)
    store = loc.zarr_store("s3://nowhere/x.zarr", read_only=False)
    with pytest.raises(SourceUnreachableError, match=r"^dst: cannot reach s3://nowhere/x.zarr/v/c/0 \("):
        sync(store.set("v/c/0", default_buffer_prototype().buffer.from_bytes(b"1")))
    zarr.create_array(str(tmp_path / "s.zarr"), shape=(4,), dtype="i2")[:] = 1
    res = CliRunner().invoke(main, ["recompress", str(tmp_path / "s.zarr"), "s3://nowhere/y.zarr", "--no-progress"])
    lines = res.output.strip().splitlines()
    assert res.exit_code != 0 and len(lines) == 1 and "cannot reach s3://nowhere/y.zarr" in lines[0], res.output


def test_an_http_source_stays_with_fsspec(tmp_path):
    """A Zarr store served by a plain web server (``http.server``: index pages, no WebDAV, which is
    all obstore lists over HTTP) reads through fsspec, its folders listed from the index pages."""
    import functools
    import http.server
    import threading

    a = np.round(np.cumsum(np.random.default_rng(2).standard_normal((40, 50)), axis=1), 2).astype("f4")
    zarr.create_group(str(tmp_path / "www" / "g.zarr")).create_array(
        "v", shape=a.shape, chunks=(20, 25), dtype="f4", dimension_names=("y", "x"))[:] = a
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "www"))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/g.zarr"
        assert loc.where(url).kind == "fsspec" and isinstance(loc.zarr_store(url), zarr.storage.FsspecStore)
        recompress(url, tmp_path / "out.zarr", chunks=(10, 25), scheduler="synchronous")
    finally:
        server.shutdown()
    assert zarr.open_array(str(tmp_path / "out.zarr"), path="v", mode="r")[:].tobytes() == a.tobytes()
