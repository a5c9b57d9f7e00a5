"""The build hook (``hatch_build.py``): a wheel that says what it is.

The library has no Python ABI, so a wheel holding it is ``py3-none-<platform>``; ``CC`` is the
only compiler tried when set (``CC=/bin/false`` means no loops, never a fall-through to another
compiler); ``CFLAGS``/``LDFLAGS`` reach the compiler; warnings are errors; without POSIX the
library is skipped with a reason. One test builds real wheels with pip (about 25 s, both at once).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("hatch_build", ROOT / "hatch_build.py")
assert spec is not None and spec.loader is not None
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)
SOURCE = ROOT / "zopt" / "compat" / "_loops.c"
posix_cc = pytest.mark.skipif(os.name != "posix" or not hook._compilers({}), reason="needs POSIX and a C compiler")


def test_a_failing_cc_means_no_loops_not_another_compiler(tmp_path):
    out = tmp_path / "lib.so"
    why = hook.compile_loops(SOURCE, out, {"CC": "/bin/false"})
    assert why == "the C compiler /bin/false failed: exit status 1"
    assert not out.exists()
    why = hook.compile_loops(SOURCE, out, {"CC": str(tmp_path / "no-such-cc")})
    assert why is not None and "no-such-cc did not run" in why and not out.exists()
    assert hook.off_line(why).startswith("zopt: compiled loops off, zopt runs them in Python")


@posix_cc
def test_cflags_and_ldflags_reach_the_compiler_with_warnings_as_errors(tmp_path):
    log = tmp_path / "args"
    cc = tmp_path / "cc"
    real = " ".join(hook._compilers({})[0])
    cc.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\nexec {real} "$@"\n')
    cc.chmod(0o755)
    out = tmp_path / "lib.so"
    assert hook.compile_loops(SOURCE, out, {"CC": str(cc), "CFLAGS": "-DZOPT_TEST_FLAG=1 -O3", "LDFLAGS": "-Wl,-O1"}) is None
    args = log.read_text().split("\n")
    assert out.is_file()
    assert {"-DZOPT_TEST_FLAG=1", "-O3", "-Wl,-O1", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC"} <= set(args)
    assert args.index("-O3") > args.index("-O2")  # the user's CFLAGS come after (and override) the defaults
    warned = tmp_path / "warned.c"
    warned.write_text("int f(int unused) { int x; return 0; }\n")
    why = hook.compile_loops(warned, tmp_path / "w.so", {"CC": real})
    assert why is not None and "unused" in why and not (tmp_path / "w.so").exists()


def test_without_posix_or_with_zopt_no_loops_the_library_is_skipped(monkeypatch, tmp_path):
    assert hook.compile_loops(SOURCE, tmp_path / "x", {"ZOPT_NO_LOOPS": "1"}) == "ZOPT_NO_LOOPS is set"
    monkeypatch.setattr(hook.os, "name", "nt")
    why = hook.compile_loops(SOURCE, tmp_path / "x", {})
    assert why is not None and why.startswith("the loops need POSIX") and not (tmp_path / "x").exists()


def test_the_wheel_tag_has_no_python_abi():
    tag = hook.wheel_tag()
    assert tag.startswith("py3-none-") and tag != "py3-none-any"
    if sys.platform.startswith("linux") and os.uname().machine == "x86_64":
        assert tag == "py3-none-linux_x86_64"


@posix_cc
def test_pip_builds_a_py3_none_platform_wheel_and_a_cc_false_wheel_without_the_library(tmp_path):
    def build(out: Path, **env: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", str(ROOT), "-w", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, **env}, cwd=tmp_path)

    normal, false_cc = build(tmp_path / "a"), build(tmp_path / "b", CC="/bin/false")
    outputs = [p.communicate(timeout=300)[0] for p in (normal, false_cc)]
    assert normal.returncode == 0 and false_cc.returncode == 0, [o[-2000:] for o in outputs]
    (wheel,) = (tmp_path / "a").glob("*.whl")
    assert wheel.name == f"zopt-{wheel.name.split('-')[1]}-{hook.wheel_tag()}.whl"
    with zipfile.ZipFile(wheel) as z:
        assert "zopt/compat/_loops.so.1" in z.namelist()
    (plain,) = (tmp_path / "b").glob("*.whl")
    assert plain.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(plain) as z:
        assert "zopt/compat/_loops.so.1" not in z.namelist()
    assert "zopt: compiled loops off, zopt runs them in Python (the same bytes, slower): the C compiler /bin/false failed" \
        in outputs[1]
