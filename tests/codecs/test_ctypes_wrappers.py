"""The ctypes wrappers of zstd, blosc and the compiled loops: ``libzstd.available()`` publishes its
library once, after its probe (8 threads, a probe that sleeps and fails: every thread gets False,
nothing encodes with an unchecked library); an array a foreign call would read or write past, or
write into read-only memory, is refused with a clear error."""

from __future__ import annotations

import threading
import time

import numcodecs
import numpy as np
import pytest

from zopt.compat import libzstd, loops


@pytest.fixture
def fresh_libzstd(monkeypatch):
    """libzstd as before its first ``available()``; restored afterwards."""
    monkeypatch.setattr(libzstd, "_lib", None)
    monkeypatch.setattr(libzstd._local, "cctx", None, raising=False)
    yield


def test_available_publishes_the_library_only_after_its_probe(fresh_libzstd, monkeypatch):
    def slow_failing_probe(*_args):
        time.sleep(1)
        return False

    monkeypatch.setattr(libzstd, "_same_as_numcodecs", slow_failing_probe)
    answers: list[bool] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            if libzstd.available():
                libzstd.compress(np.zeros(64, np.uint8), 3)  # what a caller told True does next
            answers.append(libzstd.available())
        except BaseException as exc:  # noqa: BLE001 - collected: the test fails on any
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert answers == [False] * 8


def test_a_null_function_pointer_turns_the_library_off(fresh_libzstd, monkeypatch):
    def null(_fn):
        raise ValueError("function_address: a null function pointer")

    monkeypatch.setattr(loops, "function_address", null)
    assert libzstd.available() is False


@pytest.mark.skipif(not libzstd.available(), reason="numcodecs' zstd symbols are not exported here")
def test_decode_refuses_a_read_only_or_non_contiguous_output():
    raw = np.arange(1024, dtype=np.uint8)
    frame = numcodecs.zstd.compress(raw.tobytes(), 3)
    with pytest.raises(ValueError, match="writable array is needed"):
        libzstd.decompress_into(frame, np.frombuffer(bytes(1024), np.uint8))
    with pytest.raises(ValueError, match="C-contiguous array is needed"):
        libzstd.decompress_into(frame, np.zeros(2048, np.uint8)[::2])
    out = np.zeros(1024, np.uint8)
    assert libzstd.decompress_into(frame, out, 1024) == 1024 and (out == raw).all()
    read_only = np.frombuffer(raw.tobytes(), np.uint8)  # an input may be read-only
    assert libzstd.compress(read_only, 3).tobytes() == numcodecs.zstd.compress(raw.tobytes(), 3)


def test_the_checked_address_refuses_what_a_loop_would_overrun():
    a = np.zeros(16, np.uint8)
    assert loops.address(a, 16, writable=True) == a.ctypes.data
    with pytest.raises(ValueError, match="at least 17 bytes"):
        loops.address(a, 17)
    with pytest.raises(ValueError, match="C-contiguous"):
        loops.address(np.zeros((4, 8), np.uint8)[:, :4])
    ro = np.frombuffer(bytes(16), np.uint8)
    assert loops.address(ro, 16) == ro.ctypes.data  # read: fine
    with pytest.raises(ValueError, match="writable"):
        loops.address(ro, 16, writable=True)


@pytest.mark.skipif(not (loops.available() and libzstd.available()), reason="zopt's compiled loops are not built here")
def test_the_row_loops_refuse_an_output_too_small():
    rows = np.zeros((4, 256), np.uint8)
    cap = libzstd.compress_bound(256)
    with pytest.raises(ValueError, match="at least"):
        loops.zstd_rows(libzstd._lib.address["ZSTD_compress2"], libzstd._cctx(3, False), rows,
                        np.empty(3 * cap, np.uint8), cap, 0)
