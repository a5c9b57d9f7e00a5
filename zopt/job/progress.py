"""zopt's progress bar: one tick per finished task, from Dask's local-scheduler callbacks or a cluster.

Shared by ``zopt recompress`` (``zopt.cli.recompress``) and ``zopt verify`` (``zopt.cli.verify``); given to
``zopt.compat.scheduling.compute`` as ``progress``.
"""

from __future__ import annotations

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
        self._callback = None
        self.keys: frozenset[str] = frozenset()

    def watch_keys(self, keys: frozenset[str]) -> None:
        """The keys of the tasks that advance the bar (``zopt.compat.scheduling.compute``)."""
        self.keys = keys

    def __enter__(self) -> RichProgress:
        from dask.callbacks import Callback

        self.progress.__enter__()
        bar = self

        class _Tick(Callback):
            def _posttask(self, key, result, dsk, state, id):  # noqa: A002 - dask's signature
                if str(key) in bar.keys:
                    bar.progress.advance(bar.task)

        self._callback = _Tick()
        self._callback.__enter__()
        return self

    def advance(self, n: int = 1) -> None:
        """``n`` more shards done (called as a cluster's tasks finish)."""
        self.progress.advance(self.task, n)

    def __exit__(self, *exc: object) -> None:
        if self._callback is not None:
            self._callback.__exit__(*exc)
        self.progress.__exit__(*exc)
