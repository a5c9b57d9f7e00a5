"""Ctrl-C while a job's Dask tasks run, and local worker processes that outlive their client.

``on_interrupt(in_flight)``: a context manager around a local compute. The first Ctrl-C
(SIGINT) prints one line, ``stopping: N tasks in flight; <note>`` (``in_flight()`` gives N), and
raises ``KeyboardInterrupt`` as usual: the compute lets the running tasks finish, cancels the
queued ones and the job keeps its journal (``zopt.store.journal.keeps_partial``). On a command line
(``interrupt_note(…, until_exit=True)``) a second Ctrl-C while that happens prints ``stopped at
once; <note>`` and leaves with status 130 through ``os._exit``: like a kill, which the journal
is made to survive (a shard without its marker is written again on resume). In a library call
(e.g. a notebook, whose kernel must live on) a second Ctrl-C only raises ``KeyboardInterrupt``
again. The note is the caller's: the CLI says "journal kept, run the same command to resume"
where a resume exists. Only the main thread can
install signal handlers; elsewhere the context manager does nothing.

``exit_with_parent()``: the initializer of ``--scheduler processes`` workers. A worker polls
its parent's process id and exits when the parent is gone (killed with SIGKILL, it cannot shut
its pool down), instead of waiting forever on a task queue nobody writes to; it ignores SIGINT,
which a terminal's Ctrl-C sends to every process of the group, so only the client reacts.

``exit_quietly()``: at exit, stop zarr's event loop and wait for its thread before zarr's own
exit hook, which closed a still-running loop on busy machines (a traceback after a successful
command); ``settle_zarr_tasks()`` lets pending chunk reads finish after an error.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["POLL_SECONDS", "announced", "exit_with_parent", "interrupt_note", "on_interrupt"]

#: how often a worker process checks that its parent is alive (seconds)
POLL_SECONDS = 0.5

_note: str | None = None
_until_exit = False
_announced = False  # the first Ctrl-C's line was printed: a command line prints no other


def announced() -> bool:
    """Whether a Ctrl-C's ``stopping: …`` line was printed since the command line's
    ``interrupt_note(…, until_exit=True)`` began (the command then ends without another line)."""
    return _announced


@contextlib.contextmanager
def interrupt_note(note: str | None, until_exit: bool = False) -> Iterator[None]:
    """Within the block, Ctrl-C messages end with ``note`` (e.g. how to resume). ``until_exit``
    (a command line, which ends after an interrupt): once interrupted, a second Ctrl-C leaves
    at once until the process exits, the job's own cleanup included; otherwise (a library call,
    e.g. in a notebook) the previous handler comes back when the compute ends."""
    global _note, _until_exit, _announced
    previous = _note, _until_exit
    _note, _until_exit = note, until_exit
    if until_exit and previous == (None, False):  # a command line begins
        _announced = False
    try:
        yield
    finally:
        _note, _until_exit = previous


def _say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # a closed stderr must not hide the interrupt
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


@contextlib.contextmanager
def on_interrupt(in_flight: Callable[[], int | None]) -> Iterator[None]:
    """See the module docstring. ``in_flight()``: tasks running now, or None if unknown."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hits = 0

    def handler(signum, frame) -> None:
        global _announced
        nonlocal hits
        hits += 1
        tail = f"; {_note}" if _note else ""
        if hits > 1:
            if not _until_exit:  # a library call (a notebook's kernel): never end the process
                raise KeyboardInterrupt
            _say(f"stopped at once{tail}")
            os._exit(130)
        n = in_flight()
        tasks = "the tasks" if n is None else f"{n} task{'' if n == 1 else 's'}"
        _say(f"stopping: {tasks} in flight{tail}" + (" (Ctrl-C again to leave at once)" if _until_exit else ""))
        _announced = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        if not (hits and _until_exit):
            signal.signal(signal.SIGINT, previous)


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_SECONDS)
    os._exit(1)


def exit_with_parent() -> None:
    """Worker-process initializer: exit as soon as the process that started this one is gone
    (the client, or dask's forkserver, which exits with it). Ctrl-C in a terminal reaches the
    whole process group: workers ignore it and let their client decide (``on_interrupt``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    if parent == 1:  # orphaned before it started
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), name="zopt-exit-with-parent", daemon=True).start()


# -- leaving quietly ------------------------------------------------------------------------------


def settle_zarr_tasks(timeout: float = 5.0) -> None:
    """Let zarr's event loop finish the chunk reads still pending (e.g. after one failed), so a
    command exits with its own message instead of asyncio's "Task was destroyed" noise."""
    import asyncio

    from zarr.core.sync import sync

    async def rest() -> None:
        me = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not me]
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    with contextlib.suppress(Exception):  # best effort on the way out; the command's own error is what matters
        sync(rest())


def _stop_zarr_loop(timeout: float = 30.0) -> None:
    """Let zarr's event loop finish its tasks, stop it and wait for its thread. zarr's own exit
    hook waits 0.2 s for that thread, then closes the loop anyway: on a busy machine the loop was
    sometimes still running, and a successful command ended with "RuntimeError: Cannot close a
    running event loop" on stderr (issue 28)."""
    from zarr.core import sync as zarr_sync

    loop, thread = zarr_sync.loop[0], zarr_sync.iothread[0]
    if loop is None or thread is None or loop.is_closed() or not thread.is_alive():
        return
    settle_zarr_tasks(timeout)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout)


_exit_hook: list[bool] = []


def exit_quietly() -> None:
    """Register ``_stop_zarr_loop`` to run at exit before zarr's own hook (atexit runs the last
    registered first), once per process. For command lines: it waits up to 30 s for zarr's loop."""
    if not _exit_hook:
        import atexit

        import zarr.core.sync  # noqa: F401 - zarr registers its hook on import: ours must come later

        atexit.register(_stop_zarr_loop)
        _exit_hook.append(True)
