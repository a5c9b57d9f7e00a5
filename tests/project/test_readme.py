"""The README's first command (without its venv/pip prefix) prints a summary in which zopt's
output is smaller than the source and than zarr's default codecs on the same chunks; the
README's python blocks then run against what it wrote."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("iris_sample_data")
README = Path(__file__).resolve().parents[2] / "README.md"
UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def _bytes(cell: str) -> float:
    number, unit = cell.replace("(src)", "").split()
    return float(number) * UNITS[unit]


def test_first_command_beats_the_source_and_zarr_default(tmp_path, monkeypatch):
    text = README.read_text()
    first = re.search(r"```bash\n(.*?)\n```", text, re.S).group(1)
    command = first[first.index("zopt recompress"):]  # what follows `pip install ".[data]" && `
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join(p for p in (str(README.parent), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", command + " --no-progress"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    header = next(line for line in proc.stdout.splitlines() if "vs zarr default" in line)
    total = next(line for line in proc.stdout.splitlines() if "total" in line and "(src)" in line)
    names = [c.strip() for c in re.split(r"[┃│]", header)]
    cells = dict(zip(names, (c.strip() for c in re.split(r"[┃│]", total)), strict=True))
    after, source, default = _bytes(cells["after"]), _bytes(cells["before"]), _bytes(cells["zarr default"])
    assert after < 0.6 * source and after < 0.8 * default, cells
    assert int(cells["vs zarr default"].rstrip("%")) < 80
    assert "1.7 MiB" in cells["before"] and shlex.split(command)[3] == "a1b.zarr"
    # the summary's last line is the reader line the README quotes (issue 36)
    quoted = re.search(r"```text\n(readers: .*?)\n```", text).group(1)
    assert proc.stdout.strip().splitlines()[-1] == quoted
    monkeypatch.chdir(tmp_path)
    for i, code in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
        exec(compile(code, f"README.md python block {i}", "exec"), {"__name__": f"readme_{i}"})  # noqa: S102
    assert (tmp_path / "out.zarr" / "air_temperature" / "zarr.json").exists()
