"""``zopt`` command line: batch recompression of Zarr stores and netCDF files with Dask.

``zopt recompress SRC DST`` runs on Dask's local threaded scheduler by default (no setup);
``--scheduler tcp://host:8786`` runs on a ``dask.distributed`` cluster.

Size: over ~500 lines because every command's options, help and one-line error handling live
here (click's decorators are the documentation); what they print is in ``zopt.cli.tables``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
from typing import Any

import click
from rich.table import Table

from zopt import __version__
from zopt.cli.tables import console
from zopt.cli.tables import human as _human
from zopt.cli.tables import mask_text as _mask_text
from zopt.cli.tables import plan_table as _plan_table
from zopt.compat.interrupts import exit_quietly, interrupt_note
from zopt.compat.interrupts import settle_zarr_tasks as _settle_zarr_tasks
from zopt.compat.scheduling import scheduler_option
from zopt.errors import ZoptError, disk_full_message, is_disk_full
from zopt.job.progress import RichProgress as _RichProgress


def _one_line(exc: BaseException) -> str:
    """An error as one line: its message with line breaks folded."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    notes = " ".join(" ".join(n.split()) for n in getattr(exc, "__notes__", ()))
    return f"{text}; {notes}" if notes else text


class _Location(click.ParamType):
    """A local path that must exist, or an fsspec URL (``s3://…``, ``memory://…``; checked when opened)."""

    name = "path or URL"

    def convert(self, value, param, ctx):
        from zopt.io.locations import is_url, local_path

        if is_url(value):
            return value
        path = local_path(value)
        if not os.path.exists(path) and any(c in value for c in "*?["):  # a glob of several sources: the job expands it
            return value
        if not os.path.exists(path):
            self.fail(f"Path {value!r} does not exist.", param, ctx)
        return path


def work_table(report: Any) -> Table:
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
    return table


def _cli_words(message: str) -> str:
    """A library message in CLI words: the option, not the Python argument."""
    return re.sub(r"use --overwrite \(overwrite=True\)|pass overwrite=True( \(--overwrite\))?", "use --overwrite", message)


def _tree_bytes(path: str) -> int:
    """Bytes of the file ``path``, or of every file under the directory ``path``."""
    from pathlib import Path

    p = Path(path)
    return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def _largest_file(root: str) -> int:
    """Size of the largest file under ``root``: what replacing one shard needs free."""
    from pathlib import Path

    return max((p.stat().st_size for p in Path(root).rglob("*") if p.is_file()), default=0)

@contextlib.contextmanager
def _shard_rewrite_errors(store: str):
    """One CLI line for a failed shard rewrite of ``store`` (``--in-place``, ``compact``): a full
    disk says the space one shard needs; any other error is folded to one line."""
    try:
        yield
    except OSError as exc:
        if is_disk_full(exc):
            raise click.ClickException(disk_full_message(store, _largest_file(store), "every shard is whole (old or new), "
                                                         "temporary files were removed")) from exc
        raise  # one line from _Main, like every other error


def summary_table(report: Any, baseline: dict[str, int] | None = None, baseline_seconds: float | None = None) -> Table:
    """The end-of-run table: per array chunks, logical/stored bytes, ratio, masks, MB/s; with
    ``baseline`` (``zopt.planning.baseline.zarr_default_bytes``) also what zarr's default codecs store,
    and with ``baseline_seconds`` the wall-clock time that pass took."""
    title = f"zopt recompress → {report.dst}  ({report.seconds:.2f} s, {report.mb_per_s:.1f} MB/s"
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
    table.caption = "masks: bitmask of the conditional codec's wrapped codecs (bit 0 = first codec) : inner chunks"
    if baseline is not None:
        table.caption += ("; zarr default: zarr.create_array's own codecs (zstd level 0) on the same chunks and shards, "
                          "vs zarr default: after / zarr default")
    if baseline_seconds is not None:
        table.caption += ("; zarr default's time: reading DST back and encoding it with those codecs in memory "
                          "(no disk writes), wall clock")
    return table


#: what Ctrl-C says where the interrupted job resumes (``zopt.compat.interrupts``)
RESUME_NOTE = "journal kept, run the same command to resume"

#: what a command's failure may be: zopt's own errors, bad input (ValueError) and I/O (OSError)
USER_ERRORS = (ZoptError, ValueError, OSError)


class _Main(click.Group):
    """Every command's errors in one place: ``USER_ERRORS``, and an infrastructure failure that
    keeps a job's partial store (a lost worker, ``zopt.store.journal.keeps_partial``), become one line
    (``click.ClickException``), no traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        exit_quietly()
        import warnings

        # zarr 3.1 warns on every numcodecs.* codec it parses (pcodec, a menu candidate): zopt
        # chose it knowing its readers (docs/interop.md); a warning per command is noise
        warnings.filterwarnings("ignore", message="Numcodecs codecs are not in the Zarr version 3")
        try:
            with interrupt_note(None, until_exit=True):  # a second Ctrl-C leaves at once (zopt.compat.interrupts)
                return super().invoke(ctx)
        except click.exceptions.Exit:
            raise
        except Exception as exc:
            _settle_zarr_tasks()
            from zopt.store.journal import keeps_partial

            if isinstance(exc, USER_ERRORS) or keeps_partial(exc):
                raise click.ClickException(_cli_words(_one_line(exc))) from exc
            raise
        except BaseException:
            _settle_zarr_tasks()
            raise


@click.group(cls=_Main)
@click.version_option(__version__, prog_name="zopt")
def main() -> None:
    """zopt: smaller Zarr v3 stores, chunk by chunk, in parallel with Dask."""


@main.command()
@click.argument("src", type=_Location())
@click.argument("dst", required=False)
@click.option("--codecs", "codecs", default=None, help="Target codec chain as JSON (inside sharding when sharded). Default: each variable's chain chosen from the codec menu (--menu, --budget).")
@click.option("--chunks", default=None, help="Inner chunk shape by dimension, e.g. y=32,x=32 (other dimensions whole), or positional, e.g. 1,32,32. "
              "Default: ~256 KiB, roughly square over the last dimensions (256×256 for float32); 1-D coordinates whole.")
@click.option("--shards", default=None, help="Shard shape, same forms as --chunks (e.g. y=160,x=180); rounded down to a multiple of the inner chunks. "
              "Default: ~64 MiB.")
@click.option("--decision", default="compress_if_smaller", show_default=True, type=click.Choice(["compress_if_smaller", "always", "never"]), help="How the conditional codec picks each chunk's mask (not with --plan, whose masks decide).")
@click.option("--variable", "variables", multiple=True, help="Only rewrite these variables (repeatable); GROUP/NAME for an array of a child group.")
@click.option("--scheduler", default=None, callback=scheduler_option, help="Dask scheduler: 'threads' (default), 'processes', 'synchronous', or a dask.distributed address such as tcp://127.0.0.1:8786.")
@click.option("--overwrite", is_flag=True, help="Replace DST if it exists and is a Zarr store (the old one is renamed aside and deleted once the new one is in place).")
@click.option("--layout", default="compact", show_default=True, type=click.Choice(["compact", "fixed-slot"]), help="Shard layout: packed shards (one task per shard) or fixed slots written by several tasks per shard.")
@click.option("--slot-parts", type=click.IntRange(min=1), default=None, help="Fixed-slot layout: writer tasks per shard (default: ~16 MiB of raw data each).")
@click.option("--plan", "plan", type=click.Path(exists=True, file_okay=False), default=None, help="A saved plan (zopt plan -o PLAN): its masks decide, no trial encoding.")
@click.option("--max-memory", default=None, help="Refuse the job if a task's projected peak memory exceeds this (e.g. 2GiB).")
@click.option("--in-place", is_flag=True, help="No DST: re-decide the conditional masks of SRC's arrays shard by shard, "
              "each shard replaced atomically, metadata unchanged (write fast, compress later).")
@click.option("--checksum/--no-checksum", default=None,
              help="End the inner chain of sharded arrays with crc32c, so readers detect a torn read during a later "
                   "compact or --in-place rewrite (default: on for --layout fixed-slot, off for compact).")
@click.option("--grace", type=click.FloatRange(min=0), default=None,
              help="--in-place: seconds between replacing the shards (sizes kept) and dropping their holes, so readers "
                   "holding a shard index can drain (default 2; docs/reliability.md).")
@click.option("--no-progress", is_flag=True, help="Do not show the progress bar.")
@click.option("--preset", default=None, help="A named codec chain and decision instead of --codecs (see zopt presets): "
              "default, fast, archive, lossless-8bit. An explicit --decision overrides the preset's.")
@click.option("--vs-default", is_flag=True, help="Also encode every shard with zarr's default codecs (same chunks and "
              "shards, in memory) and show the size zarr alone would store, and zopt's size against it.")
@click.option("--dry-run", is_flag=True, help="Print the plan of work (arrays, shards, tasks, bytes, projected memory "
              "per task, shards an interrupted run already finished) and exit without writing.")
@click.option("--lossy", "lossy", multiple=True, help="VAR=abs:BOUND[:TAIL] | rel:R | keepbits:K | info:L[:chunk] | plan:PATH: "
              "lossy, within a stated and verified bound (docs/lossy.md; repeatable).")
@click.option("--readers", default=None, help="Comma-separated zopt, zarr-python, tensorstore, zarrs: without --codecs, "
              "only chains they all read are chosen from the menu; with --codecs, refuse a chain one cannot read "
              "(docs/lossy.md); abs:E's tail trial tries only what they read (default: zarr-python).")
@click.option("--menu", default=None, help="Without --codecs: the candidates each variable's chain is chosen from, a menu "
              "(default, archive) or comma-separated candidate names (docs/presets.md, zopt.planning.candidates).")
@click.option("--budget", default=None, help="Without --codecs: the speed budget of the menu choice, a number > 0 "
              "(default 1: each extra default-encode-time must save 1 %% of size; larger favours size) or 'inf' (size first).")
@click.option("--concat-dim", default=None, help="SRC is several files (a quoted glob such as 'archive/*.nc'), "
              "combined along this dimension as xarray's open_mfdataset does, checked before anything is written "
              "(docs/archives.md).")
@click.option("--verify", "verify_first", is_flag=True, help="Run zopt verify on the finished output before publishing it: "
              "on any difference nothing is published and the partial output is kept.")
@click.option("--skip-broken", is_flag=True, help="Leave out source arrays whose zarr.json is broken (listed; exit "
              "status 3) instead of failing naming the file.")
@click.pass_context
def recompress(ctx, src, dst, codecs, chunks, shards, decision, variables, scheduler, overwrite, layout, slot_parts, plan,
               max_memory, in_place, checksum, grace, no_progress, preset, vs_default, dry_run, lossy, readers,
               menu, budget, concat_dim, verify_first, skip_broken) -> None:
    """Rewrite SRC (Zarr v2/v3 store, child groups included, or netCDF file) into a new Zarr v3 store DST.

    DST is a local directory, or an fsspec URL (s3://…, memory://…) written in place with
    packed shards (no positional writes there, so no fixed slots), or a branch of an Icechunk
    repository (icechunk://PATH[@BRANCH], icechunk+s3://BUCKET/PREFIX[@BRANCH]; docs/icechunk.md),
    written in one commit. With --in-place and no DST,
    SRC (a Zarr v3 store whose arrays have a conditional codec) is rewritten in place."""
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
        _recompress_in_place(src, dst, decision, variables, scheduler, plan, no_progress, grace,
                             {"--codecs": codecs, "--chunks": chunks, "--shards": shards, "--slot-parts": slot_parts,
                              "--max-memory": max_memory, "--overwrite": overwrite or None,
                              "--checksum/--no-checksum": None if checksum is None else checksum or "no",
                              "--layout": None if layout == "compact" else layout, "--preset": preset,
                              "--vs-default": vs_default or None, "--lossy": lossy or None, "--readers": readers,
                              "--skip-broken": skip_broken or None, "--menu": menu, "--budget": budget})
        return
    if preset is not None:
        from zopt.planning.presets import get_preset

        if codecs is not None:
            raise click.UsageError("--preset names a codec chain: give --preset or --codecs, not both.")
        try:
            get_preset(preset)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--preset") from exc
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
                                     done=verified, skip_broken=skip_broken, concat_dim=concat_dim)
    from zopt.job.api import run_job
    from zopt.job.options import RecompressJob

    decided = ctx.get_parameter_source("decision") is not click.core.ParameterSource.DEFAULT
    job = RecompressJob(
        src, dst, codecs=codecs, preset=preset, chunks=chunks, shards=shards, decision=decision if decided else None,
        variables=list(variables) or None, scheduler=scheduler, overwrite=overwrite,
        progress=None if no_progress else _RichProgress, layout=layout, slot_parts=slot_parts, plan=plan,
        max_memory=max_memory, dry_run=dry_run, checksum=checksum, lossy=list(lossy) or None, readers=readers,
        before_publish=check, skip_broken=skip_broken, menu=menu, budget=budget, concat_dim=concat_dim,
    )
    try:
        with interrupt_note(RESUME_NOTE if "://" not in dst else None, until_exit=True):  # a local DST keeps a journal
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
        _exit_if_skipped(ctx, report.skipped)
        return
    baseline = baseline_seconds = None
    if vs_default:
        import time

        from zopt.planning.baseline import zarr_default_bytes

        started = time.perf_counter()
        baseline = zarr_default_bytes(dst, [a.name for a in report.arrays], scheduler)
        baseline_seconds = time.perf_counter() - started
    console.print(summary_table(report, baseline, baseline_seconds))
    for note in report.notes:
        console.print(f"note: {note}")
    for done in verified:
        console.print(done.success_line(), markup=False)
    _exit_if_skipped(ctx, report.skipped)


def _exit_if_skipped(ctx: click.Context, skipped: list[str]) -> None:
    """``--skip-broken`` left arrays out: say which, exit with status 3."""
    if skipped:
        console.print(f"skipped {len(skipped)} array(s) with broken metadata: {', '.join(skipped)}", markup=False)
        ctx.exit(3)


@main.command("presets")
@click.option("--json", "as_json", is_flag=True, help="Print the presets as one JSON list (name, summary, decision, codecs).")
def presets_command(as_json) -> None:
    """List the named codec chains that --preset takes, with their codec JSON."""
    from zopt.planning.presets import presets, presets_json

    if as_json:
        click.echo(presets_json())
        return
    table = Table(title="zopt presets (recompress --preset NAME; zopt.xarray.encoding(ds, preset=NAME))")
    for col in ("name", "decision", "what for", "codecs"):
        table.add_column(col, overflow="fold")
    for p in presets():
        table.add_row(p.name, p.decision, p.summary, json.dumps(p.chain()))
    console.print(table)


@main.command()
@click.argument("store")
@click.argument("arrays", nargs=-1)
@click.option("--png", type=click.Path(dir_okay=False), default=None,
              help="Also draw each array's chunk grid into this PNG: the mask and raw/stored ratio of every inner chunk.")
@click.option("--check", is_flag=True, help="Also decode every stored chunk (checksums, codecs); a corrupt one is named.")
def info(store, arrays, png, check) -> None:
    """Show per array of a local Zarr store or an Icechunk repository (icechunk://PATH[@BRANCH]):
    shard layout, slots, masks, stored vs logical bytes."""
    from zopt.compat.icechunk_compat import is_icechunk, quiet_logs
    from zopt.readback.info import arrays_in, store_info

    if is_icechunk(store):
        quiet_logs(store)
        if png:
            raise click.UsageError("--png draws a local store's chunk files; for an Icechunk repository use info without it")
    elif not os.path.exists(store):
        raise click.BadParameter(f"Path {store!r} does not exist.", param_hint="'STORE'")
    elif not os.path.isdir(store):
        raise click.ClickException(f"{store!r} is a file, not a Zarr store: info shows how a Zarr store's arrays are "
                                   "chunked, sharded and compressed (zopt analyze and plan read netCDF files too)")
    from zopt.io.unfinished import describe_unfinished, read_unfinished

    unfinished = read_unfinished(store)
    if unfinished is not None:  # e.g. a store copied from a killed job's S3 destination
        console.print(describe_unfinished(store, unfinished), markup=False, style="bold red")
    infos = store_info(store, arrays or None, check=check)
    if png:
        from zopt.cli.plot import plot_store

        plot_store(store, arrays_in(store, arrays or None), png)
    table = Table(title=f"zopt info {store}")
    for col in ("array", "shape", "dtype", "layout", "shards", "chunks", "slot", "slot fill", "logical", "apparent", "allocated", "ratio", "masks"):
        table.add_column(col, justify="left" if col in ("array", "shape", "dtype", "layout", "masks") else "right")
    for a in infos:
        table.add_row(
            a.name, "×".join(map(str, a.shape)), a.dtype, a.layout + (f" ({a.temp_files} temp files)" if a.temp_files else ""),
            str(a.shard_files), f"{a.chunks_stored}/{a.chunks_total}", _human(a.slot_size) if a.slot_size else "—",
            f"{a.slot_fill:.0%}" if a.slot_fill is not None else "—", _human(a.logical_bytes), _human(a.apparent_bytes),
            _human(a.allocated_bytes), f"{a.logical_bytes / a.apparent_bytes:.2f}" if a.apparent_bytes else "—", _mask_text(a.masks),
        )
    table.caption = "chunks: stored/total inner chunks; slot fill: stored bytes / slot bytes of fixed-slot chunks; ratio: logical / apparent"
    console.print(table)
    if png:
        console.print(f"wrote {png}")


def _recompress_in_place(src, dst, decision, variables, scheduler, plan, no_progress, grace, refused) -> None:
    from zopt import recompress_in_place

    if dst is not None:
        raise click.UsageError("--in-place rewrites SRC itself: give no DST.")
    given = [name for name, value in refused.items() if value]
    if given:
        raise click.UsageError(f"--in-place keeps the arrays' metadata, so {', '.join(given)} cannot be used with it.")
    with _shard_rewrite_errors(src), interrupt_note(RESUME_NOTE, until_exit=True):
        report = recompress_in_place(src, variables or None, decision=decision, plan=plan, scheduler=scheduler,
                                     progress=None if no_progress else _RichProgress,
                                     **({} if grace is None else {"grace": grace}))
    console.print(summary_table(report))
    for note in report.notes:
        console.print(f"note: {note}")


@main.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.argument("arrays", nargs=-1)
@click.option("--scheduler", default=None, callback=scheduler_option, help="Dask scheduler, as for recompress.")
@click.option("--no-progress", is_flag=True, help="Do not show the progress bar.")
@click.option("--grace", type=float, default=2.0, show_default=True,
              help="Seconds between replacing the shards (sizes kept) and dropping their holes; see docs/reliability.md.")
def compact(store, arrays, scheduler, no_progress, grace) -> None:
    """Rewrite the fixed-slot shards of STORE packed, atomically, one task per shard."""
    from zopt.job.compact import compact as run

    with _shard_rewrite_errors(store):
        report = run(store, arrays or None, scheduler=scheduler, progress=None if no_progress else _RichProgress, grace=grace)
    table = Table(title=f"zopt compact {store}  ({report.seconds:.2f} s, {report.mb_per_s:.1f} MB/s)")
    for col in ("array", "shards", "compacted", "apparent before", "apparent after", "allocated before", "allocated after"):
        table.add_column(col, justify="left" if col == "array" else "right")
    for a in report.arrays:
        table.add_row(a.name, str(a.shards), str(a.compacted), _human(a.apparent_before), _human(a.apparent_after),
                      _human(a.allocated_before), _human(a.allocated_after))
    console.print(table)
    for note in report.notes:
        console.print(f"note: {note}")


def _analysis_options(command):
    """The options of an analysis run, shared by ``analyze`` and ``plan create``."""
    options = [
        click.option("--sample", type=float, default=1 / 16, show_default=True, help="Fraction of each chunk trial-encoded."),
        click.option("--full", is_flag=True, help="Trial-encode whole chunks instead of a sample."),
        click.option("--read", "read", type=click.Choice(["auto", "windows", "full"]), default="auto", show_default=True,
                     help="windows: read only the sampled windows of raw-stored (uncompressed) local sources; "
                          "full: whole chunks; auto: windows where possible."),
        click.option("--decode-times", is_flag=True,
                     help="Also time each mask's decoding (needed by the fastest_within policy; about doubles the trial cost)."),
        click.option("--scheduler", default=None, callback=scheduler_option, help="Dask scheduler, as for recompress."),
        click.option("--no-progress", is_flag=True, help="Do not show the progress bar."),
        click.option("--menu", default=None, help="Also choose each array's whole chain from this codec menu (default, "
                     "archive, or candidate names; docs/presets.md): a plan then records it and recompress --plan writes it."),
        click.option("--budget", default=None, help="The speed budget of the --menu choice: a number > 0 (default 1) or 'inf'."),
        click.option("--readers", default=None, help="With --menu: only chains these readers all read (zopt, zarr-python, "
                     "tensorstore, zarrs)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@main.command()
@click.argument("store", type=_Location())
@click.argument("arrays", nargs=-1)
@click.option("-o", "--output", type=click.Path(), default=None, help="Save the analysis as Zarr here.")
@click.option("--overwrite", is_flag=True, help="Replace the analysis at OUTPUT if it exists.")
@click.option("--codecs", default=None, help="Wrapped codecs to try, as a JSON list. Default: the array's conditional codec's, else [shuffle, zstd(3)].")
@click.option("--chunks", default=None, help="Chunk shape of the analysed grid (e.g. y=256,x=256). Default: the grid the conditional codec sees.")
@_analysis_options
def analyze(store, arrays, output, overwrite, codecs, chunks, sample, full, read, decode_times, scheduler,
            no_progress, menu, budget, readers) -> None:
    """Measure every chunk of STORE's arrays (a Zarr store, or a netCDF file): entropy, zeros, runs,
    NaNs, trial encodings."""
    if output:
        _check_output(store, output, overwrite)
    analyses = _run_analysis(store, arrays, codecs, chunks, None if full else sample, scheduler, no_progress, read,
                             decode_times, _menu_options(codecs, menu, budget, readers))
    if output:
        from zopt.planning.analysis import save_analysis

        save_analysis(analyses, output)
    console.print(_analysis_table(analyses, store))


def _check_output(store, output, overwrite) -> None:
    """Refuse an output path that overlaps STORE, exists without --overwrite, or is not a Zarr store."""
    from zopt.io.paths import check_no_overlap, check_replaceable

    check_no_overlap(store, output)
    check_replaceable(output, overwrite, "output")


def _menu_options(codecs, menu, budget, readers) -> dict:
    """``analyze``'s menu arguments; --budget/--readers need --menu, --menu refuses --codecs."""
    if menu is None and (budget is not None or readers is not None):
        raise click.UsageError("--budget and --readers tune the --menu choice: give --menu too.")
    if menu is not None and codecs is not None:
        raise click.UsageError("--menu chooses the chain whose codecs are analysed: give --menu or --codecs, not both.")
    return {} if menu is None else {"menu": menu, "budget": budget, "readers": readers}


def _run_analysis(store, arrays, codecs, chunks, sample, scheduler, no_progress, read="auto", decode_times=False,
                  menu_options=None):
    from zopt.job.analyze import analyze

    return analyze(store, arrays or None, codecs=codecs, chunks=chunks, sample=sample, read=read,
                   decode_times=decode_times, scheduler=scheduler, progress=None if no_progress else _RichProgress,
                   note=console.print, **(menu_options or {}))


def _analysis_table(analyses, store) -> Table:
    import collections

    import numpy as np

    from zopt.planning.plan import policy_masks

    table = Table(title=f"zopt analyze {store}")
    for col in ("array", "chunk grid", "chunks", "fill", "early out", "entropy", "zeros", "NaN", "best masks", "est. ratio", "seconds"):
        table.add_column(col, justify="left" if col in ("array", "chunk grid", "best masks") else "right")
    for name, ds in analyses.items():
        masks, _ = policy_masks(ds, "smallest")
        stored = ~ds["is_fill"].values
        sizes = np.take_along_axis(np.nan_to_num(ds["encoded_bytes"].values, nan=0), masks[..., None].astype(np.int64), -1)[..., 0]
        raw = ds["raw_bytes"].values
        hist = collections.Counter(int(m) for m in masks[stored].ravel())
        table.add_row(
            name, "×".join(str(ds.sizes[d]) for d in ds["raw_bytes"].dims), str(int(raw.size)), str(int((~stored).sum())),
            str(int(ds["early_out"].values.sum())), f"{float(ds['entropy'].values[stored].mean()) if stored.any() else 0:.2f}",
            f"{float(ds['zero_fraction'].values.mean()):.1%}", f"{float(ds['nan_fraction'].values.mean()):.1%}",
            _mask_text(hist), f"{raw[stored].sum() / max(sizes[stored].sum(), 1):.2f}", f"{ds.attrs['seconds']:.2f}",
        )
    table.caption = "entropy: bits/byte of stored chunks; best masks: smallest trial per chunk; est. ratio: raw / estimated stored bytes"
    return table


class _PlanGroup(click.Group):
    """``zopt plan STORE …`` makes a plan; ``zopt plan show PLAN`` shows one."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["create", *args]
        return super().parse_args(ctx, args)


@main.group(cls=_PlanGroup)
def plan() -> None:
    """Make a plan (zopt plan STORE --policy P -o PLAN) or show one (zopt plan show PLAN)."""


@plan.command("create")
@click.argument("store", type=_Location())
@click.argument("arrays", nargs=-1)
@click.option("-o", "--output", type=click.Path(), required=True, help="Where to save the plan (a Zarr group).")
@click.option("--overwrite", is_flag=True, help="Replace the plan at OUTPUT if it exists.")
@click.option("--policy", default="compress_if_smaller", show_default=True, help="compress_if_smaller, min_gain, smallest or fastest_within.")
@click.option("--param", "params", multiple=True, help="Policy parameter NAME=VALUE, e.g. gain=0.125 or within=0.05.")
@click.option("--analysis", "analysis_path", type=click.Path(exists=True, file_okay=False), default=None, help="Use a saved analysis instead of analysing now.")
@click.option("--codecs", default=None, help="Wrapped codecs to try (JSON list), as for analyze.")
@click.option("--chunks", default=None, help="Chunk grid of the plan (e.g. y=256,x=256): the inner chunks of the array it will be applied to.")
@_analysis_options
def plan_create(store, arrays, output, overwrite, policy, params, analysis_path, codecs, chunks, sample, full, read, decode_times,
                scheduler, no_progress, menu, budget, readers) -> None:
    """Analyse STORE (a Zarr store or a netCDF file; or load --analysis) and save a per-chunk mask plan."""
    from zopt.job.analyze import plan as make

    kwargs = {}
    for p in params:
        if "=" not in p:
            raise click.ClickException(f"--param: {p!r} is not NAME=VALUE")
        k, v = p.split("=", 1)
        try:
            kwargs[k] = float(v)
        except ValueError as exc:
            raise click.ClickException(f"--param {k}: {v!r} is not a number") from exc
    made = make(store, arrays or None, policy=policy, params=kwargs, output=output, overwrite=overwrite,
                analysis=analysis_path, codecs=codecs, chunks=chunks, sample=None if full else sample, read=read,
                decode_times=decode_times or policy == "fastest_within", scheduler=scheduler,
                progress=None if no_progress else _RichProgress, note=console.print,
                **_menu_options(codecs, menu, budget, readers))
    console.print(_plan_table(made, output))


@plan.command("show")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("--png", type=click.Path(dir_okay=False), default=None, help="Also draw the masks over the chunk grid into this PNG.")
def plan_show(path, png) -> None:
    """Summarise a saved plan; --png draws its masks over the chunk grid."""
    from zopt.planning.plan import Plan

    p = Plan.load(path)
    console.print(_plan_table(p, path))
    if png:
        from zopt.cli.plot import plot_plan

        plot_plan(p, png)
        console.print(f"wrote {png}")


def _register_lossy() -> None:  # zopt.lossy's commands live in their own module
    from zopt.cli.lossy import lossy_plan
    from zopt.cli.verify import verify

    main.add_command(verify)
    main.add_command(lossy_plan)


_register_lossy()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
