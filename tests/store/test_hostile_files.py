"""Anything under a chunk's name in a source is refused within seconds, naming the chunk: a FIFO
(an ``open`` that waits for a writer forever), a character device (``/dev/zero`` never ends), a
directory, a sparse 64 GiB file, a file whose size changes while it is read
(``zopt.store.chunk_file``, ``zopt/compat/_loops.c``). Through ``zopt recompress`` (the decode
path: another chain; the copy path: a re-shard with the source's own chain) and ``zopt verify`` (and
``zopt info --check``), on the compiled loops and on the Python ones (``ZOPT_NO_LOOPS=1``); every case runs in a
subprocess with a timeout, so a hang fails the test instead of hanging the suite."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

from zopt.compat import loops
from zopt.errors import ChunkDecodeError, ZoptError
from zopt.store.chunk_file import open_regular, read_chunk_file

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX files")

KINDS = ("fifo", "zero", "directory", "sparse", "grows")
SAYS = {"fifo": "not a regular file (a FIFO)", "zero": "not a regular file (a character device)",
        "directory": "not a regular file (a directory)", "sparse": "68719476736 bytes, more than",
        "grows": "changed size while it was read"}

# one subprocess per loop kind runs every (path, kind) case in turn, through the CLI
_CASES = textwrap.dedent("""
    import json, os, shutil, sys
    import numpy as np, zarr
    from click.testing import CliRunner
    from zarr.codecs import ZstdCodec
    from zopt.cli.commands import main

    base, kinds = sys.argv[1], sys.argv[2].split(",")
    B = {"name": "bytes", "configuration": {"endian": "little"}}
    def chain(level):
        return json.dumps([B, {"name": "zstd", "configuration": {"level": level, "checksum": False}}])
    def source(at):
        a = np.cumsum(np.random.default_rng(1).normal(size=(64, 64)), axis=0).astype("f4")
        zarr.open_group(at, mode="w").create_array("v", shape=a.shape, chunks=(16, 16), dtype="f4", fill_value=0,
            compressors=[ZstdCodec(level=3)], dimension_names=("y", "x"))[...] = a
    good = os.path.join(base, "good.zarr")
    source(good)
    ref = os.path.join(base, "ref.zarr")
    assert CliRunner().invoke(main, ["recompress", good, ref, "--codecs", chain(3), "--chunks", "16,16",
                                     "--shards", "64,64", "--no-checksum", "--no-progress"]).exit_code == 0
    out = {}
    for kind in kinds:
        src = os.path.join(base, kind + ".zarr")
        shutil.copytree(good, src)
        p = os.path.join(src, "v", "c", "1", "2")
        os.remove(p)
        if kind == "fifo":
            os.mkfifo(p)
        elif kind == "zero":
            os.symlink("/dev/zero", p)
        elif kind == "directory":
            os.mkdir(p)
        elif kind == "sparse":
            with open(p, "wb") as f:
                f.truncate(64 << 30)
        elif kind == "grows":  # says 0 bytes, reads more: a file written while it is read
            os.symlink("/proc/self/status", p)
        for path, args in (
            ("decode", ["recompress", src, os.path.join(base, kind + "-d.zarr"), "--codecs", chain(5),
                        "--chunks", "16,16", "--shards", "64,64"]),
            ("copy", ["recompress", src, os.path.join(base, kind + "-c.zarr"), "--codecs", chain(3),
                      "--chunks", "16,16", "--shards", "64,64", "--no-checksum"]),
            ("verify", ["verify", src, ref]),
            ("info", ["info", src, "--check"]),
        ):
            r = CliRunner().invoke(main, [*args, *([] if path in ("verify", "info") else ["--no-progress"])])
            out[f"{path}/{kind}"] = [r.exit_code, r.output.strip().splitlines()[-1:], repr(r.exception)]
            print(path, kind, out[f"{path}/{kind}"], file=sys.stderr, flush=True)
    print(json.dumps(out))
""")


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled loops", "python loops"])
def test_non_regular_huge_and_changing_chunk_files_refused_within_seconds_naming_the_chunk(tmp_path, compiled):
    if compiled and not loops.available():
        pytest.skip("zopt's compiled loops are not built here")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ZOPT_NO_LOOPS", None)
    if not compiled:
        env["ZOPT_NO_LOOPS"] = "1"
    try:
        r = subprocess.run([sys.executable, "-c", _CASES, str(tmp_path), ",".join(KINDS)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"a case hung; done so far:\n{exc.stderr}")
    assert r.returncode == 0, r.stderr
    results = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(results) == 4 * len(KINDS)
    for case, (code, last, exc) in results.items():
        kind = case.split("/")[1]
        if case in ("info/fifo", "info/zero", "info/directory"):  # info lists the regular chunk files it
            assert code == 0, (case, last, exc)  # finds: anything else is no chunk (absent), never read
            continue
        assert code == 1, (case, last, exc)
        # verify reads through zarr, which reads a file once the checks passed: a file that changes
        # then is refused by its decode, still named
        says = "cannot decode" if case in ("verify/grows", "info/grows") else SAYS[kind]
        assert last and "v/c/1/2" in last[0] and says in last[0], (case, last, exc)
        assert "Traceback" not in last[0] and "MemoryError" not in last[0]


def test_open_regular_refuses_a_socket_and_a_fifo_without_waiting():
    short = Path(tempfile.mkdtemp(prefix="zh", dir="/tmp"))  # a socket's path is limited to ~107 bytes
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(short / "s"))
        os.mkfifo(short / "f")
        for name, says in (("s", "socket"), ("f", "a FIFO")):
            t = time.monotonic()
            with pytest.raises(ChunkDecodeError, match=rf"chunk 'v/c/0'.*not a regular file \(.*{says}") as info:
                read_chunk_file(short / name, 1 << 20, "v/c/0", "the store")
            assert time.monotonic() - t < 1 and isinstance(info.value, ZoptError)
        sock.close()
    finally:
        shutil.rmtree(short)


def test_a_file_over_its_bound_is_refused_by_its_size_before_any_allocation(tmp_path):
    import tracemalloc

    p = tmp_path / "c"
    with open(p, "wb") as f:
        f.truncate(1 << 36)
    tracemalloc.start()
    try:
        with pytest.raises(ChunkDecodeError, match=r"68719476736 bytes, more than the 4096 bytes"):
            read_chunk_file(p, 4096, "v/c/0")
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()


def test_a_file_that_shrinks_while_read_is_refused(tmp_path):
    # a /sys attribute file says 4096 bytes and holds fewer: what a file truncated while it is read looks like
    p = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not p.is_file() or p.stat().st_size <= len(p.read_bytes()):
        pytest.skip("no /sys file that says more bytes than it holds")
    with pytest.raises(ChunkDecodeError, match=r"chunk 'v/c/0'.*changed size while it was read.*: 4096 bytes, then"):
        read_chunk_file(p, 1 << 20, "v/c/0")
    if loops.available():
        with pytest.raises(loops.FileRefused, match="changed size"):
            loops.read_files([str(p)], np.empty(8192, np.uint8), 0, 8192)


def test_a_regular_file_reads_whole_in_a_loop(tmp_path):
    p = tmp_path / "c"
    data = np.random.default_rng(0).integers(0, 256, 300_000, dtype=np.uint8)
    p.write_bytes(data.tobytes())
    np.testing.assert_array_equal(read_chunk_file(p, data.size, "c"), data)
    fd, st = open_regular(p, "c")
    os.close(fd)
    assert st.st_size == data.size
    with pytest.raises(FileNotFoundError):
        read_chunk_file(tmp_path / "absent", 10, "c")


def test_one_ctrl_c_stops_a_job_whose_source_has_a_fifo_chunk(tmp_path):
    """With a non-blocking open nothing sticks in a read: the job fails naming the FIFO or, when
    interrupted first, stops at the first SIGINT within seconds."""
    src = tmp_path / "src.zarr"
    a = np.cumsum(np.random.default_rng(1).normal(size=(256, 256)), axis=0).astype("f4")
    zarr.open_group(src, mode="w").create_array("v", shape=a.shape, chunks=(16, 16), dtype="f4", fill_value=0,
                                                compressors=[ZstdCodec(level=3)])[...] = a
    fifo = src / "v" / "c" / "15" / "15"
    fifo.unlink()
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-m", "zopt", "recompress", str(src), str(tmp_path / "dst.zarr"),
                             "--codecs", '[{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 9}}]',
                             "--chunks", "16,16", "--shards", "32,32", "--no-progress"], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    partial = tmp_path / "dst.zarr.zopt-partial"
    deadline = time.monotonic() + 60
    while not partial.exists() and proc.poll() is None:  # the job has started writing (or refused the FIFO)
        assert time.monotonic() < deadline, "the job did not start within 60 s"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    t = time.monotonic()
    try:
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("one SIGINT did not stop the job within 20 s")
    assert time.monotonic() - t < 20
    assert proc.returncode != 0
    assert "v/c/15/15" in err or "stopping" in err or "interrupted" in err.lower(), err
