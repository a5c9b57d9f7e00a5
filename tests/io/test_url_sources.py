"""fsspec URL sources (``s3://`` on a real S3-compatible server on 127.0.0.1, ``memory://``,
``file://``): recompress reads them as it reads local stores, and the result is bit for bit."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from zopt import recompress
from zopt.cli.commands import main


def _values(rng: np.random.Generator) -> np.ndarray:
    a = np.round(np.cumsum(rng.standard_normal((96, 120)), axis=1), 2).astype("f4")
    a[5, :7] = np.nan
    return a


@pytest.fixture
def local_group(tmp_path):
    """A v3 group (two arrays, group and array attributes) and a root-array store, on disk."""
    rng = np.random.default_rng(3)
    g = zarr.create_group(str(tmp_path / "g.zarr"), attributes={"title": "url source"})
    arrays = {}
    for name in ("u", "v"):
        arrays[name] = _values(rng)
        g.create_array(name, shape=(96, 120), chunks=(48, 60), dtype="f4", dimension_names=("y", "x"),
                       attributes={"units": "m"})[:] = arrays[name]
    r = zarr.create_array(str(tmp_path / "r.zarr"), shape=(96, 120), chunks=(32, 40), dtype="f4")
    arrays[""] = _values(rng)
    r[:] = arrays[""]
    return tmp_path, arrays


def _same(url: str, name: str, expected: np.ndarray) -> None:
    out = zarr.open_array(url, path=name, mode="r")
    assert out[:].view("u4").tobytes() == expected.view("u4").tobytes()


def test_s3_source_into_s3_destination_is_bit_for_bit(local_group, s3_bucket):
    root, arrays = local_group
    fs = fsspec.filesystem("s3")
    fs.put(str(root / "g.zarr"), f"{s3_bucket}/g.zarr", recursive=True)
    fs.put(str(root / "r.zarr"), f"{s3_bucket}/r.zarr", recursive=True)
    res = CliRunner().invoke(main, ["recompress", f"{s3_bucket}/g.zarr", f"{s3_bucket}/g2.zarr", "--chunks",
                                    "y=16,x=20", "--shards", "y=48,x=60", "--no-progress", "--scheduler", "synchronous"])
    assert res.exit_code == 0, res.output
    for name in ("u", "v"):
        _same(f"{s3_bucket}/g2.zarr", name, arrays[name])
        assert dict(zarr.open_array(f"{s3_bucket}/g2.zarr", path=name, mode="r").attrs) == {"units": "m"}
    assert dict(zarr.open_group(f"{s3_bucket}/g2.zarr", mode="r").attrs) == {"title": "url source"}
    assert len([p for p in fs.find(f"{s3_bucket}/g2.zarr") if "/c/" in p]) == 2 * 4  # 2x2 shards per array
    report = recompress(f"{s3_bucket}/r.zarr", f"{s3_bucket}/r2.zarr", chunks=(16, 20), shards=(32, 40),
                        scheduler="synchronous")
    _same(f"{s3_bucket}/r2.zarr", "", arrays[""])
    assert report.arrays[0].stored_before and report.source_bytes >= report.arrays[0].stored_before


def test_s3_source_into_a_local_directory_and_the_overlap_refusal(local_group, s3_bucket, tmp_path):
    root, arrays = local_group
    fsspec.filesystem("s3").put(str(root / "g.zarr"), f"{s3_bucket}/g.zarr", recursive=True)
    recompress(f"{s3_bucket}/g.zarr", tmp_path / "out.zarr", chunks=(16, 20), scheduler="synchronous")
    _same(str(tmp_path / "out.zarr"), "u", arrays["u"])
    res = CliRunner().invoke(main, ["recompress", f"{s3_bucket}/g.zarr", f"{s3_bucket}/g.zarr/inner.zarr",
                                    "--no-progress"])
    assert res.exit_code != 0 and "overlap" in res.output and len(res.output.strip().splitlines()) == 1


def test_memory_and_file_url_sources(local_group, tmp_path):
    root, arrays = local_group
    fs = fsspec.filesystem("memory")
    fs.put(str(root / "g.zarr"), "/zsrc/g.zarr", recursive=True)
    try:
        recompress("memory://zsrc/g.zarr", tmp_path / "m.zarr", chunks=(16, 20), scheduler="synchronous")
    finally:
        fs.rm("/zsrc", recursive=True)
    _same(str(tmp_path / "m.zarr"), "v", arrays["v"])
    recompress(f"file://{root / 'r.zarr'}", tmp_path / "f.zarr", chunks=(16, 20), scheduler="synchronous")
    _same(str(tmp_path / "f.zarr"), "", arrays[""])


def test_unreachable_s3_endpoint_is_one_line(tmp_path, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": f"http://127.0.0.1:{port}",
                                                   "config_kwargs": {"retries": {"max_attempts": 1},
                                                                     "connect_timeout": 1}})
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    res = CliRunner().invoke(main, ["recompress", "s3://nowhere/x.zarr", str(tmp_path / "o.zarr"), "--no-progress"])
    assert res.exit_code != 0
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "cannot reach s3://nowhere/x.zarr" in lines[0], res.output
    assert list(tmp_path.iterdir()) == []


def test_analyze_and_plan_read_a_url_source(local_group, tmp_path):
    root, _ = local_group
    fs = fsspec.filesystem("memory")
    fs.put(str(root / "g.zarr"), "/zsrc2/g.zarr", recursive=True)
    try:
        res = CliRunner().invoke(main, ["analyze", "memory://zsrc2/g.zarr", "u", "--no-progress", "--scheduler",
                                        "synchronous"])
        assert res.exit_code == 0, res.output
        assert "u" in res.output
        res = CliRunner().invoke(main, ["plan", "create", "memory://zsrc2/g.zarr", "-o", str(tmp_path / "p.zarr"),
                                        "--no-progress", "--scheduler", "synchronous"])
        assert res.exit_code == 0, res.output
        assert (tmp_path / "p.zarr").is_dir()
    finally:
        fs.rm("/zsrc2", recursive=True)
