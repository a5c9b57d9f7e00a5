"""What ``compress_if_smaller`` computes per chunk: no full trial it does not keep (issue 19)."""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest

from zopt.codecs.decisions import SAMPLE_ABOVE, CodecRef, CompressIfSmaller
from zopt.codecs.shuffle import ShuffleCodec


class _Zstd:
    """Stands for zarr's zstd: its encoded size is unknown in advance."""

    def compute_encoded_size(self, n, spec):
        raise NotImplementedError


def _choose(data: np.ndarray):
    shuffle, zstd = ShuffleCodec(element_size=4), numcodecs.Zstd(level=3)
    refs = [CodecRef("shuffle", 0, {"element_size": 4}, shuffle), CodecRef("zstd", 1, {"level": 3}, _Zstd())]
    calls: list[tuple[int, int]] = []

    def run(i, b):
        calls.append((i, b.size))
        return shuffle.encode_bytes(b) if i == 0 else np.frombuffer(zstd.encode(b), np.uint8)

    raw = data.view(np.uint8).ravel()
    mask, payload = CompressIfSmaller().choose(None, refs, raw, run)
    full = [i for i, n in calls if n == raw.size]
    return mask, payload, full


def test_random_chunks_abort_early_on_the_sample():
    data = np.random.default_rng(0).integers(0, 2**32, 2**16, dtype=np.uint32)  # 256 KiB
    assert data.nbytes > SAMPLE_ABOVE
    mask, payload, full = _choose(data)
    assert mask == 0 and np.array_equal(payload, data.view(np.uint8))
    assert full == []  # no full shuffle, no full zstd


def test_a_filter_that_loses_on_the_sample_is_never_applied_whole():
    data = np.full(2**16, 7.25, dtype="f4")  # constant: shuffle cannot make zstd do better (ties skip it)
    mask, payload, full = _choose(data)
    assert mask == 0b10
    assert full == [1]
    assert np.array_equal(numcodecs.Zstd().decode(payload.tobytes()), data.view(np.uint8).tobytes())


@pytest.mark.parametrize("noise", [0.0, 0.01])
def test_a_filter_that_wins_is_applied_once_and_its_result_kept(noise):
    x = np.linspace(0, 50, 2**16)
    data = (np.sin(x) * 20 + 15 + np.random.default_rng(1).normal(0, noise, x.size)).astype("f4")
    mask, payload, full = _choose(data)
    assert mask == 0b11
    assert full == [0, 1]  # one full shuffle, one full zstd: the stored payload
    restored = ShuffleCodec(element_size=4).decode_bytes(np.frombuffer(numcodecs.Zstd().decode(payload.tobytes()), np.uint8))
    assert np.array_equal(restored, data.view(np.uint8))
