"""The copy path (a re-shard with the source's own chain, ``zopt.store.reshard``) never publishes a
chunk that does not decode: every copied chunk is decoded, on the bytes that are copied, wherever
it sits in its shard; what zarr-python reads (several zstd frames, a skippable frame first) is
copied and read back; a chunk rewritten while the job reads it is refused or copied whole."""

from __future__ import annotations

import threading

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

from zopt import recompress, verify
from zopt.errors import ChunkDecodeError

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}


def _chain(checksum: bool) -> list[dict]:
    return [BYTES, {"name": "zstd", "configuration": {"level": 3, "checksum": checksum}}]


def _values() -> np.ndarray:
    return np.cumsum(np.random.default_rng(3).normal(size=(64, 64)), axis=0).astype("f4")


def _source(tmp_path, checksum: bool = False):
    src = tmp_path / "src.zarr"
    zarr.open_group(src, mode="w").create_array("v", shape=(64, 64), chunks=(16, 16), dtype="f4", fill_value=0,
                                                compressors=[ZstdCodec(level=3, checksum=checksum)])[...] = _values()
    return src


def _copy(src, dst, checksum: bool = False):
    report = recompress(src, dst, codecs=_chain(checksum), chunks=(16, 16), shards=(64, 64), checksum=False)
    assert report.arrays[0].copied
    return report


# chunk (0, 1): position 1 of its target shard, which a sample of one chunk in 8 never decoded
MUTANTS = {
    "truncated frame": lambda b: b[:-3],
    "appended bytes": lambda b: b + b"\x00\x01\x02",
    "cut header": lambda b: b[:3],
    "flipped magic": lambda b: bytes([b[0] ^ 1]) + b[1:],
    "flipped last block byte": lambda b: b[:-1] + bytes([b[-1] ^ 0x40]),
    "content size of another chunk": lambda b: b[:5] + bytes([b[5] ^ 0x04]) + b[6:],
}


def _numcodecs_fails(blob: bytes) -> bool:
    try:
        out = numcodecs.Zstd().decode(blob)
    except Exception:  # noqa: BLE001 - numcodecs raises RuntimeError or ValueError
        return True
    return len(out) != 16 * 16 * 4


@pytest.mark.parametrize("checksum", [False, True], ids=["no zstd checksum", "zstd checksum"])
@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_damaged_chunk_anywhere_in_a_shard_is_refused_naming_it(tmp_path, mutant, checksum):
    src = _source(tmp_path, checksum)
    path = src / "v" / "c" / "0" / "1"
    damaged = MUTANTS[mutant](path.read_bytes())
    if not _numcodecs_fails(damaged):
        pytest.skip("this damage still decodes to a chunk (zstd checks nothing there without a checksum)")
    path.write_bytes(damaged)
    with pytest.raises(ChunkDecodeError, match=r"chunk 'v/c/0/1'") as err:
        _copy(src, tmp_path / "dst.zarr", checksum)
    assert str(src) in str(err.value)
    assert not (tmp_path / "dst.zarr").exists()


def test_a_corrupt_zstd_checksum_is_refused(tmp_path):
    src = _source(tmp_path, checksum=True)
    path = src / "v" / "c" / "0" / "1"
    blob = path.read_bytes()
    path.write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]))  # the frame's content checksum
    assert _numcodecs_fails(path.read_bytes())
    with pytest.raises(ChunkDecodeError, match=r"chunk 'v/c/0/1'.*zstd.*(?i:checksum)"):
        _copy(src, tmp_path / "dst.zarr", checksum=True)


@pytest.mark.parametrize("form", ["two frames", "skippable frame first"])
def test_what_zarr_python_reads_is_copied_and_read_back(tmp_path, form):
    src = _source(tmp_path)
    raw = _values()[0:16, 16:32].tobytes()
    if form == "two frames":
        blob = numcodecs.zstd.compress(raw[:500], 3) + numcodecs.zstd.compress(raw[500:], 3)
    else:
        blob = (0x184D2A53).to_bytes(4, "little") + (6).to_bytes(4, "little") + b"zarr!!" + numcodecs.zstd.compress(raw, 3)
    (src / "v" / "c" / "0" / "1").write_bytes(blob)
    assert bytes(numcodecs.Zstd().decode(blob)) == raw  # what zarr-python's zstd codec decodes
    _copy(src, tmp_path / "dst.zarr")
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "dst.zarr" / "v")[...], _values())
    assert verify(src, tmp_path / "dst.zarr").ok


def test_a_chunk_rewritten_while_it_is_copied_is_refused_or_copied_whole(tmp_path):
    """A writer tears chunk (0, 1) (half of another frame, then the rest) while the job copies it
    several times: every job either fails naming the chunk or publishes a store that decodes."""
    src = _source(tmp_path)
    path = src / "v" / "c" / "0" / "1"
    frames = [numcodecs.zstd.compress((_values()[0:16, 16:32] + k).tobytes(), 3) for k in range(2)]
    stop = threading.Event()

    def tear() -> None:
        k = 0
        while not stop.is_set():
            frame = frames[k % 2]
            with open(path, "r+b") as f:
                f.write(frame[: len(frame) // 2])
                f.flush()
                f.write(frame[len(frame) // 2 :])
                f.truncate()
            k += 1

    writer = threading.Thread(target=tear, daemon=True)
    writer.start()
    outcomes = []
    try:
        for run in range(6):
            dst = tmp_path / f"dst{run}.zarr"
            try:
                _copy(src, dst)
            except ChunkDecodeError as exc:
                assert "v/c/0/1" in str(exc)
                outcomes.append("refused")
                continue
            got = zarr.open_array(dst / "v")[0:16, 16:32]
            assert any(np.array_equal(got, _values()[0:16, 16:32] + k) for k in range(2))
            outcomes.append("copied")
    finally:
        stop.set()
        writer.join()
    assert len(outcomes) == 6
