"""Every recipe in ``recipes/`` runs on its small slice and checks its own claims (it exits
non-zero when one fails); here we also check the outputs it says it made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("iris_sample_data")
RECIPES = Path(__file__).resolve().parents[2] / "recipes"
# BLAS threads fight over the 2 cores of a CI runner (sklearn's fit: 5 s instead of 0.5 s)
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run(recipe: str, out: Path, *extra: str, status: int = 0) -> str:
    proc = subprocess.run([sys.executable, str(RECIPES / recipe), "--small", "--out", str(out), *extra],
                          capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == status, proc.stdout + proc.stderr
    return proc.stdout if status == 0 else proc.stderr


def test_a_recipe_refuses_a_directory_it_did_not_make_and_keeps_the_users_files(tmp_path):
    """``--out`` holding a user's file is refused before anything is touched (the recipes used to
    ``rmtree`` it); in a directory a recipe made, a rerun replaces its own outputs and nothing else."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    out = run("xarray_to_zarr.py", mine, status=2)
    assert "refused" in out and "did not make" in out
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and (mine / "notes.txt").read_text() == "the user's"
    fresh = tmp_path / "fresh"
    run("xarray_to_zarr.py", fresh)
    (fresh / "later.txt").write_text("put there after the run")
    (fresh / "zopt.zarr" / "stray").write_text("inside an output: the recipe's to replace")
    run("xarray_to_zarr.py", fresh)
    assert (fresh / "later.txt").read_text() == "put there after the run"
    assert not (fresh / "zopt.zarr" / "stray").exists()


def test_every_recipe_is_listed_in_the_readme_and_tested_here():
    listed = (RECIPES / "README.md").read_text()
    this = Path(__file__).read_text()
    for script in RECIPES.glob("[!_]*.py"):  # _outdir.py: the recipes' helper
        assert f"[{script.name}]({script.name})" in listed, script.name
        assert f'"{script.name}"' in this, script.name


def test_xarray_to_zarr(tmp_path):
    out = run("xarray_to_zarr.py", tmp_path)
    assert "of zarr default" in out
    assert (tmp_path / "zopt.zarr" / "air_temperature" / "zarr.json").exists()


def test_write_fast_compress_later(tmp_path):
    out = run("write_fast_compress_later.py", tmp_path)
    assert "after zopt recompress --in-place" in out
    meta = json.loads((tmp_path / "ingest.zarr" / "air_temperature" / "zarr.json").read_text())
    assert meta["shape"][0] == 24


def test_cluster_batch(tmp_path):
    out = run("cluster_batch.py", tmp_path)
    assert "dashboard: http" in out and out.count("verified") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [".zopt-recipe-out", "A1B_north_america.zarr",
                                                          "nemo_1m_20150101-20150201_grid-T.zarr"]
    (tmp_path / "A1B_north_america.zarr").rename(tmp_path / "gone")  # as if killed before publishing it
    out = run("cluster_batch.py", tmp_path)
    assert "done by an earlier run, verified" in out and out.count("verified") == 2
    assert (tmp_path / "A1B_north_america.zarr" / "zarr.json").exists()


def test_precomputed_plan(tmp_path):
    out = run("precomputed_plan.py", tmp_path)
    assert (tmp_path / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.count("masks {") == 2


def test_parallel_shard_writers(tmp_path):
    out = run("parallel_shard_writers.py", tmp_path, "--ranks", "2")
    assert "fixed-slot:" in out and "compact:" in out


def test_ml_low_precision(tmp_path):
    pytest.importorskip("sklearn")
    out = run("ml_low_precision.py", tmp_path)
    assert "int4" in out and (tmp_path / "weights.zarr" / "int4" / "layer0" / "zarr.json").exists()


def test_icechunk_archive(tmp_path):
    pytest.importorskip("icechunk")
    out = run("icechunk_archive.py", tmp_path)
    assert "200 files → icechunk://" in out and "verified before main moved" in out
    assert "files packed differently, re-expressed as one exact packing" in out  # zopt.io.multi, not xarray
    assert "every year equals its own file decoded" in out
    log = [line for line in out.split("commit log of main:")[1].splitlines() if line.startswith("  ")]
    assert "zopt recompress" in log[0] and "[zopt:" in log[0] and "Repository initialized" in log[-1]
    assert len(list((tmp_path / "monthly").glob("air_*.nc"))) == 200
