"""Building the write graph of a job cheaply: one Dask graph layer per array, one task per shard.

``dask.delayed(f)(…)`` costs about a millisecond per call (it tokenizes and unpacks its
arguments and merges a graph per call): 17 minutes of client time for a million shards. The
tasks of one array differ only in their shard coordinates, so they are written straight into
one graph layer (a dict insert each) holding the array's job description once; every task is a
``Delayed`` on that shared layer. Measured in ``benchmarks/graph_scale.py``.

The keys of a job's tasks are named here (``unit_key``, ``job_key``): ``zopt-<kind>-<array>-<i.j…>-<job>``,
so a progress bar can count a job's write units by prefix (``zopt.compat.scheduling``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dask.delayed import Delayed
    from dask.typing import Key

__all__ = ["job_key", "shard_tasks", "unit_key"]


def shard_tasks(func: Callable[..., object], unit: object, job_key: str,
                units: Iterable[tuple[str, tuple[int, ...], str | None]]) -> list[Delayed]:
    """``Delayed`` objects computing ``func(job, coords, marker)`` for each ``(key, coords, marker)``
    of ``units``, in order, sharing one graph layer that holds ``job`` under ``job_key``."""
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph

    layer: dict[Key, Any] = {job_key: unit}
    keys = []
    for key, coords, marker in units:
        layer[key] = (func, job_key, coords, marker)  # the job's key is replaced by the job; coords stay a tuple
        keys.append(key)
    name = f"{job_key}-shards"
    graph = HighLevelGraph({name: layer}, {name: set()})
    # dask's Delayed.__init__ has no annotations
    return [Delayed(k, graph, layer=name) for k in keys]  # type: ignore[no-untyped-call]


def unit_key(kind: str, name: str, coords: tuple[int, ...], job_id: str, suffix: object = None) -> str:
    """The Dask key of the ``kind`` task (``chunk``, ``shard``, ``slots``, ``part``, ``inplace``) of write
    unit ``coords`` of array ``name`` in job ``job_id``; ``suffix`` tells apart a unit's several tasks."""
    key = f"zopt-{kind}-{name}-{'.'.join(map(str, coords))}-{job_id}"
    return key if suffix is None else f"{key}-{suffix}"


def job_key(name: str, job_id: str) -> str:
    """The Dask key holding the description shared by the tasks of array ``name`` in job ``job_id``."""
    return f"zopt-job-{name}-{job_id}"
