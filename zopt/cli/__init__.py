"""The ``zopt`` command line: ``main`` (every command), ``verify``, ``lossy``, ``tables``, ``plot``."""

from zopt.cli.commands import main

__all__ = ["main"]
