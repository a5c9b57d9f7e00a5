"""zopt's compiled batch loops (``zopt/compat/_loops.c``, issue 34 G3) against what they replace.

Every byte they write must be the one numcodecs writes for the same chunk (zstd frames, blosc
chunks, the byte shuffle first), and every file they read must be read, refused or named as the
Python loops do.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numcodecs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numcodecs import zstd as nzstd
from test_batch_encode import _chunk, _encoder

from zopt.codecs.batch import BatchEncoder
from zopt.codecs.decisions import SAMPLE_ABOVE, CompressIfSmaller
from zopt.codecs.shuffle import shuffle_rows
from zopt.compat import libblosc, libzstd, loops

compiled = pytest.mark.skipif(not loops.available() or not libzstd.available(),
                              reason="zopt's compiled loops (or numcodecs' zstd symbols) are absent")


def test_the_loops_are_built_where_a_c_compiler_is():
    """The install built them (hatch_build.py): CI exercises the compiled path, not only the fallback."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here")
    assert loops.available()


def test_zopt_no_loops_turns_them_off():
    code = "from zopt.compat import loops; print(loops.available())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "ZOPT_NO_LOOPS": "1"}).stdout.strip()
    assert out == "False"


def _rows(seed: int, n: int, width: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    kinds = [np.cumsum(rng.integers(-2, 3, width)).astype(np.uint8), rng.integers(0, 256, width, dtype=np.uint8),
             np.zeros(width, np.uint8), np.repeat(rng.integers(0, 256, max(1, width // 16), dtype=np.uint8), 16)[:width]]
    if n == 0:
        return np.empty((0, width), np.uint8)
    return np.stack([kinds[k % 4] if kinds[k % 4].size == width else np.zeros(width, np.uint8) for k in range(n)])


@compiled
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 6), width=st.integers(1, 5000), level=st.sampled_from([1, 3, 10]), checksum=st.booleans(),
       head=st.integers(0, 3), shuffle=st.sampled_from([1, 2, 4, 8, 3]), seed=st.integers(0, 2**16))
def test_zstd_rows_are_numcodecs_frames_of_the_shuffled_rows(n, width, level, checksum, head, shuffle, seed):
    rows = _rows(seed, n, width)
    data, ends = libzstd.compress_rows(rows, level, checksum, head, shuffle)
    assert ends.dtype == np.int64 and ends.shape == (n,) and data.size == (ends[-1] if n else 0)
    starts = [0, *ends[:-1].tolist()][:n]
    for k, (s, e) in enumerate(zip(starts, ends.tolist(), strict=True)):
        row = rows[k : k + 1]
        if shuffle > 1:
            row = shuffle_rows(row, shuffle, False)
        assert data[s + head : e].tobytes() == nzstd.compress(row[0].tobytes(), level, checksum)


@compiled
def test_zstd_rows_report_the_row_whose_frame_has_no_room():
    rows = _rows(1, 2, 100)
    out = np.empty(2 * libzstd.compress_bound(100), np.uint8)
    failed, ends = loops.zstd_rows(libzstd._lib.address["ZSTD_compress2"], libzstd._cctx(3, False), rows, out,
                                   8, 0)  # room for 8 bytes: too small for any frame of 100 random bytes
    assert failed == 0 and libzstd._lib.ZSTD_isError(int(ends[0]) % 2**64)


@compiled
def test_blosc_rows_are_numcodecs_chunks():
    from numcodecs import blosc

    rows = _rows(2, 4, 4000)
    for cname, shuffle, typesize, head in [("zstd", 2, 4, 0), ("lz4", 1, 4, 1), ("blosclz", 0, 1, 2)]:
        compress = libblosc.compressor(cname, 5, shuffle, typesize, 0)
        assert compress is not None
        data, ends = compress(rows, head)
        starts = [0, *ends[:-1].tolist()]
        expected = [blosc.compress(r, cname.encode(), 5, shuffle, 0, typesize) for r in rows]
        assert [data[s + head : e].tobytes() for s, e in zip(starts, ends.tolist(), strict=True)] == expected


def _files(tmp_path: Path, blobs: list[bytes | None]) -> list[str]:
    paths = []
    for k, blob in enumerate(blobs):
        path = tmp_path / f"f{k}"
        if blob is not None:
            path.write_bytes(blob)
        paths.append(str(path))
    return paths


@compiled
def test_read_files_reads_whole_files_and_tells_missing_and_longer_ones(tmp_path):
    paths = _files(tmp_path, [b"abcd", None, b"", b"abcdefgh", b"xy"])
    buf = np.zeros(5 * 4, np.uint8)
    sizes = loops.read_files(paths, buf, 4, 4)  # rows of 4 bytes
    assert sizes.tolist() == [4, -errno.ENOENT, 0, 5, 2]  # 5: longer than 4
    assert buf.tobytes() == b"abcd" + bytes(4) + bytes(4) + bytes(4) + b"xy" + bytes(2)  # a longer file: not read
    packed = np.zeros(30, np.uint8)
    assert loops.read_files(paths, packed, 0, 6).tolist() == [4, -errno.ENOENT, 0, 7, 2]
    assert packed[:6].tobytes() == b"abcd" + b"xy"  # back to back; the file over 6 bytes refused unread


@compiled
def test_read_files_names_a_file_it_cannot_read(tmp_path):
    (tmp_path / "dir").mkdir()
    paths = _files(tmp_path, [b"ab"]) + [str(tmp_path / "dir")]
    with pytest.raises(loops.FileRefused, match="dir: not a regular file \\(a directory\\)") as info:
        loops.read_files(paths, np.zeros(8, np.uint8), 4, 4)
    assert info.value.index == 1 and info.value.path == paths[1]
    (tmp_path / "locked").write_bytes(b"x")
    (tmp_path / "locked").chmod(0)
    if os.geteuid() != 0:  # root reads it all the same
        with pytest.raises(OSError, match="locked") as denied:
            loops.read_files([str(tmp_path / "locked")], np.zeros(8, np.uint8), 4, 4)
        assert denied.value.errno == errno.EACCES


@compiled
def test_read_zstd_decodes_frames_and_refuses_anything_but_one_frame_of_a_chunk(tmp_path):
    rows = _rows(3, 3, 1000)
    frames = [nzstd.compress(r.tobytes(), 3) for r in rows]
    cap = libzstd.compress_bound(1000) + 1
    blob = np.empty(4 * cap, np.uint8)

    def read(blobs):
        out = np.full((len(blobs), 1000), 7, np.uint8)
        return libzstd.read_frames(_files(tmp_path, blobs), blob, cap, out, 1000), out

    sizes, out = read([frames[0], None, frames[2]])
    assert sizes is not None and sizes[1] == -errno.ENOENT
    np.testing.assert_array_equal(out[[0, 2]], rows[[0, 2]])
    assert (out[1] == 7).all()  # a missing chunk's row is left to the caller
    for bad in ([frames[0][:-1]],  # a cut frame
                [frames[0] + frames[1]],  # two frames in one file
                [nzstd.compress(rows[0][:999].tobytes(), 3)],  # one frame of another size
                [b"\x00" * 20],  # not a frame
                [bytes(cap)]):  # longer than any frame of one chunk
        assert read(bad)[0] is None, bad[:8]


def test_the_python_loops_write_the_same_bytes(loops_kind):
    """The same rows through the compiled loops and through the Python ones: the same frames."""
    rows = _rows(5, 5, 3000)
    data, ends = libzstd.compress_rows(shuffle_rows(rows, 4, False), 3, False, 1)
    starts = [0, *ends[:-1].tolist()]
    assert [data[s + 1 : e].tobytes() for s, e in zip(starts, ends.tolist(), strict=True)] == \
        [numcodecs.Zstd(3).encode(shuffle_rows(r[None], 4, False)[0]) for r in rows]


@compiled
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=st.sampled_from(["conditional", "conditional-zstd"]), dtype=st.sampled_from(["u1", "i2", "f4", "f8"]),
       kinds=st.lists(st.sampled_from(["smooth", "random", "constant", "half", "noisy0", "noisy2"]), min_size=1,
                      max_size=4), seed=st.integers(0, 2**16))
def test_the_compiled_conditional_is_the_python_one(chain, dtype, kinds, seed):
    """``compress_if_smaller`` on chunks over SAMPLE_ABOVE (sampled trials): one foreign call for
    the batch writes the masks and bytes the Python batch does, and those of each chunk alone."""
    rng = np.random.default_rng(seed)
    shape = {"u1": (260, 260), "i2": (190, 190), "f4": (130, 130), "f8": (96, 96)}[dtype]  # over SAMPLE_ABOVE
    assert np.prod(shape) * np.dtype(dtype).itemsize > SAMPLE_ABOVE
    stack = np.stack([_chunk(k, shape, dtype, rng) for k in kinds])
    encoder = _encoder(chain, shape, dtype, CompressIfSmaller())
    batch = BatchEncoder.of(encoder)
    assert batch is not None
    positions, indices = list(range(len(kinds))), [(k, 0) for k in range(len(kinds))]
    fast = batch.encode(stack, positions, indices)
    saved = loops._lib
    loops._lib = False
    try:
        slow = batch.encode(stack, positions, indices)
    finally:
        loops._lib = saved
    assert [(i, d.tobytes(), m) for i, d, m in fast.chunks()] == [(i, d.tobytes(), m) for i, d, m in slow.chunks()]
    for k, (_, data, masks) in enumerate(fast.chunks()):
        alone = encoder.encode(stack[k], indices[k])
        assert data.tobytes() == alone.data.tobytes() and masks == alone.masks
