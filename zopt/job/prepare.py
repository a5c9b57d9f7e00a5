"""Before anything is written: a job's source and destination parsed, and its plan of work made.

``parse_job`` resolves SRC (a path, a URL or several files combined, ``zopt.io.multi``) and makes
DST a target (a local directory, a store, an Icechunk branch), refusing overlaps; ``plan_of_work``
describes the source, attaches lossy variables, checks readers and the journal, chooses each
variable's chain from the codec menu and builds the work (``zopt.job.work``), refusing what
cannot be honoured. Nothing here writes; ``zopt.job.api.run_job`` runs the phases.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import zarr

    from zopt.lossy.prepare import LossyVariable
    from zopt.planning.optimizer import MenuChoice
    from zopt.planning.plan import Plan

import numpy as np

from zopt.compat.job_cache import release_job
from zopt.errors import OptionError
from zopt.io import locations as loc
from zopt.io.multi import along_concat_dim
from zopt.io.paths import resolve
from zopt.io.source_check import check_store
from zopt.io.source_kinds import Source, open_source
from zopt.io.sources import (
    SourceVariable,
    children_to_copy,
    hierarchy_dims,
    is_zarr,
    root_array_metadata,
    root_array_variable,
    source_variables,
    zarr_v3_group,
)
from zopt.job.destinations import Opening, Target, open_target
from zopt.job.options import RecompressJob
from zopt.job.plan_guard import guard_plan
from zopt.job.progress import counting
from zopt.job.reports import ArrayReport
from zopt.job.reshard import choose_copies
from zopt.job.targets import Layouts, TargetSpec, stored_bytes_of, target_arrays
from zopt.job.work import ArrayWork, Work, WorkOptions, build_work, layouts_for
from zopt.notes import Note
from zopt.planning.chains import (
    chains_to_check,
    menu_chains,
    sized_chain,
    split_chain,
    with_checksum,
)
from zopt.planning.chunking import unused_shape_notes
from zopt.planning.menu import default_chain
from zopt.planning.optimizer import MenuOptions, TrialRun
from zopt.store.journal import Journal, fingerprint

__all__ = ["Prepared", "job_layout", "job_readers", "parse_job", "plan_of_work"]


@dataclass
class Prepared:
    """The plan of work of one job, made in memory before anything is written."""

    job_id: str
    src: Source  # the resolved source: a path or URL (PathSource), or several files (MultiSource)
    source_group: zarr.Group | None
    root_meta: dict[str, Any] | None
    children: list[str]
    notes: list[Note]
    skipped: list[str] = field(default_factory=list)
    plan: Plan | None = None  # the job's Plan, loaded
    names: list[str] = field(default_factory=list)
    source: dict[str, SourceVariable] = field(default_factory=dict)
    lossy_vars: dict[str, LossyVariable] = field(default_factory=dict)
    #: lossy variables written lossless (their lossless default stored fewer bytes): MenuChoice each
    lossless_instead: dict[str, MenuChoice] = field(default_factory=dict)
    layouts: Layouts = field(default_factory=dict)
    splits: dict[str, Any] = field(default_factory=dict)
    spec: TargetSpec | None = None
    planned: dict[str, zarr.Array[Any]] = field(default_factory=dict)
    work: Work | None = None
    reports: dict[str, ArrayReport] = field(default_factory=dict)
    fp: dict[str, Any] | None = None
    record: dict[str, Any] | None = None


def parse_job(job: RecompressJob, hold: contextlib.ExitStack | None = None) -> tuple[Source, Target, list[Note]]:
    """SRC resolved on the client (workers may run elsewhere), DST made a target; overlaps refused.

    ``hold``: a local directory DST's lock (``zopt.store.lock.destination_lock``) is taken into it
    before anything of DST is touched, and the target's end registered (``Target.end``); the
    caller releases them once the job has published or failed. None for a child group's job, which
    its parent's lock covers."""
    src, notes = _source(job)
    target = open_target(job.dst, Opening(job.overwrite, src.files, hold, notes, job.layout))
    return src, target, notes


def _source(job: RecompressJob) -> tuple[Source, list[Note]]:
    """SRC resolved: a path or URL, or with ``concat_dim`` the files combined (``zopt.io.multi``), and notes."""
    if job.concat_dim is None:
        assert isinstance(job.src, str)  # several sources come with concat_dim (RecompressJob.parse)
        return open_source(os.fspath(job.src) if loc.is_url(job.src) else resolve(loc.local_path(job.src))), []
    from zopt.io.multi import BATCH, expand_sources

    # files read, a summary task of BATCH files at a time (zopt.io.multi.open_multi)
    with counting(job.progress, "planning", "files read", "_summarize_batch", len(expand_sources(job.src)), BATCH):
        multi = open_source(job.src, concat_dim=job.concat_dim, combine=job.combine, scheduler=job.scheduler)
    return multi, [Note(f"src: {multi.text}", "source"), *multi.notes]


def job_layout(job: RecompressJob, target: Target) -> str:
    return job.layout if target.positional else "compact"


def plan_of_work(job: RecompressJob, src: Source, target: Target, notes: list[Note]) -> Prepared:
    """Describe the source, attach lossy and plan, check readers and the journal, build the work."""
    plan = job.plan
    if isinstance(plan, str | os.PathLike):
        from zopt.planning.plan import Plan

        plan = Plan.load(plan)
    where = src.location  # one path or URL; None for several files
    skipped = check_store(where, job.skip_broken) if where is not None and is_zarr(where) else []
    if skipped:
        notes.append(Note(f"skipped arrays with broken metadata: {skipped}", "skipped"))
    p = Prepared(job_id=uuid.uuid4().hex[:12],  # names temp files and tasks; the key of the sources it opens
                  src=src, source_group=zarr_v3_group(where), root_meta=root_array_metadata(where),
                  children=children_to_copy(where, target.store_of(), plan), notes=notes, skipped=skipped)
    p.plan = plan
    try:  # the plan of work, checked: nothing written yet, the sources opened so far closed on a refusal
        p.source = (root_array_variable(where, p.root_meta) if p.root_meta and where is not None
                    else source_variables(src, p.source_group, p.job_id))
        p.names = _names_to_rewrite(p.source, job.variables, p.children)
        if job.progress is not None:
            job.progress.emit("planning", "arrays described", len(p.source), len(p.source))
        unknown = sorted(job.lossy_groups() - set(p.children))
        if unknown:  # a child job would never receive them: refused, not ignored
            raise OptionError("lossy", f"{unknown} are not child groups of the source; it has {p.children or 'none'}")
        p.names = along_concat_dim(src, p.source, p.names, notes)  # several files: every variable along concat_dim
        specs = {"chunks": job.chunks, "shards": job.shards}
        notes.extend(Note(n, "layout") for n in unused_shape_notes(p.source, p.names, specs,
                                                                     _other_groups_dims(src, p.source, p.names, specs)))
        if p.root_meta and not p.names:
            notes.append(Note("the source is a root array that is not numeric; copied as it is", "copied", ""))
        _attach_lossy(job, src, p, job_layout(job, target))
        _check_journal(job, src, target, p)
        _build_work(job, src, target, p, plan)
    except BaseException:
        release_job(p.job_id)
        raise
    return p


def _other_groups_dims(src: Source, source: dict[str, Any], names: list[str], specs: dict[str, Any]) -> set[str] | None:
    """The dimensions of the hierarchy's other groups, read only when a named shape has a dimension
    this group's rewritten variables lack (each group's job applies the shapes to its own arrays)."""
    dims = {d for n in names for d in source[n].dims}
    if not any(isinstance(sp, dict) and set(sp) - dims for sp in specs.values()):
        return None
    return hierarchy_dims(src.location)


def _attach_lossy(job: RecompressJob, src: Source, p: Prepared, layout: str) -> None:
    """``zopt.lossy``: analysed here; each lossy variable gets its own chain, attributes and check,
    or, where its lossless default stores fewer bytes on the sampled chunks, is written lossless
    (a note says so: no lossy mode stores more than lossless, issue 35)."""
    chain = job.chain
    own = job.own_lossy()
    if own:
        from zopt.lossy.prepare import LossyOptions, prepare_for_recompress

        lossless = {n: _lossless_default(job, p, n, layout) for n in own if n in p.source}
        options = LossyOptions(job.chunks, job.shards, job.variables, job.scheduler, job.readers, tuple(chain),
                               job.budget)
        # prepare_for_recompress says ``src: str`` and takes any Source (reads through zopt.io.sources.read_source)
        p.lossy_vars = prepare_for_recompress(src, p.source, p.names, own, options,  # type: ignore[arg-type]
                                              lossless)
        _lossy_notes(job, p, lossless)
    if job.readers:
        from zopt.planning.readers import check_readers

        check_readers(chains_to_check(p.names, chain, p.lossy_vars, job.codecs, p.plan), job.readers)


def _lossless_default(job: RecompressJob, p: Prepared, name: str, layout: str) -> dict[str, Any]:
    """``{candidate: chain}`` the job would choose from to write lossy variable ``name`` losslessly:
    the given chain (``codecs``), else the menu's candidates for its data type (``--menu``,
    ``--readers``, an explicit decision, fixed-slot shards narrow it); none with a plan."""
    var = p.source[name]
    if p.plan is not None or var.dtype.kind not in "biuf":
        return {}
    if job.codecs is not None:
        return {"codecs": job.chain}
    from zopt.planning.optimizer import menu_candidates

    options = _menu(job, layout)
    return {} if options is None else menu_candidates(var.dtype, options, name)


def _menu(job: RecompressJob, layout: str) -> MenuOptions | None:
    """The job's menu options (None: a chain or a plan is given), for the layout it writes
    (``job_layout``): fixed-slot shards keep the menu to chains with a size bound."""
    if job.menu_options is None:
        return None
    return dataclasses.replace(job.menu_options, bounded_only=layout == "fixed-slot")


def job_readers(job: RecompressJob) -> list[str]:
    """The readers the job's own choices suit (``zopt.planning.readers.effective_readers``): ``--readers``
    as given, else plain zarr-python (issue 36), else, with an explicit decision and no chain, zopt."""
    from zopt.planning.readers import effective_readers

    return effective_readers(job.readers, job.explicit_decision and job.codecs is None)


def _lossy_notes(job: RecompressJob, p: Prepared, lossless: dict[str, dict[str, Any]]) -> None:
    """Lossy variables whose lossless default stored fewer bytes leave ``p.lossy_vars`` (their
    chain: that candidate); a note names each tail chosen by trial and each variable written lossless."""
    from zopt.planning.optimizer import MenuChoice

    tails = []
    for n in [n for n in p.names if n in p.lossy_vars]:
        lv = p.lossy_vars[n]
        if lv.lossless is None:
            if lv.tail_trial or lv.lossless_trial:
                tails.append(f"{n}={lv.tail}")
            continue
        del p.lossy_vars[n]
        trial = lv.lossless_trial or {}  # set with lv.lossless (zopt.lossy.prepare._with_tail)
        lossy_bytes = (lv.tail_trial or {}).get(lv.tail)
        if job.codecs is None:
            p.lossless_instead[n] = MenuChoice(name=lv.lossless, chain=lossless[n][lv.lossless],
                                               trials={k: (b, 0.0) for k, b in trial.items()},
                                               budget=job.budget)
        p.notes.append(Note(f"lossy {n}={lv.spec.text()}: on sampled chunks the lossless default "
                            f"({lv.lossless}) stored {trial[lv.lossless]} bytes and the lossy tail "
                            f"({lv.tail}) {lossy_bytes}: {n} written lossless, bit for bit", "lossy", n))
    if tails:
        p.notes.append(Note("lossy tails chosen by trial (zopt.lossy.tails): " + ", ".join(tails), "lossy"))


def _check_journal(job: RecompressJob, src: Source, target: Target, p: Prepared) -> None:
    """The job's fingerprint; an interrupted run of a different job is refused (nothing touched)."""
    journal = target.journal
    if journal is None:
        return
    options = {**job.fingerprinted(), "plan": p.plan}  # the loaded plan's content, not only its path
    ident = src.identify(p.names)  # several files: every file's path, size, mtime and sampled bytes
    p.fp = fingerprint(ident.text, p.names, options, identity=ident.digest, files=ident.files)
    p.record = journal.read()
    if p.record is not None:
        journal.check(p.record, p.fp, target.text)  # ResumeMismatchError
        p.record = journal.read()  # a check may set aside a record it does not resume (Icechunk: a published job's)


def _build_work(job: RecompressJob, src: Source, target: Target, p: Prepared, plan: Plan | None) -> None:
    """Layouts, chains, the target metadata in memory and the plan of work; ``max_memory`` checked."""
    if p.record is not None:
        p.layouts = Journal.layouts(p.record)
    else:
        p.layouts = layouts_for(p.source, p.names, job.chunks, job.shards, plan if job.chunks is None else None,
                                job.variables)
    chain = job.chain
    readers = job_readers(job)
    floats = {n for n in src.repacks if n in p.names}
    repacks = _repacks(src, p, readers)
    chosen = dict(p.lossless_instead)  # lossy variables written lossless: chosen already
    if plan is not None and job.codecs is None:  # arrays the plan would make worse keep the source's chain
        plan = guard_plan(plan, src.location, p.names, chain, job.plan_force, p.notes)
    if job.codecs is None:
        todo = {n: p.source[n] for n in p.names
                if n not in p.lossy_vars and n not in chosen and p.source[n].dtype.kind in "biufc"}
        # menu_chains (zopt.planning.chains, untyped yet) says ``src: str`` and takes any Source: PathSource is a str,
        # the trials read through zopt.io.sources.read_source
        # one choice task per array trialled (zopt.planning.optimizer.choose_chains names them)
        with counting(job.progress, "planning", "arrays trialled", "zopt-menu-choice-", len(todo)):
            chosen.update(menu_chains(src, todo,  # type: ignore[arg-type]
                                      p.layouts, plan, _menu(job, job_layout(job, target)),
                                      run=TrialRun(job.scheduler, p.job_id), repacks=repacks,
                                      partial=target.root if p.record is not None else None))
    if any(c.trials for c in chosen.values()) or (plan is not None and chosen):
        p.notes.append(Note(("chains recorded in the plan" if plan is not None else "chains chosen from the menu")
                            + " (zopt.planning.candidates): "
                            + ", ".join(f"{n}={chosen[n].name}" + (f" (after the re-expression's scale_offset + "
                                                                  f"cast_value {repacks[n].int_dtype})"
                                                                  if n in repacks else "")
                                        for n in p.names if n in chosen), "menu"))
    chains = {n: chosen[n].chain if n in chosen else chain if job.codecs is not None
              else default_chain(p.source[n].dtype) for n in p.names}
    chains.update({n: lv.chain(chain) for n, lv in p.lossy_vars.items()})  # zopt.lossy
    # files packed differently: one exact packing, then the menu's choice for the integers (chosen
    # above, the two codecs included), else the chain given, else the integers' default
    repack_chains = {n: chosen[n].chain if n in chosen else r.filters() + (
        job.chain if job.codecs is not None else default_chain(np.dtype(r.int_dtype)))
        for n, r in repacks.items()}
    if job.readers and repack_chains:
        from zopt.planning.readers import check_readers

        check_readers(repack_chains, job.readers)  # ValueError naming the variable, codec and reader
    chains.update(repack_chains)
    # a cast_value before a shuffle or blosc: sized for the codes, not the array's type
    p.splits = {n: split_chain(sized_chain(c, p.source[n].dtype)) for n, c in chains.items()}
    if job.want_checksum:  # sharded arrays: crc32c at the end of the inner chain
        p.splits = {n: with_checksum(sp) if p.layouts[n][1] is not None else sp for n, sp in p.splits.items()}
    p.spec = TargetSpec(src, p.source_group, p.source, p.names, p.layouts, p.splits, root_meta=p.root_meta,
                        job_id=p.job_id, attrs={n: lv.attributes() for n, lv in p.lossy_vars.items()},
                        fills={**{n: lv.fill_value for n, lv in p.lossy_vars.items()}, **{n: np.nan for n in floats}})
    p.planned = target_arrays(p.spec)
    _check_units(src, p.source, p.layouts)
    journal = target.journal
    p.work = build_work(p.names, p.source, p.layouts, p.planned,
                        WorkOptions(job_layout(job, target), job.slot_parts, plan),
                        done=journal.done if p.record is not None else None)
    p.notes.extend(choose_copies(job, src, p.work, p.lossy_vars, plan))  # issue 34 G5
    _note_unsharded_options(job, p)
    limit = job.max_memory
    over = p.work.over_memory(limit)
    if over is not None and limit is not None:  # over: only under a limit
        raise OptionError("max_memory", _memory_message(over, limit))
    p.reports = {name: _report(w, p.source[name], stored_bytes_of(src.location, name)) for name, w in p.work.arrays.items()}


def _repacks(src: Source, p: Prepared, readers: list[str]) -> dict[str, Any]:
    """``{name: zopt.io.packing.Repack}`` of the variables whose files are packed differently, to
    be re-expressed as one exact integer packing (``scale_offset`` + ``cast_value``) where every
    reader reads those codecs (``zarr-python-3.2``, ``zopt``); for other readers (the default,
    zarr-python >= 3.1) none: those variables are written as the floats the files decode to,
    exactly, with the menu's chain, and their notes say so. One path: none."""
    from zopt.planning.readers import reads_repacking

    found = {n: r for n, r in src.repacks.items() if n in p.names and n not in p.lossy_vars}
    if not found or reads_repacking(readers):
        return found
    for n, r in found.items():  # the source's note on re-expressing it is replaced by this one
        p.notes[:] = [x for x in p.notes if not (x.kind == "repacked" and x.array == n)]
        p.notes.append(Note(f"{n}: files packed differently, written as the {np.dtype(r.dtype)} values they decode to "
                            f"(exact); one integer packing (scale_offset + cast_value {r.int_dtype}, smaller) is "
                            "written for readers of those codecs: --readers zarr-python-3.2 or zopt (zarr-python 3.1 "
                            "lacks them)", "repacked", n))
    return {}


#: write units (shards, or chunks unsharded) one array may have: the plan of work lists each one
MAX_UNITS = 10**8


def _check_units(src: Source, source: dict[str, SourceVariable], layouts: dict[str, Any]) -> None:
    """ValueError naming the source and array whose write units the plan of work could not list
    (a corrupt shape such as 2**62 rows was a MemoryError naming nothing)."""
    for name, (inner, shard) in layouts.items():
        shape = tuple(source[name].shape)
        units = math.prod(math.ceil(s / k) for s, k in zip(shape, shard or inner, strict=True))
        if units > MAX_UNITS:
            what = f"array {name!r}" if name else "the root array"
            raise OptionError("src", f"{what} of {src.text}: shape {shape} makes {units:.3g} "
                             f"{'shards' if shard else 'chunks'} of {tuple(shard or inner)}, more than the {MAX_UNITS:.0e} "
                             "one job lists (a corrupt shape?); give larger --chunks/--shards if the shape is right")


def _note_unsharded_options(job: RecompressJob, p: Prepared) -> None:
    """A note when shard-only options were given but no array is sharded: they change nothing,
    and the user is told so rather than left to believe they applied."""
    if p.work is None or not p.work.arrays or p.children or any(w.layout != "unsharded" for w in p.work.arrays.values()):
        return  # with child groups, each child's job says it for its own arrays
    given = [name for name, on in (("layout='fixed-slot'", job.layout == "fixed-slot"),
                                   ("slot_parts", job.slot_parts is not None), ("checksum=True", job.checksum is True))
             if on]
    if given:
        p.notes.append(Note(f"{', '.join(given)}: no array is sharded (each fits one shard, or its shards are its "
                            f"chunks), so {'it changes' if len(given) == 1 else 'they change'} nothing; give shards "
                            "(--shards) larger than the chunks to shard them", "layout"))


def _report(w: ArrayWork, var: SourceVariable, stored_before: int | None) -> ArrayReport:
    """The report of one array before its run: its plan of work, and what an interrupted run did."""
    rep = ArrayReport(
        name=w.name, shape=tuple(var.shape), dtype=str(var.dtype),
        chunks=math.prod(math.ceil(s / c) for s, c in zip(var.shape, w.inner, strict=True)),
        chunks_written=w.resumed_chunks, logical_bytes=int(var.size * var.dtype.itemsize), stored_before=stored_before,
        layout=w.layout, projected_task_bytes=w.projected_task_bytes, units=w.units, units_resumed=w.units_resumed,
        tasks=w.tasks, copied=w.copy is not None,
    )
    rep.masks.update(w.resumed_masks)
    return rep


def _memory_message(w: ArrayWork, limit: int) -> str:
    from dask.utils import format_bytes

    return (
        f"a write task of array {w.name!r} needs ~{format_bytes(w.projected_task_bytes)} (projected: input "
        f"region twice, encoded output, buffers), more than the limit of {format_bytes(limit)}; use smaller --shards, "
        "or --layout fixed-slot with more --slot-parts, or raise --max-memory"
    )


def _names_to_rewrite(source: dict[str, SourceVariable], variables: Sequence[str] | None,
                      children: list[str]) -> list[str]:
    """The root group's variables to rewrite: ``variables`` without the ``child/…`` paths (which
    the child groups' jobs take), or every numeric variable of one dimension or more. ValueError
    naming a variable or child group the source lacks."""
    if variables is None:
        return [n for n, v in source.items() if v.ndim >= 1 and v.dtype.kind in "biufc"]
    names = [v for v in variables if "/" not in v]
    missing = [n for n in names if n not in source]
    missing += [v for v in variables if "/" in v and v.split("/", 1)[0] not in children]
    if missing:
        where = f"; it has {sorted(source)}" + (f" and child groups {children}" if children else "")
        raise OptionError("variables", f"{missing} not in the source{where}")
    return names


