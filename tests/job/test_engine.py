"""``zopt recompress`` end to end on real data (iris-sample-data's NEMO SST), CLI included."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner

from zopt import recompress
from zopt.cli.commands import main
from zopt.io.paths import PARTIAL_SUFFIX
from zopt.planning.chunking import choose_chunks, parse_shape

iris_sample_data = pytest.importorskip("iris_sample_data")
NEMO = os.path.join(iris_sample_data.path, "NEMO", "nemo_1m_20150101-20150201_grid-T.nc")


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _inner_chunk_masks(store: Path, name: str) -> dict[tuple[int, ...], int]:
    """Mask of every stored chunk of an unsharded array, read straight from the files."""
    out = {}
    for f in (store / name / "c").rglob("*"):
        if f.is_file():
            out[tuple(int(p) for p in f.relative_to(store / name / "c").parts)] = f.read_bytes()[0]
    return out


@pytest.fixture(scope="module")
def nemo_store(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("cli") / "nemo.zarr"
    before = _digest(NEMO)
    result = CliRunner().invoke(
        main, ["recompress", NEMO, str(dst), "--chunks", "y=30,x=36", "--shards", "y=30,x=36", "--no-progress",
               "--menu", "classic"],  # the conditional chain: these tests read its masks
    )
    assert result.exit_code == 0, result.output
    assert "tos" in result.output and "masks" in result.output and "MB/s" in result.output
    assert _digest(NEMO) == before  # the source is only read
    return dst


def test_fresh_interpreter_reads_dst_bit_identical_without_import_zopt(nemo_store):
    script = textwrap.dedent(
        f"""
        import sys, numpy as np, xarray as xr, zarr
        src = xr.open_dataset({NEMO!r})
        dst = xr.open_zarr({str(nemo_store)!r}).load()
        xr.testing.assert_identical(src, dst)
        raw_src = xr.open_dataset({NEMO!r}, decode_cf=False)
        for name in ("tos", "nav_lat", "bounds_lon"):
            a = np.asarray(raw_src[name].values)
            b = zarr.open_array({str(nemo_store)!r}, path=name)[...]
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
        print("zarr:", type(zarr.open_array({str(nemo_store)!r}, path="tos").metadata.codecs[1]).__module__)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "zarr: zopt.codecs.conditional" in out.stdout


def test_masks_differ_between_land_and_ocean_chunks(nemo_store):
    masks = _inner_chunk_masks(nemo_store, "tos")
    assert len(masks) == 110
    assert set(masks.values()) == {0b10, 0b11}
    tos = xr.open_dataset(NEMO).tos.values[0]
    land_fraction = {
        (0, i, j): float(np.isnan(tos[i * 30 : (i + 1) * 30, j * 36 : (j + 1) * 36]).mean())
        for i in range(11) for j in range(10)
    }
    mostly_land = [masks[k] for k, f in land_fraction.items() if f > 0.9]
    all_ocean = [masks[k] for k, f in land_fraction.items() if f == 0]
    assert mostly_land and all(m == 0b10 for m in mostly_land)  # constant 1e20: shuffle does not help
    assert all_ocean and np.mean([m == 0b11 for m in all_ocean]) > 0.9
    meta = json.loads((nemo_store / "tos" / "zarr.json").read_text())
    assert meta["codecs"][1]["name"] == "conditional"
    assert meta["dimension_names"] == ["time_counter", "y", "x"]


def test_sharded_output_and_report(tmp_path):
    report = recompress(NEMO, tmp_path / "s.zarr", chunks="y=30,x=36", shards="y=330,x=360", variables=["tos"],
                        menu="classic")  # the conditional chain, whose masks this test reads
    (tos,) = [a for a in report.arrays if a.name == "tos"]
    assert tos.chunks == 110 and tos.chunks_written == 110
    assert sum(tos.masks.values()) == 110 and set(tos.masks) == {0b10, 0b11}
    assert tos.logical_bytes == 330 * 360 * 4
    stored = sum(f.stat().st_size for f in (tmp_path / "s.zarr" / "tos" / "c").rglob("*") if f.is_file())
    assert tos.stored_after == stored < tos.logical_bytes
    np.testing.assert_array_equal(
        zarr.open_array(str(tmp_path / "s.zarr"), path="tos")[...], xr.open_dataset(NEMO, decode_cf=False).tos.values
    )
    assert not (tmp_path / ("s.zarr" + PARTIAL_SUFFIX)).exists()


def test_failure_part_way_leaves_no_dst(tmp_path, failing_decision):
    explode, calls = failing_decision(5, "disk on fire")

    dst = tmp_path / "f.zarr"
    with pytest.raises(RuntimeError, match="disk on fire"):
        recompress(NEMO, dst, chunks="y=30,x=36", variables=["tos"], decision=explode, scheduler="synchronous")
    assert len(calls) > 5
    assert not dst.exists()
    assert not (tmp_path / ("f.zarr" + PARTIAL_SUFFIX)).exists()


def test_existing_dst_is_refused_and_kept(tmp_path):
    dst = tmp_path / "d.zarr"
    dst.mkdir()
    (dst / "keep").write_text("x")
    result = CliRunner().invoke(main, ["recompress", NEMO, str(dst), "--no-progress"])
    assert result.exit_code != 0 and "not a Zarr store" in result.output
    assert (dst / "keep").read_text() == "x"


@pytest.mark.parametrize(
    "args,match",
    [
        (["--codecs", "not json"], "codecs"),
        (["--codecs", '[{"name": "zstd", "configuration": {"level": 1}}]'], "array→bytes"),
        (["--codecs", '[{"name": "zstd"}]'], "needs an array→bytes codec"),
        (["--codecs", '[{"name": "bytes"}, {"name": "nope"}]'], "codecs[1]: unknown codec"),
        (["--chunks", "y=0"], "chunks"),
        (["--chunks", "y=3,4"], "chunks"),
    ],
)
def test_bad_options_give_clear_errors(tmp_path, args, match):
    result = CliRunner().invoke(main, ["recompress", NEMO, str(tmp_path / "o.zarr"), "--no-progress", *args])
    assert result.exit_code != 0
    assert match in result.output
    assert not (tmp_path / "o.zarr").exists()


def test_zarr_source_with_custom_chain(tmp_path):
    first = tmp_path / "a.zarr"
    recompress(NEMO, first, variables=["tos"], chunks="y=110,x=120", decision="never")
    chain = [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "conditional", "configuration": {"codecs": [{"name": "zstd", "configuration": {"level": 9}}]}}]
    report = recompress(first, tmp_path / "b.zarr", codecs=json.dumps(chain), chunks="y=110,x=120", variables=["tos"])
    (tos,) = [a for a in report.arrays if a.name == "tos"]
    assert tos.stored_before is not None and tos.stored_after < tos.stored_before
    assert set(tos.masks) == {1}
    np.testing.assert_array_equal(
        zarr.open_array(str(tmp_path / "b.zarr"), path="tos")[...], zarr.open_array(str(first), path="tos")[...]
    )


def test_shape_parsing_and_chunk_choice():
    assert parse_shape("1,32,32") == (1, 32, 32)
    assert parse_shape("y=30,x=36") == {"y": 30, "x": 36}
    assert choose_chunks((330, 360), 4, (30, 36), (100, 100)) == ((30, 36), (90, 72))
    assert choose_chunks((10,), 8, None, None) == ((10,), None)
    inner, shard = choose_chunks((4096, 4096), 4, None, None)
    assert np.prod(inner) * 4 == 256 * 1024 and np.prod(shard) * 4 == 64 * 1024 * 1024


def test_cli_on_a_distributed_cluster_with_worker_processes(tmp_path):
    from distributed import LocalCluster

    dst = tmp_path / "dist.zarr"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        result = CliRunner().invoke(
            main,
            ["recompress", NEMO, str(dst), "--chunks", "y=30,x=36", "--shards", "y=90,x=108",
             "--variable", "tos", "--scheduler", cluster.scheduler_address, "--no-progress", "--menu", "classic"],
        )
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(
        zarr.open_array(str(dst), path="tos")[...], xr.open_dataset(NEMO, decode_cf=False).tos.values
    )
    assert "10:" in result.output and "11:" in result.output  # both masks were chosen on the workers


@pytest.mark.filterwarnings("ignore:The data type .*FixedLengthUTF32")  # xarray writing the scalar string
def test_zarr_v3_source_keeps_its_metadata_and_copies_the_rest_byte_for_byte(tmp_path):
    ds = xr.Dataset(
        {"t": (("time", "y", "x"), np.arange(2 * 40 * 60, dtype="i2").reshape(2, 40, 60),
               {"scale_factor": 0.1, "units": "K", "_FillValue": np.int16(-999)}),
         "u": (("y", "x"), np.linspace(0, 1, 2400, dtype="f4").reshape(40, 60), {"long_name": "u wind"}),
         "label": ((), "abc"), "crs": ((), np.int32(0), {"grid_mapping_name": "latitude_longitude"})},
        coords={"y": np.arange(40.0), "x": np.arange(60), "time": ("time", [0, 1], {"units": "days since 2000-01-01"}),
                "lat": (("y", "x"), np.zeros((40, 60)), {"units": "degrees_north"})},
        attrs={"title": "test"},
    )
    src = tmp_path / "src.zarr"
    ds.to_zarr(src, mode="w", zarr_format=3, consolidated=False)
    dst = tmp_path / "dst.zarr"
    recompress(src, dst, variables=["t", "u", "lat"], chunks="time=1,y=20,x=30", shards="time=2,y=40,x=60")
    for name in ("t", "u", "lat"):
        before, after = (json.loads((p / name / "zarr.json").read_text()) for p in (src, dst))
        assert {k: v for k, v in before.items() if k not in ("codecs", "chunk_grid")} == {
            k: v for k, v in after.items() if k not in ("codecs", "chunk_grid")
        }
        assert after["codecs"][0]["name"] == "sharding_indexed"
    for name in ("label", "crs", "x", "y", "time"):  # not rewritten: every file copied as it was
        files = sorted(p.relative_to(src / name) for p in (src / name).rglob("*") if p.is_file())
        assert files == sorted(p.relative_to(dst / name) for p in (dst / name).rglob("*") if p.is_file())
        assert all((src / name / f).read_bytes() == (dst / name / f).read_bytes() for f in files)
    assert zarr.open_group(dst).attrs["title"] == "test"
    xr.testing.assert_identical(xr.open_zarr(dst).load(), xr.open_zarr(src, consolidated=False).load())
    # the v3 → v3 path needs neither dask.array nor distributed (0.35 s of imports per run)
    code = f"import sys; from zopt import recompress; recompress({str(src)!r}, {str(tmp_path / 'd2.zarr')!r}); " \
           "print(sorted(m for m in ('dask.array', 'distributed') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_a_plain_zarr_v3_store_without_dimension_names(tmp_path):
    # what zarr-python writes by default: compressed chunks, no dimension_names (xarray cannot open it)
    a = np.round(np.sin(np.linspace(0, 30, 100 * 120)), 3).astype("f4").reshape(100, 120)
    src = tmp_path / "plain.zarr"
    zarr.open_group(src, mode="w").create_array("a", shape=a.shape, chunks=(50, 60), dtype="f4")[:] = a
    with pytest.raises(KeyError):
        xr.open_zarr(src, consolidated=False)
    report = recompress(src, tmp_path / "out.zarr", chunks="dim_0=10,dim_1=12", shards="50,60", layout="fixed-slot",
                        readers="zopt")  # zopt's conditional: masks per chunk
    (rep,) = report.arrays
    assert rep.layout == "fixed-slot" and rep.chunks_written == 100 and sum(rep.masks.values()) == 100 and 0 not in rep.masks
    out = zarr.open_array(tmp_path / "out.zarr", path="a")
    np.testing.assert_array_equal(out[:], a)
    assert out.metadata.dimension_names is None and out.chunks == (10, 12)
    # the analysis and a plan work on it too, and the plan drives a rewrite
    res = CliRunner().invoke(main, ["plan", str(src), "--chunks", "10,12", "-o", str(tmp_path / "p.zarr"), "--no-progress"])
    assert res.exit_code == 0, res.output
    recompress(src, tmp_path / "planned.zarr", chunks="10,12", shards="50,60", plan=tmp_path / "p.zarr")
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "planned.zarr", path="a")[:], a)
