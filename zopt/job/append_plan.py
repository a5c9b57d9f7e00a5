"""An append's plan, shared by its destinations (``zopt.job.append``: a local store;
``zopt.job.append_icechunk``: an Icechunk branch): the new files checked against DST, the units to
write from DST's last partly filled one on, and their write by the job's usual tasks.
"""

from __future__ import annotations

import collections
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from zopt.errors import OptionError
from zopt.io.append_check import (
    AppendedSource,
    StoreDescription,
    check_after,
    check_against_store,
    check_constants,
)
from zopt.io.multi import MultiSource, along_concat_dim
from zopt.io.sources import SourceVariable
from zopt.job.dask_graph import WriteTarget, run_writes, write_tasks
from zopt.job.opening import WriteRun
from zopt.job.reports import ArrayReport
from zopt.job.targets import TargetSpec, stored_sizes, target_arrays
from zopt.job.work import WorkOptions, build_work
from zopt.notes import Note
from zopt.planning.chunking import is_coordinate, variable_layout
from zopt.store.journal import Journal

if TYPE_CHECKING:
    from zopt.job.options import RecompressJob

__all__ = ["AppendPlan", "appended_note", "plan_append", "write_units"]


@dataclass
class AppendPlan:
    """An append checked and planned: the arrays along the concat dimension (``along``) and each
    one's ``[axis, partial unit]`` (``units``: the unit index along the axis of DST's partly filled
    unit, -1 when DST's length fills its units), DST's length ``old``, the combined ``source`` and its
    variables ``full`` (the new shapes)."""

    along: list[str]
    units: dict[str, list[int]]
    old: int
    source: AppendedSource
    full: dict[str, Any]


def plan_append(job: RecompressJob, src: MultiSource, store: StoreDescription, job_id: str,
                notes: list[Note]) -> AppendPlan:
    """The new files checked against DST (``zopt.io.append_check``: OptionError naming them), the
    layout options checked, the units to write planned. Nothing written."""
    from zopt.compat.zarr_compat import open_array

    dim = src.dim
    source = src.variables(job_id)
    names = [n for n, v in source.items() if v.ndim >= 1 and v.dtype.kind in "biufc"]
    names = along_concat_dim(src, source, names, [])
    new = _new_metadata(src, source, [n for n in names if n in store.arrays], store, job_id)
    new |= {n: {} for n in names if n not in store.arrays}  # refused as only in the new files
    # the other variables (0-d, not numeric) are copied as they are: their values are compared below
    new |= {n: store.arrays[n].meta for n in source if n not in new and n in store.arrays}
    check_against_store(store, new, dim, src.files)
    along = [n for n in names if dim in source[n].dims]
    rest = [n for n in store.arrays if n not in along]
    check_constants(store, {n: src.schema[n]["values"] for n in rest if "values" in src.schema.get(n, {})},
                    lambda n: open_array(store.where, path=n, mode="r")[...], src.files)
    lengths = {store.arrays[n].shape[store.arrays[n].dims.index(dim)] for n in along}
    if len(lengths) != 1:
        raise OptionError("dst", f"{store.path!r}: its arrays along {dim!r} have different lengths {sorted(lengths)}")
    old = lengths.pop()
    if src.coord is not None and dim in store.arrays and src.combine == "by_coords":
        tail = np.asarray(open_array(store.where, path=dim, mode="r")[max(0, old - 64):old])
        notes.extend(check_after(tail, np.asarray(src.coord), list(src.starts), list(src.files), dim, store.path))
    _check_layout_options(job, store, source, along)
    appended = AppendedSource(store.where, old, src)
    units = {}
    for n in along:
        axis = store.arrays[n].dims.index(dim)
        step = store.arrays[n].grid[axis]
        units[n] = [axis, old // step if old % step else -1]
    return AppendPlan(along, units, old, appended, appended.variables(job_id))


def write_units(job: RecompressJob, plan: AppendPlan, store: StoreDescription, target: WriteTarget,
                planned: dict[str, Any], job_id: str, done: Callable[[str], Mapping[str, Any]] | None = None,
                measure: Callable[[str], tuple[int, int]] | None = None) -> tuple[dict[str, ArrayReport], float]:
    """Write the units of ``plan`` from DST's partly filled one on into ``target`` (a
    ``zopt.job.dask_graph.WriteTarget``; ``planned``: its arrays at the new shapes), with the job's
    usual tasks; ``done(name)``: the units an interrupted run finished; ``measure(name)``: the
    (apparent, allocated) bytes of an array's chunks in the target (default ``stored_sizes``).
    Returns the reports and the graph seconds."""
    full, units, old = plan.full, plan.units, plan.old

    def skipped(name: str) -> dict[str, Any]:
        """Units of DST's old shape (kept as they are) and units an interrupted run finished."""
        axis, partial = units[name]
        first = partial if partial >= 0 else math.ceil(old / store.arrays[name].grid[axis])
        grid = [math.ceil(s / k) for s, k in zip(full[name].shape, store.arrays[name].grid, strict=True)]
        kept: dict[str, Any] = {Journal.key(c): (collections.Counter(), 0) for c in np.ndindex(*grid) if c[axis] < first}
        return {**kept, **(done(name) if done is not None else {})}

    layouts = {n: store.arrays[n].layout for n in plan.along}
    work = build_work(plan.along, full, layouts, planned, WorkOptions("compact"), done=skipped)
    over = work.over_memory(job.max_memory)
    if over is not None and job.max_memory is not None:
        raise OptionError("max_memory", f"a write task of array {over.name!r} needs ~{over.projected_task_bytes} "
                          f"bytes, more than the limit of {job.max_memory}")
    reports = {n: ArrayReport(name=n, shape=tuple(full[n].shape), dtype=str(full[n].dtype),
                              chunks=math.prod(math.ceil(s / c) for s, c in zip(full[n].shape, w.inner, strict=True)),
                              chunks_written=0, logical_bytes=int((full[n].size - math.prod(store.arrays[n].shape))
                                                                  * full[n].dtype.itemsize),
                              stored_before=None, layout=w.layout,
                              projected_task_bytes=w.projected_task_bytes, units=len(w.pending), tasks=w.tasks)
               for n, w in work.arrays.items()}
    run = WriteRun(work, plan.source, job.decision, job_id, {}, reports, job.scheduler, job.progress)
    root = target.root
    assert root is not None  # the staging directory, or the session's store
    graph_seconds = run_writes(write_tasks(run, target), reports, measure or (lambda n: stored_sizes(root, n)),
                               job.scheduler, job.progress, job_id=job_id)
    return reports, graph_seconds


def appended_note(plan: AppendPlan, where: str) -> Note:
    first = plan.along[0]
    rows = plan.full[first].shape[plan.units[first][0]] - plan.old
    return Note(f"appended {rows} rows along {plan.source.dim!r} to {where} ({plan.old} before), with its chains, "
                "inner chunks and shards", "append")


def _new_metadata(src: MultiSource, source: dict[str, Any], names: list[str], store: StoreDescription,
                  job_id: str) -> dict[str, dict[str, Any]]:
    """``{name: zarr.json}`` of the arrays a fresh job on the new files would write, with DST's
    layouts (the codecs left aside: DST's are kept)."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    from zopt.planning.chains import split_chain

    layouts = {n: store.arrays[n].layout if n in store.arrays else ((1,) * source[n].ndim, None) for n in names}
    floats = {n for n in src.repacks if n in names}  # files packed differently: their floats, NaN fill
    spec = TargetSpec(src, None, source, names, layouts, {n: split_chain([{"name": "bytes"}]) for n in names},
                      job_id=job_id, fills={n: np.nan for n in floats})
    arrays = target_arrays(spec)
    out = {}
    for name, arr in arrays.items():
        raw = sync(arr.store_path.store.get(f"{name}/zarr.json", prototype=default_buffer_prototype()))
        assert raw is not None  # target_arrays wrote it
        out[name] = json.loads(raw.to_bytes())
    return out


def _check_layout_options(job: RecompressJob, store: StoreDescription, source: dict[str, Any], names: list[str]) -> None:
    """``chunks``/``shards`` given: each array's, as a fresh job on DST's shape would choose them,
    must be DST's (OptionError naming the option and the array otherwise)."""
    for option, spec, part in (("chunks", job.chunks, 0), ("shards", job.shards, 1)):
        if spec is None:
            continue
        for name in names:
            old, var = store.arrays[name], source[name]
            if is_coordinate(name, var):
                continue  # a 1-D coordinate is one chunk of its length: DST's is kept
            at_old = SourceVariable(old.shape, var.dtype, var.dims)
            chosen = variable_layout(name, at_old, job.chunks, job.shards, None, job.variables)[part]
            if tuple(chosen or ()) != tuple(old.layout[part] or ()):
                raise OptionError(option, f"gives {name!r} {'inner chunks' if part == 0 else 'shards'} {chosen}, "
                                  f"dst {store.path!r} has {old.layout[part]}: --append keeps dst's layout; drop "
                                  f"--{option} or give dst's")
