"""Ctrl-C and killed clients (issue 28, "interrupts and leftovers"), on real subprocesses.

- the first SIGINT says what zopt is doing ("stopping: N tasks in flight; journal kept, run the
  same command to resume") and the process ends within seconds; the same command resumes;
- a second SIGINT leaves at once with one line, the journal intact;
- ``--scheduler processes`` workers exit when their client is SIGKILLed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from zopt.cli.commands import main

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """4 MiB of a smooth float32 field: 16 shards of zstd level 19 (--preset archive), a few
    tenths of a second each: slow enough to interrupt once the first shards are done."""
    src = tmp_path_factory.mktemp("intr") / "src.zarr"
    values = np.cumsum(np.random.default_rng(0).standard_normal((256, 4096)), axis=1).astype("f4")
    zarr.create_array(src, shape=values.shape, chunks=(64, 1024), dtype="f4", compressors=None)[:] = values
    return src, values


def _args(src: Path, dst: Path) -> list[str]:
    return ["recompress", str(src), str(dst), "--preset", "archive", "--chunks", "32,256", "--shards", "64,1024",
            "--no-progress"]


def _start(src: Path, dst: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "zopt", *_args(src, dst)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = Path(f"{dst}.zopt-partial") / ".zopt-journal" / "done"
    deadline = time.monotonic() + 60
    while not any(done.glob("*/*")):  # interrupt once the job has finished a shard
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no shard finished within 60 s"
        time.sleep(0.02)
    return proc


def _resumes(src: Path, dst: Path, values: np.ndarray) -> None:
    result = CliRunner().invoke(main, _args(src, dst))
    assert result.exit_code == 0, result.output
    assert "resumed the interrupted job" in " ".join(result.output.split())
    np.testing.assert_array_equal(zarr.open_array(dst, mode="r")[:], values)


def test_ctrl_c_says_what_it_does_stops_and_the_same_command_resumes(source, tmp_path):
    src, values = source
    dst = tmp_path / "d.zarr"
    proc = _start(src, dst)
    os.kill(proc.pid, signal.SIGINT)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 10, err  # the tasks in flight finish: one shard each
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # nothing after it (it was click's "Aborted!")
    assert re.fullmatch(r"stopping: \d+ tasks? in flight; journal kept, run the same command to resume "
                        r"\(Ctrl-C again to leave at once\)", lines[0]), err
    assert "Traceback" not in err and not dst.exists()
    _resumes(src, dst, values)


def test_a_second_ctrl_c_leaves_at_once_with_one_line_and_the_journal_intact(source, tmp_path):
    src, values = source
    dst = tmp_path / "d.zarr"
    proc = _start(src, dst)
    os.kill(proc.pid, signal.SIGINT)
    first = proc.stderr.readline()  # the first Ctrl-C was handled; its tasks are still running
    os.kill(proc.pid, signal.SIGINT)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=60)
    lines = [first.strip(), *err.strip().splitlines()]
    err = "\n".join(lines)
    assert proc.returncode == 130 and time.monotonic() - sent < 5, err
    assert lines[0].startswith("stopping: ") and lines[1:] == [
        "stopped at once; journal kept, run the same command to resume"], err
    assert (Path(f"{dst}.zopt-partial") / ".zopt-journal" / "job.json").is_file()
    _resumes(src, dst, values)


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_process_workers_exit_when_their_client_is_killed():
    client = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import time, dask
        from zopt.compat.scheduling import compute
        compute([dask.delayed(time.sleep)(120, dask_key_name=f"nap-{i}") for i in range(2)], "processes", None)
    """)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while not workers:  # dask's worker processes (not multiprocessing's resource tracker)
            assert client.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
            workers = [p for p in _children(client.pid) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]
        time.sleep(1.0)  # the worker has started its task
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in workers if _alive(p)]
    for p in left:  # do not leave them behind if the test fails
        os.kill(p, signal.SIGKILL)
    assert not left, f"workers {left} outlived their killed client"


def test_in_a_library_call_a_second_ctrl_c_only_interrupts_again(capfd):
    """Outside the command line (a notebook's kernel) zopt never ends the process: the first
    SIGINT says what stops and raises KeyboardInterrupt, a second one raises it again."""
    from zopt.compat.interrupts import on_interrupt

    previous = signal.getsignal(signal.SIGINT)
    with on_interrupt(lambda: 3):
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
    assert signal.getsignal(signal.SIGINT) is previous  # given back
    err = capfd.readouterr().err
    assert err == "stopping: 3 tasks in flight\n"


#: makes the interpreter running it send itself SIGINT (a Ctrl-C) when module ``{name}`` is first imported
_SIGINT_ON_IMPORT = """
import os, signal, sys
class _CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == {name!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, _CtrlC())
"""

#: sends SIGINT once the last shard is written, before the job publishes
_SIGINT_AFTER_THE_LAST_SHARD = """
import os, signal
from zopt.job.destinations import LocalTarget
_after_writes = LocalTarget.after_writes
def _ctrl_c(self):
    os.kill(os.getpid(), signal.SIGINT)
    return _after_writes(self)
LocalTarget.after_writes = _ctrl_c
"""


def _interrupted(prelude: str, run: str, args: list[str]) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-c", prelude + run, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize(("module", "run"), [
    ("zarr", "import _zopt_cli; _zopt_cli.main()"),  # the console script, while zopt itself loads
    ("rich", "import runpy; runpy.run_module('zopt', run_name='__main__')"),  # python -m zopt, loading the CLI
    ("zopt.job.api", "import _zopt_cli; _zopt_cli.main()"),  # inside the command, loading the job
])
def test_ctrl_c_while_loading_is_one_line_saying_to_run_again(source, tmp_path, module, run):
    """Issue 35: a Ctrl-C while zopt or the job's modules load printed a traceback (or click's
    ``Aborted!``); now one line, status 130, nothing written."""
    src, _ = source
    dst = tmp_path / "d.zarr"
    code, err = _interrupted(_SIGINT_ON_IMPORT.format(name=module), run, _args(src, dst))
    assert code == 130, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "Aborted" not in err, err
    assert err.startswith("interrupted") and "run the same command again" in err, err
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_after_the_last_shard_keeps_the_partial_store_and_says_how_to_resume(source, tmp_path):
    """Issue 35: a Ctrl-C after the last shard (consolidating, verifying, publishing) printed
    ``Aborted!`` and kept the partial store without a word; now one line naming it and how to resume."""
    src, values = source
    dst = tmp_path / "d.zarr"
    code, err = _interrupted(_SIGINT_AFTER_THE_LAST_SHARD, "import _zopt_cli; _zopt_cli.main()", _args(src, dst))
    assert code == 130, err
    assert err.strip().splitlines() == [
        f"interrupted; the finished shards are kept in {dst}.zopt-partial: run the same command again to resume"], err
    assert not dst.exists() and len(list(Path(f"{dst}.zopt-partial/.zopt-journal/done").rglob("*.*"))) == 16
    _resumes(src, dst, values)
