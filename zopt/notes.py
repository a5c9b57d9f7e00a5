"""``Note``: what a job tells its user besides errors (``RecompressReport.notes``), as an object.

A note is its text (what ``str()`` gives and the CLI prints after ``note:``) with the ``kind`` of
note and the ``array`` it is about, so code that keeps, drops or re-roots notes picks them by
kind, never by their text. It is a ``str`` so that a report's notes stay a list of text for its
callers (``"re-expressed" in note``, ``json.dumps``).
"""

from __future__ import annotations

__all__ = ["Note", "as_note"]


class Note(str):
    """One note: ``Note(text, kind, array)``.

    kind : what the note is about; a job's notes (``zopt.job``, ``zopt.io``, ``zopt.store``) use
        ``"skipped"`` (arrays left out with broken metadata), ``"repacked"`` (files packed
        differently, re-expressed or written as floats), ``"menu"`` (the chains chosen or recorded
        in a plan), ``"lossy"`` (a lossy variable written lossless, the tails chosen), ``"layout"``
        (chunk/shard options that change nothing, fixed slots without positional writes),
        ``"resumed"`` (an interrupted job or child group resumed), ``"source"`` (several files:
        their order, gaps, variables added along the concat dimension), ``"copied"`` (arrays
        copied, not re-encoded), ``"checksum"`` (an array rewritten without a per-chunk crc32c),
        ``"compact"`` (nothing to compact), ``"recovered"`` (a killed job's aside copy put back);
        ``"info"`` (the default) when nothing picks it.
    array : the array (path) it is about, or None.
    """

    kind: str
    array: str | None

    def __new__(cls, text: str, kind: str = "info", array: str | None = None) -> Note:
        note = super().__new__(cls, text)
        note.kind = kind
        note.array = array
        return note

    @property
    def text(self) -> str:
        """The note's text (``str(note)``)."""
        return str.__str__(self)

    def in_child(self, child: str) -> Note:
        """This note of a child group's job, as its parent reports it: ``child: text``."""
        return Note(f"{child}: {self.text}", self.kind, None if self.array is None else f"{child}/{self.array}")

    def __repr__(self) -> str:
        return f"Note({self.text!r}, kind={self.kind!r}, array={self.array!r})"


def as_note(text: str) -> Note:
    """``text`` as a ``Note`` (kind ``"info"`` unless it is one already)."""
    return text if isinstance(text, Note) else Note(text)
