"""``zopt verify SRC DST`` and ``zopt lossy-plan SRC -o PLAN``: the lossy commands (registered on ``zopt.cli.main``)."""

from __future__ import annotations

import click
from rich.table import Table

__all__ = ["lossy_plan", "verify"]


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def verify_table(report) -> Table:
    table = Table(title=f"zopt verify {report.src} → {report.dst}")
    for col in ("array", "kind", "bound", "elements", "beyond bound", "NaN/fill moved", "max abs error",
                "max rel error", "keepbits", "information kept", "ok"):
        table.add_column(col, justify="left" if col in ("array", "kind", "bound", "keepbits") else "right")
    for c in report.checks:
        table.add_row(c.name, c.kind, c.bound or "bit for bit", str(c.elements), str(c.violations),
                      str(c.special_mismatches), _fmt(c.max_abs_error), _fmt(c.max_rel_error), c.keepbits or "—",
                      "—" if c.information_kept is None else f"{c.information_kept:.4f}",
                      "yes" if c.ok else f"NO {c.problem}".strip())
    return table


@click.command("verify")
@click.argument("src", type=click.Path(exists=True))
@click.argument("dst", type=click.Path(exists=True, file_okay=False))
@click.option("--variable", "variables", multiple=True, help="Only compare these arrays (repeatable).")
@click.option("--scheduler", default=None, help="Dask scheduler, as for recompress.")
def verify(src, dst, variables, scheduler) -> None:
    """Compare DST (written by zopt recompress) with SRC: bit for bit, or within each array's
    recorded lossy bound (the zopt_lossy attribute). Exits 1 if any check fails."""
    from zopt.lossy.verify import verify as run
    from zopt.tables import console

    try:
        report = run(src, dst, list(variables) or None, scheduler)
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    console.print(verify_table(report))
    if not report.ok:
        bad = [c.name for c in report.checks if not c.ok]
        raise click.ClickException(f"verify: {len(bad)} array(s) break their bound or differ: {', '.join(bad)}")


@click.command("lossy-plan")
@click.argument("src", type=click.Path(exists=True))
@click.option("-o", "--output", type=click.Path(), required=True, help="Where to save the plan (a Zarr group).")
@click.option("--info", "levels", multiple=True, required=True, help="VAR=LEVEL: keep LEVEL (0 < L <= 1) of the real information, per chunk.")
@click.option("--chunks", default=None, help="Inner chunk shape, as for recompress (the plan's grid).")
@click.option("--shards", default=None, help="Shard shape, as for recompress.")
@click.option("--scheduler", default=None, help="Dask scheduler, as for recompress.")
def lossy_plan(src, output, levels, chunks, shards, scheduler) -> None:
    """Save per-chunk keepbits (bitwise real information) of SRC's variables as a plan:
    show it with zopt plan show PLAN --png F, apply it with recompress --lossy VAR=plan:PLAN."""
    from zopt.lossy.prepare import keepbits_plan
    from zopt.tables import console, plan_table

    parsed = {}
    for item in levels:
        var, sep, value = item.partition("=")
        try:
            parsed[var] = float(value)
        except ValueError:
            raise click.ClickException(f"--info: {item!r} is not VAR=LEVEL") from None
        if not sep or not var:
            raise click.ClickException(f"--info: {item!r} is not VAR=LEVEL")
    made = keepbits_plan(src, parsed, chunks=chunks, shards=shards, scheduler=scheduler)  # errors: one line (zopt.cli)
    made.save(output)
    console.print(plan_table(made, output))
    for name, ap in made.arrays.items():
        console.print(f"{name}: keepbits {int(ap.keepbits.min())}..{int(ap.keepbits.max())} over {ap.keepbits.size} chunks")
