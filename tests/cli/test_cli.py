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
