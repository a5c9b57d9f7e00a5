"""Object-store destinations against a real S3-compatible server on 127.0.0.1 (moto's
``ThreadedMotoServer``, fixture ``s3_bucket``): packed shards put whole, values bit for bit,
refusal to overwrite, and nothing left behind by a failed job."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from zopt import recompress
from zopt.cli.commands import main


@pytest.fixture
def source(tmp_path):
    rng = np.random.default_rng(1)
    a = np.round(np.cumsum(rng.standard_normal((96, 120)), axis=1), 2).astype("f4")
    a[60:] = 0
    zarr.open_group(tmp_path / "src.zarr", mode="w").create_array(
        "v", shape=a.shape, chunks=(48, 60), dtype="f4", fill_value=0, dimension_names=("y", "x"))[:] = a
    return tmp_path / "src.zarr", a


def _files(url: str) -> dict[str, int]:
    fs, path = fsspec.core.url_to_fs(url)
    return {p[len(path):]: fs.size(p) for p in fs.find(path)}


def test_recompress_into_s3_reads_back_bit_for_bit(source, s3_bucket):
    src, a = source
    dst = f"{s3_bucket}/out.zarr"
    res = CliRunner().invoke(main, ["recompress", str(src), dst, "--chunks", "y=16,x=20", "--shards", "y=48,x=60",
                                    "--layout", "fixed-slot", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "packed" in res.output  # no positional writes on S3: fixed slots fall back, and it says so
    out = zarr.open_array(dst, path="v", mode="r")
    assert out[:].tobytes() == a.tobytes()
    files = _files(dst)
    shards = {k: n for k, n in files.items() if "/c/" in k}
    assert len(shards) == 4  # 2x2 shards, every one holding data
    res = CliRunner().invoke(main, ["recompress", str(src), dst, "--no-progress"])
    assert res.exit_code != 0 and "overwrite" in res.output
    assert _files(dst) == files  # the refused run touched nothing


def test_a_failed_job_leaves_nothing_in_the_bucket(source, s3_bucket, failing_decision):
    src, _ = source
    explode, calls = failing_decision(2, "disk on fire")
    with pytest.raises(RuntimeError, match="disk on fire"):
        recompress(src, f"{s3_bucket}/out.zarr", chunks=(16, 20), shards=(48, 60), decision=explode,
                   scheduler="synchronous")
    assert len(calls) > 2
    assert _files(f"{s3_bucket}/out.zarr") == {}
