"""Re-sharding without recompressing (issue 34 G5, ``zopt.store.reshard``): a target whose inner
chunks and chain equal the source's gets the source's encoded chunk bytes, checked, in the same
shard layouts, with the same journal; anything that asks for the values to be encoded anew is
not copied."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr
from sigkill import kill_at_replace
from zarr.codecs import Crc32cCodec, ZstdCodec

from zopt import recompress
from zopt.errors import ChunkDecodeError
from zopt.store.shards import EMPTY, layout_of, read_index

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
ZSTD = {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
CRC = {"name": "crc32c"}
INNER = (16, 16, 8)
SHARDS = (32, 48, 8)


def _values() -> np.ndarray:
    rng = np.random.default_rng(5)
    x = np.cumsum(rng.normal(size=(72, 80, 8)), axis=0).astype("f4")  # edge shards and edge chunks on both axes
    x[16:32, :16] = 0  # whole chunks of fill value: never written by zarr, missing in the source
    return x


def _source(tmp_path: Path, crc: bool = False, shards: tuple[int, ...] | None = None) -> Path:
    src = tmp_path / "src.zarr"
    compressors = [ZstdCodec(level=3), *([Crc32cCodec()] if crc else [])]
    zarr.open_group(src, mode="w").create_array("v", shape=(72, 80, 8), chunks=INNER, shards=shards, dtype="f4",
                                                fill_value=0, compressors=compressors)[...] = _values()
    return src


def _source_chunks(src: Path) -> dict[tuple[int, ...], bytes]:
    """Every stored chunk of ``src/v`` by grid coordinates, whether chunk files or inside shards."""
    a = zarr.open_array(src / "v")
    layout = layout_of(a)
    out = {}
    if layout is None:
        for p in (src / "v" / "c").rglob("*"):
            if p.is_file():
                out[tuple(int(c) for c in p.relative_to(src / "v" / "c").parts)] = p.read_bytes()
        return out
    return _shard_chunks(src / "v", layout)


def _shard_chunks(root: Path, layout) -> dict[tuple[int, ...], bytes]:
    out = {}
    cps = layout.chunks_per_shard
    for p in (root / "c").rglob("*"):
        if not p.is_file():
            continue
        shard = tuple(int(c) for c in p.relative_to(root / "c").parts)
        blob = p.read_bytes()
        for i, (off, n) in enumerate(read_index(p, layout)):
            if off != EMPTY:
                local = np.unravel_index(i, cps)
                out[tuple(int(s * k + c) for s, k, c in zip(shard, cps, local, strict=True))] = blob[int(off):int(off + n)]
    return out


def _check_copied(src: Path, dst: Path) -> None:
    b = zarr.open_array(dst / "v")
    np.testing.assert_array_equal(b[...], _values(), strict=True)
    assert _shard_chunks(dst / "v", layout_of(b)) == _source_chunks(src)  # same bytes, same chunks missing


@pytest.mark.parametrize("layout", ["compact", "fixed-slot"])
def test_chunk_files_copied_into_shards_bit_for_bit(tmp_path, layout):
    src = _source(tmp_path)
    assert (1, 0, 0) not in _source_chunks(src)  # a missing chunk, which must stay missing
    report = recompress(src, tmp_path / "dst.zarr", codecs=[BYTES, ZSTD], chunks=INNER, shards=SHARDS, layout=layout,
                        checksum=False)
    (rep,) = report.arrays
    assert rep.copied and rep.chunks_written == len(_source_chunks(src))
    assert any("v: copied encoded chunks" in n and "every chunk decoded" in n for n in report.notes)
    _check_copied(src, tmp_path / "dst.zarr")
    if layout == "compact":
        for p in (q for q in (tmp_path / "dst.zarr" / "v" / "c").rglob("*") if q.is_file()):
            table = read_index(p, layout_of(zarr.open_array(tmp_path / "dst.zarr" / "v")))
            used = table[table[:, 0] != EMPTY]
            assert int(used[:, 1].sum()) + 16 * len(table) + 4 == p.stat().st_size


def test_sharded_source_reshared_with_its_inner_chunks(tmp_path):
    src = _source(tmp_path, crc=True, shards=(16, 32, 8))
    report = recompress(src, tmp_path / "dst.zarr", codecs=[BYTES, ZSTD, CRC], chunks=INNER, shards=SHARDS)
    assert report.arrays[0].copied
    assert any("every chunk's crc32c checked" in n for n in report.notes)
    _check_copied(src, tmp_path / "dst.zarr")


@pytest.mark.parametrize("crc", [False, True])
def test_corrupt_source_chunk_refused_naming_key_and_store(tmp_path, crc):
    src = _source(tmp_path, crc=crc)
    # with a crc32c every chunk is checked: (1, 1, 0) is position 4 of its target shard, not in the sample
    key = (1, 1, 0) if crc else (0, 0, 0)
    path = src / "v" / "c" / "/".join(map(str, key))
    blob = path.read_bytes()
    # a crc32c finds any change; a decode finds a frame cut short (zstd: a flipped byte in its
    # literals decodes, to other values: only a checksum finds that)
    path.write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]) if crc else blob[: len(blob) // 2])
    codecs = [BYTES, ZSTD, CRC] if crc else [BYTES, ZSTD]
    with pytest.raises(ChunkDecodeError) as err:
        recompress(src, tmp_path / "dst.zarr", codecs=codecs, chunks=INNER, shards=SHARDS)
    assert f"v/c/{'/'.join(map(str, key))}" in str(err.value) and str(src) in str(err.value)
    assert not (tmp_path / "dst.zarr").exists()


def test_truncated_chunk_outside_the_sample_refused(tmp_path):
    src = _source(tmp_path)
    path = src / "v" / "c" / "1" / "1" / "0"
    path.write_bytes(b"")
    with pytest.raises(ChunkDecodeError, match=r"v/c/1/1/0.*0 bytes stored"):
        recompress(src, tmp_path / "dst.zarr", codecs=[BYTES, ZSTD], chunks=INNER, shards=SHARDS)


@pytest.mark.parametrize("other", [
    {"codecs": [BYTES, {"name": "zstd", "configuration": {"level": 5, "checksum": False}}], "checksum": False},
    {"codecs": [BYTES, ZSTD], "layout": "fixed-slot"},  # checksum on by default: crc32c appended, the source has none
    {"codecs": [BYTES, ZSTD], "checksum": False, "chunks": (16, 8, 8)},
    {"codecs": [BYTES, ZSTD], "checksum": False, "lossy": "v=abs:0.5"},
])
def test_not_copied_when_the_chain_or_chunks_differ_or_lossy(tmp_path, other):
    src = _source(tmp_path)
    report = recompress(src, tmp_path / "dst.zarr", **{"chunks": INNER, "shards": SHARDS, **other})
    assert not report.arrays[0].copied
    assert not any("copied encoded chunks" in n for n in report.notes)
    b = zarr.open_array(tmp_path / "dst.zarr" / "v")
    if "lossy" not in other:
        np.testing.assert_array_equal(b[...], _values())


def test_resumed_after_sigkill(tmp_path):
    src = _source(tmp_path)
    dst = tmp_path / "dst.zarr"
    code = f"""
        from zopt import recompress
        recompress({str(src)!r}, {str(dst)!r}, codecs={[BYTES, ZSTD]!r}, chunks={INNER!r}, shards={SHARDS!r},
                   scheduler="synchronous")
    """
    # renames: the unfinished marker and journal first, then a shard and its marker each; killed mid-run
    proc = subprocess.run([sys.executable, "-c", kill_at_replace(6) + textwrap.dedent(code)], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert not dst.exists()
    report = recompress(src, dst, codecs=[BYTES, ZSTD], chunks=INNER, shards=SHARDS, scheduler="synchronous")
    (rep,) = report.arrays
    assert rep.copied and 0 < rep.units_resumed < rep.units
    assert rep.chunks_written == len(_source_chunks(src))
    _check_copied(src, dst)


def test_conditional_chain_of_a_sharded_zopt_store_copied(tmp_path):
    classic = [BYTES, {"name": "conditional", "configuration": {"codecs": [{"name": "shuffle"}, ZSTD]}}]
    first = tmp_path / "first.zarr"
    before = recompress(_source(tmp_path), first, codecs=classic, chunks=INNER, shards=(16, 32, 8))
    report = recompress(first, tmp_path / "dst.zarr", codecs=classic, chunks=INNER, shards=SHARDS)
    assert report.arrays[0].copied
    assert report.arrays[0].masks == before.arrays[0].masks and sum(before.arrays[0].masks.values()) == 24  # headers read
    _check_copied(first, tmp_path / "dst.zarr")


def test_zstd_frame_of_another_size_outside_the_sample_refused(tmp_path):
    """A valid zstd frame holding half a chunk decodes without error: its header's content size
    names it, on every chunk, not only the sampled ones."""
    import numcodecs

    src = _source(tmp_path)
    (src / "v" / "c" / "1" / "1" / "0").write_bytes(numcodecs.Zstd(level=3).encode(np.arange(1024, dtype="f4")))
    with pytest.raises(ChunkDecodeError, match=r"v/c/1/1/0.*zstd frame holds 4096 bytes, a chunk 8192"):
        recompress(src, tmp_path / "dst.zarr", codecs=[BYTES, ZSTD], chunks=INNER, shards=SHARDS)


def test_raw_chunk_file_of_the_wrong_length_refused_outside_the_sample(tmp_path):
    src = tmp_path / "raw.zarr"
    zarr.open_group(src, mode="w").create_array("v", shape=(72, 80, 8), chunks=INNER, dtype="f4", fill_value=0,
                                                compressors=None)[...] = _values()
    (src / "v" / "c" / "1" / "1" / "0").write_bytes(b"short")
    with pytest.raises(ChunkDecodeError, match=r"v/c/1/1/0.*5 bytes, a chunk of this chain 8192"):
        recompress(src, tmp_path / "dst.zarr", codecs=[BYTES], chunks=INNER, shards=SHARDS)
