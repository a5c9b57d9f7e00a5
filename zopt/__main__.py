"""``python -m zopt``: the ``zopt`` command line (a Ctrl-C while it loads is one line, as in ``_zopt_cli``)."""

import sys

try:
    from zopt.cli import main
except KeyboardInterrupt:  # the package itself (zarr) is loaded before this module runs
    sys.stderr.write("interrupted while zopt was starting; nothing was written: run the same command again\n")
    raise SystemExit(130) from None

main(prog_name="zopt")
