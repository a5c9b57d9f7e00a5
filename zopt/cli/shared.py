"""What several commands share: the SRC/STORE argument type, library messages in CLI words, and
the one-line error of a failed shard rewrite (``recompress --in-place``, ``compact``)."""

from __future__ import annotations

import contextlib
import os
import re

import click

from zopt.errors import OptionError, disk_full_message, is_disk_full

__all__ = ["Location", "cli_words", "flag_of", "option_usage_error", "shard_rewrite_errors"]


class Location(click.ParamType):
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


def flag_of(ctx: click.Context, option: str) -> str:
    """The flag of the command's parameter named ``option`` (``"preset"`` → ``"--preset"``), else ``option``."""
    for param in ctx.command.params:
        if param.name == option and param.opts:
            return param.opts[0]
    return option


def option_usage_error(ctx: click.Context, exc: OptionError) -> click.BadParameter:
    """``exc`` as click's usage error (exit status 2) on the flag of the option it names
    (``OptionError.option``), the options it names spelt as flags."""
    return click.BadParameter(exc.worded(lambda o: flag_of(ctx, o)), ctx=ctx, param_hint=flag_of(ctx, exc.option))


def cli_words(message: str) -> str:
    """A library message in CLI words: ``--overwrite``, not the Python argument."""
    return re.sub(r"use --overwrite \(overwrite=True\)|pass overwrite=True( \(--overwrite\))?", "use --overwrite", message)


def _largest_file(root: str) -> int:
    """Size of the largest file under ``root``: what replacing one shard needs free."""
    from pathlib import Path

    return max((p.stat().st_size for p in Path(root).rglob("*") if p.is_file()), default=0)


@contextlib.contextmanager
def shard_rewrite_errors(store: str):
    """One CLI line for a failed shard rewrite of ``store`` (``--in-place``, ``compact``): a full
    disk says the space one shard needs; any other error is folded to one line."""
    try:
        yield
    except OSError as exc:
        if is_disk_full(exc):
            raise click.ClickException(disk_full_message(store, _largest_file(store), "every shard is whole (old or new), "
                                                         "temporary files were removed")) from exc
        raise  # one line from zopt.cli.commands' group, like every other error
