"""The per-data-type default chain (``zopt.planning.menu``) and ``recompress`` using it when no chain is given."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr

from zopt import recompress
from zopt.planning.chains import DEFAULT_CHAIN
from zopt.planning.menu import BYTE_LEVEL, default_chain, default_codecs


@pytest.mark.parametrize("dtype", ["u1", "i1", bool, np.uint8])
def test_one_byte_types_get_zstd_alone_at_the_byte_level(dtype):
    assert default_codecs(dtype) == [{"name": "zstd", "configuration": {"level": BYTE_LEVEL}}]


@pytest.mark.parametrize("dtype", ["i2", "u2", "f2", "f4", "<f8", ">i4", "c8"])
def test_wider_types_keep_the_chain_of_zopt_0_1(dtype):
    assert default_chain(dtype) == DEFAULT_CHAIN


def test_level_overrides_and_bad_arguments_name_the_parameter():
    assert default_codecs("f4", level=9)[1] == {"name": "zstd", "configuration": {"level": 9}}
    assert default_codecs("u1", level=3) == [{"name": "zstd", "configuration": {"level": 3}}]
    for bad in (0, 23, True, 3.0):
        with pytest.raises(ValueError, match="level:"):
            default_codecs("f4", level=bad)
    with pytest.raises(ValueError, match="dtype:"):
        default_codecs("not-a-type")


def test_recompress_gives_each_variable_the_chain_of_its_type(tmp_path):
    y, x = np.mgrid[0:128, 0:256]
    f = np.sin(x / 9) * np.cos(y / 7) + np.sin((x + y) / 23) + np.random.default_rng(3).normal(0, 0.15, (128, 256))
    classes = np.clip((f + 2.2) * 4, 0, 16).astype(np.uint8)  # 17 classes in patches, like a land-cover map
    mask = classes > 8
    field = f.astype("f4")
    g = zarr.open_group(tmp_path / "src.zarr", mode="w")
    for name, a in (("classes", classes), ("mask", mask), ("field", field)):
        g.create_array(name, shape=a.shape, chunks=a.shape, dtype=a.dtype, fill_value=0, dimension_names=("y", "x"))[:] = a
    dst = tmp_path / "d.zarr"
    report = recompress(tmp_path / "src.zarr", dst, chunks=(64, 128), shards=(128, 256), menu="classic")
    for name, a in (("classes", classes), ("mask", mask), ("field", field)):
        arr = zarr.open_array(dst, path=name)
        np.testing.assert_array_equal(arr[:], a)
        meta = json.loads((dst / name / "zarr.json").read_text())
        inner = meta["codecs"][0]["configuration"]["codecs"]
        wrapped = [c["name"] for c in inner[1]["configuration"]["codecs"]]
        assert wrapped == (["zstd"] if a.dtype.itemsize == 1 else ["shuffle", "zstd"])
    masks = {a.name: a.masks for a in report.arrays}
    assert set(masks["classes"]) == {1}  # zstd applied: the runs compress
    # the menu's level pays on 1-byte data: smaller than the zopt 0.1 chain on the same chunks
    # (not on every input: zstd 10 stores some tiny, very repetitive chunks larger than zstd 3)
    old = tmp_path / "old.zarr"
    recompress(tmp_path / "src.zarr", old, chunks=(64, 128), shards=(128, 256), variables=["classes"],
               codecs=json.dumps(DEFAULT_CHAIN))
    new_size = sum(f.stat().st_size for f in (dst / "classes" / "c").rglob("*") if f.is_file())
    old_size = sum(f.stat().st_size for f in (old / "classes" / "c").rglob("*") if f.is_file())
    assert new_size < old_size


def test_a_given_chain_is_used_for_every_type(tmp_path):
    a = np.arange(64 * 64, dtype=np.uint8).reshape(64, 64)
    g = zarr.open_group(tmp_path / "src.zarr", mode="w")
    g.create_array("v", shape=a.shape, chunks=a.shape, dtype=a.dtype, fill_value=0, dimension_names=("y", "x"))[:] = a
    dst = tmp_path / "d.zarr"
    recompress(tmp_path / "src.zarr", dst, chunks=(32, 32), shards=(64, 64), codecs=json.dumps(DEFAULT_CHAIN))
    meta = json.loads((dst / "v" / "zarr.json").read_text())
    wrapped = meta["codecs"][0]["configuration"]["codecs"][1]["configuration"]["codecs"]
    assert [c["name"] for c in wrapped] == ["shuffle", "zstd"]


def test_sized_chain_reads_a_cast_value_target_given_as_a_json_object():
    """A ``cast_value`` target given as a data type's JSON object (a type with a configuration)
    sizes the blosc after it from zarr's data type; numpy misread the object (ValueError: entry
    not a 2- or 3- tuple) before the name-only path was kept to names."""
    from zopt.planning.chains import sized_chain

    target = {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 1}}
    chain = [{"name": "cast_value", "configuration": {"data_type": target}}, {"name": "bytes"},
             {"name": "blosc", "configuration": {"cname": "zstd"}}]
    assert sized_chain(chain, "f4")[2] == {"name": "blosc", "configuration": {"cname": "zstd", "typesize": 8}}
    by_name = [{"name": "cast_value", "configuration": {"data_type": "int16"}}, *chain[1:]]
    assert sized_chain(by_name, "f8")[2]["configuration"]["typesize"] == 2
