"""``zopt analyze`` and ``zopt plan`` (``plan STORE …`` makes a plan, ``plan show PLAN`` shows one),
with the analysis options they share. Registered on the ``zopt`` group in ``zopt.cli.commands``."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from zopt.cli.shared import Location
from zopt.cli.tables import console, fitted, wide_option
from zopt.cli.tables import mask_text as _mask_text
from zopt.cli.tables import plan_table as _plan_table
from zopt.compat.scheduling import scheduler_option
from zopt.job.progress import RichProgress as _RichProgress

__all__ = ["analyze", "plan"]


def _analysis_options(command):
    """The options of an analysis run, shared by ``analyze`` and ``plan create``."""
    options = [
        click.option("--sample", type=float, default=1 / 16, show_default=True, help="Fraction of each chunk trial-encoded, at least: 12 windows of at least 4 KiB, "
                     "one in each twelfth of the chunk (docs/plans.md)."),
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
        wide_option,
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.command("analyze", short_help="Measure every chunk of a store: entropy, zeros, trial sizes.")
@click.argument("store", type=Location())
@click.argument("arrays", nargs=-1)
@click.option("-o", "--output", type=click.Path(), default=None, help="Save the analysis as Zarr here.")
@click.option("--overwrite", is_flag=True, help="Replace the analysis at OUTPUT if it exists.")
@click.option("--codecs", default=None, help="Wrapped codecs to try, as a JSON list. Default: the array's conditional codec's, else [shuffle, zstd(3)].")
@click.option("--chunks", default=None, help="Chunk shape of the analysed grid (e.g. y=256,x=256). Default: the grid the conditional codec sees.")
@_analysis_options
def analyze(store, arrays, output, overwrite, **analysis) -> None:
    """Measure every chunk of STORE's arrays (a Zarr store, or a netCDF file): entropy, zeros, runs,
    NaNs, trial encodings."""
    if output:
        _check_output(store, output, overwrite)
    from zopt.job.analyze import analyze as run

    analyses = run(store, arrays or None, **_analysis_kwargs(analysis))
    if output:
        from zopt.planning.analysis import save_analysis

        save_analysis(analyses, output)
    console.print(_analysis_table(analyses, store))


def _check_output(store, output, overwrite) -> None:
    """Refuse an output path that overlaps STORE, exists without --overwrite, or is not a Zarr store."""
    from zopt.io.paths import check_no_overlap, check_replaceable

    check_no_overlap(store, output)
    check_replaceable(output, overwrite, "output")


def _analysis_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """``zopt.analyze``'s keyword arguments from a command's analysis options (``_analysis_options``,
    ``--codecs``, ``--chunks``): ``--full`` is ``sample=None``, ``--no-progress`` no progress bar,
    the menu's options checked by ``_menu_options``."""
    out = dict(options)
    full, no_progress = out.pop("full"), out.pop("no_progress")
    menu = _menu_options(out["codecs"], out.pop("menu"), out.pop("budget"), out.pop("readers"))
    if full:
        out["sample"] = None
    return {**out, "progress": None if no_progress else _RichProgress, "note": console.print, **menu}


def _menu_options(codecs, menu, budget, readers) -> dict:
    """``analyze``'s menu arguments; --budget/--readers need --menu, --menu refuses --codecs."""
    if menu is None and (budget is not None or readers is not None):
        raise click.UsageError("--budget and --readers tune the --menu choice: give --menu too.")
    if menu is not None and codecs is not None:
        raise click.UsageError("--menu chooses the chain whose codecs are analysed: give --menu or --codecs, not both.")
    return {} if menu is None else {"menu": menu, "budget": budget, "readers": readers}


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
    notes = {"entropy": "entropy: bits/byte of stored chunks", "best masks": "best masks: smallest trial per chunk",
             "est. ratio": "est. ratio: raw / estimated stored bytes"}
    return fitted(table, ("early out", "seconds", "zeros", "fill", "chunks", "NaN", "entropy"), notes=notes)


#: ``ctx.meta`` key: the user typed ``zopt plan STORE …``, not ``zopt plan create STORE …``
_IMPLIED = "zopt.plan.create-implied"


class _PlanGroup(click.Group):
    """``zopt plan STORE …`` makes a plan; ``zopt plan show PLAN`` shows one. ``zopt plan --help``
    shows how to make one (its options), then the subcommands."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["create", *args]
            ctx.meta[_IMPLIED] = True
        return super().parse_args(ctx, args)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        create = self.commands["create"]
        with _PlanContext(create, info_name="create", parent=ctx) as sub:
            sub.meta[_IMPLIED] = True
            create.format_help(sub, formatter)
        self.format_commands(ctx, formatter)


class _PlanContext(click.Context):
    """The context of ``plan create``: where the user typed ``zopt plan STORE …``, its usage line
    and its "Try … --help" hint say ``zopt plan``, not a subcommand the user never typed."""

    @property
    def command_path(self) -> str:
        if self.meta.get(_IMPLIED) and self.parent is not None:
            return self.parent.command_path
        return super().command_path


@click.group("plan", cls=_PlanGroup, short_help="Make a per-chunk plan of a store, or show one.")
def plan() -> None:
    """Make a plan (zopt plan STORE --policy P -o PLAN) or show one (zopt plan show PLAN)."""


@plan.command("create", cls=type("_PlanCreate", (click.Command,), {"context_class": _PlanContext}),
              short_help="Analyse a store and save a per-chunk mask plan.")
@click.argument("store", type=Location())
@click.argument("arrays", nargs=-1)
@click.option("-o", "--output", type=click.Path(), required=True, help="Where to save the plan (a Zarr group).")
@click.option("--overwrite", is_flag=True, help="Replace the plan at OUTPUT if it exists.")
@click.option("--policy", default="compress_if_smaller", show_default=True, help="compress_if_smaller, min_gain, smallest or fastest_within.")
@click.option("--param", "params", multiple=True, help="Policy parameter NAME=VALUE, e.g. gain=0.125 or within=0.05.")
@click.option("--analysis", "analysis_path", type=click.Path(exists=True, file_okay=False), default=None, help="Use a saved analysis instead of analysing now.")
@click.option("--codecs", default=None, help="Wrapped codecs to try (JSON list), as for analyze.")
@click.option("--chunks", default=None, help="Chunk grid of the plan (e.g. y=256,x=256): the inner chunks of the array it will be applied to.")
@_analysis_options
def plan_create(store, arrays, output, overwrite, policy, params, analysis_path, **analysis) -> None:
    """Analyse STORE (a Zarr store or a netCDF file; or load --analysis) and save a per-chunk mask plan.
    zopt plan show PLAN summarises a saved plan (--png draws it)."""
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
    options = _analysis_kwargs(analysis)
    options["decode_times"] = options["decode_times"] or policy == "fastest_within"
    made = make(store, arrays or None, policy=policy, params=kwargs, output=output, overwrite=overwrite,
                analysis=analysis_path, **options)
    console.print(_plan_table(made, output))


@plan.command("show")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("--png", type=click.Path(dir_okay=False), default=None, help="Also draw the masks over the chunk grid into this PNG.")
@wide_option
def plan_show(path, png) -> None:
    """Summarise a saved plan; --png draws its masks over the chunk grid."""
    from zopt.planning.plan import Plan

    p = Plan.load(path)
    console.print(_plan_table(p, path))
    if png:
        from zopt.cli.plot import plot_plan

        plot_plan(p, png)
        console.print(f"wrote {png}")
