"""What a job's tasks open once per process (datasets, files, arrays), dropped at the job's end.

A process (the caller's, or a Dask worker's) runs many tasks of one job, and each would open the
same source file or array again. A ``JobCache`` keeps what they opened under ``(job id, key)``:
at most ``size`` entries, the least recently used dropped (and closed) first. ``release_job(job_id)``
drops every cache's entries of that job: the job calls it at its end in its own process, and
``zopt.compat.cluster`` runs it on every worker, so no file stays open or locked and a later job
never reads a stale view.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["JobCache", "release_job"]

V = TypeVar("V")

_CACHES: list[JobCache[Any]] = []


class JobCache(Generic[V]):
    """A per-process cache of values made once per job (see the module docstring).

    name : what it holds (diagnostics). size : entries kept at the most, all jobs together.
    close : called on each value dropped (evicted by ``get``, in the caller's thread and under
    whatever it holds; or dropped by ``release``). release_lock : a context manager factory
    entered around the closes of ``release`` (e.g. the HDF5 library's lock).
    """

    def __init__(self, name: str, size: int, close: Callable[[V], Any] | None = None,
                 release_lock: Callable[[], contextlib.AbstractContextManager[Any]] | None = None) -> None:
        self.name, self.size, self._close, self._release_lock = name, size, close, release_lock
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str | None, Hashable], V] = OrderedDict()
        _CACHES.append(self)

    def get(self, job_id: str | None, key: Hashable, make: Callable[[], V]) -> V:
        """The value of ``key`` for job ``job_id``: ``make()`` the first time (outside the cache's
        lock), then the same object until the job's end or its eviction. None is not kept (``make``
        is asked again next time)."""
        k = (job_id, key)
        with self._lock:
            if k in self._entries:
                self._entries.move_to_end(k)
                return self._entries[k]
        value = make()
        if value is None:
            return value
        dropped = []
        with self._lock:
            if k in self._entries:  # another thread made it meanwhile: keep one
                dropped.append(value)
                value = self._entries[k]
            else:
                self._entries[k] = value
            while len(self._entries) > self.size:
                dropped.append(self._entries.popitem(last=False)[1])
        self._drop(dropped)
        return value

    def release(self, job_id: str | None) -> int:
        """Drop (and close) every entry of job ``job_id``. Returns how many."""
        with self._lock:
            dropped = [self._entries.pop(k) for k in [k for k in self._entries if k[0] == job_id]]
        with self._release_lock() if self._release_lock is not None and dropped else contextlib.nullcontext():
            self._drop(dropped)
        return len(dropped)

    def job_ids(self) -> list[str | None]:
        """The job id of every entry, least recently used first (tests, diagnostics)."""
        with self._lock:
            return [k[0] for k in self._entries]

    def _drop(self, values: list[V]) -> None:
        if self._close is not None:
            for v in values:
                self._close(v)


def release_job(job_id: str | None) -> int:
    """Drop every ``JobCache``'s entries of job ``job_id`` in this process; returns how many."""
    return sum(cache.release(job_id) for cache in list(_CACHES))
