"""zopt.codecs.chain.ChunkEncoder decodes what it encodes, and names the chunk and codec when
stored bytes are corrupt (the decode side that the shard index reader and ``zopt info`` use)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from zarr.core.dtype import Float32, Int16, UInt8

from zopt.codecs.chain import ChunkEncoder, chunk_spec
from zopt.codecs.conditional import ConditionalCodec
from zopt.compat.zarr_compat import resolve_codec
from zopt.errors import ChunkDecodeError

CHAINS = {
    "plain": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 3}}],
    "conditional+crc32c": [
        {"name": "bytes", "configuration": {"endian": "big"}},
        {"name": "conditional", "configuration": {"codecs": [{"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 1}}]}},
        {"name": "crc32c"},
    ],
}
DTYPES = {"<f4": Float32(), "<i2": Int16(), "|u1": UInt8()}


def _encoder(chain: str, dtype: str, shape=(6, 7)) -> ChunkEncoder:
    codecs = [resolve_codec(c) for c in CHAINS[chain]]
    return ChunkEncoder(codecs, chunk_spec(shape, DTYPES[dtype], 0))


@settings(max_examples=60, deadline=None)
@given(chain=st.sampled_from(sorted(CHAINS)), dtype=st.sampled_from(sorted(DTYPES)), data=st.data())
def test_decode_inverts_encode_bit_for_bit(chain, dtype, data):
    values = data.draw(arrays(np.dtype(dtype), (6, 7)))
    enc = _encoder(chain, dtype)
    stored = enc.encode(values, (0, 0)).data
    back = enc.decode(stored.tobytes())
    assert back.dtype == values.dtype and back.shape == values.shape
    assert back.tobytes() == values.astype(dtype).tobytes()  # NaN payloads included


def test_decode_bytes_stops_after_a_codec_and_corruption_names_key_and_codec():
    enc = _encoder("conditional+crc32c", "<f4")
    values = np.arange(42, dtype="<f4").reshape(6, 7)
    stored = enc.encode(values, (1, 2)).data.tobytes()
    cond = next(i for i, c in enumerate(enc.bytes_bytes_codecs) if isinstance(c, ConditionalCodec))
    # undoing only crc32c leaves the conditional header and payload: the stored bytes minus 4
    assert enc.decode_bytes(stored, stop=cond + 1).tobytes() == stored[:-4]
    bad = bytearray(stored)
    bad[5] ^= 0xFF
    with pytest.raises(ChunkDecodeError, match=r"inner chunk \(1, 2\) of shard 'a/c/0/0'.*crc32c") as info:
        enc.decode(bytes(bad), key="a/c/0/0", inner=(1, 2))
    assert info.value.codec == "crc32c" and info.value.key == "a/c/0/0"


def test_zarr_reads_what_the_encoder_decodes(tmp_path):
    # the decode side agrees with zarr-python's own reading of the same chunk file
    a = zarr.create_array(tmp_path / "a.zarr", shape=(6, 7), chunks=(6, 7), dtype="f4",
                          serializer=CHAINS["conditional+crc32c"][0],
                          compressors=CHAINS["conditional+crc32c"][1:], fill_value=0)
    a[:] = np.linspace(-1, 1, 42, dtype="f4").reshape(6, 7)
    blob = (tmp_path / "a.zarr" / "c" / "0" / "0").read_bytes()
    enc = ChunkEncoder(a.metadata.codecs, chunk_spec((6, 7), a.metadata.data_type, 0))
    assert enc.decode(blob).tobytes() == a[:].tobytes()


def test_pcodec_chunks_encode_and_decode_in_the_calling_thread(monkeypatch):
    """zarr < 3.4's numcodecs.pcodec wrapper has only async methods, each starting an event loop
    and a thread per chunk (``asyncio.to_thread``); zopt calls numcodecs' PCodec directly, as
    zarr 3.4's ``_encode_sync`` does, with the same bytes as zarr's own pipeline."""
    import threading

    pytest.importorskip("pcodec")
    chain = [{"name": "numcodecs.pcodec", "configuration": {"level": 8}}]
    values = (np.sin(np.linspace(0, 20, 64 * 64)).reshape(64, 64) * 100).astype("f4")
    enc = ChunkEncoder([resolve_codec(c) for c in chain], chunk_spec((64, 64), Float32(), 0))
    started = []
    real_start = threading.Thread.start

    def counting_start(self, *a, **k):
        started.append(self.name)
        return real_start(self, *a, **k)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    stored = [enc.encode(values, (0, 0)).data for _ in range(8)]
    back = [enc.decode(s) for s in stored]
    monkeypatch.undo()
    assert started == []
    for b in back:
        np.testing.assert_array_equal(b, values)
    z = zarr.create_array(zarr.storage.MemoryStore(), shape=(64, 64), chunks=(64, 64), dtype="f4", fill_value=0,
                          serializer=chain[0], compressors=None)
    z[:] = values
    assert bytes(stored[0]) == z.store._store_dict["c/0/0"].to_bytes()


@pytest.mark.parametrize("chain", ["plain", "pcodec"])
def test_a_misaligned_chunk_encodes_as_an_aligned_one(chain):
    """A chunk unpickled from a dask.distributed frame can be misaligned; pcodec refused it
    ("not contiguous or is misaligned") in the menu trials of recipes/cluster_batch.py."""
    if chain == "pcodec":
        pytest.importorskip("pcodec")
        codecs = [{"name": "numcodecs.pcodec", "configuration": {"level": 8}}]
    else:
        codecs = CHAINS["plain"]
    values = (np.sin(np.linspace(0, 20, 64 * 64)).reshape(64, 64) * 100).astype("f4")
    buf = np.zeros(values.nbytes + 1, np.uint8)
    buf[1:] = values.view(np.uint8).ravel()
    misaligned = buf[1:].view(np.float32).reshape(64, 64)
    assert not misaligned.flags.aligned
    enc = ChunkEncoder([resolve_codec(c) for c in codecs], chunk_spec((64, 64), Float32(), 0))
    stored = enc.encode(misaligned, (0, 0)).data
    assert bytes(stored) == bytes(enc.encode(values, (0, 0)).data)
    np.testing.assert_array_equal(enc.decode(stored), values)
