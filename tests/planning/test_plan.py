"""The planning layer: analysis values, policies, plan files, plan-driven writes, memory limits."""

from __future__ import annotations

import json
from pathlib import Path

import google_crc32c
import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner

import zopt
from zopt import recompress
from zopt.cli.commands import main
from zopt.codecs.conditional import ConditionalCodec, parse_header
from zopt.planning.analysis import (
    analyze,
    analyze_array,
    byte_entropy,
    load_analysis,
    save_analysis,
)
from zopt.planning.chains import with_decision
from zopt.planning.plan import Plan, PlanMismatchError, make_plan, policy_masks
from zopt.store.shards import EMPTY, layout_of, read_index

CHUNK = (32, 32)
ZSTD_FRAME_SLACK = 16  # bytes a batch trial's zstd frame may differ from numcodecs.Zstd's (zopt.codecs.sync.zstd_row_sizes)


def _mixed(shape=(128, 160), seed=3) -> np.ndarray:
    """Chunks of four kinds: smooth field, white noise, constant, random bytes."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 6, shape[0])[:, None]
    x = np.linspace(0, 9, shape[1])[None]
    a = np.round(np.sin(y) * np.cos(x) * 40, 1).astype("f4")
    a[0:32, 32:64] = rng.standard_normal((32, 32))
    a[32:64, 64:96] = 7.5
    a[64:96, 96:128] = rng.integers(0, 2**32, (32, 32), dtype=np.uint32).view("f4")
    a[96:128, 128:160] = 0  # the fill value
    return a


@pytest.fixture
def store(tmp_path) -> tuple[Path, np.ndarray]:
    a = _mixed()
    g = zarr.open_group(tmp_path / "src.zarr", mode="w")
    g.create_array("v", shape=a.shape, chunks=(64, 80), dtype="f4", fill_value=0, dimension_names=("y", "x"))[:] = a
    return tmp_path / "src.zarr", a


def _masks_from_files(store: Path, name: str) -> dict[tuple[int, ...], int]:
    """The conditional mask of every stored inner chunk, read from the shard files' headers."""
    arr = zarr.open_array(store, path=name)
    lay = layout_of(arr)
    out = {}
    for f in (store / name / "c").rglob("*"):
        if not f.is_file():
            continue
        shard = tuple(int(p) for p in f.relative_to(store / name / "c").parts)
        table = read_index(f, lay)
        blob = f.read_bytes()
        for i in np.flatnonzero(table[:, 0] != EMPTY):
            local = np.unravel_index(i, lay.chunks_per_shard)
            index = tuple(s * n + c for s, n, c in zip(shard, lay.chunks_per_shard, local, strict=True))
            out[index] = blob[int(table[i, 0])]
    return out


# -- analysis ---------------------------------------------------------------------------------------


def test_analysis_values_match_direct_computation(store):
    src, a = store
    ds = analyze_array(src, "v", chunks=CHUNK, sample=None)
    assert ds["entropy"].dims == ("chunk_y", "chunk_x") and ds.sizes["mask"] == 4
    shuffle, zstd = numcodecs.Shuffle(4), numcodecs.Zstd(level=3)
    for cy, cx in [(0, 0), (0, 1), (1, 2), (2, 3), (3, 4)]:
        chunk = a[cy * 32 : (cy + 1) * 32, cx * 32 : (cx + 1) * 32]
        row = ds.isel(chunk_y=cy, chunk_x=cx)
        raw = chunk.tobytes()
        counts = np.bincount(np.frombuffer(raw, np.uint8), minlength=256)
        p = counts[counts > 0] / counts.sum()
        assert float(row["entropy"]) == pytest.approx(-(p * np.log2(p)).sum(), abs=1e-5)
        planes = np.frombuffer(raw, np.uint8).reshape(-1, 4)
        for b in range(4):
            assert float(row["plane_entropy"][b]) == pytest.approx(byte_entropy(planes[:, b].copy()), abs=1e-5)
        assert float(row["zero_fraction"]) == pytest.approx(np.mean(chunk == 0))
        flat = chunk.ravel().view("u4")
        assert float(row["run_fraction"]) == pytest.approx(np.count_nonzero(flat[1:] == flat[:-1]) / flat.size)
        assert int(row["digest"]) == google_crc32c.value(raw)
        assert int(row["raw_bytes"]) == len(raw)
        if bool(row["early_out"]) or bool(row["is_fill"]):
            continue
        expected = [len(raw), len(shuffle.encode(raw)), len(zstd.encode(raw)), len(zstd.encode(shuffle.encode(raw)))]
        got = row["encoded_bytes"].values
        assert got[:2].tolist() == expected[:2]
        # zstd sizes of a task come from one blosc call: the same zstd, frames within a few bytes
        assert np.abs(got[2:] - expected[2:]).max() <= ZSTD_FRAME_SLACK
        assert (row["encode_seconds"].values[1:] > 0).all()
    assert bool(ds["is_fill"].isel(chunk_y=3, chunk_x=4))
    assert bool(ds["early_out"].isel(chunk_y=2, chunk_x=3))  # random bytes: no trials
    assert np.isnan(ds["encoded_bytes"].isel(chunk_y=2, chunk_x=3).values[1:]).all()
    # a constant chunk: every byte plane is constant; 7.5f is 00 00 f0 40, so 1.5 bits/byte overall
    assert (ds["plane_entropy"].isel(chunk_y=1, chunk_x=2).values == 0).all()
    assert float(ds["entropy"].isel(chunk_y=1, chunk_x=2)) == 1.5


def test_sampled_analysis_estimates_and_nan_fraction(tmp_path):
    a = np.round(np.linspace(0, 100, 256 * 256, dtype="f4").reshape(256, 256), 2)
    a[:128, :128] = np.nan
    g = zarr.open_group(tmp_path / "s.zarr", mode="w")
    g.create_array("v", shape=a.shape, chunks=(256, 256), dtype="f4", fill_value=0, dimension_names=("y", "x"))[:] = a
    sampled = analyze_array(tmp_path / "s.zarr", "v", chunks=(128, 256), sample=1 / 16)
    full = analyze_array(tmp_path / "s.zarr", "v", chunks=(128, 256), sample=None)
    assert float(full["nan_fraction"].isel(chunk_y=0, chunk_x=0)) == pytest.approx(0.5)
    assert float(full["nan_fraction"].isel(chunk_y=1, chunk_x=0)) == 0.0
    # mask 0 is exact; the others are scaled from the sample
    assert sampled["encoded_bytes"].values[..., 0].tolist() == full["encoded_bytes"].values[..., 0].tolist()
    # sizes from a sample are estimates for ranking masks (how well: benchmarks/plan_quality.py)
    est, exact = sampled["encoded_bytes"].values, full["encoded_bytes"].values
    assert np.argmin(exact[1, 0]) == 2  # a smooth ramp: zstd alone
    assert est[1, 0, 2] == pytest.approx(exact[1, 0, 2], rel=0.1)
    # ...but shuffle's estimate is a third too small: the ramp's staircase of repeated values,
    # shuffled, matches across the 12 evenly spaced windows more than along the whole chunk (docs/plans.md)
    assert est[1, 0, 3] < 0.7 * exact[1, 0, 3]
    assert (est[..., 3] < est[..., 0]).all() and (est[..., 2] < est[..., 0]).all()
    assert sampled.attrs["sample"] == 1 / 16 and full.attrs["sample"] == -1.0


def test_decode_times_only_when_asked_and_fastest_within_needs_them(store, tmp_path):
    src, _ = store
    plain = analyze_array(src, "v", chunks=CHUNK, sample=None)
    timed = analyze_array(src, "v", chunks=CHUNK, sample=None, decode_times=True)
    tried = ~(plain["is_fill"].values | plain["early_out"].values)
    assert plain.attrs["decode_times"] == 0 and timed.attrs["decode_times"] == 1
    assert np.isnan(plain["decode_seconds"].values[tried][:, 1:]).all()
    assert (timed["decode_seconds"].values[tried][:, 1:] > 0).all()
    assert (plain["decode_seconds"].values[..., 0] == 0).all()
    # the sizes do not depend on timing the decodes (beyond the batch trial's frame slack)
    assert np.nanmax(np.abs(plain["encoded_bytes"].values - timed["encoded_bytes"].values)) <= ZSTD_FRAME_SLACK
    with pytest.raises(ValueError, match="fastest_within.*decode_times=True"):
        make_plan(plain, "fastest_within")
    assert make_plan(timed, "fastest_within")["v"].masks.shape == plain["raw_bytes"].shape
    # saved without decode times, the CLI refuses the policy with the same message
    save_analysis({"v": plain}, tmp_path / "an.zarr")
    res = CliRunner().invoke(main, ["plan", str(src), "--analysis", str(tmp_path / "an.zarr"), "--policy", "fastest_within",
                                    "-o", str(tmp_path / "p.zarr")])
    assert res.exit_code != 0 and "--decode-times" in res.output and not (tmp_path / "p.zarr").exists()
    # analysing for it, the CLI times the decodes itself
    res = CliRunner().invoke(main, ["plan", str(src), "--chunks", "y=32,x=32", "--policy", "fastest_within",
                                    "-o", str(tmp_path / "p.zarr"), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert Plan.load(tmp_path / "p.zarr").policy == "fastest_within"


def test_analysis_is_a_dask_graph_with_one_task_per_shard(tmp_path):
    a = _mixed()
    z = zarr.open_group(tmp_path / "sh.zarr", mode="w").create_array(
        "v", shape=a.shape, chunks=CHUNK, shards=(64, 64), dtype="f4", fill_value=0, dimension_names=("y", "x"),
        compressors=[ConditionalCodec(codecs=[{"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 1}}])],
    )
    z[:] = a
    seen = []

    class Count:
        def __init__(self, n):
            seen.append(n)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    ds = analyze_array(tmp_path / "sh.zarr", "v", progress=Count)
    assert seen == [6]  # 2×3 shards
    assert ds.sizes["chunk_y"] == 4 and ds.sizes["chunk_x"] == 5  # the inner-chunk grid
    assert json.loads(ds.attrs["codecs"])[1]["configuration"]["level"] == 1  # the array's own codecs


def test_analysis_save_and_load(store, tmp_path):
    src, _ = store
    analyses = analyze(src, chunks=CHUNK)
    save_analysis(analyses, tmp_path / "an.zarr")
    back = load_analysis(tmp_path / "an.zarr")
    xr.testing.assert_identical(back["v"], analyses["v"])


# -- policies ------------------------------------------------------------------------------------------


def _synthetic(sizes, decode=None, raw=1000) -> xr.Dataset:
    sizes = np.asarray(sizes, dtype=np.float64)
    n = sizes.shape[0]
    decode = np.zeros_like(sizes) if decode is None else np.asarray(decode, dtype=np.float64)
    ds = xr.Dataset(
        {
            "encoded_bytes": (("chunk_x", "mask"), sizes),
            "decode_seconds": (("chunk_x", "mask"), decode),
            "raw_bytes": (("chunk_x",), np.full(n, raw)),
            "is_fill": (("chunk_x",), np.zeros(n, bool)),
            "early_out": (("chunk_x",), np.zeros(n, bool)),
        }
    )
    ds.attrs.update(codecs=json.dumps([{"name": "shuffle"}, {"name": "zstd"}]), header_bits=8)
    return ds


def test_every_policy_on_known_sizes():
    # masks: 00 raw, 01 shuffle (same length), 10 zstd, 11 shuffle+zstd
    ds = _synthetic(
        [
            [1000, 1000, 600, 400],  # shuffle helps: 11
            [1000, 1000, 600, 650],  # shuffle hurts: 10
            [1000, 1000, 1010, 1005],  # incompressible: 00
            [1000, 1000, 900, 880],  # saves 12 %: min_gain(0.125) stores raw
        ],
        decode=[[0, 1, 5, 9], [0, 1, 5, 9], [0, 1, 5, 9], [0, 1, 5, 9]],
    )
    assert policy_masks(ds, "compress_if_smaller")[0].tolist() == [3, 2, 0, 3]
    assert policy_masks(ds, "smallest")[0].tolist() == [3, 2, 0, 3]
    assert policy_masks(ds, "min_gain")[0].tolist() == [3, 2, 0, 0]
    assert policy_masks(ds, "min_gain", gain=0.05)[0].tolist() == [3, 2, 0, 3]
    # within 5 % of the smallest, the fastest to decode: 880 vs 900 (2.3 %) → zstd alone
    assert policy_masks(ds, "fastest_within")[0].tolist() == [3, 2, 0, 2]
    assert policy_masks(ds, "fastest_within", within=0.0)[0].tolist() == [3, 2, 0, 3]
    chosen = policy_masks(ds, lambda row: 2 if row["encoded_bytes"][2] < 700 else 0)[0]
    assert chosen.tolist() == [2, 2, 0, 0]
    assert policy_masks(ds, "smallest")[0].dtype == np.uint8


def test_compress_if_smaller_is_greedy_for_length_changing_codecs():
    # gzip alone grows the chunk (1010 > 1000), so the runtime heuristic skips it, although
    # gzip then zstd (500) would be smallest; smallest takes that
    ds = _synthetic([[1000, 1010, 990, 500]])
    ds.attrs["codecs"] = json.dumps([{"name": "gzip"}, {"name": "zstd"}])
    assert policy_masks(ds, "compress_if_smaller")[0].tolist() == [2]
    assert policy_masks(ds, "smallest")[0].tolist() == [3]


def test_fill_and_early_out_chunks_get_mask_0():
    ds = _synthetic([[1000, 1000, 10, 5], [1000, 1000, 10, 5]])
    ds["is_fill"].values[0] = True
    ds["early_out"].values[1] = True
    assert policy_masks(ds, "smallest")[0].tolist() == [0, 0]


def test_bad_policies_are_value_errors():
    ds = _synthetic([[1000, 1000, 10, 5]])
    with pytest.raises(ValueError, match="policy: 'best' is not one of"):
        policy_masks(ds, "best")
    with pytest.raises(ValueError, match=r"unknown parameters \['ratio'\]; allowed \['gain'\]"):
        policy_masks(ds, "min_gain", ratio=0.2)


# -- plans ------------------------------------------------------------------------------------------


def test_plan_save_load_round_trip(store, tmp_path):
    src, _ = store
    plan = make_plan(analyze(src, chunks=CHUNK), "min_gain", gain=0.2)
    plan.save(tmp_path / "plan.zarr")
    back = Plan.load(tmp_path / "plan.zarr")
    assert back.policy == "min_gain" and back.params == {"gain": 0.2}
    assert back.created == plan.created and back.zopt_version == plan.zopt_version
    ap, bp = plan["v"], back["v"]
    np.testing.assert_array_equal(bp.masks, ap.masks)
    np.testing.assert_array_equal(bp.digests, ap.digests)
    np.testing.assert_array_equal(bp.ratios, ap.ratios)
    assert bp.masks.dtype == np.uint8 and bp.masks.shape == (4, 5)
    assert (bp.codecs, bp.header_bits, bp.shape, bp.chunk_shape, bp.fingerprint) == (
        ap.codecs, ap.header_bits, ap.shape, ap.chunk_shape, ap.fingerprint)
    with pytest.raises(KeyError, match="no array 'w'"):
        back["w"]


def test_plan_with_reserved_bits_is_refused(store, tmp_path):
    src, _ = store
    plan = make_plan(analyze(src, chunks=CHUNK))
    plan["v"].masks[1, 1] = 0b100  # bit 2: beyond the two wrapped codecs
    with pytest.raises(ValueError, match=r"chunk \(1, 1\) sets reserved bits"):
        plan["v"].as_decision()
    plan.save(tmp_path / "bad.zarr")
    with pytest.raises(ValueError, match="reserved bits"):
        Plan.load(tmp_path / "bad.zarr")
    with pytest.raises(ValueError, match="reserved bits"):
        recompress(src, tmp_path / "d.zarr", chunks=CHUNK, shards=(64, 80), plan=plan)
    assert not (tmp_path / "d.zarr").exists()


@pytest.mark.parametrize("layout", ["compact", "fixed-slot"])
def test_plan_driven_recompress_writes_exactly_the_planned_masks(store, tmp_path, layout):
    src, a = store
    plan = make_plan(analyze(src, chunks=CHUNK), "smallest")
    # force a pattern no heuristic would produce, to see that the plan (not a trial) decides
    masks = plan["v"].masks
    masks[0, 0], masks[1, 1], masks[0, 2] = 1, 0, 2
    dst = tmp_path / "d.zarr"
    # plan_force: the source is plain zarr's, which a conditional chain narrows to zopt's readers
    report = recompress(src, dst, chunks=CHUNK, shards=(64, 80), plan=plan, layout=layout, plan_force=True)
    stored = _masks_from_files(dst, "v")
    ds = analyze_array(src, "v", chunks=CHUNK)
    expected = {idx: int(masks[idx]) for idx in np.ndindex(masks.shape) if not bool(ds["is_fill"].values[idx])}
    assert stored == expected
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], a)
    assert sum(report.arrays[0].masks.values()) == len(expected)


def test_plan_mismatches_say_what_differs(store, tmp_path):
    src, a = store
    plan = make_plan(analyze(src, chunks=CHUNK))
    with pytest.raises(PlanMismatchError, match=r"chunk grid: chunk shape \(16, 16\) vs planned \(32, 32\)"):
        recompress(src, tmp_path / "d.zarr", chunks=(16, 16), shards=(64, 80), plan=plan)
    chain = json.dumps([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "conditional", "configuration": {"codecs": [{"name": "zstd", "configuration": {"level": 3}}]}}])
    with pytest.raises(PlanMismatchError, match="codec list"):
        recompress(src, tmp_path / "d.zarr", chunks=CHUNK, shards=(64, 80), plan=plan, codecs=chain)
    other = tmp_path / "other.zarr"
    g = zarr.open_group(other, mode="w")
    g.create_array("w", shape=a.shape, chunks=(64, 80), dtype="f4", fill_value=0, dimension_names=("y", "x"))[:] = a
    with pytest.raises(PlanMismatchError, match=r"no masks for array 'w'"):
        recompress(other, tmp_path / "d.zarr", chunks=CHUNK, shards=(64, 80), plan=plan)
    changed = a.copy()
    changed[40, 40] += 1  # same array, other content
    g = zarr.open_group(tmp_path / "changed.zarr", mode="w")
    g.create_array("v", shape=a.shape, chunks=(64, 80), dtype="f4", fill_value=0, dimension_names=("y", "x"))[:] = changed
    with pytest.raises(PlanMismatchError, match=r"made for other data: chunk \(1, 1\)"):
        recompress(tmp_path / "changed.zarr", tmp_path / "d.zarr", chunks=CHUNK, shards=(64, 80), plan=plan)
    assert not (tmp_path / "d.zarr").exists()
    assert not list(tmp_path.glob("d.zarr*"))


@pytest.mark.parametrize("sharded", [False, True])
def test_a_plain_zarr_write_follows_an_attached_plan(store, tmp_path, sharded):
    src, a = store
    plan = make_plan(analyze(src, chunks=CHUNK), "smallest")
    plan["v"].masks[2, 1] = 1
    z = zarr.create_array(
        tmp_path / "plain.zarr", shape=a.shape, chunks=CHUNK, shards=(64, 64) if sharded else None, dtype="f4",
        fill_value=0, compressors=[ConditionalCodec(codecs=[{"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 3}}])],
    )
    with zopt.pipeline():  # a plan's masks need each chunk's index: zopt's codec pipeline, opted into
        with_decision(z, plan)[:] = a
    np.testing.assert_array_equal(z[:], a)
    if sharded:
        stored = _masks_from_files(tmp_path, "plain.zarr")
    else:
        stored = {tuple(int(p) for p in f.relative_to(tmp_path / "plain.zarr" / "c").parts): parse_header(f.read_bytes()[:1], 8, 2)
                  for f in (tmp_path / "plain.zarr" / "c").rglob("*") if f.is_file()}
    assert stored and all(stored[idx] == plan["v"].masks[idx] for idx in stored)
    assert stored[(2, 1)] == 1


def test_max_memory_refuses_a_job_before_writing(store, tmp_path):
    src, _ = store
    with pytest.raises(ValueError, match=r"max_memory: a write task of array 'v' needs ~.* more than the limit of 64\.00 kiB.*--shards"):
        recompress(src, tmp_path / "d.zarr", chunks=CHUNK, shards=(64, 80), max_memory="64kiB")
    assert not list(tmp_path.glob("d.zarr*"))
    report = recompress(src, tmp_path / "d.zarr", chunks=CHUNK, shards=(64, 80), max_memory="64MiB", menu="classic")
    rep = report.arrays[0]
    # packed shard (the classic chain: conditional, bounded by the raw size + 1 header byte) of 2×2.5 → 4 inner chunks of 4 KiB: region twice, output twice, 4 buffers
    slot = 32 * 32 * 4 + 1
    assert rep.projected_task_bytes == 2 * 4 * 4096 + 2 * 4 * slot + 4 * 4096
    with pytest.raises(ValueError, match="max_memory: 'lots'"):
        recompress(src, tmp_path / "e.zarr", max_memory="lots")


def test_cli_analyze_plan_show_png_and_recompress(store, tmp_path):
    src, a = store
    runner = CliRunner()
    res = runner.invoke(main, ["analyze", str(src), "--chunks", "y=32,x=32", "-o", str(tmp_path / "an.zarr"), "--no-progress", "--wide"])
    assert res.exit_code == 0, res.output
    assert "early out" in res.output and (tmp_path / "an.zarr").exists()
    res = runner.invoke(main, ["plan", str(src), "--analysis", str(tmp_path / "an.zarr"), "--policy", "min_gain",
                               "--param", "gain=0.2", "-o", str(tmp_path / "plan.zarr")])
    assert res.exit_code == 0, res.output
    assert "min_gain" in res.output
    png = tmp_path / "plan.png"
    res = runner.invoke(main, ["plan", "show", str(tmp_path / "plan.zarr"), "--png", str(png)])
    assert res.exit_code == 0, res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    res = runner.invoke(main, ["recompress", str(src), str(tmp_path / "d.zarr"), "--chunks", "y=32,x=32",
                               "--shards", "y=64,x=80", "--plan", str(tmp_path / "plan.zarr"), "--plan-force",
                               "--no-progress"])
    assert res.exit_code == 0, res.output
    assert _masks_from_files(tmp_path / "d.zarr", "v") == {
        idx: int(m) for idx, m in np.ndenumerate(Plan.load(tmp_path / "plan.zarr")["v"].masks) if idx != (3, 4)
    }
    res = runner.invoke(main, ["plan", str(src), "--policy", "best", "-o", str(tmp_path / "p2.zarr"), "--no-progress"])
    assert res.exit_code != 0 and "policy: 'best' is not one of" in res.output
    assert not (tmp_path / "p2.zarr").exists()


def test_value_statistics_of_ml_and_complex_types():
    import ml_dtypes

    from zopt.dtypes.complex import pack_complex
    from zopt.planning.analysis import batch_value_stats

    x = np.array([0, 0, 1, np.nan, np.nan, -0.0], dtype=ml_dtypes.bfloat16)
    zero, runs, nan = batch_value_stats(x.view(np.uint8).reshape(1, -1), x.dtype)
    # bit patterns: -0.0 is not zero here; runs: (0, 0) and (NaN, NaN) with the same bits
    assert (zero[0], runs[0], nan[0]) == (2 / 6, 2 / 6, 2 / 6)
    c = pack_complex(np.array([0, 1, np.nan, 1]), np.array([0, np.nan, 0, 0]), "complex_bfloat16")
    zero, runs, nan = batch_value_stats(np.stack([c.view(np.uint8)] * 2), c.dtype)
    assert zero.tolist() == [1 / 4] * 2 and nan.tolist() == [2 / 4] * 2 and runs.tolist() == [0.0] * 2


def test_xarray_to_zarr_with_conditional_encoding_heuristic_and_plan(tmp_path):
    """The writer side from xarray: ``to_zarr(encoding=...)`` with a decision, through dask tasks,
    read back by a fresh interpreter whose code never imports zopt."""
    import hashlib
    import subprocess
    import sys

    from zarr.codecs import ZstdCodec

    from zopt import ShuffleCodec
    from zopt.readback.info import store_info

    a = _mixed()
    ds = xr.Dataset({"v": (("y", "x"), a)}).chunk({"y": 64, "x": 160})  # dask: one task per shard
    encoding = {"chunks": CHUNK, "shards": (64, 160)}
    wrapped = [ShuffleCodec(), ZstdCodec(level=3)]
    ds.to_zarr(tmp_path / "h.zarr", zarr_format=3, consolidated=False, encoding={"v": {
        **encoding, "compressors": [ConditionalCodec(codecs=wrapped, decision="compress_if_smaller")]}})
    masks = store_info(tmp_path / "h.zarr", ["v"])[0].masks
    assert masks[0] >= 1 and sum(n for m, n in masks.items() if m) >= 10  # random bytes raw, the rest compressed
    # a plan from an analysis of the same values decides instead (the spec's Example 3)
    zarr.open_group(tmp_path / "raw.zarr", mode="w").create_array(
        "v", shape=a.shape, chunks=CHUNK, dtype="f4", fill_value=0, dimension_names=("y", "x"))[:] = a
    plan = make_plan(analyze(tmp_path / "raw.zarr", ["v"], chunks=CHUNK), "smallest")
    with zopt.pipeline():  # a plan's masks need each chunk's index: zopt's codec pipeline, opted into
        ds.to_zarr(tmp_path / "p.zarr", zarr_format=3, consolidated=False, encoding={"v": {
            **encoding, "compressors": [ConditionalCodec(codecs=wrapped, decision=plan["v"])]}})
    # every chunk is stored (xarray's fill value for float32 is NaN, not the zeros of chunk (3, 4))
    assert _masks_from_files(tmp_path / "p.zarr", "v") == {idx: int(m) for idx, m in np.ndenumerate(plan["v"].masks)}
    code = ("import hashlib, xarray as xr; "
            f"print(hashlib.sha256(xr.open_zarr({str(tmp_path / 'p.zarr')!r}, consolidated=False)['v'].values.tobytes()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[-1] == hashlib.sha256(a.tobytes()).hexdigest()


def test_the_plan_policy_and_the_runtime_decision_agree_on_the_same_sizes():
    """``compress_if_smaller`` exists twice: the runtime decision (``decisions.CompressIfSmaller``,
    trial-encoding one chunk) and the plan policy (vectorised over the trial sizes of every mask).
    On chunks small enough to be trial-encoded whole, given the sizes of the same encodings, both
    pick the same mask: for random, constant, smooth and half-and-half chunks through a
    length-preserving filter and two compressors."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from zarr.codecs import GzipCodec, ZstdCodec

    from zopt.codecs.chain import chunk_spec
    from zopt.codecs.decisions import SAMPLE_ABOVE, CompressIfSmaller
    from zopt.codecs.shuffle import ShuffleCodec
    from zopt.codecs.sync import sync_encoder
    from zopt.planning.plan import _compress_if_smaller

    codecs = [ShuffleCodec(element_size=4), ZstdCodec(level=1), GzipCodec(level=1)]
    spec = chunk_spec((1024,), zarr.core.dtype.Float32(), 0.0)
    enc = [sync_encoder(c, spec) for c in codecs]

    def run(i, data):
        return np.frombuffer(bytes(enc[i](data)), np.uint8)

    @settings(max_examples=40, deadline=None)
    @given(kind=st.sampled_from(["random", "constant", "smooth", "half"]), seed=st.integers(0, 2**16),
           n=st.integers(16, 4096))
    def check(kind, seed, n):
        rng = np.random.default_rng(seed)
        values = {"random": rng.standard_normal(n), "constant": np.full(n, 3.5),
                  "smooth": np.round(np.sin(np.linspace(0, 8, n)) * 100, 2),
                  "half": np.where(np.arange(n) < n // 2, 0.0, rng.standard_normal(n))}[kind].astype("f4")
        data = values.view(np.uint8)
        assert data.size <= SAMPLE_ABOVE  # whole-chunk trials: no sampling in the runtime decision
        sizes = []
        for mask in range(8):
            out = data
            for i in range(3):
                if mask >> i & 1:
                    out = run(i, out)
            sizes.append(out.size)
        planned = int(_compress_if_smaller(np.array([sizes], dtype=float), 3)[0])
        decided, payload = CompressIfSmaller().choose(None, [None] * 3, data, run)
        assert decided == planned, (kind, sizes)
        assert payload.size == sizes[decided]

    check()


def test_a_plan_of_a_store_with_child_groups_loads_every_array(tmp_path):
    """``zopt plan`` saves ``child/b``'s plan under the group ``child``, which has no plan of its own:
    ``Plan.load`` raised KeyError 'array' on it. ``recompress --plan`` still refuses child groups."""
    g = zarr.open_group(tmp_path / "s.zarr", mode="w")
    rng = np.random.default_rng(0)
    for path in ("a", "child/b"):
        arr = g.create_array(path, shape=(32, 32), chunks=(16, 16), dtype="f4", dimension_names=("y", "x"))
        arr[...] = rng.random((32, 32), dtype="f4")
    result = CliRunner().invoke(main, ["plan", str(tmp_path / "s.zarr"), "-o", str(tmp_path / "p.zarr"), "--no-progress"])
    assert result.exit_code == 0, result.output
    plan = Plan.load(tmp_path / "p.zarr")
    assert sorted(plan.arrays) == ["a", "child/b"]
    assert plan.arrays["child/b"].masks.shape == (2, 2)
    result = CliRunner().invoke(main, ["recompress", str(tmp_path / "s.zarr"), str(tmp_path / "o.zarr"),
                                       "--plan", str(tmp_path / "p.zarr"), "--no-progress"])
    assert result.exit_code == 1 and "has child groups ['child']" in result.output
    assert not (tmp_path / "o.zarr").exists()


def test_a_plan_over_a_one_cell_grid_of_no_dimensions_saves_and_loads(tmp_path):
    """A 0-d grid (a scalar array's) is saved with zarr's automatic chunks, which are its shape ();
    ``chunks=None`` made both zarr legs refuse the plan."""
    from zopt.planning.plan import ArrayPlan

    ap = ArrayPlan(name="s", masks=np.array(1, np.uint8), codecs=[{"name": "zstd"}], header_bits=8, shape=(),
                   chunk_shape=(), dtype="float32", digests=np.array(7, np.uint32), ratios=np.array(2.0, np.float32),
                   keepbits=np.array(5, np.uint8))
    Plan(arrays={"s": ap}, policy="smallest").save(tmp_path / "p.zarr")
    back = Plan.load(tmp_path / "p.zarr")["s"]
    assert (back.masks.shape, int(back.masks), int(back.digests), float(back.ratios), int(back.keepbits)) == ((), 1, 7, 2.0, 5)
    assert back.fingerprint == ap.fingerprint
