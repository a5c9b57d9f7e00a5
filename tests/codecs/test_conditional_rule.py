"""One rule for ``compress_if_smaller`` on ``[shuffle, zstd]``: ``zopt.codecs.decisions.filter_choice``.
``CompressIfSmaller.choose`` and the Python batch encoder call it; the compiled loop
(``zopt_zstd_conditional`` in ``zopt/compat/_loops.c``) is held to it here, chunk by chunk, on
chunks where the shuffle wins, loses, ties and where nothing compresses."""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest

from zopt.codecs.decisions import SAMPLE_ABOVE, CompressIfSmaller, filter_choice, sample_windows
from zopt.codecs.shuffle import shuffle_rows
from zopt.compat import libzstd, loops


@pytest.mark.parametrize(("on", "off", "stored", "applied"), [
    (100, 200, False, True),    # the filter's trial smaller: applied
    (200, 100, False, False),   # smaller without it
    (150, 150, False, False),   # a tie leaves the filter off
    (1000, 1000, True, False),  # neither smaller than the sample: stored as it is (early abort)
    (5000, 999, False, False),  # over the sample counts as the sample (capped)
    (999, 5000, False, True),
])
def test_the_rule_for_one_chunk(on, off, stored, applied):
    assert filter_choice(on, off, 1000) == (stored, applied)


def test_the_rule_element_by_element_is_the_rule_for_each():
    rng = np.random.default_rng(0)
    on, off = rng.integers(0, 1200, 500), rng.integers(0, 1200, 500)
    stored, applied = filter_choice(on, off, 1000)
    assert [(bool(a), bool(b)) for a, b in zip(stored, applied, strict=True)] == [
        filter_choice(int(a), int(b), 1000) for a, b in zip(on, off, strict=True)]


def _rows() -> np.ndarray:
    """Chunks of 128 KiB (over SAMPLE_ABOVE): a smooth field (shuffle wins), bytes that repeat
    (both compress; shuffle loses), noise (nothing compresses), a constant."""
    rng = np.random.default_rng(1)
    n = 128 * 1024 // 4
    smooth = np.cumsum(rng.normal(size=n)).astype("f4").view(np.uint8)
    text = np.frombuffer((b"zopt conditional " * (n // 4))[: n * 4], np.uint8)
    noise = rng.integers(0, 256, n * 4, dtype=np.uint8)
    const = np.full(n * 4, 7, np.uint8)
    return np.stack([smooth, text, noise, const, smooth[::-1].copy()])


@pytest.mark.skipif(not (loops.available() and libzstd.available()), reason="zopt's compiled loops are not built here")
def test_the_compiled_loop_follows_the_rule_chunk_by_chunk():
    rows = _rows()
    width = rows.shape[1]
    assert width > SAMPLE_ABOVE
    decision = CompressIfSmaller()
    windows = sample_windows(width, decision.sample_fraction, decision.sample_windows)
    got = libzstd.conditional_rows(rows, 3, False, 4, 1, windows)
    assert got is not None
    _, _, masks = got
    expected = []
    for row in rows:
        sample = np.concatenate([row[s : s + w] for s, w in windows])
        on = len(numcodecs.zstd.compress(shuffle_rows(sample[None], 4, False)[0].tobytes(), 3))
        off = len(numcodecs.zstd.compress(sample.tobytes(), 3))
        stored, applied = filter_choice(on, off, sample.size)
        mask = int(applied)
        if not stored:
            payload = shuffle_rows(row[None], 4, False)[0] if applied else row
            if len(numcodecs.zstd.compress(payload.tobytes(), 3)) < width:
                mask |= 1 << 1
        expected.append(mask)
    assert masks.tolist() == expected
    assert len(set(expected)) >= 3  # the rows took different branches
