"""The ``zopt`` command line: ``main`` (``commands``: the group, every command joins it there),
``recompress``, ``analyze``, ``info``, ``verify``, ``lossy`` (the commands), ``shared``, ``tables``, ``plot``."""

from zopt.cli.commands import main

__all__ = ["main"]
