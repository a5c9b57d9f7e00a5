"""Every ```python and ```bash block of README.md and docs/*.md runs as written (issue 15, "docs").

The blocks of one file run in order in one fresh directory, so a block may use the files an
earlier block wrote; the python blocks of a file share one namespace, as in one session. A bash
block runs with ``bash -e`` and the ``zopt`` of the interpreter running the tests.

Two exceptions, both visible in the Markdown source:

- ``<!-- docs-test: skip REASON -->`` on the line before a fence skips that block (the test
  below lists every skip, so new ones show up in review);
- the README's first command begins with creating and activating a virtualenv and installing
  zopt: the test runs the command after that setup, in the environment it already has.
``text`` and ``json`` blocks (synopses and formats) are not run.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: pages whose blocks tests/project/test_docs_blocks.py runs already
COVERED_ELSEWHERE = {"presets.md", "xarray.md"}
FILES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if p.name not in COVERED_ELSEWHERE)]
FENCE = re.compile(r"(?:<!-- docs-test: skip (?P<skip>[^>]*?) -->\n)?```(?P<lang>\w+)\n(?P<code>.*?)```", re.S)
SETUP = re.compile(r'^python3 -m venv \.venv && \. \.venv/bin/activate && pip install "[^"]+" && ')
#: the blocks skipped on purpose: (file, first line of the block) -> reason
EXPECTED_SKIPS = {
    ("README.md", 'python3 -m venv .venv && . .venv/bin/activate && pip install ".[test]" && python -m mypy && python -m pytest -q tests'):
        "runs this test suite",
    ("README.md", 'pip install -e ".[test,interop]"   # interop: zarrs, tensorstore, cast-value-rs for cross-checks'):
        "developer setup and benchmarks of several minutes",
    ("getting-started.md", 'python3 -m venv .venv && . .venv/bin/activate && pip install ".[data]"'):
        "installs into a new virtual environment",
    ("choose-a-preset.md", "python benchmarks/presets.py"): "a benchmark of about a minute",
}


@pytest.fixture
def restored_zarr_config():
    """zarr's configuration as it was before the test (a block may call ``zarr.config.set``).
    zopt is imported first: its settings (zopt's pipeline) are made once per process, at import,
    so a copy taken before would restore zarr's pipeline for every later test."""
    import zarr

    import zopt  # noqa: F401

    saved = copy.deepcopy(zarr.config.config)
    yield
    zarr.config.config.clear()
    zarr.config.config.update(saved)


def _blocks(path: Path) -> list[tuple[str, str, str | None]]:
    return [(m["lang"], m["code"], m["skip"]) for m in FENCE.finditer(path.read_text())]


def _run_bash(code: str, cwd: Path) -> None:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    out = subprocess.run(["bash", "-e", "-c", code], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"{code}\n--- stdout\n{out.stdout[-3000:]}\n--- stderr\n{out.stderr[-3000:]}"


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_code_block_runs(path, tmp_path, monkeypatch, restored_zarr_config):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_{path.stem}"}
    ran = 0
    for i, (lang, code, skip) in enumerate(_blocks(path)):
        if skip is not None or lang not in ("python", "bash"):
            continue
        if lang == "python":
            exec(compile(code, f"{path.name}[block {i}]", "exec"), namespace)  # noqa: S102 - the docs' own code
        else:
            if path.name == "README.md" and i == 0:
                assert SETUP.match(code), "the README's first command starts with the documented setup"
                code = SETUP.sub("", code)
            _run_bash(code, tmp_path)
        ran += 1
    assert ran or not any(lang in ("python", "bash") for lang, _, _ in _blocks(path))


def test_skipped_blocks_are_few_and_say_why():
    found = {}
    for path in FILES:
        for _, code, skip in _blocks(path):
            if skip is not None:
                found[(path.name, code.splitlines()[0])] = skip
    assert found == EXPECTED_SKIPS
