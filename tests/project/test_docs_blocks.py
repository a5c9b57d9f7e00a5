"""Every code block of the pages that document presets, the xarray helpers and recompress runs, in order,
in a fresh directory (python blocks in this interpreter, bash blocks with this interpreter's
``python`` and ``zopt`` first on PATH)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("iris_sample_data")
DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"^```(python|bash)\n(.*?)^```", re.S | re.M)


def blocks(page: str) -> list[tuple[str, str]]:
    return BLOCK.findall((DOCS / page).read_text())


@pytest.mark.parametrize("page", ["presets.md", "xarray.md", "recompress.md"])
def test_every_code_block_runs(page, tmp_path, monkeypatch):
    found = blocks(page)
    assert found, f"{page} has no code blocks"
    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(p for p in (str(DOCS.parent), os.environ.get("PYTHONPATH")) if p)}
    for i, (lang, code) in enumerate(found):
        if lang == "python":
            exec(compile(code, f"{page}[{i}]", "exec"), {"__name__": f"docs_{i}"})  # noqa: S102 - the docs' own code
        else:
            proc = subprocess.run(["bash", "-euo", "pipefail", "-c", code], capture_output=True, text=True, env=env,
                                  timeout=300)
            assert proc.returncode == 0, f"{page} block {i}:\n{code}\n{proc.stdout}\n{proc.stderr}"
