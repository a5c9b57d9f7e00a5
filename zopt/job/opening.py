"""What opening a destination and running a job's writes take: ``Opening`` and ``WriteRun``.

Below both ``zopt.job.destinations`` (the ``Target`` protocol, its local and store kinds) and
``zopt.job.icechunk_target`` (which ``destinations`` imports), so that each takes them typed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zopt.job.reports import ArrayReport
from zopt.job.work import Work
from zopt.notes import Note

if TYPE_CHECKING:
    from zopt.codecs.decisions import DecisionLike
    from zopt.io.source_kinds import Source
    from zopt.lossy.prepare import LossyVariable

__all__ = ["Opening", "ProgressFactory", "WriteRun"]

#: ``progress(n_units)``: a context manager (zopt's progress bar) shown while ``n_units`` units run
ProgressFactory = Callable[[int], AbstractContextManager[object]]


@dataclass
class Opening:
    """What opening a destination takes besides ``dst``: ``overwrite``; ``sources``, the files the job
    reads (an overlap is refused); ``hold``, where a local directory's lock and the target's end are
    registered (None: a child group's job, under its parent's lock); ``notes``, the job's notes;
    ``layout``, the job's shard layout (a note where the destination has no positional writes)."""

    overwrite: bool = False
    sources: tuple[str, ...] = ()
    hold: contextlib.ExitStack | None = None
    notes: list[Note] = field(default_factory=list)
    layout: str = "compact"


@dataclass
class WriteRun:
    """One run of the plan of work ``work`` from ``src`` (a ``zopt.io.source_kinds.Source``): the
    decision, the job's id, the lossy variables, the reports the tasks fill, the scheduler and the
    progress bar factory (``progress(n_units)``)."""

    work: Work
    src: Source
    decision: DecisionLike
    job_id: str
    lossy: dict[str, LossyVariable]
    reports: dict[str, ArrayReport]
    scheduler: str | None = None
    progress: ProgressFactory | None = None
