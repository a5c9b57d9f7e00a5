"""The engine a build says it has (``zopt.compat.engine``): ``zopt --version`` and ``zopt info``
name it, and on Linux x86-64 the compiled loops must be loaded: a build or a numcodecs that lost
them fails here instead of the loop tests skipping (set ``ZOPT_NO_LOOPS`` to run without them)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
from click.testing import CliRunner

from zopt.cli import main
from zopt.compat import engine, loops


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="the compiled loops are required on Linux x86-64 only")
def test_the_compiled_loops_are_loaded_on_linux_x86_64():
    if os.environ.get("ZOPT_NO_LOOPS"):
        pytest.skip("ZOPT_NO_LOOPS is set: the loops are off on purpose")
    e = engine.engine()
    assert e.loops and e.zstd_direct, engine.engine_line(e)


def test_version_names_the_engine():
    res = CliRunner().invoke(main, ["--version"])
    assert res.exit_code == 0, res.output
    first, second = res.output.strip().splitlines()
    assert first.startswith("zopt, version ")
    assert second.startswith("engine: compiled loops ") and "zstd 1." in second and "blosc 1." in second


def test_the_engine_says_why_the_loops_are_off(monkeypatch):
    code = "from zopt.compat.engine import engine_line; print(engine_line())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "ZOPT_NO_LOOPS": "1"}).stdout.strip()
    assert out.startswith("engine: compiled loops off (ZOPT_NO_LOOPS is set; the same bytes, slower); zstd ")
    monkeypatch.delenv("ZOPT_NO_LOOPS", raising=False)
    monkeypatch.setattr(loops, "available", lambda: False)
    monkeypatch.setattr(loops, "_paths", lambda: [])
    e = engine.engine()
    assert not e.loops and e.why == "not built at install, no working C compiler or no POSIX"
    assert "compiled loops off (not built at install" in engine.engine_line(e)


def test_info_names_the_engine_before_the_readers(tmp_path):
    import numpy as np
    import zarr

    zarr.create_array(tmp_path / "s.zarr", shape=(4,), dtype="float32", fill_value=0)[:] = np.ones(4, "float32")
    res = CliRunner().invoke(main, ["info", str(tmp_path / "s.zarr")])
    assert res.exit_code == 0, res.output
    assert res.output.strip().splitlines()[-2].startswith("engine: compiled loops ")
