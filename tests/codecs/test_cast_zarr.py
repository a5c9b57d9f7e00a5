"""scale_offset and cast_value inside zarr arrays: the spec's combined example through zarr and
xarray, stored bytes, fill-value validation at creation, chunk keys in errors, sharded chains,
and coexistence with another implementation registered under the same name."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.storage import LocalStore

from zopt.codecs.cast_value import CastValueCodec
from zopt.codecs.exact_cast import cast_array
from zopt.codecs.scale_offset import ScaleOffsetCodec

SPEC_FILTERS = [
    {"name": "scale_offset", "configuration": {"offset": -10, "scale": 0.1}},
    {"name": "cast_value", "configuration": {
        "data_type": "uint8", "rounding": "nearest-even",
        "scalar_map": {"encode": [["NaN", 0]], "decode": [[0, "NaN"]]}}},
]
VALUES = np.array([np.nan, 0.0, 10.0, 15.5, -10.0, 15.0, 5.04, np.nan])
# (x + 10) * 0.1 rounded to nearest-even; NaN → 0 by scalar_map
STORED = [0, 1, 2, 3, 0, 2, 2, 0]
DECODED = [np.nan, 0.0, 10.0, 20.0, np.nan, 10.0, 10.0, np.nan]


def test_spec_combined_example_through_zarr(tmp_path):
    a = zarr.create_array(LocalStore(tmp_path), name="v", shape=(8,), chunks=(4,), dtype="float64",
                          fill_value=np.nan, filters=SPEC_FILTERS, compressors=None)
    a[:] = VALUES
    stored = (tmp_path / "v/c/0").read_bytes() + (tmp_path / "v/c/1").read_bytes()
    assert list(stored) == STORED
    meta = json.loads((tmp_path / "v/zarr.json").read_text())
    assert [c["name"] for c in meta["codecs"]] == ["scale_offset", "cast_value", "bytes"]
    assert meta["codecs"][1] == SPEC_FILTERS[1]
    back = zarr.open_array(LocalStore(tmp_path), path="v")[:]
    np.testing.assert_array_equal(back, DECODED)


def test_spec_combined_example_through_xarray(tmp_path):
    ds = xr.Dataset({"t": (("x",), VALUES)})
    ds.to_zarr(tmp_path / "d.zarr", zarr_format=3, consolidated=False,
               encoding={"t": {"filters": [ScaleOffsetCodec(offset=-10, scale=0.1),
                                           CastValueCodec(**SPEC_FILTERS[1]["configuration"])],
                               "compressors": None, "chunks": (8,), "fill_value": np.nan}})
    assert list((tmp_path / "d.zarr/t/c/0").read_bytes()) == STORED
    back = xr.open_zarr(tmp_path / "d.zarr", consolidated=False)
    np.testing.assert_array_equal(back["t"].values, DECODED)


def test_float32_to_float8_and_int4_store_the_cast_values(tmp_path):
    x = np.random.default_rng(0).normal(0, 3, 64).astype(np.float32)
    a = zarr.create_array(LocalStore(tmp_path), name="f8", shape=(64,), chunks=(32,), dtype="float32", fill_value=0,
                          filters=[{"name": "cast_value", "configuration": {"data_type": "float8_e4m3",
                                                                            "out_of_range": "clamp"}}],
                          compressors=None)
    a[:] = x
    expected = cast_array(x, ml_dtypes.float8_e4m3, out_of_range="clamp")
    stored = (tmp_path / "f8/c/0").read_bytes() + (tmp_path / "f8/c/1").read_bytes()
    assert stored == expected.tobytes()
    np.testing.assert_array_equal(a[:], expected.astype(np.float32))

    b = zarr.create_array(LocalStore(tmp_path), name="i4", shape=(64,), chunks=(64,), dtype="float32", fill_value=0,
                          filters=[{"name": "cast_value", "configuration": {"data_type": "int4", "out_of_range": "clamp",
                                                                            "rounding": "towards-zero"}}],
                          serializer={"name": "packbits"}, compressors=None)
    b[:] = x
    q = np.clip(np.trunc(x), -8, 7)
    assert len((tmp_path / "i4/c/0").read_bytes()) == 32  # 4 bits each
    np.testing.assert_array_equal(b[:], q)


def test_fill_value_that_cannot_round_trip_is_refused_at_creation(tmp_path):
    with pytest.raises(ValueError, match="fill_value"):
        zarr.create_array(LocalStore(tmp_path), name="u", shape=(4,), dtype="uint16", fill_value=0,
                          filters=[{"name": "scale_offset", "configuration": {"offset": 1000}}])
    with pytest.raises(ValueError, match="fill_value.*does not survive"):
        zarr.create_array(LocalStore(tmp_path), name="w", shape=(4,), dtype="float32", fill_value=0.25,
                          filters=[{"name": "cast_value", "configuration": {"data_type": "int8"}}])
    assert not (tmp_path / "u").exists() and not (tmp_path / "w").exists()


def test_a_value_that_cannot_be_cast_names_the_chunk_and_rule(tmp_path):
    a = zarr.create_array(LocalStore(tmp_path), name="e", shape=(8,), chunks=(4,), dtype="float64", fill_value=0,
                          filters=[{"name": "cast_value", "configuration": {"data_type": "uint8"}}])
    with pytest.raises(ValueError, match=r"e/c/1.*300\.0.*out_of_range"):
        a[:] = [0, 1, 2, 3, 4, 300.0, 6, 7]


def test_sharded_chain_with_cast_value(tmp_path):
    x = np.linspace(0, 25.5, 4096).reshape(64, 64)
    a = zarr.create_array(LocalStore(tmp_path), name="s", shape=(64, 64), chunks=(16, 16), shards=(32, 32),
                          dtype="float64", fill_value=0,
                          filters=[{"name": "scale_offset", "configuration": {"scale": 10}},
                                   {"name": "cast_value", "configuration": {"data_type": "uint8"}}])
    a[:] = x
    np.testing.assert_array_equal(a[:], np.rint(x * 10) / 10)


def test_selected_by_zarr_config_when_another_implementation_shares_the_name():
    """zarr-python >= 3.2 registers its own cast_value/scale_offset. zopt selects its own through
    zarr's ``codecs.<name>`` setting inside its jobs (never by registration order), and a user's
    setting of another implementation wins.
    On zarr 3.1 a stand-in class registered under the same name plays zarr's part."""
    from zarr.registry import get_codec_class, register_codec

    from zopt.codecs.zarr_config import select_shared_codec_names
    from zopt.compat.zarr_compat import ZARRS_OWN_SELECTED, codec_registry

    ours = "zopt.codecs.cast_value.CastValueCodec"
    registry = codec_registry("cast_value")
    added = None
    if not [q for q in registry if not q.startswith("zopt.")]:  # zarr 3.1: only zopt's
        assert select_shared_codec_names() == {}

        class OtherCastValue(CastValueCodec):
            pass

        OtherCastValue.__module__ = "zarr.codecs.cast_value"
        added = f"{OtherCastValue.__module__}.{OtherCastValue.__qualname__}"
        register_codec("cast_value", OtherCastValue)
    other = next(q for q in registry if not q.startswith("zopt."))
    try:
        with zarr.config.set({"codecs.cast_value": None}):
            assert select_shared_codec_names()["codecs.cast_value"] == ours
        with zarr.config.set({"codecs.cast_value": other}):
            # the user chose; zarr's own, as importing zopt names it on zarr >= 3.2 (what zarr uses
            # without zopt), counts as no choice inside zopt's jobs
            assert ("codecs.cast_value" in select_shared_codec_names()) == (other == ZARRS_OWN_SELECTED.get("cast_value"))
            assert get_codec_class("cast_value") is registry[other]
        with zarr.config.set({"codecs.cast_value": ours}):
            assert get_codec_class("cast_value") is CastValueCodec
            spec = {"name": "cast_value", "configuration": {"data_type": "uint8"}}
            assert type(zarr.create_array(zarr.storage.MemoryStore(), shape=(2,), dtype="float32", fill_value=0,
                                          filters=[spec]).metadata.codecs[0]) is CastValueCodec
    finally:
        if added is not None:
            registry.pop(added, None)
    assert get_codec_class("cast_value") is CastValueCodec


def test_sharded_packing_that_misses_zero_is_not_refused_but_a_bad_real_fill_is(tmp_path):
    """zarr >= 3.4 validates a shard's inner codecs against a fill of 0, not the array's: an
    offset of 273.15 with step 0.01 (0.0 not on the grid) was refused at creation there."""
    from zopt.codecs.scale_offset import scale_offset_decode

    def filters():
        return [{"name": "scale_offset", "configuration": {"offset": 273.15, "scale": 100}},
                {"name": "cast_value", "configuration": {"data_type": "int16", "scalar_map": {
                    "encode": [["NaN", -32768]], "decode": [[-32768, "NaN"]]}}}]

    a = zarr.create_array(LocalStore(tmp_path), name="k", shape=(8, 8), chunks=(4, 4), shards=(8, 8),
                          dtype="float64", fill_value=np.nan, filters=filters(), compressors=None)
    x = scale_offset_decode(np.arange(-2000, -1936, dtype=np.float64).reshape(8, 8), np.float64(273.15),
                            np.float64(100))
    x[0, 0] = np.nan
    a[:4] = x[:4]
    b = zarr.open_array(LocalStore(tmp_path), path="k")
    np.testing.assert_array_equal(b[:4], x[:4])
    assert np.isnan(b[4:]).all()  # the inner chunks never written read as the array's fill
    with pytest.raises(ValueError, match="fill_value.*does not survive"):
        zarr.create_array(LocalStore(tmp_path), name="bad", shape=(8,), chunks=(4,), shards=(8,), dtype="float64",
                          fill_value=0.5, filters=filters(), compressors=None)[:] = 1.0
