"""zopt's progress bar: one tick per finished task, from Dask's local-scheduler callbacks or a cluster.

Shared by ``zopt recompress`` (``zopt.cli.recompress``) and ``zopt verify`` (``zopt.cli.verify``); given to
``zopt.compat.scheduling.compute`` as ``progress``.
"""

from __future__ import annotations

from contextlib import ExitStack
from types import TracebackType

from rich.console import Console

__all__ = ["RichProgress"]


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
