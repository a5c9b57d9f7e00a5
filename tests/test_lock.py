"""The store lock (``zopt/store/lock.py``): one holder at a time, also when many processes race to
take over a stale lock; empty and garbage lock files."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zopt.errors import ZoptError
from zopt.store.lock import LOCK_NAME, STALE_GRACE, StoreLockedError, store_lock

#: 8 processes x 500 rounds take about 2 s here (the old rename-aside takeover had two holders
#: in about 2 rounds of 120); ``ZOPT_LOCK_ROUNDS`` runs a longer campaign
ROUNDS = int(os.environ.get("ZOPT_LOCK_ROUNDS", "500"))
PROCS = 8


def _dead_pid() -> int:
    out = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(out.stdout)


def _stale_lock(store: Path, pid: int) -> None:
    store.mkdir(parents=True, exist_ok=True)
    (store / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "job": "dead", "since": 0}))


def _racer(root: str, rounds: int, barrier, results) -> None:
    """Each round: wait for all, try to take the round's stale lock, wait for all (a holder keeps
    it until every racer has tried), release. Reports the rounds it held."""
    held = []
    for r in range(rounds):
        barrier.wait()
        cm = store_lock(Path(root, str(r)), f"job{os.getpid()}")
        try:
            cm.__enter__()
        except StoreLockedError:
            cm = None
        if cm is not None:
            held.append(r)
        barrier.wait()
        if cm is not None:
            cm.__exit__(None, None, None)
    results.put(held)


def test_processes_racing_for_a_stale_lock_have_exactly_one_holder_each_round(tmp_path):
    pid = _dead_pid()
    for r in range(ROUNDS):
        _stale_lock(tmp_path / str(r), pid)
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(PROCS), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(str(tmp_path), ROUNDS, barrier, results)) for _ in range(PROCS)]
    for p in procs:
        p.start()
    held = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    holders = [sum(r in h for h in held) for r in range(ROUNDS)]
    assert holders == [1] * ROUNDS, {r: n for r, n in enumerate(holders) if n != 1}
    assert not any((tmp_path / str(r) / LOCK_NAME).exists() for r in range(ROUNDS))
    leftovers = [p.name for r in range(ROUNDS) for p in (tmp_path / str(r)).iterdir()]
    assert leftovers == []  # no renamed-aside lock files either


def _old(path: Path) -> None:
    t = time.time() - STALE_GRACE - 1
    os.utime(path, (t, t))


@pytest.mark.parametrize("content", [b"", b"\x00garbage{", b'{"pid": "x"}', b"[1, 2]"])
def test_an_empty_or_garbage_lock_older_than_the_grace_period_is_stale(tmp_path, content):
    (tmp_path / LOCK_NAME).write_bytes(content)
    _old(tmp_path / LOCK_NAME)
    with store_lock(tmp_path, "mine"):
        owner = json.loads((tmp_path / LOCK_NAME).read_text())
        assert owner["pid"] == os.getpid() and owner["job"] == "mine"
    assert not (tmp_path / LOCK_NAME).exists()


@pytest.mark.parametrize("content", [b"", b"\x00garbage{"])
def test_a_fresh_empty_or_garbage_lock_is_refused_naming_the_file_not_the_store(tmp_path, content):
    (tmp_path / LOCK_NAME).write_bytes(content)
    with pytest.raises(StoreLockedError) as e, store_lock(tmp_path, "mine"):
        pass
    msg = str(e.value)
    assert isinstance(e.value, ZoptError)
    assert str(tmp_path / LOCK_NAME) in msg and "being rewritten by pid" not in msg
    assert f"{STALE_GRACE:g} s" in msg
    assert (tmp_path / LOCK_NAME).read_bytes() == content  # left alone


def test_a_live_holder_is_never_taken_over_even_with_an_old_lock_file(tmp_path):
    """The lock file's age does not matter while its holder lives (held by another process)."""
    ready = tmp_path / "ready"
    code = (
        "import sys, time, pathlib; from zopt.store.lock import store_lock\n"
        f"with store_lock({str(tmp_path)!r}, 'other'):\n"
        f"    pathlib.Path({str(ready)!r}).touch(); time.sleep(30)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).parents[1])
    try:
        for _ in range(300):
            if ready.exists():
                break
            time.sleep(0.05)
        assert ready.exists()
        _old(tmp_path / LOCK_NAME)
        with pytest.raises(StoreLockedError, match=rf"pid {holder.pid} .*job other"), store_lock(tmp_path, "mine"):
            pass
    finally:
        holder.kill()
        holder.wait()
    # its holder killed, the lock is stale: taken over at once
    with store_lock(tmp_path, "mine"):
        assert json.loads((tmp_path / LOCK_NAME).read_text())["job"] == "mine"


def test_without_flock_a_stale_lock_is_still_taken_over_and_a_live_one_refused(tmp_path, monkeypatch):
    """Filesystems without ``flock`` (ENOLCK): the rename-aside takeover, checked by re-reading."""
    import errno

    import zopt.store.lock as lock_mod

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(lock_mod.fcntl, "flock", no_flock)
    _stale_lock(tmp_path, _dead_pid())
    with store_lock(tmp_path, "mine"):
        assert json.loads((tmp_path / LOCK_NAME).read_text())["job"] == "mine"
        with pytest.raises(StoreLockedError, match=rf"pid {os.getpid()} .*job mine"), store_lock(tmp_path, "second"):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == []
