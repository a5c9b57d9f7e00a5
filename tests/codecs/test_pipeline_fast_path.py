"""The pipeline's whole-chunk fast path: same bytes as zarr's own pipeline, same values, same errors."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec

from zopt.codecs.cast_value import CastValueCodec
from zopt.codecs.packbits import PackBitsCodec
from zopt.codecs.pipeline import ChunkIndexCodecPipeline
from zopt.errors import ChunkDecodeError

ZARR_PIPELINE = "zarr.core.codec_pipeline.BatchedCodecPipeline"
ZOPT_PIPELINE = "zopt.codecs.pipeline.ChunkIndexCodecPipeline"

CHAINS = {
    "packbits-uint4": dict(dtype="uint4", serializer=PackBitsCodec(), compressors=None),
    "packbits-int16-12bit+crc32c": dict(dtype="int16", serializer=PackBitsCodec(first_bit=2, last_bit=13),
                                        compressors=[Crc32cCodec()]),
    "bytes-big+zstd": dict(dtype="float32", serializer=BytesCodec(endian="big"), compressors=[ZstdCodec(level=1)]),
    "cast_value-float8+zstd": dict(dtype="float32", filters=[CastValueCodec(data_type="float8_e4m3", out_of_range="clamp")],
                                   serializer=BytesCodec(), compressors=[ZstdCodec(level=1)]),
    "bool-packbits": dict(dtype="bool", serializer=PackBitsCodec(), compressors=None),
}


def _values(dtype: str, shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "uint4":
        return rng.integers(0, 16, shape, dtype=np.uint8).astype(ml_dtypes.uint4)
    if dtype == "int16":
        return (rng.integers(-2048, 2048, shape, dtype=np.int16) << 2).astype(np.int16)
    if dtype == "bool":
        return rng.integers(0, 2, shape, dtype=np.uint8).astype(bool)
    if "cast" in dtype:
        return rng.integers(-8, 8, shape).astype(np.float32) / 4
    return np.round(rng.standard_normal(shape), 2).astype(np.float32)


def _write(path: Path, pipeline: str, name: str, data: np.ndarray) -> zarr.Array:
    cfg = dict(CHAINS[name])
    dtype = cfg.pop("dtype")
    with zarr.config.set({"codec_pipeline.path": pipeline}):
        z = zarr.create_array(str(path), shape=data.shape, chunks=(16, 24), dtype=dtype, fill_value=0, **cfg)
        z[:] = data
        z[3:9, 30:40] = data[:6, :10]  # a partial-chunk write: zarr's own path
    return z


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_fast_path_stores_what_zarrs_pipeline_stores(tmp_path, name, monkeypatch):
    dtype = "cast" if "cast" in name else CHAINS[name]["dtype"]
    data = _values(dtype, (40, 60))
    data[16:32, 24:48] = 0  # whole chunks equal to the fill value: not stored
    calls = []
    original = ChunkIndexCodecPipeline._encode_whole_chunk
    monkeypatch.setattr(ChunkIndexCodecPipeline, "_encode_whole_chunk",
                        lambda self, chunk, spec: calls.append(1) or original(self, chunk, spec))
    _write(tmp_path / "zarr.zarr", ZARR_PIPELINE, name, data)
    assert calls == []
    _write(tmp_path / "zopt.zarr", ZOPT_PIPELINE, name, data)
    assert len(calls) == 4  # the 2×2 chunks inside the array; edge chunks (40, 60 are not multiples) take zarr's path
    expected = data.copy()
    expected[3:9, 30:40] = data[:6, :10]
    files = sorted(p.relative_to(tmp_path / "zarr.zarr") for p in (tmp_path / "zarr.zarr").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "zopt.zarr") for p in (tmp_path / "zopt.zarr").rglob("*") if p.is_file())
    assert Path("c/1/1") not in files  # the fill chunk
    for f in files:
        assert (tmp_path / "zarr.zarr" / f).read_bytes() == (tmp_path / "zopt.zarr" / f).read_bytes(), f
    with zarr.config.set({"codec_pipeline.path": ZOPT_PIPELINE}):
        z = zarr.open_array(str(tmp_path / "zopt.zarr"), mode="r")
        np.testing.assert_array_equal(np.asarray(z[:]).astype(np.float64), np.asarray(expected).astype(np.float64))
        # partial reads and dropped axes
        np.testing.assert_array_equal(np.asarray(z[5, 7:50]).astype(np.float64), np.asarray(expected[5, 7:50]).astype(np.float64))
        np.testing.assert_array_equal(np.asarray(z[17:39, 2]).astype(np.float64), np.asarray(expected[17:39, 2]).astype(np.float64))


def test_a_negative_zero_chunk_is_kept_under_fill_zero(tmp_path):
    data = np.zeros((16, 24), np.float32)
    data[:] = -0.0
    z = zarr.create_array(str(tmp_path / "z.zarr"), shape=(32, 24), chunks=(16, 24), dtype="f4", fill_value=0.0)
    z[:16] = data
    z[16:] = 0.0
    back = z[:]
    assert np.signbit(back[:16]).all() and not np.signbit(back[16:]).any()
    assert (tmp_path / "z.zarr" / "c" / "0" / "0").exists() and not (tmp_path / "z.zarr" / "c" / "1" / "0").exists()


def test_corrupt_chunks_still_name_the_chunk(tmp_path):
    z = zarr.create_array(str(tmp_path / "z.zarr"), shape=(40, 60), chunks=(16, 24), dtype="int16",
                          serializer=PackBitsCodec(first_bit=2, last_bit=13), compressors=None, fill_value=0)
    z[:] = _values("int16", (40, 60))
    path = tmp_path / "z.zarr" / "c" / "1" / "2"
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ChunkDecodeError, match=r"c/1/2"):
        zarr.open_array(str(tmp_path / "z.zarr"), mode="r")[:]
