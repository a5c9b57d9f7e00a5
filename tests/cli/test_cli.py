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


def test_help_and_docstrings_state_the_defaults_the_code_uses(tmp_path):
    """--help said the --chunks default was "roughly square (256×256 for float32)" where a
    (64, 1024, 1024) float32 got (1, 64, 1024); help(zopt.recompress) named default_chain as the
    default codecs where the menu chose pcodec 8. The defaults here come from the code that applies
    them, and the texts must say them."""
    import inspect
    import os

    import iris_sample_data
    import zarr

    import zopt
    from zopt.planning.candidates import CANDIDATES, MENUS, parse_menu
    from zopt.planning.chunking import choose_chunks

    chunks = choose_chunks((64, 1024, 1024), 4, None, None)[0]
    tile = choose_chunks((1024, 1024), 1, None, None)[0]
    bytes_of = inspect.signature(choose_chunks).parameters
    inner, shard = bytes_of["inner_bytes"].default, bytes_of["shard_bytes"].default
    assert chunks == (1, 64, 1024) and tile[0] == tile[1]  # long rows for 4-byte types, square tiles for 1-byte
    res = CliRunner().invoke(main, ["recompress", "--help"], terminal_width=200)
    text = " ".join(res.output.split())
    assert f"~{inner // 1024} KiB that keep the last dimensions whole (a 64×1024×1024 float32 gets " \
           f"{'×'.join(map(str, chunks))}), square tiles for 1-byte and bool types" in text, text
    assert f"Default: ~{shard // 2**20} MiB" in text and "roughly square" not in text
    assert "Default: each variable's chain chosen from the codec menu" in text
    from zopt.job.work import SLOT_TASK_BYTES
    from zopt.planning.optimizer import DEFAULT_BUDGET
    from zopt.store.rewrite import GRACE_SECONDS

    assert f"(default: ~{SLOT_TASK_BYTES // 2**20} MiB of raw data each)" in text
    assert f"(default {GRACE_SECONDS:g};" in text and f"(default {DEFAULT_BUDGET:g}:" in text

    doc = " ".join(inspect.getdoc(zopt.recompress).split())
    assert f"~{inner // 1024} KiB inner chunks that keep the last dimensions whole (a ``(64, 1024, 1024)`` " \
           f"float32 gets ``{chunks}``; square tiles" in doc and f"~{shard // 2**20} MiB shards" in doc
    # the codecs default: the default menu's choice, which for the README's float32 field is pcodec 8
    assert inspect.signature(zopt.recompress).parameters["codecs"].default is None and parse_menu(None) == MENUS["default"]
    src = os.path.join(iris_sample_data.path, "A1B_north_america.nc")
    report = zopt.recompress(src, str(tmp_path / "a.zarr"), chunks="time=12", shards="time=120",
                             variables=["air_temperature"])
    written = zarr.open_array(str(tmp_path / "a.zarr"), path="air_temperature").metadata.to_dict()["codecs"]
    inner_codecs = [dict(c) for c in written[0]["configuration"]["codecs"]]
    assert inner_codecs == CANDIDATES["pcodec-8"].chain("f4") and "pcodec-8" in MENUS["default"], (inner_codecs, report.notes)
    assert "Default: each variable's chain chosen by trial encodings from the ``default`` codec menu" in doc
    assert "e.g. ``numcodecs.pcodec`` level 8" in doc and "Default: ``zopt.planning.menu.default_chain``" not in doc
