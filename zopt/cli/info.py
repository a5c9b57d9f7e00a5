"""``zopt info`` and ``zopt compact``: a written store's shard layout, slots, masks and sizes, and
its fixed-slot shards rewritten packed. Registered on the ``zopt`` group in ``zopt.cli.commands``."""

from __future__ import annotations

import os

import click
from rich.table import Table

from zopt.cli.shared import shard_rewrite_errors
from zopt.cli.tables import console, fitted, wide_option, wrap_words
from zopt.cli.tables import human as _human
from zopt.cli.tables import mask_text as _mask_text
from zopt.compat.scheduling import scheduler_option
from zopt.job.progress import RichProgress as _RichProgress

__all__ = ["compact", "info"]


@click.command("info", short_help="Show how a store's arrays are sharded, stored and compressed.")
@click.argument("store")
@click.argument("arrays", nargs=-1)
@click.option("--png", type=click.Path(dir_okay=False), default=None,
              help="Also draw each array's chunk grid into this PNG: the mask and raw/stored ratio of every inner chunk.")
@click.option("--check", is_flag=True, help="Also decode every stored chunk (checksums, codecs); a corrupt one is named.")
@wide_option
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
    notes = {"chunks": "chunks: stored/total inner chunks", "slot fill": "slot fill: stored bytes / slot bytes of "
             "fixed-slot chunks", "ratio": "ratio: logical / apparent"}
    console.print(fitted(table, ("slot fill", "slot", "allocated", "shards", "dtype", "apparent", "layout", "shape"),
                         notes=notes))
    from zopt.compat.engine import engine_line

    console.print(wrap_words(engine_line(), console.width), markup=False, soft_wrap=True)  # what this zopt runs on
    console.print(wrap_words(_readers(store), console.width), markup=False, soft_wrap=True)  # as recompress's ends
    if check:  # what --check decoded, and that it held (a failure raised above, naming the chunk)
        from zopt.readback.info import check_summary

        console.print(check_summary(infos), markup=False, soft_wrap=True)  # one line, whatever the width
    if png:
        console.print(f"wrote {png}")


def _readers(store: str) -> str:
    """The reader line of ``store`` (``zopt.planning.readers.reader_line``; an Icechunk repository's
    branch or snapshot read only)."""
    from zopt.compat.icechunk_compat import is_icechunk, readonly_store
    from zopt.planning.readers import reader_line, store_arrays

    if is_icechunk(store):
        store, _ = readonly_store(store, "store")
    return reader_line(store_arrays(store))


@click.command("compact", short_help="Rewrite a store's fixed-slot shards packed, each atomically.")
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.argument("arrays", nargs=-1)
@click.option("--scheduler", default=None, callback=scheduler_option, help="Dask scheduler, as for recompress.")
@click.option("--no-progress", is_flag=True, help="Do not show the progress bar.")
@click.option("--grace", type=float, default=2.0, show_default=True,
              help="Seconds between replacing the shards (sizes kept) and dropping their holes; see docs/reliability.md.")
@wide_option
def compact(store, arrays, scheduler, no_progress, grace) -> None:
    """Rewrite the fixed-slot shards of STORE packed, atomically, one task per shard."""
    from zopt.job.compact import compact as run

    with shard_rewrite_errors(store):
        report = run(store, arrays or None, scheduler=scheduler, progress=None if no_progress else _RichProgress, grace=grace)
    table = Table(title=f"zopt compact {store}  ({report.seconds:.2f} s, {report.mb_per_s:.1f} MB/s)")
    for col in ("array", "shards", "compacted", "apparent before", "apparent after", "allocated before", "allocated after"):
        table.add_column(col, justify="left" if col == "array" else "right")
    for a in report.arrays:
        table.add_row(a.name, str(a.shards), str(a.compacted), _human(a.apparent_before), _human(a.apparent_after),
                      _human(a.allocated_before), _human(a.allocated_after))
    console.print(fitted(table, ("allocated before", "allocated after")))
    for note in report.notes:
        console.print(f"note: {note}")
