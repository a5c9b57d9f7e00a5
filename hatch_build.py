"""Build hook: compile zopt's batch loops (``zopt/compat/_loops.c``) into ``zopt/compat/_loops.so.1``
(a name that is not a Python module's: importers that walk the package, such as ``pkgutil``,
leave it alone; ``zopt.compat.loops`` loads it with ``ctypes``).

The library is plain C (no Python headers, no library linked: ``zopt.compat.loops`` hands it the
function pointers of the compressors numcodecs loaded), so one build serves every Python version.
Where no C compiler works the wheel is built without it and zopt runs the same loops in Python,
with the same bytes (a warning says so); ``ZOPT_NO_LOOPS=1`` at build time skips it too.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = "zopt/compat/_loops.c"
TARGET = "zopt/compat/_loops.so.1"


def _compilers() -> list[list[str]]:
    found = [os.environ.get("CC"), sysconfig.get_config_var("CC"), "cc", "gcc", "clang"]
    return [shlex.split(c) for c in dict.fromkeys(c for c in found if c) if shutil.which(shlex.split(c)[0])]


def compile_loops(source: Path, target: Path) -> str | None:
    """Compile ``source`` into the shared library ``target``; returns None, or why it was not built."""
    errors = []
    for cc in _compilers():
        cmd = [*cc, "-O2", "-shared", "-fPIC", "-o", str(target), str(source)]
        try:
            subprocess.run(cmd, check=True, capture_output=True, text=True)
            return None
        except (OSError, subprocess.CalledProcessError) as exc:
            errors.append(f"{' '.join(cmd)}: {getattr(exc, 'stderr', '') or exc}".strip())
    return "; ".join(errors) or "no C compiler found (CC, cc, gcc, clang)"


class LoopsBuildHook(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if os.environ.get("ZOPT_NO_LOOPS"):
            return
        source = Path(self.root, SOURCE)
        self._tmp = tempfile.mkdtemp(prefix="zopt-loops-")  # removed by finalize, once the wheel holds it
        built = Path(self._tmp, Path(TARGET).name)
        why = compile_loops(source, built)
        if why is not None:
            self.app.display_warning(f"zopt: its compiled loops were not built, zopt runs them in Python ({why})")
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
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
