"""``zopt.compat.job_cache``: what a job's tasks open once per process, dropped at the job's end."""

from __future__ import annotations

import threading
import time

import numpy as np
import zarr

from zopt import recompress
from zopt.compat import job_cache
from zopt.compat.job_cache import JobCache, release_job


class Handle:
    def __init__(self, name: str) -> None:
        self.name, self.closed = name, False

    def close(self) -> None:
        self.closed = True


def test_one_value_per_job_and_key_and_release_closes_only_that_jobs():
    made: list[str] = []
    cache: JobCache[Handle] = JobCache("test handles", 8, close=Handle.close)

    def make(name: str):
        return lambda: made.append(name) or Handle(name)

    a = cache.get("j1", "f", make("a"))
    assert cache.get("j1", "f", make("again")) is a and made == ["a"]
    b = cache.get("j2", "f", make("b"))  # another job opens its own
    assert b is not a and made == ["a", "b"]
    assert cache.release("j1") == 1 and a.closed and not b.closed
    assert cache.job_ids() == ["j2"]
    assert release_job("j2") >= 1 and b.closed and cache.job_ids() == []


def test_none_is_not_kept():
    cache: JobCache[Handle | None] = JobCache("test none", 8)
    calls = []
    assert cache.get("j", "k", lambda: calls.append(1)) is None
    assert cache.get("j", "k", lambda: calls.append(2)) is None and calls == [1, 2] and cache.job_ids() == []


def test_the_least_recently_used_is_closed_beyond_size():
    cache: JobCache[Handle] = JobCache("test lru", 2, close=Handle.close)
    h = [cache.get("j", i, lambda i=i: Handle(str(i))) for i in range(2)]
    cache.get("j", 0, lambda: Handle("x"))  # 0 used again: 1 is now the oldest
    third = cache.get("j", 2, lambda: Handle("2"))
    assert h[1].closed and not h[0].closed and not third.closed
    assert cache.release("j") == 2


def test_two_threads_making_one_key_keep_one_and_close_the_other():
    cache: JobCache[Handle] = JobCache("test race", 8, close=Handle.close)
    barrier, got, made = threading.Barrier(2), [], []

    def make():
        barrier.wait()  # both are making before either stores
        time.sleep(0.01)
        h = Handle("h")
        made.append(h)
        return h

    threads = [threading.Thread(target=lambda: got.append(cache.get("j", "k", make))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got[0] is got[1] and len(made) == 2
    assert sorted(h.closed for h in made) == [False, True]
    cache.release("j")


def test_a_job_leaves_no_entry_in_any_job_cache(tmp_path):
    """The target arrays the write tasks opened (``zopt.job.tasks``) were kept after the job,
    up to 16 of them, while the sources' were dropped: now every cache is released."""
    a = np.arange(64 * 64, dtype="f4").reshape(64, 64)
    zarr.open_group(tmp_path / "s.zarr", mode="w").create_array("v", shape=a.shape, chunks=(16, 16), dtype="f4")[:] = a
    before = {c.name: set(c.job_ids()) for c in job_cache._CACHES}  # other tests' entries
    recompress(tmp_path / "s.zarr", tmp_path / "d.zarr", chunks=(16, 16), shards=(32, 64))
    recompress(tmp_path / "s.zarr", tmp_path / "e.zarr", chunks=(16, 16))
    left = {c.name: set(c.job_ids()) - before.get(c.name, set()) for c in job_cache._CACHES}
    assert "target arrays" in left and "source arrays" in left
    assert not any(left.values()), left
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "e.zarr", path="v")[:], a)
