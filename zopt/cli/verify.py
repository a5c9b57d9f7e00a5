"""``zopt verify SRC DST [ARRAY…]`` (registered on the ``zopt`` group in ``zopt.cli.commands``) and its table."""

from __future__ import annotations

import click
from rich.table import Table

from zopt.cli.tables import wide_option
from zopt.compat.scheduling import scheduler_option

__all__ = ["verify", "verify_table"]


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def verify_table(report) -> Table:
    """One row per array of a ``zopt.readback.verify.VerifyReport`` (lossy columns when an array is
    lossy; no bound column when every array is compared bit for bit), fitted to the console."""
    from zopt.cli.tables import console, fitted, short_path

    lossy = any(c.kind not in ("lossless", "re-expressed") for c in report.checks)
    exact = all(not c.bound for c in report.checks)
    cols = ["array", "kind", *(() if exact else ("bound",)), "elements", "chunks differ", "values differ"]
    if lossy:
        cols += ["NaN/fill moved", "max abs error", "max rel error", "keepbits", "information kept"]
    else:
        cols += ["max abs diff"]
    room = max(10, (console.width or 80) // 2 - 10)
    table = Table(title=f"zopt verify {short_path(report.src, room)} → {short_path(report.dst, room)}")
    for col in [*cols, "metadata", "ok"]:
        table.add_column(col, justify="left" if col in ("array", "kind", "bound", "keepbits", "ok") else "right")
    for c in report.checks:
        row = [c.name or "(root array)", c.kind, *(() if exact else (c.bound or "bit for bit",)), str(c.elements),
               f"{c.differing_chunks}/{c.chunks}", str(c.violations)]
        if lossy:
            row += [str(c.special_mismatches), _fmt(c.max_abs_error), _fmt(c.max_rel_error), c.keepbits or "—",
                    "—" if c.information_kept is None else f"{c.information_kept:.4f}"]
        else:
            row += [_fmt(c.max_abs_error) if c.violations else "—"]
        row += ["—" if c.problem else ("same" if not c.metadata else f"{len(c.metadata)} differ"), "yes" if c.ok else "NO"]
        table.add_row(*row)
    if exact:
        table.caption = "bound: every array bit for bit (NaN payloads included)"
    return fitted(table, ("elements", "kind", "information kept", "NaN/fill moved", "max rel error", "keepbits",
                          "metadata"))


@click.command("verify", short_help="Compare DST with SRC: metadata and every value.")
@click.argument("src")
@click.argument("dst")
@click.argument("arrays", nargs=-1)
@click.option("--variable", "variables", multiple=True, help="Only compare these arrays (repeatable; same as ARRAY…).")
@click.option("--scheduler", default=None, callback=scheduler_option, help="Dask scheduler, as for recompress.")
@click.option("--bound", "bounds", multiple=True, metavar="VAR=abs:E|VAR=keepbits:K",
              help="Check VAR against this bound instead of its zopt_lossy attribute (repeatable).")
@click.option("--skip-broken", is_flag=True, help="Leave out source arrays whose zarr.json is broken (listed; exit "
              "status 3 when all else matches), as recompress --skip-broken did.")
@click.option("--no-progress", is_flag=True, help="Do not show the progress bar.")
@click.option("--concat-dim", default=None, help="SRC is several files (a quoted glob) combined along this dimension, "
              "as recompress --concat-dim combines them.")
@click.option("--combine", type=click.Choice(["by_coords", "nested"]), default="by_coords", show_default=True,
              help="With --concat-dim: the files' order, as recompress --combine.")
@wide_option
@click.pass_context
def verify(ctx, src, dst, arrays, variables, scheduler, bounds, skip_broken, no_progress, concat_dim, combine) -> None:
    """Compare DST (e.g. written by zopt recompress) with SRC, array by array: presence, shape,
    dtype, fill value, attributes, dimension names, and values bit for bit (NaN payloads
    included) or within each array's recorded lossy bound (the zopt_lossy attribute, or the
    bound --bound states; the bound column says which was used). Also the groups' attributes and
    the consolidated metadata copy against each node's own zarr.json. Chunking and codecs are not
    compared. ARRAY: GROUP/NAME inside child groups. Rows are sorted by array; the last line is
    "N arrays equal" or "K of N differ". Exits 1 on any difference."""
    from zopt.cli.tables import console
    from zopt.compat.icechunk_compat import is_icechunk, quiet_logs
    from zopt.errors import ZoptError
    from zopt.io.unfinished import check_finished
    from zopt.job.progress import RichProgress
    from zopt.readback.verify import verify as run

    stated = {}
    for b in bounds:
        var, eq, text = b.rpartition("=")
        if not eq or not var:
            raise click.BadParameter(f"{b!r} is not VAR=abs:E or VAR=keepbits:K", param_hint="--bound")
        stated[var] = text
    quiet_logs(src, dst)
    try:
        if not is_icechunk(dst):  # an Icechunk branch never shows an unfinished job
            check_finished(dst)  # a recompress killed while writing a store destination
        report = run(src, dst, [*arrays, *variables] or None, scheduler=scheduler,
                     progress=None if no_progress else RichProgress, bounds=stated or None,
                     skip_broken=skip_broken, concat_dim=concat_dim, combine=combine)
    except (ValueError, OSError, ZoptError) as exc:
        raise click.ClickException(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
    console.print(verify_table(report))
    for c in report.failed:
        console.print(f"{c.name or '(root array)'}: {c.summary()}", markup=False, soft_wrap=True)
    for line in report.nodes:
        console.print(line, markup=False, soft_wrap=True)
    if not report.ok:  # the last line: "Error: verify: K of N arrays differ: …"
        raise click.ClickException(report.failure_line())
    if report.skipped:
        console.print(f"skipped {len(report.skipped)} source array(s) with broken metadata: "
                      + ", ".join(report.skipped), markup=False, soft_wrap=True)
    console.print(report.verdict(), markup=False, soft_wrap=True)  # the last line: "N arrays equal"
    if report.skipped:
        ctx.exit(3)
