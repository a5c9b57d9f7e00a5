"""Running a job's Dask tasks: local schedulers passed as functions, clusters by address.

Pure scheduling, no zarr and no I/O of its own: the engine, the analysis and compaction hand it
their task lists.
"""

from __future__ import annotations

from typing import Any

__all__ = ["compute", "local_scheduler"]


def compute(tasks: list, scheduler: str | None, progress, token: str | None = None) -> list:
    """Run Dask ``tasks`` (delayed objects) and return their results in order.

    scheduler : ``"threads"`` (default), ``"processes"``, ``"synchronous"`` or a
        ``dask.distributed`` address (``tcp://…``, run by ``zopt.compat.cluster.compute_on_cluster``).
    progress : a callable ``progress(n_tasks)`` returning a context manager (zopt's progress
        bar), or None. If the context manager has ``watch_keys(keys)``, it is given the Dask keys
        of ``tasks`` (the tasks whose completion is progress; intermediate tasks such as a
        shard's slot writers are not among them). token : the job's id, whose open sources every worker closes at the end.

    On failure the tasks still running finish before the error propagates, so a caller's
    cleanup never races a late write.
    """
    import contextlib

    import dask

    if not tasks:
        return []
    ctx = progress(len(tasks)) if progress else contextlib.nullcontext()
    if scheduler and "://" in scheduler:
        from zopt.compat.cluster import compute_on_cluster

        return compute_on_cluster(tasks, scheduler, ctx, token)
    if hasattr(ctx, "watch_keys"):
        ctx.watch_keys(frozenset(str(t.key) for t in tasks))
    get = local_scheduler(scheduler or "threads")
    import dask.threaded

    if get is not dask.threaded.get:
        with ctx:
            return list(dask.compute(*tasks, scheduler=get))
    from concurrent.futures import ThreadPoolExecutor

    import dask.system

    # our own pool, shut down before returning or raising: when a task fails, the tasks still
    # running finish (and queued ones are cancelled) before the caller removes a partial store,
    # so no late write can recreate it
    pool = ThreadPoolExecutor(dask.config.get("num_workers", None) or dask.system.CPU_COUNT)
    try:
        with ctx:
            return list(dask.compute(*tasks, scheduler=get, pool=pool))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def local_scheduler(name: str) -> Any:
    """The ``get`` function of Dask's local scheduler ``name`` (other names are left to Dask).

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
        import dask.multiprocessing

        return dask.multiprocessing.get
    return name
