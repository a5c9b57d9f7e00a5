"""The unsharded write paths open each array once per worker process and job (issue 17), not once
per chunk: counted by wrapping zarr's open in the task module, on a synchronous scheduler and on
threads."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zopt.job.tasks as tasks
from zopt import recompress, recompress_in_place

CHAIN = [{"name": "bytes", "configuration": {"endian": "little"}},
         {"name": "conditional", "configuration": {"codecs": [{"name": "zstd", "configuration": {"level": 1}}]}}]


@pytest.fixture
def src(tmp_path):
    a = zarr.create_array(tmp_path / "s.zarr", name="v", shape=(64, 96), chunks=(8, 12), dtype="f4", fill_value=0)
    a[:] = np.arange(64 * 96, dtype="f4").reshape(64, 96)
    return tmp_path / "s.zarr"


def _counting(monkeypatch, module, attr):
    calls = []
    real = getattr(module, attr)

    def count(*args, **kwargs):
        calls.append(kwargs.get("path"))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, attr, count)
    return calls


@pytest.mark.parametrize("scheduler", ["synchronous", "threads"])
def test_recompress_and_in_place_open_an_unsharded_array_once(tmp_path, src, monkeypatch, scheduler):
    opened = _counting(monkeypatch, zarr, "open_array")  # write_region opens its destination through zarr
    report = recompress(src, tmp_path / "d.zarr", codecs=CHAIN, chunks=(8, 12), shards=(8, 12), scheduler=scheduler)  # unsharded
    assert report.arrays[0].chunks_written == 64
    # the client opens it a few times (create, check, report); the tasks once per process (two
    # threads may race to the first open) — not once per chunk (64)
    assert 1 <= opened.count("v") <= 8
    reopened = _counting(monkeypatch, tasks, "open_array")
    report = recompress_in_place(tmp_path / "d.zarr", decision="never", scheduler=scheduler)
    assert report.arrays[0].chunks_written == 64 and report.arrays[0].masks == {0: 64}
    assert 1 <= len(reopened) <= 4
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "d.zarr", path="v")[:], zarr.open_array(src, path="v")[:])
