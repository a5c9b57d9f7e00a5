"""``zopt`` command line: batch recompression of Zarr stores and netCDF files with Dask.

This module is the ``zopt`` group (``main``, the console script) and where every command joins
it; each family of commands lives beside it: ``recompress`` (``recompress``, ``presets``),
``analyze`` (``analyze``, ``plan``), ``info`` (``info``, ``compact``), ``verify`` and ``lossy``
(``lossy-plan``); what several of them share is ``shared``, what they print ``tables``. The
group turns every command's errors into one line (``_Main``).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from zopt import __version__
from zopt.cli.analyze import analyze, plan
from zopt.cli.info import compact, info
from zopt.cli.lossy import lossy_plan
from zopt.cli.recompress import presets_command, recompress
from zopt.cli.shared import cli_words as _cli_words
from zopt.cli.tables import set_width
from zopt.cli.verify import verify
from zopt.compat.interrupts import announced, exit_quietly, interrupt_note
from zopt.compat.interrupts import settle_zarr_tasks as _settle_zarr_tasks
from zopt.errors import OptionError, ZoptError

__all__ = ["AGAIN", "INTERRUPTED", "USER_ERRORS", "main"]


def _one_line(exc: BaseException) -> str:
    """An error as one line: its message with line breaks folded."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    notes = " ".join(" ".join(n.split()) for n in getattr(exc, "__notes__", ()))
    return f"{text}; {notes}" if notes else text


def _flags(command: click.Command) -> dict[str, str]:
    """Parameter name → its flag (``max_memory`` → ``--max-memory``) of ``command`` and its subcommands."""
    flags = {p.name: p.opts[0] for p in command.params if p.name and p.opts and p.opts[0].startswith("-")}
    for sub in getattr(command, "commands", {}).values():
        flags = {**_flags(sub), **flags}
    return flags


def _flag_line(group: click.Group, ctx: click.Context, exc: OptionError) -> str:
    """An ``OptionError`` of the command the user ran as one line naming the option by its flag
    (``--max-memory: …``; the library's name where the command has no such flag)."""
    command = group.get_command(ctx, ctx.invoked_subcommand or "")
    flags = _flags(command) if command is not None else {}
    flag = flags.get(exc.option, exc.option)
    label = exc.label or exc.option
    label = flag + label[len(exc.option):] if label.startswith(exc.option) else f"{flag} ({label})"
    text = f"{label}: {' '.join(exc.worded(lambda o: flags.get(o, o)).split())}"
    notes = " ".join(" ".join(n.split()) for n in getattr(exc, "__notes__", ()))
    return f"{text}; {notes}" if notes else text


#: what a command's failure may be: zopt's own errors, bad input (ValueError) and I/O (OSError)
USER_ERRORS = (ZoptError, ValueError, OSError)
#: the exit status of an interrupted command (128 + SIGINT, as a shell reports it)
INTERRUPTED = 130
#: what an interrupted command says when its job added no note on what it kept
AGAIN = "run the same command again to resume"


class _Main(click.Group):
    """Every command's errors in one place: ``USER_ERRORS``, and an infrastructure failure that
    keeps a job's partial store (a lost worker, ``zopt.store.journal.keeps_partial``), become one line
    (``click.ClickException``), no traceback. A Ctrl-C anywhere (imports, planning, after the last
    shard) ends with one line saying what was kept and how to resume, and exit status 130."""

    def invoke(self, ctx: click.Context) -> Any:
        exit_quietly()
        import warnings

        # zarr 3.1 warns on every numcodecs.* codec it parses (pcodec, a menu candidate): zopt
        # chose it knowing its readers (docs/interop.md); a warning per command is noise
        warnings.filterwarnings("ignore", message="Numcodecs codecs are not in the Zarr version 3")
        set_width()  # this command's terminal, COLUMNS or default width (a command's --wide widens it)
        try:
            with interrupt_note(None, until_exit=True):  # a second Ctrl-C leaves at once (zopt.compat.interrupts)
                return super().invoke(ctx)
        except click.exceptions.Exit:
            raise
        except KeyboardInterrupt as exc:  # not click's "Aborted!": one line saying what was kept and how to resume
            _settle_zarr_tasks()
            if not announced():  # else the first Ctrl-C's "stopping: …; <how to resume>" line said it
                notes = " ".join(" ".join(n.split()) for n in getattr(exc, "__notes__", ()))
                click.echo(f"interrupted; {notes or AGAIN}", err=True)
            raise click.exceptions.Exit(INTERRUPTED) from None
        except Exception as exc:
            _settle_zarr_tasks()
            from zopt.store.journal import keeps_partial

            if isinstance(exc, OptionError):  # "--max-memory: …", not the library's "max_memory: …"
                raise click.ClickException(_cli_words(_flag_line(self, ctx, exc))) from exc
            if isinstance(exc, USER_ERRORS) or keeps_partial(exc):
                raise click.ClickException(_cli_words(_one_line(exc))) from exc
            raise
        except BaseException:
            _settle_zarr_tasks()
            raise


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--version``: zopt's version and its engine (``zopt.compat.engine``: compiled loops on or
    off and why, zstd and blosc versions)."""
    if not value or ctx.resilient_parsing:
        return
    from zopt.compat.engine import engine_line

    click.echo(f"zopt, version {__version__}")
    click.echo(engine_line())
    ctx.exit()


@click.group(cls=_Main)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and the engine (compiled loops, zstd, blosc) and exit.")
def main() -> None:
    """zopt: smaller Zarr v3 stores, chunk by chunk, in parallel with Dask."""


for _command in (recompress, presets_command, info, compact, analyze, plan, verify, lossy_plan):
    main.add_command(_command)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
