"""Corrupt shards are named, never read as the fill value: empty and short files, half-empty
index entries, entries into the index region, bad checksums; by ``zopt info`` (``--check``),
recompress and zopt's raw reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from zopt import recompress
from zopt.cli.commands import main
from zopt.errors import ChunkDecodeError, ZoptError
from zopt.readback.info import store_info
from zopt.store.shards import EMPTY, ShardIndexError, layout_of, read_index

KEY = "v/c/0/0"


@pytest.fixture
def store(tmp_path) -> Path:
    """A store whose array ``v`` has one shard of 2×3 inner chunks (crc32c at the end of the
    inner chain), and its source."""
    a = np.arange(32 * 48, dtype="f4").reshape(32, 48) + 1
    src = tmp_path / "src.zarr"
    zarr.open_group(src, mode="w").create_array("v", shape=a.shape, chunks=a.shape, dtype="f4", fill_value=0)[:] = a
    dst = tmp_path / "d.zarr"
    recompress(src, dst, chunks=(16, 16), shards=(32, 48), checksum=True, menu="classic")  # masks read through crc32c
    return dst


def _set_entry(store: Path, i: int, offset: int, nbytes: int) -> None:
    lay = layout_of(zarr.open_array(store, path="v"))
    path = store / KEY
    table = read_index(path, lay)
    table[i] = (offset, nbytes)
    data = bytearray(path.read_bytes())
    data[-lay.index_nbytes :] = lay.encode_index(table)
    path.write_bytes(bytes(data))


def _info_cli(store: Path, *args: str):
    res = CliRunner().invoke(main, ["info", str(store), *args])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    return res.output


@pytest.mark.parametrize("size", [0, 7])
def test_an_empty_or_short_shard_file_is_named_not_read_as_fill(store, tmp_path, size):
    path = store / KEY
    path.write_bytes(path.read_bytes()[:size])
    with pytest.raises(ShardIndexError, match=rf"'{KEY}'.*{size} bytes, fewer than its"):
        store_info(store)
    assert KEY in _info_cli(store)
    with pytest.raises(ShardIndexError, match=KEY):  # recompress does not drop its chunks
        recompress(store, tmp_path / "out.zarr", chunks=(16, 16), shards=(32, 48))
    assert not (tmp_path / "out.zarr").exists()


@pytest.mark.parametrize("entry", [(2**64 - 1, 100), (0, 2**64 - 1)], ids=["offset-empty", "length-empty"])
def test_a_half_empty_index_entry_is_corruption(store, tmp_path, entry):
    _set_entry(store, 1, *entry)
    with pytest.raises(ShardIndexError, match=rf"{KEY}': .*inner chunk 1 .*half empty"):
        read_index(store / KEY, layout_of(zarr.open_array(store, path="v")))
    assert "half empty" in _info_cli(store)
    with pytest.raises(ShardIndexError, match="half empty"):
        recompress(store, tmp_path / "out.zarr", chunks=(16, 16), shards=(32, 48))


def test_an_entry_into_the_index_region_is_corruption_zarr_reads_it(store):
    lay = layout_of(zarr.open_array(store, path="v"))
    size = (store / KEY).stat().st_size
    _set_entry(store, 0, size - lay.index_nbytes - 4, 8)  # the last 4 data bytes and 4 of the index
    with pytest.raises(ShardIndexError, match=r"inner chunk 0 .*lies outside the chunk data"):
        store_info(store)
    out = _info_cli(store, "--check")
    assert KEY in out and "outside the chunk data" in out


def test_a_bad_inner_checksum_names_shard_chunk_and_check(store):
    lay = layout_of(zarr.open_array(store, path="v"))
    path = store / KEY
    table = read_index(path, lay)
    data = bytearray(path.read_bytes())
    data[int(table[4, 0]) + 10] ^= 0xFF  # inner chunk 4 = (1, 1)
    path.write_bytes(bytes(data))
    with pytest.raises(ChunkDecodeError) as info:
        store_info(store)  # the mask histogram reads through the crc32c
    assert isinstance(info.value, ZoptError) and isinstance(info.value, ValueError)
    assert info.value.key == KEY and info.value.inner == (1, 1) and info.value.codec == "crc32c"
    out = _info_cli(store)
    assert f"inner chunk (1, 1) of shard '{KEY}'" in out and "crc32c" in out


def test_info_check_decodes_every_chunk(store):
    """Without a conditional codec, plain info reads indexes only; --check decodes the chunks."""
    path = store / KEY
    lay = layout_of(zarr.open_array(store, path="v"))
    table = read_index(path, lay)
    assert (table[:, 0] != EMPTY).all()
    data = bytearray(path.read_bytes())
    data[int(table[5, 0]) + 3] ^= 0x01
    path.write_bytes(bytes(data))
    out = _info_cli(store, "--check")
    assert KEY in out and "(1, 2)" in out


def test_a_bad_index_checksum_names_the_shard_and_the_check(store):
    path = store / KEY
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    out = _info_cli(store)
    assert KEY in out and "index does not decode" in out and "checksum" in out.lower()


def test_info_check_says_what_it_checked_and_that_it_held(store):
    """Issue 35: ``info --check`` was silent on success: nothing said that every chunk decoded."""
    res = CliRunner().invoke(main, ["info", str(store), "--check"])
    assert res.exit_code == 0, res.output
    last = res.output.strip().splitlines()[-1]
    assert last == ("check: decoded every stored chunk of 1 array (6 inner chunks in 1 file, checksums and codecs "
                    "included): every one decoded, no error"), res.output
    plain = CliRunner().invoke(main, ["info", str(store)])
    assert plain.exit_code == 0 and "check:" not in plain.output  # only when asked


def test_analyze_names_a_corrupt_chunk_with_its_store(tmp_path):
    """``zopt analyze`` read chunks with plain zarr: a corrupt one was named without the store
    (``cannot decode chunk 'v/c/0/0': …``); it now reads them as recompress does."""
    src = tmp_path / "s.zarr"
    a = zarr.open_group(src, mode="w").create_array("v", shape=(32, 32), chunks=(16, 16), dtype="f4",
                                                   compressors=[{"name": "zstd", "configuration": {"level": 3}}])
    a[...] = np.arange(32 * 32, dtype="f4").reshape(32, 32)
    (src / "v" / "c" / "0" / "1").write_bytes(b"not a zstd frame at all")
    res = CliRunner().invoke(main, ["analyze", str(src), "--no-progress"])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert f"cannot decode chunk 'v/c/0/1' in {src}" in " ".join(res.output.split()), res.output
