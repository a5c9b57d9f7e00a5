"""``zopt lossy-plan SRC -o PLAN``: the lossy command (registered on the ``zopt`` group in ``zopt.cli.commands``; ``zopt verify`` is ``zopt.cli.verify``)."""

from __future__ import annotations

import click

from zopt.cli.tables import wide_option
from zopt.compat.scheduling import scheduler_option

__all__ = ["lossy_plan"]


@click.command("lossy-plan", short_help="Save a plan of per-chunk keepbits for a lossy recompress.")
@click.argument("src", type=click.Path(exists=True))
@click.option("-o", "--output", type=click.Path(), required=True, help="Where to save the plan (a Zarr group).")
@click.option("--info", "levels", multiple=True, required=True, help="VAR=LEVEL: keep LEVEL (0 < L <= 1) of the real information, per chunk.")
@click.option("--chunks", default=None, help="Inner chunk shape, as for recompress (the plan's grid).")
@click.option("--shards", default=None, help="Shard shape, as for recompress.")
@click.option("--scheduler", default=None, callback=scheduler_option, help="Dask scheduler, as for recompress.")
@wide_option
def lossy_plan(src, output, levels, chunks, shards, scheduler) -> None:
    """Save per-chunk keepbits (bitwise real information) of SRC's variables as a plan:
    show it with zopt plan show PLAN --png F, apply it with recompress --lossy VAR=plan:PLAN."""
    from zopt.cli.tables import console, plan_table
    from zopt.lossy.prepare import keepbits_plan

    parsed = {}
    for item in levels:
        var, sep, value = item.partition("=")
        try:
            parsed[var] = float(value)
        except ValueError:
            raise click.ClickException(f"--info: {item!r} is not VAR=LEVEL") from None
        if not sep or not var:
            raise click.ClickException(f"--info: {item!r} is not VAR=LEVEL")
    made = keepbits_plan(src, parsed, chunks=chunks, shards=shards, scheduler=scheduler)  # errors: one line (zopt.cli.commands)
    made.save(output)
    console.print(plan_table(made, output))
    for name, ap in made.arrays.items():
        console.print(f"{name}: keepbits {int(ap.keepbits.min())}..{int(ap.keepbits.max())} over {ap.keepbits.size} chunks")
