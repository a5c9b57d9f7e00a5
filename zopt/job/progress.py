"""Progress of zopt's jobs: ``ProgressEvent``s sent to a callback, and the rich display shown by default.

``zopt.recompress(..., progress=...)`` and ``zopt.xarray.recompress`` take ``progress``
(``parse_progress``): None (the default) shows the display on a terminal or in a notebook and
nothing otherwise, True always shows it, False shows nothing, and a callable is called with one
``ProgressEvent`` per step instead (nothing is displayed). A job reports its planning (files read,
arrays described, arrays trialled by the codec menu), its writes (shards, logical bytes: MB/s and
an estimated time left) and, in the CLI, the ``--vs-default`` pass, each as a phase of its own.

``RichProgress`` is the plain per-task bar of ``zopt verify``, ``zopt compact`` and ``--in-place``
(``zopt.compat.scheduling.compute``'s ``progress(n_tasks)`` factory); ``OneBar`` makes several
computes (``zopt analyze``'s one per array) share one bar.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import ProgressColumn, Task
from rich.text import Text

from zopt.errors import OptionError

__all__ = ["JobProgress", "OneBar", "ProgressEvent", "RichDisplay", "RichProgress", "SharedBar", "counting",
           "parse_progress"]


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a job, as a ``progress`` callback receives it.

    phase : ``"planning"`` (before anything is written), ``"writing"``, ``"zarr default"`` (the CLI's
        ``--vs-default`` pass) or ``"analysis"``.
    what : what ``done`` counts: ``"files read"``, ``"arrays described"``, ``"arrays trialled"``,
        ``"shards"`` (write units: chunks where unsharded), ...
    done, total : units done so far, of ``total`` (None while not known).
    nbytes, nbytes_total : logical (uncompressed) bytes done, of ``nbytes_total`` (writing; 0 and
        None where not counted).
    elapsed : seconds since this phase began.
    """

    phase: str
    what: str
    done: int
    total: int | None
    nbytes: int = 0
    nbytes_total: int | None = None
    elapsed: float = 0.0

    @property
    def mb_per_s(self) -> float | None:
        """Logical megabytes (10⁶ bytes) per second so far; None before any byte or time."""
        return self.nbytes / 1e6 / self.elapsed if self.nbytes and self.elapsed > 0 else None

    @property
    def eta(self) -> float | None:
        """Estimated seconds left at the rate so far; None while unknown."""
        if not self.total or not self.done or self.elapsed <= 0:
            return None
        return self.elapsed * (self.total - self.done) / self.done


ProgressCallback = Callable[[ProgressEvent], object]


class JobProgress:
    """A job's reporter: sends ``ProgressEvent``s to ``callback``; ``close`` ends the display.

    Called as ``progress(n_units)`` it is ``zopt.compat.scheduling.compute``'s factory for the write
    phase (``expect_bytes`` sets the logical bytes those units hold)."""

    def __init__(self, callback: ProgressCallback, close: Callable[..., object] | None = None) -> None:
        self.callback = callback
        self._close = close
        self._lock = threading.Lock()
        self._began: dict[str, float] = {}
        self.write_bytes: int | None = None

    def emit(self, phase: str, what: str, done: int, total: int | None, nbytes: int = 0,
             nbytes_total: int | None = None, began: float | None = None) -> None:
        """One event; ``began``: when the phase began (default: its first event)."""
        with self._lock:
            start = self._began.setdefault(phase, time.perf_counter()) if began is None else began
        self.callback(ProgressEvent(phase, what, done, total, nbytes, nbytes_total, time.perf_counter() - start))

    def expect_bytes(self, nbytes: int | None) -> None:
        """The logical bytes of the write units the next write phase runs (MB/s, time left)."""
        self.write_bytes = nbytes

    def __call__(self, total: int) -> TaskBar:
        return self.tasks("writing", "shards", total, self.write_bytes)

    def tasks(self, phase: str, what: str, total: int, nbytes_total: int | None = None) -> TaskBar:
        """A bar over ``total`` Dask tasks (``compute``'s protocol: ``watch_keys``, ``advance``)."""
        return TaskBar(self, phase, what, total, nbytes_total)

    def close(self, failed: bool = False) -> None:
        """End the display (a later event starts a new one); ``failed``: the job raised, so the
        display is cleared rather than left printed (the error is the one line the user needs)."""
        if self._close is not None:
            self._close(failed) if failed else self._close()

    def close_on_exit(self, exc_type: type[BaseException] | None, *_: object) -> None:
        """``ExitStack.push``'s form of ``close``: failed when an exception leaves the block."""
        self.close(failed=exc_type is not None)


class TaskBar:
    """One phase counted in Dask tasks: by the local scheduler's callbacks on the keys given to
    ``watch_keys``, or by ``advance`` (a cluster's tasks, ``zopt.compat.cluster``)."""

    def __init__(self, owner: JobProgress, phase: str, what: str, total: int, nbytes_total: int | None) -> None:
        self.owner, self.phase, self.what, self.total, self.nbytes_total = owner, phase, what, total, nbytes_total
        self.done = 0
        self.keys: frozenset[str] = frozenset()
        self._callback = ExitStack()
        self._lock = threading.Lock()
        self.began = time.perf_counter()

    def watch_keys(self, keys: frozenset[str]) -> None:
        self.keys = keys

    def advance(self, n: int = 1) -> None:
        """``n`` more tasks done (a cluster's, as they finish)."""
        self.step(n)

    def step(self, n: int) -> None:
        with self._lock:
            self.done += n
            done = self.done
        nbytes = 0 if not self.nbytes_total else self.nbytes_total * done // max(self.total, 1)
        self.owner.emit(self.phase, self.what, done, self.total, nbytes, self.nbytes_total, began=self.began)

    def __enter__(self) -> TaskBar:
        from dask.callbacks import Callback

        bar = self
        self.began = time.perf_counter()
        self.owner.emit(self.phase, self.what, 0, self.total, 0, self.nbytes_total, began=self.began)

        class _Tick(Callback):
            def _posttask(self, key: object, result: object, dsk: object, state: object,
                          id: object) -> None:  # noqa: A002 - dask's signature
                if str(key) in bar.keys:
                    bar.step(1)

        self._callback.enter_context(_Tick())  # type: ignore[no-untyped-call]  # dask's Callback is unannotated
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._callback.__exit__(exc_type, exc, tb)


@contextmanager
def counting(progress: JobProgress | None, phase: str, what: str, prefix: str, total: int | None,
             per_task: int = 1) -> Iterator[None]:
    """Within the block, each finished Dask task (local schedulers) whose key starts with ``prefix``
    counts ``per_task`` more ``what`` (at most ``total``); an event at the start and the end."""
    if progress is None:
        yield
        return
    from dask.callbacks import Callback

    done = [0]
    cap = total if total is not None else None

    class _Count(Callback):
        def _posttask(self, key: object, result: object, dsk: object, state: object,
                      id: object) -> None:  # noqa: A002 - dask's signature
            name = key[0] if isinstance(key, tuple) else key
            if str(name).startswith(prefix):
                done[0] = done[0] + per_task if cap is None else min(cap, done[0] + per_task)
                progress.emit(phase, what, done[0], total)  # type: ignore[union-attr]  # not None here

    progress.emit(phase, what, 0, total)
    with _Count():  # type: ignore[no-untyped-call]  # dask's Callback is unannotated
        yield
    if total is not None and done[0] < total:  # a cluster ran them: no callbacks
        progress.emit(phase, what, total, total)


class _RateColumn(ProgressColumn):
    """Logical MB/s of a phase that counts bytes."""

    def render(self, task: Task) -> Text:
        rate = task.fields.get("rate")
        return Text("" if rate is None else f"{rate:6.1f} MB/s", style="progress.data.speed")


class _EtaColumn(ProgressColumn):
    """Estimated time left, ``ETA m:ss``."""

    def render(self, task: Task) -> Text:
        eta = task.fields.get("eta")
        if eta is None or task.finished:
            return Text("")
        minutes, seconds = divmod(int(eta + 0.5), 60)
        return Text(f"ETA {minutes}:{seconds:02d}", style="progress.remaining")


class _CountColumn(ProgressColumn):
    """``done/total`` (``done/?`` while the total is unknown)."""

    def render(self, task: Task) -> Text:
        total = "?" if task.total is None else str(int(task.total))
        return Text(f"{int(task.completed)}/{total}", style="progress.download")


class RichDisplay:
    """The default ``progress`` callback: one rich row per phase on stderr (or ``console``): what it
    counts, a bar, ``done/total``, MB/s and the time left where bytes are counted, the time elapsed."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console if console is not None else Console(stderr=True)
        self._progress: Any = None
        self._rows: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, event: ProgressEvent) -> None:
        from rich.progress import BarColumn, Progress, TimeElapsedColumn

        with self._lock:
            if self._progress is None:
                self._progress = Progress("[progress.description]{task.description}", BarColumn(), _CountColumn(),
                                          _RateColumn(), _EtaColumn(), TimeElapsedColumn(),
                                          console=self.console, transient=False)
                self._progress.start()
                self._rows = {}
            p = self._progress
            description = f"{event.phase}: {event.what}"
            row = self._rows.get(event.phase)
            fields = {"rate": event.mb_per_s, "eta": event.eta}
            if row is None:
                row = self._rows[event.phase] = p.add_task(description, total=event.total, **fields)
            elif event.done == 0 and p.tasks[row].completed:  # the phase again (a child group's job)
                p.reset(row, total=event.total, description=description, **fields)
            p.update(row, completed=event.done, total=event.total, description=description, **fields)

    def close(self, failed: bool = False) -> None:
        """Stop the display, leaving its last state printed (cleared where ``failed``)."""
        with self._lock:
            if self._progress is not None and failed:
                self._progress.live.transient = True
            if self._progress is not None:
                for row in self._rows.values():  # a phase whose total was unknown ends full
                    task = self._progress.tasks[row]
                    if task.total is None:
                        self._progress.update(row, total=task.completed)
                self._progress.stop()
            self._progress = None


def shown(console: Console | None = None) -> JobProgress:
    """A ``JobProgress`` displaying each phase with ``RichDisplay``."""
    display = RichDisplay(console)
    return JobProgress(display, display.close)


def parse_progress(value: object) -> JobProgress | None:
    """``progress`` as a user gives it: None (the default: the display on a terminal or in a
    notebook, else nothing), True (the display), False (nothing), or a callable taking one
    ``ProgressEvent`` (called from the job's threads, one at a time per phase). A ``JobProgress``
    is kept as it is. Raises OptionError (a ValueError) naming ``progress`` for anything else."""
    if isinstance(value, JobProgress):
        return value
    if value is None:
        console = Console(stderr=True)
        return shown(console) if console.is_terminal or console.is_jupyter else None
    if isinstance(value, bool):
        return shown() if value else None
    if callable(value) and not isinstance(value, type):
        return JobProgress(value)
    raise OptionError("progress", f"{value!r} is not one of: None (a display on a terminal or in a notebook), "
                      "True, False, or a function called with each zopt.job.progress.ProgressEvent")


class RichProgress:
    """A rich progress bar fed by Dask's local-scheduler callbacks or distributed futures."""

    def __init__(self, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self.progress = Progress(
            "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=Console(stderr=True), transient=False,
        )
        self.task = self.progress.add_task("shards", total=total)
        self._callback = ExitStack()  # the Dask callback while the bar is shown
        self.keys: frozenset[str] = frozenset()

    def watch_keys(self, keys: frozenset[str]) -> None:
        """The keys of the tasks that advance the bar (``zopt.compat.scheduling.compute``)."""
        self.keys = keys

    def __enter__(self) -> RichProgress:
        from dask.callbacks import Callback

        self.progress.__enter__()
        bar = self

        class _Tick(Callback):
            def _posttask(self, key: object, result: object, dsk: object, state: object,
                          id: object) -> None:  # noqa: A002 - dask's signature
                if str(key) in bar.keys:
                    bar.progress.advance(bar.task)

        self._callback.enter_context(_Tick())  # type: ignore[no-untyped-call]  # dask's Callback is unannotated
        return self

    def advance(self, n: int = 1) -> None:
        """``n`` more shards done (called as a cluster's tasks finish)."""
        self.progress.advance(self.task, n)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._callback.__exit__(exc_type, exc, tb)
        self.progress.__exit__(exc_type, exc, tb)


class OneBar:
    """Several computes on one bar: ``OneBar(factory, arrays)`` is a ``progress(n_tasks)`` factory
    whose calls add their tasks to one bar made by ``factory`` (``zopt analyze``: one compute per
    array, one bar for the whole analysis); ``close`` ends it."""

    def __init__(self, factory: Callable[[int], Any]) -> None:
        self.factory = factory
        self.bar: Any = None
        self.total = 0

    def __call__(self, total: int) -> SharedBar:
        self.total += total
        if self.bar is None:
            self.bar = self.factory(total)
            self.bar.__enter__()
        else:
            inner = getattr(self.bar, "progress", None)
            if inner is not None and hasattr(self.bar, "task"):  # a RichProgress: its total grows
                inner.update(self.bar.task, total=self.total)
            elif hasattr(self.bar, "total"):
                self.bar.total = self.total
        return SharedBar(self.bar)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


class SharedBar:
    """One compute's view of a bar that several computes share (``OneBar``'s, or an Icechunk job's
    one bar over its waves): entering and leaving it leave the bar shown."""

    def __init__(self, bar: object) -> None:
        self.bar: Any = bar

    def __enter__(self) -> SharedBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def watch_keys(self, keys: frozenset[str]) -> None:
        if hasattr(self.bar, "watch_keys"):
            self.bar.watch_keys(keys)

    def advance(self, n: int = 1) -> None:
        if hasattr(self.bar, "advance"):
            self.bar.advance(n)
