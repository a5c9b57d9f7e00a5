"""``zopt/compat/_loops.c`` built with ``-fsanitize=address,undefined``: the tests of the compiled
loops (reading files, hostile files among them, the zstd and blosc row loops, the conditional
loop) run against that build in a subprocess, and any sanitizer report fails the test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "zopt" / "compat" / "_loops.c"
TESTS = ["tests/codecs/test_loops.py", "tests/store/test_chunk_feed.py", "tests/codecs/test_conditional_rule.py",
         "tests/codecs/test_ctypes_wrappers.py"]


def _runtime(cc: str, name: str) -> str | None:
    found = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return found if os.path.isabs(found) and os.path.exists(found) else None


@pytest.mark.skipif(sys.platform != "linux", reason="the sanitizer runtimes are preloaded the Linux way")
def test_the_loops_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    lib = tmp_path / "_loops.so.1"
    build = subprocess.run([cc, "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
                            "-fno-sanitize-recover=all", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                            "-o", str(lib), str(SOURCE)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    asan = _runtime(cc, "libasan.so")
    if asan is None:
        pytest.skip("the compiler has no shared AddressSanitizer runtime to preload")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ZOPT_LOOPS_LIBRARY": str(lib), "LD_PRELOAD": asan,
           "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1", "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
    env.pop("ZOPT_NO_LOOPS", None)
    check = subprocess.run([sys.executable, "-c", "from zopt.compat import loops; print(loops.available())"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert check.stdout.strip().endswith("True"), check.stderr  # the sanitized build is the one loaded
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *TESTS],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=500)
    out = run.stdout + run.stderr
    for report in ("AddressSanitizer", "runtime error:", "UndefinedBehaviorSanitizer"):
        assert report not in out, out[-6000:]
    assert run.returncode == 0, out[-6000:]
    assert " passed" in out and "skipped" not in out.split("\n")[-2].replace("0 skipped", ""), out[-2000:]
