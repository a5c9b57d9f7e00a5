"""Running a job's Dask tasks: local schedulers passed as functions, clusters by address.

Pure scheduling, no zarr and no I/O of its own: the engine, the analysis and compaction hand it
their task lists.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import click

from zopt.errors import OptionError

__all__ = ["SCHEDULERS", "check_scheduler", "compute", "local_scheduler", "scheduler_option"]

#: what ``scheduler`` accepts, as error messages and ``--help`` name it
SCHEDULERS = ("'threads' (the default), 'processes', 'synchronous', or a dask.distributed address "
              "such as tcp://127.0.0.1:8786")
_LOCAL = ("threads", "threading", "processes", "multiprocessing", "synchronous", "sync", "single-threaded")


def check_scheduler(name: str | None) -> None:
    """ValueError naming ``scheduler`` and the allowed values unless ``name`` is one of them
    (None: the default)."""
    if name is not None and name not in _LOCAL and "://" not in str(name):
        raise OptionError("scheduler", f"{name!r} is not one of {SCHEDULERS}")


def scheduler_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Click callback for ``--scheduler``: a bad name is refused before any work, naming the
    option and the allowed values (click prints "Invalid value for '--scheduler': …")."""
    import click

    try:
        check_scheduler(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not one of {SCHEDULERS}", ctx=ctx, param=param) from None
    return value


def compute(tasks: list, scheduler: str | None, progress, job_id: str | None = None) -> list:
    """Run Dask ``tasks`` (delayed objects) and return their results in order.

    scheduler : ``"threads"`` (default), ``"processes"``, ``"synchronous"`` or a
        ``dask.distributed`` address (``tcp://…``, run by ``zopt.compat.cluster.compute_on_cluster``).
    progress : a callable ``progress(n_tasks)`` returning a context manager (zopt's progress
        bar), or None. If the context manager has ``watch_keys(keys)``, it is given the Dask keys
        of ``tasks`` (the tasks whose completion is progress; intermediate tasks such as a
        shard's slot writers are not among them). job_id : the job's id, whose open sources every worker closes at the end.

    On failure the tasks still running finish before the error propagates, so a caller's
    cleanup never races a late write.
    """
    import contextlib

    import dask

    check_scheduler(scheduler)
    if not tasks:
        return []
    ctx = progress(len(tasks)) if progress else contextlib.nullcontext()
    if scheduler and "://" in scheduler:
        from zopt.compat.cluster import compute_on_cluster

        return compute_on_cluster(tasks, scheduler, ctx, job_id)
    if hasattr(ctx, "watch_keys"):
        ctx.watch_keys(frozenset(str(t.key) for t in tasks))
    get = local_scheduler(scheduler or "threads")
    import dask.threaded

    from zopt.compat.interrupts import on_interrupt

    if get is not dask.threaded.get:
        with on_interrupt(lambda: None), ctx:
            return list(dask.compute(*tasks, scheduler=get))
    import dask.system

    # our own pool, shut down before returning or raising: when a task fails, the tasks still
    # running finish (and queued ones are cancelled) before the caller removes a partial store,
    # so no late write can recreate it
    pool = _CountingPool(dask.config.get("num_workers", None) or dask.system.CPU_COUNT)
    with on_interrupt(lambda: pool.running):  # a second Ctrl-C during the shutdown leaves at once
        try:
            with ctx:
                return list(dask.compute(*tasks, scheduler=get, pool=pool))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


class _CountingPool(ThreadPoolExecutor):
    """A thread pool that knows how many of its tasks are running (for the Ctrl-C message)."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self._count_lock = threading.Lock()
        self.running = 0

    def submit(self, fn, /, *args, **kwargs):
        def run(*a, **k):
            with self._count_lock:
                self.running += 1
            try:
                return fn(*a, **k)
            finally:
                with self._count_lock:
                    self.running -= 1

        return super().submit(run, *args, **kwargs)


def local_scheduler(name: str) -> Any:
    """The ``get`` function of Dask's local scheduler ``name``; ValueError naming ``scheduler``
    for any other name (addresses go to ``zopt.compat.cluster``).

    Passing the function rather than its name keeps ``dask.compute`` from importing
    ``distributed`` to look for a client (0.14 s per process).
    """
    import dask.local
    import dask.threaded

    if name in ("threads", "threading"):
        return dask.threaded.get
    if name in ("sync", "synchronous", "single-threaded"):
        return dask.local.get_sync
    if name in ("processes", "multiprocessing"):
        import functools

        import dask.multiprocessing

        from zopt.compat.interrupts import exit_with_parent

        # workers exit when the client dies (a SIGKILLed client cannot shut its pool down)
        return functools.partial(dask.multiprocessing.get, initializer=exit_with_parent)
    check_scheduler(name)
    raise OptionError("scheduler", f"{name!r} is an address; a local scheduler is one of {SCHEDULERS}")
