"""``zopt.store.files.atomic_write``, the one way zopt replaces a file: a process killed at any
point of it, or a full disk, leaves the old file or the new one whole, never a part of either."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_disk_full import small_disk  # noqa: F401 - the fixture: a 1 MiB tmpfs (root only)

from zopt.store.files import TMP_MARK, atomic_write, temp_path

OLD = b"old" * 1000
NEW = [b"a" * 5000, b"b" * 5000, b"c" * 5000]  # three writes


def _killed_at(path: Path, call: str, n: int, fsync: bool, tmp_dir: Path | None = None) -> int:
    """Run ``atomic_write(path, NEW)`` in a fresh interpreter that SIGKILLs itself at its ``n``-th
    ``os.<call>``; returns its exit status."""
    code = textwrap.dedent(f"""
        import os, signal
        from zopt.store.files import atomic_write
        real, seen = os.{call}, [0]
        def hook(*args):
            seen[0] += 1
            if seen[0] == {n}:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args)
        os.{call} = hook
        atomic_write({str(path)!r}, {NEW!r}, fsync={fsync}, tmp_dir={None if tmp_dir is None else str(tmp_dir)!r})
    """)
    return subprocess.run([sys.executable, "-c", code]).returncode


@pytest.mark.parametrize(("call", "n", "fsync"), [("write", 1, False), ("write", 2, False), ("write", 3, True),
                                                   ("fsync", 1, True), ("replace", 1, False), ("fsync", 2, True)])
def test_a_process_killed_mid_write_leaves_the_old_file_or_the_new_one(tmp_path, call, n, fsync):
    path = tmp_path / "f"
    path.write_bytes(OLD)
    assert _killed_at(path, call, n, fsync) == -signal.SIGKILL
    after = path.read_bytes()
    if (call, n) == ("fsync", 2):  # killed after the rename, syncing the directory
        assert after == b"".join(NEW)
    else:
        assert after == OLD
        # what it leaves is one temporary file, named so that a job's clean-up finds it
        left = [p.name for p in tmp_path.iterdir() if p.name != "f"]
        assert len(left) == 1 and left[0].startswith(".f" + TMP_MARK)


def test_the_temporary_file_is_written_in_tmp_dir(tmp_path):
    jobs = tmp_path / "job"
    jobs.mkdir()
    (tmp_path / "f").write_bytes(OLD)
    assert _killed_at(tmp_path / "f", "replace", 1, False, jobs) == -signal.SIGKILL
    assert (tmp_path / "f").read_bytes() == OLD and sorted(os.listdir(tmp_path)) == ["f", "job"]
    assert [p.read_bytes() for p in jobs.iterdir()] == [b"".join(NEW)]


@pytest.mark.parametrize("form", ["bytes", "parts", "placed"])
def test_a_full_disk_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, form):
    path = tmp_path / "f"
    path.write_bytes(OLD)
    real_write, real_pwrite = os.write, os.pwrite

    def full(fd, data, *offset):
        if len(memoryview(data)) > 4096:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return (real_pwrite if offset else real_write)(fd, data, *offset)

    monkeypatch.setattr(os, "write", full)
    monkeypatch.setattr(os, "pwrite", full)
    data = {"bytes": b"x" * 10000, "parts": [b"x" * 100, b"y" * 10000], "placed": {0: b"x" * 10, 100: b"y" * 10000}}[form]
    with pytest.raises(OSError) as err:
        atomic_write(path, data, fsync=True)
    assert err.value.errno == errno.ENOSPC
    assert path.read_bytes() == OLD and os.listdir(tmp_path) == ["f"]


def test_a_full_tmpfs_leaves_the_old_file_and_no_temporary(small_disk):  # noqa: F811 - the fixture
    (small_disk / "f").write_bytes(OLD)
    with pytest.raises(OSError) as err:
        atomic_write(small_disk / "f", [b"z" * 700_000, b"z" * 700_000], fsync=False)  # 1.4 MB on 1 MiB
    assert err.value.errno == errno.ENOSPC
    assert (small_disk / "f").read_bytes() == OLD and os.listdir(small_disk) == ["f"]


def test_the_three_forms_of_data_and_size(tmp_path):
    path = tmp_path / "f"
    assert atomic_write(path, b"abc", fsync=False) == 3 and path.read_bytes() == b"abc"
    assert atomic_write(path, [b"ab", memoryview(b"cd")], fsync=True) == 4 and path.read_bytes() == b"abcd"
    # placed parts: the gap is a hole of zeros, and size extends past the last part
    assert atomic_write(path, {4: b"yz", 0: b"w"}, fsync=False, size=8) == 8
    assert path.read_bytes() == b"w\0\0\0yz\0\0"
    assert os.listdir(tmp_path) == ["f"]


def test_temp_path_is_hidden_and_marked(tmp_path):
    assert temp_path(tmp_path / "c" / "0", "slots-j1") == tmp_path / "c" / f".0{TMP_MARK}slots-j1"
    assert temp_path(tmp_path / "c" / "0", "tmp-x", tmp_path / "job") == tmp_path / "job" / f".0{TMP_MARK}tmp-x"
