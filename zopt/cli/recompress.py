"""``zopt recompress`` (into a new DST, or ``--in-place``) and ``zopt presets``, with their tables.

``zopt recompress SRC DST`` runs on Dask's local threaded scheduler by default (no setup);
``--scheduler tcp://host:8786`` runs on a ``dask.distributed`` cluster. Registered on the
``zopt`` group in ``zopt.cli.commands``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from zopt.cli.shared import Location, option_usage_error, shard_rewrite_errors
from zopt.cli.tables import console, fitted, short_path, wide_option, wrap_words
from zopt.cli.tables import human as _human
from zopt.cli.tables import mask_text as _mask_text
from zopt.compat.interrupts import interrupt_note
from zopt.compat.scheduling import scheduler_option
from zopt.errors import OptionError, disk_full_message, is_disk_full
from zopt.job.progress import RichProgress as _RichProgress

if TYPE_CHECKING:
    from zopt.job.reports import RecompressReport

__all__ = ["RESUME_NOTE", "STORE_NOTE", "presets_command", "recompress", "summary_table", "work_table"]

#: what Ctrl-C says where the interrupted job resumes (``zopt.compat.interrupts``)
RESUME_NOTE = "journal kept, run the same command to resume"
#: and where it starts over (a store URL: written in place, no journal)
STORE_NOTE = "run the same command with --overwrite to start over"


def work_table(report: RecompressReport) -> Table:
    """The plan of work of ``recompress --dry-run`` (a RecompressReport with nothing written)."""
    table = Table(title=f"zopt recompress --dry-run → {report.dst}")
    for col in ("array", "shape", "dtype", "layout", "shards", "done", "tasks", "logical", "source stored", "memory/task"):
        table.add_column(col, justify="left" if col in ("array", "shape", "dtype", "layout") else "right")
    for a in report.arrays:
        table.add_row(a.name or "(root)", "×".join(map(str, a.shape)), a.dtype, a.layout, str(a.units), str(a.units_resumed),
                      str(a.tasks), _human(a.logical_bytes), _human(a.stored_before),
                      _human(a.projected_task_bytes))
    table.add_row("total", "", "", "", str(sum(a.units for a in report.arrays)),
                  str(sum(a.units_resumed for a in report.arrays)), str(sum(a.tasks for a in report.arrays)),
                  _human(report.logical_bytes), "", _human(max((a.projected_task_bytes for a in report.arrays), default=0)))
    return fitted(table, ("done", "source stored", "dtype", "tasks", "memory/task", "shape"))


def _tree_bytes(path: str) -> int:
    """Bytes of the file ``path``, or of every file under the directory ``path``."""
    from pathlib import Path

    p = Path(path)
    return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def summary_table(report: RecompressReport, baseline: dict[str, int] | None = None, baseline_seconds: float | None = None) -> Table:
    """The end-of-run table: per array chunks, logical/stored bytes, ratio, masks, MB/s; with
    ``baseline`` (``zopt.planning.baseline.zarr_default_bytes``) also what zarr's default codecs store,
    and with ``baseline_seconds`` the wall-clock time that pass took."""
    title = f"zopt recompress → {short_path(report.dst, 40)}  ({report.seconds:.2f} s, {report.mb_per_s:.1f} MB/s"
    if baseline_seconds is not None:
        rate = report.logical_bytes / 1e6 / baseline_seconds if baseline_seconds else math.inf
        title += f"; zarr default: {baseline_seconds:.2f} s, {rate:.1f} MB/s"
    table = Table(title=title + ")")
    cols = ["array", "shape", "dtype", "chunks", "written", "logical", "before", "after", "ratio", "masks"]
    if baseline is not None:
        cols[8:8] = ["zarr default", "vs zarr default"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("array", "shape", "dtype", "masks") else "right")

    def versus(after: int, default: int | None) -> list[str]:
        if baseline is None:
            return []
        return [_human(default), f"{after / default:.0%}" if default else "—"]

    for a in report.arrays:
        table.add_row(
            a.name or "/ (root array)", "×".join(map(str, a.shape)), a.dtype, str(a.chunks), str(a.chunks_written),
            _human(a.logical_bytes), _human(a.stored_before), _human(a.stored_after),
            *versus(a.stored_after, None if baseline is None else baseline.get(a.name)),
            f"{a.ratio:.2f}", _mask_text(a.masks),
        )
    table.add_row(
        "[b]total", "", "", str(sum(a.chunks for a in report.arrays)),
        str(sum(a.chunks_written for a in report.arrays)), _human(report.logical_bytes),
        _human(report.source_bytes) + " (src)", _human(report.stored_after),
        *versus(report.stored_after, None if baseline is None else sum(baseline.values())),
        f"{report.logical_bytes / max(report.stored_after, 1):.2f}", _mask_text(report.masks()),
    )
    notes = {"masks": "masks: bitmask of the conditional codec's wrapped codecs (bit 0 = first codec) : inner chunks",
             "vs zarr default": "vs zarr default: after / what zarr.create_array's own codecs (zstd level 0) store "
                                "on the same chunks and shards"}
    if baseline_seconds is not None:
        notes["vs zarr default"] += ("; zarr default's time: reading DST back and encoding it with those codecs in "
                                     "memory (no disk writes), wall clock")
    return fitted(table, ("written", "before", "dtype", "shape", "chunks", "zarr default", "logical"), notes=notes)


#: the flags whose value click checks with a function of its own (``Flag`` has no field for it)
_CALLBACKS = {"scheduler": scheduler_option}


def _job_flags(command: Callable[..., None]) -> Callable[..., None]:
    """One click option per ``RecompressJob`` option with a ``Flag`` (``zopt.job.options``), in field order."""
    from zopt.job.options import flagged_options

    for name, flag in reversed(flagged_options()):  # click lists the last applied first
        kw: dict[str, Any] = {"default": flag.default, "help": flag.help, "show_default": flag.show_default}
        if flag.choices:
            kw["type"] = click.Choice(list(flag.choices))
        elif flag.at_least is not None:
            kw["type"] = click.IntRange(min=flag.at_least)
        elif flag.directory:
            kw["type"] = click.Path(exists=True, file_okay=False)
        if flag.is_flag:
            kw["is_flag"] = True
        if flag.multiple:
            kw["multiple"] = True
        if name in _CALLBACKS:
            kw["callback"] = _CALLBACKS[name]
        command = click.option(*flag.decls, **kw)(command)
    return command


@click.command("recompress", short_help="Rewrite a Zarr store or netCDF file as a smaller Zarr v3 store.")
@click.argument("src", type=Location())
@click.argument("dst", required=False)
@_job_flags
@click.option("--in-place", is_flag=True, help="No DST: re-decide the conditional masks of SRC's arrays shard by shard, "
              "each shard replaced atomically, metadata unchanged (write fast, compress later).")
@click.option("--grace", type=click.FloatRange(min=0), default=None,
              help="--in-place: seconds between replacing the shards (sizes kept) and dropping their holes, so readers "
                   "holding a shard index can drain (default 2; docs/reliability.md).")
@click.option("--no-progress", is_flag=True, help="Do not show the progress bar.")
@click.option("--vs-default", is_flag=True, help="Also encode every shard with zarr's default codecs (same chunks and "
              "shards, in memory) and show the size zarr alone would store, and zopt's size against it (lossy "
              "arrays: from SRC's values).")
@click.option("--verify", "verify_first", is_flag=True, help="Run zopt verify on the finished output before publishing it: "
              "on any difference nothing is published and the partial output is kept.")
@wide_option
@click.pass_context
def recompress(ctx: click.Context, src: str, dst: str | None, in_place: bool, grace: float | None, no_progress: bool,
               vs_default: bool, verify_first: bool, **options: object) -> None:
    """Rewrite SRC (Zarr v2/v3 store, child groups included, or netCDF file) into a new Zarr v3 store DST.

    By default each variable's chain is chosen from a menu of codecs plain zarr-python (>= 3.1, with
    pcodec installed) reads without zopt; the summary's last line names the readers. The default
    trades write speed for size (pcodec, where it pays, takes several times the CPU of zstd);
    --preset fast is the fast one (zopt's conditional codec: readers need zopt); --readers zopt
    also lets the menu take zopt's conditional codec.

    DST is a local directory, or an fsspec URL (s3://…, memory://…) written in place with
    packed shards (no positional writes there, so no fixed slots), or a branch of an Icechunk
    repository (icechunk://PATH[@BRANCH], icechunk+s3://BUCKET/PREFIX[@BRANCH]; docs/icechunk.md),
    written in one commit. With --in-place and no DST,
    SRC (a Zarr v3 store whose arrays have a conditional codec) is rewritten in place."""
    # the job's options by field name (zopt.job.options.flagged_options), as given
    plan, dry_run, skip_broken, lossy = options["plan"], options["dry_run"], bool(options["skip_broken"]), options["lossy"]
    concat_dim, scheduler, combine = _text(options["concat_dim"]), _text(options["scheduler"]), str(options["combine"])
    if plan and ctx.get_parameter_source("decision") is not click.core.ParameterSource.DEFAULT:
        raise click.ClickException("--plan decides every chunk's mask: give --plan or --decision, not both.")
    if dry_run and vs_default:
        raise click.UsageError("--vs-default measures a written DST; --dry-run writes none: give one of them.")
    if verify_first and (in_place or dry_run):
        raise click.UsageError("--verify compares a new DST with SRC before publishing it; " + (
            "--in-place keeps no copy of the old values to compare with (run zopt info --check to decode every chunk)"
            if in_place else "--dry-run writes nothing to verify"))
    if in_place and concat_dim:
        raise click.UsageError("--in-place rewrites one Zarr store; --concat-dim combines several files into a new DST.")
    if in_place:
        if dry_run:
            raise click.UsageError("--dry-run plans a rewrite into DST, not --in-place.")
        _recompress_in_place(ctx)
        return
    if grace is not None:
        raise click.UsageError("--grace applies to --in-place (readers of the rewritten shards); a new DST is "
                               "published by one rename and needs none.")
    if dst is None:
        raise click.UsageError("Missing argument 'DST' (or pass --in-place to rewrite SRC itself).")
    if dst.startswith(("icechunk://", "icechunk+")):
        if vs_default:
            raise click.UsageError("--vs-default reads a DST store's shards by path; not an Icechunk repository "
                                   "(compare with a local DST, or run zopt info on the repository).")
        from zopt.compat.icechunk_compat import quiet_logs

        quiet_logs(dst)
    verified: list = []
    check = None
    if verify_first:
        from zopt.readback.verify import before_publish_check

        check = before_publish_check(src, dst, scheduler=scheduler, progress=None if no_progress else _RichProgress,
                                     done=verified, skip_broken=skip_broken, concat_dim=concat_dim,
                                     combine=combine)
    from zopt.job.api import run_job
    from zopt.job.options import RecompressJob, RefusedOptionError, flagged_options

    given = {name: _listed(options[name]) if flag.multiple else options[name] for name, flag in flagged_options()}
    if ctx.get_parameter_source("decision") is click.core.ParameterSource.DEFAULT:
        given["decision"] = None  # the preset's, else compress_if_smaller (RecompressJob.parse)
    try:
        job = RecompressJob.parse(src, dst, **given, progress=not no_progress, before_publish=check)
    except OptionError as exc:
        # a usage error (exit status 2) on --preset and on a flag refused here; others: one line from zopt.cli.commands
        if exc.option == "preset" or isinstance(exc, RefusedOptionError):
            raise option_usage_error(ctx, exc) from exc
        raise
    try:
        with interrupt_note(_interrupt_note(dst), until_exit=True):
            report = run_job(job)
    except OSError as exc:
        if is_disk_full(exc) and "://" not in dst and not concat_dim:
            partial = dst.rstrip("/") + ".zopt-partial"
            kept = (f"the partial output {partial} is kept: free space and run the same command to resume"
                    if os.path.exists(partial) else "the partial output was removed")
            raise click.ClickException(disk_full_message(dst, _tree_bytes(src), kept + ", DST is as it was")) from exc
        raise  # one line from _Main, like every other error
    if dry_run:
        console.print("job: " + ", ".join(f"{k}={v}" for k, v in job.described()), markup=False)
        console.print(work_table(report))
        for note in report.notes:
            console.print(f"note: {note}")
        _print_readers(report)
        _exit_if_skipped(ctx, report.skipped)
        return
    baseline = baseline_seconds = None
    if vs_default:
        import time

        from zopt.planning.baseline import zarr_default_bytes

        started = time.perf_counter()
        # lossy arrays: zarr's default on the source's values, not on the rounded ones written
        bar = job.progress
        try:  # its own bar: zarr's default codecs on every shard written
            baseline = zarr_default_bytes(dst, [a.name for a in report.arrays], scheduler, source=src if lossy else None,
                                          progress=None if bar is None else lambda n: bar.tasks(
                                              "zarr default", "shards", n, report.logical_bytes))
        finally:
            if bar is not None:
                bar.close()
        baseline_seconds = time.perf_counter() - started
    console.print(summary_table(report, baseline, baseline_seconds))
    for note in report.notes:
        console.print(f"note: {note}")
    for done in verified:
        console.print(done.success_line(), markup=False)
    _print_readers(report)
    _exit_if_skipped(ctx, report.skipped)


def _text(value: object) -> str | None:
    """A text flag's value as click gives it: text, or None when not given."""
    assert value is None or isinstance(value, str)
    return value


def _listed(value: object) -> list[object] | None:
    """A repeatable flag's values as click gives them (a tuple) as a list; None when not given."""
    assert isinstance(value, tuple)
    return list(value) or None


def _interrupt_note(dst: str) -> str:
    """What Ctrl-C says: a local DST and an Icechunk branch keep a journal (the partial store, the
    work branch); a store URL is cleared, or left marked unfinished by a second Ctrl-C."""
    if "://" not in dst or dst.startswith(("icechunk://", "icechunk+")):
        return RESUME_NOTE
    return STORE_NOTE


def _print_readers(report: RecompressReport) -> None:
    """The summary's last line: which readers open the store (``zopt.planning.readers.reader_line``),
    wrapped at spaces to the width, never between a version and its sign ("≥ 0.3.6")."""
    if report.readers:
        console.print(wrap_words(report.readers, console.width), markup=False, soft_wrap=True)


def _exit_if_skipped(ctx: click.Context, skipped: list[str]) -> None:
    """``--skip-broken`` left arrays out: say which, exit with status 3."""
    if skipped:
        console.print(f"skipped {len(skipped)} array(s) with broken metadata: {', '.join(skipped)}", markup=False)
        ctx.exit(3)


@click.command("presets", short_help="List the presets --preset takes.")
@wide_option
@click.option("--json", "as_json", is_flag=True, help="Print the presets as one JSON list (name, summary, decision, "
              "codecs as Zarr v3 JSON, menu, budget, readers).")
def presets_command(as_json) -> None:
    """List the presets --preset takes: what each is for, who reads it, what it writes."""
    from zopt.planning.presets import presets, presets_json

    if as_json:
        click.echo(presets_json())
        return
    table = Table(title="zopt presets: recompress --preset NAME, zopt.xarray.encoding(ds, preset=NAME)")
    for col in ("name", "for", "readers", "writes"):
        table.add_column(col)
    for p in presets():
        table.add_row(p.name, p.purpose, p.short_readers, p.writes())
    table.caption = "zopt presets --json: each preset's codec chains as Zarr v3 JSON"
    console.print(fitted(table, wrap=("for", "readers", "writes")))


def _recompress_in_place(ctx: click.Context) -> None:
    """``recompress --in-place``: the command's parameters (``ctx.params``) that apply in place, the others refused."""
    from zopt import recompress_in_place
    from zopt.job.options import refused_in_place

    src, dst, grace = ctx.params["src"], ctx.params["dst"], ctx.params["grace"]
    if dst is not None:
        raise click.UsageError("--in-place rewrites SRC itself: give no DST.")
    given = {name: value for name, value in ctx.params.items()
             if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT}
    # the job's options that do not apply in place (RecompressJob's field metadata), and --vs-default, the CLI's own
    refused = refused_in_place(given) + (["vs_default"] if given.get("vs_default") else [])
    if refused:
        flags = {p.name: "/".join(p.opts + p.secondary_opts) for p in ctx.command.params}
        raise click.UsageError(f"--in-place keeps the arrays' metadata, so {', '.join(flags[n] for n in refused)} "
                               "cannot be used with it.")
    with shard_rewrite_errors(src), interrupt_note(RESUME_NOTE, until_exit=True):
        report = recompress_in_place(src, ctx.params["variables"] or None, decision=ctx.params["decision"],
                                     plan=ctx.params["plan"], scheduler=ctx.params["scheduler"],
                                     progress=not ctx.params["no_progress"],
                                     **({} if grace is None else {"grace": grace}))
    console.print(summary_table(report))
    for note in report.notes:
        console.print(f"note: {note}")
    _print_readers(report)
