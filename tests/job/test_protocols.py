"""Sources and destinations behind two protocols (issue 37): ``zopt.io.source_kinds.Source`` made by
``open_source``, ``zopt.job.destinations.Target`` made by ``open_target``. Each kind satisfies its
protocol and round-trips real data through the protocol's methods alone (a Zarr store on disk, real
netCDF files, a zarr LocalStore, an Icechunk repository); the job's phases run one by one, in this
process, without the CLI."""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
import xarray as xr
import zarr

from zopt.compat.job_cache import release_job
from zopt.io.source_kinds import SOURCE_KINDS, Source, open_source
from zopt.job.destinations import (
    TARGET_KINDS,
    LocalTarget,
    Opening,
    StoreTarget,
    Target,
    WriteRun,
    open_target,
)
from zopt.job.options import RecompressJob
from zopt.job.prepare import parse_job, plan_of_work
from zopt.job.targets import same_metadata

T = np.round(np.cumsum(np.random.default_rng(7).standard_normal((24, 16)), axis=1), 2).astype("f4")


def _zarr(path) -> str:
    g = zarr.open_group(path, mode="w", attributes={"title": "protocols"})
    g.create_array("t", shape=T.shape, chunks=(6, 16), dtype="f4", dimension_names=("time", "x"),
                   attributes={"units": "K"})[:] = T
    return str(path)


def _nc(folder, n: int = 1) -> list[str]:
    """``n`` netCDF4 files splitting ``T`` along ``time`` (with a time coordinate)."""
    pytest.importorskip("netCDF4")
    os.makedirs(folder, exist_ok=True)
    step = T.shape[0] // n
    out = []
    for i in range(n):
        part = slice(i * step, (i + 1) * step)
        ds = xr.Dataset({"t": (("time", "x"), T[part], {"units": "K"})},
                        coords={"time": np.arange(T.shape[0], dtype="f8")[part]})
        path = os.path.join(folder, f"part{i}.nc")
        ds.to_netcdf(path, engine="netcdf4")
        out.append(path)
    return out


def _source_of(kind: str, tmp_path):
    """``(what open_source takes, its keyword arguments, expected class name)`` of each kind."""
    if kind == "zarr path":
        return _zarr(tmp_path / "s.zarr"), {}, "PathSource"
    if kind == "netCDF file":
        return _nc(tmp_path / "nc")[0], {}, "PathSource"
    if kind == "several netCDF files":
        return str(tmp_path / "nc" / "*.nc") if _nc(tmp_path / "nc", 3) else None, {"concat_dim": "time"}, "MultiSource"
    if kind == "zarr Store":
        return zarr.storage.LocalStore(_zarr(tmp_path / "s.zarr"), read_only=True), {}, "StoreSource"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["zarr path", "netCDF file", "several netCDF files", "zarr Store"])
def test_every_source_kind_is_a_source_and_reads_its_values_through_the_protocol(kind, tmp_path):
    given, options, cls = _source_of(kind, tmp_path)
    src = open_source(given, **options)
    assert type(src).__name__ == cls and isinstance(src, Source)
    assert open_source(src) is src  # a Source is taken as it is
    token = f"protocols-{kind}"
    try:
        var = src.variables(token)["t"]
        assert (var.shape, var.dtype, var.dims) == (T.shape, np.dtype("f4"), ("time", "x"))
        region = (slice(5, 19), slice(3, 11))  # across the files of several
        np.testing.assert_array_equal(src.read("t", region, token), T[region])
        template = src.template(token)
        assert template["t"].shape == T.shape and template["t"].attrs["units"] == "K"
        assert src.identify(["t"]).text == src.text
        assert len(src.files) == (3 if kind == "several netCDF files" else 0 if kind == "zarr Store" else 1)
        assert (src.location is None) == (kind in ("several netCDF files", "zarr Store"))
        assert (src.zarr_store() is not None) == (kind in ("zarr path", "zarr Store"))
        assert (src.concat_dim, src.total_bytes() > 0) == (
            ("time", True) if kind == "several netCDF files" else (None, kind != "zarr Store"))
    finally:
        release_job(token)


def test_an_in_memory_dataset_is_a_source_too():
    from zopt.xarray import _DatasetSource

    src = _DatasetSource(xr.Dataset({"t": (("time", "x"), T)}))
    assert isinstance(src, Source) and open_source(src) is src
    np.testing.assert_array_equal(src.read("t", (slice(0, 3), slice(None))), T[:3])


def test_open_source_names_what_no_kind_takes():
    assert [k.rsplit(":", 1)[1] for k in SOURCE_KINDS] == ["MultiSource", "StoreSource", "PathSource"]
    with pytest.raises(ValueError, match=r"^src: a int is not a source; give a path or URL"):
        open_source(42)


def _job(src: str, dst) -> RecompressJob:
    return RecompressJob.parse(src=src, dst=dst, chunks="time=6", shards="time=12", scheduler="synchronous")


def _target_of(kind: str, tmp_path):
    if kind == "local directory":
        return str(tmp_path / "dst.zarr"), LocalTarget
    if kind == "zarr Store":
        return zarr.storage.LocalStore(str(tmp_path / "dst.zarr")), StoreTarget
    ic = pytest.importorskip("icechunk")
    ic.Repository.create(ic.local_filesystem_storage(str(tmp_path / "repo")))
    from zopt.job.icechunk_target import IcechunkTarget

    return f"icechunk://{tmp_path / 'repo'}", IcechunkTarget


def _published(kind: str, dst) -> zarr.Group:
    if kind != "Icechunk branch":
        return zarr.open_group(dst, mode="r")
    from zopt.compat.icechunk_compat import open_ref

    return zarr.open_group(open_ref(dst).repo.readonly_session(branch="main").store, mode="r")


@pytest.mark.parametrize("kind", ["local directory", "zarr Store", "Icechunk branch"])
def test_every_target_kind_is_a_target_and_the_job_phases_round_trip_through_it(kind, tmp_path):
    """parse → plan of work → begin → create → write → publish, each a call in this process: nothing
    exists before ``begin``, the written store is readable before ``publish``, the values are bit for bit."""
    src = _zarr(tmp_path / "s.zarr")
    dst, cls = _target_of(kind, tmp_path)
    job = _job(src, dst)
    with contextlib.ExitStack() as hold:
        source, target, notes = parse_job(job, hold)  # parse
        assert type(target) is cls and isinstance(target, Target) and isinstance(source, Source)
        p = plan_of_work(job, source, target, notes)  # plan of work: pure
        assert p.work.arrays["t"].units == 2 and p.names == ["t"]
        assert kind != "local directory" or not os.path.exists(dst) and not os.path.exists(target.root)
        target.begin(p.record is None, p.job_id, source.text)
        target.create(p.spec, p.fp, p.job_id, p.layouts)
        assert same_metadata(zarr.open_array(target.root, path="t", mode="r"), p.planned["t"])
        seconds = target.write(WriteRun(p.work, source, job.decision, p.job_id, p.lossy_vars, p.reports,
                                        job.scheduler))  # write
        assert seconds > 0 and p.reports["t"].stored_after == target.stored_sizes("t")[0] > 0
        np.testing.assert_array_equal(zarr.open_group(target.written(), mode="r")["t"][:], T)
        target.publish()  # publish
        release_job(p.job_id)
    out = _published(kind, dst)
    np.testing.assert_array_equal(out["t"][:], T)
    assert out.attrs["title"] == "protocols" and out["t"].shards == (12, 16)
    assert kind != "local directory" or not os.path.exists(target.root)  # the partial store renamed into place


@pytest.mark.parametrize("kind", ["local directory", "zarr Store", "Icechunk branch"])
def test_a_discarded_target_leaves_nothing_of_the_job(kind, tmp_path):
    src = _zarr(tmp_path / "s.zarr")
    dst, _ = _target_of(kind, tmp_path)
    job = _job(src, dst)
    with contextlib.ExitStack() as hold:
        source, target, notes = parse_job(job, hold)
        p = plan_of_work(job, source, target, notes)
        target.begin(True, p.job_id, source.text)
        target.create(p.spec, p.fp, p.job_id, p.layouts)
        kept = target.kept_text
        target.discard()
        release_job(p.job_id)
    if kind == "local directory":
        assert kept == target.root and not os.path.exists(target.root) and not os.path.exists(dst)
    elif kind == "zarr Store":
        left = [f for _, _, fs in os.walk(tmp_path / "dst.zarr") for f in fs]
        assert kept == target.text and left == []  # the marker and the metadata cleared
    else:
        from zopt.compat.icechunk_compat import open_ref

        assert "zopt-work-main" in kept and open_ref(dst).repo.list_branches() == {"main"}


def test_open_target_tries_the_kinds_in_order_and_notes_fixed_slots_without_positional_writes(tmp_path):
    assert [k.__name__ for k in TARGET_KINDS] == ["IcechunkTarget", "StoreTarget", "LocalTarget"]
    notes: list[str] = []
    target = open_target(zarr.storage.MemoryStore(), Opening(notes=notes, layout="fixed-slot"))
    assert type(target) is StoreTarget and not target.positional
    assert notes == [f"layout: fixed slots need positional writes (a local directory store); {target.text} has none, "
                     "so each shard was assembled packed inside one task and written with one put"]
    local = open_target(str(tmp_path / "d.zarr"), Opening(notes=notes, layout="fixed-slot"))
    assert type(local) is LocalTarget and local.positional and len(notes) == 1
