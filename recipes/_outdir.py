"""The recipes' ``--out DIR``: a recipe only ever deletes what a recipe made there.

``recipe_out(path)`` takes a new or empty directory, or one a recipe made before (it holds the
marker file ``.zopt-recipe-out``, listing what the recipe wrote at its top level). Any other
non-empty directory (``--out .``, a data directory, a file the user keeps there) is refused with a
one-line message and exit status 2, before anything is touched. On a rerun only the entries the
marker lists are removed; anything else in the directory is left alone. A helper, not a recipe.
"""

from __future__ import annotations

import atexit
import json
import shutil
import sys
from pathlib import Path

MARKER = ".zopt-recipe-out"


def _listed(out: Path) -> list[str]:
    try:
        names = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return []
    return [n for n in names if isinstance(n, str) and n and "/" not in n and n not in (".", "..", MARKER)]


def _refuse(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(2)


def recipe_out(path: str | Path, fresh: bool = True) -> Path:
    """``path`` made ready for a recipe's outputs, and returned. ``fresh``: the outputs a recipe
    made there before are removed (only those the marker lists); else kept (a resumed batch).
    Exits with status 2 on a non-empty directory no recipe made, or a path that is a file."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        _refuse(f"--out {path}: is a file, not a directory")
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        _refuse(f"--out {path}: refused, it holds files this recipe did not make (a recipe only deletes its own "
                 "outputs): give a new or empty directory")
    made = _listed(out) if out.exists() else []
    if fresh:
        for name in made:
            target = out / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
        made = []
    out.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in out.iterdir()} - set(made) - {MARKER}

    def record() -> None:  # what this run made, at exit (a failed run's outputs too)
        if out.is_dir():
            now = {p.name for p in out.iterdir()} - before - {MARKER}
            (out / MARKER).write_text(json.dumps(sorted(now | set(made))))

    record()
    atexit.register(record)
    return out
