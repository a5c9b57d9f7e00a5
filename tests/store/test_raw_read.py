"""Window reads of raw-stored sources: exactly the sampled bytes, and what a plan checks then."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec

from zopt import recompress
from zopt.planning.analysis import analyze_array
from zopt.planning.plan import PlanMismatchError, make_plan
from zopt.store.raw_read import RawChunkReader, analysis_windows, sampled_bytes
from zopt.store.shards import ShardIndexError


def _data(shape, dtype, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    smooth = np.round(np.sin(np.linspace(0, 30, int(np.prod(shape)))) * 50, 1).reshape(shape)
    noise = rng.standard_normal(shape) * (np.arange(shape[0]) % 3 == 0).reshape(-1, *[1] * (len(shape) - 1))
    return (smooth + noise).astype(dtype)


def _raw_array(path, data, stored, *, sharded_inner=None, endian="little", index_location="end", fill=0):
    """An array ``v`` of a new group at ``path``, stored raw (codecs ``[bytes]``), optionally sharded."""
    g = zarr.open_group(str(path), mode="w", zarr_format=3)
    dims = tuple(f"d{k}" for k in range(data.ndim))
    if sharded_inner is None:
        return g.create_array("v", shape=data.shape, chunks=stored, dtype=data.dtype, fill_value=fill,
                              serializer=BytesCodec(endian=endian), compressors=None, dimension_names=dims)
    return g.create_array("v", shape=data.shape, chunks=sharded_inner, shards={"shape": stored, "index_location": index_location},
                          dtype=data.dtype, fill_value=fill, serializer=BytesCodec(endian=endian), compressors=None,
                          dimension_names=dims)


CASES = [
    # (array shape, stored chunk, sharded inner, analysed chunk, dtype, endian, index location)
    ((256, 320), (128, 160), None, (128, 160), "f4", "little", None),
    ((256, 320), (256, 320), None, (128, 160), "f4", "big", None),
    ((512, 320), (256, 320), (128, 160), (128, 160), "<i2", "little", "end"),
    ((512, 320), (256, 320), (128, 160), (128, 160), "<i2", "little", "start"),
    ((512, 320), (256, 320), (128, 160), (64, 160), "f8", "big", "start"),
    ((8, 96, 120), (4, 96, 120), None, (2, 96, 60), "u1", "little", None),
    ((256, 320), (128, 320), None, (128, 160), ml_dtypes.bfloat16, "little", None),
]


@pytest.mark.parametrize("fraction, windows, min_window", [(16, 12, 4096), (16, 2, None), (4, 3, 4096), (8, 16, 256)])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, (*c[:4], np.dtype(c[4]).name, *c[5:]))))
def test_window_reads_equal_the_sampled_bytes_of_whole_chunks(tmp_path, case, fraction, windows, min_window):
    shape, stored, inner, chunk, dtype, endian, index_location = case
    data = _data(shape, dtype)
    z = _raw_array(tmp_path / "a.zarr", np.zeros(shape, dtype), stored, sharded_inner=inner, endian=endian,
                   index_location=index_location)
    # leave the last stored chunk (or inner chunk) unwritten: it must read as fill
    block = inner or stored
    written = tuple(slice(0, s - b) if k == 0 else slice(None) for k, (s, b) in enumerate(zip(shape, block, strict=True)))
    z[written] = data[written]
    expected_full = np.zeros(shape, dtype)
    expected_full[written] = data[written]
    array = zarr.open_array(str(tmp_path / "a.zarr"), path="v", mode="r")
    reader = RawChunkReader.open(tmp_path / "a.zarr", array)
    assert reader is not None and reader.fits_windows(chunk)
    grid = tuple(s // c for s, c in zip(shape, chunk, strict=True))
    indices = list(np.ndindex(*grid))
    samples, absent = reader.read_windows(chunk, indices, fraction, windows, np.zeros((), dtype), min_window)
    for k, idx in enumerate(indices):
        region = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, chunk, strict=True))
        raw = np.ascontiguousarray(expected_full[region]).view(np.uint8).ravel()
        np.testing.assert_array_equal(samples[k], sampled_bytes(raw, fraction, windows, min_window), err_msg=str(idx))
        assert absent[k] == (idx[0] * chunk[0] >= shape[0] - block[0])
    spans = analysis_windows(int(np.prod(chunk)) * np.dtype(dtype).itemsize, fraction, windows, min_window)
    assert samples.shape == (len(indices), sum(n for _, n in spans))


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, (*c[:4], np.dtype(c[4]).name, *c[5:]))))
def test_region_reads_equal_zarr_reads(tmp_path, case):
    shape, stored, inner, _, dtype, endian, index_location = case
    data = _data(shape, dtype, seed=2)
    z = _raw_array(tmp_path / "a.zarr", np.zeros(shape, dtype), stored, sharded_inner=inner, endian=endian,
                   index_location=index_location, fill=3)
    block = inner or stored
    written = tuple(slice(0, s - b) if k == 0 else slice(None) for k, (s, b) in enumerate(zip(shape, block, strict=True)))
    z[written] = data[written]
    array = zarr.open_array(str(tmp_path / "a.zarr"), path="v", mode="r")
    reader = RawChunkReader.open(tmp_path / "a.zarr", array)
    rng = np.random.default_rng(9)
    regions = [tuple(slice(0, s) for s in shape)]
    for _ in range(12):
        lo = [int(rng.integers(0, s)) for s in shape]
        regions.append(tuple(slice(a, int(rng.integers(a + 1, s + 1))) for a, s in zip(lo, shape, strict=True)))
    for region in regions:
        got = reader.read_region(region, array.fill_value)
        expected = array[region]
        assert got.dtype == expected.dtype and got.flags.c_contiguous
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), expected.view(f"u{got.itemsize}"), err_msg=str(region))


def test_reader_refuses_what_it_cannot_read(tmp_path):
    a = np.zeros((64, 64), "f4")
    compressed = zarr.open_group(str(tmp_path / "c.zarr"), mode="w").create_array("v", shape=a.shape, chunks=(32, 32), dtype="f4")
    assert RawChunkReader.open(tmp_path / "c.zarr", compressed) is None  # zstd by default
    raw = _raw_array(tmp_path / "r.zarr", a, (32, 32))
    reader = RawChunkReader.open(tmp_path / "r.zarr", raw)
    assert reader is not None and reader.fits_windows((16, 32)) and not reader.fits_windows((24, 32))
    with pytest.raises(ValueError, match=r"chunk_shape: \(24, 32\) does not divide the stored chunk shape \(32, 32\)"):
        reader.read_windows((24, 32), [(0, 0)], 16, 2, np.zeros((), "f4"))
    assert RawChunkReader.open("memory://nowhere", raw) is None


def test_truncated_chunk_files_and_bad_shard_entries_are_errors(tmp_path):
    data = _data((256, 320), "f4")
    z = _raw_array(tmp_path / "a.zarr", data, (128, 160))
    z[:] = data
    path = tmp_path / "a.zarr" / "v" / "c" / "0" / "1"
    path.write_bytes(path.read_bytes()[:1000])
    reader = RawChunkReader.open(tmp_path / "a.zarr", zarr.open_array(str(tmp_path / "a.zarr"), path="v"))
    with pytest.raises(OSError, match=r"c/0/1.*expected"):
        reader.read_windows((128, 160), [(0, 1)], 16, 2, np.zeros((), "f4"))
    with pytest.raises(OSError, match=r"c/0/1.*expected"):
        reader.read_region((slice(0, 10), slice(150, 170)), 0)
    s = _raw_array(tmp_path / "s.zarr", data, (256, 320), sharded_inner=(128, 160))
    s[:] = data
    lay_path = tmp_path / "s.zarr" / "v" / "c" / "0" / "0"
    blob = bytearray(lay_path.read_bytes())
    arr = zarr.open_array(str(tmp_path / "s.zarr"), path="v")
    from zopt.store.shards import layout_of

    lay = layout_of(arr)
    table = lay.decode_index(blob[-lay.index_nbytes :], "x").copy()
    table[0, 1] -= 4  # inner chunk 0 claims 4 bytes fewer than a raw chunk
    blob[-lay.index_nbytes :] = lay.encode_index(table)
    lay_path.write_bytes(bytes(blob))
    reader = RawChunkReader.open(tmp_path / "s.zarr", arr)
    with pytest.raises(ShardIndexError, match=r"c/0/0.*inner chunk 0 has"):
        reader.read_windows((128, 160), [(0, 0)], 16, 2, np.zeros((), "f4"))


def _source(path, shape=(300, 400), chunks=(128, 160)):
    """A raw-stored float32 source with edge chunks (300 and 400 are not multiples) and a fill chunk."""
    data = _data(shape, "f4", seed=5)
    data[128:256, 160:320] = 0
    z = _raw_array(path, np.zeros(shape, "f4"), (256, 320))
    z[:] = data
    return data


def test_window_analysis_equals_full_analysis_of_the_same_samples(tmp_path):
    src = tmp_path / "src.zarr"
    _source(src)
    win = analyze_array(src, "v", chunks=(128, 160))
    full = analyze_array(src, "v", chunks=(128, 160), read="full")
    assert win.attrs["read"] == "windows" and win.attrs["digest_scope"] == "windows"
    assert full.attrs["read"] == "full" and full.attrs["digest_scope"] == "chunk"
    stored = ~full["is_fill"].values
    for v in ("entropy", "plane_entropy", "zero_fraction", "run_fraction", "nan_fraction", "encoded_bytes", "early_out", "raw_bytes"):
        np.testing.assert_array_equal(win[v].values[stored], full[v].values[stored], err_msg=v)
    # the all-zero chunk is stored (zarr wrote the whole 256×320 chunk), so only the full read
    # knows it is fill; the windows analysis trial-encodes it instead
    assert bool(full["is_fill"].values[1, 1]) and not bool(win["is_fill"].values[1, 1])
    assert not win["is_fill"].values.any()


def test_window_analysis_refuses_a_compressed_source_when_asked_for_windows(tmp_path):
    zarr.open_group(str(tmp_path / "c.zarr"), mode="w").create_array("v", shape=(64, 64), chunks=(32, 32), dtype="f4")[:] = 1
    with pytest.raises(ValueError, match="read: 'windows' needs a raw-stored source"):
        analyze_array(tmp_path / "c.zarr", "v", read="windows")
    with pytest.raises(ValueError, match=r"read: 'everything' is not one of \['auto', 'windows', 'full'\]"):
        analyze_array(tmp_path / "c.zarr", "v", read="everything")
    assert analyze_array(tmp_path / "c.zarr", "v").attrs["read"] == "full"  # auto falls back


def test_a_plan_from_window_reads_checks_the_windows(tmp_path):
    src = tmp_path / "src.zarr"
    data = _source(src)
    plan = make_plan(analyze_array(src, "v", chunks=(128, 160)))
    assert plan["v"].digest_windows == (16, 12, 4096)
    plan.save(tmp_path / "plan.zarr")
    from zopt.planning.plan import Plan

    back = Plan.load(tmp_path / "plan.zarr")
    assert back["v"].digest_windows == (16, 12, 4096) and back["v"].fingerprint == plan["v"].fingerprint
    assert plan["v"].fingerprint != make_plan(analyze_array(src, "v", chunks=(128, 160), read="full"))["v"].fingerprint
    z = zarr.open_array(str(src), path="v", mode="r+")
    # the 80 KiB chunk (0, 0) has 12 windows of 4 KiB, one centred in each twelfth: bytes 41000
    # (row 64, column 10) lie between two, bytes 1960 (row 3, column 10) inside the first
    assert analysis_windows(128 * 160 * 4, 16, 12)[0] == (1344, 4096)
    assert analysis_windows(128 * 160 * 4, 16, 12)[5:7] == [(35456, 4096), (42304, 4096)]
    z[64, 10] = data[64, 10] + 1  # outside the windows: the plan still applies
    os.makedirs(tmp_path / "out", exist_ok=True)
    dst = tmp_path / "out" / "d.zarr"
    recompress(src, dst, chunks=(128, 160), shards=(256, 320), plan=back, variables=["v"], overwrite=True)
    expect = data.copy()
    expect[64, 10] += 1
    np.testing.assert_array_equal(zarr.open_array(str(dst), path="v", mode="r")[:], expect)
    z[3, 10] = data[3, 10] + 1  # inside a window
    with pytest.raises(PlanMismatchError, match=r"made for other data: chunk \(0, 0\)"):
        recompress(src, dst, chunks=(128, 160), shards=(256, 320), plan=back, variables=["v"], overwrite=True)


def test_a_plan_of_ends_windows_as_zopt_0_1_made_still_applies(tmp_path):
    """Plans made before the windows were spread record (fraction, windows): their digests cover
    the chunk's first and last windows, and recompress checks those, not the spread ones."""
    from zopt.planning.plan import Plan

    src = tmp_path / "src.zarr"
    data = _source(src)
    ends = analyze_array(src, "v", chunks=(128, 160), windows=2, placement="ends")
    del ends.attrs["placement"], ends.attrs["min_window"]  # as an analysis saved by zopt 0.1
    plan = make_plan(ends)
    assert plan["v"].digest_windows == (16, 2)
    plan.save(tmp_path / "plan.zarr")
    z = zarr.open_array(str(src), path="v", mode="r+")
    z[3, 10] = data[3, 10]  # rewritten unchanged
    z[64, 10] = data[64, 10] + 1  # the middle of chunk (0, 0): outside both ends windows
    recompress(src, tmp_path / "d.zarr", chunks=(128, 160), shards=(256, 320), plan=Plan.load(tmp_path / "plan.zarr"),
               variables=["v"])
    z[3, 10] = data[3, 10] + 1  # inside the first window
    with pytest.raises(PlanMismatchError, match=r"made for other data: chunk \(0, 0\)"):
        recompress(src, tmp_path / "e.zarr", chunks=(128, 160), shards=(256, 320), plan=Plan.load(tmp_path / "plan.zarr"),
                   variables=["v"])


def test_spread_windows_lie_one_in_each_stratum_and_never_at_the_ends():
    for nbytes in (65 * 1024, 80 * 1024, 256 * 1024, 330 * 360 * 4, 4 * 2**20 + 64 * 7):
        for fraction, windows in ((16, 16), (16, 8), (4, 3), (64, 16)):
            spans = analysis_windows(nbytes, fraction, windows)
            if spans == [(0, nbytes)]:
                assert windows * 4096 > nbytes - 64 * windows  # too small to sample: whole
                continue
            stratum = nbytes / windows
            assert len(spans) == windows
            for k, (start, length) in enumerate(spans):
                assert start % 64 == 0 and length % 64 == 0 and length >= 4096
                assert length >= nbytes // (fraction * windows) // 64 * 64
                centre = start + length / 2
                assert abs(centre - (k + 0.5) * stratum) <= 64, (nbytes, fraction, windows, k)
            ends = [s + n for s, n in spans]
            assert all(e <= s for e, (s, _) in zip(ends, spans[1:], strict=False))  # no overlap
            if stratum >= 2 * spans[0][1]:  # a sparse sample: neither the chunk's first nor last bytes
                assert spans[0][0] > 0 and ends[-1] < nbytes
    # the ends placement (zopt 0.1) keeps its first and last bytes
    assert analysis_windows(256 * 1024, 16, 2, None) == [(0, 8192), (253952, 8192)]
    assert analysis_windows(64 * 1024, 16, 16) == [(0, 65536)]


@pytest.mark.parametrize("layout", ["compact", "fixed-slot"])
@pytest.mark.parametrize("sharded_source", [False, True])
def test_recompress_reads_raw_sources_exactly(tmp_path, layout, sharded_source):
    shape = (300, 400)
    data = _data(shape, "f4", seed=11)
    src = tmp_path / "src.zarr"
    z = _raw_array(src, data, (256, 320), sharded_inner=(128, 160) if sharded_source else None, endian="big", fill=1.5)
    z[:, :320] = data[:, :320]  # the last column of stored chunks stays absent: fill value
    expect = data.copy()
    expect[:, 320:] = 1.5
    report = recompress(src, tmp_path / "d.zarr", chunks=(64, 80), shards=(128, 160), layout=layout, slot_parts=2)
    got = zarr.open_array(str(tmp_path / "d.zarr"), path="v", mode="r")[:]
    np.testing.assert_array_equal(got, expect)
    assert report.arrays[0].logical_bytes == data.nbytes
