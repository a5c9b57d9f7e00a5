"""Shared by the tests that run two zopt commands at once: CLI processes kept alive over rounds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: a CLI process kept alive over the rounds: reads the arguments of one ``zopt`` command a line (JSON), runs
#: it as the command line does (``CliRunner``: exit status and output) and answers with them, so each round
#: costs a job, not an interpreter start, and the jobs start within the same millisecond
_WORKER = """
import json, sys, traceback
from click.testing import CliRunner
from zopt.cli.commands import main
print("ready", flush=True)
for line in sys.stdin:
    result = CliRunner().invoke(main, json.loads(line))
    output = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):  # the CLI's traceback
        output += "".join(traceback.format_exception(result.exception))
    print(json.dumps([result.exit_code, output]), flush=True)
"""


def start_workers(n: int = 2, env: dict[str, str] | None = None) -> list[subprocess.Popen]:
    """``n`` CLI processes, each ready for its first command."""
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER], cwd=Path(__file__).parents[1], text=True, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(n)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    return procs


def run_at_once(procs: list[subprocess.Popen], args: list[str]) -> list[tuple[int, str]]:
    """The same command in every process at once; ``[(exit status, output)]`` in process order."""
    for p in procs:  # every command sent before any answer is read: the jobs run at once
        p.stdin.write(json.dumps(args) + "\n")
        p.stdin.flush()
    return [_answer(p) for p in procs]


def _answer(proc: subprocess.Popen) -> tuple[int, str]:
    """The worker's next answer; other lines on its stdout (icechunk logs there) are skipped."""
    while True:
        line = proc.stdout.readline()
        assert line, "the worker ended"
        if line.startswith("[") and line.rstrip().endswith("]"):
            return tuple(json.loads(line))


def stop_workers(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.stdin.close()
        p.wait(60)
