"""The ``zopt`` console script (``[project.scripts]`` in pyproject.toml): ``zopt.cli.main``, loaded here.

Loading zopt and its libraries (zarr, numpy, click, rich) takes about a second; a Ctrl-C then used
to end with a ``KeyboardInterrupt`` traceback. This module lives outside the ``zopt`` package, so
that it runs before ``import zopt`` and ends such an interrupt with one line and status 130.
Once the command line runs, ``zopt.cli.commands`` handles Ctrl-C itself.
"""

import sys

STARTING = "interrupted while zopt was starting; nothing was written: run the same command again"


def main() -> None:
    try:
        from zopt.cli import main as command_line
    except KeyboardInterrupt:
        sys.stderr.write(STARTING + "\n")
        raise SystemExit(130) from None
    command_line()
