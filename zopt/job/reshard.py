"""Which arrays of a job are re-sharded by copying their encoded chunks (issue 34 G5).

``choose_copies`` runs on the plan of work, before anything is written: a sharded target array
whose inner chunks and inner chain equal its local Zarr v3 source array's
(``zopt.store.reshard.ChunkCopier.open``) gets a copier, so its shard tasks copy the source's
checked chunk bytes instead of decoding and encoding them again. Whatever asks for the values to
be encoded anew keeps the encoding path: a lossy mode, a plan (its masks and digests), an explicit
decision (masks decided again), several files combined; a different chain (another ``--codecs``,
``--checksum`` on a source without crc32c, the menu choosing another candidate) or chunk shape
is not equal and so never copied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zopt.notes import Note
from zopt.store.reshard import ChunkCopier

if TYPE_CHECKING:
    from zopt.io.source_kinds import Source
    from zopt.job.options import RecompressJob
    from zopt.job.work import Work
    from zopt.planning.plan import Plan

__all__ = ["choose_copies"]


def choose_copies(job: RecompressJob, src: Source, work: Work, lossy_vars: dict[str, Any], plan: Plan | None) -> list[Note]:
    """Give each ``work`` array (``zopt.job.work.ArrayWork``) that can be copied its ``copy``;
    returns the notes naming them and the check made on the way (none when no array is copied).

    job : the ``RecompressJob``; src : the resolved source (copies only from one local Zarr store);
    lossy_vars : the job's lossy variables; plan : the loaded plan or None.
    """
    location = src.location  # one path or URL (several files, a Store: None)
    if plan is not None or location is None or job.explicit_decision:
        return []
    checks: dict[str, list[str]] = {}
    for name, w in work.arrays.items():
        if w.shard_layout is None or name in lossy_vars:
            continue
        w.copy = ChunkCopier.open(location, name, w.shard_layout)
        if w.copy is not None:
            if w.layout == "compact":
                w.parts = []  # a copy is cheap: one task per shard, not encoders split below it (G4)
            checks.setdefault(w.copy.check, []).append(name or "the root array")
    words = {"crc32c": "every chunk's crc32c checked and every chunk decoded",
             "decoded": "every chunk's size checked and every chunk decoded (zopt.store.reshard)"}
    return [Note(f"{', '.join(names)}: copied encoded chunks into the shards (inner chunks and chain equal the "
                 f"source's: nothing decoded and encoded again; {words[check]})", "copied")
            for check, names in checks.items()]
