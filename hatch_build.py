"""Build hook: compile zopt's batch loops (``zopt/compat/_loops.c``) into ``zopt/compat/_loops.so.1``
(a name that is not a Python module's: importers that walk the package, such as ``pkgutil``,
leave it alone; ``zopt.compat.loops`` loads it with ``ctypes``).

The library is plain C (no Python headers, no library linked: ``zopt.compat.loops`` hands it the
function pointers of the compressors numcodecs loaded), so one build serves every Python version:
the wheel is tagged ``py3-none-<platform>``. The compiler is ``CC`` when it is set (only that one:
a ``CC`` that fails means no loops), else the platform's (``sysconfig``), ``cc``, ``gcc`` or
``clang``; ``CFLAGS`` and ``LDFLAGS`` are honoured, and warnings are errors. Where no compiler
works, on a platform without POSIX, or with ``ZOPT_NO_LOOPS=1``, the wheel is built without the
library (``py3-none-any``) and zopt runs the same loops in Python, with the same bytes; one line
says so (on standard error, and ``zopt --version`` says it at run time, since pip shows a build's
output only with ``-v``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # imported without hatchling (the tests call the functions below)
    BuildHookInterface = object

SOURCE = "zopt/compat/_loops.c"
TARGET = "zopt/compat/_loops.so.1"
#: compiler flags before the user's CFLAGS (which may override them) and after (which may not)
BASE_FLAGS = ["-O2"]
REQUIRED_FLAGS = ["-Wall", "-Wextra", "-Werror", "-shared", "-fPIC"]
OFF = "zopt: compiled loops off, zopt runs them in Python (the same bytes, slower)"


def _compilers(env: Mapping[str, str]) -> list[list[str]]:
    """The compilers to try: ``CC`` alone when set, else the platform's and the usual names."""
    if env.get("CC"):
        return [shlex.split(env["CC"])]
    found = [sysconfig.get_config_var("CC"), "cc", "gcc", "clang"]
    return [shlex.split(c) for c in dict.fromkeys(c for c in found if c) if shutil.which(shlex.split(c)[0])]


def compile_loops(source: Path, target: Path, env: Mapping[str, str] | None = None) -> str | None:
    """Compile ``source`` into the shared library ``target``; returns None, or why it was not built.

    env : the environment (``os.environ``): ``CC``, ``CFLAGS``, ``LDFLAGS``, ``ZOPT_NO_LOOPS``."""
    env = os.environ if env is None else env
    if env.get("ZOPT_NO_LOOPS"):
        return "ZOPT_NO_LOOPS is set"
    if os.name != "posix":
        return f"the loops need POSIX, this platform is {sys.platform}"
    compilers = _compilers(env)
    if not compilers:
        return "no C compiler found (CC, cc, gcc, clang)"
    errors = []
    for cc in compilers:
        cmd = [*cc, *BASE_FLAGS, *shlex.split(env.get("CFLAGS", "")), *REQUIRED_FLAGS, "-o", str(target),
               str(source), *shlex.split(env.get("LDFLAGS", ""))]
        try:
            subprocess.run(cmd, check=True, capture_output=True, text=True)
            return None
        except subprocess.CalledProcessError as exc:
            lines = [x.strip() for x in (exc.stderr or "").splitlines() if x.strip()]
            detail = next((x for x in lines if "error" in x), lines[0] if lines else f"exit status {exc.returncode}")
            errors.append(f"the C compiler {shlex.join(cc)} failed: {detail}")
        except OSError as exc:
            errors.append(f"the C compiler {shlex.join(cc)} did not run: {exc.strerror or exc}")
    return "; ".join(errors)


def platform_tag() -> str:
    """This interpreter's most specific platform tag that is not manylinux/musllinux (the one
    hatchling's ``infer_tag`` uses), e.g. ``linux_x86_64`` or ``macosx_11_0_arm64``."""
    from packaging.tags import sys_tags

    return next(t.platform for t in sys_tags() if "manylinux" not in t.platform and "musllinux" not in t.platform)


def wheel_tag() -> str:
    """The tag of a wheel holding the library: any Python 3, no Python ABI, this platform."""
    return f"py3-none-{platform_tag()}"


def off_line(why: str) -> str:
    """The one line a build without the library prints."""
    return f"{OFF}: {why}"


class LoopsBuildHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        source = Path(self.root, SOURCE)
        self._tmp = tempfile.mkdtemp(prefix="zopt-loops-")  # removed by finalize, once the wheel holds it
        built = Path(self._tmp, Path(TARGET).name)
        why = compile_loops(source, built)
        if why is not None:
            line = off_line(why)
            print(line, file=sys.stderr, flush=True)
            self.app.display_warning(line)
            return
        build_data["pure_python"] = False
        build_data["tag"] = wheel_tag()
        if version == "editable":  # the package is imported from the source tree: replace the file there
            target = Path(self.root, TARGET)  # atomically (a running process keeps the one it loaded)
            tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
            shutil.copyfile(built, tmp)
            os.replace(tmp, target)
        else:
            build_data["force_include"][str(built)] = TARGET

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
