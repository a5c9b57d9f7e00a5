"""Shared by the tests that kill a fresh interpreter with SIGKILL at a chosen file rename."""

from __future__ import annotations

import textwrap


def kill_at_replace(call: int) -> str:
    """Python source that makes the interpreter running it SIGKILL itself at its ``call``-th
    ``os.replace`` (shard renames, journal markers): put it before the code under test."""
    return textwrap.dedent(f"""
        import os, signal
        real, n = os.replace, [0]
        def replace(a, b):
            n[0] += 1
            if n[0] == {call}:
                os.kill(os.getpid(), signal.SIGKILL)
            real(a, b)
        os.replace = replace
    """)
