"""``python -m zopt``: the ``zopt`` command line."""

from zopt.cli import main

main(prog_name="zopt")
