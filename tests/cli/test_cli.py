"""The CLI as a user meets it: progress bars that follow the work."""

from __future__ import annotations

import re

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from zopt.cli.commands import main


@pytest.fixture
def store(tmp_path):
    a = np.round(np.sin(np.linspace(0, 20, 96 * 120)).reshape(96, 120) * 100, 1).astype("f4")
    zarr.open_group(tmp_path / "src.zarr", mode="w").create_array(
        "v", shape=a.shape, chunks=(48, 60), dtype="f4", fill_value=0, dimension_names=("y", "x"))[:] = a
    return tmp_path


def _bar(output: str) -> tuple[int, int]:
    """(done, total) of the last progress bar line printed."""
    done, total = re.findall(r"shards\D*?(\d+)/(\d+)", output)[-1]
    return int(done), int(total)


@pytest.mark.parametrize("command", ["recompress", "fixed-slot", "in-place", "compact"])
def test_the_progress_bar_reaches_its_total(store, command):
    """Every command's bar counts the tasks that are progress (a shard each) and ends full; the
    --in-place bar used to stay at 0 (its tasks have another key prefix)."""
    runner = CliRunner()
    shape = ["--chunks", "y=16,x=20", "--shards", "y=48,x=60"]
    src, out = store / "src.zarr", store / "out.zarr"
    if command == "recompress":
        res = runner.invoke(main, ["recompress", str(src), str(out), *shape])
    else:
        first = ["recompress", str(src), str(out), *shape, "--layout", "fixed-slot", "--no-progress"]
        if command == "in-place":
            first += ["--decision", "never"]
        assert runner.invoke(main, first).exit_code == 0
        args = {"fixed-slot": ["recompress", str(src), str(store / "slots.zarr"), *shape, "--layout", "fixed-slot",
                               "--slot-parts", "2"],
                "in-place": ["recompress", str(out), "--in-place"],
                "compact": ["compact", str(out)]}[command]
        res = runner.invoke(main, args)
    assert res.exit_code == 0, res.output
    assert _bar(res.output) == (4, 4)  # 2x2 shards


def _commands(group, prefix=()):
    """Every command under ``group``: (its words, the command), subcommands of groups included."""
    import click

    for name, command in group.commands.items():
        yield (*prefix, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))


def test_every_help_summary_is_a_whole_sentence_in_80_columns():
    """``zopt --help`` cut summaries mid-sentence ("info  Show per array of a local Zarr store or an
    Icechunk..."): every command's summary in its group's listing is a sentence, ending with a
    full stop, on one line of at most 80 columns."""
    import click

    runner = CliRunner()
    groups = [((), main), *((words, c) for words, c in _commands(main) if isinstance(c, click.Group))]
    for words, group in groups:
        res = runner.invoke(main, [*words, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
        assert res.exit_code == 0, res.output
        assert max(map(len, res.output.splitlines())) <= 80, res.output
        listing = res.output.split("Commands:")[1].splitlines()[1:]
        assert "..." not in "".join(listing), res.output
        for name, command in group.commands.items():
            (line,) = [line for line in listing if line.split()[:1] == [name]]
            summary = line.split(None, 1)[1]
            assert summary.endswith(".") and summary in " ".join((command.short_help or command.help).split()), line
