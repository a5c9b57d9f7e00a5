"""Running a job's tasks on a ``dask.distributed`` cluster (``--scheduler tcp://…``).

What the local schedulers give for free has to be asked for here:

- on failure or Ctrl-C the futures are cancelled and the call waits until no task of the job
  is still executing on any worker (a cancelled task keeps running in its thread; a late write
  would re-create a partial store the caller is about to remove);
- at the end, every worker drops what the job opened (``zopt.compat.job_cache.release_job``), so no
  file stays open or locked and a later job never reads a stale view;
- a scheduler that cannot be reached is one error naming the address;
- tasks go to the scheduler in waves: at most ``IN_FLIGHT`` tasks are submitted and not yet
  finished, topped up ``WAVE`` at a time as they finish, so the scheduler's memory and the size
  of each graph message stay bounded whatever the number of shards (one task per shard; a
  million shards are 50 waves of 20 000, never one graph of a million keys);
- the progress bar (``ctx.advance``) moves as the cluster's tasks finish.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any, Protocol

from zopt.compat.job_cache import release_job
from zopt.errors import ZoptError

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from distributed import Client, Worker

__all__ = ["SchedulerUnreachableError", "close_cluster", "compute_on_cluster"]

#: seconds to wait for the scheduler, and for cancelled tasks to stop, before giving up
CONNECT_TIMEOUT = 10.0
DRAIN_TIMEOUT = 300.0
#: tasks submitted per graph message, and submitted but unfinished at most
WAVE = 20_000
IN_FLIGHT = 40_000


class _Closing(Protocol):
    """A cluster (``distributed.LocalCluster``, ``SpecCluster``): what ``close_cluster`` needs of it."""

    def close(self) -> object: ...


class SchedulerUnreachableError(ZoptError, OSError):
    """The ``dask.distributed`` scheduler at the given address did not answer."""


def _executing(job_id: str, dask_worker: Worker | None = None) -> list[str]:
    """Keys of this job's tasks still executing on one worker (run there by ``Client.run``, which
    passes ``dask_worker``; none outside a worker)."""
    if dask_worker is None:
        return []
    state = dask_worker.state
    running = set(state.executing) | set(getattr(state, "long_running", ()))
    return [str(ts.key) for ts in running if job_id in str(ts.key)]


def _drain(client: Client, job_id: str, timeout: float = DRAIN_TIMEOUT) -> None:
    """Wait until no worker executes a task of job ``job_id``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = client.run(_executing, job_id)
        if not any(busy.values()):
            return
        time.sleep(0.05)


def _current_client(address: str) -> Any:
    """The process's current ``distributed.Client`` when it is connected to ``address``, else None.
    A batch of jobs run under one ``Client`` (``with Client(cluster):``) then pays no connection per
    job: opening and closing a client is about 0.02 s a compute, twice a job (issue 34, G2)."""
    from distributed import Client

    try:
        client = Client.current(allow_global=True)
    except ValueError:  # no client in this process
        return None
    if client.status != "running" or getattr(client.scheduler, "address", None) != address:
        return None
    return client


def compute_on_cluster(tasks: list, address: str, ctx: AbstractContextManager[object], job_id: str | None) -> list:
    """Compute ``tasks`` (Dask delayed objects whose keys contain ``job_id``) on the cluster at
    ``address`` inside the context manager ``ctx`` (a progress bar, whose ``advance`` is called as each
    task finishes). Returns their results in order. Raises SchedulerUnreachableError if the scheduler
    does not answer within ``CONNECT_TIMEOUT`` seconds; re-raises a task's error after every task
    of the job has stopped."""
    import contextlib

    from distributed import Client

    client = _current_client(address)
    scope: Any = contextlib.nullcontext(client)  # the caller's client: used, never closed
    if client is None:
        try:
            client = Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise SchedulerUnreachableError(f"scheduler: no dask.distributed scheduler answered at {address} "
                                            f"within {CONNECT_TIMEOUT:.0f} s ({type(exc).__name__})") from exc
        scope = client
    from distributed import as_completed

    with scope:
        results: list = [None] * len(tasks)
        position: dict = {}
        pending = iter(enumerate(tasks))
        running = as_completed(loop=client.loop)  # this client, not a default one

        def submit(n: int) -> None:
            wave = list(itertools.islice(pending, n))
            if wave:
                for (i, _), future in zip(wave, client.compute([t for _, t in wave]), strict=True):
                    position[future.key] = i
                    running.add(future)

        try:
            with ctx:
                submit(IN_FLIGHT)
                for future in running:
                    results[position.pop(future.key)] = future.result()  # a task's error is raised here
                    future.release()
                    if hasattr(ctx, "advance"):
                        ctx.advance()
                    if running.count() <= IN_FLIGHT - WAVE:
                        submit(WAVE)
            return results
        except BaseException:
            client.cancel(list(running.futures))
            if job_id:
                _drain(client, job_id)
            raise
        finally:
            if job_id:
                client.run(release_job, job_id)


def close_cluster(cluster: _Closing) -> None:
    """Close a ``dask.distributed`` cluster (a ``LocalCluster`` a script started for its jobs) without
    its nannies' "Worker process still alive after 4.0 seconds, killing" warnings: a worker process
    whose interpreter takes longer than that to exit is killed, as distributed does anyway, and
    nothing of a job depends on it (every job has returned). Errors are still logged."""
    import logging

    log = logging.getLogger("distributed.nanny")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        cluster.close()
    finally:
        log.setLevel(level)
